/* SPDX-License-Identifier: MIT */
/* Checks causal GQA attention, forward (out, lse) and backward (dq, dk, dv), the scalar reference
 * and the BLAS version, against an fp64 oracle with per-element error bounds derived below (the
 * BLAS version sums the same terms in another order, without the key-block rescales); T = 1,
 * NH/NKV = 1, 2, 4, T above the kernel's key and query blocks, large scores (exp range), q = k = 0
 * (uniform weights); document masking (each query sees its own document's keys) on packed rows.
 * The oracle's backward is checked against central finite differences of its forward, its masked
 * form against its causal form run on every document alone. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

struct shape {
    int B, T, NH, NKV, HD;
    const int32_t *seg; /* document starts (B*T) of document masking, or NULL */
};

/* Error model of the fp32 kernel, in units of u32 (first order; each bound below is multiplied by
 * SDP_SAFETY * u32 when checking).  With Sa_t = max_s scale sum_d |q_td k_sd| (score magnitude):
 *  score s_ts: HD-term fp32 dot + the scale rounding:            (HD + 2) Sa
 *  p_ts = exp(s - m): both scores' errors, the subtraction, expf: 2 (HD + 2) Sa + 2 Sa + 2
 *  out_td = sum_s p v / l: p errors twice (numerator and l), T fp32 additions, one rescale per key
 *    block (<= T/128 + 1), the final 1/l product:                 kout = (4 (HD + 3) Sa + T + T/128
 *                                                                        + 8) sum_s P |v_sd|
 *  lse_t = m + log l: one score error, exp errors, the rounding:  klse = (HD + 4) Sa + 4 + |lse|
 * Backward (the kernel recomputes p from its own lse, uses its own out):
 *  p:  ep = (2 HD + 8) Sa + |lse| + 4 + klse
 *  D_t = dO . out:  eD = sum_d |dO| kout_td + (HD + 1) sum_d |dO o|
 *  dS_ts = scale p (dP - D), dP = dO . v:
 *        EdS = scale P (ep |dP - D| + HD sum_d |dO v| + eD + 3 |dP - D|)
 *  dq_td = sum_s dS k:   sum_s (EdS + (T + 1) |dS|) |k_sd|
 *  dk_sd = sum dS q over the G = NH/NKV heads and t >= s:   sum (EdS + (G T + 1) |dS|) |q_td|
 *  dv_sd = sum P dO:     sum P (ep + G T + 2) |dO_td| */
struct oracle {
    double *out, *kout, *lse, *klse, *dqkv, *kd;
};

