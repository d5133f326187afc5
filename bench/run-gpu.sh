#!/usr/bin/env bash
# One benchmark session on a GPU host, from the source tree with a bundle made by tools/gpu-bundle.sh:
# the CUDA kernel tests, the Hugging Face parity test with the compute on the GPU, `slidedp bench` on the
# standard workload, and the PyTorch peers (bench/peers.py) in the same session.  Writes everything into
# OUTDIR (default bench/results/run-DATE): logs and one JSONL of results.
#   bench/run-gpu.sh [OUTDIR] [MODEL] [BATCH]        (defaults: qwen3-4b 16)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
out=${1:-$top/bench/results/run-$(date +%Y%m%d-%H%M)}
model=${2:-qwen3-4b}
batch=${3:-16}
mkdir -p "$out"
b=$top/build-gpu
export LD_LIBRARY_PATH=$top/deps/starpu/lib:$b/lib:${LD_LIBRARY_PATH:-}
export STARPU_HOME=${STARPU_HOME:-$(mktemp -d)}
export STARPU_SILENT=1 OPENBLAS_NUM_THREADS=1
export top_srcdir=$top top_builddir=$b
{
    date -u +%FT%TZ
    git rev-parse HEAD 2>/dev/null || echo "commit unknown"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    lscpu | grep -E 'Model name|^CPU\(s\)'
    free -g | head -2
} > "$out/machine.txt" 2>&1

echo "== kernel tests" | tee "$out/tests.log"
for t in "$b"/tests/kernels/test_cuda_* "$b"/tests/e2e/test_e2e_hf_parity_gpu; do
    [ -x "$t" ] || continue
    timeout 300 "$t" > "$out/$(basename "$t").log" 2>&1
    echo "$(basename "$t"): exit $? $(tail -n 1 "$out/$(basename "$t").log")" | tee -a "$out/tests.log"
done

echo "== slidedp bench" | tee -a "$out/tests.log"
timeout 400 "$b/slidedp" bench --model "$model" --batch "$batch" --seq 1024 --steps 3 --warmup 2 \
    >> "$out/results.jsonl" 2> "$out/bench-slidedp.log"
echo "slidedp bench: exit $?" | tee -a "$out/tests.log"
tail -n 1 "$out/results.jsonl"

if [ "${SKIP_PEERS:-0}" != 1 ]; then
    for sys in pytorch-gpu fsdp2-offload; do
        timeout 400 python3 bench/peers.py --system "$sys" --model "$model" --batch "$batch" --seq 1024 \
            --steps 3 --warmup 1 >> "$out/results.jsonl" 2> "$out/bench-$sys.log"
        echo "$sys: exit $?" | tee -a "$out/tests.log"
    done
fi
cat "$out/results.jsonl"
