/* SPDX-License-Identifier: MIT */
/* Checks the AVX-512 host kernels against their scalar references bit for bit (memcmp of whole
 * buffers, guard bytes around them included): the fp32 -> bf16 cast, and AdamW with fp32 and bf16
 * gradients, with and without decay, clipping coefficients, both lerp forms, bf16 / fp32 / both /
 * no working copy, zeroed or kept gradient; many lengths (0 to 1e6+3) and unaligned offsets, on
 * random data and on data salted with NaN, Inf, denormals, bf16 ties and huge values.  Then the
 * scalar AdamW against an fp64 oracle (both gradient dtypes), the gradient sum of squares (AVX-512
 * against the reference, and the reference against a long double oracle), and the dispatching
 * entry points.
 * Exits 77 when the CPU lacks AVX-512. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

#define GUARD 64 /* elements of slack around every buffer (offsets stay below GUARD) */

static const size_t sizes[] = { 0, 1, 15, 16, 17, 31, 32, 33, 63, 64 + 7, 100, 1000 + 13, 1000003 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define BIG    1000003

/* NaNs (quiet, signalling, payloads, both signs), infinities, zeros, denormals, huge values and
 * values that sit exactly between two bf16 values (ties to even, down and up) */
static const uint32_t special_bits[] = {
    0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fa5a5a5, 0xffffffff, 0x7f800000,
    0xff800000, 0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x00400000,
    0x00008000, 0x00018000, 0x3f808000, 0x3f818000, 0xbf808000, 0x7f7fffff, 0xff7fffff,
    0x7f7f8000, 0x7e000000, 0x0d000000, 0x3f807fff, 0x3f808001, 0x4b800000,
};
#define NSPECIAL (sizeof(special_bits) / sizeof(special_bits[0]))

static float special(struct sdp_rng *rng)
{
    return sdp_f32_from_bits(special_bits[sdp_rng_next(rng) % NSPECIAL]);
}

/* about 1 in 8 elements replaced by a special value when salt is set */
static void fill(struct sdp_rng *rng, float *x, size_t n, float std, int nonneg, int salt)
{
    for (size_t i = 0; i < n; i++) {
        float r = sdp_rng_normal(rng, std);
        if (nonneg)
            r = r * r;
        x[i] = salt && sdp_rng_next(rng) % 8 == 0 ? special(rng) : r;
    }
}

static void fill_guard(void *buf, size_t nbytes)
{
    memset(buf, 0xa5, nbytes);
}

/* ---- cast ---- */

static int check_cast(struct sdp_rng *rng)
{
    static const size_t offs[][2] = {
        { 0, 0 }, { 1, 0 }, { 0, 1 }, { 3, 5 }, { 16, 8 }, { 7, 31 }
    };
    float *src = sdp_test_alloc((BIG + 3 * GUARD) * sizeof(float));
    uint16_t *d_ref = sdp_test_alloc((BIG + 3 * GUARD) * sizeof(uint16_t));
    uint16_t *d_simd = sdp_test_alloc((BIG + 3 * GUARD) * sizeof(uint16_t));
    long ncase = 0, nbad = 0;

    for (size_t si = 0; si < NSIZES; si++) {
        for (size_t oi = 0; oi < sizeof(offs) / sizeof(offs[0]); oi++) {
            for (int mode = 0; mode < 3; mode++) {
                const size_t n = sizes[si], os = offs[oi][0], od = offs[oi][1];
                float *s = src + os;
                for (size_t i = 0; i < n; i++) /* random bits, normal values, specials */
                    s[i] = mode == 0   ? sdp_f32_from_bits((uint32_t)sdp_rng_next(rng))
                           : mode == 1 ? sdp_rng_normal(rng, 3.0f)
                                       : special(rng);
                fill_guard(d_ref, (BIG + 3 * GUARD) * sizeof(uint16_t));
                fill_guard(d_simd, (BIG + 3 * GUARD) * sizeof(uint16_t));
                sdp_cpu_cast_bf16_ref(d_ref + GUARD + od, s, n);
                sdp_cpu_cast_bf16_avx512(d_simd + GUARD + od, s, n);
                ncase++;
                if (memcmp(d_ref, d_simd, (n + od + 2 * GUARD) * sizeof(uint16_t)) != 0) {
                    if (nbad < 5)
                        for (size_t i = 0; i < n + od + 2 * GUARD; i++)
                            if (d_ref[i] != d_simd[i]) {
                                printf("  cast n=%zu src+%zu dst+%zu mode %d: [%zu] ref 0x%04x"
                                       " avx512 0x%04x\n",
                                       n, os, od, mode, i, d_ref[i], d_simd[i]);
                                break;
                            }
                    nbad++;
                }
            }
        }
    }
    printf("cast fp32 -> bf16: %ld cases (13 lengths x 6 offsets x 3 kinds of data), %ld differ "
           "from the reference  %s\n",
           ncase, nbad, nbad ? "BAD" : "ok");
    free(src);
    free(d_ref);
    free(d_simd);
    return nbad != 0;
}

/* ---- AdamW: AVX-512 vs reference ---- */

struct state {
    float *p, *m, *v, *g, *wf;
    uint16_t *gb, *wb;
};

static void state_alloc(struct state *s)
{
    const size_t nf = (BIG + 4 * GUARD) * sizeof(float), nh = (BIG + 4 * GUARD) * sizeof(uint16_t);
    s->p = sdp_test_alloc(nf);
    s->m = sdp_test_alloc(nf);
    s->v = sdp_test_alloc(nf);
    s->g = sdp_test_alloc(nf);
    s->wf = sdp_test_alloc(nf);
    s->gb = sdp_test_alloc(nh);
    s->wb = sdp_test_alloc(nh);
}

static void state_free(struct state *s)
{
    free(s->p);
    free(s->m);
    free(s->v);
    free(s->g);
    free(s->wf);
    free(s->gb);
    free(s->wb);
}

static void state_copy(struct state *dst, const struct state *src, size_t len)
{
    memcpy(dst->p, src->p, len * sizeof(float));
    memcpy(dst->m, src->m, len * sizeof(float));
    memcpy(dst->v, src->v, len * sizeof(float));
    memcpy(dst->g, src->g, len * sizeof(float));
    memcpy(dst->wf, src->wf, len * sizeof(float));
    memcpy(dst->gb, src->gb, len * sizeof(uint16_t));
    memcpy(dst->wb, src->wb, len * sizeof(uint16_t));
}

/* Compares two buffers; prints the first differing element.  Returns 1 when they differ. */
static int same(const char *what, const void *a, const void *b, size_t len, size_t esize,
                const char *cfg)
{
    if (memcmp(a, b, len * esize) == 0)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (memcmp((const char *)a + i * esize, (const char *)b + i * esize, esize) != 0) {
            uint32_t x = 0, y = 0;
            memcpy(&x, (const char *)a + i * esize, esize);
            memcpy(&y, (const char *)b + i * esize, esize);
            printf("  %s: %s differs at buffer index %zu: ref 0x%08x avx512 0x%08x\n", cfg, what, i,
                   (unsigned)x, (unsigned)y);
            break;
        }
    return 1;
}

struct adamw_case {
    size_t n, off, woff; /* length; element offsets of p, m, v, g and of the working copy */
    int gbf16, decay, zero_grad, copy; /* copy: 0 none, 1 bf16, 2 fp32, 3 both */
    int salt;
    struct sdp_adamw_hp hp;
};

static int run_adamw_case(const struct adamw_case *c, struct sdp_rng *rng, struct state *init,
                          struct state *a, struct state *b)
{
    const size_t len = c->n + c->off + c->woff + 2 * GUARD;
    const size_t o = GUARD + c->off, w = GUARD + c->woff;
    char cfg[200];

    fill_guard(init->p, len * sizeof(float));
    fill_guard(init->m, len * sizeof(float));
    fill_guard(init->v, len * sizeof(float));
    fill_guard(init->g, len * sizeof(float));
    fill_guard(init->wf, len * sizeof(float));
    fill_guard(init->gb, len * sizeof(uint16_t));
    fill_guard(init->wb, len * sizeof(uint16_t));
    fill(rng, init->p + o, c->n, 1.0f, 0, c->salt);
    fill(rng, init->m + o, c->n, 1e-3f, 0, c->salt);
    fill(rng, init->v + o, c->n, 1e-3f, 1, c->salt);
    fill(rng, init->g + o, c->n, 1e-2f, 0, c->salt);
    if (c->hp.lr == 0.0f) /* p unchanged: every bf16 tie and special reaches the copy-out */
        for (size_t i = 0; i < c->n; i++)
            init->p[o + i] = special(rng);
    for (size_t i = 0; i < c->n; i++)
        init->gb[o + i] =
            c->salt && i % 5 == 0 ? (uint16_t)sdp_rng_next(rng) : sdp_f32_to_bf16(init->g[o + i]);
    state_copy(a, init, len);
    state_copy(b, init, len);

    uint16_t *wb_a = c->copy & 1 ? a->wb + w : NULL, *wb_b = c->copy & 1 ? b->wb + w : NULL;
    float *wf_a = c->copy & 2 ? a->wf + w : NULL, *wf_b = c->copy & 2 ? b->wf + w : NULL;
    if (c->gbf16) {
        sdp_cpu_adamw_gbf16_ref(a->p + o, a->gb + o, a->m + o, a->v + o, wb_a, wf_a, c->n, &c->hp,
                                c->decay, c->zero_grad);
        sdp_cpu_adamw_gbf16_avx512(b->p + o, b->gb + o, b->m + o, b->v + o, wb_b, wf_b, c->n,
                                   &c->hp, c->decay, c->zero_grad);
    } else {
        sdp_cpu_adamw_ref(a->p + o, a->g + o, a->m + o, a->v + o, wb_a, wf_a, c->n, &c->hp,
                          c->decay, c->zero_grad);
        sdp_cpu_adamw_avx512(b->p + o, b->g + o, b->m + o, b->v + o, wb_b, wf_b, c->n, &c->hp,
                             c->decay, c->zero_grad);
    }
    snprintf(cfg, sizeof(cfg),
             "n=%zu off=%zu woff=%zu grad=%s decay=%d zero_grad=%d copy=%d salt=%d lr=%g b1=%g "
             "gscale=%g step=%d",
             c->n, c->off, c->woff, c->gbf16 ? "bf16" : "f32", c->decay, c->zero_grad, c->copy,
             c->salt, (double)c->hp.lr, (double)c->hp.beta1, (double)c->hp.gscale, c->hp.step);
    int bad = 0;
    bad |= same("p", a->p, b->p, len, 4, cfg);
    bad |= same("m", a->m, b->m, len, 4, cfg);
    bad |= same("v", a->v, b->v, len, 4, cfg);
    bad |= same("g (fp32)", a->g, b->g, len, 4, cfg);
    bad |= same("g (bf16)", a->gb, b->gb, len, 2, cfg);
    bad |= same("copy (bf16)", a->wb, b->wb, len, 2, cfg);
    bad |= same("copy (fp32)", a->wf, b->wf, len, 4, cfg);
    return bad;
}

static int check_adamw_simd(struct sdp_rng *rng)
{
    static const size_t offs[][2] = { { 0, 0 }, { 1, 3 }, { 5, 0 }, { 0, 17 }, { 13, 13 } };
    static const struct sdp_adamw_hp hps[] = {
        /* lr, beta1, beta2, eps, weight_decay, gscale, step */
        { 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 1 },
        { 3e-4f, 0.9f, 0.95f, 1e-8f, 0.01f, 0.37f, 7 },   /* clipped gradient */
        { 1e-2f, 0.3f, 0.99f, 1e-6f, 0.1f, 1e-3f, 1000 }, /* |1 - b1| >= 0.5: the other lerp */
        { 0.0f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 3 },     /* p unchanged: copy-out of ties */
        { 1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 65504.0f, 1 },    /* degenerate: eps 0, b1 = b2 = 0 */
    };
    struct state init, a, b;
    long ncase = 0, nbad = 0;

    state_alloc(&init);
    state_alloc(&a);
    state_alloc(&b);
    for (size_t si = 0; si < NSIZES; si++) {
        const int big = sizes[si] == BIG;
        for (size_t oi = 0; oi < sizeof(offs) / sizeof(offs[0]); oi++) {
            for (int k = 0; k < 2 * 2 * 4 * 2; k++) {
                struct adamw_case c = { .n = sizes[si], .off = offs[oi][0], .woff = offs[oi][1] };
                c.gbf16 = k & 1;
                c.decay = (k >> 1) & 1;
                c.copy = (k >> 2) & 3;
                c.salt = (k >> 4) & 1;
                c.zero_grad = (int)((oi + (size_t)k) % 3 == 0);
                /* the largest length only with the codelet's shapes, to bound the run time */
                if (big && (c.copy != 1 || oi > 1))
                    continue;
                for (size_t hi = 0; hi < sizeof(hps) / sizeof(hps[0]); hi++) {
                    if (big && hi > 1)
                        continue;
                    c.hp = hps[hi];
                    ncase++;
                    nbad += run_adamw_case(&c, rng, &init, &a, &b);
                    if (nbad > 10)
                        goto out;
                }
            }
        }
    }
out:
    printf("adamw AVX-512 vs reference: %ld cases, %ld with a difference in p, m, v, g or the "
           "copy  %s\n",
           ncase, nbad, nbad ? "BAD" : "ok");
    state_free(&init);
    state_free(&a);
    state_free(&b);
    return nbad != 0;
}

/* ---- scalar AdamW against an fp64 oracle ---- */

static int check_adamw_oracle(struct sdp_rng *rng, int gbf16)
{
    enum { N = 20011, STEPS = 3 };
    float *p = sdp_test_alloc(N * sizeof(float)), *m = sdp_test_alloc(N * sizeof(float));
    float *v = sdp_test_alloc(N * sizeof(float)), *g = sdp_test_alloc(N * sizeof(float));
    float *wf = sdp_test_alloc(N * sizeof(float));
    uint16_t *gb = sdp_test_alloc(N * sizeof(uint16_t)), *wb = sdp_test_alloc(N * sizeof(uint16_t));
    double *pref = sdp_test_alloc(N * sizeof(double)), *pmag = sdp_test_alloc(N * sizeof(double));
    double *mref = sdp_test_alloc(N * sizeof(double)), *mmag = sdp_test_alloc(N * sizeof(double));
    double *vref = sdp_test_alloc(N * sizeof(double));
    int nfail = 0;
    const struct sdp_adamw_hp hps[] = { { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.37f, 0 },
                                        { 3e-4f, 0.3f, 0.999f, 1e-8f, 0.1f, 1.0f, 0 } };

    for (int cfg = 0; cfg < 2; cfg++) {
        const struct sdp_adamw_hp hp = hps[cfg];
        const int decay = !cfg;
        sdp_fill_normal(rng, p, N, 1.0f);
        memset(m, 0, N * sizeof(float));
        memset(v, 0, N * sizeof(float));
        for (int step = 1; step <= STEPS; step++) {
            struct sdp_adamw_hp h = hp;
            char name[96];
            h.step = step;
            sdp_fill_normal(rng, g, N, 1e-2f);
            g[1] = 0.0f;
            g[2] = 1e15f;
            g[3] = 1e-30f;
            for (int i = 0; i < N; i++) { /* the bf16 case sees exactly the widened gradient */
                gb[i] = sdp_f32_to_bf16(g[i]);
                if (gbf16)
                    g[i] = sdp_bf16_to_f32(gb[i]);
            }
            /* torch.optim.AdamW in double from the current fp32 state.  Error bound per element:
             * m = b1 m + (1-b1) g' takes <= 4 roundings, each <= u32 of a term magnitude:
             * |dm| <= 4 u32 mmag, mmag = |b1 m| + |(1-b1) g'|; v is a sum of non-negative terms
             * (<= 5 u32 relative); denom = sqrt(v)/sqrt(bc2) + eps, positive terms (<= 5 u32
             * relative, sqrt halving v's error); p = pd + s m / denom with s = -lr/bc1 (1
             * rounding): |dp| <= 2 u32 |pd| + 10 u32 |s m / denom| + |s / denom| |dm|, so
             * pmag = |pd| + |upd| + |s| mmag / denom and the check allows SDP_RTOL_ELEM = 16 u32
             * of it (at least 1.6x margin); v gets atol 2^-147 for underflowing g'^2 (see
             * test_kernels_adamw.c). */
            const double bc1 = 1.0 - pow(hp.beta1, step), bc2 = 1.0 - pow(hp.beta2, step);
            for (int i = 0; i < N; i++) {
                const double gi = (double)g[i] * hp.gscale;
                const double pd = p[i] * (decay ? 1.0 - (double)hp.lr * hp.weight_decay : 1.0);
                mref[i] = hp.beta1 * (double)m[i] + (1.0 - hp.beta1) * gi;
                vref[i] = hp.beta2 * (double)v[i] + (1.0 - hp.beta2) * gi * gi;
                const double denom = sqrt(vref[i]) / sqrt(bc2) + hp.eps;
                const double upd = hp.lr / bc1 * mref[i] / denom;
                pref[i] = pd - upd;
                mmag[i] = fabs(hp.beta1 * (double)m[i]) + fabs((1.0 - hp.beta1) * gi);
                pmag[i] = fabs(pd) + fabs(upd) + hp.lr / bc1 * mmag[i] / denom;
            }
            if (gbf16)
                sdp_cpu_adamw_gbf16_ref(p, gb, m, v, step % 2 ? wb : NULL, step % 2 ? NULL : wf, N,
                                        &h, decay, 1);
            else
                sdp_cpu_adamw_ref(p, g, m, v, step % 2 ? wb : NULL, step % 2 ? NULL : wf, N, &h,
                                  decay, 1);
            const char *gname = gbf16 ? "bf16" : "f32";
            snprintf(name, sizeof(name), "ref g=%s cfg %d step %d p", gname, cfg, step);
            nfail += sdp_check(name, p, pref, pmag, N, SDP_RTOL_ELEM, 0.0);
            snprintf(name, sizeof(name), "ref g=%s cfg %d step %d m", gname, cfg, step);
            nfail += sdp_check(name, m, mref, mmag, N, SDP_RTOL_ELEM, 0.0);
            snprintf(name, sizeof(name), "ref g=%s cfg %d step %d v", gname, cfg, step);
            nfail += sdp_check(name, v, vref, NULL, N, SDP_RTOL_ELEM, 0x1p-147);
            long nbad = 0;
            for (int i = 0; i < N; i++) {
                if (step % 2 ? wb[i] != sdp_f32_to_bf16(p[i]) : memcmp(&wf[i], &p[i], 4) != 0)
                    nbad++;
                if (gbf16 ? gb[i] != 0 : g[i] != 0.0f)
                    nbad++;
            }
            printf("ref g=%s cfg %d step %d %s copy and zeroed gradient: %ld mismatches  %s\n",
                   gname, cfg, step, step % 2 ? "bf16" : "fp32", nbad, nbad ? "BAD" : "ok");
            nfail += nbad != 0;
        }
    }
    free(p);
    free(m);
    free(v);
    free(g);
    free(wf);
    free(gb);
    free(wb);
    free(pref);
    free(pmag);
    free(mref);
    free(mmag);
    free(vref);
    return nfail;
}

/* ---- gradient sum of squares ---- */

/* Same double, or both NaN (a NaN's payload is whatever the additions kept). */
static int same_sum(double a, double b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof(a)) == 0;
}

