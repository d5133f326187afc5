#!/bin/sh
# SPDX-License-Identifier: MIT
# LoRA at several data-parallel ranks on CPU workers (fp32, the micro model, rank 4 with alpha 12 on
# every linear: a scale of 3, which rounds):
#   - with the same global batch (8 sequences in micro-batches of 2) at --ranks 1, 2 and 4, step
#     1's loss is the same bits (the forward does not depend on the ranks), the losses and gradient
#     norms agree within 1e-5 relative and the adapters' change over the run within 1e-3 norm-wise:
#     the ranks change only the order in which the micro-batches' fp32 adapter gradients are added
#     (each rank its own, then the ranks' in rank order), so both sides differ by rounding alone,
#     the case whose bounds tests/e2e/lora_peft.py derives (a loss error that grows at most
#     linearly from ~1e-6 a step; AdamW's m / sqrt(v) carries the gradients' relative error into
#     the change, more where a gradient is near zero); a dropped or doubled rank's gradient moves
#     them by O(1).  The initial adapter comes from a run of one step at lr 1e-30.  The same
#     with lora.dropout 0.1 at 1 and 2 ranks: a micro-batch's masks do not depend on its rank;
#   - both gradient routes, the sharded parameter route and the eager and dmda schedulers give the
#     same bits at 2 ranks (the same sum on the host or on rank 0's worker; the frozen base copied
#     rank to rank; the order of every sum fixed by the graph, not by the schedule);
#   - the event logs pass tools/check_invariants.py; each rank computes on its own worker; no task
#     forms a gradient of the frozen base (no matmul_bwd_weight, no embedding_bwd), and each step
#     zeroes and reduces only the adapted layers' gradients, on every rank;
#   - --print-plan at 2 ranks shows the ranks and the adapters;
#   - a checkpoint written at 2 ranks resumes at 2 with the uninterrupted run's losses and final
#     adapter bit for bit, and at 1 and 4 from the same state: step 3's loss (the loaded adapters'
#     alone) is the uninterrupted run's bit for bit, and the run finishes (at 4 ranks with the
#     warning on the micro-batch), as full fine-tuning's checkpoints do (test_e2e_resume_ranks.sh);
#   - against PEFT (where torch, transformers and peft are installed): test_e2e_lora_peft.sh's
#     training of a PEFT adapter on the tiny Qwen3 with lora.dropout 0.1, at --ranks 2 against the
#     same one-process reference with the global batch (lora_peft.py train, its derived
#     tolerances; PEFT's lora_dropout drawing the run's masks).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
lora='{rank: 4, alpha: 12, targets: all-linear}'
{ micro_recipe; printf 'lora: %s\n' "$lora"; } | sed -e 's/^  global: .*/  global: 8/' > "$tmp/l.yaml"
sed -e 's/^  lr: .*/  lr: 1.0e-30/' "$tmp/l.yaml" > "$tmp/init.yaml"
sed -e 's/^lora: {rank: 4,/lora: {rank: 4, dropout: 0.1,/' "$tmp/l.yaml" > "$tmp/drop.yaml"
scores() { grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$1" | tr '\n' ' '; }

run() { # NAME RECIPE OPTIONS...: RUN in $tmp/NAME, metrics in NAME.jsonl
    name=$1 recipe=$2
    shift 2
    "$bin" train "$recipe" -q --output "$tmp/$name" --metrics "$tmp/$name.jsonl" "$@" \
        2> "$tmp/$name.err" || { echo "$name: training failed"; cat "$tmp/$name.err"; fail=1; }
}
run init "$tmp/init.yaml" --cpus 2 --steps 1
run r1 "$tmp/l.yaml" --cpus 2
run r2 "$tmp/l.yaml" --cpus 3 --ranks 2 --events "$tmp/r2.ev"
run r4 "$tmp/l.yaml" --cpus 4 --ranks 4
run r2gpu "$tmp/l.yaml" --cpus 2 --ranks 2 --grad-route gpu
run r2sh "$tmp/l.yaml" --cpus 2 --ranks 2 --param-route sharded --grad-route gpu \
    --events "$tmp/r2sh.ev"
run r2eager "$tmp/l.yaml" --cpus 2 --ranks 2 --sched eager
run r2dmda "$tmp/l.yaml" --cpus 2 --ranks 2 --sched dmda
run d1 "$tmp/drop.yaml" --cpus 2
run d2 "$tmp/drop.yaml" --cpus 2 --ranks 2
for r in r1 r2 r4 r2gpu r2sh r2eager r2dmda d1 d2; do echo "$r: $(scores "$tmp/$r.jsonl")"; done

"$py" - "$tmp" <<'PYEOF' || fail=1
import json, sys
import numpy as np
from safetensors.numpy import load_file
tmp = sys.argv[1]
LOSS_RTOL, ADAPTER_RTOL = 1e-5, 1e-3  # lora_peft.py's, derived there (the header says why)
def metrics(name):
    return [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, name)) if '"loss"' in l]
