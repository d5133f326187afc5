#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the three invariants of synchronous data parallelism on a task event log.

Usage: check_invariants.py [--max-inflight LANE=N ...] [--max-stages N] [--bwd-lookahead K]
                           EVENTS.jsonl [EVENTS.jsonl.node1 ...]

The log is the one `slidedp train --events FILE` writes (runtime/trace.h): one JSON object per
task with name, phase, step, group, chunk, mb, version, rank, start_us, end_us.  Compute events
are the phases fwd, recompute, bwd and loss; update events are adamw (phase update).  The checks
use only the times, so they hold on any log, from any number of ranks:

  1. Every compute event of one step and group reads one parameter version, on every rank.  The
     version an event read is derived from the times: one more than the latest step whose updates
     of the group all ended before the event started (the log's first step when none did).  An
     event that overlaps an update of its group reads torn weights.  The recorded version must
     agree with the derived one.  An AdamW whose chunk has a put (param_put with the working
     copies off the host, param_put_rows and param_put_early with the embedding's, stage_put for
     the early MLP update) wrote a stage: the put wrote the copy the compute reads, and it is the
     writer that counts here.  With routed streaming (graph/moe.c) a sparse layer's tasks other
     than the MoE ones read only the chunks the step fetched (param_chunk): only those chunks'
     updates count for them.
  2. The update of group g at step s starts after every backward (and loss) event of group g at
     step s, on every rank, has ended: it consumes the final, aggregated gradient.
     With the bf16 gradient return, the group's grad_pack event (its final gradient packed) must
     follow that backward, precede the group's updates, and end before the next step's zero of
     the group's accumulator starts.
     An early update (adamw_early: the tied embedding's rows that none of the step's tokens
     selects, graph/step.c) needs only the backward events that write those rows: every backward
     event of its group but the embedding's backward (trait rows_of_tokens), which adds to the
     rows of the step's tokens only.  Its pack is grad_pack_early, and its put (the embedding's
     copy off the host) param_put_early, under the same rule; the group's other
     updates follow the group's grad_pack as usual (grad_pack_rows, which packs only the rows of
     the step's tokens for them, counts as the group's grad_pack).
     The early MLP update (graph/step.c, mlp_early): grad_pack_mlp packs a layer's chunks from
     its own (the event's chunk) on, those of the MLP's weights, before the attention half of
     the layer's backward, whose events carry grad_lim (they write no gradient chunk from it
     on).  An update of a chunk, and that pack, need only the backward events that may write the
     chunk: those without grad_lim or with a grad_lim above the chunk.  The updates of those
     chunks follow grad_pack_mlp; the layer's other updates follow its grad_pack.
  3. No compute event of group g at step s+1 starts before every update of group g at step s has
     ended.
  4. A chunk's fetch into a rank's compute copy or replica (param_chunk, trait chunk_fetch: the
     working copy on the host in chunks, or the sharded route's) is no compute event for 1 and 3;
     it starts after the writers of its chunk's version have ended (the chunk's updates or puts of
     the step before, its cast of the step),
     and no compute event of its step, group and rank overlaps it; a fetch of the forward ends
     before the rank's first compute event of the group in the step starts.
A late update (adamw_late, graph/step.c defer_rows) takes the tied embedding's rows of step s's
tokens that step s+1's tokens do not select, so step s+1's lookup (embedding_fwd, trait lookup),
which reads only the rows its tokens select, does not wait for it; every other reader of the group
does (the LM head).  The log does not record rows: for 1 and 3 a lookup's writers are the group's
updates but the late ones, on the graph's word that the late rows are not the lookup's.
An event marked "tied" reads the embedding's group 0: the LM head of a tied model besides its own
group (for 1 and 3 it counts as a compute event of both), the fetch of the head's copy (param_fetch,
tied) group 0 alone (the head's key only places it in the head's window).
A group that no update of the log writes while other groups' are written (LoRA's frozen base, whose
adapters alone train) has a single version: its events' recorded versions, the step's, are not
compared with the derived one.  In a LoRA log (one with lora_* tasks) an update writes the
adapters alone: 1 and 2 look only at the tasks that read them (lora_fwd, lora_bwd) and at the
backward that writes their gradient (lora_bwd); the base's tasks read frozen weights.

