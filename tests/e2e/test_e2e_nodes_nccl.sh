#!/bin/sh
# Several nodes on GPUs: one host of two GPUs stands in for two nodes of one GPU each (mpirun, two
# processes, each given its GPU by CUDA_VISIBLE_DEVICES).  On the micro recipe (fp32, 4 steps):
#   - on the GPU route the gradient crosses between the processes through NCCL, GPU to GPU
#     (codelets/node_nccl.c): the run says so, the event logs hold node_send_nccl and
#     node_recv_nccl, and the losses, gradient norms and final weights are those of one process of
#     2 ranks on the same two GPUs, bit for bit (the same sum order: graph/nodes.c; the project's
#     attention kernels, SDP_ATTENTION=own, as the GPU tests comparing two runs use);
#   - a process with another GPU count (one sees GPU 0, the other GPUs 0 and 1) is refused at the
#     start, exit 2, naming the process and its host, nothing written.
# Exits 77 with fewer than two GPUs, without StarPU-MPI, or in a build without NCCL (the GPU
# route then goes through StarPU-MPI, which tests/e2e/test_e2e_nodes.sh covers).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_gpus 2
need_mpi
if ! grep -q '^#define SDP_HAVE_NCCL 1' "$build/config.h" 2> /dev/null; then
    echo "slidedp built without NCCL: SKIP"
    exit 77
fi
export SDP_ATTENTION=own
micro_recipe | sed -e 's/^\( *global:\).*/\1 4/' -e 's/^\( *micro:\).*/\1 1/' > "$tmp/r.yaml"
args="--steps 4 -q --grad-route gpu"
losses() { grep -o '"loss":[^,]*,\|"grad_norm":[^,]*' "$1" | tr '\n' ' '; }

timeout 300 "$bin" train "$tmp/r.yaml" $args --gpus 2 --ranks 2 --output "$tmp/ref" \
    --metrics "$tmp/ref.jsonl" > /dev/null 2> "$tmp/ref.err" ||
    { echo "1 process of 2 ranks failed"; cat "$tmp/ref.err"; fail=1; }
# one GPU a process: process k sees GPU k alone (the launcher's local rank)
timeout 300 mpirun -np 2 sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0" "$@"' \
    "$bin" train "$tmp/r.yaml" $args --gpus 1 --ranks 1 --output "$tmp/n2" \
    --metrics "$tmp/n2.jsonl" --events "$tmp/n2.events.jsonl" > /dev/null 2> "$tmp/n2.err" ||
    { echo "2 processes of 1 GPU failed"; cat "$tmp/n2.err"; fail=1; }
echo "1 process of 2 GPUs: $(losses "$tmp/ref.jsonl")"
echo "2 processes:        $(losses "$tmp/n2.jsonl")"
grep -q "sent by NCCL from GPU to GPU" "$tmp/n2.err" ||
    { echo "the run does not say NCCL carries the gradient:"; cat "$tmp/n2.err"; fail=1; }
for f in "$tmp/n2.events.jsonl" "$tmp/n2.events.jsonl.node1"; do
    grep -q '"node_send_nccl"' "$f" && grep -q '"node_recv_nccl"' "$f" ||
        { echo "$f: no NCCL transfer in the event log"; fail=1; }
done
[ -s "$tmp/n2.jsonl" ] && [ "$(losses "$tmp/n2.jsonl")" = "$(losses "$tmp/ref.jsonl")" ] ||
    { echo "the losses or norms differ from 1 process's"; fail=1; }
cmp -s "$tmp/n2/final/model.safetensors" "$tmp/ref/final/model.safetensors" ||
    { echo "the final weights differ from 1 process's"; fail=1; }

# another GPU count on process 1: refused, exit 2, nothing written
timeout 120 mpirun -np 1 env CUDA_VISIBLE_DEVICES=0 "$bin" train "$tmp/r.yaml" $args --ranks 1 \
    --output "$tmp/gpus" : -np 1 env CUDA_VISIBLE_DEVICES=0,1 "$bin" train "$tmp/r.yaml" $args \
    --ranks 1 --output "$tmp/gpus" > /dev/null 2> "$tmp/gpus.err"
rc=$?
pat="process 1 of 2 \\(on $(uname -n)\\) runs with another GPU count"
[ "$rc" = 2 ] && grep -Eq "$pat" "$tmp/gpus.err" && [ ! -e "$tmp/gpus" ] ||
    { echo "another GPU count: exit $rc"; cat "$tmp/gpus.err"; fail=1; }
echo "another GPU count: exit $rc ($(grep -Eo "$pat" "$tmp/gpus.err"))"
finish
