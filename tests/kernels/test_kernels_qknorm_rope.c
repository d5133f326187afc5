/* SPDX-License-Identifier: MIT */
/* Checks the per-head q/k RMSNorm + rotary embedding forward and backward (with norms as in Qwen3,
 * without as in Llama; GQA with NH/NKV = 1, 2, 4) against an fp64 oracle, the oracle's backward
 * against finite differences, sdp_cpu_rope_inv_freq (default and Llama-3 scaling) against the
 * formula evaluated here in double, and sdp_cpu_rope_freqs (yarn, linear, dynamic) against values
 * printed by transformers. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codelets/cpu/rope.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

struct shape {
    int N, T, NH, NKV, HD;
    float scale; /* the factor of cos and sin (yarn's attention factor) */
};

/* The angle is specified as the fp32 product pos * inv_freq (Hugging Face computes it in fp32), so
 * the oracle uses that same float angle; everything after it is double. */
static double angle(int pos, float inv_freq)
{
    return (double)((float)pos * inv_freq);
}

/* out = rope(norm(x)) per head in double; w NULL = no norm.  mag: |a c| + |b s| per output. */
static void oracle_fwd(double *out, double *mag, const double *x, const double *qw,
                       const double *kw, const float *inv_freq, struct shape s, double eps)
{
    const int QKV = (s.NH + 2 * s.NKV) * s.HD, half = s.HD / 2;
    for (int n = 0; n < s.N; n++)
        for (int h = 0; h < s.NH + 2 * s.NKV; h++) {
            const double *xh = x + n * QKV + h * s.HD;
            double *o = out + n * QKV + h * s.HD, *mg = mag ? mag + n * QKV + h * s.HD : NULL;
            const double *w = h < s.NH ? qw : (h < s.NH + s.NKV ? kw : NULL);
            double y[256], ss = 0.0;
            for (int i = 0; i < s.HD; i++)
                ss += xh[i] * xh[i];
            const double rs = 1.0 / sqrt(ss / s.HD + eps);
            for (int i = 0; i < s.HD; i++)
                y[i] = w ? xh[i] * rs * w[i] : xh[i];
            if (h >= s.NH + s.NKV) { /* v: copy */
                for (int i = 0; i < s.HD; i++) {
                    o[i] = y[i];
                    if (mg)
                        mg[i] = fabs(y[i]);
                }
                continue;
            }
            for (int i = 0; i < half; i++) {
                const double a = angle(n % s.T, inv_freq[i]);
                const double c = s.scale * cos(a), sn = s.scale * sin(a);
                o[i] = y[i] * c - y[i + half] * sn;
                o[i + half] = y[i + half] * c + y[i] * sn;
                if (mg) {
                    mg[i] = fabs(y[i] * c) + fabs(y[i + half] * sn);
                    mg[i + half] = fabs(y[i + half] * c) + fabs(y[i] * sn);
                }
            }
        }
}

/* Analytic backward: dy = R^T g, then dx = r w dy - r^3/HD x sum(dy w x), dw += dy x r.
 * dxmag: |r w dy| + r^3/HD |x| sum|dy w x| with |dy| replaced by its magnitude |g_a c| + |g_b s|;
 * dwmag: sum of |dy x r| (same replacement). */
