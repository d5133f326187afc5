#!/bin/sh
# SPDX-License-Identifier: MIT
# Several nodes under Slurm, end to end: on a private Slurm of two nodes (start-slurm.sh DIR 2: this host,
# and a network namespace of it with a host name of its own), slurm/sbatch-nodes.sh trains a tiny CPU
# recipe as 2 tasks, one slidedp process per node of 3 CPU ranks each.  Mid-run the batch script gets
# SIGUSR1, as Slurm sends it before a time limit: both processes must stop at one step with a checkpoint,
# the job requeue itself, start again under the same job id, resume and finish.  The job runs twice: its
# processes started by srun --mpi=pmix (the template's own choice where Slurm has its PMIx plugin), then
# by OpenMPI's mpirun inside the allocation (its choice elsewhere; SLIDEDP_LAUNCH=mpirun here).
# SDP_SLURM_LAUNCH="srun" (or "mpirun") runs one of them.
# Oracle: an uninterrupted run of 1 process of 6 ranks without Slurm (the gradient goes across the nodes
# in rank order, so 2 x 3 ranks give its bits): the same "loss" and "grad_norm" in every metrics line,
# the same COMPLETE and the same final weights.
# Where a network namespace cannot be made (or SDP_SLURM_NODES=1), the cluster has ONE node entry and
# the two tasks run on it, as the output says: the launch, signal and requeue are the same, the network
# between the nodes is not tested.
# Exit 77 when Slurm cannot run on this machine or slidedp is built without StarPU-MPI.
set -u
top=$(cd "${top_srcdir:-.}" && pwd)
build=$(cd "${top_builddir:-.}" && pwd)
bin=$build/slidedp
steps=${SDP_SLURM_STEPS:-10}
[ -x "$bin" ] || { echo "no slidedp binary at $bin"; echo FAIL; exit 1; }
if ! grep -q '^#define SDP_HAVE_MPI 1' "$build/config.h" 2> /dev/null; then
    echo "slidedp built without StarPU-MPI (tools/setup-debian.sh builds it; ./configure finds it): SKIP"
    exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sdp-slurm-nodes.XXXXXX")
