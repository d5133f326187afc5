#!/bin/sh
# The early update of the tied embedding (graph/step.c, early_embed): with one rank, the bf16
# gradient return and no clipping, the embedding rows that none of the step's tokens selects are
# packed (grad_pack_early) and updated (adamw_early) as soon as the LM head's backward of the
# step's last micro-batch has run, and the rows of the step's tokens after the embedding's
# backward.  On the tiny recipe (tied, 2 micro-batches, 4 MiB chunks: the embedding in 19 of
# them) without clipping, 4 steps on CPU workers under sdp-slidedp:
#   - the losses and gradient norms are bit-identical with --embed-early on and off (each element
#     gets the same AdamW from the same bf16 gradient; only the order of the tasks changes);
#   - the group's final pack (grad_pack_rows) packs only the rows of the step's tokens for the
#     updates after the embedding's backward; with SDP_ROWS_PACK=off the whole group is packed
#     (grad_pack) and the losses and norms are the same bits;
#   - the log with it holds one grad_pack_early per step and adamw_early events, at least one of
#     which starts before its step's embedding backward ends (the point of it); the log without
#     it holds neither;
#   - tools/check_invariants.py passes both logs, and fails the first one once an early update is
#     moved before its step's LM head backward ends, or once an early update is renamed a plain
#     update (which must wait for the embedding's backward);
#   - with clipping (the recipe's max_grad_norm: 1.0) there is no early update: the updates wait
#     for the global norm anyway;
#   - with the embedding's working copy off the host (--embed-home gpu; --work-home gpu for every
#     copy) the losses and norms are the same bits again; each update writes only its rows into a
#     packed stage, scattered into the copy by param_put_early (one per adamw_early) and
#     param_put_rows (one per step, for every chunk's rows of the step's tokens; no plain param_put
#     of the group after the first casts), and
#     the checker passes those logs, and fails one where an early put is renamed a plain one;
#   - --embed-early with another value, and --embed-home gpu with param_delay 1, are refused with
#     exit code 2.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

