#!/bin/sh
# The early MLP update (graph/step.c, mlp_early): with one rank, the bf16 gradient return, no
# clipping and the working copies off the host (--work-home gpu), the chunks of a layer that hold
# only its MLP weights are packed (grad_pack_mlp) and updated as soon as the MLP's backward of the
# step's last micro-batch has run, while the attention half of the layer's backward goes on; the
# layer's other chunks are packed after it.
# On the tiny recipe (4 layers, 2 micro-batches) with 64 KiB chunks (a layer in 10 of them, the
# MLP alone in 7), no clipping and --work-home gpu, 4 steps on CPU workers under sdp-slidedp:
#   - the losses and gradient norms are bit-identical with --mlp-early on and off (each chunk gets
#     the same AdamW from the same bf16 gradient; only the order of the tasks changes);
#   - the log with it holds one grad_pack_mlp per layer and step, backward events marked with
#     grad_lim, and updates of MLP chunks that start before their layer's backward ends (the
#     point of it); the log without it holds no grad_pack_mlp and no grad_lim;
#   - tools/check_invariants.py passes both logs, and fails the first one once an update of an
#     MLP chunk is moved before its grad_pack_mlp ends, once a grad_pack_mlp is moved before the
#     MLP backward it packs ends, or once the grad_lim marks are dropped (the attention half's
#     events then count as writers of the MLP chunks);
#   - with the working copies on the host it does not apply by default; with --mlp-early on it
#     applies to layer 1 alone (its update ends the step),
#     whose MLP chunks each take a stage and a stage_put: the same bits again, one grad_pack_mlp a
#     step, one stage_put per such chunk, and the checker passes that log too;
#   - with clipping (the recipe's max_grad_norm: 1.0) there is no grad_pack_mlp;
#   - --mlp-early with another value is refused with exit code 2.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

