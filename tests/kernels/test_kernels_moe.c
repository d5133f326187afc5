/* SPDX-License-Identifier: MIT */
/* Checks the mixture-of-experts CPU kernels (codelets/cpu/moe.h): the top-k's order and its tie
 * rule, the stable permutation on a hand-made routing, then sparse blocks (top-1, 2, 4) forward and
 * backward (router, renormalised or not, experts, combine, load-balancing loss) against the fp64
 * oracle of tests/kernels/moe_oracle.h within its derived bounds, with an expert that gets no token
 * (its weights are NaN: read, they would poison the outputs; its gradients must stay untouched).
 * The oracle's derivatives are checked against central finite differences of its forward. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/moe.h"
#include "tests/kernels/moe_oracle.h"
#include "tests/lib/sdp_test.h"

static int *int_alloc(size_t n)
{
    int *p = calloc(n ? n : 1, sizeof(int));
    if (!p)
        abort();
    return p;
}

static float *f_alloc(size_t n)
{
    return sdp_test_alloc((n ? n : 1) * sizeof(float));
}

static struct sdp_moe_routing routing_alloc(int N, int E, int K)
{
    struct sdp_moe_routing r = { .N = N, .E = E, .K = K };
    r.ids = (int32_t *)int_alloc((size_t)N * K), r.wts = f_alloc((size_t)N * K);
    r.counts = (int32_t *)int_alloc(E), r.offsets = (int32_t *)int_alloc(E + 1);
    r.rows = (int32_t *)int_alloc((size_t)N * K), r.where = (int32_t *)int_alloc((size_t)N * K);
    return r;
}

static void routing_free(struct sdp_moe_routing *r)
{
    free(r->ids), free(r->wts), free(r->counts), free(r->offsets), free(r->rows), free(r->where);
}

/* Ties: logits 1 3 3 0 3 2 (x = the logits, wr = the identity): top-2 is 1, 2; top-4 1 2 4 5.
 * NaN logits: the lowest ids, distinct. */
static void test_topk_ties(void)
{
    const float lg[6] = { 1, 3, 3, 0, 3, 2 };
    float wr[6 * 6] = { 0 }, logits[6 * 6], probs[6 * 6];
    for (int i = 0; i < 6; i++)
        wr[i * 6 + i] = 1;
    for (int K = 2; K <= 4; K += 2) {
        struct sdp_moe_routing r = routing_alloc(1, 6, K);
        float row[6];
        for (int e = 0; e < 6; e++)
            row[e] = lg[e];
        sdp_cpu_moe_router_fwd(logits, probs, &r, row, wr, 6, 1);
        if (K == 2)
            CHECK(r.ids[0] == 1 && r.ids[1] == 2 && r.wts[0] == 0.5f && r.wts[1] == 0.5f,
                  "top-2 ties: %d %d (%g %g), want 1 2 (0.5 0.5)", r.ids[0], r.ids[1],
                  (double)r.wts[0], (double)r.wts[1]);
        else
            CHECK(r.ids[0] == 1 && r.ids[1] == 2 && r.ids[2] == 4 && r.ids[3] == 5,
                  "top-4 ties: %d %d %d %d, want 1 2 4 5", r.ids[0], r.ids[1], r.ids[2], r.ids[3]);
        routing_free(&r);
    }
    /* a NaN logit (a diverged run) makes every probability NaN: the ids must stay valid */
    struct sdp_moe_routing r = routing_alloc(1, 6, 4);
    float row[6] = { 1, NAN, 3, 0, 3, 2 };
    sdp_cpu_moe_router_fwd(logits, probs, &r, row, wr, 6, 0);
    CHECK(r.ids[0] == 0 && r.ids[1] == 1 && r.ids[2] == 2 && r.ids[3] == 3,
          "NaN logits: ids %d %d %d %d, want 0 1 2 3", r.ids[0], r.ids[1], r.ids[2], r.ids[3]);
    routing_free(&r);
}

