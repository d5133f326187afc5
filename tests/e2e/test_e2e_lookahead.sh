#!/bin/sh
# bwd_lookahead bounds how far the backward's preparations run ahead of it: with K, layer l's
# recomputation and gradient zeroing start only after the backward of layer l + 1 + K has ended.
# On a 6-layer model trained 4 steps on 2 CPU workers, for K = -1 (no bound), 0, 1 and 2:
#   - the fp32 losses are bit-identical (the bound changes the order of tasks, never the sums),
#     also with activations: offload (the saved layer inputs wait on the host; K = 1) and
#     activations: selective (the mid residuals kept, the output projection not recomputed; K = 1
#     and K = -1), also with keep_last: 2 (the top two layers not recomputed; the default, 1,
#     keeps the last layer's) and keep_last: 0 (every layer recomputed);
#     also with keep_mlp (recomputed layers keeping their mid residual and gate/up projection:
#     3 of the 5 recomputed, all 5 with activations: offload, 2 with selective), whose
#     recomputation then runs one matmul instead of three (two with selective);
#   - tools/check_invariants.py --bwd-lookahead K passes every bounded run's event log, and the
#     tighter --bwd-lookahead K-1 fails it (the bound is what held the tasks back, not chance);
#   - the unbounded run fails --bwd-lookahead 0 (its recomputations run ahead of the backward);
#   - a recipe with bwd_lookahead below -1, or keep_mlp above the model's layers, is refused with
#     exit code 2, naming the key.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

recipe() { # K FILE: the micro recipe with 6 layers, the data path made absolute
    micro_recipe | sed -e "s#^  num_layers: .*#  num_layers: 6#" > "$2"
    printf '  bwd_lookahead: %s\n' "$1" >> "$2"
}

for K in -1 0 1 2; do
    recipe "$K" "$tmp/r$K.yaml"
    if ! "$bin" train "$tmp/r$K.yaml" --cpus 2 -q --metrics "$tmp/m$K.jsonl" \
        --events "$tmp/e$K.jsonl" 2> "$tmp/err$K"; then
        echo "bwd_lookahead $K: training failed"; cat "$tmp/err$K"; fail=1; continue
    fi
    if [ "$K" -ge 0 ]; then
        "$py" "$top/tools/check_invariants.py" --bwd-lookahead "$K" "$tmp/e$K.jsonl" > "$tmp/c$K" 2>&1 ||
            { echo "bwd_lookahead $K: the checker fails the run"; tail -n 5 "$tmp/c$K"; fail=1; }
        echo "bwd_lookahead $K: $(tail -n 1 "$tmp/c$K")"
    fi
    if [ "$K" -ge 1 ]; then
        "$py" "$top/tools/check_invariants.py" --bwd-lookahead $((K - 1)) "$tmp/e$K.jsonl" \
            > "$tmp/t$K" 2>&1
        [ $? -eq 1 ] || { echo "bwd_lookahead $K must fail the check for $((K - 1))"; fail=1; }
        echo "bwd_lookahead $K against $((K - 1)): $(tail -n 1 "$tmp/t$K")"
    fi
done
variant() { # NAME K KEYS: the recipe with bwd_lookahead K and the train keys KEYS (printf %b)
    # trained into m/e NAME.jsonl, and the checker's verdict on its event log
    recipe "$2" "$tmp/$1.yaml"
    printf '%b' "$3" >> "$tmp/$1.yaml"
    if ! "$bin" train "$tmp/$1.yaml" --cpus 2 -q --metrics "$tmp/m$1.jsonl" --events "$tmp/e$1.jsonl" \
        2> "$tmp/err$1"; then
        echo "$1: training failed"; cat "$tmp/err$1"; fail=1; return
    fi
    gate=""; [ "$2" -ge 0 ] && gate="--bwd-lookahead $2"
    # shellcheck disable=SC2086
    "$py" "$top/tools/check_invariants.py" $gate "$tmp/e$1.jsonl" > "$tmp/c$1" 2>&1 ||
        { echo "$1: the checker fails the run"; tail -n 5 "$tmp/c$1"; fail=1; }
    echo "$1: $(tail -n 1 "$tmp/c$1")"
}
recomputed() { grep -c '"name": "matmul_fwd", "phase": "recompute"' "$tmp/e$1.jsonl"; }

