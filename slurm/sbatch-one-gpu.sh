#!/bin/bash
# SPDX-License-Identifier: MIT
# One SlideDP training run on one GPU of a shared node, restartable: 120 s before the time limit Slurm
# sends SIGUSR1 to this script, which passes it on; slidedp checkpoints at the next step boundary and
# exits 0, and this script requeues the job, which resumes from the checkpoint under the same job id.
#   usage: sbatch [sbatch options] slurm/sbatch-one-gpu.sh RECIPE.yaml [slidedp train options]
# Options on the sbatch command line override the #SBATCH lines below (see slurm/README.md).
#SBATCH --job-name=slidedp
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gres=gpu:1
# CPU workers: slidedp takes SLURM_CPUS_PER_TASK when train.cpus is 0
#SBATCH --cpus-per-task=16
# host RAM holds fp32 master weights and both Adam moments: 16 bytes per parameter, plus activations
#SBATCH --mem=128G
#SBATCH --time=24:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
#
# Environment: SLIDEDP (the binary, default `slidedp` on PATH), SLIDEDP_LAUNCH (srun or direct; default
# srun when it exists), SLIDEDP_MAX_RESTARTS (give up after this many requeues, default 50).
# ---- the body below is the same in sbatch-one-gpu.sh, sbatch-node.sh and sbatch-nodes.sh ----
# sbatch runs a copy of the script from its spool directory, so common.sh is looked for next to the
# submitted script (scontrol's Command=), then next to $0, then in SLURM_SUBMIT_DIR/slurm;
# SLIDEDP_SLURM_DIR overrides the search.
here=${SLIDEDP_SLURM_DIR:-}
if [ -z "$here" ] && [ -n "${SLURM_JOB_ID:-}" ]; then
    cmd=$(scontrol show job "$SLURM_JOB_ID" 2> /dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
    here=$(dirname "${cmd:-.}")
fi
for d in ${here:+"$here"} "$(dirname "$0")" "${SLURM_SUBMIT_DIR:-.}/slurm"; do
    [ -f "$d/common.sh" ] && { here=$d; break; }
done
[ -f "$here/common.sh" ] || {
    echo "slidedp-sbatch: cannot find slurm/common.sh; set SLIDEDP_SLURM_DIR to the slurm directory"
    exit 1
}
# shellcheck source=slurm/common.sh
. "$here/common.sh"
