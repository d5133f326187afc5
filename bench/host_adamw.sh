#!/bin/sh
# SPDX-License-Identifier: MIT
# Host AdamW side by side: bench/host_adamw (the fused kernel; bf16 gradient + bf16 copy as a SlideDP
# step runs it, and fp32 gradient without copy, the same work as PyTorch's) and PyTorch's CPU AdamW
# (fused, foreach; bench/host_adamw_peer.py), same parameter count and thread count.  Prints the
# JSON lines; writes no files.
#   bench/host_adamw.sh THREADS [PARAMS]          (PARAMS default 268435456, as in BENCH.md)
# Environment: HOST_ADAMW (the program; default ./bench/host_adamw from the build directory, else
# the source tree's), PYTHON3 (default deps/venv/bin/python3), ITERS (default 5).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 THREADS [PARAMS]" >&2; exit 2; }
threads=$1
params=${2:-268435456}
iters=${ITERS:-5}
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${HOST_ADAMW:-}
if [ -z "$bin" ]; then
    for b in ./bench/host_adamw "$top/bench/host_adamw"; do
        if [ -x "$b" ]; then bin=$b; break; fi
    done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "$0: bench/host_adamw not found; run from the build directory after make, or set HOST_ADAMW" >&2
    exit 1
fi
py=${PYTHON3:-$top/deps/venv/bin/python3}

"$bin" --params "$params" --threads "$threads" --iters "$iters" --grad bf16 --copy bf16
"$bin" --params "$params" --threads "$threads" --iters "$iters" --grad f32 --copy none
"$py" "$top/bench/host_adamw_peer.py" --params "$params" --threads "$threads" --iters "$iters"
