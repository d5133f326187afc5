#!/bin/sh
# slidedp sweep on CPU workers (no GPU: the mechanics, not a figure): one JSON line per chunk size,
# with the number of chunks the size implies for a qwen3-0.6b layer and positive times; malformed
# options are usage errors (exit 2).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
if ! "$bin" sweep --model qwen3-0.6b --chunks 8,16,64 --reps 1 --cpus 2 > "$tmp/out.jsonl" \
    2> "$tmp/err"; then
    echo "sweep failed"; cat "$tmp/err"; fail=1
fi
cat "$tmp/out.jsonl"
"$py" - "$tmp/out.jsonl" <<'PYEOF' || fail=1
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ok = [l["chunk_mib"] for l in lines] == [8.0, 16.0, 64.0]
for l in lines:
    want = math.ceil(l["layer_params"] * 4 / (l["chunk_mib"] * 1048576))
    ok = ok and l["nchunks"] == want and l["cast_h2d_ms"] > 0 and l["d2h_update_ms"] > 0
    ok = ok and l["model"] == "qwen3-0.6b" and l["layer_params"] == 15730944
sys.exit(0 if ok else 1)
PYEOF
for bad in "--chunks 8,x" "--chunks 0" "--model qwen3-0.7b" "--reps 0"; do
    # shellcheck disable=SC2086 # the options are split on purpose
    set -- $bad
    [ "$1" = --model ] || set -- --model qwen3-0.6b "$@"
    "$bin" sweep "$@" --cpus 2 > /dev/null 2> "$tmp/bad.err"
    rc=$?
    [ $rc -eq 2 ] || { echo "sweep $*: expected exit 2, got $rc"; cat "$tmp/bad.err"; fail=1; }
done
finish
