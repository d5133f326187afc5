#!/bin/sh
# SPDX-License-Identifier: MIT
# slidedp plan and the step-time model on CPU workers: plan prices the tiny recipe without StarPU
# (its time printed; a sanity bound of 10 s, far above the second it takes, catches a plan that
# starts the runtime or measures), its text and --json forms agree; with this machine calibrated
# (slidedp calibrate), the predicted step lies within a factor of 2 of a measured 5-step run of
# the same recipe (train prints both at the end).  Bad input: a missing, malformed or stale
# calibration file is reported with the file and the fix, and the defaults are used (exit 0);
# a plan that cannot fit the GPU is refused (exit 1) with by how much and which single change
# fits (at length, the saved inputs go to the host unless the recipe chose); bad options exit 2.  A file measured on another machine is the defaults for train (it
# runs here) and the machine plan prices for.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
tiny_recipe | sed -e "s#^  steps: .*#  steps: 5#" > "$tmp/tiny.yaml"
grep -q "^  steps: 5" "$tmp/tiny.yaml" || { echo "recipe edit failed"; fail=1; }

# 1. plan without a calibration: the defaults, text and JSON
t0=$("$py" -c 'import time; print(time.time())')
"$bin" plan "$tmp/tiny.yaml" > "$tmp.out" 2> "$tmp.err" || { echo "plan failed"; cat "$tmp.err"; fail=1; }
t1=$("$py" -c 'import time; print(time.time())')
took=$("$py" -c "print(round($t1 - $t0, 3))")
echo "plan of the tiny recipe: $took s"
"$py" -c "import sys; sys.exit(0 if $took < 10 else 1)" || { echo "plan took $took s"; fail=1; }
for want in "^machine: defaults" "^predicted step: [0-9.]+ s, [0-9]+ tokens/s, bound by " \
    "^what if" "train.chunk_mib: 64" "train.activations: keep" "^group +activation"; do
    grep -qE "$want" "$tmp.out" || { echo "plan's text lacks /$want/"; cat "$tmp.out"; fail=1; }
done
"$bin" plan "$tmp/tiny.yaml" --json > "$tmp.json" 2> /dev/null || fail=1
"$py" - "$tmp.json" "$tmp.out" <<'PYEOF' || fail=1
import json, re, sys
j = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
p = j["predicted"]
step = float(re.search(r"predicted step: ([0-9.]+) s", text).group(1))
checks = {
    "keys": {"model", "gpus", "machine", "predicted", "what_if", "fits"} <= set(j),
    "cpu": j["gpus"] == 0 and j["fits"] is True and not j["calibrated"],
    "same step": abs(p["step_s"] - step) <= 0.0005 + 1e-3 * step,
    "bound": p["bound"] in p["demand_s"] or p["bound"] == "dependencies",
    "whatif": len(j["what_if"]) >= 5 and all("change" in w and w["step_s"] > 0 for w in j["what_if"]),
    "sorted": [w["step_s"] for w in j["what_if"]] == sorted(w["step_s"] for w in j["what_if"]),
}
bad = [k for k, ok in checks.items() if not ok]
print("plan --json: checks failed:", bad) if bad else print("plan --json: all checks hold")
sys.exit(1 if bad else 0)
PYEOF

# 2. calibrated: the prediction against a measured 5-step run, within a factor of 2
"$bin" calibrate --gpus 0 -o "$tmp/machine.json" 2> "$tmp/calib.err" || {
    echo "calibrate failed"; cat "$tmp/calib.err"; fail=1; }
"$bin" train "$tmp/tiny.yaml" --machine "$tmp/machine.json" -q > "$tmp/train.out" 2>&1 || {
    echo "train failed"; cat "$tmp/train.out"; fail=1; }
grep -E "predicted|step time" "$tmp/train.out"
line=$(grep -E "step time: measured [0-9.]+ s .*predicted [0-9.]+ s" "$tmp/train.out")
meas=$(echo "$line" | sed -E 's/.*measured ([0-9.]+) s.*/\1/')
pred=$(echo "$line" | sed -E 's/.*predicted ([0-9.]+) s.*/\1/')
if [ -z "$line" ] || ! "$py" -c "import sys; r = $pred / $meas; print('predicted/measured', round(r, 3)); sys.exit(0 if 0.5 <= r <= 2 else 1)"; then
    echo "the prediction ($pred s) is not within a factor of 2 of the measured step ($meas s)"
    fail=1
