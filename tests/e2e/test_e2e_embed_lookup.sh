#!/bin/sh
# train.embed_lookup: host (graph/step.c, lookup_host): the forward's embedding lookup runs on the
# CPU workers, from the embedding's working copy on the host, into a buffer per micro-batch in
# parts of whole sequences. On the tiny recipe (tied, 2 micro-batches of 4 sequences), 3 steps
# under sdp-slidedp, on CPU workers (or with GPU=1, as test_e2e_embed_lookup_gpu.sh runs it, with
# the compute on a GPU):
#   - the losses and gradient norms are bit-identical with --embed-lookup host and compute, in
#     fp32 and with bf16 weights and the bf16 return without clipping (the early update of the
#     embedding's rows, and its rows pack, then on too), and with the recipe key; with GPU=1
#     within 1e-6 relative, as two runs of the same settings are (the embedding's backward
#     scatter-adds with atomics on the GPU, so the order of those sums changes from run to run;
#     a second compute run, c32b, shows how much);
#   - the host runs' logs hold one embedding_fwd per part (4 a micro-batch), each on a CPU
#     worker, the compute runs' one a micro-batch; with GPU=1 the compute runs' lookups are on
#     the GPU, and the host runs' logs hold a param_fetch of the embedding's group with the
#     head's key each step (the tied LM head's copy, fetched at the end of the forward);
#   - with the early update (h16, key) train tells the graph each next step's ids, and a step
#     defers its late rows (graph/step.c defer_rows): the logs hold adamw_late events in every
#     step but the last, the next step's lookups start after every plain adamw of the embedding
#     has ended, each micro-batch's embeddings of steps 1 and 2 have an act_fetch (in the
#     activation lane), and the losses and norms are the same bits as with SDP_EMBED_DEFER=off
#     (h16off, no adamw_late, no act_fetch);
#   - tools/check_invariants.py passes every log, and fails h16's once a late update is renamed
#     adamw (a lookup then starts before an update of its rows) or ends after the next step's LM
#     head has started (the head reads every row), and passes h32's with the tied fetch of the
#     head's copy keyed to a group whose update overlaps it (it reads group 0 alone), fails it
#     moved ahead of group 0's last update;
#   - with 2 ranks the lookup stays where the compute runs, with a warning, and the same losses;
#   - --embed-lookup with another value, and the recipe key with another value, exit 2.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
gpu=${GPU:-0}
if [ "$gpu" = 1 ]; then gpus=-1; else gpus=0; fi