/* 5 tokens, top-2 of 4 experts, expert 2 idle: counts, offsets, token order within experts. */
static void test_permute(void)
{
    const int32_t ids[10] = { 3, 0, 0, 1, 1, 3, 0, 3, 3, 1 };
    const int32_t want_rows[10] = { 1, 2, 6, 3, 4, 9, 0, 5, 7, 8 };
    struct sdp_moe_routing r = routing_alloc(5, 4, 2);
    int used, ok = 1;
    memcpy(r.ids, ids, sizeof(ids));
    used = sdp_cpu_moe_permute(&r);
    for (int i = 0; i < 10; i++)
        ok &= r.rows[i] == want_rows[i] && r.where[r.rows[i]] == i;
    CHECK(used == 3 && r.counts[0] == 3 && r.counts[1] == 3 && r.counts[2] == 0 && r.counts[3] == 4,
          "counts %d %d %d %d, used %d", r.counts[0], r.counts[1], r.counts[2], r.counts[3], used);
    CHECK(r.offsets[0] == 0 && r.offsets[2] == 6 && r.offsets[3] == 6 && r.offsets[4] == 10,
          "offsets");
    CHECK(ok, "stable permutation (rows and where)");
    routing_free(&r);
}

/* count of got[i] (i < n) beyond SDP_SAFETY * err[i] of ref[i]; prints the worst ratio */
static int cmp(const char *what, const float *got, const double *ref, const double *err, size_t n)
{
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double q = fabs(got[i] - ref[i]) / (SDP_SAFETY * err[i] + 1e-300);
        worst = q > worst || isnan(q) ? q : worst;
        bad += !(q <= 1);
    }
    printf("%-28s %6zu values, worst error %.3f of its bound\n", what, n, worst);
    CHECK(bad == 0, "%s: %zu values beyond the bound", what, bad);
    return (int)bad;
}

/* The kernels' buffers for one block. */
struct moe_run {
    struct sdp_moe_routing r;
    float *logits, *probs, *xp, *gu, *h, *y, *out, *dy, *dwts, *dxp, *dgu, *dh;
    float *dprobs, *dlogits, *dx, *dwr, *dwgu, *dwdown;
    double *count, *psum, aux;
    int used;
};

static void run_alloc(struct moe_run *m, const struct moe_in *in)
{
    const size_t N = in->N, C = in->C, E = in->E, S = N * in->K, IM = in->IM;
    m->r = routing_alloc(in->N, in->E, in->K);
    m->logits = f_alloc(N * E), m->probs = f_alloc(N * E), m->dprobs = f_alloc(N * E);
    m->dlogits = f_alloc(N * E), m->xp = f_alloc(S * C), m->gu = f_alloc(S * 2 * IM);
    m->h = f_alloc(S * IM), m->y = f_alloc(S * C), m->out = f_alloc(N * C);
    m->dy = f_alloc(S * C), m->dwts = f_alloc(S), m->dxp = f_alloc(S * C);
    m->dgu = f_alloc(S * 2 * IM), m->dh = f_alloc(S * IM), m->dx = f_alloc(N * C);
    m->dwr = f_alloc(E * C), m->dwgu = f_alloc(E * 2 * IM * C), m->dwdown = f_alloc(E * C * IM);
    m->count = moe_zalloc(E), m->psum = moe_zalloc(E);
}

static void run_free(struct moe_run *m)
{
    float *f[] = { m->logits, m->probs,   m->xp,   m->gu,  m->h,    m->y,
                   m->out,    m->dy,      m->dwts, m->dxp, m->dgu,  m->dh,
                   m->dprobs, m->dlogits, m->dx,   m->dwr, m->dwgu, m->dwdown };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        free(f[i]);
    free(m->count), free(m->psum);
    routing_free(&m->r);
}

/* The kernels in the order a layer runs them: forward, load-balancing loss, backward. */
static void run_kernels(struct moe_run *m, const struct moe_in *in)
{
    const int N = in->N, C = in->C, E = in->E, IM = in->IM;
    struct sdp_moe_routing *r = &m->r;
    sdp_cpu_moe_router_fwd(m->logits, m->probs, r, in->x, in->wr, C, in->norm);
    m->used = sdp_cpu_moe_permute(r);
    sdp_cpu_moe_gather(m->xp, in->x, r, C);
    sdp_cpu_moe_experts_fwd(m->y, m->gu, m->h, m->xp, in->wgu, in->wdown, r, C, IM);
    memset(m->out, 0, (size_t)N * C * sizeof(float));
    sdp_cpu_moe_combine(m->out, m->y, r, C);
    sdp_cpu_moe_aux_stats(m->count, m->psum, m->probs, r);
    m->aux = sdp_cpu_moe_aux_loss(m->count, m->psum, N, E);

    sdp_cpu_moe_combine_bwd(m->dy, m->dwts, in->dout, m->y, r, C);
    memset(m->dwgu, 0, (size_t)E * 2 * IM * C * sizeof(float));
    memset(m->dwdown, 0, (size_t)E * C * IM * sizeof(float));
    sdp_cpu_moe_experts_bwd(m->dxp, m->dwgu, m->dwdown, m->dgu, m->dh, m->dy, m->xp, m->gu, m->h,
                            in->wgu, in->wdown, r, C, IM);
    memset(m->dx, 0, (size_t)N * C * sizeof(float));
    sdp_cpu_moe_scatter_bwd(m->dx, m->dxp, r, C);
    sdp_cpu_moe_topk_bwd(m->dprobs, m->dwts, m->probs, r, in->norm);
    sdp_cpu_moe_aux_bwd(m->dprobs, m->count, N, N, E, (float)in->coef);
    sdp_cpu_moe_softmax_bwd(m->dlogits, m->dprobs, m->probs, N, E);
    memset(m->dwr, 0, (size_t)E * C * sizeof(float));
    sdp_cpu_moe_router_bwd(m->dx, m->dwr, m->dlogits, in->x, in->wr, N, C, E);
}