# activations: offload (the saved layer inputs leave the GPU after the forward): the same sums
variant off 1 '  activations: offload\n'
# activations: selective: the recomputation reads the forward's mid residual instead of computing
# it again from the same inputs, so the sums are the same; both gates.  The attention's output
# projection (one matmul_fwd of the three recomputed) is not recomputed.
for K in 1 -1; do
    variant "sel$K" "$K" '  activations: selective\n'
    n=$(recomputed "sel$K"); nfull=$(recomputed "$K")
    echo "sel$K: $n recomputed matmuls against $nfull"
    [ "$n" -gt 0 ] && [ $((n * 3)) -eq $((nfull * 2)) ] ||
        { echo "want two thirds of the full recomputation's matmuls"; fail=1; }
done
# keep_last: 2 with selective: the top two of six layers keep their activations, not recomputed
# (the runs above, with the default of 1, recompute five), and keep_last: 0 recomputes all six
variant all 1 '  keep_last: 0\n'
variant keep 1 '  activations: selective\n  keep_last: 2\n'
n=$(recomputed keep); nfull=$(recomputed 1); nall=$(recomputed all)
echo "keep_last 2: $n recomputed matmuls, the default $nfull, keep_last 0 $nall"
[ "$n" -gt 0 ] && [ $((n * 3 * 5)) -eq $((nfull * 2 * 4)) ] && [ $((nall * 5)) -eq $((nfull * 6)) ] ||
    { echo "want 2/3 of the matmuls of four layers, five by default, six with keep_last 0"; fail=1; }
# keep_mlp: 3 of the 5 recomputed layers skip the output and gate/up projections (one matmul of
# three left); with offload all 5 (their saved inputs wait on the host); with selective 2 of
# the 5 skip the gate/up projection as well (one of two)
variant mlp 1 '  keep_mlp: 3\n'
variant mlpoff 1 '  activations: offload\n  keep_mlp: 6\n'
variant mlpsel -1 '  activations: selective\n  keep_mlp: 2\n'
n3=$(recomputed mlp); n5=$(recomputed mlpoff); n2=$(recomputed mlpsel)
echo "keep_mlp: $n3 recomputed matmuls with 3 layers, $n5 with all 5 offloaded, $n2 with 2 and" \
    "selective, against $nfull"
[ "$n5" -gt 0 ] && [ $((n3 * 15)) -eq $((nfull * 9)) ] && [ $((n5 * 3)) -eq "$nfull" ] &&
    [ $((n2 * 15)) -eq $((nfull * 8)) ] ||
    { echo "want 9/15, 1/3 and 8/15 of the default's recomputed matmuls"; fail=1; }

"$py" "$top/tools/check_invariants.py" --bwd-lookahead 0 "$tmp/e-1.jsonl" > "$tmp/c-1" 2>&1
[ $? -eq 1 ] || { echo "the unbounded run must fail the check for 0"; fail=1; }
echo "unbounded against 0: $(tail -n 1 "$tmp/c-1")"

"$py" - "$tmp"/m-1.jsonl "$tmp"/m0.jsonl "$tmp"/m1.jsonl "$tmp"/m2.jsonl "$tmp"/moff.jsonl \
    "$tmp"/msel1.jsonl "$tmp"/msel-1.jsonl "$tmp"/mkeep.jsonl "$tmp"/mall.jsonl \
    "$tmp"/mmlp.jsonl "$tmp"/mmlpoff.jsonl "$tmp"/mmlpsel.jsonl <<'PYEOF' || fail=1
import json, sys
runs = [[json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:]]
for p, r in zip(sys.argv[1:], runs):
    print(p.rsplit("/", 1)[1], r)
sys.exit(0 if len(runs[0]) == 4 and all(r == runs[0] for r in runs) else 1)
PYEOF

recipe -2 "$tmp/bad.yaml"
"$bin" train "$tmp/bad.yaml" --cpus 2 -q > "$tmp/bad.out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q bwd_lookahead "$tmp/bad.out"; then
    echo "bwd_lookahead -2: exit $rc, want 2 and the key named"; cat "$tmp/bad.out"; fail=1
fi
recipe 1 "$tmp/badmlp.yaml"
printf '  keep_mlp: 7\n' >> "$tmp/badmlp.yaml"
"$bin" train "$tmp/badmlp.yaml" --cpus 2 -q > "$tmp/badmlp.out" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "train.keep_mlp=7" "$tmp/badmlp.out"; then
    echo "keep_mlp 7 of 6 layers: exit $rc, want 2 and the key named"; cat "$tmp/badmlp.out"; fail=1
fi
echo "keep_mlp 7: exit $rc, $(head -n 1 "$tmp/badmlp.out")"

finish
