/* SPDX-License-Identifier: MIT */
/* Per-head q/k RMSNorm (Qwen3; absent for Llama) then rotary embedding in Hugging Face's
 * rotate_half form, on the fused qkv activation; v passes through.  The angle is pos * inv_freq in
 * fp32 as in HF; its cos/sin are taken in double and rounded once.  Also builds inv_freq (with
 * Llama-3 scaling).  No allocation.
 * Test: tests/kernels/test_kernels_qknorm_rope.c (fp64 oracle, finite differences). */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

/* y = (x * rstd) * w over one head of HD values; returns rstd (double row sum, as rmsnorm_ref.c).
 */
static float head_norm(float *restrict y, const float *restrict x, const float *restrict w, int HD,
                       float eps)
{
    double ss = 0.0;
    for (int i = 0; i < HD; i++)
        ss += (double)x[i] * x[i];
    const float rs = (float)(1.0 / sqrt(ss / HD + (double)eps));
    for (int i = 0; i < HD; i++)
        y[i] = (x[i] * rs) * w[i];
    return rs;
}

/* Backward of head_norm in place: g (gradient of y) becomes the gradient of x; dw += g x rstd. */
static void head_norm_bwd(float *restrict g, float *restrict dw, const float *restrict x,
                          const float *restrict w, float rs, int HD)
{
    double dot = 0.0;
    for (int i = 0; i < HD; i++)
        dot += (double)g[i] * w[i] * x[i];
    const float c = (float)((double)rs * rs * rs * dot / HD);
    for (int i = 0; i < HD; i++) {
        dw[i] += g[i] * x[i] * rs;
        g[i] = rs * w[i] * g[i] - c * x[i];
    }
}

/* cos and sin times scale, as HF's emb.cos() * attention_scaling in fp32 (exact for scale 1) */
static void rope_angle(float *c, float *s, int pos, float inv_freq, float scale)
{
    const float ang = (float)pos * inv_freq; /* fp32 product, as HF's position_ids @ inv_freq */
    *c = (float)cos((double)ang) * scale;
    *s = (float)sin((double)ang) * scale;
}

void sdp_cpu_qknorm_rope_fwd_ref(float *out, float *rstd, const float *qkv, const float *qnorm_w,
                                 const float *knorm_w, const float *inv_freq, float scale,
                                 const int32_t *seg, int N, int T, int NH, int NKV, int HD,
                                 float eps)
{
    const int QKV = (NH + 2 * NKV) * HD, NQK = NH + NKV, half = HD / 2;

    for (int n = 0; n < N; n++) {
        const float *x = qkv + (size_t)n * QKV;
        float *y = out + (size_t)n * QKV;
        /* norm (or copy) of the q and k heads, copy of v */
        for (int h = 0; h < NQK; h++) {
            const float *w = h < NH ? qnorm_w : knorm_w;
            if (w)
                rstd[(size_t)n * NQK + h] = head_norm(y + h * HD, x + h * HD, w, HD, eps);
            else
                memcpy(y + h * HD, x + h * HD, (size_t)HD * sizeof(*y));
        }
        memcpy(y + NQK * HD, x + NQK * HD, (size_t)NKV * HD * sizeof(*y));
        /* rotate pairs (i, i + HD/2) of every q and k head by pos * inv_freq[i] */
        const int pos = n % T - (seg ? seg[n] : 0); /* restarting per document with seg */
        for (int i = 0; i < half; i++) {
            float c, s;
            rope_angle(&c, &s, pos, inv_freq[i], scale);
            for (int h = 0; h < NQK; h++) {
                float *yh = y + h * HD;
                const float a = yh[i], b = yh[i + half];
                yh[i] = a * c - b * s;
                yh[i + half] = b * c + a * s;
            }
        }
    }
}

void sdp_cpu_qknorm_rope_bwd_ref(float *dqkv, float *dqnorm_w, float *dknorm_w, const float *dout,
                                 const float *qkv, const float *qnorm_w, const float *knorm_w,
                                 const float *rstd, const float *inv_freq, float scale,
                                 const int32_t *seg, int N, int T, int NH, int NKV, int HD)
{
    const int QKV = (NH + 2 * NKV) * HD, NQK = NH + NKV, half = HD / 2;

    for (int n = 0; n < N; n++) {
        const float *g = dout + (size_t)n * QKV;
        const float *x = qkv + (size_t)n * QKV;
        float *dx = dqkv + (size_t)n * QKV;
        /* the inverse (transposed) rotation of the q and k gradients; dv copied */
        const int pos = n % T - (seg ? seg[n] : 0); /* restarting per document with seg */
        for (int i = 0; i < half; i++) {
            float c, s;
            rope_angle(&c, &s, pos, inv_freq[i], scale);
            for (int h = 0; h < NQK; h++) {
                const float a = g[h * HD + i], b = g[h * HD + i + half];
                dx[h * HD + i] = a * c + b * s;
                dx[h * HD + i + half] = b * c - a * s;
            }
        }
        if (HD % 2) /* an odd last element is not rotated */
            for (int h = 0; h < NQK; h++)
                dx[h * HD + HD - 1] = g[h * HD + HD - 1];
        memcpy(dx + NQK * HD, g + NQK * HD, (size_t)NKV * HD * sizeof(*dx));
        /* then the per-head norm's backward, in place */
        for (int h = 0; h < NQK; h++) {
            const float *w = h < NH ? qnorm_w : knorm_w;
            float *dw = h < NH ? dqnorm_w : dknorm_w;
            if (w)
                head_norm_bwd(dx + h * HD, dw, x + h * HD, w, rstd[(size_t)n * NQK + h], HD);
        }
    }
}

/* Hugging Face modeling_rope_utils.py: _compute_default_rope_parameters and, when factor > 0,
 * _compute_llama3_parameters (low frequencies divided by factor, high ones kept, a smooth blend
 * between). */
void sdp_cpu_rope_inv_freq(float *inv_freq, int HD, double theta, double factor,
                           double low_freq_factor, double high_freq_factor, int original_max_pos)
{
    const double pi = 3.14159265358979323846;

    for (int i = 0; i < HD / 2; i++) {
        double f = 1.0 / pow(theta, (double)(2 * i) / HD);
        if (factor > 0) {
            const double old_len = original_max_pos;
            const double low_wavelen = old_len / low_freq_factor;
            const double high_wavelen = old_len / high_freq_factor;
            const double wavelen = 2 * pi / f;
            if (wavelen > low_wavelen) {
                f = f / factor;
            } else if (!(wavelen < high_wavelen)) {
                const double smooth =
                    (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                f = (1 - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}
