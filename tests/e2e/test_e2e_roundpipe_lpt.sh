#!/bin/sh
# sdp-roundpipe's longest-processing-time-first uploads on CPU workers standing in for GPUs: the
# fetches of a stage's weights run biggest first with SDP_LPT_FETCH=1.  `slidedp bench` on the tiny test model (vocab
# 512: its embedding's copy, 16 units of 4 KiB, is smaller than a layer's, 21), 2 stage workers and
# a third CPU worker for the updates, 4 micro-batches a step, 6 steps; from the event log:
#   - among the fetches (param_fetch, param_chunk) of one step and stage that were queued together
#     (both ready, "ready_us", 50 us before the first of them was popped), the one popped first
#     moves at least as many 4 KiB units (the policy's key, policies/roundpipe_lpt.h): sdp-slidedp's
#     order would take the embedding first (group 0), the longest-first one a layer;
#   - there are such pairs of different sizes (the check has something to check);
#   - the log says it; without SDP_LPT_FETCH=1 (the default: group by group, said in the log) the
#     same check finds smaller fetches taken first (so the check tells the orders apart).
# The fp32 bits with it on are sdp-slidedp's: tests/e2e/test_e2e_roundpipe*.sh.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
run() {
    "$bin" bench --model "$top/tests/ref/data/qwen3-tiny" --batch 4 --micro 1 --seq 32 --steps 6 \
        --warmup 1 --sched sdp-roundpipe --ranks 2 --gpus 0 --cpus 3 --events "$1" > /dev/null
}
(SDP_LPT_FETCH=1 && export SDP_LPT_FETCH && run "$tmp/on.ev") 2> "$tmp/on.err" ||
    { echo "bench failed"; cat "$tmp/on.err"; finish; }
grep -q "a stage's fetches longest first (SDP_LPT_FETCH=1)" "$tmp/on.err" ||
    { echo "the log does not say longest first"; cat "$tmp/on.err"; fail=1; }
cat > "$tmp/order.py" <<'PY'
import json, sys
MARGIN_US = 50  # a push stamped just after a pop's decision, before its end, is no contender
path, lpt = sys.argv[1], sys.argv[2] == "on"
fetches = [e for e in map(json.loads, open(path))
           if e.get("name") in ("param_fetch", "param_chunk") and "stage" in e]
units = lambda e: e.get("bytes", 0) >> 12
pairs, wrong = 0, []
for a in fetches:
    for b in fetches:
        same = (a["step"], a["stage"], a["worker"]) == (b["step"], b["stage"], b["worker"])
        if a is b or not same or a["popped_us"] > b["popped_us"] or units(a) == units(b):
            continue
        if max(a["ready_us"], b["ready_us"]) < a["popped_us"] - MARGIN_US:
            pairs += 1
            if units(a) < units(b):
                wrong.append("step %d stage %d: group %d (%d units) before group %d (%d units)"
                             % (a["step"], a["stage"], a["group"], units(a), b["group"], units(b)))
print("%s: %d fetches, %d pairs queued together, %d smaller first"
      % ("longest first" if lpt else "group by group", len(fetches), pairs, len(wrong)))
if lpt:
    assert not wrong, wrong[:5]
    assert pairs > 0, "no fetches of different sizes were queued together"
else:  # group by group: the check tells the orders apart
    assert wrong, "group by group took no smaller fetch first"
PY
"$py" "$tmp/order.py" "$tmp/on.ev" on || fail=1
run "$tmp/off.ev" 2> "$tmp/off.err" && grep -q "a stage's fetches group by group" "$tmp/off.err" ||
    { echo "the default (group by group)"; cat "$tmp/off.err"; fail=1; }
"$py" "$tmp/order.py" "$tmp/off.ev" off || fail=1
finish