static void oracle_bwd(double *dx, double *dxmag, double *dqw, double *dkw, double *dqwmag,
                       double *dkwmag, const double *g, const double *x, const double *qw,
                       const double *kw, const float *inv_freq, struct shape s, double eps)
{
    const int QKV = (s.NH + 2 * s.NKV) * s.HD, half = s.HD / 2;
    for (int i = 0; i < s.HD; i++)
        dqw[i] = dkw[i] = dqwmag[i] = dkwmag[i] = 0.0;
    for (int n = 0; n < s.N; n++)
        for (int h = 0; h < s.NH + 2 * s.NKV; h++) {
            const double *gh = g + n * QKV + h * s.HD, *xh = x + n * QKV + h * s.HD;
            double *d = dx + n * QKV + h * s.HD, *dm = dxmag ? dxmag + n * QKV + h * s.HD : NULL;
            double dy[256], my[256];
            if (h >= s.NH + s.NKV) {
                for (int i = 0; i < s.HD; i++) {
                    d[i] = gh[i];
                    if (dm)
                        dm[i] = fabs(gh[i]);
                }
                continue;
            }
            for (int i = 0; i < half; i++) {
                const double a = angle(n % s.T, inv_freq[i]);
                const double c = s.scale * cos(a), sn = s.scale * sin(a);
                dy[i] = gh[i] * c + gh[i + half] * sn;
                dy[i + half] = gh[i + half] * c - gh[i] * sn;
                my[i] = fabs(gh[i] * c) + fabs(gh[i + half] * sn);
                my[i + half] = fabs(gh[i + half] * c) + fabs(gh[i] * sn);
            }
            const double *w = h < s.NH ? qw : kw;
            double *dw = h < s.NH ? dqw : dkw, *dwm = h < s.NH ? dqwmag : dkwmag;
            if (!w) {
                for (int i = 0; i < s.HD; i++) {
                    d[i] = dy[i];
                    if (dm)
                        dm[i] = my[i];
                }
                continue;
            }
            double ss = 0.0, dot = 0.0, adot = 0.0;
            for (int i = 0; i < s.HD; i++) {
                ss += xh[i] * xh[i];
                dot += dy[i] * w[i] * xh[i];
                adot += my[i] * fabs(w[i] * xh[i]);
            }
            const double rs = 1.0 / sqrt(ss / s.HD + eps), c3 = rs * rs * rs / s.HD;
            for (int i = 0; i < s.HD; i++) {
                d[i] = rs * w[i] * dy[i] - c3 * xh[i] * dot;
                if (dm)
                    dm[i] = rs * fabs(w[i]) * my[i] + c3 * fabs(xh[i]) * adot;
                dw[i] += dy[i] * xh[i] * rs;
                dwm[i] += my[i] * fabs(xh[i]) * rs;
            }
        }
}

static int check_oracle_fd(void)
{
    const struct shape s = { 3, 2, 2, 1, 4, 1.25f };
    enum { QKV = 16, NT = 3 * 16 };
    struct sdp_rng rng = { 5 };
    double x[NT], g[NT], y[NT], dx[NT], qw[4], kw[4], dqw[4], dkw[4], m1[4], m2[4], worst = 0.0;
    float inv_freq[2] = { 1.0f, 0.37f };
    const double eps = 1e-6;

    for (int i = 0; i < NT; i++) {
        x[i] = sdp_rng_normal(&rng, 1.0f);
        g[i] = sdp_rng_normal(&rng, 1.0f);
    }
    for (int i = 0; i < 4; i++) {
        qw[i] = 1.0 + sdp_rng_normal(&rng, 0.3f);
        kw[i] = 1.0 + sdp_rng_normal(&rng, 0.3f);
    }
    oracle_bwd(dx, NULL, dqw, dkw, m1, m2, g, x, qw, kw, inv_freq, s, eps);
    for (int which = 0; which < 3; which++) {
        double *p = which == 0 ? x : (which == 1 ? qw : kw);
        const double *an = which == 0 ? dx : (which == 1 ? dqw : dkw);
        for (int i = 0; i < (which ? 4 : NT); i++) {
            const double h = 1e-6, save = p[i];
            double lp = 0.0, lm = 0.0;
            p[i] = save + h;
            oracle_fwd(y, NULL, x, qw, kw, inv_freq, s, eps);
            for (int j = 0; j < NT; j++)
                lp += g[j] * y[j];
            p[i] = save - h;
            oracle_fwd(y, NULL, x, qw, kw, inv_freq, s, eps);
            for (int j = 0; j < NT; j++)
                lm += g[j] * y[j];
            p[i] = save;
            const double e = fabs((lp - lm) / (2 * h) - an[i]) / (1.0 + fabs(an[i]));
            worst = e > worst ? e : worst;
        }
    }
    const int bad = !(worst < 1e-7); /* central differences: ~h^2 + 1e-16/h */
    printf("oracle backward vs finite differences: max rel err %.3g (allowed 1e-7)  %s\n", worst,
           bad ? "BAD" : "ok");
    return bad;
}

