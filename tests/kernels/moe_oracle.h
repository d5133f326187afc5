/* SPDX-License-Identifier: MIT */
/* The fp64 oracle of the mixture-of-experts kernels (codelets/cpu/moe.h): one sparse block
 * (router, top-k, experts, combine, load-balancing loss) forward and backward, token by token
 * without any permutation, from the same fp32 inputs as the kernels.  Beside every value it
 * carries a first-order bound on the error the fp32 kernels may make (running error analysis):
 *   - a sum of k products, as a GEMM or the combine computes it: (k + 1) u sum |terms| (Higham,
 *     Thm 3.1, plus the rounding of each product), plus the inputs' bounds times the other factor;
 *   - an element-wise fp32 function (silu, its derivative): SDP_RTOL_ELEM (16 u) of the sum of the
 *     absolute terms, plus the inputs' bounds times the partial derivatives;
 *   - the softmax: exp(z_e - m) off by 3 u relative (expf's ulp, the subtraction's rounding is
 *     u |z_e - m| more) plus the logits' bound, the normalisation adding the weighted mean of those
 *     and one rounding;
 *   - sums done in double, then rounded to fp32: one u of the result.
 * A kernel's value passes when |got - ref| <= SDP_SAFETY * bound (SDP_SAFETY absorbs the second
 * order terms).  The oracle's own derivatives are checked against central finite differences of
 * its fp64 forward (moe_oracle_objective). */
#ifndef SDP_TEST_MOE_ORACLE_H
#define SDP_TEST_MOE_ORACLE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/lib/sdp_test.h"

#define U SDP_U32

struct moe_in {
    int N, C, E, K, IM, norm;
    double coef; /* the load-balancing loss's weight in the objective */
    const float *x, *wr, *wgu, *wdown, *dout;
};

/* value and error bound of every intermediate; slots s = n*K + k */
struct moe_ref {
    double *z, *ez, *p, *ep;                  /* (N, E) logits, probs */
    int *ids;                                 /* (N, K) */
    double *w, *ew;                           /* (N, K) routing weights */
    double *gu, *egu, *h, *eh;                /* (S, 2IM), (S, IM) */
    double *y, *ey, *out, *eout;              /* (S, C), (N, C) */
    double *count, aux, eaux;                 /* (E) */
    double *dw, *edw, *dp, *edp;              /* (N, K), (N, E) */
    double *dz, *edz, *dx, *edx;              /* (N, E), (N, C) */
    double *dwr, *edwr;                       /* (E, C) */
    double *dwgu, *edwgu;                     /* (E, 2IM, C) */
    double *dwdown, *edwdown;                 /* (E, C, IM) */
    double *dy, *edy, *dh, *edh, *dgu, *edgu; /* per slot */
};

static double *moe_zalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p)
        abort();
    return p;
}

static void moe_ref_alloc(struct moe_ref *r, const struct moe_in *in)
{
    const size_t N = in->N, C = in->C, E = in->E, K = in->K, IM = in->IM, S = N * K;
    double **a[] = { &r->z, &r->ez, &r->p, &r->ep, &r->dp, &r->edp, &r->dz, &r->edz };
    for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
        *a[i] = moe_zalloc(N * E);
    r->ids = calloc(S, sizeof(int));
    r->w = moe_zalloc(S), r->ew = moe_zalloc(S), r->dw = moe_zalloc(S), r->edw = moe_zalloc(S);
    r->gu = moe_zalloc(S * 2 * IM), r->egu = moe_zalloc(S * 2 * IM);
    r->dgu = moe_zalloc(S * 2 * IM), r->edgu = moe_zalloc(S * 2 * IM);
    r->h = moe_zalloc(S * IM), r->eh = moe_zalloc(S * IM);
    r->dh = moe_zalloc(S * IM), r->edh = moe_zalloc(S * IM);
    r->y = moe_zalloc(S * C), r->ey = moe_zalloc(S * C);
    r->dy = moe_zalloc(S * C), r->edy = moe_zalloc(S * C);
    r->out = moe_zalloc(N * C), r->eout = moe_zalloc(N * C);
    r->dx = moe_zalloc(N * C), r->edx = moe_zalloc(N * C);
    r->count = moe_zalloc(E);
    r->dwr = moe_zalloc(E * C), r->edwr = moe_zalloc(E * C);
    r->dwgu = moe_zalloc(E * 2 * IM * C), r->edwgu = moe_zalloc(E * 2 * IM * C);
    r->dwdown = moe_zalloc(E * C * IM), r->edwdown = moe_zalloc(E * C * IM);
}

