/* SPDX-License-Identifier: MIT */
/* Checks the fused LM head + cross-entropy (blocked BLAS version with several row, vocabulary,
 * shard and thread counts, and the fp64 triple-loop version) against an fp64 oracle written here:
 * loss sum, valid count, dh and the accumulated dw, with ignored targets (a whole ignored block
 * too), large logits and N = 1; the same bits whatever the thread count and with calls at once;
 * the kernel's exp against the libm's in double; NaN in, NaN out; AVX-512 row work == reference.
 * The oracle's gradient is checked against finite differences of its loss. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

/* Error model of the blocked fp32 kernel in units of u32 (checked with SDP_SAFETY u32), per row n
 * with Zn = max_v sum_c |h_nc w_vc| and Mn = max_v |z_nv|:
 *  logits: sgemm over C terms:                    C Zn (absolute)
 *  p = exp(z - max): two logit errors, the subtraction, exp (<= 1 ulp, checked below):
 *                                                 rho = 2 C Zn + 2 Mn + 4
 *  (the sum of p over the vocabulary, and its rescaling to the row's max, in double: negligible)
 *  loss_n = lse - z_t:                            rho + C Zn + 2
 *  g_nv = scale (p/sum - onehot): Eg = scale (P (rho + 3) + onehot)
 *  dh_nc = sum_v g w (sgemms over vocabulary blocks, accumulated, then the shards' partial sums:
 *          any order of V terms):  sum_v (Eg + (V + 1) |g|) |w_vc|
 *  dw_vc = dw0 + sum_n g h, one sgemm of <= N terms per row block plus one accumulation per block:
 *          sum_n (Eg + (N + nblocks + 1) |g|) |h_nc| + nblocks |dw0| */
struct oracle {
    double loss, kloss;
    int nvalid;
    double *dh, *kdh, *dw, *kdw;
};

static void oracle_run(struct oracle *o, const double *h, const double *w, const int32_t *tgt,
                       int N, int C, int V, double scale, const double *dw0, int nblocks)
{
    double *z = sdp_test_alloc((size_t)V * 8), *Eg = sdp_test_alloc((size_t)V * 8);

    o->loss = o->kloss = 0.0;
    o->nvalid = 0;
    for (size_t i = 0; i < (size_t)V * C; i++) {
        o->dw[i] = dw0 ? dw0[i] : 0.0;
        o->kdw[i] = dw0 ? nblocks * fabs(dw0[i]) : 0.0;
    }
    for (int n = 0; n < N; n++) {
        const double *hn = h + (size_t)n * C;
        for (int c = 0; c < C; c++)
            o->dh[(size_t)n * C + c] = o->kdh[(size_t)n * C + c] = 0.0;
        if (tgt[n] < 0)
            continue;
        double mx = -INFINITY, Z = 0.0, M = 0.0, sum = 0.0;
        for (int v = 0; v < V; v++) {
            double d = 0.0, a = 0.0;
            for (int c = 0; c < C; c++) {
                d += hn[c] * w[(size_t)v * C + c];
                a += fabs(hn[c] * w[(size_t)v * C + c]);
            }
            z[v] = d;
            mx = d > mx ? d : mx;
            Z = a > Z ? a : Z;
            M = fabs(d) > M ? fabs(d) : M;
        }
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - mx);
        const double lse = mx + log(sum), rho = 2.0 * C * Z + 2 * M + 4;
        o->loss += lse - z[tgt[n]];
        o->kloss += rho + C * Z + 2;
        o->nvalid++;
        for (int v = 0; v < V; v++) {
            const double P = exp(z[v] - lse);
            z[v] = scale * (P - (v == tgt[n])); /* now g */
            Eg[v] = fabs(scale) * (P * (rho + 3) + (v == tgt[n]));
        }
        for (int v = 0; v < V; v++)
            for (int c = 0; c < C; c++) {
                const double wv = w[(size_t)v * C + c];
                o->dh[(size_t)n * C + c] += z[v] * wv;
                o->kdh[(size_t)n * C + c] += (Eg[v] + (V + 1) * fabs(z[v])) * fabs(wv);
                o->dw[(size_t)v * C + c] += z[v] * hn[c];
                o->kdw[(size_t)v * C + c] += (Eg[v] + (N + nblocks + 1) * fabs(z[v])) * fabs(hn[c]);
            }
    }
    free(z), free(Eg);
}