static int run_case(struct sdp_rng *rng, struct shape s, int with_norm)
{
    const int QKV = (s.NH + 2 * s.NKV) * s.HD, NQK = s.NH + s.NKV;
    const size_t n = (size_t)s.N * QKV;
    const float eps = 1e-6f;
    float *x = sdp_test_alloc(n * 4), *out = sdp_test_alloc(n * 4), *g = sdp_test_alloc(n * 4);
    float *dx = sdp_test_alloc(n * 4), *rstd = sdp_test_alloc((size_t)s.N * NQK * 4);
    float qw[256], kw[256], dqw[256], dkw[256], dqw0[256], dkw0[256], inv_freq[128];
    double *xd = sdp_test_alloc(n * 8), *gd = sdp_test_alloc(n * 8), *ref = sdp_test_alloc(n * 8);
    double *mag = sdp_test_alloc(n * 8), qwd[256], kwd[256], r1[256], r2[256], m1[256], m2[256];
    char name[128];
    int nfail = 0;

    sdp_cpu_rope_inv_freq(inv_freq, s.HD, 10000.0, 0, 0, 0, 0);
    sdp_fill_normal(rng, x, n, 2.0f);
    sdp_fill_normal(rng, g, n, 1.0f);
    for (int i = 0; i < s.HD; i++) {
        qw[i] = 1.0f + sdp_rng_normal(rng, 0.2f);
        kw[i] = 1.0f + sdp_rng_normal(rng, 0.2f);
        dqw0[i] = sdp_rng_normal(rng, 1.0f);
        dkw0[i] = sdp_rng_normal(rng, 1.0f);
        qwd[i] = qw[i];
        kwd[i] = kw[i];
    }
    for (size_t i = 0; i < n; i++) {
        xd[i] = x[i];
        gd[i] = g[i];
    }
    const float *qwp = with_norm ? qw : NULL, *kwp = with_norm ? kw : NULL;
    const double *qwdp = with_norm ? qwd : NULL, *kwdp = with_norm ? kwd : NULL;
    printf("-- N=%d T=%d NH=%d NKV=%d HD=%d scale %g %s\n", s.N, s.T, s.NH, s.NKV, s.HD, s.scale,
           with_norm ? "with q/k norm" : "no norm");

    /* forward: normalized values carry ~4 roundings, the rotation 3 more plus the cos/sin rounding,
     * relative to |a c| + |b s|: SDP_RTOL_ELEM on that magnitude. */
    oracle_fwd(ref, mag, xd, qwdp, kwdp, inv_freq, s, eps);
    sdp_cpu_qknorm_rope_fwd_ref(out, rstd, x, qwp, kwp, inv_freq, s.scale, NULL, s.N, s.T, s.NH,
                                s.NKV, s.HD, eps);
    snprintf(name, sizeof(name), "qknorm_rope_fwd (%s)", with_norm ? "norm" : "no norm");
    nfail += sdp_check(name, out, ref, mag, n, SDP_RTOL_ELEM, 0.0);

    /* backward: dx relative to its magnitude (rotation + norm backward, ~10 roundings); dw: a sum
     * of N*heads + 1 terms: 10 u32 (k + 3) sum|t| */
    oracle_bwd(ref, mag, r1, r2, m1, m2, gd, xd, qwdp, kwdp, inv_freq, s, eps);
    memcpy(dqw, dqw0, sizeof(dqw));
    memcpy(dkw, dkw0, sizeof(dkw));
    sdp_cpu_qknorm_rope_bwd_ref(dx, dqw, dkw, g, x, qwp, kwp, rstd, inv_freq, s.scale, NULL, s.N,
                                s.T, s.NH, s.NKV, s.HD);
    snprintf(name, sizeof(name), "qknorm_rope_bwd dqkv (%s)", with_norm ? "norm" : "no norm");
    nfail += sdp_check(name, dx, ref, mag, n, SDP_RTOL_ELEM, 0.0);
    if (with_norm) {
        for (int i = 0; i < s.HD; i++) {
            r1[i] += dqw0[i];
            m1[i] = (s.N * s.NH + 3) * (m1[i] + fabs(dqw0[i]));
            r2[i] += dkw0[i];
            m2[i] = (s.N * s.NKV + 3) * (m2[i] + fabs(dkw0[i]));
        }
        nfail += sdp_check("qknorm_rope_bwd dqnorm_w", dqw, r1, m1, s.HD, SDP_SAFETY * SDP_U32, 0);
        nfail += sdp_check("qknorm_rope_bwd dknorm_w", dkw, r2, m2, s.HD, SDP_SAFETY * SDP_U32, 0);
    }
    free(x), free(out), free(g), free(dx), free(rstd), free(xd), free(gd), free(ref), free(mag);
    return nfail;
}

