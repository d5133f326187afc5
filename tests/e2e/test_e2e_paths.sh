#!/bin/sh
# SPDX-License-Identifier: MIT
# Outputs against inputs: `slidedp train`, `tokenize` and `export` refuse (exit 2, naming both
# paths) an output that is one of their inputs (by name, symlink or hard link) or replaces one, an
# output they could not write (a directory, a missing directory) before any work, and change
# nothing on disk; a data file whose header gives no vocabulary is scanned up front; a run that
# fails keeps the old metrics file (with none, the steps it ran); export refuses a used directory
# without --force; plot's PNG may not replace its metrics file; bench checks its --trace up front.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
w=$tmp/w # what the refused commands must leave as it is
mkdir "$w"

# each case on intact inputs: the data file and the recipe are restored first; $w is watched
expect_dir=$w
expect_prepare() {
    cp "$tmp/val.tok" "$w/val.tok" && cp "$tmp/r.yaml" "$w/r.yaml"
}

micro_recipe | sed -e "s#^  train: .*#  train: $w/val.tok#" -e 's/steps: 4/steps: 1/' > "$w/r.yaml"
cp "$top/data/kjv/val.tok" "$w/val.tok"
cp "$w/val.tok" "$w/r.yaml" "$tmp"
ln "$w/val.tok" "$w/hard.tok"
ln -s r.yaml "$w/link.yaml"
mkdir "$w/dir"

# class 3: the metrics file on the training shard (it was truncated under its mapping: SIGBUS)
same="is the same file as"
expect 2 "metrics file .*val.tok $same the data file .*val.tok" -- "$bin" train "$w/r.yaml" --metrics "$w/val.tok"
expect 2 "metrics file .*hard.tok $same the data file" -- "$bin" train "$w/r.yaml" --metrics "$w/hard.tok"
expect 2 "metrics file .*link.yaml $same the recipe" -- "$bin" train "$w/r.yaml" --metrics "$w/link.yaml"
expect 2 "trace file .*r.yaml $same the recipe" -- "$bin" train "$w/r.yaml" --trace "$w/r.yaml"
expect 2 "metrics file .*m.json $same the --trace file" -- "$bin" train "$w/r.yaml" --metrics "$w/m.json" --trace "$w/m.json"
expect 2 "metrics file .*dir names a directory" -- "$bin" train "$w/r.yaml" --metrics "$w/dir"
# class 6: outputs that cannot be written are found before StarPU starts, not after the last step
expect 2 "trace file .*directory .*missing" -- "$bin" train "$w/r.yaml" --output "$w/run" --trace "$w/missing/t.json"
expect 2 "events file .*dir names a directory" -- "$bin" train "$w/r.yaml" --output "$w/run" --events "$w/dir"

# the run's final/ is the model directory the run reads
mkdir -p "$w/m/final"
cp "$top/tests/ref/data/qwen3-tiny/config.json" "$top/tests/ref/data/qwen3-tiny/model.safetensors" "$w/m/final"
{
    printf 'SDPTOKEN\001\000\000\000\004\000\000\000\310\000\000\000\000\000\000\000'
    printf '\000\002\000\000\377\377\377\377\000\000\000\000'
    head -c 28 /dev/zero
    i=0
    while [ $i -lt 200 ]; do
        printf "\\$(printf %o $((i % 100 + 1)))\\000\\000\\000"
        i=$((i + 1))
    done
} > "$w/small.tok"
printf 'model:\n  path: final\ndata:\n  train: ../small.tok\n  seq_len: 16\nbatch:\n  global: 2\n' > "$w/m/m.yaml"
printf '  micro: 2\ntrain:\n  steps: 1\n  precision: fp32\noutput:\n  dir: .\n' >> "$w/m/m.yaml"
expect 2 "final directory .*final $same the model directory" -- "$bin" train "$w/m/m.yaml"
# bench wrote its trace after the last step too (exit 1, as for its --mem-log)
expect 1 "trace file .*directory .*missing" -- "$bin" bench --model "$w/m/final" --batch 2 --seq 16 --steps 1 --warmup 0 --trace "$w/missing/t.json"
# class 6: a shard whose header gives vocabulary 0 is scanned against the model's 512 ids up front
cp "$w/val.tok" "$w/v0.tok"
printf '\000\000\000\000' | dd of="$w/v0.tok" bs=1 seek=24 conv=notrunc 2> /dev/null
sed -e 's#small.tok#v0.tok#' -e "s#dir: .#dir: $tmp/v0run#" "$w/m/m.yaml" > "$w/m/v0.yaml"
expect 1 "v0.tok: the token at position 0 is 7039, outside the model's vocabulary of 512" -- "$bin" train "$w/m/v0.yaml"
[ ! -e "$tmp/v0run" ] || { echo "the vocabulary refusal created the run directory"; fail=1; }