static int check_oracle_fd(void)
{
    enum { N = 3, C = 4, V = 5 };
    struct sdp_rng rng = { 31 };
    const int32_t tgt[N] = { 2, -1, 4 };
    double h[N * C], w[V * C], dh[N * C], dw[V * C], kdh[N * C], kdw[V * C], worst = 0.0;
    struct oracle o = { .dh = dh, .kdh = kdh, .dw = dw, .kdw = kdw };
    double an[N * C + V * C];

    for (int i = 0; i < N * C; i++)
        h[i] = sdp_rng_normal(&rng, 1.0f);
    for (int i = 0; i < V * C; i++)
        w[i] = sdp_rng_normal(&rng, 1.0f);
    oracle_run(&o, h, w, tgt, N, C, V, 1.0, NULL, 1);
    memcpy(an, dh, sizeof(dh));
    memcpy(an + N * C, dw, sizeof(dw));
    for (int i = 0; i < N * C + V * C; i++) {
        double *p = i < N * C ? &h[i] : &w[i - N * C];
        const double step = 1e-6, save = *p;
        *p = save + step;
        oracle_run(&o, h, w, tgt, N, C, V, 1.0, NULL, 1);
        const double lp = o.loss;
        *p = save - step;
        oracle_run(&o, h, w, tgt, N, C, V, 1.0, NULL, 1);
        const double lm = o.loss;
        *p = save;
        const double e = fabs((lp - lm) / (2 * step) - an[i]) / (1.0 + fabs(an[i]));
        worst = e > worst ? e : worst;
    }
    const int bad = !(worst < 1e-7); /* central differences: ~h^2 + 1e-16/h */
    printf("oracle gradient vs finite differences: max rel err %.3g (allowed 1e-7)  %s\n", worst,
           bad ? "BAD" : "ok");
    return bad;
}

static int check_loss(const char *name, double loss, int nvalid, const struct oracle *o)
{
    const double err = fabs(loss - o->loss), allowed = SDP_SAFETY * SDP_U32 * o->kloss;
    const int bad = !(err <= allowed) || nvalid != o->nvalid;
    printf("%-34s loss %.12g ref %.12g |err| %.3g (%.1f%% of allowed)  nvalid %d ref %d  %s\n",
           name, loss, o->loss, err, allowed > 0 ? 100.0 * err / allowed : 0.0, nvalid, o->nvalid,
           bad ? "BAD" : "ok");
    return bad;
}

/* The same blocks on one thread and on three: the same bits (dh, dw, loss). */
static int check_threads(const struct sdp_lmhead_blocks *bl, double loss, const float *dh,
                         const float *dw, const float *h, const float *w, const int32_t *tgt, int N,
                         int C, int V, float scale, const float *dw0, void *scratch)
{
    struct sdp_lmhead_blocks b1 = *bl;
    float *dh1 = sdp_test_alloc((size_t)N * C * 4), *dw1 = sdp_test_alloc((size_t)V * C * 4);
    double loss1;
    int nvalid1;

    b1.threads = bl->threads == 1 ? 3 : 1;
    if (sdp_cpu_lmhead_ce_scratch(C, &b1) > sdp_cpu_lmhead_ce_scratch(C, bl))
        b1.threads = 1; /* fits: one thread needs the least */
    memcpy(dw1, dw0, (size_t)V * C * 4);
    sdp_cpu_lmhead_ce(&loss1, &nvalid1, dh1, dw1, h, w, tgt, N, C, V, scale, &b1, scratch);
    const int bad = memcmp(&loss1, &loss, sizeof(loss)) || memcmp(dh1, dh, (size_t)N * C * 4) ||
                    memcmp(dw1, dw, (size_t)V * C * 4);
    printf("  %d thread(s) instead of %d: %s bits  %s\n", b1.threads, bl->threads,
           bad ? "other" : "the same", bad ? "BAD" : "ok");
    free(dh1), free(dw1);
    return bad;
}

