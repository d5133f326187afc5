// SPDX-License-Identifier: MIT
/* The mixture-of-experts experts on the GPU, as codelets/cpu/moe_experts.c: the gather of the
 * tokens' rows into expert order, each expert's SwiGLU MLP on its rows and the backward, the
 * weighted combine back to token order (slot order k = 0..K-1, the CPU's roundings) and its
 * backward; and the row-major fp32 GEMM of moe_internal.h.
 *
 * The experts' GEMMs are a loop of cublasGemmEx over the experts that have rows, on one stream.
 * cublasGemmGroupedBatchedEx would take them in one call, but its m of each group is a host array
 * too, so the counts must come to the host either way (sdp_cuda_moe_offsets_host), and it needs
 * device arrays of pointers besides; the loop needs neither and keeps the pedantic fp32 compute
 * type (no TF32) of the dense layers' GEMMs.  cuBLAS, not the cached cuBLASLt plans of matmul.cu:
 * every expert's row count is a new shape, which would fill that cache.
 * Test: tests/kernels/test_cuda_moe.c (fp64 oracle). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "codelets/cuda/moe_internal.h"
#include "codelets/cuda/sdp_cuda_kernels.h"

extern "C" void sdp_cuda_moe_gemm_on(cublasHandle_t h, cudaStream_t s)
{
    cublasSetStream(h, s);
    cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
}

/* Column-major cuBLAS computes C^T (n, m) = op(B)^T op(A)^T: a row-major matrix is its transpose
 * stored column-major, with the same leading dimension. */
extern "C" void sdp_cuda_moe_gemm(cublasHandle_t h, int ta, int tb, int m, int n, int k,
                                  const float *A, int lda, const float *B, int ldb, float beta,
                                  float *C, int ldc)
{
    const float one = 1.0f;
    const cublasStatus_t st =
        cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                     &one, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                     CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr,
                "[sdp][error][sdp_cuda_moe_gemm@%s] cublasGemmEx: %s (m=%d n=%d k=%d ta=%d tb=%d "
                "lda=%d ldb=%d ldc=%d)\n",
                __FILE__, cublasGetStatusString(st), m, n, k, ta, tb, lda, ldb, ldc);
        fprintf(stderr, "hint: the MoE launchers expect a cuBLAS handle of the current device\n");
        abort();
    }
}

/* xp (S, C): row i = x[rows[i] / K]; rows i = blockIdx.x + j gridDim.x */
static __global__ void gather_kernel(float *__restrict__ xp, const float *__restrict__ x,
                                     const int32_t *__restrict__ rows, int S, int K, int C)
{
    for (int i = blockIdx.x; i < S; i += gridDim.x) {
        const float *src = x + (size_t)(rows[i] / K) * C;
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            xp[(size_t)i * C + c] = src[c];
    }
}

static unsigned grid_rows(int n)
{
    return (unsigned)(n < 65535 ? n : 65535);
}

extern "C" void sdp_cuda_moe_gather(float *xp, const float *x, const struct sdp_cuda_moe_routing *r,
                                    int C, cudaStream_t s)
{
    const int S = r->N * r->K;
    if (S > 0 && C > 0)
        gather_kernel<<<grid_rows(S), 128, 0, s>>>(xp, x, r->rows, S, r->K, C);
}

/* Expert e's weights in f32: themselves, or widened into wtmp (gate|up first, then down). */
static void expert_weights(const float **wg, const float **wd, const void *wgu, const void *wdown,
                           int wdt, float *wtmp, int e, int C, int IM, cudaStream_t s)
{
    const size_t ng = (size_t)2 * IM * C, nd = (size_t)C * IM;
    if (wdt == SDP_CUDA_F32) {
        *wg = (const float *)wgu + e * ng;
        *wd = (const float *)wdown + e * nd;
        return;
    }
    sdp_cuda_cast_f32(wtmp, (const uint16_t *)wgu + e * ng, wdt, ng, s);
    sdp_cuda_cast_f32(wtmp + ng, (const uint16_t *)wdown + e * nd, wdt, nd, s);
    *wg = wtmp;
    *wd = wtmp + ng;
}