static void oracle_run(struct oracle *o, const double *qkv, const double *dout, struct shape s,
                       int with_bounds)
{
    const int QKV = (s.NH + 2 * s.NKV) * s.HD, C = s.NH * s.HD, G = s.NH / s.NKV, HD = s.HD;
    const double scale = 1.0 / sqrt((double)HD);
    double *S = sdp_test_alloc((size_t)s.T * 8), *dS = sdp_test_alloc((size_t)s.T * 8);
    double *EdS = sdp_test_alloc((size_t)s.T * 8);

    memset(o->dqkv, 0, (size_t)s.B * s.T * QKV * 8);
    if (with_bounds)
        memset(o->kd, 0, (size_t)s.B * s.T * QKV * 8);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++) {
            const int ko = (s.NH + h / G) * HD, vo = ko + s.NKV * HD;
            for (int t = 0; t < s.T; t++) {
                const size_t rt = ((size_t)b * s.T + t) * QKV;
                const double *q = qkv + rt + h * HD,
                             *dO = dout + ((size_t)b * s.T + t) * C + h * HD;
                double *out = o->out + ((size_t)b * s.T + t) * C + h * HD;
                double *kout = o->kout + ((size_t)b * s.T + t) * C + h * HD;
                double m = -INFINITY, l = 0.0, Sa = 0.0;
                const int lo = s.seg ? s.seg[(size_t)b * s.T + t] : 0; /* the document's keys */
                for (int u = lo; u <= t; u++) {
                    const double *k = qkv + ((size_t)b * s.T + u) * QKV + ko;
                    double d = 0.0, a = 0.0;
                    for (int i = 0; i < HD; i++) {
                        d += q[i] * k[i];
                        a += fabs(q[i] * k[i]);
                    }
                    S[u] = d * scale;
                    m = S[u] > m ? S[u] : m;
                    Sa = a * scale > Sa ? a * scale : Sa;
                }
                for (int u = lo; u <= t; u++)
                    l += exp(S[u] - m);
                const double lse = m + log(l);
                for (int i = 0; i < HD; i++)
                    out[i] = kout[i] = 0.0;
                for (int u = lo; u <= t; u++) {
                    const double *v = qkv + ((size_t)b * s.T + u) * QKV + vo;
                    S[u] = exp(S[u] - lse); /* now P */
                    for (int i = 0; i < HD; i++) {
                        out[i] += S[u] * v[i];
                        kout[i] += S[u] * fabs(v[i]);
                    }
                }
                const double kl = (HD + 4) * Sa + 4 + fabs(lse);
                const double kf = 4.0 * (HD + 3) * Sa + t + 1 + (t + 1) / 128.0 + 8;
                for (int i = 0; i < HD; i++)
                    kout[i] *= kf;
                o->lse[((size_t)b * s.NH + h) * s.T + t] = lse;
                o->klse[((size_t)b * s.NH + h) * s.T + t] = kl;
                /* backward of this query row */
                const double ep = (2.0 * HD + 8) * Sa + fabs(lse) + 4 + kl;
                double D = 0.0, eD = 0.0;
                for (int i = 0; i < HD; i++) {
                    D += dO[i] * out[i];
                    eD += fabs(dO[i]) * kout[i] + (HD + 1) * fabs(dO[i] * out[i]);
                }
                double *dq = o->dqkv + rt + h * HD, *kdq = o->kd + rt + h * HD;
                for (int u = lo; u <= t; u++) {
                    const size_t ru = ((size_t)b * s.T + u) * QKV;
                    const double *k = qkv + ru + ko, *v = qkv + ru + vo;
                    double *dk = o->dqkv + ru + ko, *dv = o->dqkv + ru + vo;
                    double dP = 0.0, A = 0.0;
                    for (int i = 0; i < HD; i++) {
                        dP += dO[i] * v[i];
                        A += fabs(dO[i] * v[i]);
                    }
                    dS[u] = scale * S[u] * (dP - D);
                    EdS[u] = scale * S[u] * (ep * fabs(dP - D) + HD * A + eD + 3 * fabs(dP - D));
                    for (int i = 0; i < HD; i++) {
                        dq[i] += dS[u] * k[i];
                        dk[i] += dS[u] * q[i];
                        dv[i] += S[u] * dO[i];
                    }
                    if (with_bounds) {
                        double *kdk = o->kd + ru + ko, *kdv = o->kd + ru + vo;
                        for (int i = 0; i < HD; i++) {
                            kdq[i] += (EdS[u] + (t + 2) * fabs(dS[u])) * fabs(k[i]);
                            kdk[i] += (EdS[u] + ((double)G * s.T + 1) * fabs(dS[u])) * fabs(q[i]);
                            kdv[i] += S[u] * (ep + (double)G * s.T + 2) * fabs(dO[i]);
                        }
                    }
                }
            }
        }
    free(S), free(dS), free(EdS);
}

static void oracle_alloc(struct oracle *o, struct shape s)
{
    const size_t rows = (size_t)s.B * s.T, QKV = (size_t)(s.NH + 2 * s.NKV) * s.HD;
    o->out = sdp_test_alloc(rows * s.NH * s.HD * 8);
    o->kout = sdp_test_alloc(rows * s.NH * s.HD * 8);
    o->lse = sdp_test_alloc(rows * s.NH * 8);
    o->klse = sdp_test_alloc(rows * s.NH * 8);
    o->dqkv = sdp_test_alloc(rows * QKV * 8);
    o->kd = sdp_test_alloc(rows * QKV * 8);
}

static void oracle_free(struct oracle *o)
{
    free(o->out), free(o->kout), free(o->lse), free(o->klse), free(o->dqkv), free(o->kd);
}

static int check_oracle_fd(void)
{
    const struct shape s = { 2, 4, 2, 1, 4, NULL };
    enum { NQKV = 2 * 4 * 16, NOUT = 2 * 4 * 8 };
    struct sdp_rng rng = { 17 };
    double qkv[NQKV], dout[NOUT], an[NQKV], worst = 0.0;
    struct oracle o;

    oracle_alloc(&o, s);
    for (int i = 0; i < NQKV; i++)
        qkv[i] = sdp_rng_normal(&rng, 1.0f);
    for (int i = 0; i < NOUT; i++)
        dout[i] = sdp_rng_normal(&rng, 1.0f);
    oracle_run(&o, qkv, dout, s, 0);
    memcpy(an, o.dqkv, sizeof(an));
    for (int i = 0; i < NQKV; i++) {
        const double h = 1e-6, save = qkv[i];
        double lp = 0.0, lm = 0.0;
        qkv[i] = save + h;
        oracle_run(&o, qkv, dout, s, 0);
        for (int j = 0; j < NOUT; j++)
            lp += dout[j] * o.out[j];
        qkv[i] = save - h;
        oracle_run(&o, qkv, dout, s, 0);
        for (int j = 0; j < NOUT; j++)
            lm += dout[j] * o.out[j];
        qkv[i] = save;
        const double e = fabs((lp - lm) / (2 * h) - an[i]) / (1.0 + fabs(an[i]));
        worst = e > worst ? e : worst;
    }
    oracle_free(&o);
    const int bad = !(worst < 1e-7); /* central differences: ~h^2 + 1e-16/h */
    printf("oracle backward vs finite differences: max rel err %.3g (allowed 1e-7)  %s\n", worst,
           bad ? "BAD" : "ok");
    return bad;
}

