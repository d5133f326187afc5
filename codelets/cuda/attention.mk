# codelets/cuda/attention.mk: CUDA kernels (included by Makefile.am when CUDA is present)
libsdp_a_SOURCES += codelets/cuda/attention.cu
check_PROGRAMS += tests/kernels/test_cuda_attention
TESTS += tests/kernels/test_cuda_attention
tests_kernels_test_cuda_attention_SOURCES = tests/kernels/test_cuda_attention.c tests/lib/sdp_test.h