extern "C" void sdp_cuda_moe_experts_fwd(cublasHandle_t h, float *y, float *gu, float *hh,
                                         const float *xp, const void *wgu, const void *wdown,
                                         int wdt, float *wtmp, const int32_t *off, int E, int C,
                                         int IM, cudaStream_t s)
{
    sdp_cuda_moe_gemm_on(h, s);
    for (int e = 0; e < E; e++) {
        const int n = off[e + 1] - off[e];
        const size_t r0 = (size_t)off[e];
        const float *wg, *wd;
        if (n == 0)
            continue;
        expert_weights(&wg, &wd, wgu, wdown, wdt, wtmp, e, C, IM, s);
        /* gu = xp . wg^T (n, 2IM); h = silu(gate) * up; y = h . wd^T (n, C) */
        sdp_cuda_moe_gemm(h, 0, 1, n, 2 * IM, C, xp + r0 * C, C, wg, C, 0.0f, gu + r0 * 2 * IM,
                          2 * IM);
        sdp_cuda_swiglu_fwd(hh + r0 * IM, gu + r0 * 2 * IM, n, IM, SDP_CUDA_F32, s);
        sdp_cuda_moe_gemm(h, 0, 1, n, C, IM, hh + r0 * IM, IM, wd, IM, 0.0f, y + r0 * C, C);
    }
}

extern "C" void sdp_cuda_moe_experts_bwd(cublasHandle_t h, float *dxp, float *dwgu, float *dwdown,
                                         float *dgu, float *dh, const float *dy, const float *xp,
                                         const float *gu, const float *hh, const void *wgu,
                                         const void *wdown, int wdt, float *wtmp,
                                         const int32_t *off, int E, int C, int IM, cudaStream_t s)
{
    const size_t ng = (size_t)2 * IM * C, nd = (size_t)C * IM;
    sdp_cuda_moe_gemm_on(h, s);
    for (int e = 0; e < E; e++) {
        const int n = off[e + 1] - off[e];
        const size_t r0 = (size_t)off[e];
        const float *wg, *wd;
        if (n == 0)
            continue; /* an idle expert gets no gradient, as in PyTorch */
        expert_weights(&wg, &wd, wgu, wdown, wdt, wtmp, e, C, IM, s);
        /* y = h . wd^T: dh = dy . wd, dwdown += dy^T . h */
        sdp_cuda_moe_gemm(h, 0, 0, n, IM, C, dy + r0 * C, C, wd, IM, 0.0f, dh + r0 * IM, IM);
        if (dwdown)
            sdp_cuda_moe_gemm(h, 1, 0, C, IM, n, dy + r0 * C, C, hh + r0 * IM, IM, 1.0f,
                              dwdown + e * nd, IM);
        sdp_cuda_swiglu_bwd(dgu + r0 * 2 * IM, dh + r0 * IM, gu + r0 * 2 * IM, n, IM, SDP_CUDA_F32,
                            s);
        /* gu = xp . wg^T: dxp = dgu . wg, dwgu += dgu^T . xp */
        sdp_cuda_moe_gemm(h, 0, 0, n, C, 2 * IM, dgu + r0 * 2 * IM, 2 * IM, wg, C, 0.0f,
                          dxp + r0 * C, C);
        if (dwgu)
            sdp_cuda_moe_gemm(h, 1, 0, 2 * IM, C, n, dgu + r0 * 2 * IM, 2 * IM, xp + r0 * C, C,
                              1.0f, dwgu + e * ng, C);
    }
}

/* Token n = blockIdx.x + j gridDim.x: out = [resid +] sum_k w y, the CPU's roundings in k order
 * (separate products and sums, never fused). */