static int check_sumsq(struct sdp_rng *rng)
{
    float *g = malloc((BIG + GUARD) * sizeof(float));
    long ncase = 0, nbad = 0, noracle = 0;
    double worst = 0.0;
    if (!g)
        return 1;
    for (size_t si = 0; si < NSIZES; si++)
        for (size_t off = 0; off < 4; off++)
            for (int salt = 0; salt < 2; salt++) {
                const size_t n = sizes[si];
                fill(rng, g + off, n, salt ? 1.0f : 3e-2f, 0, salt);
                const double ref = sdp_cpu_sumsq_ref(g + off, n);
                const double simd = sdp_cpu_sumsq_avx512(g + off, n);
                ncase++;
                if (!same_sum(ref, simd)) {
                    nbad++;
                    printf("  sumsq n=%zu +%zu salt %d: ref %.17g avx512 %.17g\n", n, off, salt,
                           ref, simd);
                }
                if (!salt) { /* finite data: against a long double oracle */
                    long double o = 0.0L;
                    for (size_t i = 0; i < n; i++)
                        o += (long double)g[off + i] * g[off + i];
                    const double rel =
                        o > 0 ? (double)fabsl((long double)ref - o) / (double)o : fabs(ref);
                    worst = rel > worst ? rel : worst;
                    noracle += rel > 1e-13;
                }
            }
    printf("sumsq AVX-512 vs reference: %ld cases (13 lengths x 4 offsets x plain/salted), %ld "
           "differ; reference vs long double oracle: worst relative error %.2e (limit 1e-13)  "
           "%s\n",
           ncase, nbad, worst, nbad || noracle ? "BAD" : "ok");
    free(g);
    return (int)(nbad + noracle);
}