fi
grep -q "machine: $tmp/machine.json (calibrated on" "$tmp/train.out" || {
    echo "train did not price on the calibration"; fail=1; }

# 3. bad calibration files: reported, the defaults used
echo "not json" > "$tmp/text.json"
sed -e 's/"host": "[^"]*"/"host": "another-node"/' "$tmp/machine.json" > "$tmp/stale.json"
expect 0 "missing.json: cannot read it.*|hint: run .slidedp calibrate" -- \
    "$bin" plan "$tmp/tiny.yaml" --machine "$tmp/missing.json"
grep -q "^machine: defaults ($tmp/missing.json could not be used)" "$tmp.out" || {
    echo "the defaults not named"; fail=1; }
expect 0 "text.json: line 1" -- "$bin" plan "$tmp/tiny.yaml" --machine "$tmp/text.json"
# another machine's file: train (to run here) takes the defaults; plan prices for that machine
expect 0 "stale.json: measured on host another-node" -- \
    "$bin" train "$tmp/tiny.yaml" --steps 1 -q --machine "$tmp/stale.json"
grep -q "predicted: .*machine: defaults ($tmp/stale.json could not be used)" "$tmp.err" || {
    echo "train did not fall back to the defaults"; fail=1; }
"$bin" plan "$tmp/tiny.yaml" --machine "$tmp/stale.json" > "$tmp.out" 2> "$tmp.err" || fail=1
grep -q "^machine: $tmp/stale.json (calibrated on another-node, another machine than this one)" \
    "$tmp.out" || { echo "plan did not price for the other machine"; cat "$tmp.out"; fail=1; }
"$bin" plan "$tmp/tiny.yaml" --machine "$tmp/machine.json" > "$tmp.out" 2> "$tmp.err" || fail=1
grep -q "^machine: $tmp/machine.json (calibrated on" "$tmp.out" || {
    echo "a good file not used"; cat "$tmp.out"; fail=1; }

# 4. a plan that cannot fit: refused with the excess and the changes that fit
expect 1 "does not fit the GPU: [0-9.]+ GiB a device, [0-9.]+ GiB over the train.gpu_memory_gib limit of 8.00 GiB" -- \
    "$bin" plan --model qwen3-0.6b --batch 16 --gpus 1 --gpu-memory-gib 8 --activations keep
grep -qE "\[hint\] train.activations: recompute fits \(GPU [0-9.]+ GiB" "$tmp.err" || {
    echo "the change that fits not named"; cat "$tmp.err"; fail=1; }

# 4b. at length: where the saved layer inputs pass the GPU limit, the plan keeps them on the host
# itself (the run's choice, sdp_cli_fit_activations) and prices that; not where the recipe chose
# (this host's memory may not hold the run: only the GPU's verdict counts here); the same at 1024
# tokens with as many tokens a micro-batch
for run in "65536 1 offload" "1024 64 offload"; do
    set -- $run
    s=$1 b=$2 want=$3
    "$bin" plan --model qwen3-1.7b --seq "$s" --batch "$b" --gpus 1 --gpu-memory-gib 23 --json \
        > "$tmp/long.json" 2> "$tmp.err"
    if grep -q "does not fit the GPU" "$tmp.err"; then
        echo "the plan at seq $s was refused"; cat "$tmp.err"; fail=1
    fi
    grep -q "(train.activations: $want)" "$tmp.err" || {
        echo "the plan at seq $s did not choose $want"; cat "$tmp.err"; fail=1; }
    "$py" -c "import json, sys; p = json.load(open(sys.argv[1]))['predicted']; \
sys.exit(0 if p['gpu_need_bytes'] <= 23 * 2**30 else 1)" "$tmp/long.json" || {
        echo "the plan at seq $s does not fit 23 GiB"; cat "$tmp/long.json"; fail=1; }
done
expect 1 "does not fit the GPU: [0-9.]+ GiB a device" -- \
    "$bin" plan --model qwen3-1.7b --seq 65536 --batch 1 --gpus 1 --gpu-memory-gib 23 \
    --activations recompute