static void moe_ref_free(struct moe_ref *r)
{
    double *a[] = { r->z,     r->ez,   r->p,    r->ep,   r->dp,    r->edp,    r->dz,
                    r->edz,   r->w,    r->ew,   r->dw,   r->edw,   r->gu,     r->egu,
                    r->dgu,   r->edgu, r->h,    r->eh,   r->dh,    r->edh,    r->y,
                    r->ey,    r->dy,   r->edy,  r->out,  r->eout,  r->dx,     r->edx,
                    r->count, r->dwr,  r->edwr, r->dwgu, r->edwgu, r->dwdown, r->edwdown };
    for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
        free(a[i]);
    free(r->ids);
}

static double moe_sig(double g)
{
    return 1.0 / (1.0 + exp(-g));
}

/* softmax of one row with its bounds (see the header comment) */
static void moe_softmax(double *p, double *ep, const double *z, const double *ez, int E)
{
    double m = z[0], s = 0, mean = 0;
    for (int e = 1; e < E; e++)
        m = z[e] > m ? z[e] : m;
    for (int e = 0; e < E; e++)
        s += exp(z[e] - m);
    for (int e = 0; e < E; e++)
        p[e] = exp(z[e] - m) / s;
    for (int e = 0; e < E; e++)
        mean += p[e] * (3 * U + U * fabs(z[e] - m) + ez[e]);
    for (int e = 0; e < E; e++)
        ep[e] = p[e] * (3 * U + U * fabs(z[e] - m) + ez[e] + mean + U);
}

/* the K largest of p by decreasing value, ties to the lower index (the kernels' rule) */
static void moe_topk(int *ids, const double *p, int E, int K)
{
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++)
                taken |= ids[j] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        ids[k] = best;
    }
}

/* Router, top-k and weights of token n. fixed: keep r->ids (finite differences). */
static void moe_route(struct moe_ref *r, const struct moe_in *in, int n, int fixed)
{
    const int E = in->E, K = in->K, C = in->C;
    double *z = r->z + (size_t)n * E, *ez = r->ez + (size_t)n * E;
    double *p = r->p + (size_t)n * E, *ep = r->ep + (size_t)n * E, s = 0, es = 0;
    int *ids = r->ids + (size_t)n * K;
    for (int e = 0; e < E; e++) {
        double acc = 0, abs_ = 0;
        for (int c = 0; c < C; c++) {
            const double t = (double)in->x[(size_t)n * C + c] * in->wr[(size_t)e * C + c];
            acc += t, abs_ += fabs(t);
        }
        z[e] = acc, ez[e] = (C + 1) * U * abs_;
    }
    moe_softmax(p, ep, z, ez, E);
    if (!fixed)
        moe_topk(ids, p, E, K);
    for (int k = 0; k < K; k++)
        s += p[ids[k]], es += ep[ids[k]];
    es += in->norm ? (K - 1) * U * s : 0;
    for (int k = 0; k < K; k++) {
        const double pk = p[ids[k]], e = ep[ids[k]];
        r->w[n * K + k] = in->norm ? pk / s : pk;
        r->ew[n * K + k] = in->norm ? e / s + pk * es / (s * s) + U * pk / s : e;
    }
}

