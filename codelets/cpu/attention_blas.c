/* SPDX-License-Identifier: MIT */
/* Causal grouped-query attention on the fused qkv activation through BLAS: per (sequence, query
 * head) and block of ATT_QB queries, the scores against the keys up to the block's last query in
 * one sgemm (qb x keys, in a workspace, never (T, T) for long sequences), the softmax row by row
 * (expf, the sum and the lse in double), and the products with V (forward), dO, K and Q (backward)
 * as sgemms.  The same formulas as the scalar reference (codelets/cpu/attention_ref.c) with whole
 * rows instead of an online softmax: every sum is over the same terms, in BLAS's order; dk and dv
 * accumulate over query heads and query blocks in a fixed order.  With segment starts (document
 * masking) the probabilities of the keys before a query's document are zero.
 * Test: tests/kernels/test_kernels_attention.c (the reference's fp64 oracle and error model). */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cblas.h>
#undef I /* <complex.h>, pulled in by OpenBLAS's cblas.h, defines I: a dimension name here */

#include "codelets/cpu/sdp_cpu_kernels.h"

enum { ATT_QB = 64 }; /* queries per block */

size_t sdp_cpu_attention_ws_floats(int T)
{
    return 2 * (size_t)ATT_QB * (size_t)(T > 0 ? T : 1);
}

struct att_dims {
    size_t QKV, C;
    int T, NH, NKV, HD, group;
    float scale;
};

static struct att_dims dims(int T, int NH, int NKV, int HD)
{
    struct att_dims d = { .QKV = (size_t)(NH + 2 * NKV) * HD,
                          .C = (size_t)NH * HD,
                          .T = T,
                          .NH = NH,
                          .NKV = NKV,
                          .HD = HD,
                          .group = NH / NKV,
                          .scale = (float)(1.0 / sqrt((double)HD)) };
    return d;
}

/* S (qb, nk) = scale Q[t0..t0+qb) K[0..nk)^T for query head h of the sequence at base */
static void scores(float *S, const float *base, const struct att_dims *d, int h, int t0, int qb,
                   int nk)
{
    const size_t koff = (size_t)(d->NH + h / d->group) * d->HD;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, qb, nk, d->HD, d->scale,
                base + (size_t)t0 * d->QKV + (size_t)h * d->HD, (int)d->QKV, base + koff,
                (int)d->QKV, 0.0f, S, nk);
}

void sdp_cpu_attention_fwd(float *out, float *lse, const float *qkv, const int32_t *seg, int B,
                           int T, int NH, int NKV, int HD, float *ws)
{
    const struct att_dims d = dims(T, NH, NKV, HD);
    double l[ATT_QB];

    for (int b = 0; b < B; b++) {
        const float *base = qkv + (size_t)b * T * d.QKV;
        for (int h = 0; h < NH; h++) {
            const size_t voff = (size_t)(NH + NKV + h / d.group) * HD;
            for (int t0 = 0; t0 < T; t0 += ATT_QB) {
                const int qb = T - t0 < ATT_QB ? T - t0 : ATT_QB, nk = t0 + qb;
                float *o = out + ((size_t)b * T + t0) * d.C + (size_t)h * HD;
                scores(ws, base, &d, h, t0, qb, nk);
                for (int i = 0; i < qb; i++) { /* row i: keys lo..t0+i, P in place of S */
                    float *p = ws + (size_t)i * nk, m = -INFINITY;
                    const int n = t0 + i + 1, lo = seg ? seg[(size_t)b * T + t0 + i] : 0;
                    for (int s = lo; s < n; s++)
                        m = p[s] > m ? p[s] : m;
                    l[i] = 0.0;
                    for (int s = lo; s < n; s++) {
                        p[s] = expf(p[s] - m);
                        l[i] += p[s];
                    }
                    memset(p, 0, (size_t)lo * sizeof(*p));
                    memset(p + n, 0, (size_t)(nk - n) * sizeof(*p));
                    lse[((size_t)b * NH + h) * T + t0 + i] = (float)((double)m + log(l[i]));
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, qb, HD, nk, 1.0f, ws, nk,
                            base + voff, (int)d.QKV, 0.0f, o, (int)d.C);
                for (int i = 0; i < qb; i++) {
                    const float inv = (float)(1.0 / l[i]);
                    for (int c = 0; c < HD; c++)
                        o[(size_t)i * d.C + c] *= inv;
                }
            }
        }
    }
}

