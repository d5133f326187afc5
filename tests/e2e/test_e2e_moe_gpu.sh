#!/bin/sh
# SPDX-License-Identifier: MIT
# A tiny Qwen3-MoE trained with the compute on one GPU against the same steps on CPU workers
# (exit 77, skipped, without a GPU or without torch, transformers and safetensors, which write
# the model).  The model is tests/e2e/test_e2e_moe_train.sh's `slidedp train` one
# (tests/e2e/moe_train.py cli: 3 layers, the middle one dense by mlp_only_layers, 8 experts,
# top-2, norm_topk_prob, the load-balancing loss; hidden 32, Qwen3's vocabulary), 8 steps of 2
# micro-batches of 2 sequences of 16 tokens on the bundled text, fp32 unless said:
#   - every step's loss on the GPU is the CPU workers' within the bounds derived below;
#   - in the GPU run's event log every moe_fwd, moe_bwd and moe_aux ran on a CUDA worker, the
#     step's forward ran moe_fwd once per sparse layer and micro-batch and the backward moe_bwd
#     as often (so the sparse layers cannot have run on the CPU), and the CPU run's all on CPU
#     workers;
#   - with the bf16 gradient return (the update on the GPU needs it), --gpu-update 3 gives the
#     losses and norms of --gpu-update 0 bit for bit (the GPU's AdamW gives the host's bits,
#     test_e2e_gpu_update_gpu.sh), and its log holds the dense layer's (group 2) updates on the
#     GPU, the sparse layers' (groups 1 and 3) on the host, whose AdamW skips the experts without
#     token (graph/plan.c);
#   - routed streaming (chunks of 8 KiB, so that the sparse layers' experts fill chunks of their
#     own): the GPU run fetches fewer chunks of the sparse layers than the same run with
#     SDP_MOE_ROUTED=off and every group's chunks fetched one by one (SDP_CHUNK_PIPELINE=on),
#     with the same losses bit for bit; every compute copy starts as NaN
#     (SDP_POISON_COMPUTE_COPY), so that a routed expert left uncopied would show;
#   - LoRA (rank 4 on q, k, v and o, the experts and the router frozen, a window of 1): the
#     GPU's losses are the CPU workers' within the same bounds, its MoE tasks ran on the CUDA
#     worker, and routed streaming fetched fewer chunks of the sparse layers than there are;
#   - the routed return (grad_routed, --print-plan's f32/r and bf16/r): the sparse layers'
#     gradient chunks come down less the experts without token, whose host ranges stay NaN; the
#     fp32 and the bf16 return give the unrouted runs' losses and norms bit for bit;
#   - tools/check_invariants.py passes the GPU runs' logs.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_gpus 1
need_python torch transformers safetensors

"$py" "$top/tests/e2e/moe_train.py" cli "$tmp/cli" || { echo "moe_train.py cli failed"; finish; }
cat > "$tmp/moe.yaml" << EOF
model:
  path: $tmp/cli
data:
  train: $top/data/kjv/val.tok
  seq_len: 16
batch:
  global: 4
  micro: 2
optimizer:
  lr: 1.0e-2
train:
  steps: 8
  precision: fp32
  chunk_mib: 0.0078125
