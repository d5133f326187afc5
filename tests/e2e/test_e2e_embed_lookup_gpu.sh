#!/bin/sh
# train.embed_lookup: host with the compute on a GPU (exit 77, skipped, without one): runs
# tests/e2e/test_e2e_embed_lookup.sh with GPU=1, which then compares the runs within 1e-6
# relative (the GPU's scatter-add of the embedding's gradient sums in no fixed order) and checks
# that the compute runs' lookups ran on the GPU, the host runs' on CPU workers, and that the host
# runs fetch the tied LM head's copy of the embedding with the head's key, once a step.
set -u
top=$(cd "${top_srcdir:-.}" && pwd)
ngpu=0
if command -v nvidia-smi > /dev/null 2>&1; then
    ngpu=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
fi
if [ "$ngpu" -lt 1 ]; then
    echo "no GPU: SKIP"
    exit 77
fi
GPU=1 exec sh "$top/tests/e2e/test_e2e_embed_lookup.sh"