/* Expert ids[k] of token n on x[n]: gu, h, y with their bounds. */
static void moe_expert_fwd(struct moe_ref *r, const struct moe_in *in, int n, int k)
{
    const int C = in->C, IM = in->IM, K = in->K, e = r->ids[n * K + k];
    const size_t s = (size_t)n * K + k;
    const float *wgu = in->wgu + (size_t)e * 2 * IM * C, *wd = in->wdown + (size_t)e * C * IM;
    double *gu = r->gu + s * 2 * IM, *egu = r->egu + s * 2 * IM;
    double *h = r->h + s * IM, *eh = r->eh + s * IM;
    for (int j = 0; j < 2 * IM; j++) {
        double acc = 0, abs_ = 0;
        for (int c = 0; c < C; c++) {
            const double t = (double)in->x[(size_t)n * C + c] * wgu[(size_t)j * C + c];
            acc += t, abs_ += fabs(t);
        }
        gu[j] = acc, egu[j] = (C + 1) * U * abs_;
    }
    for (int i = 0; i < IM; i++) {
        const double g = gu[i], u = gu[IM + i], sg = moe_sig(g);
        const double d1 = sg * (1 + g * (1 - sg)); /* silu'(g) */
        h[i] = g * sg * u;
        eh[i] = SDP_RTOL_ELEM * fabs(h[i]) + fabs(u * d1) * egu[i] + fabs(g * sg) * egu[IM + i];
    }
    for (int c = 0; c < C; c++) {
        double acc = 0, abs_ = 0, prop = 0;
        for (int i = 0; i < IM; i++) {
            acc += h[i] * wd[(size_t)c * IM + i], abs_ += fabs(h[i] * wd[(size_t)c * IM + i]);
            prop += eh[i] * fabs(wd[(size_t)c * IM + i]);
        }
        r->y[s * C + c] = acc, r->ey[s * C + c] = (IM + 1) * U * abs_ + prop;
    }
}

/* The whole forward; returns the objective sum_n dout[n] . out[n] + coef * aux. */
static double moe_oracle_fwd(struct moe_ref *r, const struct moe_in *in, int fixed)
{
    const int N = in->N, C = in->C, E = in->E, K = in->K;
    double obj = 0, psum, eps, rows = N;
    for (int n = 0; n < N; n++) {
        moe_route(r, in, n, fixed);
        for (int k = 0; k < K; k++)
            moe_expert_fwd(r, in, n, k);
        for (int c = 0; c < C; c++) {
            double acc = 0, abs_ = 0, prop = 0;
            for (int k = 0; k < K; k++) {
                const size_t s = (size_t)n * K + k;
                acc += r->w[s] * r->y[s * C + c], abs_ += fabs(r->w[s] * r->y[s * C + c]);
                prop += r->ew[s] * fabs(r->y[s * C + c]) + fabs(r->w[s]) * r->ey[s * C + c];
            }
            r->out[(size_t)n * C + c] = acc;
            r->eout[(size_t)n * C + c] = (K + 1) * U * abs_ + prop;
            obj += in->dout[(size_t)n * C + c] * acc;
        }
    }
    for (int e = 0; e < E; e++)
        r->count[e] = 0;
    for (int s = 0; s < N * K; s++)
        r->count[r->ids[s]] += 1;
    r->aux = 0, r->eaux = 0;
    for (int e = 0; e < E; e++) {
        psum = 0, eps = 0;
        for (int n = 0; n < N; n++)
            psum += r->p[(size_t)n * E + e], eps += r->ep[(size_t)n * E + e];
        r->aux += E * (r->count[e] / rows) * (psum / rows);
        r->eaux += E * (r->count[e] / rows) * (eps / rows);
    }
    r->eaux += 4.0 * N * E * ldexp(1.0, -53) * r->aux; /* the kernels' double sums */
    return obj + in->coef * r->aux;
}

/* Backward of slot s = (n, k) from dout[n]: dwts, dy, dh, dgu, the expert weights' gradients and
 * the expert path's part of dx with its absolute terms (dxabs) and propagated bounds (dxprop). */
