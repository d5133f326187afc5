#!/bin/sh
# Divergence: a learning rate of 1e30 makes the second step's loss and gradients non-finite.
# train.on_nan: stop (the default) ends the run with exit 1, naming the step and the first parameter group
# whose gradient is not finite, and leaves the earlier checkpoints loadable; train.on_nan: skip warns,
# skips those updates and finishes.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
sed -e 's/lr: 1.0e-2/lr: 1.0e+30/' -e 's/max_grad_norm: 1.0/max_grad_norm: 0/' \
    -e "s|\.\./\.\./\.\./data|$top/data|" "$top/tests/e2e/data/micro-qwen3.yaml" > "$tmp/nan.yaml"
grep -q "lr: 1.0e+30" "$tmp/nan.yaml" || { echo "could not make the recipe"; exit 1; }

"$bin" train "$tmp/nan.yaml" --cpus 2 -q --output "$tmp/stop" --checkpoint-every 1 2> "$tmp/stop.err"
st=$?
if [ $st -ne 1 ] || ! grep -q "first non-finite gradient: .*training diverged" "$tmp/stop.err"; then
    echo "on_nan stop: exit $st, expected 1 with a diverged message"; cat "$tmp/stop.err"; fail=1
else
    echo "on_nan stop: $(grep -o 'step [0-9]*: loss.*diverged' "$tmp/stop.err")"
fi
"$bin" export "$tmp/stop/checkpoints" "$tmp/exported" 2> "$tmp/export.err" ||
    { echo "the checkpoint written before the divergence does not export"; cat "$tmp/export.err"; fail=1; }

sed -e 's/^  chunk_mib: 1$/  chunk_mib: 1\n  on_nan: skip/' "$tmp/nan.yaml" > "$tmp/skip.yaml"
"$bin" train "$tmp/skip.yaml" --cpus 2 -q --metrics "$tmp/skip.jsonl" 2> "$tmp/skip.err"
st=$?
n=$(grep -c "update skipped" "$tmp/skip.err")
if [ $st -ne 0 ] || [ "$n" -lt 1 ] || [ "$(wc -l < "$tmp/skip.jsonl")" -ne 4 ]; then
    echo "on_nan skip: exit $st, $n skipped updates, $(wc -l < "$tmp/skip.jsonl") metrics lines"
    cat "$tmp/skip.err"; fail=1
else
    echo "on_nan skip: finished, $n updates skipped; metrics record null losses:" \
        "$(grep -c '"loss":null' "$tmp/skip.jsonl")"
fi
finish
