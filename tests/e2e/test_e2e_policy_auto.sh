#!/bin/sh
# train.policy auto on the 4-layer micro model (fp32, 2 CPU workers):
#   - a first run selects (stage 1 the model, stage 2 each placement on the reduced pipeline,
#     stage 3 the corrected choice), validates on its first steps against the recipe's plan, says
#     which carries on and when the selection pays for itself, and keeps the plan in the run
#     directory and the cache; its losses are the fixed policy's bit for bit;
#   - a second run of the same shape takes the cached plan at once (no stage 2);
#   - a run stopped by SIGUSR1 resumes with its own plan and ends on the same losses;
#   - random per-layer placements (every placement, in any order) give the same losses;
#   - a cache file that is not a plan is reported and the selection runs again;
#   - a budget nothing fits is refused before StarPU starts, naming what the run needs, and
#     nothing is written.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" > "$tmp/r.yaml"
args="--steps 12 --checkpoint-every 2 --cpus 2 -q"
export SDP_CACHE_DIR="$tmp/cache"

"$bin" train "$tmp/r.yaml" $args --metrics "$tmp/fixed.jsonl" 2> "$tmp/fixed.err" ||
    { echo "the fixed run failed"; cat "$tmp/fixed.err"; fail=1; }
losses "$tmp/fixed.jsonl" > "$tmp/fixed.loss"

# 1. the selection, the validation, the files
"$bin" train "$tmp/r.yaml" $args --policy auto --output "$tmp/a" --metrics "$tmp/a.jsonl" \
    2> "$tmp/a.err" || { echo "the auto run failed"; cat "$tmp/a.err"; fail=1; }
for want in "auto: stage 1 \(the model\): predicted" "auto: stage 2: 2 layers, every one keep:" \
    "auto: stage 2: 4 layers, every one keep:" "every one offload:" "auto: stage 3" "auto: selection took [0-9.]+ s" \
    "auto: validation: the chosen plan [0-9.]+ s a step, the recipe's [0-9.]+ s" \
    "carries on"; do
    grep -qE "$want" "$tmp/a.err" || { echo "the auto run's log lacks /$want/"; fail=1; }
done
losses "$tmp/a.jsonl" | cmp -s - "$tmp/fixed.loss" ||
    { echo "auto and fixed losses differ"; losses "$tmp/a.jsonl" | diff - "$tmp/fixed.loss"; fail=1; }
"$py" - "$tmp/a/auto-plan.json" "$tmp/cache/plans" <<'PY' || fail=1
import json, os, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "slidedp-auto-plan" and p["validated"] in ("chosen", "the recipe's plan"), p
assert p["selection_s"] > 0 and p["measured_s"] > 0 and p["default_measured_s"] > 0, p
for r in p["rows"]:
    assert 1 <= r["first"] <= r["last"] <= 4, r
    assert r["placement"] in ("keep", "keep-mlp", "selective", "keep-attn", "recompute",
                              "offload"), r
cached = os.listdir(sys.argv[2])
assert len(cached) == 1, cached
assert json.load(open(os.path.join(sys.argv[2], cached[0])))["rows"] == p["rows"]
PY

# 2. the cache: the same shape starts at once
"$bin" train "$tmp/r.yaml" $args --policy auto --metrics "$tmp/b.jsonl" 2> "$tmp/b.err" ||
    { echo "the cached run failed"; cat "$tmp/b.err"; fail=1; }
grep -q "auto: the plan chosen before" "$tmp/b.err" || { echo "no cache hit"; cat "$tmp/b.err"; fail=1; }
grep -q "stage 2" "$tmp/b.err" && { echo "the cached run measured again"; fail=1; }
losses "$tmp/b.jsonl" | cmp -s - "$tmp/fixed.loss" || { echo "cached run: losses differ"; fail=1; }

# 3. a stopped run resumes with its plan
rm -rf "$tmp/cache"
"$bin" train "$tmp/r.yaml" $args --policy auto --output "$tmp/s" --metrics "$tmp/s.jsonl" \
    2> "$tmp/s.err1" &
