#!/bin/sh
# The bf16 gradient return (train.grad_dtype: bf16): each group's final fp32 gradient is packed in
# one task into per-chunk squared norms and bf16 chunks, which AdamW reads.  On a 4-layer model
# with 1 MiB chunks (the embedding in 19 of them) trained 6 steps on 2 CPU workers:
#   - step 1's loss and gradient norm are bit-identical to the fp32 return's (the same forward, and
#     the pack's norms use sumsq's kernel on the same elements); the later losses stay within 1e-4
#     relative of it, and at least one differs (the updates did read bf16 gradients);
#   - the losses are bit-identical under the policies sdp-slidedp, eager and lws (an ordering bug
#     between the pack and the next step's zeroing shows up as a difference here);
#   - tools/check_invariants.py passes the event log, which holds one pack per group and step, and
#     fails it once a zeroing or an update is moved before its pack;
#   - bf16 with two ranks, and an unknown dtype, are refused with exit code 2 naming the key;
#   - auto (the default, also as --grad-dtype auto) returns bf16 only for one rank on a GPU: without
#     a GPU its losses are the fp32 return's, bit for bit, and its event log has no pack; with two
#     ranks it trains (fp32; on CPU ranks where there is one GPU).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

# the micro recipe with 4 layers and 6 steps, the data path made absolute, plus the lines $2
micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" -e "s#^  steps: .*#  steps: 6#" \
    > "$tmp/base.yaml"
recipe() { # FILE LINES
    cp "$tmp/base.yaml" "$1"
    printf '%s\n' "$2" >> "$1"
}

recipe "$tmp/f32.yaml" "  grad_dtype: fp32"
recipe "$tmp/b16.yaml" "  grad_dtype: bf16"
recipe "$tmp/auto.yaml" ""
run() { # NAME RECIPE ARGS...
    name=$1 r=$2
    shift 2
    if ! "$bin" train "$r" --cpus 2 -q --metrics "$tmp/$name.jsonl" "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run f32 "$tmp/f32.yaml"
run b16 "$tmp/b16.yaml" --events "$tmp/b16.events"
run b16-eager "$tmp/b16.yaml" --sched eager
run b16-lws "$tmp/b16.yaml" --sched lws
run b16-flag "$tmp/f32.yaml" --grad-dtype bf16
run auto "$tmp/auto.yaml" --events "$tmp/auto.events"
run auto-flag "$tmp/b16.yaml" --grad-dtype auto --events "$tmp/auto-flag.events"
ngpu=$(ngpus)
# two ranks need two GPUs where there are GPUs: with one, the two ranks are CPU workers
r2gpus=
[ "$ngpu" -eq 1 ] && r2gpus="--gpus 0"
run auto-r2 "$tmp/auto.yaml" --ranks 2 $r2gpus

"$py" - "$tmp" "$ngpu" <<'PYEOF' || fail=1
import json, sys
tmp, ngpu = sys.argv[1], int(sys.argv[2])
def load(name):
    return [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, name))]
f, b = load("f32"), load("b16")
ok = len(f) == 6 and len(b) == 6
print("fp32 return:", [x["loss"] for x in f])
print("bf16 return:", [x["loss"] for x in b])
if ok and (f[0]["loss"] != b[0]["loss"] or f[0]["grad_norm"] != b[0]["grad_norm"]):
    print("step 1: loss or gradient norm differs (%r %r / %r %r)"
          % (f[0]["loss"], b[0]["loss"], f[0]["grad_norm"], b[0]["grad_norm"]))
    ok = False
rel = [abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(f, b)]
print("largest relative loss difference: %.2e" % max(rel))
if max(rel) > 1e-4:
    ok = False
if all(r == 0 for r in rel):
    print("every loss is bit-identical to the fp32 return's: the bf16 gradients were not used")
    ok = False
for other in ("b16-eager", "b16-lws", "b16-flag"):
    o = load(other)
    if [x["loss"] for x in o] != [x["loss"] for x in b]:
        print("%s: losses differ from the default policy's: %r" % (other, [x["loss"] for x in o]))
        ok = False
# auto: the bf16 return on a GPU, else the fp32 return
for name in ("auto", "auto-flag"):
    packs = sum(1 for l in open("%s/%s.events" % (tmp, name)) if '"grad_pack"' in l)
    print("%s (%d GPUs): %d gradient packs" % (name, ngpu, packs))
    if (packs > 0) != (ngpu > 0):
        print("%s: %s" % (name, "a GPU run without the bf16 return" if ngpu else
                          "a CPU run packed its gradients"))
        ok = False
    if ngpu == 0 and [x["loss"] for x in load(name)] != [x["loss"] for x in f]:
        print("%s without a GPU: losses differ from the fp32 return's" % name)
        ok = False
if len(load("auto-r2")) != 6:
    print("auto with two ranks: %d steps" % len(load("auto-r2")))
    ok = False
sys.exit(0 if ok else 1)
PYEOF

"$py" "$top/tools/check_invariants.py" "$tmp/b16.events" > "$tmp/check" 2>&1 ||
    { echo "the checker fails the bf16 run"; tail -n 5 "$tmp/check"; fail=1; }
cat "$tmp/check"
# 6 groups (embedding, 4 layers, head) x 6 steps
grep -q "updates, 36 gradient packs" "$tmp/check" || { echo "expected 36 gradient packs"; fail=1; }

# the checker's pack rules are not vacuous: a log whose step-1 zeroing of a group starts before
# the step-0 pack of that group ended, or whose update starts before its pack ended, fails
for broken in zero update; do
    "$py" - "$tmp/b16.events" "$tmp/broken-$broken.events" "$broken" <<'PYEOF' || fail=1
import json, sys
src, dst, what = sys.argv[1:]
ev = [json.loads(l) for l in open(src)]
pack = next(e for e in ev if e.get("name") == "grad_pack" and e["step"] == 0 and e["group"] == 2)
if what == "zero":
    victim = next(e for e in ev if e.get("name") == "zero" and e["step"] == 1 and e["group"] == 2)
else:
    victim = next(e for e in ev if e.get("phase") == "update" and e["step"] == 0 and e["group"] == 2)
span = victim["end_us"] - victim["start_us"]
victim["start_us"] = pack["start_us"]
victim["end_us"] = pack["start_us"] + span
with open(dst, "w") as f:
    for e in ev:
        f.write(json.dumps(e) + "\n")
PYEOF
    "$py" "$top/tools/check_invariants.py" "$tmp/broken-$broken.events" > "$tmp/cb" 2>&1
    rc=$?
    echo "$broken moved before its pack: $(tail -n 1 "$tmp/cb")"
    [ $rc -eq 1 ] || { echo "the checker must fail a log with the $broken before the pack"; fail=1; }
done

refused() { # WHAT ARGS...: exit code 2 and grad_dtype named
    what=$1
    shift
    "$bin" train "$@" --cpus 2 -q > "$tmp/bad.out" 2>&1
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q grad_dtype "$tmp/bad.out"; then
        echo "$what: exit $rc, want 2 and grad_dtype named"; cat "$tmp/bad.out"; fail=1
    fi
}
refused "bf16 with two ranks" "$tmp/b16.yaml" --ranks 2
recipe "$tmp/bad.yaml" "  grad_dtype: fp16"
refused "grad_dtype fp16" "$tmp/bad.yaml"

finish
