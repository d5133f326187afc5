#!/bin/bash
# SPDX-License-Identifier: MIT
# The body of slurm/sbatch-one-gpu.sh and slurm/sbatch-node.sh, sourced by both after their #SBATCH
# header: the run directory, the launch of `slidedp train` with the signals passed on, and the
# decision to requeue.  Not a job script itself.  Tested by tests/slurm/test_slurm_requeue.sh.
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

launch=${SLIDEDP_LAUNCH:-}
[ -n "$launch" ] || { command -v srun > /dev/null 2>&1 && launch=srun || launch=direct; }

# Signals for this shell go on to the training process: SIGUSR1 is the time-limit warning asked for
# above; SIGTERM comes from scancel, preemption or the time limit itself.
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
    [ -n "$pid" ] && kill -"$1" "$pid" 2> /dev/null
    echo "slidedp-sbatch: SIG$1 passed on to the training run"
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

if [ "$launch" = srun ]; then
    # one task with every CPU of the job (a whole-node job sets no --cpus-per-task)
    srun --ntasks=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-${SLURM_CPUS_ON_NODE:-1}}" \
        "$slidedp" train "$recipe" "$@" &
else
    "$slidedp" train "$recipe" "$@" &
fi
pid=$!
[ -n "$got" ] && kill -"$got" "$pid" 2> /dev/null
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
