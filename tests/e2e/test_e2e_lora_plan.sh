#!/bin/sh
# The recipe's `lora:` section and the plan it makes, on the micro model (2 layers; fp32, 2 CPU
# workers):
#   - --print-plan prints LoRA's run-wide line (rank, alpha, scale alpha / rank) and marks the
#     adapted layers and their linears, every other group frozen; lora.layers picks the layers and
#     all-linear names the seven projections;
#   - bad input is refused with exit code 2, naming the recipe and the key: a target that names no
#     linear, a rank above an adapted linear's smaller width (k_proj is 16 x 32 here), layers
#     beyond the model, an unknown key, a non-mapping section, a dropout of 1, and nothing is
#     written; a dropout of 0.05 is planned and printed;
#   - train.gpu_update (the adapters' AdamW on the GPU, graph/lora.c) does not apply on CPU workers:
#     the plan says why and keeps the updates on the host ("adapters"), and the run's losses and
#     final adapter are those without it, bit for bit (its GPU side: test_e2e_lora_gpu_update_gpu.sh);
#   - tools/check_invariants.py passes a LoRA run's event log (the frozen groups, which nothing
#     updates, have one version whatever step their events record), and still fails a copy in
#     which a forward event of the adapted layer records another version than the one it read;
#   - the plan trains: 4 steps with finite losses; a run resumed from a checkpoint (the adapters
#     alone, under 1 MB here) gives the uninterrupted run's losses and final adapter bit for bit,
#     and `slidedp export` refuses such a checkpoint (with lora.dropout 0.1: the masks are the
#     step's, so the resumed run draws the same ones).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

with() { micro_recipe; printf 'lora: %s\n' "$1"; }

with '{rank: 4, alpha: 8, targets: [q_proj, v_proj, down_proj], layers: 2}' > "$tmp/l2.yaml"
if "$bin" train "$tmp/l2.yaml" --cpus 2 --print-plan > "$tmp/plan.txt" 2> "$tmp/plan.err"; then
    cat "$tmp/plan.txt"
    grep -q '^lora: rank 4, alpha 8 (scale 2), dropout 0' "$tmp/plan.txt" ||
        { echo "no lora line with scale 2"; fail=1; }
    grep -Eq '^1 .* frozen$' "$tmp/plan.txt" || { echo "layer 1 not frozen"; fail=1; }
    grep -Eq '^2 .* adapters q_proj,v_proj,down_proj$' "$tmp/plan.txt" ||
        { echo "layer 2 without its adapters"; fail=1; }
    grep -Eq '^(embedding|head) .* frozen$' "$tmp/plan.txt" || { echo "embedding/head not frozen"; fail=1; }
else
    echo "--print-plan failed"; cat "$tmp/plan.err"; fail=1
fi
with '{rank: 16, targets: all-linear}' > "$tmp/all.yaml"
"$bin" train "$tmp/all.yaml" --cpus 2 --print-plan > "$tmp/all.txt" 2> "$tmp/all.err" ||
    { echo "--print-plan (all-linear) failed"; cat "$tmp/all.err"; fail=1; }
[ "$(grep -Ec '^[12] .* adapters q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj$' \
    "$tmp/all.txt")" = 2 ] ||
    { echo "all-linear does not adapt the seven linears of layers 1 and 2"; cat "$tmp/all.txt"; fail=1; }

# the plan trains (its numerics against PEFT: test_e2e_lora_peft.sh): 4 finite losses
"$bin" train "$tmp/l2.yaml" --cpus 2 -q --metrics "$tmp/m.jsonl" 2> "$tmp/train.err" ||
    { echo "LoRA training failed"; cat "$tmp/train.err"; fail=1; }
[ "$(grep -c '"loss":[0-9]' "$tmp/m.jsonl" 2> /dev/null)" = 4 ] ||
    { echo "no 4 finite losses"; cat "$tmp/m.jsonl"; fail=1; }

