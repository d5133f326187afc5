/* SPDX-License-Identifier: MIT */
/* RMSNorm over rows of length D (Hugging Face LlamaRMSNorm): y = (x * rstd) * w with
 * rstd = 1/sqrt(mean(x^2) + eps).  The row sums feeding rstd and the backward's dot product
 * accumulate in double; elementwise products stay fp32.  No allocation; dx may alias dres.
 * Test: tests/kernels/test_kernels_rmsnorm.c (fp64 oracle, checked by finite differences). */
#include "config.h"

#include <math.h>
#include <stddef.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

void sdp_cpu_rmsnorm_fwd_ref(float *restrict out, float *restrict rstd, const float *restrict x,
                             const float *restrict w, int R, int D, float eps)
{
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * D;
        float *yr = out + (size_t)r * D;
        double ss = 0.0;
        for (int i = 0; i < D; i++)
            ss += (double)xr[i] * xr[i];
        const float rs = (float)(1.0 / sqrt(ss / D + (double)eps));
        rstd[r] = rs;
        for (int i = 0; i < D; i++)
            yr[i] = (xr[i] * rs) * w[i];
    }
}

/* With y_i = x_i r w_i and r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / D, hence
 *   dx_j = r w_j g_j - (r^3 / D) x_j sum_i g_i w_i x_i,     dw_i += g_i x_i r. */
void sdp_cpu_rmsnorm_bwd_ref(float *dx, float *restrict dw, const float *dres,
                             const float *restrict dout, const float *restrict x,
                             const float *restrict w, const float *restrict rstd, int R, int D)
{
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * D;
        const float *gr = dout + (size_t)r * D;
        float *dxr = dx + (size_t)r * D;
        const float *dresr = dres ? dres + (size_t)r * D : NULL;
        const float rs = rstd[r];
        double dot = 0.0;
        for (int i = 0; i < D; i++)
            dot += (double)gr[i] * w[i] * xr[i];
        const float c = (float)((double)rs * rs * rs * dot / D);
        for (int i = 0; i < D; i++) {
            float v = rs * w[i] * gr[i] - c * xr[i];
            dxr[i] = dresr ? dresr[i] + v : v; /* same index read then written: alias-safe */
            dw[i] += gr[i] * xr[i] * rs;
        }
    }
}