/* Hugging Face _compute_llama3_parameters, written out here from its definition in double */
static double llama3_freq(int i, int HD, double theta, double factor, double lo, double hi, int old)
{
    const double f = pow(theta, -2.0 * i / HD), wl = 2.0 * M_PI / f;
    if (wl < old / hi)
        return f; /* high frequency: unchanged */
    if (wl > old / lo)
        return f / factor; /* low frequency: scaled */
    const double smooth = (old / wl - lo) / (hi - lo);
    return (1.0 - smooth) * f / factor + smooth * f;
}

static int check_inv_freq(void)
{
    float got[64];
    double ref[64];
    int nfail = 0;

    sdp_cpu_rope_inv_freq(got, 128, 1000000.0, 0, 0, 0, 0);
    for (int i = 0; i < 64; i++)
        ref[i] = 1.0 / pow(1000000.0, (2.0 * i) / 128);
    /* one rounding of a double result: u32 relative, within SDP_RTOL_ELEM */
    nfail += sdp_check("rope_inv_freq default", got, ref, NULL, 64, SDP_RTOL_ELEM, 0.0);
    sdp_cpu_rope_inv_freq(got, 128, 500000.0, 8.0, 1.0, 4.0, 8192);
    int nlow = 0, nmid = 0;
    for (int i = 0; i < 64; i++) {
        ref[i] = llama3_freq(i, 128, 500000.0, 8.0, 1.0, 4.0, 8192);
        const double wl = 2 * M_PI * pow(500000.0, 2.0 * i / 128);
        nlow += wl > 8192.0;
        nmid += wl >= 2048.0 && wl <= 8192.0;
    }
    nfail += sdp_check("rope_inv_freq llama3", got, ref, NULL, 64, SDP_RTOL_ELEM, 0.0);
    printf("llama3 scaling: %d low, %d medium frequencies among 64\n", nlow, nmid);
    nfail += nlow == 0 || nmid == 0; /* the case must exercise every branch */
    return nfail;
}

/* One rope kind against transformers 5.25's ROPE_INIT_FUNCTIONS (HD 128) at ten indices.
 * transformers computes in fp32: pow, a division, a product and the yarn blend (two products and
 * a sum) round up to ~8 times at u32 each; ours rounds a double result once.  Bound 2 x 8 u32
 * relative (SDP_RTOL_ELEM); the attention factor is a double in both, rounded once here. */
static int check_kind(const char *name, const struct sdp_rope_params *p, int seq_len,
                      const double want[10], double want_scale)
{
    static const int at[10] = { 0, 8, 16, 20, 24, 28, 32, 40, 48, 63 };
    float got[64], sel[10];
    const float scale = sdp_cpu_rope_freqs(got, p, 128, seq_len);
    int nfail;
    for (int i = 0; i < 10; i++)
        sel[i] = got[at[i]];
    nfail = sdp_check(name, sel, want, NULL, 10, SDP_RTOL_ELEM, 0.0);
    if (scale != (float)want_scale) {
        printf("%s: attention scaling %.9g, transformers %.9g  BAD\n", name, scale, want_scale);
        nfail++;
    }
    return nfail;
}