static int run_case(struct sdp_rng *rng, int N, int C, int V, float hamp, const char *label)
{
    const size_t nh = (size_t)N * C, nw = (size_t)V * C;
    float *h = sdp_test_alloc(nh * 4), *w = sdp_test_alloc(nw * 4), *dw0 = sdp_test_alloc(nw * 4);
    float *dh = sdp_test_alloc(nh * 4), *dw = sdp_test_alloc(nw * 4);
    int32_t *tgt = sdp_test_alloc((size_t)N * 4);
    double *hd = sdp_test_alloc(nh * 8), *wd = sdp_test_alloc(nw * 8),
           *dw0d = sdp_test_alloc(nw * 8);
    struct oracle o = { .dh = sdp_test_alloc(nh * 8),
                        .kdh = sdp_test_alloc(nh * 8),
                        .dw = sdp_test_alloc(nw * 8),
                        .kdw = sdp_test_alloc(nw * 8) };
    /* rows, vcols, shards, threads; rows 0: the _ref version; vcols 0: the default blocks */
    static const struct sdp_lmhead_blocks blocks[] = {
        { 1, 7, 1, 1 }, { 8, 16, 3, 2 }, { 37, 64, 8, 3 }, { 64, 1 << 20, 1, 1 },
        { 5, 1, 4, 4 }, { 1, 0, 0, 2 },  { 0, 0, 0, 0 },
    };
    char name[96];
    int nfail = 0;

    sdp_fill_normal(rng, h, nh, hamp);
    sdp_fill_normal(rng, w, nw, 1.0f);
    sdp_fill_normal(rng, dw0, nw, 0.01f);
    int nv = 0;
    for (int n = 0; n < N; n++) {
        /* ignore about one in four, and all of rows 8..15 (a whole block of 8) */
        tgt[n] = (sdp_rng_next(rng) % 4 == 0 || (n >= 8 && n < 16)) ? -1 : (int32_t)(n * 7 % V);
        nv += tgt[n] >= 0;
    }
    if (N == 1)
        tgt[0] = V - 1;
    const float scale = 1.0f / (float)(nv > 0 ? nv : 1);
    for (size_t i = 0; i < nh; i++)
        hd[i] = h[i];
    for (size_t i = 0; i < nw; i++) {
        wd[i] = w[i];
        dw0d[i] = dw0[i];
    }
    printf("-- %s: N=%d C=%d V=%d, h amp %g\n", label, N, C, V, (double)hamp);

    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
        struct sdp_lmhead_blocks bl = blocks[b];
        if (bl.rows && !bl.vcols)
            bl = sdp_cpu_lmhead_blocks(N, C, V, bl.threads);
        bl.rows = bl.rows > N ? N : bl.rows;
        bl.vcols = bl.vcols > V ? V : bl.vcols;
        const int nblocks = bl.rows ? (N + bl.rows - 1) / bl.rows : 1;
        double loss;
        int nvalid;
        oracle_run(&o, hd, wd, tgt, N, C, V, scale, dw0d, nblocks);
        memcpy(dw, dw0, nw * 4);
        memset(dh, 0x7f, nh * 4);
        if (bl.rows) {
            void *scratch = sdp_test_alloc(sdp_cpu_lmhead_ce_scratch(C, &bl));
            sdp_cpu_lmhead_ce(&loss, &nvalid, dh, dw, h, w, tgt, N, C, V, scale, &bl, scratch);
            nfail += check_threads(&bl, loss, dh, dw, h, w, tgt, N, C, V, scale, dw0, scratch);
            free(scratch);
            snprintf(name, sizeof(name), "lmhead_ce rows %d vcols %d shards %d threads %d", bl.rows,
                     bl.vcols, bl.shards, bl.threads);
        } else {
            sdp_cpu_lmhead_ce_ref(&loss, &nvalid, dh, dw, h, w, tgt, N, C, V, scale);
            snprintf(name, sizeof(name), "lmhead_ce_ref");
        }
        nfail += check_loss(name, loss, nvalid, &o);
        nfail += sdp_check("  dh", dh, o.dh, o.kdh, nh, SDP_SAFETY * SDP_U32, 0.0);
        nfail += sdp_check("  dw", dw, o.dw, o.kdw, nw, SDP_SAFETY * SDP_U32, 0.0);
        /* ignored rows: exactly zero gradient */
        int nz = 0;
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C && tgt[n] < 0; c++)
                nz += dh[(size_t)n * C + c] != 0.0f;
        if (nz) {
            printf("  %d dh elements of ignored rows are not 0  BAD\n", nz);
            nfail++;
        }
    }
    free(h), free(w), free(dw0), free(dh), free(dw), free(tgt), free(hd), free(wd), free(dw0d);
    free(o.dh), free(o.kdh), free(o.dw), free(o.kdw);
    return nfail;
}

