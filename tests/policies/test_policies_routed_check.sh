#!/bin/sh
# SPDX-License-Identifier: MIT
# tools/check_invariants.py on routed streaming (graph/moe.c), from hand-made event logs: a sparse
# layer's tasks other than the MoE ones read only the chunks the step fetched (param_chunk), so
# they may start while the previous step's update of an expert's chunk still runs; the MoE tasks
# read every chunk and may not; a group without MoE tasks reads every chunk as before.
#   ok:        step 1's rmsnorm_fwd of sparse group 1 after the update of fetched chunk 0, during
#              that of expert chunk 1; its moe_fwd after both           -> invariants hold
#   moe_early: the same, but moe_fwd during the update of chunk 1      -> invariant 3 (and 1)
#   dense:     group 1 has no MoE task: rmsnorm_fwd during chunk 1's update -> invariant 3 (and 1)
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

log() { # NAME MOE_START: the events of steps 0 and 1 of group 1 (chunks 0 and 1) into $tmp/NAME
    "$py" - "$tmp/$1" "$2" << 'PYEOF'
import json, sys
path, moe = sys.argv[1], sys.argv[2]
ev = []
def e(name, phase, step, start, end, chunk=None, mb=0):
    x = {"name": name, "phase": phase, "step": step, "group": 1, "mb": mb, "rank": 0,
         "worker": 0, "start_us": start, "end_us": end}
    if chunk is not None:
        x["chunk"] = chunk
    ev.append(x)
e("rmsnorm_fwd", "fwd", 0, 0, 10)
if moe != "none":
    e("moe_fwd", "fwd", 0, 10, 20)
    e("moe_bwd", "bwd", 0, 30, 40)
e("rmsnorm_bwd", "bwd", 0, 40, 50)
e("adamw", "update", 0, 60, 70, chunk=0)
e("adamw", "update", 0, 60, 200, chunk=1)      # an expert's chunk, updated late
e("param_chunk", "fetch", 1, 75, 80, chunk=0)  # the step fetches chunk 0 alone
e("rmsnorm_fwd", "fwd", 1, 90, 100)
if moe != "none":
    e("moe_fwd", "fwd", 1, float(moe), float(moe) + 10)
with open(path, "w") as f:
    for x in ev:
        f.write(json.dumps(x) + "\n")
PYEOF
}
log ok 210
log moe_early 150
log dense none
for n in ok moe_early dense; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$n" > "$tmp/$n.out" 2>&1
    echo "$n: checker exit $?: $(tail -n 1 "$tmp/$n.out")" | tee "$tmp/$n.rc"
done
grep -q "exit 0: invariants 1 to 4 hold" "$tmp/ok.rc" ||
    { echo "routed: the non-MoE tasks read only the fetched chunks"; cat "$tmp/ok.out"; fail=1; }
grep -q "^invariant 3 violated: moe_fwd" "$tmp/moe_early.out" && grep -q "exit 1" "$tmp/moe_early.rc" ||
    { echo "routed: a MoE task reads every chunk"; cat "$tmp/moe_early.out"; fail=1; }
grep -q "^invariant 3 violated: rmsnorm_fwd" "$tmp/dense.out" && grep -q "exit 1" "$tmp/dense.rc" ||
    { echo "a dense group's tasks read every chunk"; cat "$tmp/dense.out"; fail=1; }
finish
