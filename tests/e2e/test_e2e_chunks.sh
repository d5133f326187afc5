#!/bin/sh
# Chunk sizes (fp32, 2 CPU workers, the 4-layer micro model, 5 steps): train.chunk_mib 1, 1/16 and
# 0 (unchunked: one chunk a parameter group, the chunk pipeline's ablation) give the same losses
# bit for bit, and the state says how it was cut.  The same with SDP_CHUNK_PIPELINE=on (where
# SDP_CHUNK_PIPELINE=auto applies it, on a GPU): each chunk of a group's working copy goes to the group's
# compute copy on its own (param_chunk, no param_fetch of the group), after that chunk's update
# and before the group's first reader (tools/check_invariants.py's invariant 4, which fails once
# a chunk's fetch is moved before its update's end), and the fp32 gradient comes back chunk by
# chunk (grad_chunk); unchunked keeps the whole group's fetch and return.  The chunked run's lanes
# (parameter cast and H2D, CPU compute, gradient reduction and D2H, CPU AdamW) hold events, and
# the bytes of its transfer lanes each step are the working copy's and the chunked gradients';
# --print-plan shows which groups go chunk by chunk.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
for c in 1 0.0625 0; do
    micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 4#" -e "s#^  chunk_mib: .*#  chunk_mib: $c#" \
        > "$tmp/c$c.yaml"
    "$bin" train "$tmp/c$c.yaml" --cpus 2 --steps 5 --metrics "$tmp/c$c.jsonl" > /dev/null 2> "$tmp/c$c.err" ||
        { echo "chunk_mib $c failed"; cat "$tmp/c$c.err"; fail=1; }
    losses "$tmp/c$c.jsonl" > "$tmp/c$c.loss"
    SDP_CHUNK_PIPELINE=on "$bin" train "$tmp/c$c.yaml" --cpus 2 --steps 5 --metrics "$tmp/k$c.jsonl" \
        --events "$tmp/k$c.ev" > /dev/null 2> "$tmp/k$c.err" ||
        { echo "chunk_mib $c, SDP_CHUNK_PIPELINE=on failed"; cat "$tmp/k$c.err"; fail=1; }
    losses "$tmp/k$c.jsonl" > "$tmp/k$c.loss"
    "$py" "$top/tools/check_invariants.py" "$tmp/k$c.ev" > "$tmp/check" 2>&1 ||
        { echo "chunk_mib $c, SDP_CHUNK_PIPELINE=on: invariants"; tail -5 "$tmp/check"; fail=1; }
done
[ "$(wc -l < "$tmp/c1.loss")" -eq 5 ] || { echo "expected 5 steps"; fail=1; }
for c in 0.0625 0; do
    cmp -s "$tmp/c$c.loss" "$tmp/c1.loss" || { echo "chunk_mib $c changes the losses"; fail=1; }
done
for c in 1 0.0625 0; do
    cmp -s "$tmp/k$c.loss" "$tmp/c1.loss" ||
        { echo "chunk_mib $c with SDP_CHUNK_PIPELINE=on changes the losses"; fail=1; }
done
grep -q "in 6 groups, 6 chunks" "$tmp/c0.err" || { echo "unchunked: not one chunk a group"; cat "$tmp/c0.err"; fail=1; }
# the plan says which groups go chunk by chunk: host/c (the working copy), f32/c (the gradient)
SDP_CHUNK_PIPELINE=on "$bin" train "$tmp/c0.0625.yaml" --cpus 2 --print-plan > "$tmp/plan" 2> /dev/null
for g in embedding head; do
    grep -Eq "^$g +keep +off +host/c +cpu +f32/c " "$tmp/plan" || { echo "plan: $g not chunked"; cat "$tmp/plan"; fail=1; }
done
grep -Eq "^1-3 +recompute +off +host +cpu +fp32 " "$tmp/plan" || { echo "plan: layers 1-3 chunked"; cat "$tmp/plan"; fail=1; }
"$py" - "$tmp/k0.0625.ev" "$tmp/k0.ev" "$tmp/bad.ev" <<'PY' || fail=1
import collections, json, sys
def count(path):
    c = collections.Counter()
    for line in open(path):
        e = json.loads(line)
        if e["name"] in ("param_chunk", "param_fetch") and e["step"] == 1:
            c[(e["name"], e["group"])] += 1
    return c
