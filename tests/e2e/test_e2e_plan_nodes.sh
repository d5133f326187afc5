#!/bin/sh
# SPDX-License-Identifier: MIT
# slidedp plan --nodes: the step-time model's link between nodes from the command line (no MPI,
# no StarPU).  qwen3-0.6b on one GPU a node, 16 sequences a GPU, the reference node's figures: one
# node has no link; 2 and 4 nodes carry the fp32 gradient once and twice each way a step (4 and 8
# bytes a parameter), at the default 12.5 GB/s and 10 us, named in the text and the JSON; a faster
# link never slows the step, a slow one bounds it (node-link); the per-GPU work stays the same
# from 2 to 4 nodes; the what-if table offers both routes over nodes.
# Refused (exit 2): a batch that does not split among the nodes' ranks, from --model and from a
# recipe.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
plan() { "$bin" plan --model qwen3-0.6b --gpus 1 "$@"; }
for n in 1 2 4; do
    plan --batch $((16 * n)) --nodes $n --json > "$tmp/n$n.json" 2> "$tmp/n$n.err" ||
        { echo "plan --nodes $n failed"; cat "$tmp/n$n.err"; fail=1; }
done
plan --batch 32 --nodes 2 --node-gbs 50 --node-latency-us 2 --json > "$tmp/fast.json" || fail=1
plan --batch 32 --nodes 2 --node-gbs 0.1 --json > "$tmp/slow.json" || fail=1
plan --batch 32 --nodes 2 > "$tmp/n2.txt" 2> /dev/null || fail=1
plan --gpus 8 --ranks 8 --batch 256 --nodes 2 --json > "$tmp/r8.json" 2> /dev/null
"$py" -c "import json, sys; w = [x['change'] for x in json.load(open(sys.argv[1]))['what_if']]; \
print('8 ranks over 2 nodes, what if:', w); sys.exit(not any(c.startswith('train.grad_route') for c in w) or \
not any(c.startswith('train.param_route') for c in w))" "$tmp/r8.json" ||
    { echo "the what-if over nodes lacks the gradient or the parameter route"; fail=1; }
grep -E "node link|nodes of" "$tmp/n2.txt"
grep -q "^run: .* on 2 nodes of 1 GPU" "$tmp/n2.txt" || { echo "the run's nodes not printed"; fail=1; }
grep -q "the node link (12.5 GB/s, 10 us a message: the model's defaults): [0-9.]* GB each way" \
    "$tmp/n2.txt" || { echo "the link not printed"; cat "$tmp/n2.txt"; fail=1; }
"$py" - "$tmp" <<'PYEOF' || fail=1
import json, sys
d = sys.argv[1]
j = {k: json.load(open(f"{d}/{k}.json")) for k in ("n1", "n2", "n4", "fast", "slow")}
p = {k: v["predicted"] for k, v in j.items()}
P = j["n1"]["params"]
for k in ("n1", "n2", "n4", "fast", "slow"):
    print(k, "step %.3f s, bound %s, node-link %.3f s, bytes %.3g, tokens/s %.0f" % (
        p[k]["step_s"], p[k]["bound"], p[k]["demand_s"]["node-link"], p[k]["node_bytes"],
        p[k]["tokens_per_s"]))
near = lambda a, b: abs(a - b) <= 1e-9 * abs(b)
checks = {
    "nodes": [j[k]["nodes"] for k in ("n1", "n2", "n4")] == [1, 2, 4],
    "defaults": j["n2"]["node_link"] == {"gbs": 12.5, "latency_us": 10.0,
                                         "source": "the model's defaults"},
    "one node, no link": p["n1"]["demand_s"]["node-link"] == 0 and p["n1"]["node_bytes"] == 0,
    # every parameter trains: the fp32 gradient, once each way with 2 nodes, twice with 4
    "bytes": near(p["n2"]["node_bytes"], 4 * P) and near(p["n4"]["node_bytes"], 8 * P),
    "demand": near(p["n2"]["demand_s"]["node-link"], 4 * P / 12.5e9),
    # (one node returns the gradient in bf16, several in fp32: the packing differs there)
    "per-GPU work": near(p["n4"]["demand_s"]["gpu"], p["n2"]["demand_s"]["gpu"]),
    "more nodes, no shorter step": p["n4"]["step_s"] >= p["n2"]["step_s"],
    "the flags": j["fast"]["node_link"]["gbs"] == 50 and j["fast"]["node_link"]["latency_us"] == 2
    and j["fast"]["node_link"]["source"] == "--node-gbs, --node-latency-us",
    "faster never slower": p["fast"]["step_s"] <= p["n2"]["step_s"],
    "slow bounds": p["slow"]["bound"] == "node-link" and p["slow"]["step_s"] > p["n2"]["step_s"]
    and p["slow"]["node_chain_s"] == p["slow"]["step_s"],
    "tail": p["n4"]["node_tail_s"] > p["n2"]["node_tail_s"] > 0,
}
bad = [k for k, ok in checks.items() if not ok]
print("plan --nodes: checks failed:", bad) if bad else print("plan --nodes: all checks hold")
sys.exit(1 if bad else 0)
PYEOF
expect 2 "batch 16 must split into 3 ranks" -- \
    "$bin" plan --model qwen3-0.6b --gpus 1 --batch 16 --nodes 3
micro_recipe | sed -e 's/^\( *global:\).*/\1 6/' -e 's/^\( *micro:\).*/\1 1/' > "$tmp/r.yaml"
expect 2 "6 micro-batches a step .* do not divide among 4 nodes of 1 rank" -- \
    "$bin" plan "$tmp/r.yaml" --nodes 4
"$bin" plan "$tmp/r.yaml" --nodes 3 --json > "$tmp/r3.json" 2> "$tmp/r3.err" ||
    { echo "plan of the recipe over 3 nodes failed"; cat "$tmp/r3.err"; fail=1; }
finish
