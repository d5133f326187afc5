#!/bin/sh
# SPDX-License-Identifier: MIT
# sdp-slidedp end to end, on tests/e2e/data/micro-qwen3.yaml (4 steps, 2 CPU workers, fp32):
#  1. the losses and gradient norms are bit-identical to those of StarPU's eager policy;
#  2. with SDP_STAGING_DEPTH=1 (and again with train.staging_depth: 1 in the recipe, which wins
#     over SDP_STAGING_DEPTH=3, reported with the default bound on stages alive, 4 per slot) and
#     the events log on, tools/check_invariants.py passes the log,
#     including --max-inflight 1 on the CPU AdamW and cast lanes (the bound of the policy); a copy
#     of the log with two overlapping adamw must fail that check;
#  3. there are waits (two CPU workers and depth 1: while one runs an adamw, the other finds the
#     next one held); each is well formed, ends when the task it held back starts (an adamw or
#     cast of its step, group and chunk, on its lane), and is a "wait: staging full" slice on
#     that lane in the Chrome trace;
#  4. every step's adamw start in (group, chunk) order: with depth 1 the policy pops them one at
#     a time, the smallest key first, and StarPU releases them in submission order;
#  5. the forward of group 0 of step s+1 starts before the last update of the head group of step
#     s starts, in at least one step.  Eager never does this (FIFO: every update of step s was
#     queued before that forward became ready); the policy does because the next step's forward
#     of group g outranks the updates of later groups.  It depends on timing (step s+1 must be
#     submitted before the updates drain, ~20 ms of adamw at depth 1), hence "at least one step".
# Needs python3 (json only).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
checker=$top/tools/check_invariants.py
recipe=$top/tests/e2e/data/micro-qwen3.yaml
if ! command -v python3 > /dev/null 2>&1; then
    echo "python3 is not installed: SKIP"
    exit 77
