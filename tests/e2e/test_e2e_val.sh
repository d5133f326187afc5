#!/bin/sh
# The validation loss (data.val, train.eval_every, output.save_best): a run that evaluates gives
# training losses bit-identical to one that does not; val_loss and val_tokens (every target of the
# held-out set, its last batch padded) at steps 2, 4, 5 (the last) in the metrics and the progress
# line; RUN/best holds the model of the lowest one with its step; a resumed run knows the best
# loss so far.  Refused before StarPU: data.val missing or of a larger vocabulary than the model's,
# save_best without data.val or output.dir, eval_every < 0.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
args="--steps 5 --checkpoint-every 2 --cpus 1"

cat > "$tmp/val.txt" << 'EOF'
And the king said unto me, For what dost thou make request? So I prayed to the God of heaven.
And I said unto the king, If it please the king, and if thy servant have found favour in thy
sight, that thou wouldest send me unto Judah, unto the city of my fathers' sepulchres, that I
may build it. And the king said unto me, (the queen also sitting by him,) For how long shall
thy journey be? and when wilt thou return? So it pleased the king to send me; and I set him a
time. Moreover I said unto the king, If it please the king, let letters be given me to the
governors beyond the river, that they may convey me over till I come into Judah.
EOF
"$bin" tokenize --tokenizer "$top/data/tokenizers/qwen3" --input "$tmp/val.txt" \
    --output "$tmp/val.tok" 2> "$tmp/tok.err" || { cat "$tmp/tok.err"; echo FAIL; exit 1; }
count=$(grep -o 'MB, [0-9]* tokens' "$tmp/tok.err" | grep -o '[0-9]* tokens' | cut -d' ' -f1)
want=$(((count - 1) / 32 * 32)) # every target of every whole sequence of 32 tokens

micro_recipe > "$tmp/plain.yaml"
awk -v val="$tmp/val.tok" '{ print } /^  train: / { print "  val: " val }
    /^  steps: / { print "  eval_every: 2" }' "$tmp/plain.yaml" > "$tmp/val.yaml"
printf 'output:\n  save_best: true\n' >> "$tmp/val.yaml"

"$bin" train "$tmp/plain.yaml" $args -q --metrics "$tmp/plain.jsonl" 2> "$tmp/plain.err" ||
    { echo "run without validation failed"; cat "$tmp/plain.err"; echo FAIL; exit 1; }
"$bin" train "$tmp/val.yaml" $args --output "$tmp/run" --metrics "$tmp/val.jsonl" \
    > "$tmp/val.out" 2> "$tmp/val.err"
st=$?
[ $st -eq 0 ] || { echo "run with validation: exit $st"; tail -3 "$tmp/val.err"; fail=1; }
losses "$tmp/plain.jsonl" > "$tmp/plain.loss"
losses "$tmp/val.jsonl" > "$tmp/val.loss"
if [ "$(wc -l < "$tmp/val.loss")" -eq 5 ] && cmp -s "$tmp/plain.loss" "$tmp/val.loss"; then
    echo "training losses with validation: bit-identical to the run without"
else
    echo "training losses differ with validation"; diff "$tmp/plain.loss" "$tmp/val.loss"; fail=1