static int check_rope_kinds(void)
{
    /* Qwen3's recipe: yarn factor 4 from 32768 tokens; then every optional yarn key given */
    static const double yarn[10] = { 1.0,
                                     0.17782793939113617,
                                     0.03162277862429619,
                                     0.01333521492779255,
                                     0.005375321488827467,
                                     0.0018482765881344676,
                                     0.0006029411451891065,
                                     4.4456985051510856e-05,
                                     7.905693564680405e-06,
                                     3.102344408034696e-07 };
    static const double yarn2[10] = { 1.0,
                                      0.3162277638912201,
                                      0.10000000149011612,
                                      0.05623412877321243,
                                      0.03162277862429619,
                                      0.015371676534414291,
                                      0.006221889052540064,
                                      0.00043557558092288673,
                                      0.0001250000059371814,
                                      1.4434774129767902e-05 };
    static const double linear[10] = { 0.4000000059604645,     0.07113117724657059,
                                       0.012649111449718475,   0.005334085784852505,
                                       0.002249365206807852,   0.0009485495393164456,
                                       0.0004000000189989805,  7.113117317203432e-05,
                                       1.2649109521589708e-05, 4.963750939168676e-07 };
    static const double dynamic[10] = { 1.0,
                                        0.16088581085205078,
                                        0.025884246453642845,
                                        0.010382319800555706,
                                        0.004164407961070538,
                                        0.0016703677829355001,
                                        0.0006699941586703062,
                                        0.0001077925626304932,
                                        1.734229408612009e-05,
                                        5.640625886371708e-07 };
    struct sdp_rope_params y = { .kind = SDP_ROPE_KIND_YARN,
                                 .theta = 1e6,
                                 .factor = 4.0,
                                 .original_max_pos = 32768,
                                 .max_pos = 131072 };
    struct sdp_rope_params y2 = { .kind = SDP_ROPE_KIND_YARN,
                                  .theta = 1e4,
                                  .factor = 8.0,
                                  .original_max_pos = 4096,
                                  .max_pos = 32768,
                                  .beta_fast = 16,
                                  .beta_slow = 2,
                                  .mscale = 1.0,
                                  .mscale_all_dim = 0.5,
                                  .no_truncate = 1 };
    struct sdp_rope_params l = { .kind = SDP_ROPE_KIND_LINEAR, .theta = 1e6, .factor = 2.5 };
    struct sdp_rope_params d = {
        .kind = SDP_ROPE_KIND_DYNAMIC, .theta = 1e6, .factor = 2.0, .max_pos = 40960
    };
    float base[64], got[64];
    int nfail = 0;

    nfail += check_kind("rope yarn", &y, 1024, yarn, 1.138629436111989);
    nfail += check_kind("rope yarn (all keys)", &y2, 1024, yarn2, 1.094179988101349);
    nfail += check_kind("rope linear", &l, 1024, linear, 1.0);
    nfail += check_kind("rope dynamic at 65536", &d, 65536, dynamic, 1.0);
    /* dynamic within max_position_embeddings: the default frequencies, bit for bit */
    sdp_cpu_rope_inv_freq(base, 128, 1e6, 0, 0, 0, 0);
    sdp_cpu_rope_freqs(got, &d, 128, 40960);
    nfail += sdp_check_bits("rope dynamic at 40960 = default", got, base, 64);
    return nfail;
}

int main(void)
{
    struct sdp_rng rng = { 13 };
    int nfail = 0;

    nfail += check_oracle_fd();
    nfail += check_inv_freq();
    nfail += check_rope_kinds();
    nfail += run_case(&rng, (struct shape){ 12, 6, 4, 4, 16, 1.0f }, 1);
    nfail += run_case(&rng, (struct shape){ 12, 6, 4, 2, 16, 1.0f }, 0);
    nfail += run_case(&rng, (struct shape){ 2048, 1024, 8, 2, 64, 1.0f }, 1);
    nfail += run_case(&rng, (struct shape){ 40, 40, 4, 1, 128, 1.0f }, 0);
    nfail += run_case(&rng, (struct shape){ 1, 1, 2, 1, 8, 1.0f }, 1);
    nfail += run_case(&rng, (struct shape){ 24, 12, 4, 2, 16, 1.1386294f }, 1); /* yarn factor 4 */
    nfail += run_case(&rng, (struct shape){ 24, 12, 4, 2, 16, 1.0693147f }, 0); /* yarn factor 2 */
    return sdp_test_finish(nfail);
}
