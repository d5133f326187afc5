#!/bin/sh
# Data-parallel ranks on CPU workers (--ranks R): with the same global batch, the fp32 losses of the
# tiny recipe agree within 1e-6 relative for R = 1, 2 and 4 (only the order of the gradient sum
# differs: each rank accumulates its own sequences, then the ranks' gradients are added in rank
# order).  Both gradient routes, a per-group mix of them, and the sharded parameter route give the
# same bits (the same sum placed on the host or on rank 0's worker; the same weights copied rank to
# rank); the event log of a 2-rank run passes the invariant checker, with every rank's
# compute on its own worker (with more workers than ranks: --cpus 3); a global batch the ranks
# cannot share is a usage error (exit 2).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/recipes/tiny-qwen3.yaml
steps=${SDP_RANKS_STEPS:-8}

run() { # name, extra options...
    name=$1; shift
    if ! "$bin" train "$recipe" --steps "$steps" --sched eager -q --metrics "$tmp/$name.jsonl" "$@" \
        2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1; return 1
    fi
    sed -e 's/.*"loss": *\([^,]*\),.*/\1/' "$tmp/$name.jsonl" > "$tmp/$name.loss"
    echo "$name: $(tr '\n' ' ' < "$tmp/$name.loss")"
}
# have FILE: the events log a run was asked for exists and is not empty (else a failure)
have() {
    [ -s "$1" ] || { echo "$(basename "$1"): missing or empty"; fail=1; return 1; }
}

run r1 --ranks 1
run r2 --ranks 2 --cpus 3 --events "$tmp/r2.events.jsonl"
run r4 --ranks 4
run r2gpu --ranks 2 --grad-route gpu
run r2mixed --ranks 2 --grad-route-groups gpu:0-2,cpu:3-5 --events "$tmp/r2mixed.events.jsonl"
run r2sharded --ranks 2 --param-route sharded --grad-route gpu --events "$tmp/r2sharded.events.jsonl"
run r4sharded --ranks 4 --param-route sharded

for R in r2 r4; do
    if [ ! -f "$tmp/$R.loss" ] || [ ! -f "$tmp/r1.loss" ]; then continue; fi
    if ! "$py" - "$tmp/r1.loss" "$tmp/$R.loss" "$steps" <<'PYEOF'
import sys
a = [float(x) for x in open(sys.argv[1])]
b = [float(x) for x in open(sys.argv[2])]
steps = int(sys.argv[3])
if len(a) != steps or len(b) != steps:
    sys.exit("expected %d steps, got %d and %d" % (steps, len(a), len(b)))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("%s: max relative loss difference to 1 rank %.3g" % (sys.argv[2].split("/")[-1], worst))
sys.exit(0 if worst <= 1e-6 else 1)
PYEOF
    then
        echo "$R: losses differ from 1 rank by more than 1e-6"; fail=1
    fi
done
for pair in r2:r2gpu r2:r2mixed r2:r2sharded r4:r4sharded; do
    a=${pair%%:*} b=${pair#*:}
    if [ -f "$tmp/$a.loss" ] && [ -f "$tmp/$b.loss" ] && ! cmp -s "$tmp/$a.loss" "$tmp/$b.loss"; then
        echo "$b: the routes give different losses than $a"; fail=1
    fi
done
# the sharded route: every chunk reaches every rank (one copy from the host per chunk, a transfer
# task to its owner, then one per other rank), and the log still passes the checker
if have "$tmp/r2sharded.events.jsonl"; then
    "$py" "$top/tools/check_invariants.py" "$tmp/r2sharded.events.jsonl" > "$tmp/checks.out" 2>&1 ||
        { echo "invariant checker failed on the sharded log:"; cat "$tmp/checks.out"; fail=1; }
    "$py" - "$tmp/r2sharded.events.jsonl" <<'PYEOF' || fail=1
import json, sys
copies = {}
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["name"] in ("param_copy", "param_chunk"):
        copies.setdefault((e["step"], e["group"], e["chunk"]), []).append(e["rank"])
ok = bool(copies) and all(sorted(r) == [0, 1] for r in copies.values())
print("sharded: %d chunk dispatches, each to ranks %s" % (len(copies), sorted(set(
    tuple(sorted(r)) for r in copies.values()))))
sys.exit(0 if ok else 1)
PYEOF
fi
# per-group routes: the reductions of groups 0-2 run on rank 0's worker, the others anywhere
if have "$tmp/r2mixed.events.jsonl"; then
    "$py" - "$tmp/r2mixed.events.jsonl" "$tmp/r2.events.jsonl" <<'PYEOF' || fail=1
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
rank0 = {e["worker"] for e in ev if e["rank"] == 0 and e["phase"] == "fwd"}
by_group = {}
for e in ev:
    if e["name"] == "grad_reduce":
        by_group.setdefault(e["group"], set()).add(e["worker"])
print("grad_reduce workers by group:", {g: sorted(w) for g, w in sorted(by_group.items())},
      "rank 0 computes on", sorted(rank0))
ok = len(rank0) == 1 and all(by_group[g] <= rank0 for g in (0, 1, 2))
sys.exit(0 if ok else 1)
PYEOF
fi

# the event log: invariants, and each rank's compute on its own worker
if have "$tmp/r2.events.jsonl"; then
    "$py" "$top/tools/check_invariants.py" "$tmp/r2.events.jsonl" > "$tmp/check.out" 2>&1 ||
        { echo "invariant checker failed on the 2-rank log:"; cat "$tmp/check.out"; fail=1; }
    "$py" - "$tmp/r2.events.jsonl" <<'PYEOF' || fail=1
import json, sys
workers, reduces = {}, 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["phase"] in ("fwd", "recompute", "bwd", "loss"):
        workers.setdefault(e["rank"], set()).add(e["worker"])
    reduces += e["name"] == "grad_reduce"
print("compute workers by rank:", {r: sorted(w) for r, w in workers.items()}, "reductions:", reduces)
ok = sorted(workers) == [0, 1] and all(len(w) == 1 for w in workers.values()) and \
    workers[0] != workers[1] and reduces > 0
sys.exit(0 if ok else 1)
PYEOF
fi

# a malformed per-group route
"$bin" train "$recipe" --steps 1 --ranks 2 --grad-route-groups gpu:0-9 -q 2> "$tmp/badr.err"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "grad_route_groups" "$tmp/badr.err"; then
    echo "--grad-route-groups gpu:0-9: expected exit 2 naming grad_route_groups, got $rc:"
    cat "$tmp/badr.err"; fail=1
fi

# 8 sequences cannot be shared by 3 ranks
"$bin" train "$recipe" --steps 1 --ranks 3 -q 2> "$tmp/bad.err"
rc=$?
if [ $rc -ne 2 ] || ! grep -q "train.ranks=3" "$tmp/bad.err"; then
    echo "--ranks 3: expected exit 2 naming train.ranks, got $rc:"; cat "$tmp/bad.err"; fail=1
fi

finish