fi
steps=$(grep '"val_loss"' "$tmp/val.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2 | paste -sd' ' -)
ntok=$(grep -o '"val_tokens":[0-9]*' "$tmp/val.jsonl" | cut -d: -f2 | sort -u | paste -sd' ' -)
nval=$(grep -c 'val [0-9]' "$tmp/val.out")
if [ "$steps" != "2 4 5" ] || [ "$ntok" != "$want" ] || [ "$nval" -ne 3 ]; then
    echo "validation at steps '$steps' (want 2 4 5), val_tokens '$ntok' (want $want), $nval progress lines"
    fail=1
else
    echo "validation at steps $steps over $ntok targets, in the progress lines"
fi
best=$(grep -o '"step":[0-9]*,.*"val_loss":[0-9.e+-]*' "$tmp/val.jsonl" |
    sed -e 's/"step":\([0-9]*\),.*"val_loss":\(.*\)/\2 \1/' | sort -n | head -1 | cut -d' ' -f2)
if [ ! -s "$tmp/run/best/model.safetensors" ] || [ ! -s "$tmp/run/best/config.json" ] ||
    ! grep -q "\"step\": $best," "$tmp/run/best/best.json"; then
    echo "best/: expected the model of step $best"; ls -l "$tmp/run/best"; cat "$tmp/run/best/best.json"
    fail=1
else
    echo "best/: the model of step $best, the lowest validation loss"
fi

# resumed from step 2 with a lower best loss on record: best/ stays as it is
rm -rf "$tmp/run/final" "$tmp/run/COMPLETE" "$tmp/run/checkpoints/step-00000004.sdpckpt" \
    "$tmp/run/checkpoints/step-00000005.sdpckpt"
printf '{"step": 2, "val_loss": 0.5, "val_tokens": 1}\n' > "$tmp/run/best/best.json"
before=$(sha256sum "$tmp/run/best/"* | sort)
"$bin" train "$tmp/val.yaml" $args -q --output "$tmp/run" --metrics "$tmp/res.jsonl" \
    2> "$tmp/res.err" || { echo "resumed run failed"; tail -3 "$tmp/res.err"; fail=1; }
if ! grep -q "best validation loss so far: 0.5000 at step 2" "$tmp/res.err" ||
    [ "$(sha256sum "$tmp/run/best/"* | sort)" != "$before" ]; then
    echo "resumed run: did not keep the best loss on record"; fail=1
else
    echo "resumed run: knew the best loss so far, best/ unchanged"
fi

# refused up front, nothing written: exit status, message
refuse() { # refuse STATUS PATTERN RECIPE [ARGS]
    want_st=$1 pat=$2 rec=$3
    shift 3
    "$bin" train "$rec" --cpus 1 -q "$@" 2> "$tmp/r.err"
    got=$?
    if [ $got -ne "$want_st" ] || ! grep -q "$pat" "$tmp/r.err" || grep -q "StarPU" "$tmp/r.err" ||
        [ -e "$tmp/r-out" ]; then
        echo "refusal '$pat': exit $got (want $want_st)"; cat "$tmp/r.err"; fail=1
    else
        echo "refused, exit $got: $(grep -o "$pat.*" "$tmp/r.err" | head -1 | head -c 90)"
    fi
}
sed -e "s#$tmp/val.tok#$tmp/missing.tok#" "$tmp/val.yaml" > "$tmp/missing.yaml"
refuse 1 "missing.tok: cannot open" "$tmp/missing.yaml" --output "$tmp/r-out"
"$bin" tokenize --tokenizer "$top/data/tokenizers/gpt2" --input "$tmp/val.txt" \
    --output "$tmp/gpt2.tok" 2> "$tmp/tok.err" || { cat "$tmp/tok.err"; fail=1; }
sed -e "s#^  train: .*#  train: $tmp/gpt2.tok#" -e 's/vocab_size: 151936/vocab_size: 50257/' \
    -e "s#$tmp/val.tok#$top/data/kjv/val.tok#" "$tmp/val.yaml" > "$tmp/vocab.yaml"
refuse 1 "data.val .* a vocabulary of 151669 ids, the model has 50257" "$tmp/vocab.yaml" \
    --output "$tmp/r-out"
grep -v "val: " "$tmp/val.yaml" > "$tmp/noval.yaml"
refuse 2 "output.save_best needs data.val" "$tmp/noval.yaml" --output "$tmp/r-out"
refuse 2 "output.save_best needs output.dir" "$tmp/val.yaml"
refuse 2 "eval.every\|eval-every" "$tmp/plain.yaml" --eval-every -1 --output "$tmp/r-out"

finish
