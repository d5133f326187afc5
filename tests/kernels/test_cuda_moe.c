/* SPDX-License-Identifier: MIT */
/* The mixture-of-experts kernels on the GPU (codelets/cuda/moe*.cu): the top-k's tie and NaN
 * rules, the permutation (counts, offsets, rows, where equal to the CPU kernel's, on a hand-made
 * routing and on 1400 random slots, more than one chunk of the kernel), and sparse blocks (E 8,
 * top-1, 2 and 4, renormalised or not, one expert that gets no token and has NaN weights) forward
 * and backward, in the order the codelets run them, against the fp64 oracle of
 * tests/kernels/moe_oracle.h, the routing against the CPU kernels' exactly.  One block runs the
 * experts on bf16 weights (the oracle sees the rounded weights).  Exit 77 without a GPU.
 *
 * Tolerances: the oracle's first-order bounds, times SDP_SAFETY, as in test_kernels_moe.c.  They
 * hold for the GPU's order of operations as well as for the CPU's: a GEMM's error bound
 * (k + 1) u sum |terms| holds for any order of the sum (Higham Thm 3.1; cuBLAS runs pedantic fp32,
 * so every product and partial sum is an fp32 rounding, split-K partials included); the softmax's
 * exp is computed in double and rounded once (within u of exp, under the oracle's 3 u); the SwiGLU
 * kernels' expf is within 2 ulp (4 u) and their few further roundings stay under the oracle's
 * elementwise 16 u (SDP_RTOL_ELEM); the combine, the scatter and the weights' renormalisation make
 * the CPU's roundings in the CPU's order; the double sums (softmax, dot products, statistics) are
 * off by k 2^-53 relative, far below one u of their fp32 result. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "codelets/cpu/moe.h"
#include "tests/kernels/moe_oracle.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_cuda.h"

static cublasHandle_t cb;
static cudaStream_t stream;

static void *dzero(size_t nbytes)
{
    void *p;
    CK(cudaMalloc(&p, nbytes ? nbytes : 4));
    CK(cudaMemset(p, 0, nbytes ? nbytes : 4));
    return p;
}

static void get(void *h, const void *d, size_t nbytes)
{
    CK(cudaStreamSynchronize(stream));
    CK(cudaMemcpy(h, d, nbytes, cudaMemcpyDeviceToHost));
}

static void *put(const void *h, size_t nbytes)
{
    void *d = dzero(nbytes);
    CK(cudaMemcpy(d, h, nbytes, cudaMemcpyHostToDevice));
    return d;
}

static float *f_alloc(size_t n)
{
    return sdp_test_alloc((n ? n : 1) * sizeof(float));
}

static struct sdp_moe_routing routing_alloc(int N, int E, int K)
{
    const size_t S = (size_t)N * K;
    struct sdp_moe_routing r = { .N = N, .E = E, .K = K };
    r.ids = sdp_test_alloc(S * 4), r.wts = f_alloc(S), r.counts = sdp_test_alloc((size_t)E * 4);
    r.offsets = sdp_test_alloc(((size_t)E + 1) * 4);
    r.rows = sdp_test_alloc(S * 4), r.where = sdp_test_alloc(S * 4);
    return r;
}

static void routing_free(struct sdp_moe_routing *r)
{
    free(r->ids), free(r->wts), free(r->counts), free(r->offsets), free(r->rows), free(r->where);
}

static struct sdp_cuda_moe_routing droute_alloc(int N, int E, int K)
{
    const size_t S = (size_t)N * K;
    struct sdp_cuda_moe_routing d = { .N = N, .E = E, .K = K };
    d.ids = dzero(S * 4), d.counts = dzero((size_t)E * 4), d.offsets = dzero((size_t)E * 4 + 4);
    d.rows = dzero(S * 4), d.where = dzero(S * 4), d.wts = dzero(S * 4);
    return d;
}

static void droute_free(struct sdp_cuda_moe_routing *d)
{
    cudaFree(d->ids), cudaFree(d->counts), cudaFree(d->offsets), cudaFree(d->rows);
    cudaFree(d->where), cudaFree(d->wts);
}

/* the GPU's routing into h (allocated with routing_alloc) */
static void droute_get(struct sdp_moe_routing *h, const struct sdp_cuda_moe_routing *d)
{
    const size_t S = (size_t)d->N * d->K;
    get(h->ids, d->ids, S * 4), get(h->wts, d->wts, S * 4);
    get(h->counts, d->counts, (size_t)d->E * 4), get(h->offsets, d->offsets, (size_t)d->E * 4 + 4);
    get(h->rows, d->rows, S * 4), get(h->where, d->where, S * 4);
}