static void moe_expert_bwd(struct moe_ref *r, const struct moe_in *in, int n, int k, double *dxabs,
                           double *dxprop)
{
    const int C = in->C, IM = in->IM, K = in->K, e = r->ids[n * K + k];
    const size_t s = (size_t)n * K + k;
    const double ce = (r->count[e] + 1) * U;
    const float *x = in->x + (size_t)n * C, *d = in->dout + (size_t)n * C;
    const float *wgu = in->wgu + (size_t)e * 2 * IM * C, *wd = in->wdown + (size_t)e * C * IM;
    double *dy = r->dy + s * C, *edy = r->edy + s * C, *dh = r->dh + s * IM, *edh = r->edh + s * IM;
    double *dgu = r->dgu + s * 2 * IM, *edgu = r->edgu + s * 2 * IM, acc = 0, abs_ = 0, prop = 0;
    const double *y = r->y + s * C, *ey = r->ey + s * C, *h = r->h + s * IM, *eh = r->eh + s * IM;
    const double *gu = r->gu + s * 2 * IM, *egu = r->egu + s * 2 * IM;
    for (int c = 0; c < C; c++) {
        acc += d[c] * y[c], abs_ += fabs(d[c] * y[c]), prop += fabs(d[c]) * ey[c];
        dy[c] = r->w[s] * d[c];
        edy[c] = r->ew[s] * fabs(d[c]) + U * fabs(dy[c]);
    }
    r->dw[s] = acc, r->edw[s] = U * abs_ + prop;
    for (int i = 0; i < IM; i++) {
        acc = 0, abs_ = 0, prop = 0;
        for (int c = 0; c < C; c++) {
            const double w = wd[(size_t)c * IM + i];
            acc += dy[c] * w, abs_ += fabs(dy[c] * w), prop += edy[c] * fabs(w);
            r->dwdown[((size_t)e * C + c) * IM + i] += dy[c] * h[i];
            r->edwdown[((size_t)e * C + c) * IM + i] +=
                ce * fabs(dy[c] * h[i]) + edy[c] * fabs(h[i]) + fabs(dy[c]) * eh[i];
        }
        dh[i] = acc, edh[i] = (C + 1) * U * abs_ + prop;
    }
    for (int i = 0; i < IM; i++) {
        const double g = gu[i], u = gu[IM + i], sg = moe_sig(g), dd = dh[i];
        const double s1 = sg * (1 + g * (1 - sg)), s2 = sg * (1 - sg) * (2 + g * (1 - 2 * sg));
        dgu[i] = dd * u * s1;
        dgu[IM + i] = dd * g * sg;
        edgu[i] = SDP_RTOL_ELEM * fabs(dd * u) * sg * (1 + fabs(g) * (1 - sg)) +
                  fabs(u * s1) * edh[i] + fabs(dd * s1) * egu[IM + i] + fabs(dd * u * s2) * egu[i];
        edgu[IM + i] =
            SDP_RTOL_ELEM * fabs(dgu[IM + i]) + fabs(g * sg) * edh[i] + fabs(dd * s1) * egu[i];
    }
    for (int c = 0; c < C; c++) {
        acc = 0;
        for (int j = 0; j < 2 * IM; j++) {
            const double w = wgu[(size_t)j * C + c];
            acc += dgu[j] * w, dxabs[c] += fabs(dgu[j] * w), dxprop[c] += edgu[j] * fabs(w);
            r->dwgu[((size_t)e * 2 * IM + j) * C + c] += dgu[j] * x[c];
            r->edwgu[((size_t)e * 2 * IM + j) * C + c] +=
                ce * fabs(dgu[j] * x[c]) + edgu[j] * fabs(x[c]);
        }
        r->dx[(size_t)n * C + c] += acc;
    }
}

/* d objective / d probs of token n: through the top-k (and its renormalisation), plus the
 * load-balancing loss's coef * E * count_e / N^2. */