A run over several nodes writes one log per node (FILE on node 0, FILE.nodeK on node K), each
event with "cluster_node" and the run's rank, on node 0's clock: given them all, the checker
holds 1, 3 and 4 node by node (each node updates its own copy) and 2 across the nodes
(check_nodes).

sdp-roundpipe's events carry their "stage" and "round": each stage must run on one worker, the
W workers that ran stages take them round-robin (stage k on stage k mod W's worker), and an
event's round is its stage // W; a breach counts as a violation ("rounds").

Events with step < 0 (evaluation outside training) and group < 0 (the global norm) are not tied
to a group's version and are skipped.  Waits (lines with "event": "wait", written by a policy
that held ready work back, e.g. sdp-slidedp's bounded staging) are not tasks: the invariants
ignore them, and the checker reports their count and time per lane and reason.

--max-inflight LANE=N (repeatable): no more than N staged task events of the lane (its name,
e.g. "CPU AdamW", or its lane_id) overlap in time, over all ranks and workers; an event ending at
the instant another starts does not overlap it.  Staged are the events the policy's bound covers:
phases cast and update, but not the param_put that empties a stage or the zeroing of a working
copy off the host (a dispatch's param_fetch shares the parameter lane but fills no staging
buffer).  A breach counts as a violation.

--max-stages N: with the working copies off the host, no more than N stages are alive at once: a
stage lives from the start of the cast or adamw that writes it to the end of the param_put of
the same rank, group, chunk and version that empties it (tools/lane_util.py --stages pairs them
alike; in a log with puts, a writer without its put counts to the log's end).  A breach counts as
a violation.

--bwd-lookahead K: the backward's preparations ran at most K layers ahead of it (the graph's
bwd_lookahead): the recomputation of layer l for a micro-batch, and the zeroing of layer l's
gradient for a rank's first micro-batch, start only after every backward event of layer l + 1 + K
of that micro-batch has ended (layer L + 1 is the final norm; groups above it have no bound).
A breach counts as a violation.  Prints each violation with event names and times; exits
1 if there is any, 0 if none, 2 when the log cannot be read.  Test: tests/e2e/test_e2e_trace.sh.
"""
import json
import os
import re
import sys
from collections import defaultdict

COMPUTE = {"fwd", "recompute", "bwd", "loss"}
STAGED = {"cast", "update"}  # the phases under the staging bound (sdp_slidedp_is_staged)
# What an op does comes from its traits, the words of its row in the table of ops (codelets/ops.c),
# looked up by the event's name, not from lists of op names here:
#   unstaged       of the staged phases, never held by the staging bound (puts, fetches, zeroing)
#   stage_writer   writes a stage when the working copy is off the host (casts, updates)
#   put            copies a stage an AdamW wrote into the working copy off the host
#   chunk_fetch    copies a chunk of the working copy on the host into the compute copy
#   no_params      reads no parameters (the zeroing of an accumulator, the embedding's backward,
#                  the fetch of embeddings)
#   rows_of_tokens a backward that writes only the gradient rows of the step's tokens
#   early, late    the tied embedding's early update (its pack and put), its late update
#   lookup         the embedding lookup, which reads only the rows of its tokens (see above)
# a row of the table: X(sdp_cl_<var>, "<name>", <lane>, <place>, "<traits>")
ROW = re.compile(r'X\(\s*sdp_cl_\w+,\s*"(\w+)",\s*\w+,\s*\w+,\s*"([^"]*)"\s*\)')
BACKWARD = {"bwd", "loss"}
MAX_PRINT = 20  # violations printed per invariant (all are counted)


def describe(e):
    parts = ["%s (%s, step %d, group %d" % (e["name"], e["phase"], e["step"], e["group"])]
    if e.get("chunk", -1) >= 0:
        parts.append("chunk %d" % e["chunk"])
    if e.get("mb", -1) >= 0:
        parts.append("mb %d" % e["mb"])
    parts.append("rank %d, worker %s, %.1f-%.1f us)" % (e.get("rank", 0), e.get("worker", "?"),
                                                        e["start_us"], e["end_us"]))
    return ", ".join(parts)


def op_traits():
    """Op name -> traits, from the rows of the table of ops (codelets/ops.c)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "codelets", "ops.c")
    try:
        with open(path) as f:
            rows = ROW.findall(f.read())
    except OSError as err:
        raise SystemExit("check_invariants.py: the table of ops: %s" % err) from None
    if not rows:
        raise SystemExit("check_invariants.py: no op rows in %s" % path)
    traits = defaultdict(frozenset)
    for name, words in rows:  # two codelets may share a name (their traits then agree)
        traits[name] |= frozenset(words.split())
    return traits


