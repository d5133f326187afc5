/* SPDX-License-Identifier: MIT */
/* The three GEMMs of a linear layer (forward, backward-data, backward-weight) through CBLAS sgemm,
 * plus their triple-loop references.  The runtime pins OpenBLAS to one thread, so for given shapes
 * the summation order, hence the bits, do not depend on the calling thread.  No allocation here.
 * Test: tests/kernels/test_kernels_matmul.c (both versions against an fp64 oracle). */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include <cblas.h>
#undef I /* <complex.h>, pulled in by OpenBLAS's cblas.h, defines I: a dimension name here */

#include "codelets/cpu/sdp_cpu_kernels.h"

/* ---- BLAS-backed ---- */

void sdp_cpu_matmul_fwd(float *out, const float *resid, const float *x, const float *w, int M,
                        int K, int N)
{
    float beta = 0.0f;

    if (M <= 0 || N <= 0)
        return;
    if (resid) {
        if (resid != out)
            memcpy(out, resid, (size_t)M * N * sizeof(*out));
        beta = 1.0f;
    }
    if (K <= 0) { /* empty sum: BLAS rejects lda = 0 */
        if (!resid)
            memset(out, 0, (size_t)M * N * sizeof(*out));
        return;
    }
    /* out (M, N) = beta out + x (M, K) . w (N, K)^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, beta, out, N);
}

void sdp_cpu_matmul_bwd_data(float *dx, const float *dout, const float *w, int M, int K, int N)
{
    if (M <= 0 || K <= 0)
        return;
    if (N <= 0) {
        memset(dx, 0, (size_t)M * K * sizeof(*dx));
        return;
    }
    /* dx (M, K) = dout (M, N) . w (N, K) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dout, N, w, K, 0.0f, dx,
                K);
}

void sdp_cpu_matmul_bwd_weight(float *dw, const float *dout, const float *x, int M, int K, int N)
{
    if (M <= 0 || K <= 0 || N <= 0)
        return;
    /* dw (N, K) += dout (M, N)^T . x (M, K) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dout, N, x, K, 1.0f, dw, K);
}

/* ---- references: fp32 accumulation in increasing index order ---- */

void sdp_cpu_matmul_fwd_ref(float *out, const float *resid, const float *x, const float *w, int M,
                            int K, int N)
{
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * K;
        for (int n = 0; n < N; n++) {
            const float *wn = w + (size_t)n * K;
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc += xm[k] * wn[k];
            /* read resid before writing out: they may alias */
            size_t i = (size_t)m * N + n;
            out[i] = resid ? resid[i] + acc : acc;
        }
    }
}

void sdp_cpu_matmul_bwd_data_ref(float *restrict dx, const float *restrict dout,
                                 const float *restrict w, int M, int K, int N)
{
    for (int m = 0; m < M; m++) {
        float *dxm = dx + (size_t)m * K;
        for (int k = 0; k < K; k++)
            dxm[k] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float d = dout[(size_t)m * N + n];
            const float *wn = w + (size_t)n * K;
            for (int k = 0; k < K; k++)
                dxm[k] += d * wn[k];
        }
    }
}

void sdp_cpu_matmul_bwd_weight_ref(float *restrict dw, const float *restrict dout,
                                   const float *restrict x, int M, int K, int N)
{
    for (int n = 0; n < N; n++) {
        float *dwn = dw + (size_t)n * K;
        for (int m = 0; m < M; m++) {
            const float d = dout[(size_t)m * N + n];
            const float *xm = x + (size_t)m * K;
            for (int k = 0; k < K; k++)
                dwn[k] += d * xm[k];
        }
    }
}
