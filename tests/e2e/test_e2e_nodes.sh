#!/bin/sh
# Several nodes through StarPU-MPI (one process per node, started by mpirun on this machine; CPU
# ranks, fp32): 2 processes of 3 ranks and 3 processes of 2 give the losses, gradient norms and
# final weights of 1 process of 6 ranks, bit for bit, on the host route and on the GPU route (the
# adds on rank 0's worker), since the gradient goes across the nodes in rank order (graph/nodes.c);
# the nodes' event logs pass the invariant checker together, which catches a late backward; a stop
# signal to one process stops every node at the same step; a checkpoint of the 2-process run resumes at 1 and at
# 3 processes with the uninterrupted run's bits; a kill of one process ends the others with the
# launcher naming it, and its last checkpoint loads.  Refused at the start, exit 2, nothing
# written: processes with different recipes or arguments, different binaries, micro-batches that
# do not divide among the nodes' ranks, a command other than train or calibrate, an MPI thread
# level below MPI_THREAD_MULTIPLE (a node with another GPU count: test_e2e_nodes_nccl.sh, on GPUs).
# Each node reads only its rows of the batches, and the bits above are one process's.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_mpi
mpi() { mpirun -np "$@"; }

# 6 micro-batches of 1 sequence a step: one per rank; warmup over the first 2 steps, so that a
# 2-step run's learning rates are the 4-step run's (the resumes below)
# a validation every 2 steps on a few sequences, and the best model kept (node 0 writes it)
head -c 2400 "$top/docs/nodes.md" > "$tmp/val.txt"
"$bin" tokenize --tokenizer "$top/data/tokenizers/qwen3/tokenizer.json" --input "$tmp/val.txt" \
    --output "$tmp/val.tok" --format shard 2> "$tmp/tok.err" ||
    { echo "the validation shard:"; cat "$tmp/tok.err"; fail=1; }
micro_recipe | sed -e 's/^\( *global:\).*/\1 6/' -e 's/^\( *micro:\).*/\1 1/' \
    -e "s#^\(  train: .*\)#\1\n  val: $tmp/val.tok#" > "$tmp/r.yaml"
printf 'output:\n  save_best: true\n' >> "$tmp/r.yaml"
args="--steps 4 --checkpoint-every 2 --eval-every 2 -q --sched eager"
losses() { grep -o '"loss":[^,]*,\|"grad_norm":[^,]*\|"val_loss":[^,]*' "$1" | tr '\n' ' '; }

train() { # name nprocs ranks extra...
    name=$1 np=$2 ranks=$3
    shift 3
    if [ "$np" = 1 ]; then
        "$bin" train "$tmp/r.yaml" $args --ranks "$ranks" --output "$tmp/$name" \
            --metrics "$tmp/$name.jsonl" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
    else
        mpi "$np" "$bin" train "$tmp/r.yaml" $args --ranks "$ranks" --output "$tmp/$name" \
            --metrics "$tmp/$name.jsonl" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
    fi || { echo "$name ($np processes of $ranks ranks) failed"; cat "$tmp/$name.err"; fail=1; }
}
same() { # name: the losses, norms and final weights of the 1-process run
    [ -s "$tmp/$1.jsonl" ] && [ "$(losses "$tmp/$1.jsonl")" = "$(losses "$tmp/ref.jsonl")" ] ||
        { echo "$1: the losses or norms differ from 1 process's"; fail=1; return; }
    cmp -s "$tmp/$1/final/model.safetensors" "$tmp/ref/final/model.safetensors" ||
        { echo "$1: the final weights differ from 1 process's"; fail=1; return; }
    cmp -s "$tmp/$1/best/model.safetensors" "$tmp/ref/best/model.safetensors" ||
        { echo "$1: the best model differs from 1 process's"; fail=1; return; }
    echo "$1: the bits of 1 process"
}