def load(path):
    traits = op_traits()
    events = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
                for k in ("name", "phase", "step", "group", "start_us", "end_us"):
                    if k not in e:
                        raise ValueError("no field '%s'" % k)
            except ValueError as err:
                raise SystemExit("%s:%d: not an event: %s" % (path, lineno, err)) from None
            e.setdefault("rank", 0)
            e["_traits"] = traits.get(e["name"], frozenset())
            e["_line"] = lineno
            events.append(e)
    return events


class Report:
    def __init__(self):
        self.count = defaultdict(int)

    def add(self, inv, msg):
        self.count[inv] += 1
        if self.count[inv] <= MAX_PRINT:
            if isinstance(inv, int):
                print("invariant %d violated: %s" % (inv, msg))
            else:
                print("%s violated: %s" % (inv, msg))

    def total(self):
        return sum(self.count.values())


def has(e, trait):
    """Whether event e's op has the trait (codelets/ops.c)."""
    return trait in e.get("_traits", ())


def is_wait(e):
    return e.get("event") == "wait"


def max_overlap(evs):
    """(most events of evs running at once, an event that started at that moment)"""
    points = []
    for e in evs:
        points.append((e["start_us"], 1, e))
        points.append((e["end_us"], 0, e))
    # at equal times, ends (0) before starts (1): touching events do not overlap
    points.sort(key=lambda p: (p[0], p[1]))
    cur = best = 0
    at = None
    for _, kind, e in points:
        cur += 1 if kind else -1
        if cur > best:
            best, at = cur, e
    return best, at


def check_inflight(events, limits, rep):
    tasks = [e for e in events if not is_wait(e)]
    for lane, limit in limits:
        evs = [e for e in tasks if (e.get("lane") == lane or str(e.get("lane_id")) == lane)
               and e.get("phase") in STAGED and not has(e, "unstaged")]
        peak, at = max_overlap(evs)
        print("lane %s: %d events, at most %d in flight (limit %d)" % (lane, len(evs), peak, limit))
        if peak > limit:
            rep.add("max-inflight", "lane %s runs %d events at once (limit %d), e.g. from %s"
                    % (lane, peak, limit, describe(at)))


def check_stages(events, limit, rep):
    tasks = [e for e in events if not is_wait(e)]
    # an early update's stage goes with the early put of its chunk (param_put_early)
    key = lambda e: (e.get("rank", 0), e["group"], e["chunk"], e.get("version"), has(e, "early"))
    puts = {key(e): e for e in tasks if has(e, "put")}
    # off the host every writer has a stage (one without its put stays alive to the end); on the
    # host only the writers with a put do (the early MLP update's stage_put, the embedding's puts)
    off_host = {e["group"] for e in tasks if e.get("name") == "param_put"}
    last = max((e["end_us"] for e in tasks), default=0.0)
    # one put of a whole group (chunk -1: param_put_rows, the embedding's rows) empties the
    # stages of all its chunks
    put_of = lambda w: puts.get(key(w)) or puts.get(key(dict(w, chunk=-1)))
    spans = [dict(w, end_us=put_of(w)["end_us"] if put_of(w) else last)
             for w in tasks
             if has(w, "stage_writer") and (w["group"] in off_host or put_of(w))]
    peak, at = max_overlap(spans)
    print("stages: %d written, at most %d alive (limit %d)" % (len(spans), peak, limit))
    if peak > limit:
        rep.add("max-stages", "%d stages alive at once (limit %d), e.g. from %s"
                % (peak, limit, describe(at)))


