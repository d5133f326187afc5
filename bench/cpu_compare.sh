#!/bin/sh
# SPDX-License-Identifier: MIT
# The main job beside its CPU peer, one command: `slidedp train RECIPE` on CPU workers (the mean
# step time of steps 2..N that train reports) and bench/cpu_peer.py (PyTorch + transformers' Qwen3,
# the same shapes, batches, optimizer and clipping, on as many threads as there are CPU workers;
# the median of N timed steps after one warm-up step).  Prints both JSON lines, then one line
#   main job X s/step, pytorch Y s/step, ratio Y/X = R (above 1: the main job is faster)
#   bench/cpu_compare.sh [RECIPE [STEPS [THREADS]]]   (defaults: recipes/tiny-qwen3.yaml, 5, nproc)
# Environment: SLIDEDP (the program; default ./slidedp from the build directory, else the source
# tree's), PYTHON3 (default deps/venv/bin/python3).  Writes no files.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
recipe=${1:-$top/recipes/tiny-qwen3.yaml}
steps=${2:-5}
threads=${3:-$(nproc)}
bin=${SLIDEDP:-}
if [ -z "$bin" ]; then
    for b in ./slidedp "$top/slidedp"; do
        if [ -x "$b" ]; then bin=$b; break; fi
    done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "$0: slidedp not found; run from the build directory after make, or set SLIDEDP" >&2
    exit 1
fi
py=${PYTHON3:-$top/deps/venv/bin/python3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

"$bin" train "$recipe" --steps "$steps" --cpus "$threads" --gpus 0 >"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
}
main=$(sed -n 's/.*step time: measured \([0-9.]*\) s.*/\1/p' "$log" | tail -n 1)
[ -n "$main" ] || { cat "$log" >&2; echo "$0: no step time in slidedp's output" >&2; exit 1; }
printf '{"system": "slidedp", "recipe": "%s", "step_s_mean": %s, "threads": %s}\n' \
    "$(basename "$recipe")" "$main" "$threads"
peer=$("$py" "$top/bench/cpu_peer.py" "$recipe" --threads "$threads" --steps "$steps" 2>/dev/null)
echo "$peer"
torch=$(printf '%s\n' "$peer" | sed -n 's/.*"step_s_median": \([0-9.eE+-]*\).*/\1/p')
awk -v m="$main" -v p="$torch" 'BEGIN {
    printf "main job %.3f s/step, pytorch %.3f s/step, ratio %.2f", m, p, p / m
    print " (above 1: the main job is faster)"
}'
