#!/bin/sh
# SPDX-License-Identifier: MIT
# The mixture-of-experts CPU kernels (codelets/cpu/moe.h) against transformers' own
# Qwen3MoeSparseMoeBlock and load_balancing_loss_func on a tiny config (8 experts, top-2,
# norm_topk_prob, one expert without a token): router logits, experts picked, routing weights,
# output, aux loss and every gradient (tests/e2e/moe_hf.py derives the tolerances); the aux loss
# of three layers' router logits and its gradient against load_balancing_loss_func; and a Qwen3-MoE
# config.json saved by transformers, read and written by formats/hfconfig.c, loads back in
# transformers with the same fields and sparse layers.  Skips (77) without numpy, torch or
# transformers.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
helper=$build/tests/e2e/moe_block
need_python numpy torch transformers
[ -x "$helper" ] || { echo "missing helper $helper (make check builds it)"; echo FAIL; exit 1; }
"$py" "$top/tests/e2e/moe_hf.py" "$helper" "$tmp" || fail=1
finish