# munged (started by start-slurm.sh) wants the directories above its socket searchable by all
chmod 711 "$tmp"
mkdir "$tmp/slurm"
cleanup()
{
    "$top/tests/slurm/stop-slurm.sh" "$tmp/slurm"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail()
{
    echo "$*"
    for f in "$tmp/job-${launch:-}.out" "$tmp/slurm/slurmctld.log" "$tmp"/slurm/slurmd-*.log; do
        [ -s "$f" ] && { echo "--- last lines of $f"; tail -n 25 "$f"; }
    done
    echo FAIL
    exit 1
}

# the multi-node template must run the code tested by test_slurm_requeue.sh: the same body
body()
{
    sed -n '/^# ---- the body below is the same/,$p' "$1"
}
body "$top/slurm/sbatch-node.sh" > "$tmp/node.body"
body "$top/slurm/sbatch-nodes.sh" > "$tmp/nodes.body"
if [ ! -s "$tmp/node.body" ] || ! cmp -s "$tmp/node.body" "$tmp/nodes.body"; then
    fail "slurm/sbatch-nodes.sh and slurm/sbatch-node.sh differ below their #SBATCH headers"
fi

# ---- the Slurm cluster first: skip early when it cannot run here ----
"$top/tests/slurm/start-slurm.sh" "$tmp/slurm" "${SDP_SLURM_NODES:-2}"
rc=$?
[ $rc -eq 77 ] && { echo SKIP; exit 77; }
[ $rc -eq 0 ] || fail "start-slurm.sh failed with status $rc"
SLURM_CONF=$tmp/slurm/slurm.conf
export SLURM_CONF
nodes=$(cat "$tmp/slurm/nodes")
if [ "$nodes" = 2 ]; then
    shape="--nodes=2 --ntasks-per-node=1"
else
    shape="--nodes=1 --ntasks-per-node=2"
    echo "ONE node entry (see above): the job's two tasks share it; the network between nodes is not tested"
fi

# 6 micro-batches of 1 sequence a step: one per rank of 2 x 3 or of 1 x 6
sed -e "s#^  train: .*#  train: $top/data/kjv/val.tok#" -e 's/^\( *global:\).*/\1 6/' \
    -e 's/^\( *micro:\).*/\1 1/' "$top/tests/e2e/data/micro-qwen3.yaml" > "$tmp/r.yaml"
args="--steps $steps --checkpoint-every 2 -q --sched eager"

# ---- the oracle: 1 process of 6 ranks, uninterrupted, without Slurm ----
# shellcheck disable=SC2086 # $args: one option per word
"$bin" train "$tmp/r.yaml" $args --ranks 6 --output "$tmp/ref" --metrics "$tmp/ref.jsonl" \
    > "$tmp/ref.out" 2>&1 || { tail -n 20 "$tmp/ref.out"; fail "the reference run failed"; }
[ -s "$tmp/ref/COMPLETE" ] || fail "the reference run wrote no $tmp/ref/COMPLETE"
echo "reference run, 1 process of 6 ranks: $(cat "$tmp/ref/COMPLETE")"

# ---- the job: 2 tasks of 3 ranks; the template's GPU and memory requests overridden for this host ----
# (a CPU of Slurm's a task, and --cpus 3: a CPU worker for each rank, more than this host's cores)
# mpirun as root, with more ranks than cores, unbound; OpenMPI's shared-memory transport without
# cross-process copies, which containers often forbid
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
SLIDEDP=$bin
export SLIDEDP

# shellcheck source=tests/slurm/jobs.sh
. "$top/tests/slurm/jobs.sh"

# losses FILE: the "loss" and "grad_norm" fields of a metrics file, on one line
losses()
{
    grep -o '"loss":[^,]*,\|"grad_norm":[^,]*' "$1" | tr '\n' ' '
}

# job_run: submit the job for $launch, SIGUSR1 after its 2nd step, wait until it is complete; sets jid
# and restarts.  srun is the template's own choice here (this Slurm has PMIx): SLIDEDP_LAUNCH unset
job_run()
{
    if [ "$launch" = srun ]; then
        unset SLIDEDP_LAUNCH
    else
        SLIDEDP_LAUNCH=$launch
        export SLIDEDP_LAUNCH
    fi
    # shellcheck disable=SC2086 # $shape, $args: one option per word
    jid=$(sbatch --parsable --job-name=sdp-nodes $shape --gres=none --cpus-per-task=1 --mem=1G \
        --time=10:00 --chdir="$tmp" --output="$tmp/job-$launch.out" "$top/slurm/sbatch-nodes.sh" \
        "$tmp/r.yaml" $args --ranks 3 --cpus 3 --output "$tmp/run-$launch" \
        --metrics "$tmp/job-$launch.jsonl") || fail "sbatch failed"
    echo "submitted job $jid ($shape, SLIDEDP_LAUNCH=${SLIDEDP_LAUNCH:-unset})"
    metrics=$tmp/job-$launch.jsonl
    wait_steps 2 180
    echo "job $jid runs on $(scontrol -o show job "$jid" | sed -n 's/.* NodeList=\([^ ]*\).*/\1/p')"
    # the time-limit warning: SIGUSR1 to the batch shell only
    scancel --signal=USR1 --batch "$jid" || fail "scancel --signal=USR1 --batch $jid failed"
    echo "SIGUSR1 sent after step $(job_steps)"
    # the job must stop, requeue itself, run again and complete
    wait_requeued 300
}

# job_check: what happened, from the job's own output (appended across restarts), and its result
job_check()
{
    o=$tmp/job-$launch.out
    starts=$(grep -c "^slidedp-sbatch: job $jid start" "$o")
    launched=$(grep -c "^slidedp-sbatch: 2 processes (one per task) started by $launch" "$o")
    over=$(grep -c "2 nodes (one process each) of 3 ranks" "$o")
    stopped=$(sed -n 's/.*stopped by signal [0-9]* at step \([0-9]*\).*/\1/p' "$o" | head -n 1)
    resumed=$(sed -n 's/.*resuming from .*: step \([0-9]*\) of.*/\1/p' "$o" | head -n 1)
    echo "batch script starts: $starts, each starting 2 processes by $launch: $launched, each training" \
        "over 2 nodes: $over; stopped at step ${stopped:-none}; resumed at step ${resumed:-none}"
    if [ "$starts" -ne 2 ] || [ "$restarts" -ne 1 ]; then
        fail "expected 2 starts and Restarts=1"
    fi
    if [ "$launched" -ne 2 ] || [ "$over" -ne 2 ]; then
        fail "expected 2 processes of 3 ranks at both starts"
    fi
    grep -q "SIGUSR1 passed on" "$o" || fail "the batch script did not pass SIGUSR1 on"
    if [ -z "$stopped" ] || [ "$stopped" -lt 2 ] || [ "$stopped" -ge "$steps" ]; then
        fail "the first run did not stop by signal between step 2 and step $steps"
    fi
    [ "$resumed" = "$stopped" ] || fail "the second run resumed at step ${resumed:-none}, not $stopped"
    # the result must be the uninterrupted 1-process run's, bit for bit
    [ -s "$tmp/run-$launch/COMPLETE" ] || fail "the job wrote no COMPLETE"
    echo "requeued job: $(cat "$tmp/run-$launch/COMPLETE"); losses and norms:"
    echo "  $(losses "$tmp/job-$launch.jsonl")"
    [ "$(wc -l < "$tmp/job-$launch.jsonl")" -eq "$steps" ] || fail "the job's metrics have not $steps lines"
    [ "$(losses "$tmp/job-$launch.jsonl")" = "$(losses "$tmp/ref.jsonl")" ] ||
        fail "the job's losses or gradient norms differ from the 1-process run's"
    cmp -s "$tmp/ref/COMPLETE" "$tmp/run-$launch/COMPLETE" || fail "COMPLETE differs from the 1-process run's"
    cmp -s "$tmp/ref/final/model.safetensors" "$tmp/run-$launch/final/model.safetensors" ||
        fail "the final weights differ from the 1-process run's"
    echo "$launch: the requeued job has the bits of 1 process of 6 ranks"
}

echo "1 process of 6 ranks, losses and norms:"
echo "  $(losses "$tmp/ref.jsonl")"
for launch in ${SDP_SLURM_LAUNCH:-srun mpirun}; do
    if [ "$launch" = srun ] && ! srun --mpi=list 2>&1 | grep -qw pmix; then
        echo "srun: this Slurm has no PMIx plugin (srun --mpi=list), so the template uses mpirun; srun" \
            "not tested"
        continue
    fi
    job_run
    job_check
done
echo PASS