train ref 1 6
echo "1 process of 6 ranks: $(losses "$tmp/ref.jsonl")"
train n2 2 3 --events "$tmp/n2.events.jsonl"
train n3 3 2
train n3gpu 3 2 --grad-route gpu
same n2
same n3
same n3gpu
grep -q "data-parallel ranks" "$tmp/n2.err" 2> /dev/null &&
    grep -q "node 1" "$tmp/n2.err" && { echo "n2: node 1 printed node 0's information"; fail=1; }

# the nodes' logs on node 0's clock: the invariants hold across them; a backward of node 0 that
# ends after node 1's update of its group is caught
if [ -s "$tmp/n2.events.jsonl" ] && [ -s "$tmp/n2.events.jsonl.node1" ]; then
    "$py" "$top/tools/check_invariants.py" "$tmp/n2.events.jsonl" "$tmp/n2.events.jsonl.node1" \
        > "$tmp/inv.out" 2>&1 || { echo "invariants across the nodes:"; cat "$tmp/inv.out"; fail=1; }
    echo "n2's logs: $(tail -n 1 "$tmp/inv.out")"
    "$py" - "$tmp/n2.events.jsonl" "$tmp/late.jsonl" <<'PYEOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
bwd = [e for e in ev if e["phase"] == "bwd" and e["step"] == 1 and e["group"] == 1]
last = max(bwd, key=lambda e: e["end_us"])
last["end_us"] = max(e["end_us"] for e in ev) + 1.0
with open(sys.argv[2], "w") as f:
    f.writelines(json.dumps(e) + "\n" for e in ev)
PYEOF
    "$py" "$top/tools/check_invariants.py" "$tmp/late.jsonl" "$tmp/n2.events.jsonl.node1" \
        > "$tmp/late.out" 2>&1
    grep -q "invariant 2 violated: .* on node 1 starts .* on node 0 ends" "$tmp/late.out" ||
        { echo "a late backward of node 0 not caught:"; cat "$tmp/late.out"; fail=1; }
else
    echo "n2: no event logs for both nodes"; fail=1
fi

# a 2-process checkpoint resumed at 1 and at 3 processes
train half 2 3 --steps 2
for np in 1 3; do
    cp -r "$tmp/half" "$tmp/h$np" && cp "$tmp/half.jsonl" "$tmp/h$np.jsonl"
    train "h$np" "$np" $((6 / np))
    grep -q "resuming from .*step-00000002" "$tmp/h$np.err" ||
        { echo "h$np: not resumed from the step-2 checkpoint"; cat "$tmp/h$np.err"; fail=1; }
    same "h$np"
done

# a kill of node 1: the launcher ends the run and names it; the last checkpoint resumes
mpi 2 "$bin" train "$tmp/r.yaml" --steps 40 --checkpoint-every 1 --eval-every 20 -q --sched eager --ranks 3 \
    --output "$tmp/k" > "$tmp/k.out" 2> "$tmp/k.err" &
launcher=$!
i=0
until ls "$tmp/k/checkpoints" 2> /dev/null | grep -q step-00000002 || [ $i -ge 600 ]; do
    sleep 0.1
    i=$((i + 1))
