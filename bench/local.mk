# SPDX-License-Identifier: MIT
# bench/: host-kernel benchmarks built with the project (results in bench/results/)