/* the arrays of two routings equal (ids always; with perm the permutation's too) */
static void routing_same(const char *what, const struct sdp_moe_routing *g,
                         const struct sdp_moe_routing *c, int perm)
{
    const size_t S = (size_t)c->N * c->K, E = c->E;
    int ids = !memcmp(g->ids, c->ids, S * 4), cnt = 1, rows = 1;
    if (perm) {
        cnt = !memcmp(g->counts, c->counts, E * 4) && !memcmp(g->offsets, c->offsets, E * 4 + 4);
        rows = !memcmp(g->rows, c->rows, S * 4) && !memcmp(g->where, c->where, S * 4);
    }
    printf("%-28s ids %s, counts+offsets %s, rows+where %s\n", what, ids ? "equal" : "DIFFER",
           cnt ? "equal" : "DIFFER", rows ? "equal" : "DIFFER");
    CHECK(ids && cnt && rows, "%s: the GPU's routing differs from the CPU kernel's", what);
}

/* Ties: logits 1 3 3 0 3 2 (x = the logits, wr = the identity, exact products): top-2 is 1, 2
 * (weights 0.5 0.5); top-4 1 2 4 5.  NaN logits: the lowest ids, distinct. */
static void test_topk_ties(void)
{
    const float lg[6] = { 1, 3, 3, 0, 3, 2 };
    const char *name[3] = { "top-2 of ties", "top-4 of ties", "top-4 of a NaN row" };
    float wr[6 * 6] = { 0 }, nan_row[6] = { 1, NAN, 3, 0, 3, 2 };
    for (int i = 0; i < 6; i++)
        wr[i * 6 + i] = 1;
    float *dwr = put(wr, sizeof(wr)), *dz = dzero(36 * 4), *dp = dzero(36 * 4);
    for (int t = 0; t < 3; t++) { /* top-2, top-4 of the ties; top-4 of the NaN row */
        const int nan = t == 2, K = t == 0 ? 2 : 4;
        struct sdp_moe_routing g = routing_alloc(1, 6, K), c = routing_alloc(1, 6, K);
        struct sdp_cuda_moe_routing d = droute_alloc(1, 6, K);
        float *dx = put(nan ? nan_row : lg, 6 * 4), cl[6], cp[6];
        sdp_cuda_moe_router_fwd(cb, dz, dp, &d, dx, dwr, 6, !nan, stream);
        droute_get(&g, &d);
        sdp_cpu_moe_router_fwd(cl, cp, &c, nan ? nan_row : lg, wr, 6, !nan);
        if (nan)
            CHECK(g.ids[0] == 0 && g.ids[1] == 1 && g.ids[2] == 2 && g.ids[3] == 3,
                  "NaN logits: ids %d %d %d %d, want 0 1 2 3", g.ids[0], g.ids[1], g.ids[2],
                  g.ids[3]);
        else if (K == 2)
            CHECK(g.ids[0] == 1 && g.ids[1] == 2 && g.wts[0] == 0.5f && g.wts[1] == 0.5f,
                  "top-2 ties: %d %d (%g %g), want 1 2 (0.5 0.5)", g.ids[0], g.ids[1],
                  (double)g.wts[0], (double)g.wts[1]);
        else
            CHECK(g.ids[0] == 1 && g.ids[1] == 2 && g.ids[2] == 4 && g.ids[3] == 5,
                  "top-4 ties: %d %d %d %d, want 1 2 4 5", g.ids[0], g.ids[1], g.ids[2], g.ids[3]);
        routing_same(name[t], &g, &c, 0);
        cudaFree(dx);
        droute_free(&d), routing_free(&g), routing_free(&c);
    }
    cudaFree(dwr), cudaFree(dz), cudaFree(dp);
}