tiny_recipe | sed -e "s#^  chunk_mib: .*#  chunk_mib: 0.0625#" > "$tmp/clip.yaml"
sed -e "s#^  max_grad_norm: .*#  max_grad_norm: 0#" "$tmp/clip.yaml" > "$tmp/r.yaml"
run() { # NAME RECIPE ARGS...
    name=$1 r=$2
    shift 2
    if ! "$bin" train "$r" -q --steps 4 --grad-dtype bf16 --sched sdp-slidedp \
        --metrics "$tmp/$name.jsonl" --events "$tmp/$name.ev" "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run on "$tmp/r.yaml" --work-home gpu --mlp-early on
run off "$tmp/r.yaml" --work-home gpu --mlp-early off
run clip "$tmp/clip.yaml" --work-home gpu
run host "$tmp/r.yaml" --mlp-early on
run hostoff "$tmp/r.yaml" --mlp-early off
run hostdefault "$tmp/r.yaml"

"$py" - "$tmp" <<'PYEOF' || fail=1
import json, os, sys
tmp = sys.argv[1]
def metrics(n):
    return [(x["loss"], x["grad_norm"]) for x in map(json.loads, open(os.path.join(tmp, n + ".jsonl")))]
def events(n):
    return [json.loads(l) for l in open(os.path.join(tmp, n + ".ev"))]
ok = True
a, b = metrics("on"), metrics("off")
print("with the early MLP update:   ", a)
print("without the early MLP update:", b)
c, d = metrics("host"), metrics("hostoff")
print("on the host, with it:        ", c)
print("on the host, without it:     ", d)
if len(a) != 4 or a != b or len(c) != 4 or c != d:
    print("the losses and norms are not bit-identical")
    ok = False
on, off, clip, host = events("on"), events("off"), events("clip"), events("host")
hostdefault = events("hostdefault")
def count(ev, name):
    return sum(1 for e in ev if e.get("name") == name)
def marked(ev):
    return sum(1 for e in ev if e.get("grad_lim", 0) > 0)
print("grad_pack_mlp with it: %d, without it: %d, with clipping: %d, on the host: %d (layers %s, "
      "%d stage_put); events with grad_lim: %d, %d"
      % (count(on, "grad_pack_mlp"), count(off, "grad_pack_mlp"), count(clip, "grad_pack_mlp"),
         count(host, "grad_pack_mlp"),
         sorted({e["group"] for e in host if e.get("name") == "grad_pack_mlp"}),
         count(host, "stage_put"), marked(on), marked(off)))
ok = ok and count(on, "grad_pack_mlp") == 4 * 4 and marked(on) > 0
ok = ok and count(off, "grad_pack_mlp") == 0 and count(clip, "grad_pack_mlp") == 0
hp = [e for e in host if e.get("name") == "grad_pack_mlp"]
ok = ok and len(hp) == 4 and {e["group"] for e in hp} == {1}
nmlp = sum(1 for e in host if e.get("name") == "adamw" and e["group"] == 1
           and e["chunk"] >= hp[0]["chunk"])
ok = ok and nmlp > 0 and count(host, "stage_put") == nmlp
print("on the host by default: %d grad_pack_mlp" % count(hostdefault, "grad_pack_mlp"))
ok = ok and count(hostdefault, "grad_pack_mlp") == 0
ok = ok and marked(off) == 0
packs = {(e["step"], e["group"]): e for e in on if e.get("name") == "grad_pack_mlp"}
bwd_end = {}
for e in on:
    if e.get("phase") == "bwd":
        k = (e["step"], e["group"])
        bwd_end[k] = max(bwd_end.get(k, 0), e["end_us"])
early = [e for e in on if e.get("name") == "adamw" and (e["step"], e["group"]) in packs
         and e["chunk"] >= packs[(e["step"], e["group"])]["chunk"]]
ahead = [e for e in early if e["start_us"] < bwd_end[(e["step"], e["group"])]]
print("updates of MLP chunks: %d, of which %d started before their layer's backward ended"
      % (len(early), len(ahead)))
ok = ok and len(early) > 0 and len(ahead) > 0
# the broken logs for the checker
moved, packed, unmarked = [dict(e) for e in on], [dict(e) for e in on], [dict(e) for e in on]
u = ahead[0]
p = packs[(u["step"], u["group"])]
i = next(k for k, e in enumerate(moved) if e == u)
moved[i]["start_us"] = p["end_us"] - 1.0
j = next(k for k, e in enumerate(packed) if e == p)
mlp_end = max(e["end_us"] for e in on if e.get("phase") == "bwd" and e["step"] == p["step"]
              and e["group"] == p["group"] and e.get("grad_lim", 0) == 0)
packed[j]["start_us"] = mlp_end - 1.0
for e in unmarked:
    e.pop("grad_lim", None)
for n, ev in (("moved", moved), ("packed", packed), ("unmarked", unmarked)):
    with open(os.path.join(tmp, n + ".ev"), "w") as f:
        for e in ev:
            f.write(json.dumps(e) + "\n")
sys.exit(0 if ok else 1)
PYEOF
for ev in on off clip host hostoff; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$ev.ev" > "$tmp/check" 2>&1 ||
        { echo "the checker fails the run $ev:"; tail -n 5 "$tmp/check"; fail=1; }
    echo "$ev: $(tail -n 1 "$tmp/check")"
done
for ev in moved packed unmarked; do
    if "$py" "$top/tools/check_invariants.py" "$tmp/$ev.ev" > "$tmp/check" 2>&1; then
        echo "the checker passes the broken log ($ev)"; fail=1
    else
        echo "$ev: $(grep -m 1 'invariant 2 violated' "$tmp/check" | cut -c1-160)"
    fi
done
"$bin" train "$tmp/r.yaml" -q --steps 1 --mlp-early maybe > /dev/null 2> "$tmp/bad.err"
st=$?
[ $st -eq 2 ] && grep -q "mlp-early" "$tmp/bad.err" ||
    { echo "--mlp-early maybe: exit $st, not 2 naming the option"; cat "$tmp/bad.err"; fail=1; }

finish