static int run_case(struct sdp_rng *rng, struct shape s, float qk_amp, const char *label)
{
    const size_t rows = (size_t)s.B * s.T, QKV = (size_t)(s.NH + 2 * s.NKV) * s.HD;
    const size_t nqkv = rows * QKV, nout = rows * s.NH * s.HD, nlse = rows * s.NH;
    float *qkv = sdp_test_alloc(nqkv * 4), *dout = sdp_test_alloc(nout * 4);
    float *out = sdp_test_alloc(nout * 4), *lse = sdp_test_alloc(nlse * 4);
    float *dqkv = sdp_test_alloc(nqkv * 4);
    double *qkvd = sdp_test_alloc(nqkv * 8), *doutd = sdp_test_alloc(nout * 8);
    struct oracle o;
    int nfail = 0;

    printf("-- %s: B=%d T=%d NH=%d NKV=%d HD=%d\n", label, s.B, s.T, s.NH, s.NKV, s.HD);
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < QKV; i++) /* q and k scaled by qk_amp, v unit normal */
            qkv[r * QKV + i] =
                sdp_rng_normal(rng, i < (size_t)(s.NH + s.NKV) * s.HD ? qk_amp : 1.0f);
    sdp_fill_normal(rng, dout, nout, 1.0f);
    for (size_t i = 0; i < nqkv; i++)
        qkvd[i] = qkv[i];
    for (size_t i = 0; i < nout; i++)
        doutd[i] = dout[i];
    oracle_alloc(&o, s);
    oracle_run(&o, qkvd, doutd, s, 1);

    sdp_cpu_attention_fwd_ref(out, lse, qkv, s.seg, s.B, s.T, s.NH, s.NKV, s.HD);
    nfail += sdp_check("attention_fwd out", out, o.out, o.kout, nout, SDP_SAFETY * SDP_U32, 0.0);
    nfail += sdp_check("attention_fwd lse", lse, o.lse, o.klse, nlse, SDP_SAFETY * SDP_U32, 0.0);
    memset(dqkv, 0x7f, nqkv * 4); /* garbage: every element must be written */
    sdp_cpu_attention_bwd_ref(dqkv, dout, qkv, out, lse, s.seg, s.B, s.T, s.NH, s.NKV, s.HD);
    nfail += sdp_check("attention_bwd dqkv", dqkv, o.dqkv, o.kd, nqkv, SDP_SAFETY * SDP_U32, 0.0);
    /* the BLAS version, its backward on its own forward, against the same oracle and bounds */
    float *ws = sdp_test_alloc(sdp_cpu_attention_ws_floats(s.T) * 4);
    memset(out, 0x7f, nout * 4);
    memset(lse, 0x7f, nlse * 4);
    sdp_cpu_attention_fwd(out, lse, qkv, s.seg, s.B, s.T, s.NH, s.NKV, s.HD, ws);
    nfail +=
        sdp_check("attention_fwd (BLAS) out", out, o.out, o.kout, nout, SDP_SAFETY * SDP_U32, 0.0);
    nfail +=
        sdp_check("attention_fwd (BLAS) lse", lse, o.lse, o.klse, nlse, SDP_SAFETY * SDP_U32, 0.0);
    memset(dqkv, 0x7f, nqkv * 4);
    sdp_cpu_attention_bwd(dqkv, dout, qkv, out, lse, s.seg, s.B, s.T, s.NH, s.NKV, s.HD, ws);
    nfail +=
        sdp_check("attention_bwd (BLAS) dqkv", dqkv, o.dqkv, o.kd, nqkv, SDP_SAFETY * SDP_U32, 0.0);
    free(ws);
    oracle_free(&o);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(qkvd), free(doutd);
    return nfail;
}

/* Document starts of B rows of T tokens: documents of 1 to maxlen tokens drawn from rng, the
 * first row's first document 1 token long; a row's first token starts a document. */
