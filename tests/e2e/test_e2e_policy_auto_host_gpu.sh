#!/bin/sh
# SPDX-License-Identifier: MIT
# train.policy auto under a host budget on one GPU (exit 77 without one): qwen3-0.6b in bf16 with
# the bf16 gradient return, train.host_memory_gib set about 2.5 layers' moments below the host's
# peak the model predicts for the recipe's plan, so AutoPolicy must run the AdamW of the first
# layers on the GPU (their moments then get no host pages; cli/plan_auto.c):
#   - the run's log and auto-plan.json name the layers updated on the GPU (3 or more), and the
#     losses are the fixed plan's bit for bit (the GPU's AdamW gives the host's bits);
#   - a run stopped by SIGUSR1 resumes with its plan, the same layers on the GPU, and ends on the
#     same losses.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_gpus 1
losses() { sed -e 's/.*"step": *\([0-9]*\),.*"loss": *\([^,]*\),.*/\1 \2/' "$1"; }
export SDP_CACHE_DIR="$tmp/cache"
recipe() { # HOST_GIB
    printf 'model: {preset: qwen3-0.6b}\ndata: {train: %s/data/kjv/val.tok, seq_len: 256}\n' "$top"
    printf 'batch: {global: 4, micro: 4}\n'
    printf 'train: {steps: 10, gpus: 1, precision: bf16, grad_dtype: bf16'
    [ "$1" = 0 ] || printf ', host_memory_gib: %s' "$1"
    printf '}\n'
}
recipe 0 > "$tmp/r0.yaml"
"$bin" plan "$tmp/r0.yaml" --json 2> /dev/null > "$tmp/p.json"
gib=$("$py" -c "import json, sys
p = json.load(open(sys.argv[1]))['predicted']['host_bytes']
layer = 1024 * (2048 + 1024) * 2 + 3 * 1024 * 3072  # qwen3-0.6b's projections, no norms
print('%.3f' % ((p - 2.5 * 8 * layer) / 2**30))" "$tmp/p.json")
echo "host budget: $gib GiB"
recipe "$gib" > "$tmp/r.yaml"
args="-q"

"$bin" train "$tmp/r0.yaml" $args --metrics "$tmp/fixed.jsonl" 2> "$tmp/fixed.err" ||
    { echo "the fixed run failed"; cat "$tmp/fixed.err"; fail=1; }
losses "$tmp/fixed.jsonl" > "$tmp/fixed.loss"

"$bin" train "$tmp/r.yaml" $args --policy auto --output "$tmp/a" --metrics "$tmp/a.jsonl" \
    2> "$tmp/a.err" || { echo "the auto run failed"; cat "$tmp/a.err"; fail=1; }
nu=$(sed -n 's/.*auto: stage 3.*: layers 1-\([0-9]*\) updated on the GPU.*/\1/p' "$tmp/a.err" |
    tail -n 1)
echo "auto: layers 1-${nu:-?} updated on the GPU"
[ "${nu:-0}" -ge 3 ] || { echo "expected 3 or more layers updated on the GPU"; cat "$tmp/a.err"; fail=1; }
"$py" -c "import json, sys; sys.exit(json.load(open(sys.argv[1])).get('gpu_update') != \
int(sys.argv[2]))" "$tmp/a/auto-plan.json" "${nu:-0}" ||
    { echo "auto-plan.json lacks gpu_update $nu"; cat "$tmp/a/auto-plan.json"; fail=1; }
losses "$tmp/a.jsonl" | cmp -s - "$tmp/fixed.loss" ||
    { echo "auto and fixed losses differ"; losses "$tmp/a.jsonl" | diff - "$tmp/fixed.loss"; fail=1; }

rm -rf "$tmp/cache"
"$bin" train "$tmp/r.yaml" $args --policy auto --output "$tmp/s" --metrics "$tmp/s.jsonl" \
    2> "$tmp/s.err1" &
stop_at_line $! "$tmp/s.jsonl" 5 1800 || { echo "the stopped run failed"; cat "$tmp/s.err1"; fail=1; }
rm -rf "$tmp/cache"
"$bin" train "$tmp/r.yaml" $args --policy auto --output "$tmp/s" --metrics "$tmp/s2.jsonl" \
    2> "$tmp/s.err2" || { echo "the resumed run failed"; cat "$tmp/s.err2"; fail=1; }
grep -q "auto: the run's plan: layers 1-$nu updated on the GPU" "$tmp/s.err2" ||
    { echo "the resumed run did not keep its layers on the GPU"; cat "$tmp/s.err2"; fail=1; }
cat "$tmp/s.jsonl" "$tmp/s2.jsonl" > "$tmp/s-all.jsonl"
losses "$tmp/s-all.jsonl" | sort -n | uniq | cmp -s - "$tmp/fixed.loss" ||
    { echo "stopped and resumed: losses differ"; fail=1; }
finish
