#!/bin/sh
# SPDX-License-Identifier: MIT
# The multi-GPU routes move what their formulas say (graph/cost.c), on simulated GPUs of the
# reference node: qwen3-0.6b's shapes, one sequence of 128 tokens per rank, at 2, 4 and 8 ranks,
# for the four route combinations (parameters replicated or sharded, gradients reduced on the host
# or on rank 0's GPU).  Per rank and per direction (host to GPU, GPU to host, from and to the other
# GPUs), the bytes StarPU's bus counters saw in the timed step are those of `bench`'s formulas
# within 5% (the token ids, losses and norms are far below that).  Two faults this catches: a
# sharded replica gathered through the host (every rank got the whole model up and its chunks
# down), and the host route's reduction run on an idle GPU (gradients copied between GPUs).
# Skips (77) without the simulation build, as test_e2e_simulate.sh.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_sim
export TMPDIR=$tmp
for R in 2 4 8; do
    for pr in replicated sharded; do
        for gr in cpu gpu; do
            name=r$R-$pr-$gr
            if ! "$bin" simulate --sim-binary "$sim" --gpus "$R" bench --model qwen3-0.6b \
                --batch "$R" --seq 128 --steps 1 --warmup 1 --ranks "$R" --param-route "$pr" \
                --grad-route "$gr" > "$tmp/$name.json" 2> "$tmp/$name.err"; then
                echo "$name: simulate failed"; tail -n 5 "$tmp/$name.err"; fail=1
            fi
        done
    done
done
"$py" - "$tmp" <<'PYEOF' || fail=1
import glob, json, os, sys
ok = True
pairs = (("h2d_gb", "param_h2d_gb_pred"), ("d2h_gb", "grad_d2h_gb_pred"),
         ("peer_in_gb", "peer_in_gb_pred"), ("peer_out_gb", "peer_out_gb_pred"))
files = sorted(glob.glob(os.path.join(sys.argv[1], "r*.json")))
if len(files) != 12:
    print("expected 12 runs, found %d" % len(files)); ok = False
for f in files:
    name = os.path.basename(f)[:-5]
    try:
        ranks = json.loads(open(f).readline())["bytes_per_rank_per_step"]
    except (ValueError, KeyError) as e:
        print("%s: no bytes per rank (%s)" % (name, e)); ok = False; continue
    worst = 0.0
    for r in ranks:
        for m, p in pairs:
            # 5% of the formula, and 5 MB where the formula says nothing moves that way
            if abs(r[m] - r[p]) > max(0.05 * r[p], 0.005):
                print("%s rank %d: %s %.4f GB, formula %.4f" % (name, r["rank"], m, r[m], r[p]))
                ok = False
            worst = max(worst, abs(r[m] - r[p]) / max(r[p], 1e-3))
    print("%s: %d ranks, largest relative difference %.2g" % (name, len(ranks), worst))
sys.exit(0 if ok else 1)
PYEOF
finish
