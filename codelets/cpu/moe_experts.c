/* SPDX-License-Identifier: MIT */
/* The mixture-of-experts token permutation (tokens grouped by expert, in token order within an
 * expert), the experts' SwiGLU MLPs on their rows of the permuted tokens (the dense layer's GEMMs
 * and SwiGLU kernels, one expert at a time), the weighted combine back to token order, and the
 * backward of all of it.  An expert with no token is never read and gets no gradient.  No
 * allocation.  Test: tests/kernels/test_kernels_moe.c. */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "codelets/cpu/moe.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

int sdp_cpu_moe_permute(struct sdp_moe_routing *r)
{
    const int S = r->N * r->K;
    int used = 0;
    memset(r->counts, 0, (size_t)r->E * sizeof(*r->counts));
    for (int s = 0; s < S; s++)
        r->counts[r->ids[s]]++;
    r->offsets[0] = 0;
    for (int e = 0; e < r->E; e++) {
        r->offsets[e + 1] = r->offsets[e] + r->counts[e];
        used += r->counts[e] > 0;
    }
    /* slots in increasing order: each expert's rows fill in token order (stable) */
    for (int e = 0; e < r->E; e++)
        r->counts[e] = 0;
    for (int s = 0; s < S; s++) {
        const int e = r->ids[s], row = r->offsets[e] + r->counts[e]++;
        r->rows[row] = s;
        r->where[s] = row;
    }
    return used;
}

void sdp_cpu_moe_gather(float *xp, const float *x, const struct sdp_moe_routing *r, int C)
{
    for (int i = 0; i < r->N * r->K; i++)
        memcpy(xp + (size_t)i * C, x + (size_t)(r->rows[i] / r->K) * C, (size_t)C * sizeof(*x));
}

void sdp_cpu_moe_experts_fwd(float *y, float *gu, float *h, const float *xp, const float *wgu,
                             const float *wdown, const struct sdp_moe_routing *r, int C, int IM)
{
    for (int e = 0; e < r->E; e++) {
        const size_t r0 = (size_t)r->offsets[e];
        const int n = r->counts[e];
        if (n == 0)
            continue;
        sdp_cpu_matmul_fwd(gu + r0 * 2 * IM, NULL, xp + r0 * C, wgu + (size_t)e * 2 * IM * C, n, C,
                           2 * IM);
        sdp_cpu_swiglu_fwd_ref(h + r0 * IM, gu + r0 * 2 * IM, n, IM);
        sdp_cpu_matmul_fwd(y + r0 * C, NULL, h + r0 * IM, wdown + (size_t)e * C * IM, n, IM, C);
    }
}

void sdp_cpu_moe_combine(float *out, const float *y, const struct sdp_moe_routing *r, int C)
{
    for (int n = 0; n < r->N; n++) {
        float *o = out + (size_t)n * C;
        for (int k = 0; k < r->K; k++) {
            const size_t s = (size_t)n * r->K + k;
            const float w = r->wts[s], *yr = y + (size_t)r->where[s] * C;
            for (int c = 0; c < C; c++)
                o[c] += w * yr[c];
        }
    }
}

void sdp_cpu_moe_combine_bwd(float *dy, float *dwts, const float *dout, const float *y,
                             const struct sdp_moe_routing *r, int C)
{
    for (size_t s = 0; s < (size_t)r->N * r->K; s++) {
        const float *d = dout + (s / r->K) * C, *yr = y + (size_t)r->where[s] * C;
        float *dyr = dy + (size_t)r->where[s] * C;
        double dot = 0.0;
        for (int c = 0; c < C; c++) {
            dyr[c] = r->wts[s] * d[c];
            dot += (double)d[c] * yr[c];
        }
        dwts[s] = (float)dot;
    }
}

void sdp_cpu_moe_experts_bwd(float *dxp, float *dwgu, float *dwdown, float *dgu, float *dh,
                             const float *dy, const float *xp, const float *gu, const float *h,
                             const float *wgu, const float *wdown, const struct sdp_moe_routing *r,
                             int C, int IM)
{
    for (int e = 0; e < r->E; e++) {
        const size_t r0 = (size_t)r->offsets[e];
        const size_t ogu = (size_t)e * 2 * IM * C, odn = (size_t)e * C * IM;
        const int n = r->counts[e];
        if (n == 0)
            continue;
        /* y = h . wdown^T: dh = dy . wdown, dwdown += dy^T . h */
        sdp_cpu_matmul_bwd_data(dh + r0 * IM, dy + r0 * C, wdown + odn, n, IM, C);
        if (dwdown)
            sdp_cpu_matmul_bwd_weight(dwdown + odn, dy + r0 * C, h + r0 * IM, n, IM, C);
        sdp_cpu_swiglu_bwd_ref(dgu + r0 * 2 * IM, dh + r0 * IM, gu + r0 * 2 * IM, n, IM);
        /* gu = xp . wgu^T: dxp = dgu . wgu, dwgu += dgu^T . xp */
        sdp_cpu_matmul_bwd_data(dxp + r0 * C, dgu + r0 * 2 * IM, wgu + ogu, n, C, 2 * IM);
        if (dwgu)
            sdp_cpu_matmul_bwd_weight(dwgu + ogu, dgu + r0 * 2 * IM, xp + r0 * C, n, C, 2 * IM);
    }
}

void sdp_cpu_moe_scatter_bwd(float *dx, const float *dxp, const struct sdp_moe_routing *r, int C)
{
    for (int n = 0; n < r->N; n++) {
        float *d = dx + (size_t)n * C;
        for (int k = 0; k < r->K; k++) {
            const float *g = dxp + (size_t)r->where[(size_t)n * r->K + k] * C;
            for (int c = 0; c < C; c++)
                d[c] += g[c];
        }
    }
}
