#!/bin/bash
# SPDX-License-Identifier: MIT
# One SlideDP training run over several whole nodes, one slidedp process per node (docs/slurm.md,
# "Several nodes"): every process trains its node's share of each step on its node's GPUs, and StarPU-MPI
# carries the gradient between the nodes.  The processes start through `srun --mpi=pmix` (Slurm's PMIx
# plugin; without it, OpenMPI's mpirun inside the allocation), and the run is restartable as with
# sbatch-node.sh: 120 s before the time limit Slurm sends SIGUSR1 to this script, which passes it on to
# every process; they checkpoint at the same step boundary and exit 0, and this script requeues the job,
# which resumes from the checkpoint under the same job id.  Node 0's process owns the run directory, so
# it must be on a file system every node sees.
#   usage: sbatch [sbatch options] slurm/sbatch-nodes.sh RECIPE.yaml [slidedp train options]
# Options on the sbatch command line override the #SBATCH lines below (see slurm/README.md), e.g.
# sbatch --nodes=4 for four nodes.  batch.global / batch.micro must be a multiple of nodes x GPUs a node.
#SBATCH --job-name=slidedp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
# each node's GPUs: set N to the number your nodes have (sbatch --gres=gpu:N overrides it); every node
# must have as many
#SBATCH --gres=gpu:8
# all of each node's memory: every node holds its own host copy of the fp32 master weights and both Adam
# moments
#SBATCH --mem=0
#SBATCH --time=24:00:00
#SBATCH --signal=B:USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
#
# Environment: SLIDEDP (the binary, default `slidedp` on PATH; the same file on every node),
# SLIDEDP_LAUNCH (srun or mpirun; default srun when Slurm has its PMIx plugin, `srun --mpi=list`),
# SLIDEDP_MAX_RESTARTS (give up after this many requeues, default 50).
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
