#!/bin/sh
# SPDX-License-Identifier: MIT
# LoRA at two data-parallel ranks on two GPUs (exit 77, skipped, with fewer): the micro recipe
# (fp32, 8 sequences a step in micro-batches of 2, 4 steps) with rank-4 adapters (alpha 12) on
# every linear, at one rank on one GPU and at two ranks with the host's reduction, rank 0's GPU's
# (StarPU's transfers), the sharded parameter route and, where the build has NCCL, NCCL's reduce:
#   - every two-rank run's losses and gradient norms agree with the one-rank run's within 1e-5
#     relative, the bound tests/e2e/lora_peft.py derives for runs that differ by rounding alone
#     (here the order of the gradient sum, and the GPU kernels' sums of squares), and the routes
#     with one another within 1e-6 (test_e2e_nccl.sh's bound for NCCL's order of the sum);
#   - the event logs pass tools/check_invariants.py; the reductions (grad_reduce, or
#     grad_reduce_nccl with NCCL) are of the adapted layers 1 and 2 alone, each once a step, and no
#     task forms a gradient of the frozen base (matmul_bwd_weight, embedding_bwd).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_gpus 2
{
    micro_recipe | sed -e "s#^  global: .*#  global: 8#"
    printf 'lora: {rank: 4, alpha: 12, targets: all-linear}\n'
} > "$tmp/r.yaml"

run() { # NAME GPUS ARGS...: each run under its own limit (a hang names its run)
    name=$1 n=$2
    shift 2
    timeout 300 "$bin" train "$tmp/r.yaml" -q --gpus "$n" --ranks "$n" --output "$tmp/$name" \
        --metrics "$tmp/$name.jsonl" --events "$tmp/$name.ev" "$@" 2> "$tmp/$name.err"
    st=$?
    [ $st -eq 124 ] && echo "$name: no end within 300 s" >> "$tmp/$name.err"
    [ $st -eq 0 ] || { echo "$name: training failed"; cat "$tmp/$name.err"; fail=1; }
    return $st
}
run g1 1
run cpu 2 --grad-route cpu
run gpu 2 --grad-route gpu
run sharded 2 --grad-route gpu --param-route sharded
names="g1 cpu gpu sharded"
if timeout 300 "$bin" train "$tmp/r.yaml" -q --gpus 2 --ranks 2 --grad-route gpu \
    --collectives nccl --output "$tmp/nccl" --metrics "$tmp/nccl.jsonl" --events "$tmp/nccl.ev" \
    2> "$tmp/nccl.err"; then
    names="$names nccl"
elif grep -q "has no NCCL" "$tmp/nccl.err"; then
    echo "this build has no NCCL: its reduction is not checked"
else
    echo "nccl: training failed"; cat "$tmp/nccl.err"; fail=1
fi

# shellcheck disable=SC2086 # the names are words
"$py" - "$tmp" $names <<'PYEOF' || fail=1
import json, os, sys
tmp, names = sys.argv[1], sys.argv[2:]
LOSS_RTOL, ROUTE_RTOL = 1e-5, 1e-6
def load(n):
    rows = map(json.loads, open(os.path.join(tmp, n + ".jsonl")))
    return [(x["loss"], x["grad_norm"]) for x in rows if "loss" in x]
def rel(a, b):
    if len(a) != 4 or len(b) != 4:
        return float("inf")
    return max(abs(x - y) / max(abs(y), 1e-30) for p, q in zip(a, b) for x, y in zip(p, q))
ok, ref = True, load("g1")
print("1 rank:", ref)
for n in names[1:]:
    d, r = rel(load(n), ref), rel(load(n), load("cpu"))
    print("2 ranks, %s: against 1 rank %.2e (limit %.0e), against the host's reduction %.2e "
          "(limit %.0e)" % (n, d, LOSS_RTOL, r, ROUTE_RTOL))
    ok = ok and d <= LOSS_RTOL and r <= ROUTE_RTOL
for n in names[1:]:
    ev = [json.loads(l) for l in open(os.path.join(tmp, n + ".ev")) if l.strip()]
    steps = sorted({e["step"] for e in ev if e.get("phase") == "fwd"})
    red = {}
    for e in ev:
        if e["name"] in ("grad_reduce", "grad_reduce_nccl"):
            red.setdefault(e["step"], []).append(e["group"])
    base = sorted({e["name"] for e in ev if e["name"] in ("matmul_bwd_weight", "embedding_bwd")})
    good = len(steps) == 4 and not base and all(sorted(red.get(s, [])) == [1, 2] for s in steps)
    print("%s: reduced groups of step 1 %s, base gradient tasks %s"
          % (n, sorted(red.get(0, [])), base))
    ok = ok and good
sys.exit(0 if ok else 1)
PYEOF
for n in $names; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$n.ev" > "$tmp/check" 2>&1 ||
        { echo "$n: the invariant checker fails"; tail -n 5 "$tmp/check"; fail=1; }
done
finish
