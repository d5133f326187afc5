/* SPDX-License-Identifier: MIT */
/* Shared helpers of the test programs: the named tolerances (each with its derivation), a
 * deterministic RNG, the CHECK macro, and checks that compare a float tensor to an fp64 reference
 * and print what was compared (llm.c check_tensor style).  Header-only, static inline; no StarPU,
 * no runtime code. */
#ifndef SDP_TEST_H
#define SDP_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tolerances (see the "Tolerances" table of the style guide) ---- */

/* Unit roundoffs: fp32 has a 24-bit significand, bf16 an 8-bit one; rounding to nearest makes a
 * relative error of at most u. */
#define SDP_U32   (1.0 / 16777216.0) /* 2^-24 */
#define SDP_UBF16 (1.0 / 256.0)      /* 2^-8 */

/* fp32 elementwise kernels vs an fp64 reference: a handful of roundings per element (products, a
 * division, a sqrt, an fp32 exp of ~1-2 ulp), each <= u32 relative, so 16 u32 (~1e-6) leaves a
 * factor >= 2 of margin; atol = SDP_RTOL_ELEM * max|ref| covers results that cancel to ~0. */
#define SDP_RTOL_ELEM (16.0 * SDP_U32)

/* Sums of k terms in fp32 (GEMMs, reductions): the classical bound |fl(sum) - sum| <= k u sum|t_i|
 * (Higham, Thm 3.1) gives ||C - Cref||_F <= k u ||A||_F ||B||_F for C = A B.  The test ratio
 * ||C - Cref||_F / (k u32 ||A||_F ||B||_F) must stay below 10 (Chameleon's threshold); blocked
 * BLAS summation usually lands far below 1. */
#define SDP_GEMM_RESID_MAX 10.0

/* Composite kernels (norm backward, attention, cross-entropy) use per-element bounds
 *   |x_i - ref_i| <= SDP_SAFETY * u32 * kappa_i
 * where kappa_i is a first-order error magnitude derived in each test from the sums of absolute
 * terms (condition) that the fp64 oracle computes alongside the reference.  The factor 10 absorbs
 * second-order terms and slack in the first-order constants, as Chameleon's GEMM threshold does. */
#define SDP_SAFETY 10.0

/* bf16 outputs: the reference rounded once to bf16 is within u_bf16 relative; the kernel rounding
 * an fp32 value that is itself off by a few u32 can land one bf16 ulp away: 2 u_bf16. */
#define SDP_RTOL_BF16 (2.0 * SDP_UBF16)

/* ---- fp32 as its bits and back (memcpy: no aliasing question) ---- */

static inline float sdp_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint32_t sdp_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* ---- deterministic random numbers (splitmix64, Steele et al. 2014) ---- */

struct sdp_rng {
    uint64_t state;
};