# train.gpu_update on CPU workers: the plan's choice (the host) printed, the same bits
"$bin" train "$tmp/l2.yaml" --cpus 2 --gpu-update 2 --print-plan > "$tmp/gu.txt" 2> "$tmp/gu.err" ||
    { echo "--gpu-update 2 --print-plan failed"; cat "$tmp/gu.err"; fail=1; }
grep -q "gpu_update 2 does not apply here (it needs one rank, compute on a GPU, as LoRA's" \
    "$tmp/gu.err" || { echo "no word on gpu_update on CPU workers"; cat "$tmp/gu.err"; fail=1; }
grep -Eq '^2 .* adapters q_proj,v_proj,down_proj$' "$tmp/gu.txt" ||
    { echo "layer 2's adapters not updated on the host"; cat "$tmp/gu.txt"; fail=1; }
"$bin" train "$tmp/l2.yaml" --cpus 2 -q --gpu-update 2 --metrics "$tmp/gu.jsonl" \
    --output "$tmp/gu" 2> "$tmp/gu.err" &&
    "$bin" train "$tmp/l2.yaml" --cpus 2 -q --metrics "$tmp/nogu.jsonl" --output "$tmp/nogu" \
        --events "$tmp/nogu.ev" 2> "$tmp/nogu.err" || { echo "LoRA runs with and without --gpu-update failed"; fail=1; }
