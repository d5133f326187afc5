#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Loss curves of several `slidedp train --metrics` runs against a reference run, step by step.

  bench/curves.py --ref NAME --md OUT.md NAME=METRICS.jsonl ...

For each run: the loss at steps 1, 50, 100, 150, 200 (null past its last step), its last step and
loss, the mean of its last 20 losses, and against the reference run (NAME among the runs) the
largest |loss - reference loss| over the steps both have, the step where it is, and whether every
step's logged loss is the reference's (`identical`: the same logged digits, for fp32 losses the
same bits).  Prints one JSON line {"system": "curves", "reference": NAME, "runs": {...}} and writes
the same as a markdown table to OUT.md.  Exit 1 when a file is missing or has no steps, 2 for usage.
"""
import argparse
import json
import sys

STEPS = (1, 50, 100, 150, 200)


def losses(path):
    """{step: loss} of a metrics file (one JSON object per step)."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                o = json.loads(line)
                if "step" not in o or "loss" not in o:
                    raise ValueError("%s:%d: no step or loss" % (path, n))
                out[o["step"]] = o["loss"]
    if not out:
        raise ValueError("%s: no steps" % path)
    return out


def summary(run, ref):
    last = max(run)
    tail = [run[s] for s in sorted(run)[-20:]]
    common = sorted(set(run) & set(ref))
    diffs = [(abs(run[s] - ref[s]), s) for s in common]
    worst = max(diffs) if diffs else (None, None)
    return {"at": {str(s): run.get(s) for s in STEPS}, "last_step": last, "last_loss": run[last],
            "mean_last20": sum(tail) / len(tail), "max_abs_dloss": worst[0], "max_at_step": worst[1],
            "steps_compared": len(common),
            "identical": len(common) == len(run) == len(ref) and all(d == 0 for d, _ in diffs)}


def table(ref, runs):
    fmt = lambda x: "-" if x is None else "%.4f" % x
    head = ["run"] + ["step %d" % s for s in STEPS] + ["mean last 20", "max abs dloss vs " + ref, "identical"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in runs.items():
        d = "-" if r["max_abs_dloss"] is None else "%.3e (step %d)" % (r["max_abs_dloss"], r["max_at_step"])
        cells = [name] + [fmt(r["at"][str(s)]) for s in STEPS] + [fmt(r["mean_last20"]), d,
                                                                   "yes" if r["identical"] else "no"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", required=True, help="the reference run's NAME")
    ap.add_argument("--md", required=True, help="the markdown table's file")
    ap.add_argument("runs", nargs="+", metavar="NAME=METRICS.jsonl")
    args = ap.parse_args()
    paths = {}
    for r in args.runs:
        name, sep, path = r.partition("=")
        if not sep or not name or not path or name in paths:
            ap.error("%r: runs are NAME=METRICS.jsonl, each NAME once" % r)
        paths[name] = path
    if args.ref not in paths:
        ap.error("--ref %s is not among the runs' names (%s)" % (args.ref, ", ".join(paths)))
    try:
        curves = {name: losses(p) for name, p in paths.items()}
    except (OSError, ValueError) as e:
        print("curves.py: %s" % e, file=sys.stderr)
        return 1
    runs = {name: summary(c, curves[args.ref]) for name, c in curves.items()}
    with open(args.md, "w") as f:
        f.write(table(args.ref, runs))
    print(json.dumps({"system": "curves", "reference": args.ref, "runs": runs}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