stop_at_line $! "$tmp/s.jsonl" 8 900 || { echo "the stopped run failed"; cat "$tmp/s.err1"; fail=1; }
rm -rf "$tmp/cache" # the run's own file, not the cache, must carry the plan
"$bin" train "$tmp/r.yaml" $args --policy auto --output "$tmp/s" --metrics "$tmp/s2.jsonl" \
    2> "$tmp/s.err2" || { echo "the resumed run failed"; cat "$tmp/s.err2"; fail=1; }
grep -q "auto: resuming with the run's plan" "$tmp/s.err2" ||
    { echo "the resumed run did not take its plan"; cat "$tmp/s.err2"; fail=1; }
grep -q "stage 2" "$tmp/s.err2" && { echo "the resumed run selected again"; fail=1; }
cat "$tmp/s.jsonl" "$tmp/s2.jsonl" > "$tmp/s-all.jsonl"
losses "$tmp/s-all.jsonl" | sort -n | uniq | cmp -s - "$tmp/fixed.loss" ||
    { echo "stopped and resumed: losses differ"; fail=1; }

# 4. random placements, every one of them, in any order: the six shuffled over two runs of the
# four layers
for part in 0 1; do
    "$py" - "$part" > "$tmp/rows" <<'PY'
import random, sys
rnd = random.Random(20261206)
opts = ["keep", "keep-mlp", "selective", "keep-attn", "recompute", "offload"]
rnd.shuffle(opts)
picks = opts[:4] if sys.argv[1] == "0" else opts[4:] + rnd.sample(opts[:4], 2)
print("plan:")
for l, o in enumerate(picks, 1):
    act = {"offload": "recompute"}.get(o, o)
    off = ", offload: on" if act != o else ""
    print("  - {layers: %d, activations: %s%s}" % (l, act, off))
PY
    cat "$tmp/r.yaml" "$tmp/rows" > "$tmp/rand.yaml"
    "$bin" train "$tmp/rand.yaml" $args --metrics "$tmp/rand.jsonl" 2> "$tmp/rand.err" ||
        { echo "the random plan's run failed"; cat "$tmp/rand.err"; fail=1; }
    losses "$tmp/rand.jsonl" | cmp -s - "$tmp/fixed.loss" ||
        { echo "random placements: losses differ"; cat "$tmp/rows"; fail=1; }
done

# 5. a cache file that is not a plan: reported, chosen again
mkdir -p "$tmp/c5/plans"
export SDP_CACHE_DIR="$tmp/c5"
"$bin" train "$tmp/r.yaml" $args --steps 2 --policy auto 2> /dev/null || fail=1
f=$(ls "$tmp/c5/plans/"*.json)
echo "not json" > "$f"
"$bin" train "$tmp/r.yaml" $args --steps 2 --policy auto 2> "$tmp/c5.err" ||
    { echo "a bad cache file failed the run"; cat "$tmp/c5.err"; fail=1; }
grep -q "auto plan .*: line 1: .*choosing again" "$tmp/c5.err" && grep -q "stage 2" "$tmp/c5.err" ||
    { echo "a bad cache file not reported"; cat "$tmp/c5.err"; fail=1; }

# 6. a budget nothing fits: refused before StarPU, naming what the run needs, nothing written (on
# CPU workers the host's budget; the GPU's is plan --auto's, tests/e2e/test_e2e_plan_predict.sh)
rm -rf "$tmp/c5"
sed -e 's/^train:$/train:\n  host_memory_gib: 0.01/' "$tmp/r.yaml" > "$tmp/small.yaml"
expect 1 "the run needs about [0-9.]+ GiB of host memory" -- \
    "$bin" train "$tmp/small.yaml" $args --policy auto --output "$tmp/none"
grep -q "StarPU" "$tmp.err" && { echo "StarPU started before the refusal"; fail=1; }
[ -e "$tmp/none" ] && { echo "the refused run wrote its directory"; fail=1; }
finish
