/* SPDX-License-Identifier: MIT */
/* AdamW on one fp32 parameter segment with the operation order of PyTorch's torch.optim.AdamW
 * (single-tensor path, https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html):
 * scalars in double, rounded once to fp32 as PyTorch rounds Python floats; elementwise math in
 * fp32, each operation rounded on its own (built with -ffp-contract=off: no FMA, whatever the
 * target), so adamw_avx512.c can reproduce it bit for bit.  Gradients in fp32 or bf16.  Also the
 * gradient sum of squares (for clipping) in double.  No allocation.
 * Tests: tests/kernels/test_kernels_adamw.c (fp64 oracle, several steps),
 * tests/kernels/test_kernels_host_simd.c (the AVX-512 kernel against this one). */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

double sdp_cpu_sumsq_ref(const float *g, size_t n)
{
    double s[SDP_SUMSQ_LANES] = { 0.0 };
    size_t i = 0;

    /* element i goes to partial sum i % 32, in increasing i (each product is exact in double) */
    for (; i + SDP_SUMSQ_LANES <= n; i += SDP_SUMSQ_LANES)
        for (int j = 0; j < SDP_SUMSQ_LANES; j++)
            s[j] += (double)g[i + j] * g[i + j];
    for (int j = 0; i < n; i++, j++)
        s[j] += (double)g[i] * g[i];
    /* then halves added pairwise: s[j] += s[j + w] for w = 16, 8, 4, 2, 1 */
    for (int w = SDP_SUMSQ_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            s[j] += s[j + w];
    return s[0];
}

void sdp_cpu_adamw_consts(struct sdp_adamw_consts *c, const struct sdp_adamw_hp *hp, int decay)
{
    const double b1 = hp->beta1, b2 = hp->beta2;
    const double bc1 = 1.0 - pow(b1, hp->step), bc2 = 1.0 - pow(b2, hp->step);

    c->wd_mul = decay ? (float)(1.0 - (double)hp->lr * hp->weight_decay) : 1.0f;
    c->w1 = (float)(1.0 - b1); /* m.lerp_(g, 1 - beta1) */
    c->omw1 = 1.0f - c->w1;
    c->b2 = hp->beta2;
    c->c2 = (float)(1.0 - b2);
    c->nstep = -(float)((double)hp->lr / bc1);
    c->bc2_sqrt = (float)sqrt(bc2);
    c->eps = hp->eps;
    c->gscale = hp->gscale;
    c->lerp_small = fabsf(c->w1) < 0.5f;
}

/* A NaN result is stored as the quiet NaN 0x7fc00000.  When two NaN operands meet, x86 returns the
 * first one, and which one comes first is the compiler's choice (it may swap the operands of + and
 * x): without this, NaN payloads and signs would depend on the build. */
static inline float canon_nan(float x)
{
    return isnan(x) ? NAN : x;
}

/* One element: the update of p, m, v from the raw gradient g (fp32 or widened bf16); returns p.
 * The vector kernel performs exactly these operations in this order. */
static inline float adamw_elem(float *restrict p, float *restrict m, float *restrict v, float g,
                               const struct sdp_adamw_consts *c)
{
    const float gi = g * c->gscale;
    float pi = *p * c->wd_mul; /* also when not decaying (x 1): a signalling NaN gets quieted */
    float mi = *m;
    /* ATen's lerp: self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w) */
    mi = c->lerp_small ? mi + c->w1 * (gi - mi) : gi - (gi - mi) * c->omw1;
    const float vi = *v * c->b2 + c->c2 * gi * gi;
    const float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
    pi = canon_nan(pi + c->nstep * mi / denom);
    *p = pi;
    *m = canon_nan(mi);
    *v = canon_nan(vi);
    return pi;
}

static inline void store_work(uint16_t *restrict work_bf16, float *restrict work_f32, size_t i,
                              float pi)
{
    if (work_f32)
        work_f32[i] = pi;
    if (work_bf16)
        work_bf16[i] = sdp_f32_to_bf16(pi);
}

void sdp_cpu_adamw_ref(float *restrict p, float *restrict g, float *restrict m, float *restrict v,
                       uint16_t *restrict work_bf16, float *restrict work_f32, size_t n,
                       const struct sdp_adamw_hp *hp, int decay, int zero_grad)
{
    struct sdp_adamw_consts c;

    sdp_cpu_adamw_consts(&c, hp, decay);
    for (size_t i = 0; i < n; i++) {
        store_work(work_bf16, work_f32, i, adamw_elem(&p[i], &m[i], &v[i], g[i], &c));
        if (zero_grad)
            g[i] = 0.0f;
    }
}

void sdp_cpu_adamw_gbf16_ref(float *restrict p, uint16_t *restrict g, float *restrict m,
                             float *restrict v, uint16_t *restrict work_bf16,
                             float *restrict work_f32, size_t n, const struct sdp_adamw_hp *hp,
                             int decay, int zero_grad)
{
    struct sdp_adamw_consts c;

    sdp_cpu_adamw_consts(&c, hp, decay);
    for (size_t i = 0; i < n; i++) {
        const float gi = sdp_bf16_to_f32(g[i]);
        store_work(work_bf16, work_f32, i, adamw_elem(&p[i], &m[i], &v[i], gi, &c));
        if (zero_grad)
            g[i] = 0;
    }
}
