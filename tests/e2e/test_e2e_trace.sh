#!/bin/sh
# SPDX-License-Identifier: MIT
# The task trace of a real 3-step CPU run of tests/e2e/data/micro-qwen3.yaml (`--trace`,
# `--events`): the Chrome JSON must parse, name process "rank 0" and the lanes, and hold one "X"
# event per line of the events log, on the cast, CPU compute, gradient reduction and CPU AdamW
# lanes; every step must compute every group (embedding, 2 layers, head), run one adamw per chunk
# (as many as the step-0 casts: one per chunk) and record version step + 1 for it.  Then
# tools/check_invariants.py must pass the log, and fail three broken copies: a step-1 compute event
# of group 2 moved before the end of the step-0 update of group 2 (invariant 3), a step-1 update
# started before the last backward of its group (invariant 2), and one event recording another
# version than its step's (invariant 1).  tools/lane_util.py must give every lane a busy fraction
# within its window and a summed concurrency within the two workers, and its --stages report must
# give the counts, the most alive at once and the waits of a stage log written here, its --idle
# report the CUDA worker's gaps of another, whose answers are known, its --gaps report each of
# those gaps, and its --long report the long CUDA tasks of that log and what ended beside them.  Needs python3 (json only).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
checker=$top/tools/check_invariants.py
if ! command -v python3 > /dev/null 2>&1; then
    echo "python3 is not installed: SKIP"
    exit 77
