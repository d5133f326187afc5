#!/bin/sh
# Instruction data with long prompts, in which some batches hold no target (every target masked):
# the run passes over them and finishes (exit 0), warns once and counts them at the end and in the
# metrics (skipped_batches); a run resumed from a checkpoint before such a batch gives the same
# losses and counts as the uninterrupted run; two processes (several nodes), each reading its
# rows, those of one process of 2 ranks.  Data in which no sequence has a target is refused
# before StarPU starts, and nothing is written.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
tok=$top/data/tokenizers/qwen3
fields() { sed -E 's/"(tokens_per_s|step_s|elapsed_s)":[^,}]*,?//g; s/,}/}/' "$1"; }
long=$(awk 'BEGIN { for (i = 0; i < 120; i++) printf "scroll " }')

# odd conversations: a prompt of about 240 tokens (7 sequences of 32 tokens), a reply of 3
i=1
while [ $i -le 6 ]; do
    if [ $((i % 2)) -eq 1 ]; then
        printf '{"prompt": "%s%d", "response": "Reply %d."}\n' "$long" $i $i
    else
        printf '{"prompt": "Short %d?", "response": "A short answer %d."}\n' $i $i
    fi
    i=$((i + 1))
done > "$tmp/sft.jsonl"
"$bin" tokenize --tokenizer "$tok" --input "$tmp/sft.jsonl" --output "$tmp/sft.tok" \
    --format chat 2> "$tmp/tok.err" || { cat "$tmp/tok.err"; echo FAIL; exit 1; }
micro_recipe | sed -e "s#^  train: .*#  train: $tmp/sft.tok#" > "$tmp/sft.yaml"
printf 'output:\n  keep_checkpoints: 4\n' >> "$tmp/sft.yaml"
args="--steps 10 --checkpoint-every 3 --cpus 1 -q"

"$bin" train "$tmp/sft.yaml" $args --output "$tmp/ref" --metrics "$tmp/ref.jsonl" 2> "$tmp/ref.err"
st=$?
if [ $st -ne 0 ] || [ ! -s "$tmp/ref/COMPLETE" ]; then
    echo "uninterrupted run: exit $st (expected 0 and COMPLETE)"; tail -3 "$tmp/ref.err"; fail=1
fi
n=$(grep -c 'without a target (every target masked) passed over' "$tmp/ref.err")
[ "$n" -eq 1 ] || { echo "expected one warning for the first batch without a target, got $n"; fail=1; }
total=$(grep -o '"skipped_batches":[0-9]*' "$tmp/ref.jsonl" | awk -F: '{ s += $2 } END { print s + 0 }')
late=$(grep '"skipped_batches"' "$tmp/ref.jsonl" | grep -vc '"step":[123],')
if [ "$total" -lt 1 ] || [ "$late" -lt 1 ] ||
    ! grep -q "$total batch(es) without a target passed over" "$tmp/ref.err"; then
    echo "skipped_batches: $total in the metrics ($late after step 3), not said at the end"; fail=1
else
    echo "uninterrupted: exit 0, $total batches passed over ($late after step 3), said once"
fi

# a run stopped after the checkpoint of step 3 (the later ones gone) and resumed
mkdir -p "$tmp/res/checkpoints" && cp "$tmp/ref.jsonl" "$tmp/res.jsonl" &&
    cp "$tmp/ref/checkpoints/step-00000003.sdpckpt" "$tmp/res/checkpoints/"
"$bin" train "$tmp/sft.yaml" $args --output "$tmp/res" --metrics "$tmp/res.jsonl" 2> "$tmp/res.err" ||
    { echo "resumed run failed"; tail -3 "$tmp/res.err"; fail=1; }
grep -q "resuming from.*step-00000003" "$tmp/res.err" || { echo "did not resume from step 3"; fail=1; }
fields "$tmp/ref.jsonl" > "$tmp/ref.f"
fields "$tmp/res.jsonl" > "$tmp/res.f"
if cmp -s "$tmp/ref.f" "$tmp/res.f" && cmp -s "$tmp/ref/COMPLETE" "$tmp/res/COMPLETE"; then
    echo "resumed from step 3: losses and skipped_batches bit-identical"
else
    echo "resumed run differs from the uninterrupted one"; diff "$tmp/ref.f" "$tmp/res.f"; fail=1
fi

# two processes of one rank (mpirun; where slidedp has StarPU-MPI), each reading its rows of the
# batches: a batch may hold targets on one node's rows alone, and the nodes must pass over the same
# batches (they agree on each) for the losses, norms and counts of one process of 2 ranks
if grep -q '^#define SDP_HAVE_MPI 1' "$build/config.h" 2> /dev/null; then
    need_mpi
    nargs="--steps 10 --sched eager -q"
    "$bin" train "$tmp/sft.yaml" $nargs --ranks 2 --metrics "$tmp/r2.jsonl" 2> "$tmp/r2.err" ||
        { echo "1 process of 2 ranks failed"; tail -3 "$tmp/r2.err"; fail=1; }
    timeout 300 mpirun -np 2 "$bin" train "$tmp/sft.yaml" $nargs --ranks 1 \
        --metrics "$tmp/n2.jsonl" 2> "$tmp/n2.err" ||
        { echo "2 processes of 1 rank failed"; tail -3 "$tmp/n2.err"; fail=1; }
    grep -o '"loss":[^,]*\|"grad_norm":[^,]*\|"skipped_batches":[0-9]*' "$tmp/r2.jsonl" > "$tmp/r2.f"
    grep -o '"loss":[^,]*\|"grad_norm":[^,]*\|"skipped_batches":[0-9]*' "$tmp/n2.jsonl" > "$tmp/n2.f"
    if [ -s "$tmp/r2.f" ] && cmp -s "$tmp/r2.f" "$tmp/n2.f"; then
        echo "2 processes: the losses, norms and passed-over batches of 1 process of 2 ranks"
    else
        echo "2 processes differ from 1 process of 2 ranks"; diff "$tmp/r2.f" "$tmp/n2.f"; fail=1
    fi
fi

# one conversation whose only targets lie past the last whole sequence: refused up front
printf '{"prompt": "%s", "response": "Yes."}\n' "$(awk 'BEGIN { for (i = 0; i < 200; i++) printf "word " }')" \
    > "$tmp/none.jsonl"
"$bin" tokenize --tokenizer "$tok" --input "$tmp/none.jsonl" --output "$tmp/none.tok" \
    --format chat 2> "$tmp/tok.err" || { cat "$tmp/tok.err"; echo FAIL; exit 1; }
micro_recipe | sed -e "s#^  train: .*#  train: $tmp/none.tok#" > "$tmp/none.yaml"
"$bin" train "$tmp/none.yaml" --cpus 1 -q --output "$tmp/none" 2> "$tmp/none.err"
st=$?
if [ $st -ne 1 ] || ! grep -q "has a training target" "$tmp/none.err" ||
    grep -q "StarPU" "$tmp/none.err" || [ -e "$tmp/none/checkpoints" ]; then
    echo "data without a target: exit $st, expected 1 before StarPU, nothing written"
    cat "$tmp/none.err"; fail=1
else
    echo "data without a target: refused: $(grep -o 'none of its.*' "$tmp/none.err" | head -c 100)"
fi

finish
