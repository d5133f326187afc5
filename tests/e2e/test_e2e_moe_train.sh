#!/bin/sh
# SPDX-License-Identifier: MIT
# A tiny Qwen3-MoE trained on CPU workers (fp32) against transformers' Qwen3MoeForCausalLM: 3
# layers, the middle one dense by mlp_only_layers, 8 experts, top-2, norm_topk_prob,
# output_router_logits.  tests/e2e/moe_train.py writes the model and its references (an expert
# without a token at step 0, printed); the parity program (tests/e2e/test_e2e_hf_parity.c, given
# the directory) checks logits, the loss with the load-balancing loss, every gradient (the idle
# expert's exactly 0) and 10 AdamW steps (each expert skipped in the steps it got no token and
# counting its own steps), with one micro-batch recomputed and kept (the same bits) and with two;
# then the exports of the loaded and the trained weights load in transformers with the same tensors
# and logits.  Skips (77) without torch, transformers or safetensors.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
prog=$build/tests/e2e/test_e2e_hf_parity
need_python torch transformers safetensors
[ -x "$prog" ] || { echo "missing $prog (make check builds it)"; echo FAIL; exit 1; }
"$py" "$top/tests/e2e/moe_train.py" gen "$tmp/moe" || fail=1
[ $fail = 0 ] && { "$prog" "$tmp/moe" || fail=1; }
[ $fail = 0 ] && { "$py" "$top/tests/e2e/moe_train.py" export "$tmp/moe" || fail=1; }
finish
