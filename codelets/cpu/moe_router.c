/* SPDX-License-Identifier: MIT */
/* The mixture-of-experts router (transformers' Qwen3MoeTopKRouter: linear, softmax in fp32, top-k,
 * optional renormalisation), its backward, and the load-balancing loss of
 * load_balancing_loss_func.  No allocation.  Test: tests/kernels/test_kernels_moe.c. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include <cblas.h>
#undef I /* <complex.h>, pulled in by OpenBLAS's cblas.h, defines I */

#include "codelets/cpu/moe.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

/* p (E) = softmax(z (E)): max subtracted, exp in fp32, the sum in double. */
static void softmax_row(float *p, const float *z, int E)
{
    float m = z[0];
    double s = 0.0;
    for (int e = 1; e < E; e++)
        m = z[e] > m ? z[e] : m;
    for (int e = 0; e < E; e++) {
        p[e] = expf(z[e] - m);
        s += p[e];
    }
    for (int e = 0; e < E; e++)
        p[e] = (float)(p[e] / s);
}

/* e comes after f in the top-k order: a lower probability, or an equal one and a higher id. */
static int after(const float *p, int e, int f)
{
    return p[e] < p[f] || (p[e] == p[f] && e > f);
}

/* The lowest id not among ids[0..k) (NaN probabilities order nothing: ids stay valid). */
static int first_free(const int32_t *ids, int k)
{
    for (int e = 0;; e++) {
        int taken = 0;
        for (int j = 0; j < k && !taken; j++)
            taken = ids[j] == e;
        if (!taken)
            return e;
    }
}

/* The K largest of p (E) by decreasing value, ties to the lower index: pick k is the largest of
 * the entries after pick k - 1 in that order, one pass over E each (O(E K)). */
static void topk_row(int32_t *ids, float *w, const float *p, int E, int K, int norm)
{
    float s = 0.0f;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if ((k == 0 || after(p, e, ids[k - 1])) && (best < 0 || p[e] > p[best]))
                best = e;
        ids[k] = best >= 0 ? best : first_free(ids, k);
        w[k] = p[ids[k]];
        s += w[k];
    }
    for (int k = 0; norm && k < K; k++)
        w[k] /= s;
}

void sdp_cpu_moe_router_fwd(float *logits, float *probs, struct sdp_moe_routing *r, const float *x,
                            const float *wr, int C, int norm_topk)
{
    const int N = r->N, E = r->E, K = r->K;
    sdp_cpu_matmul_fwd(logits, NULL, x, wr, N, C, E);
    for (int n = 0; n < N; n++) {
        softmax_row(probs + (size_t)n * E, logits + (size_t)n * E, E);
        topk_row(r->ids + (size_t)n * K, r->wts + (size_t)n * K, probs + (size_t)n * E, E, K,
                 norm_topk);
    }
}

/* With S = sum_j p_j over the picked j and w_k = p_k / S: dp_k = (dw_k - sum_j dw_j w_j) / S. */
void sdp_cpu_moe_topk_bwd(float *dprobs, const float *dwts, const float *probs,
                          const struct sdp_moe_routing *r, int norm_topk)
{
    const int E = r->E, K = r->K;
    memset(dprobs, 0, (size_t)r->N * E * sizeof(*dprobs));
    for (int n = 0; n < r->N; n++) {
        const int32_t *id = r->ids + (size_t)n * K;
        const float *dw = dwts + (size_t)n * K, *p = probs + (size_t)n * E;
        float *dp = dprobs + (size_t)n * E;
        double s = 0.0, dot = 0.0;
        if (!norm_topk) {
            for (int k = 0; k < K; k++)
                dp[id[k]] = dw[k];
            continue;
        }
        for (int k = 0; k < K; k++)
            s += p[id[k]];
        for (int k = 0; k < K; k++)
            dot += (double)dw[k] * (p[id[k]] / s);
        for (int k = 0; k < K; k++)
            dp[id[k]] = (float)((dw[k] - dot) / s);
    }
}

void sdp_cpu_moe_softmax_bwd(float *dlogits, const float *dprobs, const float *probs, int N, int E)
{
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * E, *dp = dprobs + (size_t)n * E;
        float *dz = dlogits + (size_t)n * E;
        double dot = 0.0;
        for (int e = 0; e < E; e++)
            dot += (double)p[e] * dp[e];
        for (int e = 0; e < E; e++)
            dz[e] = (float)(p[e] * (dp[e] - dot));
    }
}

void sdp_cpu_moe_router_bwd(float *dx, float *dwr, const float *dlogits, const float *x,
                            const float *wr, int N, int C, int E)
{
    if (N <= 0 || C <= 0 || E <= 0)
        return;
    /* dx (N, C) += dlogits (N, E) . wr (E, C) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, E, 1.0f, dlogits, E, wr, C, 1.0f,
                dx, C);
    if (dwr)
        sdp_cpu_matmul_bwd_weight(dwr, dlogits, x, N, C, E);
}

void sdp_cpu_moe_aux_stats(double *count, double *psum, const float *probs,
                           const struct sdp_moe_routing *r)
{
    for (size_t s = 0; s < (size_t)r->N * r->K; s++)
        count[r->ids[s]] += 1.0;
    for (int n = 0; n < r->N; n++)
        for (int e = 0; e < r->E; e++)
            psum[e] += probs[(size_t)n * r->E + e];
}

double sdp_cpu_moe_aux_loss(const double *count, const double *psum, double rows, int E)
{
    double s = 0.0;
    for (int e = 0; e < E; e++)
        s += (count[e] / rows) * (psum[e] / rows);
    return E * s;
}

void sdp_cpu_moe_aux_bwd(float *dprobs, const double *count, double rows, int N, int E, float scale)
{
    for (int e = 0; e < E; e++) {
        const float g = (float)(scale * (double)E * count[e] / (rows * rows));
        for (int n = 0; n < N; n++)
            dprobs[(size_t)n * E + e] += g;
    }
}
