# tests/slurm/: the sbatch templates of slurm/ through a signal and a requeue, on a private single-node
# Slurm that the test starts and stops itself (root only; skipped elsewhere)
TESTS += tests/slurm/test_slurm_requeue.sh
EXTRA_DIST += tests/slurm/test_slurm_requeue.sh tests/slurm/start-slurm.sh tests/slurm/stop-slurm.sh \
	tests/slurm/slurm.conf.in slurm/sbatch-one-gpu.sh slurm/sbatch-node.sh slurm/README.md \
	tools/apt-install-no-services.sh