def check_lookahead(events, k, rep):
    tasks = [e for e in events if not is_wait(e) and e.get("step", -1) >= 0]
    groups = [e["group"] for e in tasks if e["group"] >= 0]
    if not groups:
        return
    head = max(groups)  # L + 1: the final norm's group
    done = defaultdict(float)  # (step, mb, group) -> end of its last backward event
    first_mb = {}  # (step, rank) -> the rank's first micro-batch
    for e in tasks:
        if e["phase"] in BACKWARD and e.get("mb", -1) >= 0:
            key = (e["step"], e["mb"], e["group"])
            done[key] = max(done[key], e["end_us"])
        if e["phase"] in COMPUTE and e.get("mb", -1) >= 0:
            key = (e["step"], e.get("rank", 0))
            first_mb[key] = min(first_mb.get(key, e["mb"]), e["mb"])
    checked = 0
    for e in tasks:
        if e["phase"] == "recompute" and e.get("mb", -1) >= 0:
            mb = e["mb"]
        elif (e["name"] == "zero" and e["phase"] == "bwd") or (
                e["name"] in ("param_fetch", "param_chunk")
                and e["phase"] in ("recompute", "bwd")):
            mb = first_mb.get((e["step"], e.get("rank", 0)), -1)
        else:
            continue
        gate = e["group"] + 1 + k
        if e["group"] < 1 or gate > head or mb < 0:
            continue
        checked += 1
        end = done.get((e["step"], mb, gate))
        if end is None or e["start_us"] < end:
            rep.add("bwd-lookahead", "%s starts before the backward of group %d (mb %d) %s"
                    % (describe(e), gate, mb, "ended at %.1f us" % end if end is not None
                       else "was seen"))
    print("bwd lookahead %d: %d gated events checked" % (k, checked))


def report_waits(events):
    waits = [e for e in events if is_wait(e)]
    if not waits:
        print("waits: none")
        return
    per = defaultdict(list)
    for w in waits:
        per[(w.get("lane", "?"), w.get("why", w["name"]))].append(w["end_us"] - w["start_us"])
    for (lane, why), durs in sorted(per.items()):
        print("waits on lane %s (%s): %d, %.1f us in all, longest %.1f us"
              % (lane, why, len(durs), sum(durs), max(durs)))


def routed_reads(ev):
    """Routed streaming (graph/moe.c): a sparse layer's tasks other than the MoE ones read only
    the chunks its step fetched (param_chunk, the chunks that are not an expert's alone); the
    experts' chunks reach the GPU inside the MoE tasks, which read every chunk's host copy.
    Returns f(event, updates): the updates whose chunks the event reads."""
    fetched, sparse = defaultdict(set), set()
    for e in ev:
        if e["name"] == "param_chunk":
            fetched[(e["step"], e["group"])].add(e.get("chunk", -1))
        elif e["name"].startswith("moe_"):
            sparse.add((e["step"], e["group"]))

    def f(e, us):
        key = (e["step"], e["group"])
        if not us or key not in sparse or key not in fetched or e["name"].startswith("moe_"):
            return us
        return [u for u in us if u.get("chunk", -1) in fetched[key]]
    return f