lg=$(grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$tmp/gu.jsonl" | tr '\n' ' ')
ln=$(grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$tmp/nogu.jsonl" | tr '\n' ' ')
echo "--gpu-update 2 on CPU workers: $lg"
[ -n "$lg" ] && [ "$lg" = "$ln" ] &&
    cmp -s "$tmp/gu/final/adapter_model.safetensors" "$tmp/nogu/final/adapter_model.safetensors" ||
    { echo "--gpu-update 2 on CPU workers changed the run"; fail=1; }

# the invariant checker on LoRA's log, and on a copy whose adapted layer 2 records a wrong version
"$py" "$top/tools/check_invariants.py" "$tmp/nogu.ev" > "$tmp/check.out" 2>&1 ||
    { echo "the checker fails a LoRA run's log"; tail -n 5 "$tmp/check.out"; fail=1; }
echo "event log: $(tail -n 1 "$tmp/check.out")"
"$py" - "$tmp/nogu.ev" "$tmp/broken.ev" <<'PYEOF' || fail=1
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
e = next(e for e in evs if e.get("step") == 2 and e.get("group") == 2 and e.get("name") == "lora_fwd")
e["version"] = 1
with open(sys.argv[2], "w") as f:
    f.writelines(json.dumps(x) + "\n" for x in evs)
# and one whose update of layer 2's adapters starts before their gradient's last lora_bwd ends
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
b = max((e for e in evs if e.get("step") == 2 and e.get("group") == 2 and e.get("name") == "lora_bwd"),
        key=lambda e: e["end_us"])
u = next(e for e in evs if e.get("step") == 2 and e.get("group") == 2 and e.get("phase") == "update")
span = u["end_us"] - u["start_us"]
u["start_us"] = b["end_us"] - 1.0
u["end_us"] = u["start_us"] + span
with open(sys.argv[2] + "2", "w") as f:
    f.writelines(json.dumps(x) + "\n" for x in evs)
PYEOF
if "$py" "$top/tools/check_invariants.py" "$tmp/broken.ev" > "$tmp/check.out" 2>&1 ||
    ! grep -q "invariant 1 violated" "$tmp/check.out"; then
    echo "the checker passes a LoRA log with a wrong version in layer 2"; fail=1
fi
if "$py" "$top/tools/check_invariants.py" "$tmp/broken.ev2" > "$tmp/check.out" 2>&1 ||
    ! grep -q "invariant 2 violated" "$tmp/check.out"; then
    echo "the checker passes a LoRA log whose update precedes its adapters' last gradient"; fail=1
fi

# checkpoints hold the adapters alone: 4 steps in one run, and 2 then 2 more from the checkpoint
# of step 2, give the same losses and final adapter bit for bit (the frozen base comes from the
# seed again, the dropout's masks from the step); exporting such a checkpoint as a model is refused
{ with '{rank: 4, alpha: 8, dropout: 0.1, targets: all-linear}'; printf 'output: {checkpoint_every: 2}\n'; } |
    sed -e 's/^  steps: .*/  steps: 4/' -e 's/^  name: cosine/  name: constant/' > "$tmp/ck.yaml"
"$bin" train "$tmp/ck.yaml" --cpus 2 -q --output "$tmp/ck1" --metrics "$tmp/ck1.jsonl" 2> "$tmp/ck.err" &&
    "$bin" train "$tmp/ck.yaml" --cpus 2 -q --output "$tmp/ck2" --metrics "$tmp/ck2.jsonl" --steps 2 \
        2>> "$tmp/ck.err" &&
    "$bin" train "$tmp/ck.yaml" --cpus 2 -q --output "$tmp/ck2" --metrics "$tmp/ck2.jsonl" 2>> "$tmp/ck.err" ||
    { echo "LoRA runs with checkpoints failed"; cat "$tmp/ck.err"; fail=1; }
l1=$(grep -o '"loss":[^,]*' "$tmp/ck1.jsonl" | tr '\n' ' ')
l2=$(grep -o '"loss":[^,]*' "$tmp/ck2.jsonl" | tr '\n' ' ')
echo "one run: $l1"; echo "resumed: $l2"
[ -n "$l1" ] && [ "$l1" = "$l2" ] || { echo "the resumed LoRA run differs"; fail=1; }
cmp -s "$tmp/ck1/final/adapter_model.safetensors" "$tmp/ck2/final/adapter_model.safetensors" ||
    { echo "the final adapters differ"; fail=1; }
ck=$(ls "$tmp/ck1/checkpoints" | tail -n 1)
sz=$(wc -c < "$tmp/ck1/checkpoints/$ck")
echo "checkpoint $ck: $sz bytes"
[ "$sz" -lt 1000000 ] || { echo "a LoRA checkpoint of $sz bytes holds more than the adapters"; fail=1; }
expect 1 "the adapters of a LoRA run, not a whole model's state" -- \
    "$bin" export "$tmp/ck1/checkpoints" "$tmp/ck-export"

bad() { # NAME LORA: the recipe with lora: LORA, for expect
    with "$2" > "$tmp/$1.yaml"
}
bad target '{rank: 4, targets: [q_proj, qkv_proj]}'
expect 2 "$tmp/target.yaml line .*lora.targets: 'qkv_proj' names no linear" -- \
    "$bin" train "$tmp/target.yaml" --cpus 2 --print-plan
bad rank '{rank: 17, targets: [q_proj, k_proj]}'
expect 2 "lora.rank = 17 is above k_proj's size \(16 x 32" -- \
    "$bin" train "$tmp/rank.yaml" --cpus 2 --print-plan
bad layers '{rank: 4, layers: 2-3}'
expect 2 "lora.layers 2-3: outside the model's layers 1-2" -- \
    "$bin" train "$tmp/layers.yaml" --cpus 2 --print-plan
bad key '{rank: 4, colour: blue}'
expect 2 "$tmp/key.yaml line .*unknown key 'lora.colour'" -- \
    "$bin" train "$tmp/key.yaml" --cpus 2 --print-plan
bad list '[q_proj]'
expect 2 "$tmp/list.yaml line .*lora: the section is a mapping" -- \
    "$bin" train "$tmp/list.yaml" --cpus 2 --print-plan
bad dropout '{rank: 4, dropout: 1}'
expect 2 "lora.dropout: a probability in \[0, 1\)" -- \
    "$bin" train "$tmp/dropout.yaml" --cpus 2 --print-plan
with '{rank: 4, dropout: 0.05}' > "$tmp/drop.yaml"
expect 0 "" -- "$bin" train "$tmp/drop.yaml" --cpus 2 --print-plan
grep -q '^lora: rank 4, alpha 8 (scale 2), dropout 0.05' "$tmp.out" ||
    { echo "--print-plan does not say dropout 0.05"; cat "$tmp.out"; fail=1; }
finish
