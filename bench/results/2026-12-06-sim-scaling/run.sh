#!/bin/bash
# Simulated scaling on the H100 machine file: qwen3-8b weak (16 sequences per GPU) and strong
# (256 sequences a step), replicated + host sum without NVLink, sharded + GPU sum with NVLink.
cd "${TOP:-$(dirname "$0")/../../..}"
M=${MACHINE:-bench/results/2026-12-06-sim-scaling/machine.json}
O=${OUT:-bench/results/2026-12-06-sim-scaling}
mkdir -p "$O"
sim() { # NAME ARGS...
    local n=$1; shift
    ./slidedp simulate --machine "$M" "$@" > "$O/$n.json" 2> "$O/$n.err"; echo "$n $?"
}
[ -s "$O/w-r1.json" ] || sim w-r1 --gpus 1 bench --model qwen3-8b --batch 16 --seq 1024 --grad-dtype fp32 --steps 3 --warmup 1
for R in 2 4 8; do
    sim w-r$R-repl-cpu-nv0 --gpus $R bench --model qwen3-8b --batch $((16 * R)) --seq 1024 \
        --grad-dtype fp32 --ranks $R --param-route replicated --grad-route cpu --steps 3 --warmup 1
    sim w-r$R-shard-gpu-nv450 --gpus $R --nvlink 450 bench --model qwen3-8b --batch $((16 * R)) --seq 1024 \
        --grad-dtype fp32 --ranks $R --param-route sharded --grad-route gpu --steps 3 --warmup 1
done
for R in 4 8; do
    sim s-r$R-replicated-cpu-nv0 --gpus $R bench --model qwen3-8b --batch 256 --micro 16 \
        --seq 1024 --grad-dtype fp32 --ranks $R --param-route replicated --grad-route cpu --steps 2 --warmup 1
    sim s-r$R-sharded-gpu-nv450 --gpus $R --nvlink 450 bench --model qwen3-8b --batch 256 --micro 16 \
        --seq 1024 --grad-dtype fp32 --ranks $R --param-route sharded --grad-route gpu --steps 2 --warmup 1
done