def check(events, rep=None):
    rep = rep or Report()
    ev = [e for e in events if e["step"] >= 0 and e["group"] >= 0 and not is_wait(e)]
    # a chunk's fetch (param_chunk) writes the compute copy: invariant 4 checks it, not 1 and 3
    compute = [e for e in ev if e["phase"] in COMPUTE and not has(e, "no_params")
               and not has(e, "chunk_fetch")]
    # a LoRA log: the updates write the adapters alone, which only the lora_* tasks read and whose
    # gradient only lora_bwd writes; the base's tasks read frozen weights and write no gradient
    # that an update takes, so they neither tear nor precede a version
    lora = any(e["name"].startswith("lora_") for e in ev)
    if lora:
        compute = [e for e in compute if e["name"].startswith("lora_")]
    # the tied LM head reads the embedding's weights too: once more as group 0's reader; the tied
    # fetch of the head's copy reads them alone
    tied = [dict(e, group=0) for e in compute if e.get("tied") and e["group"] != 0]
    compute = [e for e in compute if not (e.get("tied") and e["name"] == "param_fetch")] + tied
    # updates[g][s] = list of adamw events of group g at step s
    updates = defaultdict(lambda: defaultdict(list))
    for e in ev:
        if e["phase"] == "update":
            updates[e["group"]][e["step"]].append(e)
    first_step = {}
    for e in ev:
        g = e["group"]
        first_step[g] = min(first_step.get(g, e["step"]), e["step"])
    reads = routed_reads(ev)

    # ---- invariant 1: one version per (step, group), derived from the times ----
    derived = defaultdict(list)  # (step, group) -> [(version, event)]
    for e in compute:
        g, s = e["group"], e["step"]
        ups = updates.get(g, {})
        applied = []
        # the updates that can matter: the previous two steps, this one and the next
        for s2 in range(s - 2, s + 2):
            us = ups.get(s2)
            if us and has(e, "lookup"):
                us = [u for u in us if not has(u, "late")]
            us = reads(e, us)
            if not us:
                continue
            # an AdamW whose chunk has a put (param_put, stage_put) wrote a stage, and the put
            # the copy the compute reads: the writers are the puts and the other AdamWs
            put_chunks = {u.get("chunk", -1) for u in us if has(u, "put")}
            us = [u for u in us if has(u, "put") or u.get("chunk", -1) not in put_chunks]
            last_end = max(u["end_us"] for u in us)
            if last_end <= e["start_us"]:
                applied.append(s2)
                continue
            for u in us:
                if u["start_us"] < e["end_us"] and u["end_us"] > e["start_us"]:
                    rep.add(1, "%s reads group %d while %s writes it (torn weights)"
                            % (describe(e), g, describe(u)))
                    break
                if u["end_us"] <= e["start_us"]:
                    rep.add(1, "%s starts after %s but before the rest of that update of "
                            "group %d (mixed versions)" % (describe(e), describe(u), g))
                    break
        if applied:
            version = max(applied) + 1
        elif any(s2 < s - 2 for s2 in ups):
            version = s - 2  # at most: even the update of step s-2 had not ended
        else:
            version = first_step[g]
        derived[(s, g)].append((version, e))
        # a group that no update writes while others' are (LoRA's frozen base) has one version
        # whatever the step its events record
        if "version" in e and e["version"] != version and (g in updates or not updates):
            rep.add(1, "%s is recorded as reading version %d, but by the times it read version "
                    "%d" % (describe(e), e["version"], version))
    for (s, g), lst in sorted(derived.items()):
        versions = sorted({v for v, _ in lst})
        if len(versions) > 1:
            examples = "; ".join("version %d: %s" % (v, describe(next(x for w, x in lst if w == v)))
                                 for v in versions)
            ranks = sorted({x["rank"] for _, x in lst})
            rep.add(1, "step %d group %d (ranks %s) computes with versions %s: %s"
                    % (s, g, ranks, versions, examples))
        recorded = sorted({x["version"] for _, x in lst if "version" in x})
        if len(recorded) > 1:
            rep.add(1, "step %d group %d: events record versions %s" % (s, g, recorded))

    # ---- invariant 2: the update consumes the final gradient of every rank ----
    bwd_of = defaultdict(list)
    for e in ev:
        if e["phase"] in BACKWARD and (not lora or e["name"] == "lora_bwd"):
            bwd_of[(e["step"], e["group"])].append(e)

    def last_writer(s, g, chunk, early):
        """The last-ending backward event of step s and group g that may write gradient chunk
        `chunk` (-1: any): all of them but those that write only chunks below a limit at or under
        it (grad_lim) and, for an early update or its pack, the backward that writes only the rows
        of the step's tokens."""
        best = None
        for b in bwd_of.get((s, g), ()):
            lim = b.get("grad_lim", 0)
            if chunk >= 0 and 0 < lim <= chunk:
                continue
            if early and has(b, "rows_of_tokens"):
                continue
            if best is None or b["end_us"] > best["end_us"]:
                best = b
        return best

    for g, per_step in updates.items():
        for s, us in per_step.items():
            for u in us:
                last = last_writer(s, g, u.get("chunk", -1), has(u, "early"))
                if last is not None and u["start_us"] < last["end_us"]:
                    rep.add(2, "%s starts at %.1f us, before %s ends at %.1f us"
                            % (describe(u), u["start_us"], describe(last), last["end_us"]))

    # ---- invariant 2 with the bf16 gradient return: the pack (grad_pack, one per group and
    # step; with the early MLP update, grad_pack_mlp packs the chunks from its own on) is the
    # gradient's final form: the updates of its chunks start after it, and the next step's
    # zeroing of that accumulator after it too (else the pack would read a cleared or partly
    # re-accumulated gradient) ----
    packs, early_packs, mlp_packs = {}, {}, {}
    for e in ev:
        table = {"grad_pack": packs, "grad_pack_rows": packs, "grad_pack_early": early_packs,
                 "grad_pack_mlp": mlp_packs}.get(e["name"])
        if table is not None:
            table[(e["step"], e["group"])] = e
    for table, early in ((packs, False), (early_packs, True), (mlp_packs, False)):
        for (s, g), p in sorted(table.items()):
            last = last_writer(s, g, p.get("chunk", -1) if table is mlp_packs else -1, early)
            if last is not None and p["start_us"] < last["end_us"]:
                rep.add(2, "%s starts at %.1f us, before %s ends at %.1f us"
                        % (describe(p), p["start_us"], describe(last), last["end_us"]))
    for g, per_step in updates.items():
        for s, us in per_step.items():
            for u in us:
                mlp = mlp_packs.get((s, g))
                if has(u, "early"):
                    p = early_packs.get((s, g))
                elif mlp is not None and u.get("chunk", -1) >= mlp.get("chunk", 0):
                    p = mlp
                else:
                    p = packs.get((s, g))
                if p is not None and u["start_us"] < p["end_us"]:
                    rep.add(2, "%s starts at %.1f us, before %s ends at %.1f us"
                            % (describe(u), u["start_us"], describe(p), p["end_us"]))
    for e in ev:
        if e["name"] != "zero":
            continue
        for table in (packs, mlp_packs):
            p = table.get((e["step"] - 1, e["group"]))
            if p is not None and e["start_us"] < p["end_us"]:
                rep.add(2, "%s starts at %.1f us, before %s (the previous step's) ends at %.1f us"
                        % (describe(e), e["start_us"], describe(p), p["end_us"]))

    # ---- invariant 3: the next step's dispatch of a group waits for its update ----
    for e in compute:
        g, s = e["group"], e["step"]
        us = updates.get(g, {}).get(s - 1)
        if us and has(e, "lookup"):
            us = [u for u in us if not has(u, "late")]
        us = reads(e, us or [])
        if not us:
            continue
        last = max(us, key=lambda u: u["end_us"])
        if e["start_us"] < last["end_us"]:
            rep.add(3, "%s starts at %.1f us, before %s ends at %.1f us"
                    % (describe(e), e["start_us"], describe(last), last["end_us"]))

    check_chunk_fetches(ev, compute, rep)
    nup = sum(len(us) for per in updates.values() for us in per.values())
    steps = sorted({e["step"] for e in ev})
    print("checked %d events: %d compute, %d updates, %d gradient packs, steps %s, groups %d, "
          "ranks %s" % (len(events), len(compute), nup, len(packs),
                        steps if len(steps) < 10 else "%d-%d" % (steps[0], steps[-1]),
                        len({e["group"] for e in ev}), sorted({e["rank"] for e in ev})))
    return rep


