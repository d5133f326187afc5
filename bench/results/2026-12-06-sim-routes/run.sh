#!/bin/bash
# weak scaling of qwen3-4b/16 per GPU, four routes, old (2c552e1) and new binaries
cd "$(dirname "$0")/../../.."
M=bench/results/2026-12-06-sim-h100/machine.json
for bin in new old; do
  sb=build/sim/slidedp; [ $bin = old ] && sb=OLD/build/sim/slidedp
  for R in 1 2 4 8; do
    for pr in replicated sharded; do for gr in cpu gpu; do
      [ $R = 1 ] && [ "$pr$gr" != replicatedcpu ] && continue
      ./slidedp simulate --sim-binary $sb --gpus $R --machine $M bench --model qwen3-4b --batch $((16*R)) --seq 1024 --grad-dtype fp32 --ranks $R --param-route $pr --grad-route $gr --steps 3 --warmup 1 > bench/results/2026-12-06-sim-routes/$bin-r$R-$pr-$gr.json 2> bench/results/2026-12-06-sim-routes/$bin-r$R-$pr-$gr.err
      echo "$bin $R $pr $gr $?"
    done; done
  done
done
