#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Lane utilisation of a run, from its task event log.

Usage: lane_util.py EVENTS.jsonl [--steps A-B] [--json] [--timeline] [--stages] [--idle]
                    [--boundary] [--long MS] [--gaps MS] [--by-task] [--cpu-by-task]

The log is the one `slidedp train --events FILE` or `slidedp bench --events FILE` writes
(runtime/trace.h).  For every rank and lane, over the window from the first start to the last end
of the selected steps' task events:
  busy   the union of the lane's task intervals (overlapping tasks of one lane count once), as a
         fraction of the window: how much of the step the lane was working;
  tasks  the sum of task durations divided by the window: the lane's average concurrency (several
         CPU workers run AdamW chunks at once, so this exceeds 1 where busy cannot);
  waits  time ready work of the lane was held back by the policy (wait events), as a fraction;
  MB/step the bytes the lane's tasks moved (their "bytes": the fetches, puts and copies of the
         transfer lanes), per selected step.  The transfer tasks (param_chunk, grad_chunk) copy
         their chunk over PCIe themselves: their busy time is the transfer's, and the bus
         samples below do not count their bytes; a fetch's bytes are StarPU's transfer, which
         those samples count.
Then StarPU's own transfers, which no task event shows: the bus samples of the log ("event":
"bus", one per direction and GPU after each step returns, runtime/trace.h), in MB per step.
The lane that is busy for most of the window bounds the step.  --steps keeps the events of those
optimizer steps (default: all but the first, which includes start-up work).

--timeline adds, for every selected step of rank 0, the milestones of its critical path in ms from
the window's start: the forward's first start and last end (phase fwd), the backward's last end
(phases bwd and loss), the updates' first start and last end (phase update), and the next step's
first forward start.  From them: "tail", the updates left after the backward ended (update end -
backward end); "overlap", how long the next step's forward ran beside this step's updates (update
end - next forward start, when positive); "host idle", the time the update lane had nothing between
this step's first update and the previous step's last (first update start - previous update end,
when positive): the part of the step no host work can fill, from the end of the previous updates
to the first new gradient.

