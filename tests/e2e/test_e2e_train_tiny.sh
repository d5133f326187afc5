#!/bin/sh
# The README's main job, as written there: train recipes/tiny-qwen3.yaml on CPU workers and check that the
# loss falls by at least 30% from the first to the last step, that every step wrote a metrics line with
# the documented fields, and that the trained model is written as a Hugging Face directory.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
start=$(date +%s)
if ! "$bin" train "$top/recipes/tiny-qwen3.yaml" --metrics "$tmp/m.jsonl" --output "$tmp/out" > "$tmp/out.txt"; then
    echo "training failed"; tail -n 20 "$tmp/out.txt"; echo FAIL; exit 1
fi
end=$(date +%s)
tail -n 3 "$tmp/out.txt"
steps=$(wc -l < "$tmp/m.jsonl")
for key in step loss lr tokens tokens_per_s step_s; do
    grep -q "\"$key\":" "$tmp/m.jsonl" || { echo "metrics lack \"$key\""; echo FAIL; exit 1; }
done
first=$(head -n 1 "$tmp/m.jsonl" | sed 's/.*"loss": *\([^,]*\),.*/\1/')
last=$(tail -n 1 "$tmp/m.jsonl" | sed 's/.*"loss": *\([^,]*\),.*/\1/')
echo "steps $steps, loss $first -> $last, wall time $((end - start)) s"
ok=$(awk -v a="$first" -v b="$last" 'BEGIN { print (b <= 0.7 * a) ? 1 : 0 }')
[ "$ok" = 1 ] || { echo "loss fell by less than 30%"; echo FAIL; exit 1; }
for f in config.json model.safetensors; do
    [ -s "$tmp/out/final/$f" ] || { echo "missing $f in the exported model"; echo FAIL; exit 1; }
done
echo PASS