/* The permutation of ids (N, K) against the CPU's, and (want_rows non-NULL) a known answer. */
static void check_permute(const char *what, const int32_t *ids, int N, int E, int K,
                          const int32_t *want_rows)
{
    struct sdp_moe_routing g = routing_alloc(N, E, K), c = routing_alloc(N, E, K);
    struct sdp_cuda_moe_routing d = droute_alloc(N, E, K);
    const size_t S = (size_t)N * K;
    memcpy(c.ids, ids, S * 4);
    sdp_cpu_moe_permute(&c);
    CK(cudaMemcpy(d.ids, ids, S * 4, cudaMemcpyHostToDevice));
    sdp_cuda_moe_permute(&d, stream);
    droute_get(&g, &d);
    routing_same(what, &g, &c, 1);
    if (want_rows)
        CHECK(!memcmp(g.rows, want_rows, S * 4), "%s: rows differ from the known answer", what);
    droute_free(&d), routing_free(&g), routing_free(&c);
}

static void test_permute(void)
{
    /* 5 tokens, top-2 of 4 experts, expert 2 idle (the CPU test's case) */
    const int32_t ids[10] = { 3, 0, 0, 1, 1, 3, 0, 3, 3, 1 };
    const int32_t want_rows[10] = { 1, 2, 6, 3, 4, 9, 0, 5, 7, 8 };
    enum { N = 700, E = 8, K = 2 };
    static int32_t big[N * K];
    struct sdp_rng rng = { 5 };
    check_permute("permute 5 x top-2 of 4", ids, 5, 4, 2, want_rows);
    for (int n = 0; n < N; n++) { /* two distinct experts of 0..7 but 5 (idle) */
        int a, b;
        do
            a = (int)(sdp_rng_next(&rng) % E);
        while (a == 5);
        do
            b = (int)(sdp_rng_next(&rng) % E);
        while (b == 5 || b == a);
        big[n * K] = a, big[n * K + 1] = b;
    }
    check_permute("permute 700 x top-2 of 8", big, N, E, K, NULL);
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

/* One block's buffers: host copies of what the GPU computed (the names of moe.h) and the device
 * buffers (d_ prefix). */
struct moe_run {
    struct sdp_moe_routing r;
    float *logits, *probs, *y, *out, *dwts, *dprobs, *dlogits, *dx, *dwr, *dwgu, *dwdown;
    double stats[16], aux; /* count (E) then psum (E); E = 8 */
    int32_t used[16];
};

struct moe_dev {
    struct sdp_cuda_moe_routing r;
    float *x, *wr, *dout, *logits, *probs, *xp, *gu, *h, *y, *out, *dy, *dwts, *dxp, *dgu, *dh;
    float *dprobs, *dlogits, *dx, *dwr, *dwgu, *dwdown, *wtmp;
    void *wgu, *wdown;
    double *count, *aux;
    int32_t *used;
};

static void dev_alloc(struct moe_dev *d, const struct moe_in *in, int wdt)
{
    const size_t N = in->N, C = in->C, E = in->E, S = N * in->K, IM = in->IM;
    d->r = droute_alloc(in->N, in->E, in->K);
    d->x = put(in->x, N * C * 4), d->wr = put(in->wr, E * C * 4),
    d->dout = put(in->dout, N * C * 4);
    d->wgu = upload(in->wgu, E * 2 * IM * C, wdt), d->wdown = upload(in->wdown, E * C * IM, wdt);
    d->logits = dzero(N * E * 4), d->probs = dzero(N * E * 4), d->xp = dzero(S * C * 4);
    d->gu = dzero(S * 2 * IM * 4), d->h = dzero(S * IM * 4), d->y = dzero(S * C * 4);
    d->out = dzero(N * C * 4), d->dy = dzero(S * C * 4), d->dwts = dzero(S * 4);
    d->dxp = dzero(S * C * 4), d->dgu = dzero(S * 2 * IM * 4), d->dh = dzero(S * IM * 4);
    d->dprobs = dzero(N * E * 4), d->dlogits = dzero(N * E * 4), d->dx = dzero(N * C * 4);
    d->dwr = dzero(E * C * 4), d->dwgu = dzero(E * 2 * IM * C * 4),
    d->dwdown = dzero(E * C * IM * 4);
    d->wtmp = dzero(3 * IM * C * 4);
    d->count = dzero(2 * E * 8), d->aux = dzero(8), d->used = dzero(2 * E * 4);
}

static void dev_free(struct moe_dev *d)
{
    void *p[] = { d->x,    d->wr,     d->dout, d->wgu,    d->wdown,   d->logits, d->probs,
                  d->xp,   d->gu,     d->h,    d->y,      d->out,     d->dy,     d->dwts,
                  d->dxp,  d->dgu,    d->dh,   d->dprobs, d->dlogits, d->dx,     d->dwr,
                  d->dwgu, d->dwdown, d->wtmp, d->count,  d->aux,     d->used };
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
        cudaFree(p[i]);
    droute_free(&d->r);
}

/* The kernels in the order the codelets run them: forward, statistics and loss, backward. */
static void run_gpu(struct moe_dev *d, const struct moe_in *in, int wdt)
{
    const int N = in->N, C = in->C, E = in->E, IM = in->IM;
    const struct sdp_cuda_moe_routing *r = &d->r;
    int32_t off[9];
    sdp_cuda_moe_router_fwd(cb, d->logits, d->probs, r, d->x, d->wr, C, in->norm, stream);
    sdp_cuda_moe_permute(r, stream);
    sdp_cuda_moe_offsets_host(off, r, stream);
    sdp_cuda_moe_gather(d->xp, d->x, r, C, stream);
    sdp_cuda_moe_experts_fwd(cb, d->y, d->gu, d->h, d->xp, d->wgu, d->wdown, wdt, d->wtmp, off, E,
                             C, IM, stream);
    sdp_cuda_moe_combine(d->out, NULL, d->y, r, C, stream);
    sdp_cuda_moe_aux_stats(d->count, d->count + E, d->used, 1, 1, d->probs, r, stream);
    sdp_cuda_moe_aux_loss(d->aux, d->count, d->count + E, N, E, stream);

    sdp_cuda_moe_combine_bwd(d->dy, d->dwts, d->dout, d->y, r, C, stream);
    sdp_cuda_moe_experts_bwd(cb, d->dxp, d->dwgu, d->dwdown, d->dgu, d->dh, d->dy, d->xp, d->gu,
                             d->h, d->wgu, d->wdown, wdt, d->wtmp, off, E, C, IM, stream);
    sdp_cuda_moe_scatter_bwd(d->dx, d->dxp, r, C, stream);
    sdp_cuda_moe_topk_bwd(d->dprobs, d->dwts, d->probs, r, in->norm, stream);
    sdp_cuda_moe_aux_bwd(d->dprobs, d->count, N, N, E, (float)in->coef, stream);
    sdp_cuda_moe_softmax_bwd(d->dlogits, d->dprobs, d->probs, N, E, stream);
    sdp_cuda_moe_router_bwd(cb, d->dx, d->dwr, d->dlogits, d->x, d->wr, N, C, E, stream);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(stream));
}

