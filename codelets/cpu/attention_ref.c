/* SPDX-License-Identifier: MIT */
/* Causal grouped-query attention on the fused qkv activation, the scalar reference; with segment
 * starts (document masking of packed rows) a query sees only the keys of its own document.  The
 * forward runs an online softmax over blocks of keys (flash-attention style): one block of scores
 * per query, never (T, T); the softmax denominator and the lse accumulate in double.  The backward
 * recomputes the probabilities from the saved lse; dk, dv accumulate in a fixed order (head,
 * query, key).
 * Test: tests/kernels/test_kernels_attention.c (fp64 oracle, checked by finite differences). */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

enum { KEY_BLOCK = 128 }; /* keys per online-softmax block: one stack row of scores */

static float dot(const float *restrict a, const float *restrict b, int n)
{
    float acc = 0.0f;
    for (int i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

/* qkv (B*T, QKV), QKV = (NH + 2 NKV) HD: row holds q (NH, HD) | k (NKV, HD) | v (NKV, HD).
 * out (B*T, NH*HD); lse (B, NH, T). */
void sdp_cpu_attention_fwd_ref(float *out, float *lse, const float *qkv, const int32_t *seg, int B,
                               int T, int NH, int NKV, int HD)
{
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const int group = NH / NKV;
    const float scale = (float)(1.0 / sqrt((double)HD));
    float sc[KEY_BLOCK];

    for (int b = 0; b < B; b++) {
        const float *base = qkv + (size_t)b * T * QKV;
        for (int h = 0; h < NH; h++) {
            const size_t koff = (size_t)(NH + h / group) * HD, voff = koff + (size_t)NKV * HD;
            for (int t = 0; t < T; t++) {
                const float *q = base + t * QKV + (size_t)h * HD;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * HD;
                const int lo = seg ? seg[(size_t)b * T + t] : 0; /* the document's first key */
                float m = -INFINITY;
                double l = 0.0;
                memset(o, 0, (size_t)HD * sizeof(*o));
                for (int s0 = lo; s0 <= t; s0 += KEY_BLOCK) {
                    const int s1 = t + 1 < s0 + KEY_BLOCK ? t + 1 : s0 + KEY_BLOCK;
                    float bm = -INFINITY;
                    for (int s = s0; s < s1; s++) {
                        sc[s - s0] = dot(q, base + s * QKV + koff, HD) * scale;
                        bm = sc[s - s0] > bm ? sc[s - s0] : bm;
                    }
                    if (bm > m) { /* new running max: rescale what was accumulated */
                        const float alpha = expf(m - bm);
                        for (int d = 0; d < HD; d++)
                            o[d] *= alpha;
                        l *= alpha;
                        m = bm;
                    }
                    for (int s = s0; s < s1; s++) {
                        const float p = expf(sc[s - s0] - m);
                        const float *v = base + s * QKV + voff;
                        l += p;
                        for (int d = 0; d < HD; d++)
                            o[d] += p * v[d];
                    }
                }
                const float inv = (float)(1.0 / l);
                for (int d = 0; d < HD; d++)
                    o[d] *= inv;
                lse[((size_t)b * NH + h) * T + t] = (float)((double)m + log(l));
            }
        }
    }
}

/* With P = softmax(S), S = scale q k^T (causal), O = P V:
 *   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D) with D_t = sum_d dO_td O_td,
 *   dQ = scale dS K,  dK = scale dS^T Q.                  (FlashAttention-2, Alg. 2) */
void sdp_cpu_attention_bwd_ref(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, const int32_t *seg, int B, int T, int NH, int NKV,
                               int HD)
{
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const int group = NH / NKV;
    const float scale = (float)(1.0 / sqrt((double)HD));

    /* dk and dv accumulate over query heads and positions: start from zero */
    for (size_t r = 0; r < (size_t)B * T; r++)
        memset(dqkv + r * QKV + C, 0, 2 * (size_t)NKV * HD * sizeof(*dqkv));

    for (int b = 0; b < B; b++) {
        const float *base = qkv + (size_t)b * T * QKV;
        float *dbase = dqkv + (size_t)b * T * QKV;
        for (int h = 0; h < NH; h++) {
            const size_t koff = (size_t)(NH + h / group) * HD, voff = koff + (size_t)NKV * HD;
            for (int t = 0; t < T; t++) {
                const size_t row = (size_t)b * T + t;
                const float *q = base + t * QKV + (size_t)h * HD;
                const float *dO = dout + row * C + (size_t)h * HD;
                const float *o = out + row * C + (size_t)h * HD;
                float *dq = dbase + t * QKV + (size_t)h * HD;
                const float L = lse[((size_t)b * NH + h) * T + t];
                double Dd = 0.0;
                for (int d = 0; d < HD; d++)
                    Dd += (double)dO[d] * o[d];
                const float D = (float)Dd;
                memset(dq, 0, (size_t)HD * sizeof(*dq));
                for (int s = seg ? seg[row] : 0; s <= t; s++) {
                    const float *k = base + s * QKV + koff, *v = base + s * QKV + voff;
                    float *dk = dbase + s * QKV + koff, *dv = dbase + s * QKV + voff;
                    const float p = expf(dot(q, k, HD) * scale - L);
                    const float ds = p * (dot(dO, v, HD) - D) * scale;
                    for (int d = 0; d < HD; d++) {
                        dq[d] += ds * k[d];
                        dk[d] += ds * q[d];
                        dv[d] += p * dO[d];
                    }
                }
            }
        }
    }
}