/* one query block of the backward: P and dS from S and dP (workspace rows), then dq, dk, dv */
static void bwd_block(float *dbase, const float *base, const float *dO, const float *o,
                      const float *L, const int32_t *seg, const struct att_dims *d, int h, int t0,
                      int qb, float *ws)
{
    const int nk = t0 + qb, HD = d->HD;
    const size_t koff = (size_t)(d->NH + h / d->group) * HD, voff = koff + (size_t)d->NKV * HD;
    float *P = ws, *dS = ws + (size_t)ATT_QB * d->T;

    scores(P, base, d, h, t0, qb, nk);
    /* dP (qb, nk) = dO V^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, qb, nk, HD, 1.0f, dO, (int)d->C,
                base + voff, (int)d->QKV, 0.0f, dS, nk);
    for (int i = 0; i < qb; i++) {
        float *p = P + (size_t)i * nk, *ds = dS + (size_t)i * nk;
        const float *dOi = dO + (size_t)i * d->C, *oi = o + (size_t)i * d->C;
        const int n = t0 + i + 1, lo = seg ? seg[i] : 0;
        double Dd = 0.0;
        for (int c = 0; c < HD; c++)
            Dd += (double)dOi[c] * oi[c];
        const float D = (float)Dd;
        for (int s = lo; s < n; s++) {
            p[s] = expf(p[s] - L[i]);
            ds[s] = p[s] * (ds[s] - D) * d->scale;
        }
        memset(p, 0, (size_t)lo * sizeof(*p));
        memset(ds, 0, (size_t)lo * sizeof(*ds));
        memset(p + n, 0, (size_t)(nk - n) * sizeof(*p));
        memset(ds + n, 0, (size_t)(nk - n) * sizeof(*ds));
    }
    /* dq = dS K;  dk += dS^T q;  dv += P^T dO */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, qb, HD, nk, 1.0f, dS, nk, base + koff,
                (int)d->QKV, 0.0f, dbase + (size_t)t0 * d->QKV + (size_t)h * HD, (int)d->QKV);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HD, qb, 1.0f, dS, nk,
                base + (size_t)t0 * d->QKV + (size_t)h * HD, (int)d->QKV, 1.0f, dbase + koff,
                (int)d->QKV);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HD, qb, 1.0f, P, nk, dO, (int)d->C,
                1.0f, dbase + voff, (int)d->QKV);
}

void sdp_cpu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, const int32_t *seg, int B, int T, int NH, int NKV,
                           int HD, float *ws)
{
    const struct att_dims d = dims(T, NH, NKV, HD);

    for (size_t r = 0; r < (size_t)B * T; r++) /* dk and dv accumulate: start from zero */
        memset(dqkv + r * d.QKV + d.C, 0, 2 * (size_t)NKV * HD * sizeof(*dqkv));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t0 = 0; t0 < T; t0 += ATT_QB) {
                const int qb = T - t0 < ATT_QB ? T - t0 : ATT_QB;
                const size_t row = (size_t)b * T + t0;
                bwd_block(dqkv + (size_t)b * T * d.QKV, qkv + (size_t)b * T * d.QKV,
                          dout + row * d.C + (size_t)h * HD, out + row * d.C + (size_t)h * HD,
                          lse + ((size_t)b * NH + h) * T + t0, seg ? seg + row : NULL, &d, h, t0,
                          qb, ws);
            }
}