def check_nodes(events, rep):
    """A run over several nodes (events with cluster_node, on node 0's clock): each node updates
    its own copy, so 1, 3 and 4 hold node by node (check() on each node's events); 2 holds across
    them: a node's update of a group at a step starts after every backward (and loss) event of that
    group and step on every node has ended, since it reads the sum of every rank's gradient."""
    nodes = defaultdict(list)
    for e in events:
        nodes[e["cluster_node"]].append(e)
    for k in sorted(nodes):
        check(nodes[k], rep)
    last_bwd = {}
    for e in events:
        if e["step"] >= 0 and e["group"] >= 0 and e["phase"] in BACKWARD and not is_wait(e):
            key = (e["step"], e["group"])
            if key not in last_bwd or e["end_us"] > last_bwd[key]["end_us"]:
                last_bwd[key] = e
    for u in events:
        if u["step"] < 0 or u["group"] < 0 or u["phase"] != "update":
            continue
        last = last_bwd.get((u["step"], u["group"]))
        if last is not None and last["cluster_node"] != u["cluster_node"] and \
                u["start_us"] < last["end_us"]:
            rep.add(2, "%s on node %d starts at %.1f us, before %s on node %d ends at %.1f us"
                    % (describe(u), u["cluster_node"], u["start_us"], describe(last),
                       last["cluster_node"], last["end_us"]))
    return rep


