#!/bin/sh
# train.gpu_update / --gpu-update N without a GPU: the AdamW of layers 1..N runs on the GPU only
# with one rank, compute on a GPU, the bf16 return and the working copies on the host
# (graph/step.c, gpu_updates).  On CPU workers (the micro recipe, 4 layers, 4 steps):
#   - with --gpu-update 2 the run says, in these words, that it does not apply, and its losses and
#     gradient norms are the default run's, bit for bit; its event log has every update on the
#     CPU AdamW lane and tools/check_invariants.py passes it;
#   - the value reaches the graph from the recipe (train.gpu_update: 3 names 3) and the flag wins
#     over the key (--gpu-update 1 names 1); --gpu-update 0 over the key, and the default, say
#     nothing; --gpu-update 4 (every layer) is accepted; `slidedp bench --gpu-update 1` warns the
#     same and records gpu_update 1 in its settings;
#   - --gpu-update with more layers than the model has, or not a number, and a recipe's
#     train.gpu_update below -1 or above the layers are refused with exit code 2 naming the option or
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
# says N: the run's log holds the warning of train.gpu_update N, word for word, once
says() { # NAME N
    n=$(grep -c -F "train.gpu_update $2 does not apply here (it needs one rank, compute on a GPU, \
the bf16 gradient return and the working copies on the host): every update runs on the host" \
        "$tmp/$1.err")
    [ "$n" = 1 ] ||
        { echo "$1: $n warnings of train.gpu_update $2, not 1"; cat "$tmp/$1.err"; fail=1; }
}
quiet() { # NAME: the run's log has no word of gpu_update
    if grep -q "gpu_update" "$tmp/$1.err"; then
        echo "$1: warns about gpu_update"; cat "$tmp/$1.err"; fail=1
    fi
}
says upd 2
quiet base
quiet updbase

# the recipe key reaches the graph, the flag wins over it, 0 turns it off, N = layers is accepted
cp "$tmp/r.yaml" "$tmp/key3.yaml"
printf '  gpu_update: 3\n' >> "$tmp/key3.yaml"
one() { # NAME RECIPE ARGS...: a one-step run
    name=$1 r=$2
    shift 2
    "$bin" train "$r" --cpus 2 -q --steps 1 --grad-dtype bf16 "$@" > /dev/null 2> "$tmp/$name.err" ||
        { echo "$name: training failed"; cat "$tmp/$name.err"; fail=1; }
}
one key3 "$tmp/key3.yaml"
one flag1 "$tmp/key3.yaml" --gpu-update 1
one flag0 "$tmp/key3.yaml" --gpu-update 0
one all4 "$tmp/r.yaml" --gpu-update 4
says key3 3
says flag1 1
quiet flag0
says all4 4
if "$bin" bench --model "$top/tests/ref/data/qwen3-tiny" --batch 4 --micro 2 --seq 32 --steps 1 \
    --warmup 0 --gpus 0 --cpus 2 --grad-dtype bf16 --gpu-update 1 > "$tmp/bench.json" \
    2> "$tmp/bench.err"; then
    says bench 1
    "$py" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["settings"]["gpu_update"] != 1)' \
        "$tmp/bench.json" || { echo "bench: settings.gpu_update is not 1"; cat "$tmp/bench.json"; fail=1; }
else
    echo "bench --gpu-update 1 failed"; cat "$tmp/bench.err"; fail=1
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
casts = [e for e in ev if e.get("name") == "cast" and e.get("step") == 0]
print("%d adamw events, %d not on the CPU AdamW lane; %d chunks" % (len(ups), len(gpu), len(casts)))
ok &= len(casts) > 0 and len(ups) == 4 * len(casts) and not gpu
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
printf '  gpu_update: -2\n' >> "$tmp/neg.yaml"
bad "train.gpu_update: -2" "gpu_update" "$tmp/neg.yaml"
cp "$tmp/r.yaml" "$tmp/big.yaml"
printf '  gpu_update: 9\n' >> "$tmp/big.yaml"
bad "train.gpu_update: 9" "gpu_update" "$tmp/big.yaml"

finish