tiny_recipe > "$tmp/clip.yaml"
sed -e "s#^  max_grad_norm: .*#  max_grad_norm: 0#" "$tmp/clip.yaml" > "$tmp/r.yaml"
sed -e "s#^train:#train:\n  embed_lookup: host#" "$tmp/r.yaml" > "$tmp/key.yaml"
run() { # NAME RECIPE ARGS...
    name=$1 r=$2
    shift 2
    if ! "$bin" train "$r" -q --steps 3 --gpus "$gpus" --sched sdp-slidedp \
        --metrics "$tmp/$name.jsonl" --events "$tmp/$name.ev" "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run c32 "$tmp/clip.yaml" --embed-lookup compute
[ "$gpu" = 1 ] && run c32b "$tmp/clip.yaml" --embed-lookup compute
run h32 "$tmp/clip.yaml" --embed-lookup host
run c16 "$tmp/r.yaml" --precision bf16 --grad-dtype bf16
run h16 "$tmp/r.yaml" --precision bf16 --grad-dtype bf16 --embed-lookup host
SDP_EMBED_DEFER=off run h16off "$tmp/r.yaml" --precision bf16 --grad-dtype bf16 --embed-lookup host
run key "$tmp/key.yaml" --precision bf16 --grad-dtype bf16
if [ "$gpu" != 1 ]; then
    run c2r "$tmp/clip.yaml" --ranks 2
    run h2r "$tmp/clip.yaml" --ranks 2 --embed-lookup host
    if ! grep -q "embed_lookup host applies with one rank" "$tmp/h2r.err"; then
        echo "2 ranks: no warning that the host lookup does not apply"; cat "$tmp/h2r.err"; fail=1
    fi
fi

"$py" - "$tmp" "$gpu" <<'PYEOF' || fail=1
import json, os, sys
tmp, gpu = sys.argv[1], sys.argv[2] == "1"
def metrics(n):
    return [(x["loss"], x["grad_norm"]) for x in map(json.loads, open(os.path.join(tmp, n + ".jsonl")))]
def events(n):
    return [json.loads(l) for l in open(os.path.join(tmp, n + ".ev"))]
ok = True
pairs = [("c32", "h32"), ("c16", "h16"), ("c16", "key"), ("h16", "h16off")]
pairs += [("c32", "c32b")] if gpu else [("c2r", "h2r")]
def rel(a, b):
    return max(abs(x - y) / max(abs(x), 1e-30) for p, q in zip(a, b) for x, y in zip(p, q))
for c, h in pairs:
    a, b = metrics(c), metrics(h)
    print("%-4s %s\n%-4s %s" % (c, a, h, b))
    if len(a) != 3 or len(b) != 3:
        print("  %s or %s did not log 3 steps" % (c, h))
        ok = False
    elif gpu:
        print("  largest relative difference: %.3g" % rel(a, b))
        if rel(a, b) > 1e-6:
            print("  the losses and norms of %s and %s differ by more than 1e-6" % (c, h))
            ok = False
    elif a != b:
        print("  the losses and norms of %s and %s are not bit-identical" % (c, h))
        ok = False
for n, host in (("c32", 0), ("h32", 1), ("c16", 0), ("h16", 1), ("key", 1)):
    ev = events(n)
    look = [e for e in ev if e.get("name") == "embedding_fwd"]
    kinds = sorted({e.get("kind") for e in look})
    # 3 steps x 2 micro-batches, 4 parts of one sequence each on the host
    want = 24 if host else 6
    print("%s: %d lookups on %s" % (n, len(look), kinds))
    if len(look) != want or (host and kinds != ["CPU"]) or (gpu and not host and kinds != ["CUDA"]):
        print("  expected %d lookups on %s" % (want, "CPU" if host else "CUDA" if gpu else "CPU"))
        ok = False
    if gpu:
        head = max(e["group"] for e in ev if e.get("name") == "rmsnorm_fwd")
        fetch = [e for e in ev if e.get("name") == "param_fetch" and e.get("phase") == "loss"
                 and e.get("group") == head]
        print("  param_fetch with the head's key (group %d): %d" % (head, len(fetch)))
        if len(fetch) != (3 if host else 0):
            print("  expected one a step with the host lookup, none without")
            ok = False
# the late rows (defer_rows)
for n, want in (("h16", True), ("key", True), ("h16off", False)):
    ev = events(n)
    late, fetch = {}, {}
    for e in ev:
        if e.get("name") == "adamw_late":
            late[e["step"]] = late.get(e["step"], 0) + 1
        if e.get("name") == "act_fetch":
            fetch[(e["step"], e["mb"])] = e.get("lane")
    print("%s: adamw_late per step %s, act_fetch %s" % (n, sorted(late.items()), sorted(fetch)))
    if want != (sorted(late) == [0, 1]) or (not want and late):
        print("  expected adamw_late in steps 0 and 1 only" if want else "  expected none")
        ok = False
    if sorted(fetch) != ([(1, 0), (1, 1), (2, 0), (2, 1)] if want else []) or \
            any(l != "activation offload/reload" for l in fetch.values()):
        print("  expected an act_fetch of each micro-batch of steps 1 and 2 in the activation "
              "lane" if want else "  expected no act_fetch")
        ok = False
    for s in (0, 1):
        upd = [e["end_us"] for e in ev if e.get("name") == "adamw" and e["group"] == 0
               and e["step"] == s]
        look = [e["start_us"] for e in ev if e.get("name") == "embedding_fwd" and e["step"] == s + 1]
        if not upd or not look:
            print("  step %d: %d adamw of group 0, step %d: %d lookups: nothing to order"
                  % (s, len(upd), s + 1, len(look)))
            ok = False
        elif min(look) < max(upd):
            print("  a lookup of step %d starts before an adamw of step %d ends" % (s + 1, s))
            ok = False
# broken copies of h16's log: a late update renamed adamw, ending after the next lookup's start;
# a late update ending after the next step's LM head has started
ev = events("h16")
late = max((e for e in ev if e.get("name") == "adamw_late" and e["step"] == 0),
           key=lambda e: e["end_us"])
look1 = min(e["start_us"] for e in ev if e.get("name") == "embedding_fwd" and e["step"] == 1)
head1 = min(e["start_us"] for e in ev if e.get("name") == "lmhead_ce" and e["step"] == 1)
for n, name, end in (("renamed", "adamw", max(late["end_us"], look1 + 1.0)),
                     ("headfirst", "adamw_late", head1 + 1.0)):
    with open(os.path.join(tmp, n + ".ev"), "w") as f:
        for e in ev:
            if e is late:
                e = dict(e, name=name, end_us=end)
            f.write(json.dumps(e) + "\n")
# h32's tied fetch of step 1 (the head's key, the embedding's copy): keyed to a group of its own
# whose update of step 0 overlaps it (tiedok: the checker passes it, since the fetch reads group 0
# alone; a checker that counted it as its key group's reader fails it), and moved before group
# 0's last update of step 0 ends (tiedearly: it fails)
ev = events("h32")
tf = [e for e in ev if e.get("name") == "param_fetch" and e.get("tied") and e["step"] == 1]
up0 = [e for e in ev if e.get("phase") == "update" and e["group"] == 0 and e["step"] == 0]
if len(tf) != 1 or not up0:
    print("h32: %d tied fetches in step 1, %d updates of group 0 in step 0: nothing to move"
          % (len(tf), len(up0)))
    ok = False
else:
    f, last = tf[0], max(e["end_us"] for e in up0)
    key = 1 + max(e["group"] for e in ev)
    with open(os.path.join(tmp, "tiedok.ev"), "w") as out:
        for e in ev:
            out.write(json.dumps(dict(e, group=key) if e is f else e) + "\n")
        out.write(json.dumps(dict(up0[0], group=key, start_us=f["start_us"] - 5.0,
                                  end_us=f["start_us"] + 5.0)) + "\n")
    with open(os.path.join(tmp, "tiedearly.ev"), "w") as out:
        for e in ev:
            if e is f:
                e = dict(e, start_us=last - 2.0, end_us=last - 1.0)
            out.write(json.dumps(e) + "\n")
sys.exit(0 if ok else 1)
PYEOF
for ev in renamed headfirst tiedearly; do
    if "$py" "$top/tools/check_invariants.py" "$tmp/$ev.ev" > "$tmp/check" 2>&1; then
        echo "the checker passes the broken log ($ev)"; fail=1
    else
        echo "$ev: $(grep -m 1 'violated' "$tmp/check" | cut -c1-160)"
    fi
done
for ev in c32 h32 c16 h16 h16off key tiedok; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$ev.ev" > "$tmp/check" 2>&1 ||
        { echo "the checker fails the run $ev:"; tail -n 5 "$tmp/check"; fail=1; }
done

"$bin" train "$tmp/r.yaml" -q --steps 1 --gpus "$gpus" --embed-lookup gpu > "$tmp/bad.out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "embed-lookup" "$tmp/bad.out"; then
    echo "--embed-lookup gpu: exit $rc, want 2 and the option named"; cat "$tmp/bad.out"; fail=1
fi
sed -e "s#^train:#train:\n  embed_lookup: gpu#" "$tmp/r.yaml" > "$tmp/badkey.yaml"
"$bin" train "$tmp/badkey.yaml" -q --steps 1 --gpus "$gpus" > "$tmp/badkey.out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "embed_lookup" "$tmp/badkey.out"; then
    echo "embed_lookup: gpu in the recipe: exit $rc, want 2 and the key named"
    cat "$tmp/badkey.out"; fail=1
fi
echo "bad values: exit 2 ($(head -n 1 "$tmp/badkey.out"))"
finish
