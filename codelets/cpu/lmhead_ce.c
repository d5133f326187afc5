/* SPDX-License-Identifier: MIT */
/* LM head fused with softmax cross-entropy, blocked over tokens so the (N, V) logits never exist
 * whole: per block, logits by sgemm into scratch, max and log-sum-exp in double (exp in fp32), then
 * the scratch becomes dlogits and two more sgemms give dh and accumulate dw.  Also the fp64
 * triple-loop version (test oracle).  Ignored targets (< 0) contribute nothing.
 * Test: tests/kernels/test_kernels_lmhead_ce.c (fp64 oracle, finite differences). */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#undef I /* <complex.h>, pulled in by OpenBLAS's cblas.h, defines I: a dimension name here */

#include "codelets/cpu/sdp_cpu_kernels.h"

/* One row of logits z (V) becomes dlogits = scale (softmax(z) - onehot(target)); returns the row's
 * loss lse(z) - z[target].  exp is fp32 (relative error ~1 ulp per term); its sum and the log in
 * double. */
static double ce_row(float *restrict z, int V, int32_t target, float scale)
{
    float zmax = -INFINITY;
    for (int v = 0; v < V; v++)
        zmax = z[v] > zmax ? z[v] : zmax;
    const double zt = z[target];
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        z[v] = expf(z[v] - zmax);
        sum += z[v];
    }
    const float k = (float)((double)scale / sum);
    for (int v = 0; v < V; v++)
        z[v] *= k;
    z[target] -= scale;
    return (double)zmax + log(sum) - zt;
}

void sdp_cpu_lmhead_ce(double *loss_sum, int *nvalid, float *dh, float *dw, const float *h,
                       const float *w, const int32_t *targets, int N, int C, int V, float scale,
                       float *scratch, int rows_per_block)
{
    double loss = 0.0;
    int count = 0;

    for (int n0 = 0; n0 < N; n0 += rows_per_block) {
        const int bs = N - n0 < rows_per_block ? N - n0 : rows_per_block;
        const float *hb = h + (size_t)n0 * C;
        float *dhb = dh + (size_t)n0 * C;
        int bvalid = 0;
        for (int r = 0; r < bs; r++)
            bvalid += targets[n0 + r] >= 0;
        if (bvalid == 0 || C <= 0 || V <= 0) { /* nothing to learn from this block */
            memset(dhb, 0, (size_t)bs * C * sizeof(*dh));
            continue;
        }
        /* logits (bs, V) = h_blk (bs, C) . w (V, C)^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bs, V, C, 1.0f, hb, C, w, C, 0.0f,
                    scratch, V);
        for (int r = 0; r < bs; r++) {
            float *z = scratch + (size_t)r * V;
            const int32_t tgt = targets[n0 + r];
            if (tgt < 0) {
                memset(z, 0, (size_t)V * sizeof(*z));
                continue;
            }
            loss += ce_row(z, V, tgt, scale);
            count++;
        }
        /* dh_blk (bs, C) = dlogits (bs, V) . w (V, C);  dw (V, C) += dlogits^T . h_blk (bs, C) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bs, C, V, 1.0f, scratch, V, w, C,
                    0.0f, dhb, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, bs, 1.0f, scratch, V, hb, C,
                    1.0f, dw, C);
    }
    *loss_sum = loss;
    *nvalid = count;
}

/* Test oracle: every dot product and sum in double, one rounding per output.  It needs N*V doubles
 * of temporary storage (small shapes only); if that allocation fails, *loss_sum is NaN and *nvalid
 * -1. */
void sdp_cpu_lmhead_ce_ref(double *loss_sum, int *nvalid, float *dh, float *dw, const float *h,
                           const float *w, const int32_t *targets, int N, int C, int V, float scale)
{
    double *g = malloc((size_t)(N > 0 ? N : 1) * (size_t)(V > 0 ? V : 1) * sizeof(*g));
    double loss = 0.0;
    int count = 0;

    if (!g) {
        *loss_sum = NAN;
        *nvalid = -1;
        return;
    }
    /* g (N, V) = scale * (softmax(logits) - onehot), 0 for ignored rows */
    for (int n = 0; n < N; n++) {
        double *gn = g + (size_t)n * V;
        const float *hn = h + (size_t)n * C;
        double zmax = -INFINITY, sum = 0.0;
        if (targets[n] < 0) {
            for (int v = 0; v < V; v++)
                gn[v] = 0.0;
            continue;
        }
        for (int v = 0; v < V; v++) {
            double z = 0.0;
            for (int c = 0; c < C; c++)
                z += (double)hn[c] * w[(size_t)v * C + c];
            gn[v] = z;
            zmax = z > zmax ? z : zmax;
        }
        for (int v = 0; v < V; v++)
            sum += exp(gn[v] - zmax);
        const double lse = zmax + log(sum);
        loss += lse - gn[targets[n]];
        count++;
        for (int v = 0; v < V; v++)
            gn[v] = scale * exp(gn[v] - lse);
        gn[targets[n]] -= scale;
    }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double acc = 0.0;
            for (int v = 0; v < V; v++)
                acc += g[(size_t)n * V + v] * w[(size_t)v * C + c];
            dh[(size_t)n * C + c] = (float)acc;
        }
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++) {
            double acc = dw[(size_t)v * C + c];
            for (int n = 0; n < N; n++)
                acc += g[(size_t)n * V + v] * h[(size_t)n * C + c];
            dw[(size_t)v * C + c] = (float)acc;
        }
    free(g);
    *loss_sum = loss;
    *nvalid = count;
}
