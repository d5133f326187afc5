#!/bin/sh
# LoRA's adapters updated on a GPU (exit 77, skipped, without one): train.gpu_update N puts the
# AdamW of layers 1..N's adapters on the GPU with the layers' GPU update codelet
# (codelets/cuda/adamw.cu, the host's bits), their master and moments kept there.  The micro
# recipe with 4 layers, bf16, rank-4 adapters on every linear, 6 steps on one GPU, without
# clipping and with it (max_grad_norm 1.0, the coefficient read on the GPU):
#   - --print-plan says "adapters, gpu" for layers 1-3 and "adapters" for layer 4;
#   - the losses and gradient norms with --gpu-update 3 are those with --gpu-update 0, bit for bit,
#     and so is the final adapter (its masters written back from the GPU);
#   - in the event log every adapter update of layers 1-3 ran on the GPU (lane "GPU compute", each
#     once a step), layer 4's on the host;
#   - tools/check_invariants.py passes the log.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_gpus 1

{
    micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" -e "s#^  steps: .*#  steps: 6#" \
        -e "s#^  chunk_mib: .*#  chunk_mib: 0.0625#" -e "s#^  precision: .*#  precision: bf16#"
    printf 'lora: {rank: 4, alpha: 8, targets: all-linear}\n'
} > "$tmp/clip.yaml"
sed -e "s#^  max_grad_norm: .*#  max_grad_norm: 0#" "$tmp/clip.yaml" > "$tmp/r.yaml"
run() { # NAME RECIPE ARGS...
    name=$1 r=$2
    shift 2
    if ! timeout 300 "$bin" train "$r" --gpus 1 --cpus 2 -q --sched sdp-slidedp \
        --output "$tmp/$name" --metrics "$tmp/$name.jsonl" --events "$tmp/$name.ev" "$@" \
        2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
"$bin" train "$tmp/r.yaml" --gpus 1 --cpus 2 --gpu-update 3 --print-plan > "$tmp/plan.txt" \
    2> "$tmp/plan.err" || { echo "--print-plan failed"; cat "$tmp/plan.err"; fail=1; }
grep -Eq '^1-3 .* adapters, gpu q_proj' "$tmp/plan.txt" && grep -Eq '^4 .* adapters q_proj' "$tmp/plan.txt" ||
    { echo "the plan does not put layers 1-3's adapter updates on the GPU"; cat "$tmp/plan.txt"; fail=1; }
run host "$tmp/r.yaml" --gpu-update 0
run gpu "$tmp/r.yaml" --gpu-update 3
run clip-host "$tmp/clip.yaml" --gpu-update 0
run clip-gpu "$tmp/clip.yaml" --gpu-update 3
same_adapter() { # A B: the final adapters of runs A and B, byte for byte
    cmp -s "$tmp/$1/final/adapter_model.safetensors" "$tmp/$2/final/adapter_model.safetensors" ||
        { echo "$1 and $2: the final adapters differ"; fail=1; }
}
same_adapter host gpu
same_adapter clip-host clip-gpu

"$py" - "$tmp" <<'PYEOF' || fail=1
import json, sys
from collections import Counter
tmp = sys.argv[1]
def metrics(n):
    return [(x["loss"], x["grad_norm"]) for x in map(json.loads, open("%s/%s.jsonl" % (tmp, n)))]
ok = True
for a, b in (("host", "gpu"), ("clip-host", "clip-gpu")):
    x, y = metrics(a), metrics(b)
    print("%-10s" % a, x)
    print("%-10s" % b, y)
    if len(x) != 6 or x != y:
        print("%s and %s differ" % (a, b))
        ok = False
for n in ("gpu", "clip-gpu"):
    ev = [json.loads(l) for l in open("%s/%s.ev" % (tmp, n))]
    ups = [e for e in ev if e.get("name") == "adamw" and e.get("step", -1) >= 0]
    on_gpu = Counter((e["group"], e["step"]) for e in ups if e.get("lane") == "GPU compute")
    on_host = Counter(e["group"] for e in ups if e.get("lane") == "CPU AdamW")
    groups = sorted({g for g, _ in on_gpu})
    print("%s: adapter updates on the GPU, by (group, step): %d pairs, groups %s; on the host by "
          "group: %s" % (n, len(on_gpu), groups, dict(sorted(on_host.items()))))
    if groups != [1, 2, 3] or len(on_gpu) != 18 or set(on_host) != {4}:
        print("%s: layers 1-3's adapter updates are not all on the GPU, or layer 4's not on the host"
              % n)
        ok = False
sys.exit(0 if ok else 1)
PYEOF
for n in gpu clip-gpu; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$n.ev" > "$tmp/$n.check" 2>&1 ||
        { echo "the checker fails the $n log"; tail -n 5 "$tmp/$n.check"; fail=1; }
done

finish