chunked, whole = count(sys.argv[1]), count(sys.argv[2])
# 1/16 MiB: the embedding and the LM head (151936 x 32 fp32 each) in 297 chunks, the layers whole
assert chunked[("param_chunk", 0)] == 297 and chunked[("param_chunk", 5)] == 297, chunked
assert not chunked[("param_fetch", 0)] and not chunked[("param_fetch", 5)], chunked
assert all(chunked[("param_fetch", l)] == 1 for l in (1, 2, 3, 4)), chunked
assert not any(n == "param_chunk" for n, _ in whole), "unchunked: %s" % whole
print("chunked: the embedding's and the head's 297 chunks each, the layers whole")
# the lanes the run uses hold events, and the transfer lanes' bytes each step are the formulas':
# every group's fp32 working copy (9761184 parameters) to the compute, the embedding's (151936 x
# 32) and the head's (the same and the final norm's 32) fp32 gradients, in chunks, back
ev = [json.loads(line) for line in open(sys.argv[1])]
lanes = collections.Counter(e["lane"] for e in ev)
for lane in ("param cast", "param H2D", "CPU compute", "gradient reduction", "gradient D2H",
             "CPU AdamW"):
    assert lanes[lane] > 0, "lane %s is empty: %s" % (lane, lanes)
for s in range(1, 5):
    moved = collections.Counter()
    for e in ev:
        if e["step"] == s:
            moved[e["lane"]] += e.get("bytes", 0)
    assert moved["param H2D"] == 4 * 9761184, (s, moved)
    assert moved["gradient D2H"] == 4 * (2 * 151936 * 32 + 32), (s, moved)
print("lanes %s; per step %d bytes to the compute, %d back"
      % (sorted(lanes), moved["param H2D"], moved["gradient D2H"]))
# the same log with one chunk's fetch moved before its update's end must fail invariant 4
ev = [json.loads(line) for line in open(sys.argv[1])]
up = next(e for e in ev if e["name"] == "adamw" and e["step"] == 1 and e["group"] == 5
          and e["chunk"] == 3)
f = next(e for e in ev if e["name"] == "param_chunk" and e["step"] == 2 and e["group"] == 5
         and e["chunk"] == 3)
f["start_us"] = up["end_us"] - 1.0
with open(sys.argv[3], "w") as out:
    out.writelines(json.dumps(e) + "\n" for e in ev)
PY
if "$py" "$top/tools/check_invariants.py" "$tmp/bad.ev" > "$tmp/check" 2>&1; then
    echo "a chunk's fetch before its update passes the invariants"; fail=1
fi
grep -q "^invariant 4 violated" "$tmp/check" || { echo "invariant 4 not reported"; tail -3 "$tmp/check"; fail=1; }
# ranks (2; replicated and sharded on the GPU route, replicated on the CPU route): the fp32
# gradient copied out chunk by chunk (grad_chunk: on the GPU route one per chunk after the ranks'
# sum; on the CPU route one per chunk and rank, before the sum of each chunk) and, replicated, each rank's compute copy filled chunk by chunk (param_chunk;
# sharded, each chunk's owner's replica, with or without the pipeline) give the unchunked route's
# bits
for rg in replicated:gpu sharded:gpu replicated:cpu; do
    route=${rg%:*} k=$(echo "$rg" | tr : -)
    for m in off on; do
        SDP_CHUNK_PIPELINE=$m "$bin" train "$tmp/c0.0625.yaml" --cpus 2 --steps 4 --ranks 2 \
            --grad-route "${rg#*:}" --param-route "$route" --metrics "$tmp/r$k$m.jsonl" \
            --events "$tmp/r$k$m.ev" > /dev/null 2> "$tmp/r$k$m.err" ||
            { echo "2 ranks, $rg, SDP_CHUNK_PIPELINE=$m failed"; cat "$tmp/r$k$m.err"; fail=1; }
        losses "$tmp/r$k$m.jsonl" > "$tmp/r$k$m.loss"
    done
    cmp -s "$tmp/r${k}on.loss" "$tmp/r${k}off.loss" ||
        { echo "2 ranks, $rg: the chunked gradient return changes the losses"; fail=1; }
    # the GPU route: one a chunk, from the ranks' sum; the CPU route: one a chunk and rank
    n=$([ "${rg#*:}" = cpu ] && echo $((4 * 2 * 297 * 2)) || echo $((4 * 2 * 297)))
    [ "$(grep -c '"grad_chunk"' "$tmp/r${k}on.ev")" -eq "$n" ] ||
        { echo "2 ranks, $rg: not $n grad_chunk"; fail=1; }
    # replicated: each rank's of the embedding and the head; sharded: every chunk's owner's (the
    # 4 layers' single chunks too)
    n=$([ "$route" = replicated ] && echo $((4 * 2 * 2 * 297)) || echo $((4 * (2 * 297 + 4))))
    [ "$(grep -c '"param_chunk"' "$tmp/r${k}on.ev")" -eq "$n" ] ||
        { echo "2 ranks, $rg: not $n param_chunk"; fail=1; }
    "$py" "$top/tools/check_invariants.py" "$tmp/r${k}on.ev" > "$tmp/check" 2>&1 ||
        { echo "2 ranks, $rg: invariants"; tail -5 "$tmp/check"; fail=1; }
done
finish