static void run_get(struct moe_run *m, const struct moe_dev *d, const struct moe_in *in)
{
    const size_t N = in->N, C = in->C, E = in->E, S = N * in->K, IM = in->IM;
    m->r = routing_alloc(in->N, in->E, in->K);
    droute_get(&m->r, &d->r);
    m->logits = f_alloc(N * E), m->probs = f_alloc(N * E), m->y = f_alloc(S * C);
    m->out = f_alloc(N * C), m->dwts = f_alloc(S), m->dprobs = f_alloc(N * E);
    m->dlogits = f_alloc(N * E), m->dx = f_alloc(N * C), m->dwr = f_alloc(E * C);
    m->dwgu = f_alloc(E * 2 * IM * C), m->dwdown = f_alloc(E * C * IM);
    get(m->logits, d->logits, N * E * 4), get(m->probs, d->probs, N * E * 4);
    get(m->y, d->y, S * C * 4), get(m->out, d->out, N * C * 4), get(m->dwts, d->dwts, S * 4);
    get(m->dprobs, d->dprobs, N * E * 4), get(m->dlogits, d->dlogits, N * E * 4);
    get(m->dx, d->dx, N * C * 4), get(m->dwr, d->dwr, E * C * 4);
    get(m->dwgu, d->dwgu, E * 2 * IM * C * 4), get(m->dwdown, d->dwdown, E * C * IM * 4);
    get(m->stats, d->count, 2 * E * 8), get(&m->aux, d->aux, 8), get(m->used, d->used, 2 * E * 4);
}

