/* SPDX-License-Identifier: MIT */
/* Cross-file internal of the CUDA GEMMs: one column-major cuBLASLt GEMM with a per-shape cache of
 * descriptors and heuristic algorithms (defined in matmul.cu, also used by lmhead_ce.cu).  Not part
 * of the kernel API (codelets/cuda/sdp_cuda_kernels.h).  Test: tests/kernels/test_cuda_matmul.c. */
#ifndef SDP_CUDA_GEMM_INTERNAL_H
#define SDP_CUDA_GEMM_INTERNAL_H

#include <stddef.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Column-major D (m, n) = op(A) op(B) + beta C, fp32 compute (no TF32), enqueued on s.
 * @param[in] transa, transb  non-zero: the operand is stored transposed (A is (k, m), lda >= k)
 * @param[in] A, B  ab_dt (SDP_CUDA_F32 or SDP_CUDA_BF16) with leading dimensions lda, ldb
 * @param[in] C     beta != 0: d_dt with D's layout (may equal D); ignored when beta == 0
 * @param[out] D    d_dt, leading dimension ldd
 * Every argument must be valid (m, n, k > 0): cuBLAS failures print a message and abort, since the
 * void launchers that call this have no way to return an error.
 */
void sdp_cuda_gemm_lt(cublasLtHandle_t lt, int transa, int transb, int m, int n, int k,
                      const void *A, int lda, const void *B, int ldb, float beta, const void *C,
                      void *D, int ldd, int ab_dt, int d_dt, void *ws, size_t ws_bytes,
                      cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