def check_chunk_fetches(ev, compute, rep):
    """Invariant 4: a chunk's fetch into a rank's compute copy (trait chunk_fetch) of step s
    starts after the writers of that chunk's version have ended (the chunk's updates of step
    s - 1, its cast of step s), and no compute event of (s, group) on that rank overlaps it; the
    fetches of the forward end before the rank's first compute event of the group and step."""
    fetches = [e for e in ev if has(e, "chunk_fetch")]
    writers = defaultdict(list)  # (version, group, chunk) -> events
    for e in ev:  # the working copy's writers (casts, updates, puts), not the sharded route's copies
        if not (has(e, "stage_writer") or has(e, "put")) or e.get("chunk", -1) < 0:
            continue
        if e["phase"] == "update":
            writers[(e["step"] + 1, e["group"], e["chunk"])].append(e)
        elif e["phase"] == "cast":
            writers[(e["step"], e["group"], e["chunk"])].append(e)
    readers = defaultdict(list)  # (step, group, rank) -> compute events (each rank has its copy)
    for e in compute:
        readers[(e["step"], e["group"], e.get("rank", 0))].append(e)
    for f in fetches:
        s, g = f["step"], f["group"]
        for w in writers.get((s, g, f.get("chunk", -1)), []):
            if f["start_us"] < w["end_us"]:
                rep.add(4, "%s starts at %.1f us, before %s ends at %.1f us"
                        % (describe(f), f["start_us"], describe(w), w["end_us"]))
        for r in readers.get((s, g, f.get("rank", 0)), []):
            early = f["phase"] == "fwd" and r["start_us"] < f["end_us"]
            if early or (r["start_us"] < f["end_us"] and r["end_us"] > f["start_us"]):
                rep.add(4, "%s starts at %.1f us, before %s ends at %.1f us"
                        % (describe(r), r["start_us"], describe(f), f["end_us"]))
                break