static void run_free(struct moe_run *m)
{
    float *f[] = { m->logits,  m->probs, m->y,   m->out,  m->dwts,  m->dprobs,
                   m->dlogits, m->dx,    m->dwr, m->dwgu, m->dwdown };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        free(f[i]);
    routing_free(&m->r);
}

/* Every output against the oracle's value and bound; the routing against the CPU kernels'. */
static void check_block(const struct moe_run *m, const struct moe_ref *o, const struct moe_in *in)
{
    const size_t N = in->N, C = in->C, E = in->E, K = in->K, S = N * K, IM = in->IM;
    struct sdp_moe_routing c = routing_alloc(in->N, in->E, in->K);
    float *yt = f_alloc(S * C), *cl = f_alloc(N * E), *cp = f_alloc(N * E);
    int ids_ok = 1, used_ok = 1, count_ok = 1, margin_ok = 1;
    sdp_cpu_moe_router_fwd(cl, cp, &c, in->x, in->wr, in->C, in->norm);
    sdp_cpu_moe_permute(&c);
    routing_same("routing vs the CPU kernels", &m->r, &c, 1);
    for (size_t s = 0; s < S; s++) {
        ids_ok &= m->r.ids[s] == o->ids[s];
        memcpy(yt + s * C, m->y + (size_t)m->r.where[s] * C, C * sizeof(float));
    }
    for (size_t e = 0; e < E; e++) {
        const int u = m->r.counts[e] > 0;
        used_ok &= m->used[e] == u && m->used[E + e] == u;
        count_ok &= m->stats[e] == o->count[e];
    }
    for (size_t n = 0; n < N; n++) { /* the K-th pick clear of the next by their bounds */
        const size_t ik = n * E + o->ids[n * K + K - 1];
        double next = -1, tol = 0;
        for (size_t e = 0; e < E; e++) {
            int taken = 0;
            for (size_t j = 0; j < K; j++)
                taken |= o->ids[n * K + j] == (int)e;
            if (!taken && o->p[n * E + e] > next)
                next = o->p[n * E + e], tol = o->ep[ik] + o->ep[n * E + e];
        }
        margin_ok &= o->p[ik] - next > 2 * SDP_SAFETY * tol;
    }
    CHECK(margin_ok, "test data: a top-k choice within rounding of a tie");
    CHECK(ids_ok, "expert ids differ from the oracle's");
    CHECK(m->r.counts[E - 1] == 0, "the idle expert got %d slots", m->r.counts[E - 1]);
    CHECK(used_ok, "used-expert flags differ from the counts");
    CHECK(count_ok, "slot counts of the statistics differ from the oracle's");
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
    free(yt), free(cl), free(cp);
    routing_free(&c);
}

