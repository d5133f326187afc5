#!/bin/sh
# SPDX-License-Identifier: MIT
# A tiny Qwen3-MoE trained on CPU workers (fp32) against transformers' Qwen3MoeForCausalLM: 3
# layers, the middle one dense by mlp_only_layers, 8 experts, top-2, norm_topk_prob,
# output_router_logits.  tests/e2e/moe_train.py writes the model and its references (an expert
# without a token at step 0, printed); the parity program (tests/e2e/test_e2e_hf_parity.c, given
# the directory) checks logits, the loss with the load-balancing loss, every gradient (the idle
# expert's exactly 0) and 10 AdamW steps (each expert skipped in the steps it got no token and
# counting its own steps), with one micro-batch recomputed and kept (the same bits) and with two;
# then the exports of the loaded and the trained weights load in transformers with the same tensors
# and logits; and `slidedp train` of a Qwen3-MoE stopped and resumed gives the losses of an
# uninterrupted run, also with routed streaming (below); several ranks and LoRA on the experts
# are refused, naming why.  Skips (77) without torch, transformers or safetensors.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
prog=$build/tests/e2e/test_e2e_hf_parity
need_python torch transformers safetensors
[ -x "$prog" ] || { echo "missing $prog (make check builds it)"; echo FAIL; exit 1; }
"$py" "$top/tests/e2e/moe_train.py" gen "$tmp/moe" || fail=1
[ $fail = 0 ] && { "$prog" "$tmp/moe" || fail=1; }
[ $fail = 0 ] && { "$py" "$top/tests/e2e/moe_train.py" export "$tmp/moe" || fail=1; }
# slidedp train on a tiny Qwen3-MoE with Qwen3's vocabulary: stopped by SIGUSR1 and resumed, the
# losses are those of an uninterrupted run, bit for bit (the checkpoint keeps the experts' step
# counts; 8 tokens a step leave some experts idle)
"$py" "$top/tests/e2e/moe_train.py" cli "$tmp/cli" || fail=1
cat > "$tmp/moe.yaml" << EOF
model:
  path: $tmp/cli
data:
  train: $top/data/kjv/val.tok
  seq_len: 8
batch:
  global: 1
  micro: 1
optimizer:
  lr: 1.0e-2
train:
  precision: fp32
EOF
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
args="--steps 12 --checkpoint-every 2 --gpus 0 --cpus 2 -q"
"$bin" train "$tmp/moe.yaml" $args --output "$tmp/ref" --metrics "$tmp/ref.jsonl" 2> "$tmp/ref.err" ||
    { echo "uninterrupted run failed"; cat "$tmp/ref.err"; fail=1; }
d=$tmp/stopped
"$bin" train "$tmp/moe.yaml" $args --output "$d" --metrics "$d.jsonl" 2> "$d.err1" &
stop_at_line $! "$d.jsonl" 5
"$bin" train "$tmp/moe.yaml" $args --output "$d" --metrics "$d.jsonl" 2> "$d.err2" ||
    { echo "resumed run failed"; cat "$d.err2"; fail=1; }
grep -q "resuming from" "$d.err2" || { echo "the second run did not resume"; fail=1; }
if [ -s "$tmp/ref.jsonl" ] && [ "$(losses "$tmp/ref.jsonl")" = "$(losses "$d.jsonl")" ]; then
    echo "resumed $(grep -o 'resuming from.*' "$d.err2" | sed 's|.*/||'): 12 losses bit-identical"
    # the metrics' experts_routed (each step's routed experts) add up to the experts' step counts
    "$py" -c 'import glob, json, struct, sys
f = open(sorted(glob.glob(sys.argv[1] + "/*.sdpckpt"))[-1], "rb").read()
h = json.loads(f[64:64 + struct.unpack("<Q", f[16:24])[0]])
print("experts step counts after step %d: %s" % (h["step"], h["expert_steps"]))
m = [json.loads(l) for l in open(sys.argv[2])]
routed, counts = sum(x["experts_routed"] for x in m), sum(map(sum, h["expert_steps"].values()))
print("metrics: %d routed experts in %d steps, of 16 a step; step counts: %d" % (routed, len(m), counts))
sys.exit(0 if routed == counts and all(x["experts"] == 16 for x in m) else 1)' \
        "$tmp/ref/checkpoints" "$tmp/ref.jsonl" || fail=1
else
    echo "resumed run: losses differ from the uninterrupted run"
    diff "$tmp/ref.jsonl" "$d.jsonl" | head
    fail=1
