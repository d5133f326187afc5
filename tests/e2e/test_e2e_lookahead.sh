#!/bin/sh
# bwd_lookahead bounds how far the backward's preparations run ahead of it: with K, layer l's
# recomputation and gradient zeroing start only after the backward of layer l + 1 + K has ended.
# On a 6-layer model trained 4 steps on 2 CPU workers, for K = -1 (no bound), 0, 1 and 2:
#   - the fp32 losses are bit-identical (the bound changes the order of tasks, never the sums),
#     also with activations: offload (the saved layer inputs wait on the host; K = 1) and
#     activations: selective (the mid residuals kept, the output projection not recomputed; K = 1
#     and K = -1), also with keep_last: 2 (the top two layers not recomputed; the default, 1,
#     keeps the last layer's) and keep_last: 0 (every layer recomputed);
#   - tools/check_invariants.py --bwd-lookahead K passes every bounded run's event log, and the
#     tighter --bwd-lookahead K-1 fails it (the bound is what held the tasks back, not chance);
#   - the unbounded run fails --bwd-lookahead 0 (its recomputations run ahead of the backward);
#   - a recipe with bwd_lookahead below -1 is refused with exit code 2, naming the key.
set -u
top=$(cd "${top_srcdir:-.}" && pwd)
bin=${top_builddir:-.}/slidedp
py=${PYTHON3:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

recipe() { # K FILE: the micro recipe with 6 layers, the data path made absolute
    sed -e "s#^  train: .*#  train: $top/data/kjv/val.tok#" -e "s#^  num_layers: .*#  num_layers: 6#" \
        "$top/tests/e2e/data/micro-qwen3.yaml" > "$2"
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
# activations: offload (the saved layer inputs leave the GPU after the forward): the same sums
recipe 1 "$tmp/off.yaml"
sed -i 's/^  chunk_mib: 1$/  chunk_mib: 1\n  activations: offload/' "$tmp/off.yaml"
grep -q "activations: offload" "$tmp/off.yaml" || { echo "could not make the offload recipe"; fail=1; }
if ! "$bin" train "$tmp/off.yaml" --cpus 2 -q --metrics "$tmp/moff.jsonl" --events "$tmp/eoff.jsonl" \
    2> "$tmp/erroff"; then
    echo "activations offload: training failed"; cat "$tmp/erroff"; fail=1
fi
"$py" "$top/tools/check_invariants.py" --bwd-lookahead 1 "$tmp/eoff.jsonl" > "$tmp/coff" 2>&1 ||
    { echo "activations offload: the checker fails the run"; tail -n 5 "$tmp/coff"; fail=1; }
echo "activations offload: $(tail -n 1 "$tmp/coff")"
# activations: selective: the recomputation reads the forward's mid residual instead of computing
# it again from the same inputs, so the sums are the same; both gates
for K in 1 -1; do
    recipe "$K" "$tmp/sel$K.yaml"
    sed -i 's/^  chunk_mib: 1$/  chunk_mib: 1\n  activations: selective/' "$tmp/sel$K.yaml"
    grep -q "activations: selective" "$tmp/sel$K.yaml" || { echo "could not make the selective recipe"; fail=1; }
    if ! "$bin" train "$tmp/sel$K.yaml" --cpus 2 -q --metrics "$tmp/msel$K.jsonl" \
        --events "$tmp/esel$K.jsonl" 2> "$tmp/errsel$K"; then
        echo "activations selective, bwd_lookahead $K: training failed"; cat "$tmp/errsel$K"; fail=1
    fi
    gate=""; [ "$K" -ge 0 ] && gate="--bwd-lookahead $K"
    # shellcheck disable=SC2086
    "$py" "$top/tools/check_invariants.py" $gate "$tmp/esel$K.jsonl" > "$tmp/csel$K" 2>&1 ||
        { echo "activations selective, bwd_lookahead $K: the checker fails the run"; tail -n 5 "$tmp/csel$K"; fail=1; }
    echo "activations selective, bwd_lookahead $K: $(tail -n 1 "$tmp/csel$K")"
    # the attention's output projection (one matmul_fwd of four) is not recomputed
    n=$(grep -c '"name": "matmul_fwd", "phase": "recompute"' "$tmp/esel$K.jsonl")
    nfull=$(grep -c '"name": "matmul_fwd", "phase": "recompute"' "$tmp/e$K.jsonl")
    echo "activations selective, bwd_lookahead $K: $n recomputed matmuls against $nfull"
    [ "$n" -gt 0 ] && [ $((n * 3)) -eq $((nfull * 2)) ] ||
        { echo "want two thirds of the full recomputation's matmuls"; fail=1; }
done
# keep_last: 2 with selective: the top two of six layers keep their activations, not recomputed
# (the runs above, with the default of 1, recompute five), and keep_last: 0 recomputes all six
recipe 1 "$tmp/all.yaml"
sed -i 's/^  chunk_mib: 1$/  chunk_mib: 1\n  keep_last: 0/' "$tmp/all.yaml"
if ! "$bin" train "$tmp/all.yaml" --cpus 2 -q --metrics "$tmp/mall.jsonl" --events "$tmp/eall.jsonl" \
    2> "$tmp/errall"; then
    echo "keep_last 0: training failed"; cat "$tmp/errall"; fail=1
fi
nall=$(grep -c '"name": "matmul_fwd", "phase": "recompute"' "$tmp/eall.jsonl")
recipe 1 "$tmp/keep.yaml"
sed -i 's/^  chunk_mib: 1$/  chunk_mib: 1\n  activations: selective\n  keep_last: 2/' "$tmp/keep.yaml"
grep -q "keep_last: 2" "$tmp/keep.yaml" || { echo "could not make the keep_last recipe"; fail=1; }
if ! "$bin" train "$tmp/keep.yaml" --cpus 2 -q --metrics "$tmp/mkeep.jsonl" --events "$tmp/ekeep.jsonl" \
    2> "$tmp/errkeep"; then
    echo "keep_last 2: training failed"; cat "$tmp/errkeep"; fail=1
fi
"$py" "$top/tools/check_invariants.py" --bwd-lookahead 1 "$tmp/ekeep.jsonl" > "$tmp/ckeep" 2>&1 ||
    { echo "keep_last 2: the checker fails the run"; tail -n 5 "$tmp/ckeep"; fail=1; }
echo "keep_last 2: $(tail -n 1 "$tmp/ckeep")"
n=$(grep -c '"name": "matmul_fwd", "phase": "recompute"' "$tmp/ekeep.jsonl")
nfull=$(grep -c '"name": "matmul_fwd", "phase": "recompute"' "$tmp/e1.jsonl")
echo "keep_last 2: $n recomputed matmuls, the default $nfull, keep_last 0 $nall"
[ "$n" -gt 0 ] && [ $((n * 3 * 5)) -eq $((nfull * 2 * 4)) ] && [ $((nall * 5)) -eq $((nfull * 6)) ] ||
    { echo "want 2/3 of the matmuls of four layers, five by default, six with keep_last 0"; fail=1; }

"$py" "$top/tools/check_invariants.py" --bwd-lookahead 0 "$tmp/e-1.jsonl" > "$tmp/c-1" 2>&1
[ $? -eq 1 ] || { echo "the unbounded run must fail the check for 0"; fail=1; }
echo "unbounded against 0: $(tail -n 1 "$tmp/c-1")"

"$py" - "$tmp"/m-1.jsonl "$tmp"/m0.jsonl "$tmp"/m1.jsonl "$tmp"/m2.jsonl "$tmp"/moff.jsonl \
    "$tmp"/msel1.jsonl "$tmp"/msel-1.jsonl "$tmp"/mkeep.jsonl "$tmp"/mall.jsonl <<'PYEOF' || fail=1
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

[ $fail -eq 0 ] && echo PASS || echo FAIL
exit $fail
