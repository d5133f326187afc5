#!/bin/sh
# The sdp-roundpipe policy on CPU workers standing in for GPUs (the tiny recipe, fp32, 3 steps):
#   - with 1, 2 and 4 stage workers (--ranks) the losses are sdp-slidedp's bit for bit;
#   - every compute task of a group's forward or backward runs on the worker of its stage (and its
#     event log line says the stage and its round, k / R), stage k
#     on stage worker k mod R (the first R CPU workers, ids 0..R-1), the split being the one
#     `slidedp plan --sched sdp-roundpipe` prints for the same recipe and machine; the machine file
#     fixes the split's prices (split_machine, tests/lib/e2e.sh), so the split has several stages
#     on any machine and the placement is exercised across workers;
#   - the event log passes tools/check_invariants.py (the same weight versions as sdp-slidedp);
#     with train.param_delay 1 (RoundPipe's asynchronous weights) the checker fails, naming 1 or 3;
#   - `slidedp bench --sched sdp-roundpipe --ranks 2` runs and names its stage workers.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/recipes/tiny-qwen3.yaml
losses() { grep -o '"loss":[^,]*' "$1" | tr '\n' ' '; }
split_machine "$tmp/m.json" || { fail=1; finish; }
"$bin" train "$recipe" --steps 3 --cpus 2 -q --sched sdp-slidedp --metrics "$tmp/ref.jsonl" \
    --output "$tmp/ref" 2> "$tmp/ref.err" || { echo "sdp-slidedp failed"; cat "$tmp/ref.err"; fail=1; }
echo "sdp-slidedp: $(losses "$tmp/ref.jsonl")"
for w in 1 2 4; do
    "$bin" train "$recipe" --steps 3 -q --sched sdp-roundpipe --ranks "$w" --machine "$tmp/m.json" \
        --metrics "$tmp/r$w.jsonl" --events "$tmp/r$w.ev" --output "$tmp/r$w" 2> "$tmp/r$w.err" ||
        { echo "sdp-roundpipe, $w stage workers, failed"; cat "$tmp/r$w.err"; fail=1; continue; }
    [ "$(losses "$tmp/r$w.jsonl")" = "$(losses "$tmp/ref.jsonl")" ] ||
        { echo "sdp-roundpipe, $w stage workers: $(losses "$tmp/r$w.jsonl")"; fail=1; }
    "$bin" plan "$recipe" --sched sdp-roundpipe --ranks "$w" --machine "$tmp/m.json" \
        > "$tmp/p$w.txt" 2> /dev/null || { echo "plan of $w failed"; fail=1; }
    "$py" - "$tmp/p$w.txt" "$tmp/r$w.ev" "$w" <<'PY' || fail=1
import json, re, sys
w = int(sys.argv[3])
stage = {}  # (group, "fwd" | "bwd") -> stage
rows = [l for l in open(sys.argv[1]) if re.match(r"^\s+\d+\s+[\d.]+\s+(fwd|bwd)", l)]
for l in rows:
    k = int(l.split()[0])
    for d, a, b in re.findall(r"(fwd|bwd) (\d+)(?:-(\d+))?", l):
        lo, hi = sorted((int(a), int(b or a)))
        for g in range(lo, hi + 1):
            stage[(g, d)] = k
nst = len(rows)
assert nst >= 2 or w == 1, "the split has %d stage(s): the test needs several" % nst
seen, wrong = set(), []
for line in open(sys.argv[2]):
    e = json.loads(line)
    if e.get("event") == "bus" or e.get("phase") not in ("fwd", "loss", "recompute", "bwd"):
        continue
    d = "fwd" if e["phase"] in ("fwd", "loss") else "bwd"
    want = stage[(e["group"], d)] % w
    seen.add(e["worker"])
    if e.get("stage") != stage[(e["group"], d)]:
        wrong.append("%s group %d %s: stage %s in the log, %d in the split"
                     % (e["name"], e["group"], d, e.get("stage"), stage[(e["group"], d)]))
    if e.get("round") != stage[(e["group"], d)] // w:  # the round-robin round, stage // R
        wrong.append("%s group %d %s: round %s in the log, stage %d's is %d"
                     % (e["name"], e["group"], d, e.get("round"), stage[(e["group"], d)],
                        stage[(e["group"], d)] // w))
    if e["worker"] != want:
        wrong.append("%s group %d %s on worker %d, stage %d's is %d"
                     % (e["name"], e["group"], d, e["worker"], stage[(e["group"], d)], want))
print("%d stage workers: %d stages, compute on workers %s, %d misplaced"
      % (w, nst, sorted(seen), len(wrong)))
assert not wrong, wrong[:5]
assert len(seen) == min(w, nst), "workers %s" % sorted(seen)
PY
    "$py" "$top/tools/check_invariants.py" "$tmp/r$w.ev" > "$tmp/check" 2>&1 ||
        { echo "$w stage workers: invariants"; tail -3 "$tmp/check"; fail=1; }
done
# RoundPipe's asynchronous weights (train.param_delay 1): step s computes with the weights of step
# s - 2's update (its events record version s - 1).  Whatever the timing, the checker fails: a
# compute event that starts before step s - 1's update of its group ends breaks invariant 3, and
# one that starts after it reads, by the times, version s, not the recorded one (invariant 1)
"$bin" train "$recipe" --steps 4 -q --sched sdp-roundpipe --ranks 2 --param-delay 1 \
    --machine "$tmp/m.json" --events "$tmp/d.ev" --output "$tmp/d" 2> "$tmp/d.err" ||
    { echo "sdp-roundpipe with param_delay 1 failed"; cat "$tmp/d.err"; fail=1; }
if "$py" "$top/tools/check_invariants.py" "$tmp/d.ev" > "$tmp/check" 2>&1 ||
    ! grep -q "invariant [13] violated" "$tmp/check"; then
    echo "param_delay 1: the checker does not name invariant 1 or 3"; tail -3 "$tmp/check"; fail=1
fi
# bench takes it the same way: the JSON line names the stage workers
"$bin" bench --model "$top/tests/ref/data/qwen3-tiny" --batch 4 --seq 32 --steps 2 --warmup 1 \
    --sched sdp-roundpipe --ranks 2 --gpus 0 > "$tmp/b.json" 2> "$tmp/b.err" &&
    grep -q '"stage_workers":2' "$tmp/b.json" && grep -q '"sched":"sdp-roundpipe"' "$tmp/b.json" ||
    { echo "bench --sched sdp-roundpipe --ranks 2"; cat "$tmp/b.err" "$tmp/b.json"; fail=1; }
finish