fi
# the run's measured routing (RUN/moe-routing.json): the checkpoint's step counts, in both runs;
# `slidedp plan --moe-routing` prices routed streaming's experts with it: the plan's bytes up a
# step fall from the even router's share to the measured one's, for each sparse layer's experts
for a in "" "--moe-routing $tmp/ref/moe-routing.json"; do
    # shellcheck disable=SC2086 # $a: none or one option and its file
    "$bin" plan "$tmp/moe.yaml" --gpus 1 --chunk-mib 0.0078125 $a --json 2> /dev/null
done > "$tmp/plans.json"
"$py" - "$tmp/ref" "$d" "$tmp/cli/config.json" "$tmp/plans.json" << 'PYEOF' || fail=1
import glob, json, struct, sys
f = open(sorted(glob.glob(sys.argv[1] + "/checkpoints/*.sdpckpt"))[-1], "rb").read()
h = json.loads(f[64:64 + struct.unpack("<Q", f[16:24])[0]])["expert_steps"]
ok = True
for run in sys.argv[1:3]:
    r = json.load(open(run + "/moe-routing.json"))
    got = {str(x["layer"]): x["steps_routed"] for x in r["layers"]}
    print("moe-routing.json of %s: %d steps of %g tokens, %s" % (run.split("/")[-1], r["steps"],
                                                                  r["tokens_per_step"], got))
    ok &= r["steps"] == 12 and r["tokens_per_step"] == 8 and \
        sorted(got.values()) == sorted(h.values())
c = json.load(open(sys.argv[3]))
E, K = c.get("num_experts", c.get("num_local_experts")), c["num_experts_per_tok"]
IM, C = c["moe_intermediate_size"], c["hidden_size"]
even, meas = [json.loads(l)["predicted"]["h2d_bytes"] for l in open(sys.argv[4])]
hits = [v for x in r["layers"] for v in x["steps_routed"]]
share_even = 1 - (1 - K / E) ** 8
share_meas = 1 - sum((1 - v / 12) ** (8 / 8) for v in hits) / len(hits)
want = len(r["layers"]) * E * 3 * IM * C * 4 * (share_even - share_meas)
print("plan: %.1f bytes up a step with an even router (share %.4f), %.1f measured (%.4f): "
      "%.1f less, %.1f computed" % (even, share_even, meas, share_meas, even - meas, want))
sys.exit(0 if ok and abs((even - meas) - want) < 1e-6 * even else 1)
PYEOF
"$bin" plan "$tmp/moe.yaml" --gpus 1 --moe-routing "$top/tests/e2e/data/micro-qwen3.yaml" \
    > /dev/null 2> "$tmp/bad.err"
[ $? = 2 ] && grep -q "micro-qwen3.yaml: line" "$tmp/bad.err" ||
    { echo "--moe-routing with a file that is not one: expected exit 2 naming it"; cat "$tmp/bad.err"; fail=1; }
# routed streaming, on CPU workers with the chunk pipeline (on a GPU by default): the sparse
# layers' (1 and 3) working copies reach the compute copy without their chunks of experts alone,
# each MoE task copies the experts its tokens route to, and the losses are the uninterrupted
# run's, bit for bit; every compute copy starts as NaN (SDP_POISON_COMPUTE_COPY), so a routed
# expert left uncopied makes the step non-finite.  The same with a window of 1, whose forward lets
# layer 1's compute copy go, the recomputation fetching it again: recomputed, the recomputation
# copies the routed experts again; kept (activations: keep), the backward does.  With two
# micro-batches a step, the second copies only the experts the first did not, against the same
# run unrouted.  The fetches keep the event log's invariants; SDP_MOE_ROUTED=off sends every chunk.
# The gradient returns the same way (f32/r): each chunk's copy less the experts without token,
# whose ranges are NaN there (SDP_POISON_COMPUTE_COPY): AdamW must skip them, or the step that
# next routes a token to such an expert turns non-finite; the last checkpoint's tensors are the
# unrouted run's too, bit for bit.
sed -e 's/^  precision: fp32$/&\n  chunk_mib: 0.0078125/' "$tmp/moe.yaml" > "$tmp/routed.yaml"
sed -e 's/^train:$/&\n  window: 1/' "$tmp/routed.yaml" > "$tmp/routed-w1.yaml"
sed -e 's/^train:$/&\n  activations: keep/' "$tmp/routed-w1.yaml" > "$tmp/routed-w1-keep.yaml"
sed -e 's/^  global: 1$/  global: 2/' "$tmp/moe.yaml" > "$tmp/ref2.yaml"
sed -e 's/^  global: 1$/  global: 2/' "$tmp/routed-w1.yaml" > "$tmp/routed-m2.yaml"
"$bin" train "$tmp/ref2.yaml" $args --output "$tmp/ref2" --metrics "$tmp/ref2.jsonl" \
    2> "$tmp/ref2.err" || { echo "2 micro-batches, unrouted: failed"; tail -3 "$tmp/ref2.err"; fail=1; }
