/* SPDX-License-Identifier: MIT */
/* A LoRA adapter's forward and backward beside a frozen linear, through CBLAS sgemm with the
 * scaling s = alpha / r as the GEMMs' alpha and row strides, so that the adapter's output lands in
 * a column slice of a fused projection (q/k/v, gate/up).  fp32; u and v are the caller's scratch.
 * The runtime pins OpenBLAS to one thread: the bits do not depend on the calling thread.  The
 * dropout on the adapter's input and its backward (PEFT's lora_dropout) with base/splitmix.h's
 * mask.  No allocation.  Test: tests/kernels/test_kernels_lora.c (fp64 oracle). */
#include "config.h"

#include <stddef.h>

#include <cblas.h>
#undef I /* <complex.h>, pulled in by OpenBLAS's cblas.h, defines I: a dimension name here */

#include "base/splitmix.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

/* drop(x) into dp->xd, or x itself without dropout */
static const float *dropped(const float *x, size_t n, const struct sdp_cpu_dropout *dp)
{
    if (!dp || !dp->thr)
        return x;
    for (size_t i = 0; i < n; i++)
        dp->xd[i] = sdp_dropout_keep(dp->key, i, dp->thr) ? x[i] * dp->scale : 0.0f;
    return dp->xd;
}

void sdp_cpu_lora_fwd(float *y, int ldy, const float *x, const float *a, const float *b, int M,
                      int in, int out, int r, float s, float *u, const struct sdp_cpu_dropout *dp)
{
    if (M <= 0 || in <= 0 || out <= 0 || r <= 0)
        return;
    x = dropped(x, (size_t)M * in, dp);
    /* u (M, r) = x (M, in) . A (r, in)^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r, in, 1.0f, x, in, a, in, 0.0f, u, r);
    /* y (M, out; row stride ldy) += s u (M, r) . B (out, r)^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, out, r, s, u, r, b, r, 1.0f, y, ldy);
}

void sdp_cpu_lora_bwd(float *dx, const float *dy, int ldy, const float *x, const float *a,
                      const float *b, float *ga, float *gb, int M, int in, int out, int r, float s,
                      float *u, float *v, const struct sdp_cpu_dropout *dp)
{
    size_t n = (size_t)M * in;
    int drop = dp && dp->thr;
    if (M <= 0 || in <= 0 || out <= 0 || r <= 0)
        return;
    x = dropped(x, n, dp);
    /* u (M, r) = x A^T, as the forward made it; v (M, r) = dy (M, out) . B (out, r) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r, in, 1.0f, x, in, a, in, 0.0f, u, r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, r, out, 1.0f, dy, ldy, b, r, 0.0f, v,
                r);
    /* dB (out, r) += s dy^T u;  dA (r, in) += s v^T x */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, r, M, s, dy, ldy, u, r, 1.0f, gb, r);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r, in, M, s, v, r, x, in, 1.0f, ga, in);
    if (!drop) { /* dx (M, in) += s v A */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, in, r, s, v, r, a, in, 1.0f, dx,
                    in);
        return;
    }
    /* with dropout, s v A into xd (read by now), then dx += its kept elements times scale */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, in, r, s, v, r, a, in, 0.0f, dp->xd,
                in);
    for (size_t i = 0; i < n; i++)
        if (sdp_dropout_keep(dp->key, i, dp->thr))
            dx[i] += dp->xd[i] * dp->scale;
}
