#!/bin/sh
# The bounded window on a GPU (exit 77, skipped, without one): `slidedp bench` of qwen3-0.6b, 6
# steps of 4 sequences of 512 tokens (bf16), unbounded and under --gpu-memory-gib 4 (window 2: the
# forward lets layers 1-26 go and the recomputation brings them again):
#   - the losses are the unbounded run's (as logged, to 4 decimals: the window moves copies, not
#     values; both runs with the LM head's blocks of a limited run and the project's own attention);
#   - the measured GPU peak (--mem-log) stays within the limit plus what was in use before the
#     run allocated (the CUDA context, the first sample), which StarPU's limit does not count;
#   - the event log shows the recomputation's fetches (whole groups or, with the chunk pipeline,
#     chunks), and tools/check_invariants.py passes it.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_gpus 1
losses() { sed -n -e 's/.*step \([0-9]*\)\/.*loss \([0-9.]*\).*/\1 \2/p' "$1"; }
# a limit below 20 GiB also shrinks the LM head's logits blocks, which changes the sums' order:
# both runs take the limited size, so that only the window differs.  cuDNN's fused attention
# backward is not deterministic from run to run (two unbounded runs differed in the fourth
# decimal); the project's own attention is, so both runs use it and the losses must match
export SDP_LMHEAD_BLOCK_MIB=256 SDP_ATTENTION=own
for lim in 0 4; do
    timeout 300 "$bin" bench --model qwen3-0.6b --batch 4 --seq 512 --steps 6 --warmup 0 \
        --gpus 1 --cpus 4 --gpu-memory-gib "$lim" --events "$tmp/e$lim.jsonl" \
        --mem-log "$tmp/mem$lim.jsonl" > "$tmp/b$lim.json" 2> "$tmp/err$lim" ||
        { echo "limit $lim: bench failed"; cat "$tmp/err$lim"; fail=1; }
done
losses "$tmp/err0" > "$tmp/m0.loss"
[ "$(wc -l < "$tmp/m0.loss")" -eq 6 ] || { echo "expected 6 losses"; cat "$tmp/err0"; fail=1; }
losses "$tmp/err4" | cmp -s - "$tmp/m0.loss" ||
    { echo "the window changes the losses"; losses "$tmp/err4" | diff - "$tmp/m0.loss"; fail=1; }
"$py" - "$tmp/mem4.jsonl" "$tmp/e4.jsonl" <<'PY' || fail=1
import json, sys
mem = [json.loads(l) for l in open(sys.argv[1])]
base = mem[0]["gpu_used_gib"][0]
peak = max(m["gpu_used_gib"][0] for m in mem)
print("GPU peak %.2f GiB under a 4 GiB limit, %.2f GiB in use before the run" % (peak, base))
assert peak <= 4 + base + 1 / 16, "the peak %.2f exceeds 4 GiB + %.2f" % (peak, base)
refetch = sum(1 for l in open(sys.argv[2])
              if ('"param_fetch"' in l or '"param_chunk"' in l)
              and json.loads(l)["phase"] == "recompute")
assert refetch > 0, "no fetch for the recomputation: the window let nothing go"
print("%d fetches for the recomputation" % refetch)
PY
"$py" "$top/tools/check_invariants.py" "$tmp/e4.jsonl" > "$tmp/inv" 2>&1 ||
    { echo "invariants"; tail -5 "$tmp/inv"; fail=1; }
finish
