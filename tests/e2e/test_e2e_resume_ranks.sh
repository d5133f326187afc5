#!/bin/sh
# A checkpoint written by a run of 2 data-parallel ranks (CPU ranks, fp32) resumes at 2 ranks with
# the uninterrupted run's losses bit for bit, and at 1 and 4 ranks from the same state: the first
# step after the checkpoint, whose loss the loaded weights alone decide, gives the uninterrupted
# run's loss bit for bit; at 4 ranks the micro-batch changes (1 sequence a rank), which the resume
# names in a warning (the gradients' summation order), and the run finishes.  A resume that
# changes the data order (the global batch) is still refused, with exit 1.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/tests/e2e/data/micro-qwen3.yaml
losses() { grep -o '"loss":[^,]*' "$1" | tr '\n' ' '; }
nth() { losses "$1" | cut -d' ' -f"$2"; }
args="--steps 4 --checkpoint-every 2 -q"

"$bin" train "$recipe" $args --cpus 2 --ranks 2 --output "$tmp/ref" --metrics "$tmp/ref.jsonl" \
    2> "$tmp/ref.err" || { echo "the 2-rank reference failed"; cat "$tmp/ref.err"; fail=1; }
"$bin" train "$recipe" $args --steps 2 --cpus 2 --ranks 2 --output "$tmp/half" \
    --metrics "$tmp/half.jsonl" 2> "$tmp/half.err" ||
    { echo "the 2-step run failed"; cat "$tmp/half.err"; fail=1; }
echo "reference: $(losses "$tmp/ref.jsonl")"
for n in 2 1 4; do
    cp -r "$tmp/half" "$tmp/r$n" && cp "$tmp/half.jsonl" "$tmp/r$n.jsonl"
    # R ranks of CPU workers: at least R workers
    "$bin" train "$recipe" $args --cpus "$((n > 2 ? n : 2))" --ranks "$n" --output "$tmp/r$n" \
        --metrics "$tmp/r$n.jsonl" 2> "$tmp/r$n.err" ||
        { echo "resume at $n ranks failed"; cat "$tmp/r$n.err"; fail=1; continue; }
    grep -q "resuming from .*step-00000002" "$tmp/r$n.err" ||
        { echo "resume at $n ranks: not from the step-2 checkpoint"; cat "$tmp/r$n.err"; fail=1; }
    echo "resumed at $n ranks: $(losses "$tmp/r$n.jsonl")"
    if [ "$n" = 2 ]; then
        [ "$(losses "$tmp/r$n.jsonl")" = "$(losses "$tmp/ref.jsonl")" ] ||
            { echo "resume at 2 ranks: the losses differ from the uninterrupted run's"; fail=1; }
    else
        [ -n "$(nth "$tmp/ref.jsonl" 3)" ] && [ "$(nth "$tmp/r$n.jsonl" 3)" = "$(nth "$tmp/ref.jsonl" 3)" ] ||
            { echo "resume at $n ranks: step 3's loss differs (the state did not load as written)"; fail=1; }
        [ -d "$tmp/r$n/final" ] || { echo "resume at $n ranks: no final model"; fail=1; }
    fi
done
grep -q "micro-batches of 1 sequences where the run had 2" "$tmp/r4.err" ||
    { echo "resume at 4 ranks: no warning about the micro-batch"; cat "$tmp/r4.err"; fail=1; }
grep -q "micro-batches of" "$tmp/r1.err" &&
    { echo "resume at 1 rank: a warning though the micro-batch is the same"; fail=1; }

# another global batch changes the data order: refused, the directory untouched
cp -r "$tmp/half" "$tmp/g" && sed -e 's/^\( *global:\).*/\1 2/' \
    -e "s|^\( *train:\) \.\./\.\./\.\./|\1 $top/|" "$recipe" > "$tmp/g.yaml"
before=$(ls -R "$tmp/g" | md5sum)
"$bin" train "$tmp/g.yaml" $args --cpus 2 --ranks 2 --output "$tmp/g" 2> "$tmp/g.err"
rc=$?
[ "$rc" = 1 ] && grep -q "belongs to a run with" "$tmp/g.err" ||
    { echo "another global batch: exit $rc"; cat "$tmp/g.err"; fail=1; }
[ "$(ls -R "$tmp/g" | md5sum)" = "$before" ] || { echo "the refused resume changed the directory"; fail=1; }
finish
