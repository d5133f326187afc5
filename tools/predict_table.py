#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The step-time model against measurements: the table of a `bench/run-gpu.sh OUT predict` folder.

Usage: predict_table.py OUT [--json]

For every bench line of OUT/results.jsonl that carries a prediction (`slidedp bench --machine`):
the measured step (the median of the timed steps) against the predicted one, the GPU and host
peaks against the predicted ones, and the bound the model names against the one the trace names
(OUT/events-NAME.lanes.txt, tools/lane_util.py: the lane busy for most of the window bounds the
step; below 85% busy no lane does, and the waits between them, "dependencies", do).  Then the
effects the model is to predict after the fact, where OUT has both runs of a pair: qwen3-4b/16
with 64 MiB chunks against 16, and with the fp32 gradient return against bf16 (the change of
tokens/s, measured and predicted, and whether the prediction lies within a third of the
measured effect).
"""
import json
import os
import re
import sys

LANES = {"GPU compute": "gpu", "CPU AdamW": "cpu", "param cast": "cpu", "param H2D": "h2d",
         "gradient reduction": "cpu", "CPU compute": "cpu"}
FULL = 0.85  # a lane this busy bounds the step


def name_of(d):
    s = d["settings"]
    return "%s-b%d-grad-%s-gib%g-chunk%g" % (os.path.basename(d["model"]).replace(".json", ""),
                                            d["batch"], s["grad_dtype"], s["gpu_memory_gib"],
                                            s["chunk_mib"])


def trace_bound(path):
    """(bound, busy of the busiest lane) from a lanes report, or (None, None)."""
    if not os.path.exists(path):
        return None, None
    best, busy = None, -1.0
    for line in open(path):
        m = re.match(r"\s*0\s+(.+?)\s+([0-9.]+)%\s", line)
        if m and float(m.group(2)) > busy:
            best, busy = m.group(1), float(m.group(2))
    if best is None:
        return None, None
    return (LANES.get(best, best) if busy >= 100 * FULL else "dependencies"), busy


def rows_of(out):
    rows = []
    for line in open(os.path.join(out, "results.jsonl")):
        d = json.loads(line)
        p = d.get("predicted")
        if not p:
            continue
        name = name_of(d)
        bound, busy = trace_bound(os.path.join(out, "events-%s.lanes.txt" % name))
        rows.append({
            "name": name, "measured_s": d["step_s_median"], "predicted_s": p["step_s"],
            "tokens_per_s": d["tokens_per_s"], "predicted_tokens_per_s": p["tokens_per_s"],
            "gpu_gib": d["gpu_peak_gib"], "predicted_gpu_gib": p["gpu_peak_gib"],
            "host_gib": d["host_peak_gib"], "predicted_host_gib": p["host_peak_gib"],
            "bound": p["bound"], "trace_bound": bound, "trace_busiest": busy,
            "step_err": p["step_s"] / d["step_s_median"] - 1,
            "gpu_err": p["gpu_peak_gib"] / d["gpu_peak_gib"] - 1 if d["gpu_peak_gib"] else None,
            "host_err": p["host_peak_gib"] / d["host_peak_gib"] - 1,
        })
    return rows


def effects(rows):
    by = {r["name"]: r for r in rows}
    pairs = [("chunk 64 -> 16 MiB", "qwen3-4b-b16-grad-bf16-gib0-chunk64",
              "qwen3-4b-b16-grad-bf16-gib0-chunk16"),
             ("fp32 -> bf16 gradient return", "qwen3-4b-b16-grad-fp32-gib0-chunk16",
              "qwen3-4b-b16-grad-bf16-gib0-chunk16")]
    res = []
    for what, before, after in pairs:
        if before in by and after in by:
            a, b = by[before], by[after]
            meas = a["measured_s"] / b["measured_s"] - 1  # the speed-up of the change
            pred = a["predicted_s"] / b["predicted_s"] - 1
            res.append({"effect": what, "measured": meas, "predicted": pred,
                        "within_a_third": abs(pred - meas) <= abs(meas) / 3})
    return res


def pct(x):
    return "-" if x is None else "%+.1f%%" % (100 * x)


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = rows_of(sys.argv[1])
    eff = effects(rows)
    if "--json" in sys.argv[2:]:
        print(json.dumps({"rows": rows, "effects": eff}, indent=1))
        return 0
    print("| workload | step s measured | predicted | error | GPU GiB measured | predicted | error "
          "| host GiB measured | predicted | error | bound (model) | bound (trace, busiest lane) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %.3f | %.3f | %s | %.1f | %.1f | %s | %.1f | %.1f | %s | %s | %s (%s%%) |" % (
            r["name"], r["measured_s"], r["predicted_s"], pct(r["step_err"]), r["gpu_gib"],
            r["predicted_gpu_gib"], pct(r["gpu_err"]), r["host_gib"], r["predicted_host_gib"],
            pct(r["host_err"]), r["bound"], r["trace_bound"], r["trace_busiest"]))
    if eff:
        print("\n| effect | measured | predicted | within a third |")
        print("|---|---|---|---|")
        for e in eff:
            print("| %s | %s | %s | %s |" % (e["effect"], pct(e["measured"]), pct(e["predicted"]),
                                            "yes" if e["within_a_third"] else "no"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