done
victim=
for p in $(pgrep -f "$tmp/k"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
done
if [ -z "$victim" ]; then
    echo "kill: node 1's process not found"; cat "$tmp/k.err"; fail=1; kill "$launcher"
else
    kill -9 "$victim"
fi
wait "$launcher"
rc=$?
i=0 # the launcher's processes gone (the run directory's lock with them)
while pgrep -f -- "--output $tmp/k" > /dev/null && [ $i -lt 300 ]; do
    sleep 0.1
    i=$((i + 1))
done
echo "kill of node 1: the launcher exited $rc: $(grep -m1 -i 'signal 9\|killed' "$tmp/k.err")"
[ "$rc" != 0 ] && grep -qi "rank 1 .*signal 9\|rank 1 .*killed" "$tmp/k.err" ||
    { echo "kill: not ended with the process named"; cat "$tmp/k.err"; fail=1; }
"$bin" train "$tmp/r.yaml" --steps 40 --checkpoint-every 1 --eval-every 20 -q --sched eager --ranks 6 \
    --output "$tmp/k" > /dev/null 2> "$tmp/k2.err" ||
    { echo "kill: the last checkpoint did not resume"; cat "$tmp/k2.err"; fail=1; }
grep -q "resuming from .*step-0000000" "$tmp/k2.err" ||
    { echo "kill: the resume found no checkpoint"; cat "$tmp/k2.err"; fail=1; }

# a stop signal to node 1 alone while the run starts: every node stops at the same step (before
# the first, or soon after), node 0 checkpoints, all exit 0
mpi 2 "$bin" train "$tmp/r.yaml" --steps 40 --checkpoint-every 20 --eval-every 20 --sched eager \
    --ranks 3 --output "$tmp/s" > /dev/null 2> "$tmp/s.err" &
launcher=$!
i=0 # node 0 has started StarPU: node 1 is past the start's checks, its handlers in place
until grep -q "StarPU 1" "$tmp/s.err" 2> /dev/null || [ $i -ge 600 ]; do
    sleep 0.1
    i=$((i + 1))
done
for p in $(pgrep -f -- "--output $tmp/s"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' &&
        kill -USR1 "$p"
done
i=0
while kill -0 "$launcher" 2> /dev/null && [ $i -lt 1200 ]; do
    sleep 0.1
    i=$((i + 1))
done
if kill -0 "$launcher" 2> /dev/null; then
    echo "stop at the start: the run did not stop in 120 s"; kill "$launcher"; fail=1
fi
wait "$launcher"
rc=$?
stop=$(grep -o "stopped by a signal to another node at step [0-9]*" "$tmp/s.err")
[ "$rc" = 0 ] && [ -n "$stop" ] && ls "$tmp/s/checkpoints" | grep -q sdpckpt ||
    { echo "stop at the start: exit $rc"; cat "$tmp/s.err"; fail=1; }
echo "a signal to node 1 at the start: exit $rc, node 0 $stop"

# refusals at the start: exit 2, nothing written
refused() { # name pattern -- command...
    name=$1 pat=$2
    shift 3
    "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
    rc=$?
    [ "$rc" = 2 ] && grep -Eq "$pat" "$tmp/$name.err" && [ ! -e "$tmp/$name" ] ||
        { echo "$name: exit $rc"; cat "$tmp/$name.err"; fail=1; return; }
    echo "$name: refused ($(grep -E -m1 "$pat" "$tmp/$name.err"))"
}
refused args "process 1 of 2 \\(on .*\\) runs with another recipe or arguments" -- \
    mpirun -np 1 "$bin" train "$tmp/r.yaml" $args --ranks 3 --output "$tmp/args" : \
    -np 1 "$bin" train "$tmp/r.yaml" $args --ranks 3 --output "$tmp/args" --steps 3
cp "$bin" "$tmp/other-slidedp" && printf 'x' >> "$tmp/other-slidedp"
refused binary "process 1 of 2 \\(on .*\\) runs with another slidedp binary" -- \
    mpirun -np 1 "$bin" train "$tmp/r.yaml" $args --ranks 3 --output "$tmp/binary" : \
    -np 1 "$tmp/other-slidedp" train "$tmp/r.yaml" $args --ranks 3 --output "$tmp/binary"
refused divide "6 micro-batches a step .* do not divide among 4 nodes of 1 rank" -- \
    mpi 4 "$bin" train "$tmp/r.yaml" $args --output "$tmp/divide"
refused plot "slidedp plot runs as one process" -- mpi 2 "$bin" plot "$tmp/ref.jsonl" -o "$tmp/plot"
# an MPI without MPI_THREAD_MULTIPLE: Open MPI gives every level asked of it, so the level a site
# pins with OMPI_MPI_THREAD_LEVEL (1: MPI_THREAD_FUNNELED), which slidedp asks for, is the one
# the library then provides; each process names itself and its host
host=$(uname -n)
refused thread "process [01] of 2 \\($host\\): the MPI library gives MPI_THREAD_FUNNELED" -- \
    mpi 2 -x OMPI_MPI_THREAD_LEVEL=1 "$bin" train "$tmp/r.yaml" $args --ranks 3 --output "$tmp/thread"
finish