def adapter(name):
    return load_file("%s/%s/final/adapter_model.safetensors" % (tmp, name))
a0, ok = adapter("init"), True
for name, one in (("r2", "r1"), ("r4", "r1"), ("d2", "d1")):
    ref, a1, m, a = metrics(one), adapter(one), metrics(name), adapter(name)
    change = sum(float(np.sum((a1[k].astype(np.float64) - a0[k]) ** 2)) for k in a1) ** 0.5
    ok = ok and len(ref) == 4 and change > 0
    if len(m) != len(ref) or sorted(a) != sorted(a1):
        sys.exit("%s: %d steps and %d tensors, want %d and %d"
                 % (name, len(m), len(a), len(ref), len(a1)))
    dl = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(ref, m))
    dg = max(abs(x["grad_norm"] - y["grad_norm"]) / x["grad_norm"] for x, y in zip(ref, m))
    da = sum(float(np.sum((a1[k].astype(np.float64) - a[k]) ** 2)) for k in a1) ** 0.5 / change
    same = m[0]["loss"] == ref[0]["loss"]
    good = same and dl <= LOSS_RTOL and dg <= LOSS_RTOL and da <= ADAPTER_RTOL
    print("%s against %s: step 1's loss %s, losses %.2g, gradient norms %.2g (limit %.0e), "
          "the adapters' change %.2g (limit %.0e): %s"
          % (name, one, "the same" if same else "DIFFERS", dl, dg, LOSS_RTOL, da, ADAPTER_RTOL,
             "ok" if good else "FAIL"))
    ok = ok and good
sys.exit(0 if ok else 1)
PYEOF
for r in r2gpu r2sh r2eager r2dmda; do
    [ -n "$(scores "$tmp/r2.jsonl")" ] && [ "$(scores "$tmp/$r.jsonl")" = "$(scores "$tmp/r2.jsonl")" ] &&
        cmp -s "$tmp/$r/final/adapter_model.safetensors" "$tmp/r2/final/adapter_model.safetensors" ||
        { echo "$r: other bits than r2"; fail=1; }
done

# the event logs: the invariants; each rank on its worker; no gradient of the base, and each step
# zeroes every rank's adapter gradients of layers 1 and 2 and reduces those two groups alone
for ev in r2 r2sh; do
    [ -s "$tmp/$ev.ev" ] || { echo "$ev: no event log"; fail=1; continue; }
    "$py" "$top/tools/check_invariants.py" "$tmp/$ev.ev" > "$tmp/check.out" 2>&1 ||
        { echo "$ev: the invariant checker fails"; tail -n 5 "$tmp/check.out"; fail=1; }
    echo "$ev: $(tail -n 1 "$tmp/check.out")"
    "$py" - "$tmp/$ev.ev" <<'PYEOF' || fail=1
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
workers, zero, reduce = {}, {}, {}
for e in ev:
    if e["phase"] in ("fwd", "recompute", "bwd", "loss"):
        workers.setdefault(e["rank"], set()).add(e["worker"])
    if e["name"] == "zero":
        zero.setdefault(e["step"], []).append((e["group"], e["rank"]))
    if e["name"] == "grad_reduce":
        reduce.setdefault(e["step"], []).append(e["group"])
base = sorted({e["name"] for e in ev if e["name"] in ("matmul_bwd_weight", "embedding_bwd")})
steps = sorted({e["step"] for e in ev if e["phase"] == "fwd"})
ok = sorted(workers) == [0, 1] and all(len(w) == 1 for w in workers.values()) and \
    workers[0] != workers[1] and not base and len(steps) == 4 and \
    all(sorted(zero.get(s, [])) == [(1, 0), (1, 1), (2, 0), (2, 1)] for s in steps) and \
    all(sorted(reduce.get(s, [])) == [1, 2] for s in steps)
print("  workers by rank %s, base gradient tasks %s, zeroed (group, rank) %s, reduced groups %s"
      % ({r: sorted(w) for r, w in workers.items()}, base, sorted(zero.get(0, [])),
         sorted(reduce.get(0, []))))
sys.exit(0 if ok else 1)
PYEOF
done

# --print-plan at 2 ranks
"$bin" train "$tmp/l.yaml" --cpus 2 --ranks 2 --print-plan > "$tmp/plan.txt" 2> "$tmp/plan.err" ||
    { echo "--print-plan at 2 ranks failed"; cat "$tmp/plan.err"; fail=1; }
all='adapters q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj$'
grep -q '^plan: 2 layers, 2 ranks' "$tmp/plan.txt" &&
    grep -q '^lora: rank 4, alpha 12 (scale 3)' "$tmp/plan.txt" &&
    [ "$(grep -Ec "^[12] .* $all" "$tmp/plan.txt")" = 2 ] ||
    { echo "--print-plan at 2 ranks: no ranks or adapters"; cat "$tmp/plan.txt"; fail=1; }