/* The kernel's exp against exp() in double: a grid over [-104, 0] and the subnormal range, in
 * units of the result's ulp (subnormals: 2^-149). */
static int check_exp(void)
{
    double worst = 0.0, at = 0.0;
    for (int i = 0; i <= 4000000; i++) {
        const float x = -104.0f * (float)i / 4000000.0f;
        const double ref = exp((double)x), got = sdp_cpu_exp_neg(x);
        int e;
        frexp(ref, &e);
        const double ulp = ldexp(1.0, (e - 24 > -149 ? e - 24 : -149)), err = fabs(got - ref) / ulp;
        if (err > worst)
            worst = err, at = x;
    }
    const int bad = !(worst <= 1.0) || sdp_cpu_exp_neg(-200.0f) != 0.0f ||
                    sdp_cpu_exp_neg(-1e30f) != 0.0f || sdp_cpu_exp_neg(0.0f) != 1.0f;
    printf("exp over [-104, 0]: max error %.3f ulp at %.7g (allowed 1)  %s\n", worst, at,
           bad ? "BAD" : "ok");
    return bad;
}

/* A NaN in h (as a diverged run has) makes the loss NaN, as the libm's exp would (the kernel's exp
 * clamps negative NaNs; the row's max check passes them on) */
static int check_nan(void)
{
    enum { N = 4, C = 8, V = 300 };
    struct sdp_rng rng = { 41 };
    float h[N * C], w[V * C], dh[N * C], dw[V * C] = { 0 };
    const int32_t tgt[N] = { 1, 2, 3, 4 };
    struct sdp_lmhead_blocks b = { 2, 64, 3, 2 };
    double loss;
    int nvalid;

    sdp_fill_normal(&rng, h, N * C, 1.0f);
    sdp_fill_normal(&rng, w, V * C, 1.0f);
    h[C + 3] = -NAN;
    void *scratch = sdp_test_alloc(sdp_cpu_lmhead_ce_scratch(C, &b));
    sdp_cpu_lmhead_ce(&loss, &nvalid, dh, dw, h, w, tgt, N, C, V, 0.25f, &b, scratch);
    free(scratch);
    const int bad = !isnan(loss) || !isnan(dh[C]);
    printf("NaN in h: loss %g, dh of its row %g  %s\n", loss, (double)dh[C], bad ? "BAD" : "ok");
    return bad;
}

/* Calls at once from several threads (as workers of two ranks run their heads): one takes the pool,
 * the others run alone; every call gives the bits of a call on its own. */
enum { CN = 40, CC = 16, CV = 1000, CALLS = 3 };

struct call {
    const float *h, *w;
    const int32_t *tgt;
    float dh[CN * CC], dw[CV * CC];
    double loss;
};

static void *call_run(void *p)
{
    struct call *c = p;
    int nvalid;
    struct sdp_lmhead_blocks b = { 16, 64, 8, 2 };
    void *scratch = sdp_test_alloc(sdp_cpu_lmhead_ce_scratch(CC, &b));
    memset(c->dw, 0, sizeof(c->dw));
    sdp_cpu_lmhead_ce(&c->loss, &nvalid, c->dh, c->dw, c->h, c->w, c->tgt, CN, CC, CV, 0.1f, &b,
                      scratch);
    free(scratch);
    return NULL;
}