--idle reports where each CUDA worker waited: every gap of more than 50 us between the end of
its tasks so far and the start of its next task, summed per phase and name of the task that ends
it, for the tasks of the selected steps (ms in all and per step, and how many gaps).  Where the log
has each task's ready_us, popped_us and fetched_us, every gap is split into the wait for a
dependency (the gap's start to ready), for the scheduler (ready to popped), for the task's inputs
(popped to fetched, allocations included) and for its recorded start (fetched to start: StarPU
records a CUDA task queued behind another as started when it sees the one ahead end, so this part
is partly bookkeeping, not idle GPU); "unrecorded" for a task without those times.

--boundary follows, for every selected step of rank 0 that the log's next step follows, the step
boundary: the embedding's backward, the group-0 pack, the first group-0 update's inputs on the
host, the last group-0 and group-1 updates (plain adamw), the last late update of the embedding's
rows (adamw_late: the rows the next step's lookup does not read, "late_end", empty without them),
the next forward's embedding (when its inputs came, and its start) and the first task of layer 1 in the next forward, each in ms from the end of the
embedding's backward; "gap" is that last milestone, the GPU's boundary between the steps.  Then
"upd_end", the end of the step's last update (any group, early ones included), and "cpu_floor",
the AdamW work of the step still to run at the embedding's backward divided among the CPU workers
that ran updates in the log: the soonest the updates could end if every worker ran them back to
back from then on (the host's share of the boundary).

--long MS lists the CUDA tasks of the selected steps that took longer than MS ms, in time order,
each with how many other task events (any worker, any lane) ended while it ran: a long task that
nothing else ended beside held the whole run, not just its own GPU.  The LM head's lmhead_ce
(one task for the whole loss) is left out.

--gaps MS lists, in time order, every gap of a CUDA worker longer than MS ms before a task of the
selected steps (the gaps --idle sums): the step, phase, name and group of the task that ends it,
when the gap starts (ms from the window's start), how long it is, its split into the parts of
--idle, and the task whose end began it.  A gap whose task was ready long before ("dep" 0) but
whose inputs came late ("data") waited on PCIe or on memory.

--by-task sums the CUDA tasks of the selected steps by phase and name: ms in all and per step,
how many, and the share of the CUDA workers' task time; where the GPU's time goes, op by op.
Each row also gives the median task duration (the upper middle one for an even count) and the
90th percentile (the task at 90% of the sorted durations).

--cpu-by-task does the same for the CPU workers' tasks (AdamW's chunks, the casts): a host whose
memory runs slower shows as a longer median chunk update at the same count.

--stages reports, over the whole log (start-up included), the stages of a run whose working copies
are off the host (train.work_home: gpu; train.embed_home: gpu for the embedding's): each cast or
AdamW event that a param_put (param_put_rows, param_put_early for an early update) of the same
group, chunk and version follows wrote a stage on the host, and the stage lives from the writer's
start to the put's end.  Per phase (cast: the first casts; update: the steps) and in all: how many
stages, the most alive at once and when (ms from the log's first start), and the wait from the
writer's end to the put's start (median, 90th percentile, largest).  The most alive at once times
the stage size (2 bytes a parameter of a chunk: 8 MiB for 16 MiB chunks of fp32 masters) is the
host memory the stages took beyond the masters and moments.  Exits 2 when the log cannot be read
or holds no selected event.  Tests: tests/e2e/test_e2e_trace.sh, tests/e2e/test_e2e_work_home.sh.
"""
import argparse
import bisect
import json
import sys
from collections import defaultdict


FETCHES = ("param_fetch", "param_chunk")  # a group's dispatch, whole or chunk by chunk

def union_length(intervals):
    total, end = 0.0, None
    start = None
    for a, b in sorted(intervals):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    if end is not None:
        total += end - start
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("events")
    ap.add_argument("--steps", help="A-B: the optimizer steps to keep (0-based, inclusive)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    ap.add_argument("--timeline", action="store_true",
                    help="the critical-path milestones of every selected step")
    ap.add_argument("--stages", action="store_true",
                    help="the stages alive at once, with the working copies off the host")
    ap.add_argument("--idle", action="store_true",
                    help="the CUDA workers' idle time, by the task each gap waited for, split "
                    "into the wait for a dependency, the scheduler, the inputs and the start")
    ap.add_argument("--boundary", action="store_true",
                    help="the milestones of each selected step's boundary with the next")
    ap.add_argument("--long", type=float, metavar="MS",
                    help="the CUDA tasks longer than MS ms, and what ended beside them")
    ap.add_argument("--gaps", type=float, metavar="MS",
                    help="every CUDA gap longer than MS ms, in time order, split as --idle")
    ap.add_argument("--by-task", action="store_true",
                    help="the CUDA task time by phase and task name")
    ap.add_argument("--cpu-by-task", action="store_true",
                    help="the CPU task time by phase and task name")
    args = ap.parse_args()
    try:
        events = [json.loads(l) for l in open(args.events) if l.strip()]
    except (OSError, ValueError) as err:
        print("lane_util.py: %s: %s" % (args.events, err), file=sys.stderr)
        return 2
    steps = sorted({e["step"] for e in events if e.get("step", -1) >= 0})
    if args.steps:
        try:
            a, b = (int(x) for x in args.steps.split("-"))
        except ValueError:
            print("lane_util.py: --steps expects A-B", file=sys.stderr)
            return 2
        keep = set(range(a, b + 1))
    else:
        keep = set(steps[1:] if len(steps) > 1 else steps)
    sel = [e for e in events if e.get("step", -1) in keep]
    bus = [e for e in sel if e.get("event") == "bus"]
    sel = [e for e in sel if e.get("event") != "bus"]
    tasks = [e for e in sel if e.get("event", "task") != "wait"]
    if not tasks:
        print("lane_util.py: no task events in steps %s" % sorted(keep), file=sys.stderr)
        return 2
    t0 = min(e["start_us"] for e in tasks)
    t1 = max(e["end_us"] for e in tasks)
    window = max(t1 - t0, 1e-9)
    spans = defaultdict(list)
    total = defaultdict(float)
    waits = defaultdict(float)
    nbytes = defaultdict(float)
    for e in sel:
        nbytes[(e.get("rank", 0), e["lane"])] += e.get("bytes", 0)
        key = (e.get("rank", 0), e["lane"])
        if e.get("event", "task") == "wait":
            waits[key] += e["end_us"] - e["start_us"]
        else:
            spans[key].append((e["start_us"], e["end_us"]))
            total[key] += e["end_us"] - e["start_us"]
    rows = []
    for key in sorted(set(spans) | set(waits)):
        rows.append({"rank": key[0], "lane": key[1],
                     "busy": union_length(spans[key]) / window,
                     "tasks": total[key] / window, "waits": waits[key] / window,
                     "mb_per_step": nbytes[key] / 1e6 / len(keep)})
    # StarPU's bus counters (one sample per direction and GPU after each step's return)
    bus_mb = defaultdict(float)
    for e in bus:
        bus_mb["%s node %d" % (e["name"], e.get("node", -1))] += e["bytes"] / 1e6 / len(keep)
    out = {"steps": sorted(keep), "window_ms": window / 1e3, "per_step_ms": window / 1e3 / len(keep),
           "lanes": rows, "bus_mb_per_step": dict(bus_mb)}
    if args.timeline:
        out["timeline"] = timeline(events, sorted(keep), t0)
    if args.stages:
        out["stages"] = stages(events)
    if args.idle:
        out["idle"] = idle(events, keep)
    if args.boundary:
        out["boundary"] = boundary(events, sorted(keep))
    if args.long is not None:
        out["long"] = long_tasks(events, keep, args.long)
    if args.gaps is not None:
        out["gaps"] = gaps(events, keep, args.gaps, t0)
    if args.by_task:
        out["by_task"] = by_task(tasks, len(keep))
    if args.cpu_by_task:
        out["cpu_by_task"] = by_task(tasks, len(keep), "CPU")
    if args.json:
        print(json.dumps(out))
        return 0
    print("steps %s: %.1f ms (%.1f ms per step)" % (
        ",".join(str(s) for s in sorted(keep)), window / 1e3, out["per_step_ms"]))
    print("%-4s %-28s %6s %7s %6s %10s" % ("rank", "lane", "busy", "tasks", "waits", "MB/step"))
    for r in rows:
        print("%-4d %-28s %5.1f%% %7.2f %5.1f%% %10.1f" % (
            r["rank"], r["lane"], 100 * r["busy"], r["tasks"], 100 * r["waits"], r["mb_per_step"]))
    for name, mb in sorted(bus_mb.items()):
        print("bus %-24s %10.1f MB/step" % (name, mb))
    if args.timeline:
        cols = ("step", "fwd_start", "fwd_end", "bwd_end", "upd_start", "upd_end", "next_fwd",
                "tail", "overlap", "host_idle")
        print("timeline of rank 0, ms from the window's start:")
        print(" ".join("%9s" % c for c in cols))
        for t in out["timeline"]:
            print(" ".join("%9s" % ("-" if t.get(c) is None else
                                    ("%d" % t[c] if c == "step" else "%.1f" % t[c])) for c in cols))
    if args.idle:
        print("CUDA workers idle before (gaps > 50 us, selected steps):")
        print("%-4s %-6s %-10s %-24s %9s %9s %6s   per step: %s" % (
            "rank", "worker", "phase", "task", "ms", "ms/step", "gaps", " ".join(
                "%7s" % p for p in GAP_PARTS)))
        nsteps = max(len(keep), 1)
        for r in out["idle"]:
            print("%-4d %-6d %-10s %-24s %9.1f %9.1f %6d             %s" % (
                r["rank"], r["worker"], r["phase"], r["name"], r["ms"], r["ms_per_step"],
                r["gaps"], " ".join("%7.2f" % (r[p + "_ms"] / nsteps) for p in GAP_PARTS)))
    if args.gaps is not None:
        print("CUDA gaps longer than %g ms (ms from the window's start):" % args.gaps)
        print("%-4s %-6s %4s %-10s %-20s %5s %9s %7s %s  %-20s %5s" % (
            "rank", "worker", "step", "phase", "task", "group", "at", "ms",
            " ".join("%7s" % p for p in GAP_PARTS), "after", "group"))
        for r in out["gaps"]:
            print("%-4d %-6d %4d %-10s %-20s %5d %9.1f %7.2f %s  %-20s %5d" % (
                r["rank"], r["worker"], r["step"], r["phase"], r["name"], r["group"], r["at_ms"],
                r["ms"], " ".join("%7.2f" % r[p + "_ms"] for p in GAP_PARTS), r["after"],
                r["after_group"]))
    if args.boundary:
        print("step boundaries of rank 0, ms from the end of the embedding's backward:")
        print(" ".join("%11s" % c for c in BOUNDARY_COLS))
        for b in out["boundary"]:
            print(" ".join("%11s" % ("-" if b.get(c) is None else
                                     ("%d" % b[c] if c == "step" else "%.1f" % b[c]))
                           for c in BOUNDARY_COLS))
    if args.long is not None:
        print("CUDA tasks longer than %g ms (selected steps; ms from the window's start):" % args.long)
        print("%-4s %-6s %-4s %-10s %-20s %5s %9s %9s %7s" % (
            "rank", "worker", "step", "phase", "task", "group", "start", "ms", "others"))
        for r in out["long"]:
            print("%-4d %-6d %-4d %-10s %-20s %5d %9.1f %9.1f %7d" % (
                r["rank"], r["worker"], r["step"], r["phase"], r["name"], r["group"],
                (r["start_us"] - t0) / 1e3, r["ms"], r["others_ended"]))
    for key, kind in (("by_task", "CUDA"), ("cpu_by_task", "CPU")):
        if key not in out:
            continue
        print("%s task time by phase and task (selected steps):" % kind)
        print("%-10s %-24s %9s %9s %6s %6s %9s %9s" % ("phase", "task", "ms", "ms/step", "tasks",
                                                       "share", "median", "p90"))
        for r in out[key]:
            print("%-10s %-24s %9.1f %9.1f %6d %5.1f%% %9.2f %9.2f" % (
                r["phase"], r["name"], r["ms"], r["ms_per_step"], r["tasks"], 100 * r["share"],
                r["median_ms"], r["p90_ms"]))
    if args.stages:
        print("stages (writer start to put end; ms from the log's first start):")
        print("%-7s %7s %9s %9s %11s %9s %9s" % ("phase", "stages", "max_alive", "at_ms",
                                                "wait_median", "wait_p90", "wait_max"))
        for ph in ("cast", "update", "all"):
            s = out["stages"][ph]
            if not s["stages"]:
                print("%-7s %7d %9s" % (ph, 0, "-"))
                continue
            print("%-7s %7d %9d %9.1f %11.1f %9.1f %9.1f" % (
                ph, s["stages"], s["max_alive"], s["at_ms"], s["wait_median_ms"],
                s["wait_p90_ms"], s["wait_max_ms"]))
    return 0


def by_task(tasks, nsteps, kind="CUDA"):
    """The task time of one worker kind in the selected steps by phase and name (see --by-task,
    --cpu-by-task)."""
    durs = defaultdict(list)
    for e in tasks:
        if e.get("kind") == kind:
            durs[(e.get("phase", "?"), e["name"])].append((e["end_us"] - e["start_us"]) / 1e3)
    total = {k: sum(v) for k, v in durs.items()}
    alltime = max(sum(total.values()), 1e-9)
    nsteps = max(nsteps, 1)
    rows = []
    for k, v in sorted(total.items(), key=lambda kv: -kv[1]):
        d = sorted(durs[k])
        rows.append({"phase": k[0], "name": k[1], "ms": v, "ms_per_step": v / nsteps,
                     "tasks": len(d), "share": v / alltime, "median_ms": d[len(d) // 2],
                     "p90_ms": d[min(len(d) - 1, int(0.9 * len(d)))]})
    return rows


def cuda_by_worker(events):
    """The CUDA task events by (rank, worker), each list in start order."""
    byworker = defaultdict(list)
    for e in events:
        if e.get("event", "task") != "wait" and e.get("kind") == "CUDA":
            byworker[(e.get("rank", 0), e.get("worker", -1))].append(e)
    for evs in byworker.values():
        evs.sort(key=lambda e: e["start_us"])
    return byworker


def gaps(events, keep, ms, t0):
    """Every CUDA gap longer than ms before a task of the selected steps (see --gaps)."""
    out = []
    for (rank, worker), evs in cuda_by_worker(events).items():
        busy_until, last = None, None  # the latest end so far, and the task that ended then
        for e in evs:
            if (busy_until is not None and e["step"] in keep and
                    e["start_us"] - busy_until > ms * 1e3):
                row = {"rank": rank, "worker": worker, "step": e["step"], "phase": e["phase"],
                       "name": e["name"], "group": e["group"],
                       "at_ms": (busy_until - t0) / 1e3,
                       "ms": (e["start_us"] - busy_until) / 1e3,
                       "after": last["name"], "after_group": last["group"]}
                row.update({p + "_ms": v for p, v in gap_parts(e, busy_until).items()})
                out.append(row)
            if busy_until is None or e["end_us"] > busy_until:
                busy_until, last = e["end_us"], e
    return sorted(out, key=lambda r: (r["at_ms"], r["rank"], r["worker"]))


def idle(events, keep):
    """The CUDA workers' gaps before the tasks of the selected steps (see --idle)."""
    total, count = defaultdict(float), defaultdict(int)
    parts = defaultdict(lambda: dict.fromkeys(GAP_PARTS, 0.0))
    for (rank, worker), evs in cuda_by_worker(events).items():
        busy_until = None  # the latest end so far: tasks of one worker may overlap (streams)
        for e in evs:
            if busy_until is not None and e["start_us"] > busy_until + 50 and e["step"] in keep:
                key = (rank, worker, e["phase"], e["name"])
                total[key] += (e["start_us"] - busy_until) / 1e3
                count[key] += 1
                for part, ms in gap_parts(e, busy_until).items():
                    parts[key][part] += ms
            busy_until = e["end_us"] if busy_until is None else max(busy_until, e["end_us"])
    nsteps = max(len(keep), 1)
    return [dict({"rank": k[0], "worker": k[1], "phase": k[2], "name": k[3], "ms": v,
                  "ms_per_step": v / nsteps, "gaps": count[k]},
                 **{p + "_ms": parts[k][p] for p in GAP_PARTS})
            for k, v in sorted(total.items(), key=lambda kv: -kv[1])]


# The parts of a CUDA worker's gap before a task (see --idle in the module's text).
GAP_PARTS = ("dep", "sched", "data", "start", "unrecorded")


def gap_parts(e, gap_start):
    """The gap from gap_start to e's start split into GAP_PARTS, in ms."""
    end = e["start_us"]
    out = dict.fromkeys(GAP_PARTS, 0.0)
    marks = [e.get(k) for k in ("ready_us", "popped_us", "fetched_us")]
    if None in marks:
        out["unrecorded"] = (end - gap_start) / 1e3
        return out
    t = gap_start
    for part, mark in zip(GAP_PARTS[:3], marks):
        m = min(max(mark, t), end)  # each mark clipped into what is left of the gap
        out[part] = (m - t) / 1e3
        t = m
    out["start"] = (end - t) / 1e3
    return out


BOUNDARY_COLS = ("step", "pack0_end", "upd0_inputs", "upd0_end", "upd1_end", "late_end",
                 "emb_fetched", "emb_start", "gap", "upd_end", "cpu_floor")
UPDATES = ("adamw", "adamw_early", "adamw_late")


def boundary(events, steps):
    """The step boundaries of rank 0 (see --boundary)."""
    ev = [e for e in events if e.get("event", "task") != "wait" and e.get("rank", 0) == 0]
    nupd = len({e.get("worker") for e in ev if e["name"] in UPDATES and e.get("kind") == "CPU"})
    out = []
    for s in steps:
        ebwd = [e for e in ev if e["name"] == "embedding_bwd" and e["step"] == s]
        nxt = [e for e in ev if e["step"] == s + 1 and e["phase"] == "fwd"]
        if not ebwd or not nxt:
            continue
        t0 = max(e["end_us"] for e in ebwd)

        def rel(vals, pick=max):
            vals = [v for v in vals if v is not None]
            return (pick(vals) - t0) / 1e3 if vals else None

        upd = [e for e in ev if e["step"] == s and e["name"] == "adamw"]
        every = [e for e in ev if e["step"] == s and e["name"] in UPDATES]
        left = sum(max(0.0, e["end_us"] - max(e["start_us"], t0)) for e in every)
        emb = [e for e in nxt if e["name"] == "embedding_fwd"]
        layer1 = [e for e in nxt if e["group"] == 1 and e["name"] not in FETCHES]
        out.append({
            "step": s,
            "pack0_end": rel([e["end_us"] for e in ev if e["step"] == s and e["group"] == 0 and
                              e["name"] in ("grad_pack", "grad_pack_rows")]),
            "upd0_inputs": rel([e.get("fetched_us") for e in upd if e["group"] == 0], min),
            "upd0_end": rel([e["end_us"] for e in upd if e["group"] == 0]),
            "upd1_end": rel([e["end_us"] for e in upd if e["group"] == 1]),
            "late_end": rel([e["end_us"] for e in every if e["name"] == "adamw_late"]),
            "emb_fetched": rel([e.get("fetched_us") for e in emb], min),
            "emb_start": rel([e["start_us"] for e in emb], min),
            "gap": rel([e["start_us"] for e in layer1], min),
            "upd_end": rel([e["end_us"] for e in every]),
            "cpu_floor": left / nupd / 1e3 if every and nupd else None})
    return out


def long_tasks(events, keep, ms):
    """The CUDA tasks of the selected steps longer than ms (see --long)."""
    tasks = [e for e in events if e.get("event", "task") != "wait"]
    ends = sorted(e["end_us"] for e in tasks)
    out = []
    for e in sorted(tasks, key=lambda e: e["start_us"]):
        dur = (e["end_us"] - e["start_us"]) / 1e3
        if (e.get("kind") != "CUDA" or e.get("step", -1) not in keep or dur <= ms or
                e["name"] == "lmhead_ce"):
            continue
        # task events (the task itself excluded) that ended strictly inside it
        inside = bisect.bisect_left(ends, e["end_us"]) - bisect.bisect_right(ends, e["start_us"])
        out.append({"rank": e.get("rank", 0), "worker": e.get("worker", -1), "step": e["step"],
                    "phase": e["phase"], "name": e["name"], "group": e["group"],
                    "start_us": e["start_us"], "ms": dur, "others_ended": inside})
    return out


def stages(events):
    """The stages of a run with the working copies off the host (see --stages)."""
    tasks = [e for e in events if e.get("event", "task") != "wait"]
    if not tasks:
        return {}
    t0 = min(e["start_us"] for e in tasks)
    writers, puts = {}, {}
    for e in tasks:
        # an early update's stage goes with the early put (param_put_early) of its chunk
        key = (e.get("rank", 0), e["group"], e["chunk"], e.get("version"),
               e.get("name") in ("adamw_early", "param_put_early"))
        if e.get("name") in ("cast", "adamw", "adamw_early"):
            writers[key] = e
        elif e.get("name") in ("param_put", "param_put_rows", "param_put_early"):
            puts[key] = e
    out = {}
    # one put of a whole group (chunk -1: param_put_rows) empties the stages of all its chunks
    put_of = {k: puts.get(k) or puts.get((k[0], k[1], -1) + k[3:]) for k in writers}
    for ph in ("cast", "update", "all"):
        pairs = [(w, put_of[k]) for k, w in writers.items()
                 if put_of[k] and (ph == "all" or w.get("phase") == ph)]
        row = {"stages": len(pairs), "max_alive": 0, "at_ms": None, "wait_median_ms": None,
               "wait_p90_ms": None, "wait_max_ms": None}
        if pairs:
            points = sorted([(w["start_us"], 1) for w, _ in pairs] +
                            [(p["end_us"], -1) for _, p in pairs], key=lambda x: (x[0], x[1]))
            alive = 0
            for t, d in points:  # an end at the instant of a start frees first
                alive += d
                if alive > row["max_alive"]:
                    row["max_alive"], row["at_ms"] = alive, (t - t0) / 1e3
            waits = sorted(max(0.0, p["start_us"] - w["end_us"]) / 1e3 for w, p in pairs)
            row["wait_median_ms"] = waits[len(waits) // 2]
            row["wait_p90_ms"] = waits[min(len(waits) - 1, len(waits) * 9 // 10)]
            row["wait_max_ms"] = waits[-1]
        out[ph] = row
    return out


def timeline(events, keep, t0):
    """Critical-path milestones per step (rank 0), in ms from t0 (see --timeline)."""
    def phase_span(step, phases):
        ev = [e for e in events if e.get("event", "task") != "wait" and e.get("rank", 0) == 0
              and e.get("step") == step and e.get("phase") in phases
              and e.get("name") not in FETCHES]  # a dispatch, run as soon as the update ends
        if not ev:
            return None, None
        return (min(e["start_us"] for e in ev) - t0) / 1e3, (max(e["end_us"] for e in ev) - t0) / 1e3
    rows = []
    for s in keep:
        fs, fe = phase_span(s, ("fwd",))
        _, be = phase_span(s, ("bwd", "loss"))
        us, ue = phase_span(s, ("update",))
        nfs, _ = phase_span(s + 1, ("fwd",))
        _, pue = phase_span(s - 1, ("update",))
        row = {"step": s, "fwd_start": fs, "fwd_end": fe, "bwd_end": be, "upd_start": us,
               "upd_end": ue, "next_fwd": nfs, "tail": None, "overlap": None, "host_idle": None}
        if ue is not None and be is not None:
            row["tail"] = ue - be
        if ue is not None and nfs is not None:
            row["overlap"] = max(0.0, ue - nfs)
        if us is not None and pue is not None:
            row["host_idle"] = max(0.0, us - pue)
        rows.append(row)
    return rows


if __name__ == "__main__":
    sys.exit(main())