# tokenize: --output on its input, through a hard link, or on a file of the tokenizer's directory
cp -r "$top/data/tokenizers/gpt2" "$w/tok"
printf 'In the beginning God created the heaven and the earth.\n' > "$w/in.txt"
ln "$w/in.txt" "$w/in2.txt"
expect 2 "output file .*in.txt $same the --input file" -- "$bin" tokenize --tokenizer "$w/tok" --input "$w/in.txt" --output "$w/in.txt"
expect 2 "output file .*in2.txt $same the --input file" -- "$bin" tokenize --tokenizer "$w/tok" --input "$w/in.txt" --output "$w/in2.txt" --format text
expect 2 "output file .*vocab.json would replace a file of the tokenizer" -- "$bin" tokenize --tokenizer "$w/tok" --input "$w/in.txt" --output "$w/tok/vocab.json"

# class 3: a failed run (diverged at step 2) leaves the metrics file of the run before
sed -e 's/lr: 1.0e-2/lr: 1.0e+30/' -e 's/max_grad_norm: 1.0/max_grad_norm: 0/' -e 's/steps: 1/steps: 4/' "$w/r.yaml" > "$w/nan.yaml"
echo '{"step": 1, "loss": 1.0}' > "$w/old.jsonl"
expect 1 "diverged" -- "$bin" train "$w/nan.yaml" --metrics "$w/old.jsonl"
# ... and with no file before, the steps that ran stay: step 1, then the diverged step
"$bin" train "$w/nan.yaml" --metrics "$tmp.fresh.jsonl" > /dev/null 2>&1
if ! head -n 1 "$tmp.fresh.jsonl" 2> /dev/null | grep -q '^{"step": *1,' ||
    [ -e "$tmp.fresh.jsonl.tmp" ]; then
    echo "a failed run with no metrics file before kept no steps"; fail=1
fi
rm -f "$tmp.fresh.jsonl"
# plot: its PNG over the metrics file it reads
expect 2 "output file .*old.jsonl $same the metrics file" -- "$bin" plot "$w/old.jsonl" -o "$w/old.jsonl"

# class 8b: export into a used directory needs --force; never into its own checkpoint directory
"$bin" train "$w/r.yaml" -q --output "$tmp/run" 2> "$tmp.err" || { cat "$tmp.err"; fail=1; }
mkdir "$w/hf" && echo '{}' > "$w/hf/config.json"
expect 2 "hf exists and holds files" -- "$bin" export "$tmp/run/checkpoints" "$w/hf"
expect 2 "output directory .*checkpoints $same the checkpoint" -- "$bin" export "$tmp/run/checkpoints" "$tmp/run/checkpoints"
expect 2 "output directory .*run holds the checkpoint" -- "$bin" export "$tmp/run/checkpoints" "$tmp/run" --force
if ! "$bin" export "$tmp/run/checkpoints" "$w/hf" --force 2> "$tmp.err" || ! [ -s "$w/hf/model.safetensors" ] ||
    [ "$(cat "$w/hf/config.json")" = '{}' ]; then
    echo "export --force did not replace the directory"; cat "$tmp.err"; fail=1
fi

echo "$n outputs refused"
finish
