#!/bin/sh
# train.embed_lookup: host with the compute on a GPU (exit 77, skipped, without one): runs
# tests/e2e/test_e2e_embed_lookup.sh with GPU=1, which then compares the runs within 1e-6
# relative (the GPU's scatter-add of the embedding's gradient sums in no fixed order) and checks
# that the compute runs' lookups ran on the GPU, the host runs' on CPU workers, and that the host
# runs fetch the tied LM head's copy of the embedding with the head's key, once a step.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_gpus 1
GPU=1 sh "$top/tests/e2e/test_e2e_embed_lookup.sh"
exit $?