EOF
SDP_POISON_COMPUTE_COPY=1
export SDP_POISON_COMPUTE_COPY
run() { # NAME GPUS ARGS...
    name=$1 gpus=$2
    shift 2
    if ! timeout 300 "$bin" train "${recipe:-$tmp/moe.yaml}" --gpus "$gpus" --cpus 2 -q --output "$tmp/$name" \
        --metrics "$tmp/$name.jsonl" --events "$tmp/$name.ev" "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run cpu 0
run gpu 1
run up0 1 --grad-dtype bf16 --gpu-update 0
run up3 1 --grad-dtype bf16 --gpu-update 3
SDP_MOE_ROUTED=off SDP_CHUNK_PIPELINE=on # every chunk fetched on its own (param_chunk)
export SDP_MOE_ROUTED SDP_CHUNK_PIPELINE
run all 1
run up0all 1 --grad-dtype bf16 --gpu-update 0
unset SDP_MOE_ROUTED SDP_CHUNK_PIPELINE
# the routed return (grad_routed): f32/r and bf16/r on the sparse layers (1 and 3); unrouted,
# f32/c and bf16
plan() { # NAME WANT ARGS...
    n=$1 want=$2
    shift 2
    "$bin" train "$tmp/moe.yaml" --gpus 1 --cpus 2 --print-plan "$@" > "$tmp/$n.plan" 2> /dev/null
    grep -Eq "^1 .* cpu +$want " "$tmp/$n.plan" && grep -Eq "^3 .* cpu +$want " "$tmp/$n.plan" ||
        { echo "$n: --print-plan: expected $want on the sparse layers"; cat "$tmp/$n.plan"; fail=1; }
}
plan gpu f32/r
plan up0 bf16/r --grad-dtype bf16
export SDP_MOE_ROUTED=off SDP_CHUNK_PIPELINE=on
plan all f32/c
plan up0all bf16 --grad-dtype bf16
unset SDP_MOE_ROUTED SDP_CHUNK_PIPELINE
# LoRA under a window of 1: without a bounded window the frozen experts stay on the GPU, unrouted
printf 'lora:\n  rank: 4\n  alpha: 8\n  targets: [q_proj, k_proj, v_proj, o_proj]\n' |
    cat "$tmp/moe.yaml" - | sed -e 's/^train:$/&\n  window: 1/' > "$tmp/lora.yaml"
recipe=$tmp/lora.yaml
run lcpu 0
run lgpu 1
recipe=
[ $fail = 0 ] || finish

# The tolerances.  fp32 on both sides: the GPU path keeps fp32 weights and activations here
# (train.precision fp32; codelets/moe_cuda.c widens only bf16 operands; every GEMM, the dense
# layers' cuBLASLt and the experts' cuBLAS, is pedantic fp32, never TF32), so the runs differ only
# by the order of fp32 sums (and the last bit of expf/rsqrtf).  A sum of n terms in another order
# differs by about sqrt(n) u of the sum of the terms' magnitudes (u = 2^-24 = 6e-8; the
# probabilistic bound of rounding errors, the deterministic one n u being far too loose here).
# Step 1's loss: the longest reduction is the cross-entropy's log-sum-exp over the 151936
# vocabulary: sqrt(151936) u = 2.3e-5 relative on the sum of exponentials, so 2.3e-5 absolute on
# the loss (~12): 2e-6 relative.  The ~20 chained reductions before it are short (hidden 32,
# intermediate 64, experts' 16, 16 positions, 8 experts): sqrt(64) u = 5e-7 each, sqrt(20) times
# that = 2e-6 relative on logits below 1 in magnitude, under 2e-7 on the loss.  Step 1: 1e-5, two
# to five times the sum of those.  Later steps: AdamW moves each weight by about lr times
# m/sqrt(v), which a gradient's relative error ~1e-5 changes by as little except where a
# gradient is near zero; the dense parity test's bound for 10 AdamW steps, 1e-4
# (tests/e2e/test_e2e_hf_parity.c), serves for the 8 here.  The bound can fail: the same steps
# with bf16 working copies (u = 2^-8) on CPU workers leave step 1 within 4e-6 (the loss is
# log V at initialisation) but move the losses of steps 4 to 8 by 5e-4 to 4e-3 from fp32's; a
# routing flip (a top-2 choice whose probabilities tie to 1e-6) would also show.
"$py" - "$tmp" <<'PYEOF' || fail=1
import json, sys
from collections import Counter
tmp = sys.argv[1]
STEPS, MICRO, SPARSE = 8, 2, 2  # steps, micro-batches a step, sparse layers (0 and 2)
FIRST_RTOL, STEPS_RTOL = 1e-5, 1e-4
ok = True
loss = {n: [json.loads(l)["loss"] for l in open("%s/%s.jsonl" % (tmp, n))]
        for n in ("cpu", "gpu", "lcpu", "lgpu")}
for c_run, g_run in (("cpu", "gpu"), ("lcpu", "lgpu")):
    if len(loss[c_run]) != STEPS or len(loss[g_run]) != STEPS:
        print("expected %d steps, got %d (%s) and %d (%s)"
              % (STEPS, len(loss[c_run]), c_run, len(loss[g_run]), g_run))
        sys.exit(1)
    worst = 0.0
    for s, (c, g) in enumerate(zip(loss[c_run], loss[g_run])):
        rel = abs(g - c) / abs(c)
        tol = FIRST_RTOL if s == 0 else STEPS_RTOL
        worst = max(worst, rel)
        print("%s step %d: cpu %.8f gpu %.8f relative %.2e (bound %.0e)"
              % (g_run, s + 1, c, g, rel, tol))
        if not rel <= tol:
            print("  step %d: the GPU's loss is outside the bound" % (s + 1))
            ok = False
    print("%s: largest relative difference of the losses: %.2e" % (g_run, worst))
for n, kind in (("gpu", "CUDA"), ("cpu", "CPU"), ("lgpu", "CUDA")):
    ev = [json.loads(l) for l in open("%s/%s.ev" % (tmp, n))]
    moe = [e for e in ev if e.get("name") in ("moe_fwd", "moe_bwd", "moe_aux")]
    where = Counter((e["name"], e["kind"]) for e in moe)
    fwd = sum(1 for e in moe if e["name"] == "moe_fwd" and e.get("phase") == "fwd")
    bwd = sum(1 for e in moe if e["name"] == "moe_bwd")
    print("%s: the sparse layers' tasks by worker kind: %s; step forwards %d, backwards %d"
          % (n, dict(sorted(where.items())), fwd, bwd))
    if any(e["kind"] != kind for e in moe):
        print("%s: a sparse layer's task ran outside the %s workers" % (n, kind))
        ok = False
    if fwd != STEPS * MICRO * SPARSE or bwd != STEPS * MICRO * SPARSE:
        print("%s: expected %d moe_fwd in the forward and %d moe_bwd"
              % (n, STEPS * MICRO * SPARSE, STEPS * MICRO * SPARSE))
        ok = False
up = {n: [(x["loss"], x["grad_norm"]) for x in map(json.loads, open("%s/%s.jsonl" % (tmp, n)))]
      for n in ("up0", "up3")}
print("gpu-update 0:", up["up0"])
print("gpu-update 3:", up["up3"])
if len(up["up0"]) != STEPS or up["up0"] != up["up3"]:
    print("--gpu-update 3 does not give --gpu-update 0's losses and norms")
    ok = False
ev = [json.loads(l) for l in open("%s/up3.ev" % tmp)]
ups = Counter((e["group"], e.get("lane")) for e in ev
              if e.get("name") == "adamw" and e.get("step", -1) >= 0)
print("gpu-update 3: updates by (group, lane): %s" % dict(sorted(ups.items())))
on_gpu = {g for g, lane in ups if lane == "GPU compute"}
if on_gpu != {2} or not all((g, "CPU AdamW") in ups for g in (1, 3)):
    print("gpu-update 3: expected the dense layer's updates on the GPU, the sparse layers' on "
          "the host")
    ok = False
fetched = {}
for n in ("gpu", "all", "lgpu"):
    ev = [json.loads(l) for l in open("%s/%s.ev" % (tmp, n))]
    fetched[n] = Counter(e["group"] for e in ev if e.get("name") == "param_chunk"
                         and e.get("step") == 1 and e.get("group") in (1, 3))
print("chunks of the sparse layers fetched at step 2: routed %s, every expert %s"
      % (dict(sorted(fetched["gpu"].items())), dict(sorted(fetched["all"].items()))))
print("LoRA: chunks of the sparse layers fetched at step 2: %s" % dict(sorted(fetched["lgpu"].items())))
if not all(0 < fetched[n][g] < fetched["all"][g] for g in (1, 3) for n in ("gpu", "lgpu")):
    print("routed streaming: expected fewer chunks of each sparse layer than with every expert")
    ok = False
routed_all = [json.loads(l)["loss"] for l in open("%s/all.jsonl" % tmp)]
if routed_all != loss["gpu"]:
    print("SDP_MOE_ROUTED=off changes the GPU's losses: %s against %s" % (routed_all, loss["gpu"]))
    ok = False
up0all = [(x["loss"], x["grad_norm"]) for x in map(json.loads, open("%s/up0all.jsonl" % tmp))]
print("bf16 return routed: %s the unrouted run's losses and norms"
      % ("the same bits as" if up0all == up["up0"] else "NOT"))
ok = ok and up0all == up["up0"]
sys.exit(0 if ok else 1)
PYEOF
for n in gpu up3 all lgpu; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$n.ev" > "$tmp/$n.check" 2>&1 ||
        { echo "the checker fails the $n run's log"; cat "$tmp/$n.check"; fail=1; }
done
finish
