#!/bin/sh
# SPDX-License-Identifier: MIT
# slidedp plan --sched sdp-roundpipe prints RoundPipe's stage split (graph/split.h): on the tiny
# recipe over 2 CPU ranks and on qwen3-0.6b over 4 GPUs of the model's default machine, the stages
# cover the step's ops once and in running order (the forward of groups 0..L+1, the backward of
# L+1..0), the head's forward and backward share a stage, the printed bottleneck is the largest
# stage and the step the model's (rounds x (stages + in flight - 1) x bottleneck), and the dynamic
# program's step is never above greedy's.  Without the policy, or with --json, plan prints no
# split (its JSON stays one document).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
tiny_recipe > "$tmp/tiny.yaml"

check_split() { # FILE LAYERS RANKS MICRO
    "$py" - "$@" <<'PYEOF'
import math, re, sys
text, L, R, M = open(sys.argv[1]).read(), *map(int, sys.argv[2:5])
sec = text[text.index("RoundPipe stage split"):]
head = re.search(r"(\d+) ops over (\d+) ranks?, (\d+) micro-batch", sec)
split = {k: (int(s), float(b), float(t)) for k, s, b, t in re.findall(
    r"^  (dynamic program|greedy) +(\d+) stages, bottleneck +([0-9.]+) ms, step +([0-9.]+) ms", sec, re.M)}
chosen = re.search(r"chosen: (dynamic program|greedy)", sec).group(1)
stages = re.findall(r"^ +(\d+) +([0-9.]+)  (.*)$", sec.split("  stage")[1], re.M)
ops, where = [], {}
for k, (_, _, desc) in enumerate(stages):
    for d, a, b in re.findall(r"(fwd|bwd) (\d+)(?:-(\d+))?", desc):
        a, b = int(a), int(b or a)
        step = 1 if b >= a else -1
        for g in range(a, b + step, step):
            ops.append((d, g))
            where[(d, g)] = k
want = [("fwd", g) for g in range(L + 2)] + [("bwd", g) for g in range(L + 1, -1, -1)]
S, bott, step = split[chosen]
ms = [float(c) for _, c, _ in stages]
rounds, m = -(-M // R), min(M, R)
checks = {
    "header": head and (int(head.group(1)), int(head.group(2)), int(head.group(3))) == (2 * L + 4, R, M),
    "cover": ops == want,
    "head joined": where.get(("fwd", L + 1), -1) == where.get(("bwd", L + 1)),
    "count": len(stages) == S,
    "bottleneck": abs(max(ms) - bott) <= 0.001,
    "step": abs(rounds * (S + m - 1) * bott - step) <= 0.001 * (S + m) * rounds + 1e-6 * step,
    "dp <= greedy": split["dynamic program"][2] <= split["greedy"][2],
}
bad = [k for k, v in checks.items() if not v]
print("split:", S, "stages, chosen", chosen, "step", step, "ms", "FAILED " + ", ".join(bad) if bad else "ok")
sys.exit(1 if bad else 0)
PYEOF
}

# 1. the tiny recipe over 2 CPU ranks (2 micro-batches: batch 8 of 4 a micro-batch)
"$bin" plan "$tmp/tiny.yaml" --sched sdp-roundpipe --ranks 2 > "$tmp.out" 2> "$tmp.err" ||
    { echo "plan failed"; cat "$tmp.err"; fail=1; }
L=$(sed -n 's/^ *num_layers: *\([0-9]*\).*/\1/p' "$tmp/tiny.yaml")
check_split "$tmp.out" "$L" 2 2 || { cat "$tmp.out"; fail=1; }

# 2. qwen3-0.6b (28 layers) over 4 GPUs, a micro-batch each: the host may not fit here (exit 1), the split prints
"$bin" plan --model qwen3-0.6b --batch 16 --seq 1024 --ranks 4 --gpus 4 --sched sdp-roundpipe \
    > "$tmp.out" 2> "$tmp.err"
rc=$?
[ "$rc" -le 1 ] || { echo "plan exit $rc"; cat "$tmp.err"; fail=1; }
check_split "$tmp.out" 28 4 4 || { cat "$tmp.out"; fail=1; }

# 3. no split without the policy, none in JSON
"$bin" plan "$tmp/tiny.yaml" --ranks 2 > "$tmp.out" 2> /dev/null || fail=1
! grep -q "RoundPipe" "$tmp.out" || { echo "a split without --sched sdp-roundpipe"; fail=1; }
"$bin" plan "$tmp/tiny.yaml" --ranks 2 --sched sdp-roundpipe --json > "$tmp.json" 2> /dev/null || fail=1
"$py" -c "import json, sys; json.load(open(sys.argv[1]))" "$tmp.json" ||
    { echo "--json with sdp-roundpipe: not one JSON document"; fail=1; }
finish
