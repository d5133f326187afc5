#!/bin/sh
# Chunk sizes (fp32, 2 CPU workers, the 4-layer micro model, 5 steps): train.chunk_mib 1, 1/16 and
# 0 (unchunked: one chunk a parameter group, the chunk pipeline's ablation) give the same losses
# bit for bit, and the state says how it was cut.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
for c in 1 0.0625 0; do
    micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" -e "s#^  chunk_mib: .*#  chunk_mib: $c#" \
        > "$tmp/c$c.yaml"
    "$bin" train "$tmp/c$c.yaml" --cpus 2 --steps 5 --metrics "$tmp/c$c.jsonl" > /dev/null 2> "$tmp/c$c.err" ||
        { echo "chunk_mib $c failed"; cat "$tmp/c$c.err"; fail=1; }
    losses "$tmp/c$c.jsonl" > "$tmp/c$c.loss"
done
[ "$(wc -l < "$tmp/c1.loss")" -eq 5 ] || { echo "expected 5 steps"; fail=1; }
for c in 0.0625 0; do
    cmp -s "$tmp/c$c.loss" "$tmp/c1.loss" || { echo "chunk_mib $c changes the losses"; fail=1; }
done
grep -q "in 6 groups, 6 chunks" "$tmp/c0.err" || { echo "unchunked: not one chunk a group"; cat "$tmp/c0.err"; fail=1; }
finish
