#!/bin/sh
# The bounded window's paths on CPU workers (fp32, 2 workers, the 4-layer micro model): with
# train.window 1 the forward lets the working copies of layers 1-3 go after the step's last
# micro-batch and the recomputation fetches them again (a param_fetch of phase "recompute" per
# layer and step in the event log, none for layer 4, which the window keeps); the losses are the
# unbounded run's bit for bit.  The same with SDP_CHUNK_PIPELINE=on and chunks of 10 KiB (every
# group in chunks, each fetched into its compute copy on its own, param_chunk): the forward drops
# the compute copies of layers 1-3 and the recomputation fetches each of their chunks again, with
# the same losses and tools/check_invariants.py's invariants holding.  The GPU side (a real memory limit, its peak) is
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
micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" -e "s#^  chunk_mib: .*#  chunk_mib: 0.01#" \
    -e "s/^train:$/train:\n  window: 1/" > "$tmp/k1.yaml"
SDP_CHUNK_PIPELINE=on "$bin" train "$tmp/k1.yaml" --cpus 2 -q --steps 6 --metrics "$tmp/k1.jsonl" \
    --events "$tmp/k1.ev" 2> "$tmp/k1.err" || { echo "window 1, chunked fetches failed"; cat "$tmp/k1.err"; fail=1; }
"$py" "$top/tools/check_invariants.py" "$tmp/k1.ev" > "$tmp/check" 2>&1 ||
    { echo "window 1, chunked fetches: invariants"; tail -5 "$tmp/check"; fail=1; }
losses "$tmp/w0.jsonl" > "$tmp/w0.loss"
losses "$tmp/k1.jsonl" | cmp -s - "$tmp/w0.loss" || { echo "window 1 with chunked fetches changes the losses"; fail=1; }
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
"$py" - "$tmp/k1.ev" <<'PY' || fail=1
import collections, json, sys
fwd, again = collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["name"] == "param_fetch" and e["group"] in (1, 2, 3, 4):
        raise SystemExit("layer %d fetched whole: %s" % (e["group"], line))
    if e["name"] == "param_chunk":
        (fwd if e["phase"] == "fwd" else again)[e["group"]] += 1
assert sorted(again) == [1, 2, 3], "chunks fetched again: %s" % again
assert all(again[l] == fwd[l] and fwd[l] > 6 and fwd[l] % 6 == 0 for l in (1, 2, 3)), (fwd, again)
print("window 1, chunked: layers 1-3's %d chunks fetched again each step, layer 4's kept"
      % (fwd[1] // 6))
PY
finish
