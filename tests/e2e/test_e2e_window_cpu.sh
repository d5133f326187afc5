#!/bin/sh
# The bounded window's paths on CPU workers (fp32, 2 workers, the 4-layer micro model): with
# train.window 1 the forward lets the working copies of layers 1-3 go after the step's last
# micro-batch and the recomputation fetches them again (a param_fetch of phase "recompute" per
# layer and step in the event log, none for layer 4, which the window keeps); the losses are the
# unbounded run's bit for bit.  The GPU side (a real memory limit, its peak) is
# test_e2e_window_gpu.sh.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
for w in 0 1; do
    micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" -e "s/^train:$/train:\n  window: $w/" \
        > "$tmp/w$w.yaml"
    "$bin" train "$tmp/w$w.yaml" --cpus 2 -q --steps 6 --metrics "$tmp/w$w.jsonl" \
        --events "$tmp/e$w.jsonl" 2> "$tmp/w$w.err" || { echo "window $w failed"; cat "$tmp/w$w.err"; fail=1; }
done
losses "$tmp/w0.jsonl" > "$tmp/w0.loss"
losses "$tmp/w1.jsonl" | cmp -s - "$tmp/w0.loss" || { echo "window 1 changes the losses"; fail=1; }
[ "$(wc -l < "$tmp/w0.loss")" -eq 6 ] || { echo "expected 6 steps"; fail=1; }
"$py" - "$tmp/e0.jsonl" "$tmp/e1.jsonl" <<'PY' || fail=1
import collections, json, sys
def refetched(path):
    c = collections.Counter()
    for line in open(path):
        e = json.loads(line)
        if e["name"] == "param_fetch" and e["phase"] == "recompute":
            c[e["group"]] += 1
    return c
none, bounded = refetched(sys.argv[1]), refetched(sys.argv[2])
assert not none, "unbounded: the recomputation fetched copies again: %s" % none
assert bounded == {1: 6, 2: 6, 3: 6}, "window 1: layers 1-3 once a step, not 4: %s" % bounded
print("window 1: layers 1-3 fetched again for the recomputation, 6 steps each")
PY
finish