tiny_recipe > "$tmp/clip.yaml"
sed -e "s#^  max_grad_norm: .*#  max_grad_norm: 0#" "$tmp/clip.yaml" > "$tmp/r.yaml"
run() { # NAME RECIPE ARGS...
    name=$1 r=$2
    shift 2
    if ! "$bin" train "$r" -q --steps 4 --grad-dtype bf16 --sched sdp-slidedp \
        --metrics "$tmp/$name.jsonl" --events "$tmp/$name.ev" "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run on "$tmp/r.yaml" --embed-early on
run off "$tmp/r.yaml" --embed-early off
run clip "$tmp/clip.yaml"
SDP_ROWS_PACK=off run whole "$tmp/r.yaml" --embed-early on
run emb "$tmp/r.yaml" --embed-home gpu
run all "$tmp/r.yaml" --work-home gpu --embed-home gpu

"$py" - "$tmp" <<'PYEOF' || fail=1
import json, os, sys
tmp = sys.argv[1]
def metrics(n):
    return [(x["loss"], x["grad_norm"]) for x in map(json.loads, open(os.path.join(tmp, n + ".jsonl")))]
def events(n):
    return [json.loads(l) for l in open(os.path.join(tmp, n + ".ev"))]
ok = True
a, b = metrics("on"), metrics("off")
print("with the early update:   ", a)
print("without the early update:", b)
if len(a) != 4 or a != b:
    print("the losses and norms are not bit-identical")
    ok = False
wh = metrics("whole")
print("the whole group packed:  ", wh)
if wh != a:
    print("the losses and norms with SDP_ROWS_PACK=off are not those of the packed rows")
    ok = False
def packs(n, name):
    return sum(1 for e in events(n) if e.get("name") == name and e.get("group") == 0)
print("group 0's grad_pack_rows / grad_pack: %d / %d, with SDP_ROWS_PACK=off %d / %d"
      % (packs("on", "grad_pack_rows"), packs("on", "grad_pack"), packs("whole", "grad_pack_rows"),
         packs("whole", "grad_pack")))
ok = ok and packs("on", "grad_pack_rows") == 4 and packs("on", "grad_pack") == 0
ok = ok and packs("whole", "grad_pack_rows") == 0 and packs("whole", "grad_pack") == 4
for n in ("emb", "all"):
    m = metrics(n)
    print("the embedding's copy off the host (%s):" % n, m)
    if m != a:
        print("the losses and norms of %s are not those of the copy on the host" % n)
        ok = False
    ev = events(n)
    upd = [e for e in ev if e.get("group") == 0 and e.get("phase") == "update"]
    cnt = {k: sum(1 for e in upd if e["name"] == k)
           for k in ("adamw_early", "adamw", "param_put_early", "param_put_rows", "param_put")}
    print("  group 0's updates and puts:", cnt)
    if cnt["param_put"] or cnt["param_put_early"] != cnt["adamw_early"] or \
            cnt["param_put_rows"] != 4 or cnt["adamw_early"] < 4:
        print("  expected one param_put_early per adamw_early, one param_put_rows per step")
        ok = False
    if n == "emb":
        bad = [dict(e) for e in ev]
        k = next(i for i, e in enumerate(bad) if e.get("name") == "param_put_early"
                 and e["start_us"] < max(x["end_us"] for x in ev if x.get("name") == "embedding_bwd"
                                         and x["step"] == e["step"]))
        bad[k]["name"] = "param_put_rows"
        with open(os.path.join(tmp, "putrenamed.ev"), "w") as f:
            for e in bad:
                f.write(json.dumps(e) + "\n")
on, off, clip = events("on"), events("off"), events("clip")
def count(ev, name):
    return sum(1 for e in ev if e.get("name") == name)
print("with it: %d adamw_early, %d grad_pack_early; without it: %d, %d; with clipping: %d, %d"
      % (count(on, "adamw_early"), count(on, "grad_pack_early"), count(off, "adamw_early"),
         count(off, "grad_pack_early"), count(clip, "adamw_early"), count(clip, "grad_pack_early")))
ok = ok and count(on, "grad_pack_early") == 4 and count(on, "adamw_early") >= 4
ok = ok and count(off, "adamw_early") == 0 and count(off, "grad_pack_early") == 0
ok = ok and count(clip, "adamw_early") == 0 and count(clip, "grad_pack_early") == 0
emb_end = {}
for e in on:
    if e.get("name") == "embedding_bwd":
        emb_end[e["step"]] = max(emb_end.get(e["step"], 0), e["end_us"])
ahead = sum(1 for e in on if e.get("name") == "adamw_early" and e["start_us"] < emb_end[e["step"]])
print("early updates started before their step's embedding backward ended: %d" % ahead)
ok = ok and ahead > 0
# the broken logs for the checker: an early update before the LM head's backward; an early
# update (one that ran before the embedding backward ended) named a plain update
lm = {}
for e in on:
    if e.get("name") == "lmhead_ce":
        lm[e["step"]] = min(lm.get(e["step"], 1e300), e["start_us"])
moved, renamed = [dict(e) for e in on], [dict(e) for e in on]
i = next(k for k, e in enumerate(moved) if e.get("name") == "adamw_early")
moved[i]["start_us"] = lm[moved[i]["step"]] - 1.0
j = next(k for k, e in enumerate(renamed) if e.get("name") == "adamw_early"
         and e["start_us"] < emb_end[e["step"]])
renamed[j]["name"] = "adamw"
for n, ev in (("moved", moved), ("renamed", renamed)):
    with open(os.path.join(tmp, n + ".ev"), "w") as f:
        for e in ev:
            f.write(json.dumps(e) + "\n")
sys.exit(0 if ok else 1)
PYEOF
for ev in on off clip whole emb all; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$ev.ev" > "$tmp/check" 2>&1 ||
        { echo "the checker fails the run $ev:"; tail -n 5 "$tmp/check"; fail=1; }
    echo "$ev: $(tail -n 1 "$tmp/check")"
done
for ev in moved renamed putrenamed; do
    if "$py" "$top/tools/check_invariants.py" "$tmp/$ev.ev" > "$tmp/check" 2>&1; then
        echo "the checker passes the broken log ($ev)"; fail=1
    else
        echo "$ev: $(grep -m 1 'invariant 2 violated' "$tmp/check" | cut -c1-160)"
    fi
done
"$bin" train "$tmp/r.yaml" -q --steps 1 --embed-early maybe > /dev/null 2> "$tmp/bad.err"
st=$?
[ $st -eq 2 ] && grep -q "embed-early" "$tmp/bad.err" ||
    { echo "--embed-early maybe: exit $st, not 2 naming the option"; cat "$tmp/bad.err"; fail=1; }
sed -e "s#^train:#train:\n  param_delay: 1#" "$tmp/r.yaml" > "$tmp/delay.yaml"
"$bin" train "$tmp/delay.yaml" -q --steps 1 --embed-home gpu > /dev/null 2> "$tmp/bad.err"
st=$?
[ $st -eq 2 ] && grep -q "embed_home" "$tmp/bad.err" ||
    { echo "--embed-home gpu with param_delay 1: exit $st, not 2 naming the key"; cat "$tmp/bad.err"; fail=1; }

finish