# checkpoints written at 2 ranks (the micro recipe's 4 sequences in micro-batches of 2)
{ micro_recipe; printf 'lora: %s\n' "$lora"; } | sed -e 's/^  name: cosine/  name: constant/' > "$tmp/ck.yaml"
nth() { grep -o '"loss":[^,]*' "$1" | sed -n "$2p"; }
args="--checkpoint-every 2 -q"
"$bin" train "$tmp/ck.yaml" $args --cpus 2 --ranks 2 --output "$tmp/ref" --metrics "$tmp/ref.jsonl" \
    2> "$tmp/ref.err" && "$bin" train "$tmp/ck.yaml" $args --steps 2 --cpus 2 --ranks 2 \
    --output "$tmp/half" --metrics "$tmp/half.jsonl" 2> "$tmp/half.err" ||
    { echo "the 2-rank LoRA runs with checkpoints failed"; cat "$tmp/ref.err" "$tmp/half.err"; fail=1; }
echo "uninterrupted at 2 ranks: $(scores "$tmp/ref.jsonl")"
for n in 2 1 4; do
    cp -r "$tmp/half" "$tmp/k$n" && cp "$tmp/half.jsonl" "$tmp/k$n.jsonl"
    "$bin" train "$tmp/ck.yaml" $args --cpus "$((n > 2 ? n : 2))" --ranks "$n" --output "$tmp/k$n" \
        --metrics "$tmp/k$n.jsonl" 2> "$tmp/k$n.err" ||
        { echo "resume at $n ranks failed"; cat "$tmp/k$n.err"; fail=1; continue; }
    grep -q "resuming from .*step-00000002" "$tmp/k$n.err" ||
        { echo "resume at $n ranks: not from the step-2 checkpoint"; cat "$tmp/k$n.err"; fail=1; }
    echo "resumed at $n ranks: $(scores "$tmp/k$n.jsonl")"
    if [ "$n" = 2 ]; then
        [ "$(scores "$tmp/k2.jsonl")" = "$(scores "$tmp/ref.jsonl")" ] &&
            cmp -s "$tmp/k2/final/adapter_model.safetensors" "$tmp/ref/final/adapter_model.safetensors" ||
            { echo "resume at 2 ranks: other bits than the uninterrupted run"; fail=1; }
    else
        [ -n "$(nth "$tmp/ref.jsonl" 3)" ] && [ "$(nth "$tmp/k$n.jsonl" 3)" = "$(nth "$tmp/ref.jsonl" 3)" ] ||
            { echo "resume at $n ranks: step 3's loss differs (the adapters did not load as written)"; fail=1; }
        [ -s "$tmp/k$n/final/adapter_model.safetensors" ] || { echo "resume at $n ranks: no final adapter"; fail=1; }
    fi
done
grep -q "micro-batches of 1 sequences where the run had 2" "$tmp/k4.err" ||
    { echo "resume at 4 ranks: no warning about the micro-batch"; cat "$tmp/k4.err"; fail=1; }

# against PEFT at 2 ranks: test_e2e_lora_peft.sh's training recipe and reference
if "$py" -c "import numpy, torch, transformers, peft, safetensors" > /dev/null 2>&1; then
    w=$tmp/peft
    mkdir -p "$w"
    "$py" "$top/tests/e2e/lora_peft.py" make "$w" qwen3 > "$w/make.log" 2>&1 ||
        { cat "$w/make.log"; fail=1; }
    {
        printf 'model: {path: %s}\ndata: {train: %s, seq_len: 32, shuffle: false}\n' "$w/base" "$top/data/kjv/val.tok"
        printf 'batch: {global: 4, micro: 2}\nschedule: {name: constant, warmup_steps: 0}\n'
        printf 'optimizer: {lr: 1.0e-3, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1, max_grad_norm: 1.0}\n'
        printf 'train: {steps: 10, precision: fp32, seed: 7}\n'
        printf 'lora: {rank: 4, alpha: 8, dropout: 0.1, targets: all-linear, layers: %s, init_from: %s}\n' \
            "$(cat "$w/layers")" "$w/adapter"
    } > "$w/train.yaml"
    if "$bin" train "$w/train.yaml" --cpus 2 --ranks 2 --output "$w/run" --metrics "$w/m.jsonl" -q 2> "$w/train.err"; then
        "$py" "$top/tests/e2e/lora_peft.py" train "$w" "$top/data/kjv/val.tok" "$w/run" "$w/m.jsonl" 10 0.1 7 2>&1 |
            grep -v -e 'Loading weights' -e 'Warning' -e 'warnings.warn' | sed -e 's/^/PEFT at 2 ranks: /' | tee "$w/train.log"
        grep -q ': PASS$' "$w/train.log" || fail=1
    else
        echo "LoRA training at 2 ranks from the PEFT adapter failed"; cat "$w/train.err"; fail=1
    fi
else
    echo "torch, transformers or peft missing: the comparison with PEFT at 2 ranks is skipped"
fi
finish
