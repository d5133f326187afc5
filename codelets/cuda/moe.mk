# codelets/cuda/moe.mk: the mixture-of-experts CUDA kernels and the CUDA implementation of the
# moe_* codelets (included by Makefile.am when CUDA is present), and their kernel test against the
# fp64 oracle (exit 77 without a GPU).
libsdp_a_SOURCES += codelets/cuda/moe_internal.h codelets/cuda/moe.cu codelets/cuda/moe_experts.cu \
	codelets/moe_cuda.c

check_PROGRAMS += tests/kernels/test_cuda_moe
TESTS += tests/kernels/test_cuda_moe
tests_kernels_test_cuda_moe_SOURCES = tests/kernels/test_cuda_moe.c tests/kernels/moe_oracle.h \
	tests/lib/sdp_test.h tests/lib/sdp_test_cuda.h
