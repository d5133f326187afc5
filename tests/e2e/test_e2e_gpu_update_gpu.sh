#!/bin/sh
# train.gpu_update on a GPU (exit 77, skipped, without one): the AdamW of layers 1..N on the GPU
# (codelets/cuda/adamw.cu) gives the host's bits.  The micro recipe with 4 layers and 64 KiB
# chunks, 6 steps on one GPU (the bf16 return), without clipping and with it (max_grad_norm 1.0,
# the coefficient read on the GPU):
#   - the losses and gradient norms with --gpu-update 3 are those with --gpu-update 0, bit for bit;
#   - in its event log every update of layers 1-3 ran on the GPU (lane "GPU compute", each chunk
#     once a step, each followed by its param_put), every other update on the host;
#   - tools/check_invariants.py passes the log.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_gpus 1

micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" -e "s#^  steps: .*#  steps: 6#" \
    -e "s#^  chunk_mib: .*#  chunk_mib: 0.0625#" -e "s#^  precision: .*#  precision: bf16#" \
    > "$tmp/clip.yaml"
sed -e "s#^  max_grad_norm: .*#  max_grad_norm: 0#" "$tmp/clip.yaml" > "$tmp/r.yaml"
run() { # NAME RECIPE ARGS...
    name=$1 r=$2
    shift 2
    if ! timeout 300 "$bin" train "$r" --gpus 1 --cpus 2 -q --sched sdp-slidedp \
        --metrics "$tmp/$name.jsonl" --events "$tmp/$name.ev" "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run host "$tmp/r.yaml" --gpu-update 0
run gpu "$tmp/r.yaml" --gpu-update 3
run clip-host "$tmp/clip.yaml" --gpu-update 0
run clip-gpu "$tmp/clip.yaml" --gpu-update 3

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
    puts = Counter((e["group"], e["step"]) for e in ev if e.get("name") == "param_put")
    groups = sorted({g for g, _ in on_gpu})
    print("%s: updates on the GPU, by (group, step): %d pairs, groups %s; on the host by group: %s"
          % (n, len(on_gpu), groups, dict(sorted(on_host.items()))))
    if groups != [1, 2, 3] or any(g in on_host for g in (1, 2, 3)) or not on_host:
        print("%s: the updates of layers 1-3 are not all on the GPU, or nothing is on the host" % n)
        ok = False
    if any(puts[k] != c for k, c in on_gpu.items()):
        print("%s: a GPU update without its param_put" % n)
        ok = False
sys.exit(0 if ok else 1)
PYEOF
for n in gpu clip-gpu; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$n.ev" > "$tmp/$n.check" 2>&1 ||
        { echo "the checker fails the $n log"; cat "$tmp/$n.check"; fail=1; }
done

finish