/* ---- the dispatching entry points ---- */

static int check_dispatch(struct sdp_rng *rng)
{
    enum { N = 1029 };
    static float p[2][N], m[2][N], v[2][N], g[2][N];
    static uint16_t gb[2][N], wb[2][N];
    static float src[N];
    static uint16_t c[2][N];
    const struct sdp_adamw_hp hp = { 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 2 };
    const char *env = getenv("SDP_HOST_KERNELS");
    const enum sdp_cpu_isa isa = sdp_cpu_isa();
    const enum sdp_cpu_isa want =
        env && strcmp(env, "scalar") == 0 ? SDP_CPU_ISA_SCALAR : SDP_CPU_ISA_AVX512;
    int nbad = isa != want;

    printf("dispatch: SDP_HOST_KERNELS=%s -> %s (expected %s)  %s\n", env ? env : "(unset)",
           sdp_cpu_isa_name(isa), sdp_cpu_isa_name(want), isa != want ? "BAD" : "ok");
    fill(rng, p[0], N, 1.0f, 0, 0);
    fill(rng, m[0], N, 1e-3f, 0, 0);
    fill(rng, v[0], N, 1e-3f, 1, 0);
    fill(rng, g[0], N, 1e-2f, 0, 0);
    fill(rng, src, N, 1.0f, 0, 1);
    for (int i = 0; i < N; i++)
        gb[0][i] = sdp_f32_to_bf16(g[0][i]);
    memcpy(p[1], p[0], sizeof(p[0]));
    memcpy(m[1], m[0], sizeof(m[0]));
    memcpy(v[1], v[0], sizeof(v[0]));
    memcpy(g[1], g[0], sizeof(g[0]));
    memcpy(gb[1], gb[0], sizeof(gb[0]));
    sdp_cpu_adamw(p[0], g[0], m[0], v[0], wb[0], NULL, N, &hp, 1, 0);
    sdp_cpu_adamw_ref(p[1], g[1], m[1], v[1], wb[1], NULL, N, &hp, 1, 0);
    sdp_cpu_adamw_gbf16(p[0], gb[0], m[0], v[0], wb[0], NULL, N, &hp, 0, 0);
    sdp_cpu_adamw_gbf16_ref(p[1], gb[1], m[1], v[1], wb[1], NULL, N, &hp, 0, 0);
    sdp_cpu_cast_bf16(c[0], src, N);
    sdp_cpu_cast_bf16_ref(c[1], src, N);
    const double q[2] = { sdp_cpu_sumsq(src, N), sdp_cpu_sumsq_ref(src, N) };
    const int differ = memcmp(p[0], p[1], sizeof(p[0])) || memcmp(m[0], m[1], sizeof(m[0])) ||
                       memcmp(v[0], v[1], sizeof(v[0])) || memcmp(wb[0], wb[1], sizeof(wb[0])) ||
                       memcmp(c[0], c[1], sizeof(c[0])) || !same_sum(q[0], q[1]);
    printf("dispatch: sdp_cpu_adamw, sdp_cpu_adamw_gbf16, sdp_cpu_cast_bf16, sdp_cpu_sumsq == "
           "references: %s  %s\n",
           differ ? "no" : "yes", differ ? "BAD" : "ok");
    return nbad + differ;
}

int main(void)
{
    struct sdp_rng rng = { 77 };
    int nfail = 0;

    if (!sdp_cpu_have_avx512()) {
        printf("this CPU (or build) lacks AVX-512 F/BW/VL: the AVX-512 kernels cannot run; "
               "SKIP\n");
        return 77;
    }
    nfail += check_cast(&rng);
    nfail += check_adamw_simd(&rng);
    nfail += check_adamw_oracle(&rng, 0);
    nfail += check_adamw_oracle(&rng, 1);
    nfail += check_sumsq(&rng);
    nfail += check_dispatch(&rng);
    return sdp_test_finish(nfail);
}