for r in routed routed-w1 routed-w1-keep routed-m2; do
    ref=ref
    [ $r = routed-m2 ] && ref=ref2
    SDP_POISON_COMPUTE_COPY=1 SDP_CHUNK_PIPELINE=on "$bin" train "$tmp/$r.yaml" $args \
        --output "$tmp/$r" --metrics "$tmp/$r.jsonl" --events "$tmp/$r.ev" 2> "$tmp/$r.err" ||
        { echo "$r run failed"; tail -3 "$tmp/$r.err"; fail=1; }
    if [ -s "$tmp/$r.jsonl" ] && [ "$(losses "$tmp/$ref.jsonl")" = "$(losses "$tmp/$r.jsonl")" ]; then
        echo "$r streaming: 12 losses bit-identical"
    else
        echo "$r streaming changes the losses"
        fail=1
    fi
done
"$py" - "$tmp/ref/checkpoints" "$tmp/routed/checkpoints" << 'EOF' || fail=1
import glob, json, struct, sys
def tensors(d):
    f = open(sorted(glob.glob(d + "/*.sdpckpt"))[-1], "rb").read()
    n, off, size = struct.unpack("<3Q", f[16:40])  # the header's length, the tensors' place
    return json.loads(f[64:64 + n])["step"], f[off:off + size]
(s0, t0), (s1, t1) = tensors(sys.argv[1]), tensors(sys.argv[2])
print("routed return: last checkpoint (step %d) %s" % (s1, "bit-identical" if t0 == t1 else "differs"))
sys.exit(0 if s0 == s1 == 12 and t0 == t1 else 1)
EOF
"$py" - "$tmp/routed.ev" << 'EOF' || fail=1
import collections, json, sys
n = collections.Counter()
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("name") == "param_chunk" and e.get("step") == 1:
        n[e["group"]] += 1
print("chunks fetched at step 1 by group (1, 3 sparse; 8 chunks each):", dict(sorted(n.items())))
if not (0 < n[1] < 8 and 0 < n[3] < 8 and n[2] == 5):
    sys.exit("the sparse layers' expert chunks were fetched, or a dense layer's were not")
EOF
for r in routed routed-w1; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$r.ev" > "$tmp/$r.check" 2>&1 ||
        { echo "$r streaming: invariants"; tail -5 "$tmp/$r.check"; fail=1; }
    rm -f "$tmp/$r.ev"
done
for m in on off; do
    SDP_MOE_ROUTED=$m SDP_CHUNK_PIPELINE=on "$bin" train "$tmp/routed.yaml" --gpus 0 --cpus 2 \
        --print-plan > "$tmp/plan-$m" 2> /dev/null
done
p=' +recompute +off +host/%s +cpu +f32/%s '
grep -Eq "^1$(printf "$p" r r)" "$tmp/plan-on" && grep -Eq "^2$(printf "$p" c c)" "$tmp/plan-on" &&
    grep -Eq "^1$(printf "$p" c c)" "$tmp/plan-off" ||
    { echo "--print-plan: host/r and f32/r on the sparse layers only, not with SDP_MOE_ROUTED=off"
        cat "$tmp/plan-on" "$tmp/plan-off"; fail=1; }
# refused, naming the reason, the model's directory unchanged: several ranks (the experts' usage
# is marked per rank) and LoRA on a sparse layer's gate_proj (its stacked experts, exit 2)
expect_dir=$tmp/cli
sed -e 's/^  global: 1$/  global: 2/' "$tmp/moe.yaml" > "$tmp/ranks.yaml"
expect 1 "several ranks or nodes: the experts' usage is marked per rank" -- \
    "$bin" train "$tmp/ranks.yaml" --steps 1 --gpus 0 --cpus 2 -q --ranks 2 --output "$tmp/ranks2"
printf 'lora:\n  rank: 4\n  targets: [q_proj, gate_proj]\n' | cat "$tmp/moe.yaml" - > "$tmp/lora.yaml"
expect 2 "gate_proj, up_proj and down_proj of layer 1, a sparse \\(MoE\\) layer" -- \
    "$bin" train "$tmp/lora.yaml" --steps 1 --gpus 0 --cpus 2 -q --output "$tmp/lora"
finish
