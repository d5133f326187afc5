#!/bin/bash
# SPDX-License-Identifier: MIT
# The body of slurm/sbatch-one-gpu.sh, slurm/sbatch-node.sh and slurm/sbatch-nodes.sh, sourced by each
# after its #SBATCH header: the run directory, the launch of `slidedp train` (one process per task) with
# the signals passed on, and the decision to requeue.  Not a job script itself.  Tested by
# tests/slurm/test_slurm_requeue.sh and tests/slurm/test_slurm_nodes.sh.
set -u

recipe=${1:?usage: sbatch [sbatch options] SCRIPT RECIPE.yaml [slidedp train options]}
shift
slidedp=${SLIDEDP:-slidedp}
job=${SLURM_JOB_ID:?this script runs under sbatch}
restarts=${SLURM_RESTART_COUNT:-0}

# The run directory, where checkpoints and COMPLETE go: --output DIR when given, else
# runs/<recipe>-<job id>, passed explicitly so that a requeued run finds it again.
out=
prev=
for a in "$@"; do
    [ "$prev" = --output ] && out=$a
    case "$a" in --output=*) out=${a#--output=} ;; esac
    prev=$a
done
if [ -z "$out" ]; then
    out=runs/$(basename "$recipe" .yaml)-$job
    set -- "$@" --output "$out"
fi
echo "slidedp-sbatch: job $job start $((restarts + 1)) on $(hostname -s) at $(date -Is); run directory $out"

# One slidedp process per task: one task (sbatch-one-gpu.sh, sbatch-node.sh), or one per node
# (sbatch-nodes.sh), which find each other through MPI (StarPU-MPI; docs/slurm.md).
tasks=${SLURM_NTASKS:-$((${SLURM_JOB_NUM_NODES:-1} * ${SLURM_NTASKS_PER_NODE:-1}))}
cpus=${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-1}}
launch=${SLIDEDP_LAUNCH:-}
if [ -z "$launch" ]; then
    if ! command -v srun > /dev/null 2>&1; then
        launch=direct
    elif [ "$tasks" -le 1 ] || srun --mpi=list 2>&1 | grep -qw pmix; then
        launch=srun
    else # Slurm without its PMIx plugin: OpenMPI's mpirun, which starts its daemons through Slurm
        launch=mpirun
    fi
fi
case "$launch" in
srun | mpirun | direct) ;;
*) echo "slidedp-sbatch: SLIDEDP_LAUNCH=$launch: expected srun, mpirun or direct"; exit 1 ;;
esac
if [ "$tasks" -gt 1 ] && [ "$launch" = direct ]; then
    echo "slidedp-sbatch: this job has $tasks tasks, one slidedp process each, and SLIDEDP_LAUNCH=direct" \
        "starts one; use srun or mpirun"
    exit 1
fi
if ! command -v "$launch" > /dev/null 2>&1 && [ "$launch" != direct ]; then
    echo "slidedp-sbatch: SLIDEDP_LAUNCH=$launch, but there is no $launch on PATH"
    exit 1
fi
[ "$tasks" -gt 1 ] && echo "slidedp-sbatch: $tasks processes (one per task) started by $launch"

# Signals for this shell go on to the training processes: SIGUSR1 is the time-limit warning asked for
# above; SIGTERM comes from scancel, preemption or the time limit itself.  The launcher gets SIGUSR1
# for either (slidedp stops alike at both): srun turns a SIGTERM into SIGKILL for its tasks, mpirun
# into SIGTERM then SIGKILL a few seconds later, before a checkpoint is written; both pass SIGUSR1 on
# to every process.
pid=
got=
usr1=0
term=0
# shellcheck disable=SC2317 # called by the traps
forward()
{
    got=$1
    [ "$1" = USR1 ] && usr1=1
    [ "$1" = TERM ] && term=1
    [ -n "$pid" ] && kill -USR1 "$pid" 2> /dev/null
    if [ "$1" = USR1 ]; then
        echo "slidedp-sbatch: SIGUSR1 passed on to the training run"
    else
        echo "slidedp-sbatch: SIG$1 passed on to the training run as SIGUSR1"
    fi
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

case "$launch.$tasks" in
srun.1) # one task with every CPU of the job (a whole-node job sets no --cpus-per-task)
    srun --ntasks=1 --cpus-per-task="$cpus" "$slidedp" train "$recipe" "$@" & ;;
srun.*) # one task per node with every CPU of its node; a task that fails ends the others
    srun --mpi=pmix --ntasks="$tasks" --cpus-per-task="$cpus" --kill-on-bad-exit=1 \
        "$slidedp" train "$recipe" "$@" & ;;
mpirun.*) # one process per task of the job; StarPU places its own workers on the node's cores
    mpirun -np "$tasks" --bind-to none "$slidedp" train "$recipe" "$@" & ;;
*) "$slidedp" train "$recipe" "$@" & ;;
esac
pid=$!
[ -n "$got" ] && kill -USR1 "$pid" 2> /dev/null
# wait returns early (status > 128) whenever a trapped signal arrives: wait again until the run is over
while :; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2> /dev/null || break
done
if [ "$rc" -gt 128 ]; then
    wait "$pid" 2> /dev/null
    r=$?
    [ $r -eq 127 ] || rc=$r
fi

if [ -f "$out/COMPLETE" ]; then
    echo "slidedp-sbatch: training complete: $(cat "$out/COMPLETE")"
    exit 0
fi
if [ "$rc" -ne 0 ]; then
    echo "slidedp-sbatch: slidedp exited with status $rc; not requeueing a failed run"
    exit "$rc"
fi
# Requeue only after the time-limit warning.  After SIGTERM the job was cancelled (stay cancelled),
# preempted (Slurm requeues it itself) or is past its limit; the checkpoint is there in every case.
if [ "$term" = 1 ] || [ "$usr1" = 0 ]; then
    echo "slidedp-sbatch: stopped before the last step, not by the time-limit warning: not requeueing;" \
        "to resume, submit again with --output $out (or scontrol requeue $job)"
    exit 0
fi
if [ "$restarts" -ge "${SLIDEDP_MAX_RESTARTS:-50}" ]; then
    echo "slidedp-sbatch: not complete after $restarts restarts; giving up (SLIDEDP_MAX_RESTARTS)"
    exit 1
fi
echo "slidedp-sbatch: stopped before the last step; requeueing job $job to resume from $out/checkpoints"
scontrol requeue "$job" || { echo "slidedp-sbatch: scontrol requeue $job failed"; exit 1; }
exit 0