fi
fails=0
fail() { echo "  FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "  ok: $*"; }

# ---- 1. losses: eager, then sdp-slidedp with the default depth and with depth 1 ----
run() { # name, extra environment, extra options...
    name=$1; envs=$2; shift 2
    if ! env $envs "$bin" train "$recipe" --cpus 2 --gpus 0 --output "$tmp/run-$name" \
        --metrics "$tmp/$name.jsonl" -q "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; tail -n 20 "$tmp/$name.err"; return 1
    fi
    sed -e 's/.*"loss": *\([^,]*\),.*"grad_norm": *\([^,]*\),.*/\1 \2/' "$tmp/$name.jsonl" \
        > "$tmp/$name.loss"
    echo "$name: $(tr '\n' ' ' < "$tmp/$name.loss")"
}
run eager "" --sched eager || fail "eager run"
run slidedp "" --sched sdp-slidedp || fail "sdp-slidedp run"
run depth1 "SDP_STAGING_DEPTH=1" --sched sdp-slidedp --events "$tmp/events.jsonl" \
    --trace "$tmp/trace.json" || fail "sdp-slidedp run with SDP_STAGING_DEPTH=1"
[ -s "$tmp/eager.loss" ] && [ "$(wc -l < "$tmp/eager.loss")" -eq 4 ] || fail "eager: not 4 steps"
for name in slidedp depth1; do
    if cmp -s "$tmp/eager.loss" "$tmp/$name.loss"; then
        ok "$name: losses and gradient norms bit-identical to eager"
    else
        fail "$name: losses differ from eager"
    fi
done
grep -q "staging depth 1" "$tmp/depth1.err" || fail "depth1: the policy did not report depth 1"
# the same bound from the recipe (train.staging_depth), which wins over the environment
{ micro_recipe
  printf '  staging_depth: 1\n  prefetch_groups: 0\n'; } > "$tmp/depth1.yaml"
if SDP_STAGING_DEPTH=3 "$bin" train "$tmp/depth1.yaml" --cpus 2 --gpus 0 -q --sched sdp-slidedp \
    --metrics "$tmp/recipe1.jsonl" --events "$tmp/recipe1.events" 2> "$tmp/recipe1.err" &&
    grep -q "staging depth 1 (train.staging_depth), at most 4 stages alive (SDP_STAGE_BUFFERS), prefetch window 0 groups (train.prefetch_groups)" \
        "$tmp/recipe1.err" &&
    python3 "$checker" --max-inflight "CPU AdamW=1" --max-inflight "param cast=1" \
        "$tmp/recipe1.events" > "$tmp/recipe1.check"; then
    ok "train.staging_depth 1 over SDP_STAGING_DEPTH=3: $(tail -n 1 "$tmp/recipe1.check")"
else
    tail -n 5 "$tmp/recipe1.err" "$tmp/recipe1.check" 2> /dev/null
    fail "train.staging_depth 1: not reported, or the bound does not hold"
fi

# ---- 2. invariants and the bound ----
if python3 "$checker" --max-inflight "CPU AdamW=1" --max-inflight "param cast=1" \
    "$tmp/events.jsonl" > "$tmp/check.out"; then
    ok "checker with --max-inflight 1: $(tail -n 1 "$tmp/check.out")"
    grep -E "^(lane|waits)" "$tmp/check.out" | sed 's/^/    /'
else
    cat "$tmp/check.out"; fail "checker rejects the sdp-slidedp log"
fi
python3 - "$tmp/events.jsonl" "$tmp/overlap.jsonl" <<'EOF' || fail "cannot make the overlapping copy"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ups = sorted((e for e in evs if e["name"] == "adamw"), key=lambda e: e["start_us"])
ups[1]["start_us"] = ups[0]["start_us"]  # two adamw at once
with open(sys.argv[2], "w") as f:
    for e in evs:
        f.write(json.dumps(e) + "\n")
EOF
python3 "$checker" --max-inflight "CPU AdamW=1" "$tmp/overlap.jsonl" > "$tmp/overlap.out"
rc=$?
if [ "$rc" = 1 ] && grep -q "max-inflight violated" "$tmp/overlap.out"; then
    ok "two overlapping adamw fail --max-inflight 1 (exit 1)"
else
    cat "$tmp/overlap.out"; fail "two overlapping adamw: exit $rc"
fi

# ---- 3, 4, 5: waits, update order, the next step's forward ----
if python3 - "$tmp/events.jsonl" "$tmp/trace.json" <<'EOF'; then ok "waits, update order, forward of the next step"; else fail "waits, update order, forward of the next step"; fi
import json, sys
from collections import Counter
bad = []
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
doc = json.load(open(sys.argv[2]))
waits = [e for e in evs if e.get("event") == "wait"]
tasks = [e for e in evs if e.get("event") != "wait"]
lanes = {"adamw": "CPU AdamW", "cast": "param cast"}
if not waits:
    bad.append("no wait in the log: depth 1 held nothing back")
held = {}  # (lane, step, group, chunk) -> start times of the bounded tasks
for e in tasks:
    if e["name"] in lanes:
        held.setdefault((lanes[e["name"]], e["step"], e["group"], e["chunk"]), []).append(
            e["start_us"])
for w in waits:
    if (w["name"] != "wait: staging full" or w["why"] != "staging full"
            or w["lane"] not in lanes.values() or w["end_us"] < w["start_us"]
            or w["step"] < 0 or w["group"] < 0 or w["chunk"] < 0):
        bad.append("malformed wait %s" % w)
        break
    starts = held.get((w["lane"], w["step"], w["group"], w["chunk"]), [])
    if not any(t >= w["end_us"] - 1 for t in starts):
        bad.append("wait %s: no task of its lane, step, group and chunk starts after it" % w)
        break
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
         if e["ph"] == "M" and e["name"] == "thread_name"}
slices = Counter(names.get((e["pid"], e["tid"]), "?") for e in doc["traceEvents"]
                 if e["ph"] == "X" and e["name"] == "wait: staging full")
print("    %d waits in the log, Chrome wait slices per lane %s" % (len(waits), dict(slices)))
log_lanes = Counter(w["lane"] for w in waits)
if slices != log_lanes:
    bad.append("the Chrome trace holds wait slices %s for the log's %s" % (dict(slices),
                                                                         dict(log_lanes)))
steps = sorted({e["step"] for e in tasks if e["name"] == "adamw"})
head = max(e["group"] for e in tasks if e["name"] == "adamw")
ahead = []
for s in steps:
    ups = sorted((e for e in tasks if e["name"] == "adamw" and e["step"] == s),
                 key=lambda e: e["start_us"])
    order = [(e["group"], e["chunk"]) for e in ups]
    if order != sorted(order):
        bad.append("step %d: adamw start in the order %s" % (s, order))
    fwd = [e["start_us"] for e in tasks
           if e["step"] == s + 1 and e["group"] == 0 and e["phase"] == "fwd"]
    if fwd:
        last_head = max(e["start_us"] for e in ups if e["group"] == head)
        lead = last_head - min(fwd)
        ahead.append(lead > 0)
        print("    step %d: %d adamw in (group, chunk) order; the forward of group 0 of step %d "
              "starts %.1f us %s the last update of the head group" %
              (s, len(ups), s + 1, abs(lead), "before" if lead > 0 else "after"))
if not any(ahead):
    bad.append("the forward of step s+1 never started before the last head update of step s")
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
EOF

[ "$fails" = 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
