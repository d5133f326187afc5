# SPDX-License-Identifier: MIT
# tests/e2e/: data-parallel ranks on CPU workers (--ranks R)
