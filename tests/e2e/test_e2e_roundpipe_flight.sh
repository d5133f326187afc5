#!/bin/sh
# sdp-roundpipe's micro-batches in flight (train.in_flight, --in-flight) on CPU workers standing in
# for GPUs: the micro recipe with 4 micro-batches a step, 2 stage workers, a machine file whose
# split prices are fixed with an LM head as cheap as the layers (split_machine, tests/lib/e2e.sh)
# so that the split has 3 stages:
#   - with 1, 2 and 3 micro-batches in flight the losses are sdp-slidedp's bit for bit;
#   - in the event log, at no time have more than in_flight micro-batches started (their first
#     task's start) and not finished (their last task's end); below the step's 4 micro-batches the
#     policy held some back, each hold a wait line ("micro-batches in flight");
#   - the default is the stage workers + 1 (3 here), said in the log;
#   - each task the policy placed says its stage and round (stage / 2) in the log, and
#     tools/check_invariants.py reports the rounds and passes the logs, but fails one whose rounds
#     or stage workers were edited, naming "rounds";
#   - 0 or a negative value is refused naming the option or the key, exit 2, nothing written;
#     another policy ignores the option with a warning.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
micro_recipe | sed -e 's/^  micro: 2/  micro: 1/' > "$tmp/r.yaml"
losses() { grep -o '"loss":[^,]*' "$1" | tr '\n' ' '; }
split_machine "$tmp/m.json" || { fail=1; finish; }
"$bin" train "$tmp/r.yaml" --steps 3 --cpus 2 -q --sched sdp-slidedp --in-flight 2 \
    --metrics "$tmp/ref.jsonl" --output "$tmp/ref" 2> "$tmp/ref.err" ||
    { echo "sdp-slidedp failed"; cat "$tmp/ref.err"; fail=1; }
grep -q "in_flight.*ignored by sdp-slidedp" "$tmp/ref.err" ||
    { echo "sdp-slidedp: no warning that --in-flight is ignored"; cat "$tmp/ref.err"; fail=1; }
echo "sdp-slidedp: $(losses "$tmp/ref.jsonl")"
for name in 1 2 3 default; do
    lim=$name opt="--in-flight $name"
    [ "$name" = default ] && lim=3 opt=
    # shellcheck disable=SC2086 # $opt is empty or two words
    "$bin" train "$tmp/r.yaml" --steps 3 -q --sched sdp-roundpipe --ranks 2 $opt \
        --machine "$tmp/m.json" --metrics "$tmp/f$name.jsonl" --events "$tmp/f$name.ev" \
        --output "$tmp/f$name" 2> "$tmp/f$name.err" ||
        { echo "in_flight $name failed"; cat "$tmp/f$name.err"; fail=1; continue; }
    [ "$(losses "$tmp/f$name.jsonl")" = "$(losses "$tmp/ref.jsonl")" ] ||
        { echo "in_flight $name: $(losses "$tmp/f$name.jsonl")"; fail=1; }
    grep -q "$lim micro-batches in flight" "$tmp/f$name.err" ||
        { echo "in_flight $name: the log does not say $lim in flight"; fail=1; }
    "$py" - "$tmp/f$name.ev" "$lim" 4 <<'PY' || fail=1
import json, sys
path, limit, nmb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
span, waits, rounds = {}, 0, set()
for line in open(path):
    e = json.loads(line)
    if e.get("event") == "wait":
        waits += e["why"] == "micro-batches in flight"
    if "stage" in e:
        assert e.get("round") == e["stage"] // 2, "round %s of stage %d" % (e.get("round"), e["stage"])
        rounds.add(e["round"])
    if e.get("event") in ("bus", "wait") or e["mb"] < 0:
        continue
    k = (e["step"], e["mb"])
    s, t = span.get(k, (e["start_us"], e["end_us"]))
    span[k] = (min(s, e["start_us"]), max(t, e["end_us"]))
# at an equal time an end comes before a start: a micro-batch that enters when one leaves
pts = sorted([(s, 1) for s, _ in span.values()] + [(t, -1) for _, t in span.values()])
cur = peak = 0
for _, d in pts:
    cur += d
    peak = max(peak, cur)
print("in_flight %d: %d micro-batches, at most %d in flight, %d waits"
      % (limit, len(span), peak, waits))
assert len(span) == 3 * nmb, "%d micro-batches in the log" % len(span)
assert peak <= limit, "%d micro-batches in flight, the bound is %d" % (peak, limit)
assert limit >= nmb or waits > 0, "the bound held nothing back"
assert rounds == {0, 1}, "rounds %s: the test wants 3 stages over 2 workers" % sorted(rounds)
PY
    "$py" "$top/tools/check_invariants.py" "$tmp/f$name.ev" > "$tmp/check" 2>&1 &&
        grep -q "stages: 3 over 2 stage workers, rounds \[0, 1\]" "$tmp/check" ||
        { echo "in_flight $name: the checker"; tail -4 "$tmp/check"; fail=1; }
done
# the checker fails a log whose rounds or stage workers are not the round-robin's
"$py" - "$tmp/f1.ev" "$tmp/bad.ev" <<'PY' || fail=1
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        e = json.loads(line)
        if e.get("stage") == 2 and e["name"] == "embedding_bwd" and e["mb"] == 1:
            e["worker"] = 1  # stage 2 is worker 0's, as stage 0
        if e.get("stage") == 1 and e["name"] == "lmhead_ce":
            e["round"] = 1
        out.write(json.dumps(e) + "\n")
PY
if "$py" "$top/tools/check_invariants.py" "$tmp/bad.ev" > "$tmp/check" 2>&1 ||
    ! grep -q "rounds violated: stage 2 ran on workers \[0, 1\]" "$tmp/check" ||
    ! grep -q "rounds violated: lmhead_ce.*round 1, but stage 1" "$tmp/check"; then
    echo "the checker passes edited rounds"; tail -4 "$tmp/check"; fail=1
fi
# refused: 0 or negative, on the command line and in the recipe, naming it; nothing written
expect 2 ": --in-flight expects an integer >= 1" -- "$bin" train "$tmp/r.yaml" --sched sdp-roundpipe \
    --ranks 2 --in-flight 0 --output "$tmp/no"
expect 2 ": --in-flight expects an integer >= 1" -- "$bin" bench --model qwen3-0.6b \
    --sched sdp-roundpipe --ranks 2 --in-flight -1
{ cat "$tmp/r.yaml"; echo "  in_flight: -2"; } > "$tmp/bad.yaml"
expect 2 "train.in_flight = -2: must be >= 1" -- "$bin" train "$tmp/bad.yaml" \
    --sched sdp-roundpipe --output "$tmp/no"
finish
