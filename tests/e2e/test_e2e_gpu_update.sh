#!/bin/sh
# train.gpu_update / --gpu-update N without a GPU: the AdamW of layers 1..N runs on the GPU only
# with one rank, compute on a GPU, the bf16 return and the working copies on the host
# (graph/step.c, gpu_updates).  On CPU workers (the micro recipe, 4 layers, 4 steps):
#   - with --gpu-update 2 the run says that it does not apply, and its losses and gradient norms
#     are the default run's, bit for bit; its event log has no update on a CUDA worker and
#     tools/check_invariants.py passes it;
#   - --gpu-update with more layers than the model has, or not a number, and a recipe's
#     train.gpu_update of -1 or above the layers are refused with exit code 2 naming the option or
#     the key.
# tests/e2e/test_e2e_gpu_update_gpu.sh checks it on a GPU.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" > "$tmp/r.yaml"
run() { # NAME ARGS...
    name=$1
    shift
    if ! "$bin" train "$tmp/r.yaml" --cpus 2 -q --metrics "$tmp/$name.jsonl" \
        --events "$tmp/$name.ev" "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run base
run upd --gpu-update 2 --grad-dtype bf16
run updbase --grad-dtype bf16
grep -q "gpu_update 2 does not apply here" "$tmp/upd.err" ||
    { echo "--gpu-update 2 on CPU workers: no 'does not apply' line"; cat "$tmp/upd.err"; fail=1; }
if grep -q "does not apply" "$tmp/base.err"; then
    echo "the default run warns about gpu_update"; fail=1
fi

"$py" - "$tmp" <<'PYEOF' || fail=1
import json, sys
tmp = sys.argv[1]
def metrics(n):
    return [(x["loss"], x["grad_norm"]) for x in map(json.loads, open("%s/%s.jsonl" % (tmp, n)))]
a, b = metrics("upd"), metrics("updbase")
print("--gpu-update 2:", a)
print("without:       ", b)
ok = len(a) == 4 and a == b
if a != b:
    print("the losses or norms differ")
ev = [json.loads(l) for l in open(tmp + "/upd.ev")]
ups = [e for e in ev if e.get("name") == "adamw"]
gpu = [e for e in ups if e.get("lane") != "CPU AdamW"]
print("%d adamw events, %d not on the CPU AdamW lane" % (len(ups), len(gpu)))
ok &= len(ups) > 0 and not gpu
sys.exit(0 if ok else 1)
PYEOF
"$py" "$top/tools/check_invariants.py" "$tmp/upd.ev" > "$tmp/check.txt" 2>&1 ||
    { echo "the checker fails the --gpu-update log"; cat "$tmp/check.txt"; fail=1; }

bad() { # WHAT WORD ARGS...
    what=$1 word=$2
    shift 2
    "$bin" train "$@" -q --steps 1 --cpus 2 > /dev/null 2> "$tmp/bad.err"
    st=$?
    [ $st -eq 2 ] && grep -q -- "$word" "$tmp/bad.err" ||
        { echo "$what: exit $st, not 2 naming $word"; cat "$tmp/bad.err"; fail=1; }
}
bad "--gpu-update 5 (4 layers)" "--gpu-update" "$tmp/r.yaml" --gpu-update 5
bad "--gpu-update x" "--gpu-update" "$tmp/r.yaml" --gpu-update x
cp "$tmp/r.yaml" "$tmp/neg.yaml"
printf '  gpu_update: -1\n' >> "$tmp/neg.yaml"
bad "train.gpu_update: -1" "gpu_update" "$tmp/neg.yaml"
cp "$tmp/r.yaml" "$tmp/big.yaml"
printf '  gpu_update: 9\n' >> "$tmp/big.yaml"
bad "train.gpu_update: 9" "gpu_update" "$tmp/big.yaml"

finish
