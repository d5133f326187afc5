#!/bin/sh
# SPDX-License-Identifier: MIT
# slidedp calibrate started by mpirun with 2 processes on this machine: node 0 and node 1 measure
# the link between them (a ping-pong, runtime/nodes.h), node 0 alone measures the node and writes
# the machine file, with node_link {gbs, latency_us} both positive; `slidedp plan --nodes 2`
# prices on that link (its JSON names it calibrated, with the file's figures), and --node-gbs
# overrides it.  Skipped without StarPU-MPI.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_mpi

mpirun -np 2 "$bin" calibrate --gpus 0 -o "$tmp/m.json" > "$tmp/out" 2> "$tmp/err" ||
    { echo "calibrate under mpirun -np 2 failed"; cat "$tmp/err"; fail=1; }
grep "node link" "$tmp/err"
[ "$(grep -c "calibrate: .* written" "$tmp/err")" = 1 ] ||
    { echo "not one process wrote the file"; cat "$tmp/err"; fail=1; }
grep -q "calibrate: node link .*: [0-9.]* GB/s, [0-9.]* us a message" "$tmp/err" ||
    { echo "no progress line for the link"; fail=1; }
"$bin" plan --model qwen3-0.6b --gpus 1 --batch 32 --nodes 2 --machine "$tmp/m.json" --json \
    > "$tmp/plan.json" 2> "$tmp/plan.err" || { echo "plan failed"; cat "$tmp/plan.err"; fail=1; }
"$bin" plan --model qwen3-0.6b --gpus 1 --batch 32 --nodes 2 --machine "$tmp/m.json" --json \
    --node-gbs 1000 > "$tmp/fast.json" 2> /dev/null || { echo "plan --node-gbs failed"; fail=1; }
"$py" - "$tmp/m.json" "$tmp/plan.json" "$tmp/fast.json" <<'PYEOF' || fail=1
import json, sys
m, p, f = (json.load(open(a)) for a in sys.argv[1:4])
link = m.get("node_link") or {}
print("node_link", link, "; plan's", p["node_link"], "; --node-gbs 1000:", f["node_link"])
checks = {
    "link measured": link.get("gbs", 0) > 0 and link.get("latency_us", 0) > 0,
    # the ping-pong over this machine's shared memory: above 0.01 GB/s, below 10 s a message
    "plausible": link.get("gbs", 0) > 0.01 and link.get("latency_us", 1e9) < 1e7,
    "node rates": m["cores"] > 0 and all(x > 0 for x in m["adamw_bps"]),
    "plan prices on it": p["nodes"] == 2 and p["node_link"]["source"] == "calibrated"
    and abs(p["node_link"]["gbs"] - link["gbs"]) <= 1e-6 * link["gbs"]
    and abs(p["node_link"]["latency_us"] - link["latency_us"]) <= 1e-6 * link["latency_us"],
    "the link's demand": p["predicted"]["demand_s"]["node-link"] > 0,
    "the flag overrides": f["node_link"]["gbs"] == 1000 and f["node_link"]["source"] == "--node-gbs"
    and f["predicted"]["step_s"] <= p["predicted"]["step_s"],
}
bad = [k for k, ok in checks.items() if not ok]
print("checks failed:", bad) if bad else print("calibrate over 2 processes: all checks hold")
sys.exit(1 if bad else 0)
PYEOF
finish
