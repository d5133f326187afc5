#!/bin/sh
# The fp32 losses of a training run must not depend on the StarPU scheduling policy: the graph fixes the
# order of every gradient accumulation, so eager, lws, dmda, ... and the project's sdp-slidedp must give
# bit-identical loss lines.
# Also checks gradient accumulation over micro-batches, through the same CLI.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/tests/e2e/data/micro-qwen3.yaml
ref=""
for pol in eager lws dmda prio random ws sdp-slidedp; do
    if ! "$bin" train "$recipe" --sched "$pol" --cpus 2 --metrics "$tmp/$pol.jsonl" -q 2> "$tmp/$pol.err"; then
        echo "policy $pol: training failed"; cat "$tmp/$pol.err"; fail=1; continue
    fi
    # the loss and gradient-norm fields, exactly as written (%.10g)
    sed -e 's/.*"loss": *\([^,]*\),.*"grad_norm": *\([^,]*\),.*/\1 \2/' "$tmp/$pol.jsonl" > "$tmp/$pol.loss"
    echo "policy $pol: $(tr '\n' ' ' < "$tmp/$pol.loss")"
    if [ -z "$ref" ]; then
        ref=$pol
    elif ! cmp -s "$tmp/$ref.loss" "$tmp/$pol.loss"; then
        echo "policy $pol: losses differ from policy $ref"; fail=1
    fi
done
[ "$(wc -l < "$tmp/$ref.loss")" -eq 4 ] || { echo "expected 4 steps"; fail=1; }
finish
