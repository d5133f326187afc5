# codelets/cuda/elementwise.mk: CUDA kernels (included by Makefile.am when CUDA is present)
# Elementwise and row-wise ops (cast, embedding, RMSNorm, q/k norm + RoPE, SwiGLU, sumsq) and
# their tests against the CPU _ref kernels (exit 77 without a GPU).
libsdp_a_SOURCES += codelets/cuda/storage.cuh codelets/cuda/cast.cu codelets/cuda/embedding.cu codelets/cuda/rmsnorm.cu \
	codelets/cuda/rmsnorm_res.cu \
	codelets/cuda/qknorm_rope_internal.cuh codelets/cuda/qknorm_rope_fwd.cu codelets/cuda/qknorm_rope_bwd.cu \
	codelets/cuda/swiglu.cu codelets/cuda/sumsq.cu codelets/cuda/reduce.cu \
	codelets/cuda/scatter.cu codelets/cuda/adamw.cu

check_PROGRAMS += tests/kernels/test_cuda_cast
TESTS += tests/kernels/test_cuda_cast
tests_kernels_test_cuda_cast_SOURCES = tests/kernels/test_cuda_cast.c tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_cuda_embedding
TESTS += tests/kernels/test_cuda_embedding
tests_kernels_test_cuda_embedding_SOURCES = tests/kernels/test_cuda_embedding.c \
	tests/lib/sdp_test.h tests/lib/sdp_test_cuda.h
check_PROGRAMS += tests/kernels/test_cuda_rmsnorm
TESTS += tests/kernels/test_cuda_rmsnorm
tests_kernels_test_cuda_rmsnorm_SOURCES = tests/kernels/test_cuda_rmsnorm.c tests/lib/sdp_test.h tests/lib/sdp_test_cuda.h
# the fp32 residual stream's kernels (rmsnorm_res.cu, matmul.cu, embedding.cu) vs fp64 oracles
check_PROGRAMS += tests/kernels/test_cuda_residual
TESTS += tests/kernels/test_cuda_residual
tests_kernels_test_cuda_residual_SOURCES = tests/kernels/test_cuda_residual.c \
	tests/lib/sdp_test.h tests/lib/sdp_test_cuda.h
check_PROGRAMS += tests/kernels/test_cuda_qknorm_rope
TESTS += tests/kernels/test_cuda_qknorm_rope
tests_kernels_test_cuda_qknorm_rope_SOURCES = tests/kernels/test_cuda_qknorm_rope.c \
	tests/lib/sdp_test.h tests/lib/sdp_test_cuda.h
check_PROGRAMS += tests/kernels/test_cuda_swiglu
TESTS += tests/kernels/test_cuda_swiglu
tests_kernels_test_cuda_swiglu_SOURCES = tests/kernels/test_cuda_swiglu.c tests/lib/sdp_test.h tests/lib/sdp_test_cuda.h
check_PROGRAMS += tests/kernels/test_cuda_sumsq
TESTS += tests/kernels/test_cuda_sumsq
tests_kernels_test_cuda_sumsq_SOURCES = tests/kernels/test_cuda_sumsq.c tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_cuda_reduce
TESTS += tests/kernels/test_cuda_reduce
tests_kernels_test_cuda_reduce_SOURCES = tests/kernels/test_cuda_reduce.c tests/lib/sdp_test.h
check_PROGRAMS += tests/kernels/test_cuda_scatter
TESTS += tests/kernels/test_cuda_scatter
tests_kernels_test_cuda_scatter_SOURCES = tests/kernels/test_cuda_scatter.c tests/lib/sdp_test.h \
	tests/lib/sdp_test_cuda.h
check_PROGRAMS += tests/kernels/test_cuda_adamw
TESTS += tests/kernels/test_cuda_adamw
tests_kernels_test_cuda_adamw_SOURCES = tests/kernels/test_cuda_adamw.c tests/lib/sdp_test.h \
	tests/lib/sdp_test_cuda.h