/* Every kernel output against the oracle's value and bound. */
static void check_block(const struct moe_run *m, const struct moe_ref *o, const struct moe_in *in)
{
    const size_t N = in->N, C = in->C, E = in->E, K = in->K, S = N * K, IM = in->IM;
    float *yt = f_alloc(S * C);
    int ids_ok = 1, margin_ok = 1;
    for (size_t s = 0; s < S; s++) {
        ids_ok &= m->r.ids[s] == o->ids[s];
        memcpy(yt + s * C, m->y + (size_t)m->r.where[s] * C, C * sizeof(float));
    }
    for (size_t n = 0; n < N; n++) { /* the K-th pick clear of the next by their bounds */
        const size_t ik = n * E + o->ids[n * K + K - 1];
        double next = -1, tol = 0;
        for (size_t e = 0; e < E; e++) {
            int taken = 0;
            for (size_t k = 0; k < K; k++)
                taken |= o->ids[n * K + k] == (int)e;
            if (!taken && o->p[n * E + e] > next)
                next = o->p[n * E + e], tol = o->ep[ik] + o->ep[n * E + e];
        }
        const double pk = o->p[ik];
        margin_ok &= pk - next > 2 * SDP_SAFETY * tol;
    }
    CHECK(ids_ok, "expert ids differ from the oracle's");
    CHECK(margin_ok, "test data: a top-k choice within rounding of a tie");
    CHECK(m->used == (int)E - 1 && m->r.counts[E - 1] == 0, "one idle expert: used %d", m->used);
    cmp("router logits", m->logits, o->z, o->ez, N * E);
    cmp("router probs", m->probs, o->p, o->ep, N * E);
    cmp("routing weights", m->r.wts, o->w, o->ew, S);
    cmp("expert outputs", yt, o->y, o->ey, S * C);
    cmp("block output", m->out, o->out, o->eout, N * C);
    CHECK(fabs(m->aux - o->aux) <= SDP_SAFETY * o->eaux, "aux loss %.12g, oracle %.12g (+-%.3g)",
          m->aux, o->aux, SDP_SAFETY * o->eaux);
    printf("%-28s %.9g (oracle %.9g)\n", "load-balancing loss", m->aux, o->aux);
    cmp("d routing weights", m->dwts, o->dw, o->edw, S);
    cmp("d probs", m->dprobs, o->dp, o->edp, N * E);
    cmp("d router logits", m->dlogits, o->dz, o->edz, N * E);
    cmp("dx", m->dx, o->dx, o->edx, N * C);
    cmp("d router weight", m->dwr, o->dwr, o->edwr, E * C);
    cmp("d gate_up_proj (idle: 0)", m->dwgu, o->dwgu, o->edwgu, E * 2 * IM * C);
    cmp("d down_proj (idle: 0)", m->dwdown, o->dwdown, o->edwdown, E * C * IM);
    free(yt);
}

/* The oracle's gradient of entry i of v against central differences of its forward, the
 * routing held (the objective is smooth then).  h = 2^-10: the truncation error h^2 |F'''| / 6 and
 * the fp64 cancellation 1e-16 |F| / h both stay below 1e-5 at these sizes. */