static __global__ void combine_kernel(float *__restrict__ out, const float *__restrict__ resid,
                                      const float *__restrict__ y, const float *__restrict__ wts,
                                      const int32_t *__restrict__ where, int N, int K, int C)
{
    for (int n = blockIdx.x; n < N; n += gridDim.x)
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const size_t s = (size_t)n * K + k;
                acc = __fadd_rn(acc, __fmul_rn(wts[s], y[(size_t)where[s] * C + c]));
            }
            out[(size_t)n * C + c] = resid ? __fadd_rn(resid[(size_t)n * C + c], acc) : acc;
        }
}

extern "C" void sdp_cuda_moe_combine(float *out, const float *resid, const float *y,
                                     const struct sdp_cuda_moe_routing *r, int C, cudaStream_t s)
{
    if (r->N > 0 && C > 0)
        combine_kernel<<<grid_rows(r->N), 128, 0, s>>>(out, resid, y, r->wts, r->where, r->N, r->K,
                                                       C);
}

#define CB_THREADS 128

/* Slot s = blockIdx.x + j gridDim.x: dy[where[s]] = w dout[n]; dwts[s] = dout[n] . y[where[s]],
 * in double over a fixed tree. */
static __global__ void combine_bwd_kernel(float *__restrict__ dy, float *__restrict__ dwts,
                                          const float *__restrict__ dout,
                                          const float *__restrict__ y,
                                          const float *__restrict__ wts,
                                          const int32_t *__restrict__ where, int S, int K, int C)
{
    __shared__ double part[CB_THREADS];
    for (int s = blockIdx.x; s < S; s += gridDim.x) {
        const float *d = dout + (size_t)(s / K) * C, *yr = y + (size_t)where[s] * C;
        float *dyr = dy + (size_t)where[s] * C;
        double dot = 0.0;
        for (int c = threadIdx.x; c < C; c += CB_THREADS) {
            dyr[c] = __fmul_rn(wts[s], d[c]);
            dot += (double)d[c] * yr[c];
        }
        part[threadIdx.x] = dot;
        __syncthreads();
        for (int w = CB_THREADS / 2; w > 0; w >>= 1) {
            if (threadIdx.x < w)
                part[threadIdx.x] += part[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0)
            dwts[s] = (float)part[0];
        __syncthreads(); /* part is rewritten by the next slot */
    }
}

extern "C" void sdp_cuda_moe_combine_bwd(float *dy, float *dwts, const float *dout, const float *y,
                                         const struct sdp_cuda_moe_routing *r, int C,
                                         cudaStream_t s)
{
    const int S = r->N * r->K;
    if (S > 0)
        combine_bwd_kernel<<<grid_rows(S), CB_THREADS, 0, s>>>(dy, dwts, dout, y, r->wts, r->where,
                                                               S, r->K, C);
}

/* Token n: dx[n] += dxp[where[n*K + k]] in k order, unfused, as the CPU. */
static __global__ void scatter_bwd_kernel(float *__restrict__ dx, const float *__restrict__ dxp,
                                          const int32_t *__restrict__ where, int N, int K, int C)
{
    for (int n = blockIdx.x; n < N; n += gridDim.x)
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float v = dx[(size_t)n * C + c];
            for (int k = 0; k < K; k++)
                v = __fadd_rn(v, dxp[(size_t)where[(size_t)n * K + k] * C + c]);
            dx[(size_t)n * C + c] = v;
        }
}

extern "C" void sdp_cuda_moe_scatter_bwd(float *dx, const float *dxp,
                                         const struct sdp_cuda_moe_routing *r, int C,
                                         cudaStream_t s)
{
    if (r->N > 0 && C > 0)
        scatter_bwd_kernel<<<grid_rows(r->N), 128, 0, s>>>(dx, dxp, r->where, r->N, r->K, C);
}