def check_rounds(events, rep):
    """sdp-roundpipe's stages round-robin over the workers that ran them, and their rounds."""
    staged = [e for e in events if not is_wait(e) and "stage" in e]
    if not staged:
        return
    workers = defaultdict(set)  # stage -> the workers that ran its events
    for e in staged:
        workers[e["stage"]].add(e.get("worker"))
    w = len(set().union(*workers.values()))
    for k, ws in sorted(workers.items()):
        if len(ws) != 1 or ws != workers.get(k % w):
            rep.add("rounds", "stage %d ran on workers %s, stage %d on %s"
                    % (k, sorted(ws), k % w, sorted(workers.get(k % w, ()))))
    for e in staged:
        if "round" in e and e["round"] != e["stage"] // w:
            rep.add("rounds", "%s: round %d, but stage %d over %d workers is in round %d"
                    % (describe(e), e["round"], e["stage"], w, e["stage"] // w))
    print("stages: %d over %d stage workers, rounds %s" % (
        len(workers), w, sorted({e["round"] for e in staged if "round" in e}) or "not logged"))


def usage():
    print("usage: check_invariants.py [--max-inflight LANE=N ...] [--max-stages N] "
          "[--bwd-lookahead K] EVENTS.jsonl [EVENTS.jsonl.nodeK ...]", file=sys.stderr)
    return 2


def option(name, a, args):
    """The value of option `name` when a is it (`--name V` or `--name=V`), else None."""
    if a == name:
        return args.pop(0) if args else ""
    return a.split("=", 1)[1] if a.startswith(name + "=") else None


def count(name, v, what):
    """int(v), or None after saying that option `name` wants a number of `what`."""
    if v.isdigit():
        return int(v)
    print("%s wants a number of %s, not '%s'" % (name, what, v), file=sys.stderr)
    return None


def main(argv):
    limits, paths, lookahead, stages = [], [], None, None
    args = argv[1:]
    while args:
        a = args.pop(0)
        spec, stages_v, lookahead_v = (option(n, a, args) for n in
                                       ("--max-inflight", "--max-stages", "--bwd-lookahead"))
        if spec is not None:
            lane, _, n = spec.rpartition("=")
            if not lane or not n.isdigit():
                print("--max-inflight wants LANE=N, not '%s'" % spec, file=sys.stderr)
                return usage()
            limits.append((lane, int(n)))
        elif stages_v is not None:
            stages = count("--max-stages", stages_v, "stages")
            if stages is None:
                return usage()
        elif lookahead_v is not None:
            lookahead = count("--bwd-lookahead", lookahead_v, "layers")
            if lookahead is None:
                return usage()
        elif a.startswith("-") and a != "-":
            return usage()
        else:
            paths.append(a)
    if not paths:
        return usage()
    events = []
    for path in paths:  # a run over several nodes: every node's log (FILE, FILE.node1, ...)
        try:
            more = load(path)
        except OSError as err:
            print("cannot read %s: %s" % (path, err), file=sys.stderr)
            return 2
        except SystemExit as err:
            print(err, file=sys.stderr)
            return 2
        if len(paths) > 1 and any("cluster_node" not in e for e in more):
            print("%s: not a log of a run over several nodes (no cluster_node)" % path,
                  file=sys.stderr)
            return 2
        events += more
    if any("cluster_node" in e for e in events):
        rep = check_nodes(events, Report())
    else:
        rep = check(events)
    check_inflight(events, limits, rep)
    check_rounds(events, rep)
    if stages is not None:
        check_stages(events, stages, rep)
    if lookahead is not None:
        check_lookahead(events, lookahead, rep)
    report_waits(events)
    if rep.total():
        print("%d violations (%s)" % (rep.total(), ", ".join(
            ("invariant %d: %d" % (i, n)) if isinstance(i, int) else ("%s: %d" % (i, n))
            for i, n in sorted(rep.count.items(), key=lambda kv: str(kv[0])))))
        return 1
    print("invariants 1 to 4 hold" + ("; in-flight limits hold" if limits else "") +
          ("; the stage bound holds" if stages is not None else "") +
          ("; the backward lookahead holds" if lookahead is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
