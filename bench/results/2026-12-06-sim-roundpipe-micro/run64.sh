#!/bin/bash
# sdp-roundpipe with 16 micro-batches of 4 sequences a step against sdp-slidedp, simulated (H100 machine file)
cd "$(dirname "$0")/../../.."
M=${MACHINE:-bench/results/2026-12-06-sim-h100/machine.json}
O=${OUT:-bench/results/2026-12-06-sim-roundpipe-micro}
./slidedp simulate --gpus 1 --machine $M bench --model qwen3-4b --batch 64 --micro 4 --seq 1024 --grad-dtype bf16 --sched sdp-slidedp --steps 3 --warmup 1 > $O/slidedp-1-b64.json 2> $O/slidedp-1-b64.err
for R in 1 2 4 8; do
  ./slidedp simulate --gpus $R --machine $M bench --model qwen3-4b --batch 64 --micro 4 --seq 1024 --grad-dtype bf16 --sched sdp-roundpipe --ranks $R --steps 3 --warmup 1 > $O/roundpipe-$R-b64.json 2> $O/roundpipe-$R-b64.err
  echo "b64 R$R $?"
done
