/* SPDX-License-Identifier: MIT */
/* AdamW on one fp32 parameter segment with the operation order of PyTorch's torch.optim.AdamW
 * (single-tensor path, https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html):
 * scalars in double, rounded once to fp32 as PyTorch rounds Python floats; elementwise math in
 * fp32.  Also the gradient sum of squares (for clipping) in double.  No allocation.
 * Test: tests/kernels/test_kernels_adamw.c (fp64 oracle, several steps). */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

double sdp_cpu_sumsq_ref(const float *g, size_t n)
{
    double s[4] = { 0.0, 0.0, 0.0, 0.0 };
    size_t i = 0;

    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++)
            s[j] += (double)g[i + j] * g[i + j];
    for (; i < n; i++)
        s[i % 4] += (double)g[i] * g[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

void sdp_cpu_adamw_ref(float *restrict p, float *restrict g, float *restrict m, float *restrict v,
                       uint16_t *restrict work_bf16, float *restrict work_f32, size_t n,
                       const struct sdp_adamw_hp *hp, int decay, int zero_grad)
{
    const double b1 = hp->beta1, b2 = hp->beta2;
    const double bc1 = 1.0 - pow(b1, hp->step), bc2 = 1.0 - pow(b2, hp->step);
    const float wd_mul = decay ? (float)(1.0 - (double)hp->lr * hp->weight_decay) : 1.0f;
    const float w1 = (float)(1.0 - b1); /* m.lerp_(g, 1 - beta1) */
    const float b2f = hp->beta2, c2 = (float)(1.0 - b2);
    const float step_size = (float)((double)hp->lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float eps = hp->eps, gscale = hp->gscale;

    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * gscale;
        float pi = p[i] * wd_mul;
        float mi = m[i];
        /* ATen's lerp: self + w (end - self) for |w| < 0.5, else end - (end - self)(1 - w) */
        mi = fabsf(w1) < 0.5f ? mi + w1 * (gi - mi) : gi - (gi - mi) * (1.0f - w1);
        const float vi = v[i] * b2f + c2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        pi = pi + (-step_size) * mi / denom;
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
        if (work_f32)
            work_f32[i] = pi;
        if (work_bf16)
            work_bf16[i] = sdp_f32_to_bf16(pi);
        if (zero_grad)
            g[i] = 0.0f;
    }
}
