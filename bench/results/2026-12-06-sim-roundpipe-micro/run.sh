#!/bin/bash
# sdp-roundpipe with several micro-batches a step against sdp-slidedp, simulated (H100 machine file)
cd "$(dirname "$0")/../../.."
M=bench/results/2026-12-06-sim-h100/machine.json
O=bench/results/2026-12-06-sim-roundpipe-micro
mkdir -p $O
for m in 4 2; do
  ./slidedp simulate --gpus 1 --machine $M bench --model qwen3-4b --batch 16 --micro $m --seq 1024 --grad-dtype bf16 --sched sdp-slidedp --steps 3 --warmup 1 > $O/slidedp-1-m$m.json 2> $O/slidedp-1-m$m.err
  for R in 1 2 4 8; do
    ./slidedp simulate --gpus $R --machine $M bench --model qwen3-4b --batch 16 --micro $m --seq 1024 --grad-dtype bf16 --sched sdp-roundpipe --ranks $R --steps 3 --warmup 1 > $O/roundpipe-$R-m$m.json 2> $O/roundpipe-$R-m$m.err
    echo "m$m R$R $?"
  done
done