fi
fails=0
fail() { echo "  FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "  ok: $*"; }

# the whole groups' fetches (test_e2e_chunks.sh checks the chunk pipeline's lanes)
if ! SDP_CHUNK_PIPELINE=off "$bin" train "$top/tests/e2e/data/micro-qwen3.yaml" --steps 3 --gpus 0 --cpus 2 \
    --trace "$tmp/trace.json" --events "$tmp/events.jsonl" --output "$tmp/run" \
    > "$tmp/train.out" 2> "$tmp/train.err"; then
    echo "training failed"; tail -n 20 "$tmp/train.err"; echo FAIL; exit 1
fi
echo "events: $(wc -l < "$tmp/events.jsonl") lines"

# ---- the Chrome trace and the events log ----
if python3 - "$tmp/trace.json" "$tmp/events.jsonl" <<'EOF'; then ok "trace and events log"; else fail "trace and events log"; fi
import json, sys
from collections import Counter
bad = []
doc = json.load(open(sys.argv[1]))
evs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
te = doc["traceEvents"]
xs = [e for e in te if e["ph"] == "X"]
meta = [e for e in te if e["ph"] == "M"]
procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
print("chrome: %d X events, %d metadata; processes %s" % (len(xs), len(meta), procs))
if procs.get(0) != "rank 0":
    bad.append("process 0 is not named 'rank 0'")
if len(xs) != len(evs):
    bad.append("%d X events for %d log lines" % (len(xs), len(evs)))
per_lane = Counter(lanes.get((e["pid"], e["tid"]), "?") for e in xs)
print("events per lane:", dict(per_lane))
# the parameter lanes: the casts, and the dispatches (param_fetch, one per group and step)
want = {"param cast": ("cast",), "param H2D": ("param_fetch",), "CPU compute": None,
        "gradient reduction": None, "CPU AdamW": ("adamw",)}
for lane, ops in want.items():
    if per_lane[lane] == 0:
        bad.append("no event on lane '%s'" % lane)
    if ops and any(e["name"] not in ops for e in xs if lanes.get((e["pid"], e["tid"])) == lane):
        bad.append("lane '%s' holds an op other than %s" % (lane, " or ".join(ops)))
fetches = Counter(e["args"]["step"] for e in xs if e["name"] == "param_fetch")
if sorted(fetches.values()) != [4, 4, 4]:
    bad.append("param_fetch per step: %s, not one per group (4) in each of 3 steps" % dict(fetches))
for e in xs:
    if e["dur"] < 0 or any(k not in e["args"] for k in ("step", "group", "chunk", "mb", "version")):
        bad.append("malformed X event %s" % e)
        break
for e in evs:
    if e["lane"] != lanes.get((e["rank"], e["lane_id"])):
        bad.append("log lane %s is not Chrome thread %d" % (e["lane"], e["lane_id"]))
        break
# a task's ready, popped and fetched times: all there, in that order, before it ends (a CPU task
# starts after its inputs came; a CUDA task queued behind another is recorded as started when the
# one ahead ends, which may come before or after its inputs)
tasks = [e for e in evs if e["kind"] != "wait"]
for e in tasks:
    t = [e.get(k) for k in ("ready_us", "popped_us", "fetched_us")]
    if None in t or not (t[0] <= t[1] + 1 <= t[2] + 2 <= e["end_us"] + 3) or \
            (e["kind"] == "CPU" and t[2] > e["start_us"] + 1):
        bad.append("task %s %s: ready/popped/fetched %s, start %.1f, end %.1f"
                   % (e["name"], e["kind"], t, e["start_us"], e["end_us"]))
        break
steps = sorted({e["step"] for e in evs if e["step"] >= 0})
casts = sum(1 for e in evs if e["name"] == "cast" and e["step"] == 0)
print("steps %s, step-0 casts (one per chunk) %d" % (steps, casts))
if steps != [0, 1, 2]:
    bad.append("steps %s instead of [0, 1, 2]" % steps)
if casts == 0:
    bad.append("no cast in step 0: the adamw counts below would compare nothing")
for s in steps:
    groups = sorted({e["group"] for e in evs if e["step"] == s and e["lane"] == "CPU compute"})
    upd = [e for e in evs if e["step"] == s and e["name"] == "adamw"]
    print("step %d: compute groups %s, %d adamw" % (s, groups, len(upd)))
    if groups != [0, 1, 2, 3]:
        bad.append("step %d computes groups %s, not [0, 1, 2, 3]" % (s, groups))
    if len(upd) != casts:
        bad.append("step %d: %d adamw for %d chunks" % (s, len(upd), casts))
    if any(e["version"] != s + 1 for e in upd):
        bad.append("step %d: an adamw does not record version %d" % (s, s + 1))
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
EOF

# ---- the checker on the real log ----
if python3 "$checker" "$tmp/events.jsonl" > "$tmp/check.out"; then
    ok "checker passes the real log: $(tail -n 1 "$tmp/check.out")"
else
    cat "$tmp/check.out"; fail "checker rejects the real log"
fi

# ---- broken copies: each must fail, naming its invariant ----
python3 - "$tmp/events.jsonl" "$tmp" <<'EOF' || fail "cannot make the broken logs"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def save(name, lst):
    with open("%s/%s" % (sys.argv[2], name), "w") as f:
        for e in lst:
            f.write(json.dumps(e) + "\n")
# invariant 3: a step-1 compute event of group 2 starts before the step-0 update of group 2 ends
b = [dict(e) for e in evs]
upd_end = max(e["end_us"] for e in b if e["name"] == "adamw" and e["step"] == 0 and e["group"] == 2)
e = next(e for e in b if e["step"] == 1 and e["group"] == 2 and e["phase"] == "fwd")
dur = e["end_us"] - e["start_us"]
e["start_us"] = upd_end - 1.0
e["end_us"] = e["start_us"] + dur
print("moved %s (step 1, group 2) to start at %.1f us, 1 us before the step-0 update ends"
      % (e["name"], e["start_us"]))
save("broken3.jsonl", b)
# invariant 2: a step-1 update of group 1 starts before the last backward of group 1 ends
b = [dict(e) for e in evs]
last = max(e["end_us"] for e in b if e["step"] == 1 and e["group"] == 1 and e["phase"] == "bwd")
u = next(e for e in b if e["name"] == "adamw" and e["step"] == 1 and e["group"] == 1)
u["start_us"] = last - 1.0
save("broken2.jsonl", b)
# invariant 1: one step-2 compute event of group 1 records version 1, not 2
b = [dict(e) for e in evs]
e = next(e for e in b if e["step"] == 2 and e["group"] == 1 and e["phase"] == "fwd")
e["version"] = 1
save("broken1.jsonl", b)
EOF
for inv in 3 2 1; do
    python3 "$checker" "$tmp/broken$inv.jsonl" > "$tmp/b$inv.out"
    rc=$?
    if [ "$rc" = 1 ] && grep -q "invariant $inv violated" "$tmp/b$inv.out"; then
        ok "broken copy for invariant $inv: exit 1, $(grep -m 1 "invariant $inv violated" "$tmp/b$inv.out")"
    else
        cat "$tmp/b$inv.out"; fail "broken copy for invariant $inv: exit $rc"
    fi
done

# ---- lane utilisation (tools/lane_util.py) of steps 1-2 ----
if python3 "$top/tools/lane_util.py" "$tmp/events.jsonl" --json > "$tmp/util.json" &&
    python3 - "$tmp/util.json" "$tmp/events.jsonl" <<'EOF'; then ok "lane utilisation"; else fail "lane utilisation"; fi
import json, sys
u = json.load(open(sys.argv[1]))
evs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
sel = [e for e in evs if e["step"] in (1, 2) and e.get("event", "task") != "wait"]
window = max(e["end_us"] for e in sel) - min(e["start_us"] for e in sel)
lanes = {r["lane"]: r for r in u["lanes"] if r["rank"] == 0}
print("  lanes:", {k: "%.1f%% busy, %.2f tasks" % (100 * v["busy"], v["tasks"]) for k, v in lanes.items()})
ok = u["steps"] == [1, 2] and abs(u["window_ms"] - window / 1e3) < 1e-6
ok = ok and {"CPU compute", "gradient reduction", "CPU AdamW"} <= set(lanes)
# a union is never longer than the window nor than the sum of its intervals
ok = ok and all(0 <= r["busy"] <= 1 + 1e-9 and r["tasks"] >= r["busy"] - 1e-9 for r in u["lanes"])
# with two CPU workers, at most two tasks run at once: the summed lanes cannot exceed 2
ok = ok and sum(r["tasks"] for r in u["lanes"]) <= 2 + 1e-6
sys.exit(0 if ok else 1)
EOF

# ---- the critical-path timeline (lane_util.py --timeline) of steps 1-2 ----
if python3 "$top/tools/lane_util.py" "$tmp/events.jsonl" --json --timeline > "$tmp/tl.json" &&
    python3 - "$tmp/tl.json" <<'EOF'; then ok "timeline"; else fail "timeline"; fi
import json, sys
u = json.load(open(sys.argv[1]))
tl = u["timeline"]
for t in tl:
    print("  step %(step)d: fwd %(fwd_start).1f-%(fwd_end).1f, bwd end %(bwd_end).1f, updates "
          "%(upd_start).1f-%(upd_end).1f ms" % t)
ok = [t["step"] for t in tl] == [1, 2]
for t in tl:
    ok = ok and 0 <= t["fwd_start"] <= t["fwd_end"] <= t["bwd_end"] <= t["upd_end"]
    ok = ok and t["upd_start"] <= t["upd_end"] and t["tail"] == t["upd_end"] - t["bwd_end"]
    ok = ok and t["host_idle"] is not None and t["host_idle"] >= 0
ok = ok and tl[0]["next_fwd"] == tl[1]["fwd_start"]
sys.exit(0 if ok else 1)
EOF

# ---- the stages of working copies off the host (lane_util.py --stages), on a log made here ----
python3 - "$tmp/stages.jsonl" <<'EOF'
import json, sys
def ev(name, phase, chunk, version, a, b, lane="param cast"):
    return {"name": name, "phase": phase, "step": 0, "group": 1, "chunk": chunk, "mb": -1,
            "version": version, "lane": lane, "lane_id": 0, "worker": 0, "kind": "CPU",
            "rank": 0, "start_us": a * 1e3, "end_us": b * 1e3}
with open(sys.argv[1], "w") as f:
    for e in (ev("cast", "cast", 0, 0, 0, 10), ev("cast", "cast", 1, 0, 5, 12),
              ev("param_put", "cast", 0, 0, 30, 31, "param H2D"),
              ev("param_put", "cast", 1, 0, 31, 32, "param H2D"),
              ev("matmul_fwd", "fwd", -1, 0, 32, 39, "GPU compute"),
              ev("adamw", "update", 0, 1, 40, 50, "CPU AdamW"),
              ev("param_put", "update", 0, 1, 50, 51),
              ev("adamw", "update", 1, 1, 51, 60, "CPU AdamW"),  # starts as the first put ends
              ev("param_put", "update", 1, 1, 70, 71),
              ev("adamw", "update", 2, 1, 60, 65, "CPU AdamW")):  # no put: no stage
        f.write(json.dumps(e) + "\n")
EOF
if python3 "$top/tools/lane_util.py" "$tmp/stages.jsonl" --json --stages > "$tmp/st.json" &&
    python3 - "$tmp/st.json" <<'EOF'; then ok "stages"; else fail "stages"; fi
import json, sys
s = json.load(open(sys.argv[1]))["stages"]
print("  stages:", s)
# cast: alive from 0-31 and 5-32 (2 at 5 ms), waits 20 and 19 ms; update: 40-51 and 51-71 never
# overlap (an end at the instant of a start frees first), waits 0 and 10 ms
want = {"cast": (2, 2, 5.0, 20.0, 20.0, 20.0), "update": (2, 1, 40.0, 10.0, 10.0, 10.0),
        "all": (4, 2, 5.0, 19.0, 20.0, 20.0)}
ok = True
for ph, w in want.items():
    r = s[ph]
    got = (r["stages"], r["max_alive"], r["at_ms"], r["wait_median_ms"], r["wait_p90_ms"],
           r["wait_max_ms"])
    if any(abs(g - x) > 1e-9 for g, x in zip(got, w)):
        print("  %s: got %s, want %s" % (ph, got, w))
        ok = False
sys.exit(0 if ok else 1)
EOF

# ---- logs made here: the CUDA workers' idle time (lane_util.py --idle and the options after
# it) and the step boundary (lane_util.py --boundary) ----
python3 - "$tmp/idle.jsonl" "$tmp/bnd.jsonl" <<'EOF'
import json, sys
def ev(name, phase, step, a, b, group=1, kind="CUDA", **times):  # times in microseconds
    e = {"name": name, "phase": phase, "step": step, "group": group, "chunk": -1, "mb": 0,
         "version": step, "lane": "GPU compute", "lane_id": 2, "worker": 0, "kind": kind,
         "rank": 0, "start_us": a, "end_us": b}
    e.update(times)
    return e
with open(sys.argv[1], "w") as f:
    for e in (ev("rmsnorm_fwd", "fwd", 0, 0, 10000),
              ev("matmul_fwd", "fwd", 0, 10020, 20000),     # 20 us after: no gap
              ev("param_fetch", "fwd", 0, 30000, 31000,     # 10 ms after: ready 2 ms in,
                 ready_us=22000, popped_us=25000,  # taken 3 ms later, its inputs 4 ms
                 fetched_us=29000),                # after that, started 1 ms after them
              ev("matmul_fwd", "fwd", 0, 31000, 40000),
              ev("swiglu_fwd", "fwd", 0, 35000, 45000),     # overlaps the matmul (a stream)
              ev("matmul_bwd_data", "bwd", 0, 45500, 50000),  # 0.5 ms after the later end
              ev("matmul_fwd", "fwd", 1, 60000, 61000)):    # step 1: not selected
        f.write(json.dumps(e) + "\n")
    cpu = ev("adamw", "update", 0, 1000, 5000)  # ends inside the first rmsnorm_fwd
    cpu.update({"lane": "CPU AdamW", "lane_id": 5, "worker": 1, "kind": "CPU"})
    f.write(json.dumps(cpu) + "\n")
with open(sys.argv[2], "w") as f:  # the boundary of step 0 (step 1 has no next step)
    for e in (ev("embedding_bwd", "bwd", 0, 800, 1000, group=0),
              ev("grad_pack", "norm", 0, 1500, 2000, group=0),
              ev("adamw_early", "update", 0, 500, 1500, group=0, kind="CPU", worker=3),
              ev("adamw", "update", 0, 3000, 6000, group=0, kind="CPU", fetched_us=3000, worker=1),
              ev("adamw", "update", 0, 3500, 7000, group=0, kind="CPU", fetched_us=3500, worker=2),
              ev("adamw", "update", 0, 4000, 8000, group=1, kind="CPU", fetched_us=4000, worker=1),
              ev("adamw_late", "update", 0, 8200, 9800, group=0, kind="CPU", worker=2),
              ev("embedding_fwd", "fwd", 1, 9500, 9600, group=0, fetched_us=9000),
              ev("param_fetch", "fwd", 1, 9600, 9610, group=1),
              ev("rmsnorm_fwd", "fwd", 1, 10000, 10100, group=1)):
        f.write(json.dumps(e) + "\n")
EOF
if python3 "$top/tools/lane_util.py" "$tmp/idle.jsonl" --steps 0-0 --json --idle > "$tmp/idle.json" &&
    python3 - "$tmp/idle.json" <<'EOF'; then ok "idle"; else fail "idle"; fi
import json, sys
rows = json.load(open(sys.argv[1]))["idle"]
print("  idle:", rows)
got = [(r["phase"], r["name"], round(r["ms"], 9), r["gaps"]) +
       tuple(round(r[p + "_ms"], 9) for p in ("dep", "sched", "data", "start", "unrecorded"))
       for r in rows]
# the matmul_bwd_data event has no ready/popped/fetched times: its gap is unrecorded
sys.exit(0 if got == [("fwd", "param_fetch", 10.0, 1, 2.0, 3.0, 4.0, 1.0, 0.0),
                      ("bwd", "matmul_bwd_data", 0.5, 1, 0.0, 0.0, 0.0, 0.0, 0.5)] else 1)
EOF
# the CUDA tasks above 9.5 ms (lane_util.py --long), with the events that ended inside each
if python3 "$top/tools/lane_util.py" "$tmp/idle.jsonl" --steps 0-0 --json --long 9.5 > "$tmp/long.json" &&
    python3 - "$tmp/long.json" <<'EOF'; then ok "long"; else fail "long"; fi
import json, sys
rows = json.load(open(sys.argv[1]))["long"]
print("  long:", rows)
got = [(r["name"], round(r["ms"], 9), r["others_ended"]) for r in rows]
sys.exit(0 if got == [("rmsnorm_fwd", 10.0, 1), ("matmul_fwd", 9.98, 0), ("swiglu_fwd", 10.0, 1)]
         else 1)
EOF
# every CUDA gap above 0.1 ms in time order (lane_util.py --gaps): the param_fetch's 10 ms after
# the matmul, split as --idle splits it, and the unrecorded 0.5 ms after the swiglu that ended
# last (it began inside the matmul); above 1 ms only the first; step 1's not selected
if python3 "$top/tools/lane_util.py" "$tmp/idle.jsonl" --steps 0-0 --json --gaps 0.1 > "$tmp/gaps.json" &&
    python3 "$top/tools/lane_util.py" "$tmp/idle.jsonl" --steps 0-0 --json --gaps 1 > "$tmp/gaps1.json" &&
    python3 "$top/tools/lane_util.py" "$tmp/idle.jsonl" --steps 0-0 --gaps 1 > "$tmp/gaps1.txt" &&
    python3 - "$tmp/gaps.json" "$tmp/gaps1.json" "$tmp/gaps1.txt" <<'EOF'; then ok "gaps"; else fail "gaps"; fi
import json, sys
def rows(f):
    return [(r["step"], r["phase"], r["name"], r["group"], round(r["at_ms"], 9), round(r["ms"], 9),
             r["after"]) + tuple(round(r[p + "_ms"], 9)
                                 for p in ("dep", "sched", "data", "start", "unrecorded"))
            for r in json.load(open(f))["gaps"]]
g, g1 = rows(sys.argv[1]), rows(sys.argv[2])
text = open(sys.argv[3]).read()
print("  gaps:", g)
fetch = (0, "fwd", "param_fetch", 1, 20.0, 10.0, "matmul_fwd", 2.0, 3.0, 4.0, 1.0, 0.0)
sys.exit(0 if g == [fetch, (0, "bwd", "matmul_bwd_data", 1, 45.0, 0.5, "swiglu_fwd",
                            0.0, 0.0, 0.0, 0.0, 0.5)] and g1 == [fetch] and
         "CUDA gaps longer than 1 ms" in text and "param_fetch" in text else 1)
EOF
# the CPU task time by phase and name (lane_util.py --cpu-by-task): the one adamw of 4 ms, and
# the median and p90 of the CUDA matmul_fwd tasks of step 0 (9.98 and 9 ms: the upper middle)
if python3 "$top/tools/lane_util.py" "$tmp/idle.jsonl" --steps 0-0 --json --by-task --cpu-by-task \
    > "$tmp/cpubytask.json" &&
    python3 - "$tmp/cpubytask.json" <<'EOF'; then ok "cpu-by-task"; else fail "cpu-by-task"; fi
import json, sys
out = json.load(open(sys.argv[1]))
cpu = [(r["phase"], r["name"], round(r["ms"], 9), r["tasks"], r["share"], round(r["median_ms"], 9))
       for r in out["cpu_by_task"]]
mm = [r for r in out["by_task"] if r["name"] == "matmul_fwd"][0]
print("  cpu by task:", cpu, " matmul_fwd median/p90:", mm["median_ms"], mm["p90_ms"])
sys.exit(0 if cpu == [("update", "adamw", 4.0, 1, 1.0, 4.0)] and
         (round(mm["median_ms"], 9), round(mm["p90_ms"], 9)) == (9.98, 9.98) else 1)
EOF
# the CUDA task time by phase and name (lane_util.py --by-task): the CPU's adamw is not counted
if python3 "$top/tools/lane_util.py" "$tmp/idle.jsonl" --steps 0-0 --json --by-task > "$tmp/bytask.json" &&
    python3 - "$tmp/bytask.json" <<'EOF'; then ok "by-task"; else fail "by-task"; fi
import json, sys
rows = json.load(open(sys.argv[1]))["by_task"]
print("  by task:", rows)
got = [(r["phase"], r["name"], round(r["ms"], 9), r["tasks"], round(r["share"], 9)) for r in rows]
# 44.48 ms of CUDA tasks in step 0: matmul_fwd 9.98 + 9, rmsnorm_fwd 10, swiglu_fwd 10, ...
sys.exit(0 if got == [("fwd", "matmul_fwd", 18.98, 2, 0.426708633),
                      ("fwd", "rmsnorm_fwd", 10.0, 1, 0.224820144),
                      ("fwd", "swiglu_fwd", 10.0, 1, 0.224820144),
                      ("bwd", "matmul_bwd_data", 4.5, 1, 0.101169065),
                      ("fwd", "param_fetch", 1.0, 1, 0.022482014)]
         else 1)
EOF

# the step boundary (lane_util.py --boundary)
if python3 "$top/tools/lane_util.py" "$tmp/bnd.jsonl" --steps 0-1 --json --boundary > "$tmp/bnd.json" &&
    python3 - "$tmp/bnd.json" <<'EOF'; then ok "boundary"; else fail "boundary"; fi
import json, sys
rows = [{k: round(v, 9) if isinstance(v, float) else v for k, v in r.items()}
        for r in json.load(open(sys.argv[1]))["boundary"]]
print("  boundary:", rows)
# upd0_end: the plain adamw of group 0, late_end the late one's; upd_end: the last update's end
# (the late one); cpu_floor: 0.5 ms of the early update and 3 + 3.5 + 4 + 1.6 ms of the others
# after the embedding's backward (1 ms), over the 3 workers that ran updates
want = [{"step": 0, "pack0_end": 1.0, "upd0_inputs": 2.0, "upd0_end": 6.0, "upd1_end": 7.0,
         "late_end": 8.8, "emb_fetched": 8.0, "emb_start": 8.5, "gap": 9.0, "upd_end": 8.8,
         "cpu_floor": round(12.6 / 3, 9)}]  # step 1 has no next step
sys.exit(0 if rows == want else 1)
EOF

[ "$fails" = 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
