#!/bin/sh
# SPDX-License-Identifier: MIT
# Export round trip against Hugging Face transformers: train tests/e2e/data/micro-qwen3.yaml for 3
# fp32 steps on CPU workers, `slidedp export` its checkpoint directory, then export_hf.py checks
# that the exported weights are bit-identical to the run's own final model and that transformers'
# logits of a fixed batch (first 2 windows of data/kjv/val.tok) match ours (dump_logits) to a
# relative Frobenius error < 1e-5.  Skips (77) without torch/transformers.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
dump=$build/tests/e2e/dump_logits
need_python numpy torch transformers safetensors
[ -x "$dump" ] || { echo "missing helper $dump (make check builds it)"; echo FAIL; exit 1; }

if ! "$bin" train "$top/tests/e2e/data/micro-qwen3.yaml" --steps 3 --precision fp32 --gpus 0 \
    --output "$tmp/run" > "$tmp/train.out" 2> "$tmp/train.err"; then
    echo "training failed"; tail -n 20 "$tmp/train.err"; echo FAIL; exit 1
fi
tail -n 1 "$tmp/train.out"
if ! "$bin" export "$tmp/run/checkpoints" "$tmp/hf" > "$tmp/export.out" 2> "$tmp/export.err"; then
    echo "export failed"; cat "$tmp/export.err"; echo FAIL; exit 1
fi
echo "exported $(ls "$tmp/run/checkpoints") to: $(ls "$tmp/hf" | tr '\n' ' ')"
"$py" "$top/tests/e2e/export_hf.py" --exported "$tmp/hf" --final "$tmp/run/final" \
    --dump-logits "$dump" --tokens "$top/data/kjv/val.tok"