# the workspaces at length (models/workspace.c): the plan's GPU figure counts the attention
# backward's cuDNN call of the rows its budget allows and the LM head's logits block, so it moves
# by the bytes computed here from the shapes when SDP_ATTENTION_WS_MIB lets all 4 rows into one
# call instead of 1, and when SDP_LMHEAD_BLOCK_MIB shrinks the block from 1024 to 256 MiB
for v in "1 1024" "100000 1024" "1 256"; do
    set -- $v
    SDP_ATTENTION_WS_MIB=$1 SDP_LMHEAD_BLOCK_MIB=$2 "$bin" plan --model qwen3-4b --seq 8192 \
        --batch 4 --micro 4 --gpus 1 --gpu-memory-gib 40 --json > "$tmp/ws_$1_$2.json" 2> "$tmp.err"
    if grep -q "does not fit the GPU" "$tmp.err"; then # the host's verdict does not count here
        echo "plan with workspaces $v refused"; cat "$tmp.err"; fail=1
    fi
done
"$py" - "$tmp" <<'PYEOF' || fail=1
import json, sys
need = lambda a, b: json.load(open(f"{sys.argv[1]}/ws_{a}_{b}.json"))["predicted"]["gpu_need_bytes"]
NH, HD, T, B, V = 32, 128, 8192, 4, 151936  # qwen3-4b, 4 rows of 8192 tokens
attn = lambda rows: rows * NH * T * (2 * HD * 4 + 4)  # two fp32 accumulators, the softmax sums
up = lambda n: (n + 255) // 256 * 256
lm = lambda block: up(min(B * T, block // (V * 2)) * V * 2) + 2 * up(B * T * 8)
got = {"attention": need(100000, 1024) - need(1, 1024), "lm head": need(1, 1024) - need(1, 256)}
want = {"attention": attn(4) - attn(1), "lm head": lm(1 << 30) - lm(256 << 20)}
bad = [k for k in got if got[k] != want[k]]
for k in got:
    print(f"workspace {k}: the plan moves by {got[k]} bytes, computed {want[k]}")
sys.exit(1 if bad else 0)
PYEOF

# 5. --auto: each layer's placement chosen within the GPU limit, as recipe rows; the rows, put in
# a recipe, give a plan the model prices within the limit; a limit nothing fits is refused
"$bin" plan --model qwen3-0.6b --batch 16 --gpus 1 --gpu-memory-gib 8 --auto > "$tmp.out" \
    2> "$tmp.err"
grep -q "^auto: predicted step [0-9.]* s" "$tmp.out" && grep -q "^  - {layers: 1" "$tmp.out" || {
    echo "plan --auto printed no choice"; cat "$tmp.out" "$tmp.err"; fail=1; }
{ printf 'model: {preset: qwen3-0.6b}\ndata: {train: %s/data/kjv/val.tok}\n' "$top"
  printf 'batch: {global: 16, micro: 16}\ntrain: {gpus: 1, gpu_memory_gib: 8}\n'
  printf 'optimizer: {max_grad_norm: 0}\n'
  sed -n '/^plan:$/,$p' "$tmp.out"; } > "$tmp/auto.yaml"
"$bin" plan "$tmp/auto.yaml" --json 2> /dev/null > "$tmp/auto.json"
"$py" -c "import json, sys; p = json.load(open(sys.argv[1]))['predicted']; \
sys.exit(0 if p['gpu_need_bytes'] <= 8 * 2**30 <= p['gpu_bytes'] else 1)" "$tmp/auto.json" || {
    echo "the chosen rows do not fit 8 GiB"; cat "$tmp/auto.yaml"; fail=1; }
expect 1 "no placement fits 1.00 GiB a GPU: the least needs [0-9.]+ GiB" -- \
    "$bin" plan --model qwen3-0.6b --batch 16 --gpus 1 --gpu-memory-gib 1 --auto
expect 2 "drop --json" -- "$bin" plan --model qwen3-0.6b --gpus 1 --auto --json
# without a limit the budget is the share of the device StarPU allocates from: 0.9 of the
# reference H200's 143771 MiB (no machine file: the defaults; on a GPU host, its GPU's memory)
if [ "$(ngpus)" = 0 ]; then
    "$bin" plan --model qwen3-0.6b --batch 16 --gpus 1 --auto 2> /dev/null |
        grep -q "^auto: per-layer activation placements chosen within 126.36 GiB a GPU" ||
        { echo "plan --auto without a limit: not 0.9 of the device's memory"; fail=1; }
fi

# 5b. --auto under a host budget on a GPU (train.host_memory_gib): qwen3-8b's fp32 master and
# moments alone are 91.5 GiB; the first layers' AdamW moves to the GPU (their moments get no host
# pages) until the host's peak fits 90 GiB.  The rows give a plan the model prices within both
# budgets, and one layer fewer on the GPU would not fit; a budget no plan fits is refused
host8() { # GIB [PLAN ROWS FILE]
    printf 'model: {preset: qwen3-8b}\ndata: {train: %s/data/kjv/val.tok}\n' "$top"
    printf 'batch: {global: 32, micro: 32}\n'
    printf 'train: {gpus: 1, grad_dtype: bf16, gpu_memory_gib: 120, host_memory_gib: %s}\n' "$1"
    [ $# -lt 2 ] || cat "$2"
}
host8 90 > "$tmp/h90.yaml"
"$bin" plan "$tmp/h90.yaml" --auto > "$tmp.out" 2> "$tmp.err"
nu=$(sed -n 's/^  - {layers: 1-\([0-9]*\), update: gpu}$/\1/p' "$tmp.out")
if [ -z "$nu" ]; then
    echo "plan --auto under 90 GiB of host moved no update to the GPU"; cat "$tmp.out"; fail=1
else
    sed -n '/^plan:$/,$p' "$tmp.out" > "$tmp/rows"
    sed -e "s/layers: 1-$nu, update/layers: 1-$((nu - 1)), update/" "$tmp/rows" > "$tmp/rows1"
    host8 90 "$tmp/rows" > "$tmp/h90-auto.yaml"
    host8 90 "$tmp/rows1" > "$tmp/h90-less.yaml"
    "$bin" plan "$tmp/h90-auto.yaml" --json 2> /dev/null > "$tmp/h.json"
    "$bin" plan "$tmp/h90-less.yaml" --json 2> /dev/null > "$tmp/h1.json"
    "$py" - "$tmp/h.json" "$tmp/h1.json" "$nu" << 'PYEOF' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))["predicted"]
q = json.load(open(sys.argv[2]))["predicted"]
G = 2**30
print("auto under 90 GiB of host: layers 1-%s updated on the GPU, host %.2f GiB, GPU %.2f GiB; "
      "one layer fewer: host %.2f GiB" % (sys.argv[3], p["host_bytes"] / G, p["gpu_need_bytes"] / G,
                                          q["host_bytes"] / G))
# a layer's moments: 8 bytes for each of its 192,946,432 parameters (q, k, v, o, the MLP's three
# projections and the four norms of qwen3-8b)
layer = 8 * (4096 * (4096 + 1024) * 2 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128)
print("one layer's moments: %d bytes on the host, %d predicted" % (layer,
                                                                 q["host_bytes"] - p["host_bytes"]))
sys.exit(0 if p["host_bytes"] <= 90 * G < q["host_bytes"] and p["gpu_need_bytes"] <= 120 * G and
         q["host_bytes"] - p["host_bytes"] == layer else 1)
PYEOF
fi
host8 30 > "$tmp/h30.yaml"
expect 1 "the host's peak is [0-9.]+ GiB with every layer that can updated on the GPU, above the budget of 30.00 GiB" -- \
    "$bin" plan "$tmp/h30.yaml" --auto

# 6. usage errors
expect 2 "give one recipe file, or --model" -- "$bin" plan
expect 2 "unknown model preset 'qwen9'" -- "$bin" plan --model qwen9
expect 2 "must split into" -- "$bin" plan --model qwen3-0.6b --batch 6 --micro 4
expect 2 "" -- "$bin" plan --model qwen3-0.6b --frobnicate
expect 2 "recipe" -- "$bin" plan "$tmp/nonexistent.yaml"
finish