static int32_t *make_segs(struct sdp_rng *rng, int B, int T, int maxlen)
{
    int32_t *seg = sdp_test_alloc((size_t)B * T * sizeof(*seg));
    for (int b = 0; b < B; b++) {
        int start = 0, left = b == 0 ? 1 : 1 + (int)(sdp_rng_next(rng) % (uint64_t)maxlen);
        for (int t = 0; t < T; t++, left--) {
            if (left == 0) {
                start = t;
                left = 1 + (int)(sdp_rng_next(rng) % (uint64_t)maxlen);
            }
            seg[(size_t)b * T + t] = start;
        }
    }
    return seg;
}

/* The masked oracle on packed rows against the causal oracle run on every document alone (the
 * attention has no positions: a document's rows are the same computation): equal to the last bit,
 * out, lse and the gradients (a document's dk, dv collect only its own queries). */
static int check_oracle_docs(void)
{
    const int B = 2, T = 40, NH = 4, NKV = 2, HD = 8, QKV = (NH + 2 * NKV) * HD, C = NH * HD;
    struct sdp_rng rng = { 29 };
    int32_t *seg = make_segs(&rng, B, T, 11);
    double *qkv = sdp_test_alloc((size_t)B * T * QKV * 8),
           *dout = sdp_test_alloc((size_t)B * T * C * 8);
    struct shape s = { B, T, NH, NKV, HD, seg };
    struct oracle o, d;
    int bad = 0, ndocs = 0;
    for (int i = 0; i < B * T * QKV; i++)
        qkv[i] = sdp_rng_normal(&rng, 1.0f);
    for (int i = 0; i < B * T * C; i++)
        dout[i] = sdp_rng_normal(&rng, 1.0f);
    oracle_alloc(&o, s);
    oracle_run(&o, qkv, dout, s, 0);
    for (int b = 0; b < B; b++)
        for (int t0 = 0; t0 < T;) {
            int t1 = t0 + 1;
            while (t1 < T && seg[(size_t)b * T + t1] == t0)
                t1++;
            const struct shape sd = { 1, t1 - t0, NH, NKV, HD, NULL };
            const size_t r0 = (size_t)b * T + t0;
            oracle_alloc(&d, sd);
            oracle_run(&d, qkv + r0 * QKV, dout + r0 * C, sd, 0);
            bad |= memcmp(d.out, o.out + r0 * C, (size_t)sd.T * C * 8) != 0;
            bad |= memcmp(d.dqkv, o.dqkv + r0 * QKV, (size_t)sd.T * QKV * 8) != 0;
            for (int h = 0; h < NH; h++)
                bad |= memcmp(d.lse + (size_t)h * sd.T, o.lse + ((size_t)b * NH + h) * T + t0,
                              (size_t)sd.T * 8) != 0;
            oracle_free(&d);
            ndocs++;
            t0 = t1;
        }
    printf("masked oracle = causal oracle per document (%d documents in %d rows): %s\n", ndocs, B,
           bad ? "BAD" : "ok");
    oracle_free(&o);
    free(seg), free(qkv), free(dout);
    return bad || ndocs < 6;
}

int main(void)
{
    struct sdp_rng rng = { 23 };
    int nfail = 0;

    nfail += check_oracle_fd();
    nfail += run_case(&rng, (struct shape){ 1, 1, 2, 1, 8, NULL }, 1.0f, "T=1");
    nfail += run_case(&rng, (struct shape){ 2, 7, 4, 4, 8, NULL }, 1.0f, "MHA");
    nfail += run_case(&rng, (struct shape){ 2, 9, 4, 2, 16, NULL }, 1.0f, "GQA 2");
    nfail += run_case(&rng, (struct shape){ 1, 300, 4, 1, 16, NULL }, 1.0f, "GQA 4, 3 key blocks");
    nfail += run_case(&rng, (struct shape){ 2, 33, 2, 1, 16, NULL }, 3.0f, "large scores");
    nfail += run_case(&rng, (struct shape){ 1, 50, 2, 2, 8, NULL }, 0.0f, "q = k = 0");
    nfail += run_case(&rng, (struct shape){ 1, 1024, 2, 1, 32, NULL }, 0.5f, "T=1024");
    /* document masking: short documents, and long ones across the kernels' key (128) and query
     * (64) blocks */
    nfail += check_oracle_docs();
    int32_t *seg = make_segs(&rng, 2, 37, 9);
    nfail += run_case(&rng, (struct shape){ 2, 37, 4, 2, 16, seg }, 1.0f, "documents, GQA 2");
    free(seg);
    seg = make_segs(&rng, 2, 300, 150);
    nfail += run_case(&rng, (struct shape){ 2, 300, 4, 1, 16, seg }, 3.0f, "documents, blocks");
    free(seg);
    return sdp_test_finish(nfail);
}
