# tests/slurm/: the sbatch templates of slurm/ through a signal and a requeue, on a private Slurm of one
# node, or of two (a network namespace for the second), that the tests start and stop themselves (root
# only; skipped elsewhere; test_slurm_nodes.sh also without StarPU-MPI)
TESTS += tests/slurm/test_slurm_requeue.sh tests/slurm/test_slurm_nodes.sh
EXTRA_DIST += tests/slurm/test_slurm_requeue.sh tests/slurm/test_slurm_nodes.sh tests/slurm/start-slurm.sh \
	tests/slurm/stop-slurm.sh tests/slurm/jobs.sh tests/slurm/slurm.conf.in slurm/common.sh slurm/sbatch-one-gpu.sh \
	slurm/sbatch-node.sh slurm/sbatch-nodes.sh slurm/README.md \
	tools/apt-install-no-services.sh