static double fd_err(struct moe_ref *o, struct moe_in *in, float *v, size_t i, double an)
{
    const float v0 = v[i], vp = v0 + 0x1p-10f, vm = v0 - 0x1p-10f;
    double fp, fm;
    v[i] = vp, fp = moe_oracle_fwd(o, in, 1);
    v[i] = vm, fm = moe_oracle_fwd(o, in, 1);
    v[i] = v0;
    return fabs((fp - fm) / ((double)vp - vm) - an) / (1.0 + fabs(an));
}

static void check_oracle_fd(struct moe_ref *o, struct moe_in *in, float *x, float *wr, float *wgu,
                            float *wdown)
{
    const size_t C = in->C, IM = in->IM;
    const int e = o->ids[0]; /* an expert token 0 uses */
    double worst = 0, q;
    for (size_t t = 0; t < 6; t++) {
        const size_t ix = (t * 7 % in->N) * C + t * 5 % C, iw = (t % in->E) * C + t * 3 % C;
        const size_t ig = ((size_t)e * 2 * IM + t * 5 % (2 * IM)) * C + t * 7 % C;
        const size_t id = ((size_t)e * C + t * 3 % C) * IM + t * 5 % IM;
        q = fd_err(o, in, x, ix, o->dx[ix]), worst = q > worst ? q : worst;
        q = fd_err(o, in, wr, iw, o->dwr[iw]), worst = q > worst ? q : worst;
        q = fd_err(o, in, wgu, ig, o->dwgu[ig]), worst = q > worst ? q : worst;
        q = fd_err(o, in, wdown, id, o->dwdown[id]), worst = q > worst ? q : worst;
    }
    moe_oracle_fwd(o, in, 1); /* restore the unperturbed forward */
    printf("%-28s worst |an - fd| / (1 + |an|) %.3g (allowed 1e-5)\n", "oracle vs finite diff",
           worst);
    CHECK(worst <= 1e-5, "oracle gradients vs finite differences: %.3g", worst);
}

/* One block: random inputs, channel 0 a constant 1 through which the router keeps the last
 * expert idle (its weights NaN: any read of them would show). */
static void test_block(int K, int norm, double coef, uint64_t seed)
{
    enum { N = 37, C = 24, E = 8, IM = 12 };
    struct sdp_rng rng = { seed };
    float *x = f_alloc(N * C), *wr = f_alloc(E * C), *wgu = f_alloc((size_t)E * 2 * IM * C);
    float *wdown = f_alloc((size_t)E * C * IM), *dout = f_alloc(N * C);
    struct moe_in in = { N, C, E, K, IM, norm, coef, x, wr, wgu, wdown, dout };
    struct moe_ref o;
    struct moe_run m;
    printf("-- block: N %d C %d E %d top-%d IM %d, norm_topk_prob %d, aux coef %g\n", N, C, E, K,
           IM, norm, coef);
    sdp_fill_normal(&rng, x, N * C, 1.0f);
    sdp_fill_normal(&rng, wr, E * C, 0.5f);
    sdp_fill_normal(&rng, wgu, (size_t)E * 2 * IM * C, 0.3f);
    sdp_fill_normal(&rng, wdown, (size_t)E * C * IM, 0.3f);
    sdp_fill_normal(&rng, dout, N * C, 1.0f);
    for (int n = 0; n < N; n++)
        x[n * C] = 1.0f;
    wr[(E - 1) * C] = -30.0f;
    for (size_t i = 0; i < (size_t)2 * IM * C; i++)
        wgu[(size_t)(E - 1) * 2 * IM * C + i] = NAN;
    for (size_t i = 0; i < (size_t)C * IM; i++)
        wdown[(size_t)(E - 1) * C * IM + i] = NAN;
    moe_ref_alloc(&o, &in);
    moe_oracle_fwd(&o, &in, 0);
    moe_oracle_bwd(&o, &in);
    run_alloc(&m, &in);
    run_kernels(&m, &in);
    check_block(&m, &o, &in);
    check_oracle_fd(&o, &in, x, wr, wgu, wdown);
    run_free(&m);
    moe_ref_free(&o);
    free(x), free(wr), free(wgu), free(wdown), free(dout);
}

int main(void)
{
    test_topk_ties();
    test_permute();
    test_block(2, 1, 0.001, 11);
    test_block(2, 0, 0.5, 12);
    test_block(1, 1, 0.01, 13); /* one expert a token: the renormalised weight is 1 */
    test_block(4, 1, 0.01, 14);
    return sdp_test_finish(sdp_test_nfail);
}
