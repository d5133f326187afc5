# tests/e2e/: whole runs through StarPU against Hugging Face references and end-to-end CLI checks
check_PROGRAMS += tests/e2e/test_e2e_hf_parity
TESTS += tests/e2e/test_e2e_hf_parity
tests_e2e_test_e2e_hf_parity_SOURCES = tests/e2e/test_e2e_hf_parity.c tests/lib/sdp_test.h
# the same test with the compute on the GPU (exit 77 without one)
check_PROGRAMS += tests/e2e/test_e2e_hf_parity_gpu
TESTS += tests/e2e/test_e2e_hf_parity_gpu
tests_e2e_test_e2e_hf_parity_gpu_SOURCES = tests/e2e/test_e2e_hf_parity.c tests/lib/sdp_test.h
tests_e2e_test_e2e_hf_parity_gpu_CPPFLAGS = $(AM_CPPFLAGS) -DSDP_TEST_GPU
EXTRA_DIST += tests/lib/e2e.sh tests/lib/run-test.sh
TESTS += tests/ref/check_refs.py tests/e2e/test_e2e_train_tiny.sh tests/e2e/test_e2e_policies.sh \
	tests/e2e/test_e2e_resume.sh tests/e2e/test_e2e_resume_ranks.sh tests/e2e/test_e2e_roundpipe.sh tests/e2e/test_e2e_roundpipe_flight.sh tests/e2e/test_e2e_roundpipe_lpt.sh tests/e2e/test_e2e_simulate.sh tests/e2e/test_e2e_sim_routes.sh tests/e2e/test_e2e_nan.sh \
	tests/e2e/test_e2e_bad_input.sh
EXTRA_DIST += tests/ref tests/e2e/test_e2e_train_tiny.sh tests/e2e/test_e2e_policies.sh tests/e2e/test_e2e_resume.sh tests/e2e/test_e2e_resume_ranks.sh tests/e2e/test_e2e_roundpipe.sh tests/e2e/test_e2e_roundpipe_flight.sh tests/e2e/test_e2e_roundpipe_lpt.sh tests/e2e/test_e2e_simulate.sh tests/e2e/test_e2e_sim_routes.sh tests/e2e/test_e2e_nan.sh \
	tests/e2e/test_e2e_bad_input.sh tests/e2e/data
# RUN/final with the tokenizer and generation_config.json
TESTS += tests/e2e/test_e2e_final_dir.sh
EXTRA_DIST += tests/e2e/test_e2e_final_dir.sh
# instruction data with batches without a target (test_e2e_sft_masked.sh)
TESTS += tests/e2e/test_e2e_sft_masked.sh
EXTRA_DIST += tests/e2e/test_e2e_sft_masked.sh
# the validation loss and the best model (test_e2e_val.sh)
TESTS += tests/e2e/test_e2e_val.sh
EXTRA_DIST += tests/e2e/test_e2e_val.sh
# careless options and inputs: --cpus beyond the cores, NaN weights, absurd shapes, message forms
TESTS += tests/e2e/test_e2e_careless.sh
EXTRA_DIST += tests/e2e/test_e2e_careless.sh
# the run directory: one run, its lock, corrupt checkpoints
TESTS += tests/e2e/test_e2e_rundir.sh
EXTRA_DIST += tests/e2e/test_e2e_rundir.sh
# the stop signals: SIGTERM, SIGINT, twice, before the first step
TESTS += tests/e2e/test_e2e_signals.sh
EXTRA_DIST += tests/e2e/test_e2e_signals.sh
# outputs against inputs (train, tokenize, export)
TESTS += tests/e2e/test_e2e_paths.sh
EXTRA_DIST += tests/e2e/test_e2e_paths.sh
# slidedp calibrate: the machine file of this machine, and refused outputs
TESTS += tests/e2e/test_e2e_calibrate.sh
EXTRA_DIST += tests/e2e/test_e2e_calibrate.sh
# slidedp plan and the step-time model against a measured run (test_e2e_plan_predict.sh)
TESTS += tests/e2e/test_e2e_plan_predict.sh
EXTRA_DIST += tests/e2e/test_e2e_plan_predict.sh
# train.policy auto: selection, validation, cache, resume (test_e2e_policy_auto.sh)
TESTS += tests/e2e/test_e2e_policy_auto.sh
EXTRA_DIST += tests/e2e/test_e2e_policy_auto.sh
# train.policy auto under a host budget: layers updated on the GPU (exit 77 without a GPU)
TESTS += tests/e2e/test_e2e_policy_auto_host_gpu.sh
EXTRA_DIST += tests/e2e/test_e2e_policy_auto_host_gpu.sh
# the recipe's lora: section in the plan, and its refusals (test_e2e_lora_plan.sh)
TESTS += tests/e2e/test_e2e_lora_plan.sh
EXTRA_DIST += tests/e2e/test_e2e_lora_plan.sh
# LoRA adapters in PEFT's format: read, written, merged, against PEFT (test_e2e_lora_peft.sh)
TESTS += tests/e2e/test_e2e_lora_peft.sh
EXTRA_DIST += tests/e2e/test_e2e_lora_peft.sh tests/e2e/lora_peft.py
# LoRA at several data-parallel ranks: against one rank, the routes, the log, resume, PEFT; on two
# GPUs (exit 77 with fewer) the GPU and NCCL routes
TESTS += tests/e2e/test_e2e_lora_ranks.sh tests/e2e/test_e2e_lora_ranks_gpu.sh
EXTRA_DIST += tests/e2e/test_e2e_lora_ranks.sh tests/e2e/test_e2e_lora_ranks_gpu.sh
# slidedp bench --lora-rank: its JSON line, LoRA's model FLOPs, its refusals (test_e2e_bench_lora.sh)
TESTS += tests/e2e/test_e2e_bench_lora.sh
EXTRA_DIST += tests/e2e/test_e2e_bench_lora.sh
# LoRA's adapter updates on the GPU (train.gpu_update): the host's bits (exit 77 without a GPU)
TESTS += tests/e2e/test_e2e_lora_gpu_update_gpu.sh
EXTRA_DIST += tests/e2e/test_e2e_lora_gpu_update_gpu.sh
# slidedp plan --sched sdp-roundpipe: RoundPipe's stage split (test_e2e_plan_split.sh)
TESTS += tests/e2e/test_e2e_plan_split.sh
EXTRA_DIST += tests/e2e/test_e2e_plan_split.sh
# one Qwen3-MoE sparse block: the CPU kernels against transformers (test_e2e_moe_hf.sh)
check_PROGRAMS += tests/e2e/moe_block
tests_e2e_moe_block_SOURCES = tests/e2e/moe_block.c
TESTS += tests/e2e/test_e2e_moe_hf.sh
EXTRA_DIST += tests/e2e/test_e2e_moe_hf.sh tests/e2e/moe_hf.py
# a tiny Qwen3-MoE trained on CPU workers against transformers (test_e2e_moe_train.sh)
TESTS += tests/e2e/test_e2e_moe_train.sh
EXTRA_DIST += tests/e2e/test_e2e_moe_train.sh tests/e2e/moe_train.py
# the same model trained on one GPU against CPU workers (test_e2e_moe_gpu.sh; 77 without a GPU)
TESTS += tests/e2e/test_e2e_moe_gpu.sh
EXTRA_DIST += tests/e2e/test_e2e_moe_gpu.sh
# the fp32 residual stream (train.residual_dtype) on CPU workers with bf16 working copies
TESTS += tests/e2e/test_e2e_residual.sh
EXTRA_DIST += tests/e2e/test_e2e_residual.sh
