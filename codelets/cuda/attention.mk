# codelets/cuda/attention.mk: CUDA kernels (included by Makefile.am when CUDA is present)
libsdp_a_SOURCES += codelets/cuda/attention_internal.cuh codelets/cuda/attention_fwd.cu \
	codelets/cuda/attention_bwd.cu codelets/cuda/attention_docs.c
if SDP_CUDNN_FE
# cuDNN's fused attention graphs (header-only cudnn_frontend; slow to compile: about 4 min)
libsdp_a_SOURCES += codelets/cuda/attention_cudnn.cu
endif
check_PROGRAMS += tests/kernels/test_cuda_attention
TESTS += tests/kernels/test_cuda_attention
tests_kernels_test_cuda_attention_SOURCES = tests/kernels/test_cuda_attention.c tests/lib/sdp_test.h
# bf16 attention at 32K tokens (causal and document-masked) against an fp64 oracle on sampled rows
check_PROGRAMS += tests/kernels/test_cuda_attention_long
TESTS += tests/kernels/test_cuda_attention_long
tests_kernels_test_cuda_attention_long_SOURCES = tests/kernels/test_cuda_attention_long.c \
	tests/lib/sdp_test.h
