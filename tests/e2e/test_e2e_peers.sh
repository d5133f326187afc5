#!/bin/sh
# bench/peers.py, the PyTorch peers, where no GPU is needed: FSDP2 on CPU processes (gloo) on the
# tiny preset, one and two ranks, 1 timed step after 1 warm-up:
#   - one JSON line each, system fsdp2, the step's sequences counted over the ranks (batch 2 a
#     rank: 2 and 4), tokens_per_s = batch x seq / median step, settings.ranks as asked, a finite
#     host peak;
#   - --ranks 0, pytorch-gpu with two ranks or on the CPU, and an unknown system are refused with
#     exit code 2.
# The GPU runs (pytorch-gpu, fsdp2 and fsdp2-offload on H200s) are bench/run-gpu.sh's.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_python torch transformers
port=$((29600 + $$ % 300))

for R in 1 2; do
    if ! timeout 300 "$py" "$top/bench/peers.py" --system fsdp2 --model tiny --device cpu \
        --ranks "$R" --batch 2 --seq 64 --steps 1 --warmup 1 --port "$port" \
        > "$tmp/r$R.json" 2> "$tmp/r$R.err"; then
        echo "fsdp2 on $R CPU rank(s) failed"; cat "$tmp/r$R.err"; fail=1
    fi
done
"$py" - "$tmp" <<'PYEOF' || fail=1
import json, math, os, sys
ok = True
for R in (1, 2):
    lines = open(os.path.join(sys.argv[1], "r%d.json" % R)).read().splitlines()
    if len(lines) != 1:
        print("ranks %d: %d lines on stdout, 1 expected" % (R, len(lines)))
        ok = False
        continue
    o = json.loads(lines[0])
    print("ranks %d: %s" % (R, lines[0][:200]))
    tps = o["batch"] * o["seq"] / o["step_s_median"]
    ok = ok and o["system"] == "fsdp2" and o["batch"] == 2 * R and o["settings"]["ranks"] == R
    ok = ok and abs(o["tokens_per_s"] - tps) <= 1e-6 * tps and len(o["step_s"]) == 1
    ok = ok and math.isfinite(o["host_peak_gib"]) and o["host_peak_gib"] > 0
sys.exit(0 if ok else 1)
PYEOF
for args in "--system fsdp2 --ranks 0" "--system pytorch-gpu --ranks 2" \
    "--system pytorch-gpu --device cpu" "--system ddp"; do
    # shellcheck disable=SC2086
    "$py" "$top/bench/peers.py" $args --model tiny > /dev/null 2> "$tmp/bad.err"
    st=$?
    if [ $st -ne 2 ]; then
        echo "peers.py $args: exit $st, not 2"; cat "$tmp/bad.err"; fail=1
    else
        echo "peers.py $args: exit 2, $(tail -n 1 "$tmp/bad.err" | cut -c1-100)"
    fi
done

finish
