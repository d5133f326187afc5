# SPDX-License-Identifier: MIT
# bench/: host-kernel benchmarks built with the project (results in bench/results/)
# host_adamw: the fused AdamW kernel over N threads (bench/host_adamw.sh runs it beside PyTorch's)
noinst_PROGRAMS = bench/host_adamw
bench_host_adamw_SOURCES = bench/host_adamw.c
EXTRA_DIST += bench/host_adamw.sh bench/host_adamw_peer.py
EXTRA_DIST += bench/cpu_peer.py bench/cpu_compare.sh
EXTRA_DIST += bench/curves.py bench/get-roundpipe.sh
