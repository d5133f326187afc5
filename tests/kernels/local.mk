# tests/kernels/local.mk: sources and tests of this folder (included by Makefile.am)
# Pure CPU kernels against fp64 oracles; no StarPU.
check_PROGRAMS += tests/kernels/test_kernels_cast_bf16
TESTS += tests/kernels/test_kernels_cast_bf16
tests_kernels_test_kernels_cast_bf16_SOURCES = tests/kernels/test_kernels_cast_bf16.c \
	tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_kernels_matmul
TESTS += tests/kernels/test_kernels_matmul
tests_kernels_test_kernels_matmul_SOURCES = tests/kernels/test_kernels_matmul.c \
	tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_kernels_embedding
TESTS += tests/kernels/test_kernels_embedding
tests_kernels_test_kernels_embedding_SOURCES = tests/kernels/test_kernels_embedding.c \
	tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_kernels_rmsnorm
TESTS += tests/kernels/test_kernels_rmsnorm
tests_kernels_test_kernels_rmsnorm_SOURCES = tests/kernels/test_kernels_rmsnorm.c \
	tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_kernels_qknorm_rope
TESTS += tests/kernels/test_kernels_qknorm_rope
tests_kernels_test_kernels_qknorm_rope_SOURCES = tests/kernels/test_kernels_qknorm_rope.c \
	tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_kernels_attention
TESTS += tests/kernels/test_kernels_attention
tests_kernels_test_kernels_attention_SOURCES = tests/kernels/test_kernels_attention.c \
	tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_kernels_swiglu
TESTS += tests/kernels/test_kernels_swiglu
tests_kernels_test_kernels_swiglu_SOURCES = tests/kernels/test_kernels_swiglu.c \
	tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_kernels_lmhead_ce
TESTS += tests/kernels/test_kernels_lmhead_ce
tests_kernels_test_kernels_lmhead_ce_SOURCES = tests/kernels/test_kernels_lmhead_ce.c \
	tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_kernels_adamw
TESTS += tests/kernels/test_kernels_adamw
tests_kernels_test_kernels_adamw_SOURCES = tests/kernels/test_kernels_adamw.c \
	tests/lib/sdp_test.h
# the LoRA adapter's kernels (codelets/cpu/lora.c) against an fp64 oracle
check_PROGRAMS += tests/kernels/test_kernels_lora
TESTS += tests/kernels/test_kernels_lora
tests_kernels_test_kernels_lora_SOURCES = tests/kernels/test_kernels_lora.c \
	tests/kernels/lora_oracle.h tests/lib/sdp_test.h
# the mixture-of-experts kernels (codelets/cpu/moe_*.c) against an fp64 oracle
check_PROGRAMS += tests/kernels/test_kernels_moe
TESTS += tests/kernels/test_kernels_moe
tests_kernels_test_kernels_moe_SOURCES = tests/kernels/test_kernels_moe.c \
	tests/kernels/moe_oracle.h tests/lib/sdp_test.h