static int check_concurrent(void)
{
    struct sdp_rng rng = { 47 };
    static float h[CN * CC], w[CV * CC];
    static int32_t tgt[CN];
    static struct call one, calls[CALLS];
    pthread_t th[CALLS];
    int bad = 0, started[CALLS];

    sdp_fill_normal(&rng, h, CN * CC, 1.0f);
    sdp_fill_normal(&rng, w, CV * CC, 1.0f);
    for (int n = 0; n < CN; n++)
        tgt[n] = (int32_t)(sdp_rng_next(&rng) % CV);
    one = (struct call){ .h = h, .w = w, .tgt = tgt };
    call_run(&one);
    for (int i = 0; i < CALLS; i++)
        calls[i] = one;
    for (int i = 0; i < CALLS; i++)
        started[i] = pthread_create(&th[i], NULL, call_run, &calls[i]) == 0;
    for (int i = 0; i < CALLS; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            call_run(&calls[i]);
        bad |= memcmp(&calls[i].loss, &one.loss, sizeof(one.loss)) ||
               memcmp(calls[i].dh, one.dh, sizeof(one.dh)) ||
               memcmp(calls[i].dw, one.dw, sizeof(one.dw));
    }
    printf("%d calls at once: %s bits  %s\n", CALLS, bad ? "other" : "the same",
           bad ? "BAD" : "ok");
    return bad;
}

/* The element-wise row work: AVX-512 == reference, bit for bit, on rows of every length up to 40
 * (the 16-, 8- and 1-element steps), logits from -200 to 10 around a max, zeros, and a NaN */
static int check_rows_simd(void)
{
    struct sdp_rng rng = { 43 };
    float z[40], a[40], b[40];
    int nbad = 0;

    if (!sdp_cpu_have_avx512()) {
        printf("row work AVX-512 == reference: no AVX-512 here, skipped\n");
        return 0;
    }
    for (int n = 0; n <= 40; n++)
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < n; i++)
                z[i] = rep == 0 ? 0.0f : sdp_rng_normal(&rng, rep < 10 ? 3.0f : 60.0f);
            if (rep == 19 && n > 0)
                z[n / 2] = NAN;
            const float m1 = sdp_cpu_lmhead_row_max_ref(z, n),
                        m2 = sdp_cpu_lmhead_row_max_avx512(z, n);
            nbad += !(m1 == m2 || (isnan(m1) && isnan(m2)));
            const float m = isnan(m1) || n == 0 ? 0.0f : m1;
            const double s1 = sdp_cpu_lmhead_exp_sum_ref(z, n, m),
                         s2 = sdp_cpu_lmhead_exp_sum_avx512(z, n, m);
            nbad += memcmp(&s1, &s2, sizeof(s1)) != 0;
            memcpy(a, z, sizeof(z));
            memcpy(b, z, sizeof(z));
            sdp_cpu_lmhead_exp_scale_ref(a, n, m, 0.37f);
            sdp_cpu_lmhead_exp_scale_avx512(b, n, m, 0.37f);
            nbad += memcmp(a, b, (size_t)n * 4) != 0;
        }
    printf("row work AVX-512 == reference: %d differences  %s\n", nbad, nbad ? "BAD" : "ok");
    return nbad != 0;
}

int main(void)
{
    struct sdp_rng rng = { 37 };
    int nfail = 0;

    nfail += check_oracle_fd();
    nfail += check_exp();
    nfail += check_nan();
    nfail += check_rows_simd();
    nfail += check_concurrent();
    nfail += run_case(&rng, 37, 32, 211, 1.0f, "random");
    nfail += run_case(&rng, 20, 16, 97, 8.0f, "large logits");
    nfail += run_case(&rng, 1, 8, 5, 1.0f, "N=1");
    nfail += run_case(&rng, 64, 64, 4099, 0.3f, "wide vocabulary");
    return sdp_test_finish(nfail);
}
