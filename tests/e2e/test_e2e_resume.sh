#!/bin/sh
# Checkpoint and resume: a run stopped by SIGUSR1 (checkpoint at the step boundary, exit 0) and a run
# killed by SIGKILL (resume from the last periodic checkpoint) both finish with losses bit-identical to
# an uninterrupted run (fp32, CPU workers); a resume with a recipe change that alters the data order is
# refused; `slidedp export` writes the final checkpoint as a Hugging Face directory.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/tests/e2e/data/micro-qwen3.yaml
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
args="--steps 10 --checkpoint-every 2 --cpus 2 -q"

# the reference: uninterrupted
"$bin" train "$recipe" $args --output "$tmp/ref" --metrics "$tmp/ref.jsonl" 2> "$tmp/ref.err" ||
    { echo "reference run failed"; cat "$tmp/ref.err"; echo FAIL; exit 1; }
losses "$tmp/ref.jsonl" > "$tmp/ref.loss"
[ "$(wc -l < "$tmp/ref.loss")" -eq 10 ] || { echo "reference: expected 10 steps"; fail=1; }
[ -s "$tmp/ref/COMPLETE" ] || { echo "reference: no COMPLETE file"; fail=1; }

# wait until the metrics file of a background run has at least $2 lines
wait_steps() {
    i=0
    while [ "$(cat "$1" 2> /dev/null | wc -l)" -lt "$2" ] && [ $i -lt 600 ]; do
        sleep 0.1; i=$((i + 1))
    done
}

for how in USR1 KILL; do
    d=$tmp/run-$how
    "$bin" train "$recipe" $args --output "$d" --metrics "$d.jsonl" 2> "$d.err1" &
    pid=$!
    wait_steps "$d.jsonl" 3
    kill -s "$how" $pid
    wait $pid
    st=$?
    if [ "$how" = USR1 ]; then
        [ $st -eq 0 ] || { echo "$how: exit $st after the signal, expected 0"; cat "$d.err1"; fail=1; }
        grep -q "stopped by signal" "$d.err1" || { echo "$how: no 'stopped by signal' message"; fail=1; }
        [ -e "$d/COMPLETE" ] && { echo "$how: COMPLETE written by a stopped run"; fail=1; }
    fi
    "$bin" train "$recipe" $args --output "$d" --metrics "$d.jsonl" 2> "$d.err2" ||
        { echo "$how: resumed run failed"; cat "$d.err2"; fail=1; }
    grep -q "resuming from" "$d.err2" || { echo "$how: the second run did not resume"; fail=1; }
    losses "$d.jsonl" > "$d.loss"
    if cmp -s "$tmp/ref.loss" "$d.loss" && cmp -s "$tmp/ref/COMPLETE" "$d/COMPLETE"; then
        echo "$how: $(grep -o 'resuming from.*' "$d.err2" | sed 's|.*/||'), 10 losses bit-identical"
    else
        echo "$how: losses differ from the uninterrupted run"; diff "$tmp/ref.loss" "$d.loss"; fail=1
    fi
done

# a resume whose recipe changes the data order is refused, and nothing is changed on disk
sed -e 's/seq_len: 32/seq_len: 24/' -e "s|\.\./\.\./\.\./data|$(cd "$top" && pwd)/data|" "$recipe" > "$tmp/changed.yaml"
before=$(find "$tmp/ref" -type f -exec sha256sum {} + | sort)
"$bin" train "$tmp/changed.yaml" $args --output "$tmp/ref" 2> "$tmp/changed.err"
st=$?
after=$(find "$tmp/ref" -type f -exec sha256sum {} + | sort)
if [ $st -ne 1 ] || ! grep -q "seq_len=32.*seq_len=24\|was written by a run with" "$tmp/changed.err" || [ "$before" != "$after" ]; then
    echo "changed recipe: exit $st, expected 1 with a message and no change on disk"; cat "$tmp/changed.err"; fail=1
else
    echo "changed recipe: refused: $(grep -o 'was written by.*' "$tmp/changed.err" | head -c 150)"
fi

# export the final checkpoint: the same tensors as the run's own Hugging Face output
"$bin" export "$tmp/ref/checkpoints" "$tmp/export" 2> "$tmp/export.err" ||
    { echo "export failed"; cat "$tmp/export.err"; fail=1; }
cmp -s "$tmp/export/model.safetensors" "$tmp/ref/final/model.safetensors" ||
    { echo "export: model.safetensors differs from the run's final model"; fail=1; }

finish