static inline uint64_t sdp_rng_next(struct sdp_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/** uniform double in [0, 1), 53 random bits */
static inline double sdp_rng_unit(struct sdp_rng *r)
{
    return (double)(sdp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/** uniform float in [lo, hi) */
static inline float sdp_rng_uniform(struct sdp_rng *r, float lo, float hi)
{
    return (float)(lo + (hi - lo) * sdp_rng_unit(r));
}

/** standard normal (Box-Muller in double), rounded to float, times std */
static inline float sdp_rng_normal(struct sdp_rng *r, float std)
{
    double u1 = sdp_rng_unit(r), u2 = sdp_rng_unit(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static inline void sdp_fill_uniform(struct sdp_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = sdp_rng_uniform(r, lo, hi);
}

static inline void sdp_fill_normal(struct sdp_rng *r, float *x, size_t n, float std)
{
    for (size_t i = 0; i < n; i++)
        x[i] = sdp_rng_normal(r, std);
}

/* ---- CHECK: count a failed condition, say where and why, carry on ---- */

/* Failed CHECKs of this program (each test is one translation unit). */
static int sdp_test_nfail __attribute__((unused));

/** CHECK(cond, fmt, ...): when cond is false, print "FAIL file:line: " and the message, and count
 * it in sdp_test_nfail; main ends with `return sdp_test_finish(sdp_test_nfail);`. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            sdp_test_nfail++;                                                                      \
        }                                                                                          \
    } while (0)

/* ---- allocation: tests may exit on failure (library code never does) ---- */

static inline void *sdp_test_alloc(size_t nbytes)
{
    void *p = calloc(1, nbytes ? nbytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory allocating %zu bytes\nFAIL\n", nbytes);
        exit(1);
    }
    return p;
}

/* ---- comparisons ---- */

/** Frobenius norm of a float array, in double. */
static inline double sdp_norm_f(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

/**
 * Compare x (float) to ref (double) elementwise: element i passes when
 *   |x_i - ref_i| <= rtol * (mag ? mag[i] : |ref_i|) + atol,
 * or when both are NaN, or both are the same infinity.  Prints one summary line (max abs and rel
 * error with their index, worst error as % of allowed), and on failure the first few offending
 * (value, reference) pairs.  Returns 0 on pass, 1 on failure.
 */
static inline int sdp_check(const char *name, const float *x, const double *ref, const double *mag,
                            size_t n, double rtol, double atol)
{
    double max_abs = 0.0, max_rel = 0.0, worst = 0.0;
    size_t i_abs = 0, i_rel = 0, nbad = 0;

    for (size_t i = 0; i < n; i++) {
        const double r = ref[i], v = x[i];
        int ok;
        double err = 0.0, allowed = rtol * (mag ? mag[i] : fabs(r)) + atol;
        if (isnan(r) || isnan(v) || isinf(r) || isinf(v)) {
            ok = (isnan(r) && isnan(v)) || (v == r);
            if (!ok)
                err = INFINITY;
        } else {
            err = fabs(v - r);
            ok = err <= allowed;
            if (err > max_abs) {
                max_abs = err;
                i_abs = i;
            }
            if (r != 0.0 && err / fabs(r) > max_rel) {
                max_rel = err / fabs(r);
                i_rel = i;
            }
        }
        const double frac = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0.0);
        if (frac > worst)
            worst = frac;
        if (!ok) {
            if (nbad < 5)
                printf("  %s[%zu] = %.9g, ref %.9g, |err| %.3g > allowed %.3g\n", name, i, v, r,
                       err, allowed);
            nbad++;
        }
    }
    printf("%-34s n=%-8zu max abs err %.3g [%zu]  max rel err %.3g [%zu]  worst %.1f%% of allowed"
           "  %s\n",
           name, n, max_abs, i_abs, max_rel, i_rel, 100.0 * worst, nbad ? "BAD" : "ok");
    if (nbad)
        printf("  %s: %zu of %zu elements out of tolerance\n", name, nbad, n);
    return nbad != 0;
}

/** sdp_check with the elementwise fp32 rule: rtol = SDP_RTOL_ELEM, atol = rtol * max|ref|. */
static inline int sdp_check_elem(const char *name, const float *x, const double *ref, size_t n)
{
    double rmax = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(ref[i]) && fabs(ref[i]) > rmax)
            rmax = fabs(ref[i]);
    return sdp_check(name, x, ref, NULL, n, SDP_RTOL_ELEM, SDP_RTOL_ELEM * rmax);
}

/**
 * GEMM-style check: ratio = ||x - ref||_F / (k u32 norm) must be < SDP_GEMM_RESID_MAX, where norm
 * is
 * ||A||_F ||B||_F for C = A B (plus ||C0||_F when the product is added to C0, counted in k as one
 * more term).  Returns 0 on pass.
 */
static inline int sdp_check_gemm(const char *name, const float *x, const double *ref, size_t n,
                                 int k, double norm)
{
    double d = 0.0;
    size_t imax = 0;
    double emax = -1.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - ref[i]);
        d += e * e;
        if (e > emax || isnan(e)) {
            emax = e;
            imax = i;
        }
    }
    d = sqrt(d);
    const double denom = (double)(k > 0 ? k : 1) * SDP_U32 * norm;
    const double ratio = denom > 0 ? d / denom : (d > 0 ? INFINITY : 0.0);
    const int bad = !(ratio < SDP_GEMM_RESID_MAX);
    printf("%-34s n=%-8zu k=%-6d ||err||_F/(k u ||A|| ||B||) = %.3g (%.1f%% of allowed)  %s\n",
           name, n, k, ratio, 100.0 * ratio / SDP_GEMM_RESID_MAX, bad ? "BAD" : "ok");
    if (bad && n > 0)
        printf("  %s[%zu] = %.9g, ref %.9g (largest error)\n", name, imax, (double)x[imax],
               ref[imax]);
    return bad;
}

/** Compare two float arrays bit for bit (NaNs included). Returns 0 when identical. */
static inline int sdp_check_bits(const char *name, const float *x, const float *y, size_t n)
{
    size_t nbad = 0;
    for (size_t i = 0; i < n; i++) {
        union {
            float f;
            uint32_t u;
        } a = { .f = x[i] }, b = { .f = y[i] };
        if (a.u != b.u) {
            if (nbad < 5)
                printf("  %s[%zu]: 0x%08x vs 0x%08x\n", name, i, (unsigned)a.u, (unsigned)b.u);
            nbad++;
        }
    }
    printf("%-34s n=%-8zu bitwise %s\n", name, n, nbad ? "DIFFERENT" : "identical");
    return nbad != 0;
}

/** Print PASS or FAIL as the last line and return the exit status (0 pass, 1 fail). */
static inline int sdp_test_finish(int nfail)
{
    printf("%s\n", nfail ? "FAIL" : "PASS");
    return nfail ? 1 : 0;
}

#endif