static void moe_dprobs(struct moe_ref *r, const struct moe_in *in, int n)
{
    const int E = in->E, K = in->K, *ids = r->ids + (size_t)n * K;
    double *dp = r->dp + (size_t)n * E, *edp = r->edp + (size_t)n * E;
    const double *p = r->p + (size_t)n * E, *ep = r->ep + (size_t)n * E;
    const double *dw = r->dw + (size_t)n * K, *edw = r->edw + (size_t)n * K;
    double s = 0, es = 0, dot = 0, edot = 0;
    for (int k = 0; k < K; k++)
        s += p[ids[k]], es += ep[ids[k]];
    for (int k = 0; k < K; k++) {
        const double w = p[ids[k]] / s, ew = ep[ids[k]] / s + w * es / s;
        dot += dw[k] * w, edot += edw[k] * w + fabs(dw[k]) * ew;
    }
    for (int k = 0; k < K; k++) {
        if (!in->norm) {
            dp[ids[k]] = dw[k], edp[ids[k]] = edw[k];
            continue;
        }
        dp[ids[k]] = (dw[k] - dot) / s;
        edp[ids[k]] = U * fabs(dp[ids[k]]) + (edw[k] + edot) / s + fabs(dw[k] - dot) * es / s / s;
    }
    for (int e = 0; e < E; e++) {
        const double g = in->coef * E * r->count[e] / ((double)in->N * in->N);
        dp[e] += g;
        edp[e] += U * fabs(g) + U * fabs(dp[e]);
    }
}

/* The softmax's and the router's backward of token n: dz, then dwr and dx's router part. */
static void moe_router_bwd(struct moe_ref *r, const struct moe_in *in, int n, double *dxabs,
                           double *dxprop)
{
    const int E = in->E, C = in->C;
    const double *p = r->p + (size_t)n * E, *ep = r->ep + (size_t)n * E;
    const double *dp = r->dp + (size_t)n * E, *edp = r->edp + (size_t)n * E;
    double *dz = r->dz + (size_t)n * E, *edz = r->edz + (size_t)n * E, dot = 0, edot = 0;
    for (int e = 0; e < E; e++)
        dot += p[e] * dp[e], edot += ep[e] * fabs(dp[e]) + p[e] * edp[e];
    for (int e = 0; e < E; e++) {
        dz[e] = p[e] * (dp[e] - dot);
        edz[e] = U * fabs(dz[e]) + ep[e] * fabs(dp[e] - dot) + p[e] * (edp[e] + edot);
        for (int c = 0; c < C; c++) {
            const double xc = in->x[(size_t)n * C + c], w = in->wr[(size_t)e * C + c];
            r->dwr[(size_t)e * C + c] += dz[e] * xc;
            r->edwr[(size_t)e * C + c] += (in->N + 1) * U * fabs(dz[e] * xc) + edz[e] * fabs(xc);
            r->dx[(size_t)n * C + c] += dz[e] * w;
            dxabs[c] += fabs(dz[e] * w), dxprop[c] += edz[e] * fabs(w);
        }
    }
}

/* The whole backward of the objective, after moe_oracle_fwd. */
static void moe_oracle_bwd(struct moe_ref *r, const struct moe_in *in)
{
    const int C = in->C, K = in->K, IM = in->IM, E = in->E;
    double *dxabs = moe_zalloc(C), *dxprop = moe_zalloc(C);
    for (int n = 0; n < in->N; n++) {
        for (int c = 0; c < C; c++)
            dxabs[c] = 0, dxprop[c] = 0;
        for (int k = 0; k < K; k++)
            moe_expert_bwd(r, in, n, k, dxabs, dxprop);
        moe_dprobs(r, in, n);
        moe_router_bwd(r, in, n, dxabs, dxprop);
        /* the longest rounding path of a dx term: the 2IM sum, K scattered adds, E router terms */
        for (int c = 0; c < C; c++)
            r->edx[(size_t)n * C + c] = (2 * IM + K + E + 1) * U * dxabs[c] + dxprop[c];
    }
    free(dxabs);
    free(dxprop);
}

#endif