/* One block, the CPU test's data: channel 0 a constant 1 through which the router keeps the last
 * expert idle, its weights NaN (any read of them would show).  wdt: the experts' weights' dtype
 * (bf16: rounded first, so that the oracle sees them). */
static void test_block(int K, int norm, double coef, uint64_t seed, int wdt)
{
    enum { N = 37, C = 24, E = 8, IM = 12 };
    struct sdp_rng rng = { seed };
    float *x = f_alloc(N * C), *wr = f_alloc(E * C), *wgu = f_alloc((size_t)E * 2 * IM * C);
    float *wdown = f_alloc((size_t)E * C * IM), *dout = f_alloc(N * C);
    struct moe_in in = { N, C, E, K, IM, norm, coef, x, wr, wgu, wdown, dout };
    struct moe_ref o;
    struct moe_dev d;
    struct moe_run m;
    printf("-- block: N %d C %d E %d top-%d IM %d, norm_topk_prob %d, aux coef %g, %s experts\n", N,
           C, E, K, IM, norm, coef, dt_name(wdt));
    sdp_fill_normal(&rng, x, N * C, 1.0f);
    sdp_fill_normal(&rng, wr, E * C, 0.5f);
    sdp_fill_normal(&rng, wgu, (size_t)E * 2 * IM * C, 0.3f);
    sdp_fill_normal(&rng, wdown, (size_t)E * C * IM, 0.3f);
    sdp_fill_normal(&rng, dout, N * C, 1.0f);
    for (int n = 0; n < N; n++)
        x[n * C] = 1.0f;
    wr[(E - 1) * C] = -30.0f;
    round_in(wgu, (size_t)E * 2 * IM * C, wdt), round_in(wdown, (size_t)E * C * IM, wdt);
    for (size_t i = 0; i < (size_t)2 * IM * C; i++)
        wgu[(size_t)(E - 1) * 2 * IM * C + i] = NAN;
    for (size_t i = 0; i < (size_t)C * IM; i++)
        wdown[(size_t)(E - 1) * C * IM + i] = NAN;
    moe_ref_alloc(&o, &in);
    moe_oracle_fwd(&o, &in, 0);
    moe_oracle_bwd(&o, &in);
    dev_alloc(&d, &in, wdt);
    run_gpu(&d, &in, wdt);
    run_get(&m, &d, &in);
    check_block(&m, &o, &in);
    run_free(&m);
    dev_free(&d);
    moe_ref_free(&o);
    free(x), free(wr), free(wgu), free(wdown), free(dout);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    if (cublasCreate(&cb) != CUBLAS_STATUS_SUCCESS) {
        printf("cublasCreate failed\nFAIL\n");
        return 1;
    }
    CK(cudaStreamCreate(&stream));
    test_topk_ties();
    test_permute();
    test_block(2, 1, 0.001, 11, SDP_CUDA_F32);
    test_block(2, 0, 0.5, 12, SDP_CUDA_F32);
    test_block(1, 1, 0.01, 13, SDP_CUDA_F32); /* one expert a token: the renormalised weight is 1 */
    test_block(4, 1, 0.01, 14, SDP_CUDA_F32);
    test_block(2, 1, 0.01, 15, SDP_CUDA_BF16);
    cublasDestroy(cb);
    cudaStreamDestroy(stream);
    return sdp_test_finish(sdp_test_nfail);
}
