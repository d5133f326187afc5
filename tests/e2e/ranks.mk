# SPDX-License-Identifier: MIT
# tests/e2e/: data-parallel ranks on CPU workers (--ranks R), chunk sweep, backward lookahead,
# the bf16 gradient return, the NCCL reduction (two GPUs or more, else skipped), slidedp bench,
# the early update of the tied embedding, the working copies off the host, the host lookup
TESTS += tests/e2e/test_e2e_ranks.sh
EXTRA_DIST += tests/e2e/test_e2e_ranks.sh
TESTS += tests/e2e/test_e2e_sweep.sh
EXTRA_DIST += tests/e2e/test_e2e_sweep.sh
TESTS += tests/e2e/test_e2e_lookahead.sh
EXTRA_DIST += tests/e2e/test_e2e_lookahead.sh
# the recipe's plan: section and train --print-plan
TESTS += tests/e2e/test_e2e_plan.sh
EXTRA_DIST += tests/e2e/test_e2e_plan.sh
TESTS += tests/e2e/test_e2e_grad_dtype.sh
EXTRA_DIST += tests/e2e/test_e2e_grad_dtype.sh
TESTS += tests/e2e/test_e2e_nccl.sh
EXTRA_DIST += tests/e2e/test_e2e_nccl.sh
TESTS += tests/e2e/test_e2e_bench.sh
EXTRA_DIST += tests/e2e/test_e2e_bench.sh
TESTS += tests/e2e/test_e2e_embed_early.sh
EXTRA_DIST += tests/e2e/test_e2e_embed_early.sh
# the early MLP update: the same bits, its pack and marks in the log, the checker on broken logs
TESTS += tests/e2e/test_e2e_mlp_early.sh
EXTRA_DIST += tests/e2e/test_e2e_mlp_early.sh
TESTS += tests/e2e/test_e2e_work_home.sh
EXTRA_DIST += tests/e2e/test_e2e_work_home.sh
TESTS += tests/e2e/test_e2e_gpu_update.sh
EXTRA_DIST += tests/e2e/test_e2e_gpu_update.sh
TESTS += tests/e2e/test_e2e_gpu_update_gpu.sh
EXTRA_DIST += tests/e2e/test_e2e_gpu_update_gpu.sh
# the forward's embedding lookup on the host: the same bits, the lookups' workers, the head's fetch
TESTS += tests/e2e/test_e2e_embed_lookup.sh
EXTRA_DIST += tests/e2e/test_e2e_embed_lookup.sh
TESTS += tests/e2e/test_e2e_embed_lookup_gpu.sh
EXTRA_DIST += tests/e2e/test_e2e_embed_lookup_gpu.sh
# the bounded window: its paths on CPU workers, and on a GPU under a limit (exit 77 without one)
TESTS += tests/e2e/test_e2e_window_cpu.sh tests/e2e/test_e2e_window_gpu.sh
EXTRA_DIST += tests/e2e/test_e2e_window_cpu.sh tests/e2e/test_e2e_window_gpu.sh
# the chunk pipeline and the lanes on a GPU: same bits, lanes filled, bus bytes per step
TESTS += tests/e2e/test_e2e_lanes_gpu.sh
EXTRA_DIST += tests/e2e/test_e2e_lanes_gpu.sh
# chunk sizes and the unchunked ablation give the same bits (test_e2e_chunks.sh)
TESTS += tests/e2e/test_e2e_chunks.sh
EXTRA_DIST += tests/e2e/test_e2e_chunks.sh
# several nodes through StarPU-MPI (mpirun on this machine): the bits of one node, resume at
# another node count, a killed process, the start's refusals (skipped without StarPU-MPI)
TESTS += tests/e2e/test_e2e_nodes.sh
EXTRA_DIST += tests/e2e/test_e2e_nodes.sh
# two processes on one host of two GPUs: the GPU route's gradient between them through NCCL, the
# bits of one process of 2 ranks; a process with another GPU count refused (exit 77 without)
TESTS += tests/e2e/test_e2e_nodes_nccl.sh
EXTRA_DIST += tests/e2e/test_e2e_nodes_nccl.sh
# slidedp calibrate under mpirun -np 2: the link between the nodes in the machine file
TESTS += tests/e2e/test_e2e_calibrate_nodes.sh
EXTRA_DIST += tests/e2e/test_e2e_calibrate_nodes.sh
# slidedp plan --nodes: the step-time model's link between nodes (no MPI)
TESTS += tests/e2e/test_e2e_plan_nodes.sh
EXTRA_DIST += tests/e2e/test_e2e_plan_nodes.sh
