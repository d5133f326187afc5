/* SPDX-License-Identifier: MIT */
/* Cross-file internal of the mixture-of-experts CUDA kernels (moe.cu, moe_experts.cu): the
 * row-major fp32 GEMM through cuBLAS they share.  Not part of the kernel API
 * (codelets/cuda/sdp_cuda_kernels.h).  Test: tests/kernels/test_cuda_moe.c. */
#ifndef SDP_CUDA_MOE_INTERNAL_H
#define SDP_CUDA_MOE_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Row-major C (m, n) = op(A) (m, k) . op(B) (k, n) + beta C, pedantic fp32 (no TF32), on h's
 * stream; ta: A stored (k, m), tb: B stored (n, k); lda, ldb, ldc the stored row lengths.  m, n,
 * k > 0.  cuBLAS failures print the shape and abort (the void launchers cannot return). */
void sdp_cuda_moe_gemm(cublasHandle_t h, int ta, int tb, int m, int n, int k, const float *A,
                       int lda, const float *B, int ldb, float beta, float *C, int ldc);

/** Bind h to stream s with host alpha and beta, before a launcher's first sdp_cuda_moe_gemm. */
void sdp_cuda_moe_gemm_on(cublasHandle_t h, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
