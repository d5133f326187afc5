/* SPDX-License-Identifier: MIT */
/* SwiGLU of the fused gate|up activation: out = silu(gate) * up, silu(g) = g * sigmoid(g), fp32.
 * sigmoid is 1/(1 + exp(-g)), which saturates cleanly to 0 or 1 for large |g| (no Inf/Inf NaN).
 * No allocation.  Test: tests/kernels/test_kernels_swiglu.c (fp64 oracle, finite differences). */
#include "config.h"

#include <math.h>
#include <stddef.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

/* gu (N, 2I): row n holds gate (I) | up (I); out (N, I). */
void sdp_cpu_swiglu_fwd_ref(float *restrict out, const float *restrict gu, int N, int I)
{
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * I, *u = g + I;
        float *o = out + (size_t)n * I;
        for (int i = 0; i < I; i++) {
            const float sig = 1.0f / (1.0f + expf(-g[i]));
            o[i] = g[i] * sig * u[i];
        }
    }
}

/* d silu(g)/dg = sig (1 + g (1 - sig));  dgate = dout * up * silu'(g),  dup = dout * silu(g). */
void sdp_cpu_swiglu_bwd_ref(float *restrict dgu, const float *restrict dout,
                            const float *restrict gu, int N, int I)
{
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * I, *u = g + I;
        const float *d = dout + (size_t)n * I;
        float *dg = dgu + (size_t)n * 2 * I, *du = dg + I;
        for (int i = 0; i < I; i++) {
            const float sig = 1.0f / (1.0f + expf(-g[i]));
            dg[i] = d[i] * u[i] * (sig * (1.0f + g[i] * (1.0f - sig)));
            du[i] = d[i] * (g[i] * sig);
        }
    }
}
