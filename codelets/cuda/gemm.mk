# codelets/cuda/gemm.mk: CUDA kernels (included by Makefile.am when CUDA is present)
# GEMMs through cuBLASLt (needs -lcublasLt) and the fused LM head + cross-entropy.
libsdp_a_SOURCES += codelets/cuda/gemm_internal.h \
	codelets/cuda/matmul.cu \
	codelets/cuda/lmhead_ce.cu \
	codelets/cuda/lora.cu

check_PROGRAMS += tests/kernels/test_cuda_matmul tests/kernels/test_cuda_lmhead_ce
TESTS += tests/kernels/test_cuda_matmul tests/kernels/test_cuda_lmhead_ce
tests_kernels_test_cuda_matmul_SOURCES = tests/kernels/test_cuda_matmul.c tests/lib/sdp_test.h
tests_kernels_test_cuda_lmhead_ce_SOURCES = tests/kernels/test_cuda_lmhead_ce.c \
	tests/lib/sdp_test.h
# the LoRA adapter's GPU kernels (codelets/cuda/lora.cu) against the fp64 oracle
check_PROGRAMS += tests/kernels/test_cuda_lora
TESTS += tests/kernels/test_cuda_lora
tests_kernels_test_cuda_lora_SOURCES = tests/kernels/test_cuda_lora.c tests/kernels/lora_oracle.h \
	tests/lib/sdp_test.h \
	tests/lib/sdp_test_cuda.h
