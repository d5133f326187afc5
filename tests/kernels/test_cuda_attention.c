/* SPDX-License-Identifier: MIT */
/* Checks the CUDA causal GQA attention (forward out, lse; backward dq, dk, dv) in f32 and bf16
 * against the CPU reference kernels run on the same (bf16-rounded) inputs, over tiny, T = 1, tail,
 * GQA 1/2/4, HD 16..128, large-score and q = k = 0 shapes; then times the qwen3-4b shape and checks
 * one kv-head group of its last sequence against the CPU; then all of it again (bf16) on cuDNN's
 * fused graphs when built with cudnn_frontend (their workspace capped at 16 MiB, so the production
 * batch runs in sub-batches).  Exit 77 without a CUDA device. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "models/sdp_models.h"
#include "tests/lib/sdp_test.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d\nFAIL\n", cudaGetErrorString(e_), __FILE__, __LINE__);  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Tolerances on the Frobenius error: ||x - r||_F <= tol_rel ||r||_F + tol_mag ||mag||_F, where mag
 * holds the sums of the absolute values of the terms that make up each element (fp64, mag_ref
 * below: sum_s P |v| for out, scale sum P (|dP| + |D|) |k| for dq, and so on), the kappa of the
 * style guide.  The reference gets the very same inputs, so only the kernel's arithmetic differs.
 * bf16: products of bf16 inputs are exact in fp32; the kernel rounds P to bf16 before P V and the
 *   output to bf16: two roundings of relative size <= u_bf16 each (about u_bf16 / sqrt(3) in norm
 *   for random data).  The backward rounds P (for dV), dS = P (dP - D) (for dK, dQ) and the
 *   outputs: three roundings.  tol_rel = 4 u_bf16 leaves a factor >= 2.  The fp32 parts (HD-term
 *   dots for S, dP, D; their difference dP - D cancels, to exactly 0 when T = 1) add at most
 *   HD u32 of the magnitude (Higham, Thm 3.1): tol_mag = SDP_SAFETY HD u32.
 *   lse is fp32 throughout: |lse - r| <= SDP_SAFETY u32 (HD Sa + T) elementwise, Sa = max |s|.
 * f32: every value carries first-order errors of at most (HD Sa + T) u32 of its magnitude (HD-term
 *   dots, T-term sums, expf): tol_rel = 0, tol_mag = SDP_SAFETY u32 (HD Sa + T). */
#define TOL_REL_BF16     (4.0 * SDP_UBF16)
#define TOL_MAG_BF16(HD) (SDP_SAFETY * (HD)*SDP_U32)

struct shape {
    const char *name;
    int B, T, NH, NKV, HD;
    float qscale; /* q multiplied by this: 8 gives sharply peaked softmax rows, 0 uniform rows */
    int zero_k;   /* k = 0 too (with qscale 0: uniform weights) */
};

#ifdef SDP_HAVE_CUDNN_FRONTEND
#define sdp_cudnn_attention_error_text() sdp_cudnn_attention_error()
#else
#define sdp_cudnn_attention_error_text() "not built"
#endif

/* Which implementation runs: the project's kernels, or (when built) cuDNN's fused graphs. */
static int use_cudnn;
/* a small budget for cuDNN's workspace (the plan's, on a GPU), so that the production batch runs
 * in sub-batches and the sampled check of its last sequence covers the offsets of the later calls
 */
#define WS_BUDGET ((size_t)16 << 20)

/* document masking (the own kernels): each token's document start, on the host and on the device;
 * NULL: causal over whole rows */
static int32_t *seg_h, *seg_d;

/* documents of 1 to 60 tokens drawn from rng over B rows of T */
static void set_docs(struct sdp_rng *rng, int B, int T)
{
    seg_h = sdp_test_alloc((size_t)B * T * sizeof(*seg_h));
    for (int b = 0; b < B; b++) {
        int start = 0, left = 1 + (int)(sdp_rng_next(rng) % 60);
        for (int t = 0; t < T; t++, left--) {
            if (left == 0) {
                start = t;
                left = 1 + (int)(sdp_rng_next(rng) % 60);
            }
            seg_h[(size_t)b * T + t] = start;
        }
    }
    CK(cudaMalloc((void **)&seg_d, (size_t)B * T * sizeof(*seg_d)));
    CK(cudaMemcpy(seg_d, seg_h, (size_t)B * T * sizeof(*seg_d), cudaMemcpyHostToDevice));
}

static void clear_docs(void)
{
    free(seg_h);
    CK(cudaFree(seg_d));
    seg_h = NULL;
    seg_d = NULL;
}

/* the workspace bytes of the backward (own) or of the larger of cuDNN's forward and backward; 0
 * with *ok = 0 when cuDNN has no engine for the shape */
static size_t att_ws(int B, int T, int NH, int NKV, int HD, int *ok)
{
    *ok = 1;
#ifdef SDP_HAVE_CUDNN_FRONTEND
    if (use_cudnn) {
        size_t wf = 0, wb = 0;
        if (sdp_cudnn_attention_ws(&wf, 0, B, T, NH, NKV, HD, WS_BUDGET) ||
            sdp_cudnn_attention_ws(&wb, 1, B, T, NH, NKV, HD, WS_BUDGET)) {
            *ok = 0;
            return 0;
        }
        return wf > wb ? wf : wb;
    }
#endif
    return sdp_cuda_attention_bwd_ws(B, T, NH, NKV, HD);
}

static void att_fwd(void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV, int HD,
                    int dt, void *ws)
{
#ifdef SDP_HAVE_CUDNN_FRONTEND
    if (use_cudnn) {
        if (sdp_cudnn_attention_fwd(out, lse, qkv, B, T, NH, NKV, HD, WS_BUDGET, ws, 0)) {
            printf("cuDNN forward failed: %s\nFAIL\n", sdp_cudnn_attention_error());
            exit(1);
        }
        return;
    }
#endif
    (void)ws;
    sdp_cuda_attention_fwd(out, lse, qkv, seg_d, B, T, NH, NKV, HD, dt, 0);
}

static void att_bwd(void *dqkv, const void *dout, const void *qkv, const void *out,
                    const float *lse, int B, int T, int NH, int NKV, int HD, int dt, void *ws)
{
#ifdef SDP_HAVE_CUDNN_FRONTEND
    if (use_cudnn) {
        if (sdp_cudnn_attention_bwd(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HD, WS_BUDGET, ws,
                                    0)) {
            printf("cuDNN backward failed: %s\nFAIL\n", sdp_cudnn_attention_error());
            exit(1);
        }
        return;
    }
#endif
    sdp_cuda_attention_bwd(dqkv, dout, qkv, out, lse, seg_d, B, T, NH, NKV, HD, dt, ws, 0);
}

static int check_frob(const char *name, const float *x, const float *r, const float *mag, size_t n,
                      double tol_rel, double tol_mag)
{
    double d = 0.0, sr = 0.0, sm = 0.0, em = -1.0;
    size_t im = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - r[i]);
        d += e * e;
        sr += (double)r[i] * r[i];
        sm += (double)mag[i] * mag[i];
        if (e > em || isnan(e)) {
            em = e;
            im = i;
        }
    }
    d = sqrt(d);
    sr = sqrt(sr);
    sm = sqrt(sm);
    const double allowed = tol_rel * sr + tol_mag * sm;
    const int bad = !(d <= allowed);
    printf("  %-24s n=%-8zu ||err||/||ref|| = %.3g (%.2f u_bf16)  ||err||/||mag|| = %.3g  "
           "%.1f%% of allowed  max|err| %.3g [%zu]  %s\n",
           name, n, sr > 0 ? d / sr : d, (sr > 0 ? d / sr : d) / SDP_UBF16, sm > 0 ? d / sm : d,
           allowed > 0 ? 100.0 * d / allowed : (d > 0 ? INFINITY : 0.0), em, im,
           bad ? "BAD" : "ok");
    if (bad)
        printf("    %s[%zu] = %.9g, ref %.9g, mag %.3g\n", name, im, (double)x[im], (double)r[im],
               (double)mag[im]);
    return bad;
}

/* Magnitudes (sums of absolute terms, fp64) of out and of the dq, dk, dv slots, from the same
 * inputs as the kernels: mag_out (B*T, NH*HD), mag_d (B*T, QKV). */
static void mag_ref(float *mag_out, float *mag_d, const float *qkv, const float *dout,
                    const float *out, const float *lse, int B, int T, int NH, int NKV, int HD)
{
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const int G = NH / NKV;
    const double scale = 1.0 / sqrt((double)HD);
    double *mo = sdp_test_alloc((size_t)HD * sizeof(*mo)), *mq = sdp_test_alloc(HD * sizeof(*mq));
    double *acc = sdp_test_alloc((size_t)B * T * QKV * sizeof(*acc));

    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t ko = (size_t)(NH + h / G) * HD, vo = ko + (size_t)NKV * HD;
            for (int t = 0; t < T; t++) {
                const size_t rt = (size_t)b * T + t;
                const float *q = qkv + rt * QKV + (size_t)h * HD, *dO = dout + rt * C + h * HD;
                const float *o = out + rt * C + (size_t)h * HD;
                const double L = lse[((size_t)b * NH + h) * T + t];
                double Dabs = 0.0;
                for (int d = 0; d < HD; d++) {
                    Dabs += fabs((double)dO[d] * o[d]);
                    mo[d] = mq[d] = 0.0;
                }
                for (int s = 0; s <= t; s++) {
                    const size_t rs = (size_t)b * T + s;
                    const float *k = qkv + rs * QKV + ko, *v = qkv + rs * QKV + vo;
                    double sc = 0.0, dPabs = 0.0;
                    for (int d = 0; d < HD; d++) {
                        sc += (double)q[d] * k[d];
                        dPabs += fabs((double)dO[d] * v[d]);
                    }
                    const double p = exp(sc * scale - L), ds = scale * p * (dPabs + Dabs);
                    for (int d = 0; d < HD; d++) {
                        mo[d] += p * fabs(v[d]);
                        mq[d] += ds * fabs(k[d]);
                        acc[rs * QKV + ko + d] += ds * fabs(q[d]);
                        acc[rs * QKV + vo + d] += p * fabs(dO[d]);
                    }
                }
                for (int d = 0; d < HD; d++) {
                    mag_out[rt * C + (size_t)h * HD + d] = (float)mo[d];
                    acc[rt * QKV + (size_t)h * HD + d] = mq[d];
                }
            }
        }
    for (size_t i = 0; i < (size_t)B * T * QKV; i++)
        mag_d[i] = (float)acc[i];
    free(mo);
    free(mq);
    free(acc);
}

/* elementwise |x - r| <= rtol |r| + rtol max|r| */
static int check_lse(const char *name, const float *x, const float *r, size_t n, double rtol)
{
    double *rd = sdp_test_alloc(n * sizeof(*rd)), rmax = 0.0;
    for (size_t i = 0; i < n; i++) {
        rd[i] = r[i];
        rmax = fabs(rd[i]) > rmax ? fabs(rd[i]) : rmax;
    }
    printf("  ");
    const int bad = sdp_check(name, x, rd, NULL, n, rtol, rtol * (rmax > 1.0 ? rmax : 1.0));
    free(rd);
    return bad;
}

static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = sdp_bf16_to_f32(sdp_f32_to_bf16(x[i]));
}

/* host f32 -> device (dt) */
static void *to_dev(const float *x, size_t n, int dt)
{
    void *d;
    if (dt == SDP_CUDA_BF16) {
        uint16_t *h = sdp_test_alloc(n * sizeof(*h));
        sdp_cpu_cast_bf16_ref(h, x, n);
        CK(cudaMalloc(&d, n * 2));
        CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
        free(h);
    } else {
        CK(cudaMalloc(&d, n * 4));
        CK(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
    }
    return d;
}

/* device (dt) -> host f32 */
static void from_dev(float *x, const void *d, size_t n, int dt)
{
    if (dt == SDP_CUDA_BF16) {
        uint16_t *h = sdp_test_alloc(n * sizeof(*h));
        CK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
        sdp_cpu_bf16_to_f32_ref(x, h, n);
        free(h);
    } else {
        CK(cudaMemcpy(x, d, n * 4, cudaMemcpyDeviceToHost));
    }
}

static void fill_inputs(struct sdp_rng *rng, float *qkv, float *dout, const struct shape *s, int dt)
{
    const size_t N = (size_t)s->B * s->T, QKV = (size_t)(s->NH + 2 * s->NKV) * s->HD;
    const size_t C = (size_t)s->NH * s->HD;
    sdp_fill_normal(rng, qkv, N * QKV, 1.0f);
    sdp_fill_normal(rng, dout, N * C, 1.0f);
    for (size_t r = 0; r < N; r++) {
        for (size_t i = 0; i < C; i++)
            qkv[r * QKV + i] *= s->qscale;
        if (s->zero_k)
            memset(qkv + r * QKV + C, 0, (size_t)s->NKV * s->HD * sizeof(float));
    }
    if (dt == SDP_CUDA_BF16) {
        round_bf16(qkv, N * QKV);
        round_bf16(dout, N * C);
    }
}

/* largest |scaled score| bound: max_t |q_t| max_s |k_s| / sqrt(HD) */
static double score_bound(const float *qkv, const struct shape *s)
{
    const size_t N = (size_t)s->B * s->T, QKV = (size_t)(s->NH + 2 * s->NKV) * s->HD;
    double qm = 0.0, km = 0.0;
    for (size_t r = 0; r < N; r++) {
        for (int h = 0; h < s->NH + s->NKV; h++) {
            double n2 = 0.0;
            for (int d = 0; d < s->HD; d++) {
                const double x = qkv[r * QKV + (size_t)h * s->HD + d];
                n2 += x * x;
            }
            if (h < s->NH)
                qm = sqrt(n2) > qm ? sqrt(n2) : qm;
            else
                km = sqrt(n2) > km ? sqrt(n2) : km;
        }
    }
    return qm * km / sqrt((double)s->HD);
}

static int run_shape(struct sdp_rng *rng, const struct shape *s, int dt)
{
    const size_t N = (size_t)s->B * s->T, QKV = (size_t)(s->NH + 2 * s->NKV) * s->HD;
    const size_t C = (size_t)s->NH * s->HD, nl = (size_t)s->B * s->NH * s->T;
    const size_t es = dt == SDP_CUDA_BF16 ? 2 : 4;
    float *qkv = sdp_test_alloc(N * QKV * 4), *dout = sdp_test_alloc(N * C * 4);
    float *out = sdp_test_alloc(N * C * 4), *lse = sdp_test_alloc(nl * 4);
    float *rout = sdp_test_alloc(N * C * 4), *rlse = sdp_test_alloc(nl * 4);
    float *dqkv = sdp_test_alloc(N * QKV * 4), *rdqkv = sdp_test_alloc(N * QKV * 4);
    float *mout = sdp_test_alloc(N * C * 4), *md = sdp_test_alloc(N * QKV * 4);
    int bad = 0;

    printf("%s (B=%d T=%d NH=%d NKV=%d HD=%d qscale=%g%s) %s%s\n", s->name, s->B, s->T, s->NH,
           s->NKV, s->HD, (double)s->qscale, s->zero_k ? " k=0" : "",
           dt == SDP_CUDA_BF16 ? "bf16" : "f32", use_cudnn ? ", cuDNN" : "");
    int ok;
    const size_t wsb = att_ws(s->B, s->T, s->NH, s->NKV, s->HD, &ok);
    if (!ok) {
        /* the runtime falls back to the own kernels for such a shape; qwen3's HD = 128 must run */
        printf("  cuDNN has no engine for it (%s): %s\n", sdp_cudnn_attention_error_text(),
               s->HD == 128 ? "BAD" : "the own kernels serve it");
        free(qkv);
        free(dout);
        free(out);
        free(lse);
        free(rout);
        free(rlse);
        free(dqkv);
        free(rdqkv);
        free(mout);
        free(md);
        return s->HD == 128;
    }
    fill_inputs(rng, qkv, dout, s, dt);
    const double Sa = score_bound(qkv, s);
    const double tol_f32 = SDP_SAFETY * SDP_U32 * (s->HD * (Sa + 1.0) + s->T);

    void *d_qkv = to_dev(qkv, N * QKV, dt), *d_dout = to_dev(dout, N * C, dt), *d_out, *d_dqkv;
    float *d_lse;
    CK(cudaMalloc(&d_out, N * C * es));
    CK(cudaMalloc((void **)&d_lse, nl * 4));
    CK(cudaMalloc(&d_dqkv, N * QKV * es));
    CK(cudaMemset(d_dqkv, 0xff, N * QKV * es)); /* NaN: every slot must be written */
    void *d_ws;
    CK(cudaMalloc(&d_ws, wsb ? wsb : 256));
    CK(cudaMemset(d_ws, 0xff,
                  wsb ? wsb : 256)); /* garbage: the kernel must initialise what it uses */

    att_fwd(d_out, d_lse, d_qkv, s->B, s->T, s->NH, s->NKV, s->HD, dt, d_ws);
    CK(cudaGetLastError());
    att_bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, s->B, s->T, s->NH, s->NKV, s->HD, dt, d_ws);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    from_dev(out, d_out, N * C, dt);
    CK(cudaMemcpy(lse, d_lse, nl * 4, cudaMemcpyDeviceToHost));
    from_dev(dqkv, d_dqkv, N * QKV, dt);

    sdp_cpu_attention_fwd_ref(rout, rlse, qkv, seg_h, s->B, s->T, s->NH, s->NKV, s->HD);
    /* the backward reference gets the kernel's own out and lse: both backwards see equal inputs */
    sdp_cpu_attention_bwd_ref(rdqkv, dout, qkv, out, lse, seg_h, s->B, s->T, s->NH, s->NKV, s->HD);
    /* the magnitudes over every earlier key: an upper bound of the masked ones */
    mag_ref(mout, md, qkv, dout, out, lse, s->B, s->T, s->NH, s->NKV, s->HD);

    const double trel = dt == SDP_CUDA_BF16 ? TOL_REL_BF16 : 0.0;
    const double tmag = dt == SDP_CUDA_BF16 ? TOL_MAG_BF16(s->HD) : tol_f32;
    bad |= check_frob("out", out, rout, mout, N * C, trel, tmag);
    bad |= check_lse("lse", lse, rlse, nl, tol_f32);
    /* split dqkv into its dq, dk, dv slots */
    const size_t ck = (size_t)s->NKV * s->HD;
    float *x = sdp_test_alloc(N * C * 4), *r = sdp_test_alloc(N * C * 4);
    float *mg = sdp_test_alloc(N * C * 4);
    const char *names[3] = { "dq", "dk", "dv" };
    const size_t off[3] = { 0, C, C + ck }, width[3] = { C, ck, ck };
    for (int k = 0; k < 3; k++) {
        for (size_t row = 0; row < N; row++) {
            memcpy(x + row * width[k], dqkv + row * QKV + off[k], width[k] * 4);
            memcpy(r + row * width[k], rdqkv + row * QKV + off[k], width[k] * 4);
            memcpy(mg + row * width[k], md + row * QKV + off[k], width[k] * 4);
        }
        bad |= check_frob(names[k], x, r, mg, N * width[k], trel, tmag);
    }
    free(x);
    free(r);
    free(mg);
    free(mout);
    free(md);
    CK(cudaFree(d_qkv));
    CK(cudaFree(d_dout));
    CK(cudaFree(d_out));
    CK(cudaFree(d_lse));
    CK(cudaFree(d_dqkv));
    CK(cudaFree(d_ws));
    free(qkv);
    free(dout);
    free(out);
    free(lse);
    free(rout);
    free(rlse);
    free(dqkv);
    free(rdqkv);
    return bad;
}

/* qwen3-4b shape in bf16: time forward and backward, then check the heads of the last kv group of
 * the last sequence (a B = 1, NKV = 1 sub-problem the CPU reference can afford). */
static int run_production(struct sdp_rng *rng, int B)
{
    const struct shape s = { "production", B, 1024, 32, 8, 128, 1.0f, 0 };
    const int T = s.T, NH = s.NH, NKV = s.NKV, HD = s.HD, G = NH / NKV, dt = SDP_CUDA_BF16;
    const size_t N = (size_t)B * T, QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const size_t nl = (size_t)B * NH * T;
    float *qkv = sdp_test_alloc(N * QKV * 4), *dout = sdp_test_alloc(N * C * 4);
    int bad = 0;

    printf("%s (B=%d T=%d NH=%d NKV=%d HD=%d) bf16%s\n", s.name, B, T, NH, NKV, HD,
           use_cudnn ? ", cuDNN" : "");
    int ok;
    const size_t wsb = att_ws(B, T, NH, NKV, HD, &ok);
    if (!ok) {
        printf("  cuDNN has no engine for it (%s): BAD\n", sdp_cudnn_attention_error_text());
        free(qkv);
        free(dout);
        return 1;
    }
#ifdef SDP_HAVE_CUDNN_FRONTEND
    if (use_cudnn) {
        size_t wf = 0, wb = 0;
        sdp_cudnn_attention_ws(&wf, 0, B, T, NH, NKV, HD, WS_BUDGET);
        sdp_cudnn_attention_ws(&wb, 1, B, T, NH, NKV, HD, WS_BUDGET);
        const int bb = sdp_cudnn_attention_batch(1, B, T, NH, NKV, HD, WS_BUDGET);
        /* the plan's model of the workspace (models/workspace.c): the same rows a call, and
         * cuDNN asking no more than the plan counts (the model is exact where it holds) */
        const int mb = sdp_model_attention_batch(1, B, T, NH, HD, WS_BUDGET);
        const unsigned long long mws = sdp_model_attention_ws_bytes(1, bb, T, NH, HD);
        printf("  cuDNN calls of %d (forward) and %d (backward) sequences, workspaces %zu and "
               "%zu bytes; the plan's model: calls of %d, %llu bytes\n",
               sdp_cudnn_attention_batch(0, B, T, NH, NKV, HD, WS_BUDGET), bb, wf, wb, mb, mws);
        /* the forward shares the backward's; cuDNN rounds its buffers (SDP_CUDNN_WS_SLACK) */
        if (mb != bb || wb > mws + SDP_CUDNN_WS_SLACK || wf > mws + SDP_CUDNN_WS_SLACK) {
            printf("  the workspace model misses cuDNN's: BAD\n");
            bad = 1;
        }
    }
#endif
    fill_inputs(rng, qkv, dout, &s, dt);
    void *d_qkv = to_dev(qkv, N * QKV, dt), *d_dout = to_dev(dout, N * C, dt), *d_out, *d_dqkv;
    float *d_lse;
    CK(cudaMalloc(&d_out, N * C * 2));
    CK(cudaMalloc((void **)&d_lse, nl * 4));
    CK(cudaMalloc(&d_dqkv, N * QKV * 2));
    void *d_ws;
    CK(cudaMalloc(&d_ws, wsb ? wsb : 256));

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 10;
    float ms_f, ms_b;
    att_fwd(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, dt, d_ws); /* warm-up */
    CK(cudaEventRecord(e0, 0));
    for (int i = 0; i < reps; i++)
        att_fwd(d_out, d_lse, d_qkv, B, T, NH, NKV, HD, dt, d_ws);
    CK(cudaEventRecord(e1, 0));
    CK(cudaGetLastError());
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_f, e0, e1));
    att_bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, dt, d_ws);
    CK(cudaEventRecord(e0, 0));
    for (int i = 0; i < reps; i++)
        att_bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HD, dt, d_ws);
    CK(cudaEventRecord(e1, 0));
    CK(cudaGetLastError());
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_b, e0, e1));
    ms_f /= reps;
    ms_b /= reps;
    /* causal half: 4 B NH T^2 HD / 2 forward (QK^T and PV), 2.5 times that backward */
    const double fl_f = 4.0 * B * NH * (double)T * T * HD / 2.0, fl_b = 2.5 * fl_f;
    printf("  forward  %.3f ms  %.1f TFLOP/s (causal FLOPs)\n", ms_f, fl_f / ms_f * 1e-9);
    printf("  backward %.3f ms  %.1f TFLOP/s (causal FLOPs, incl. the D and dq passes)\n", ms_b,
           fl_b / ms_b * 1e-9);

    /* sampled check: sequence B-1, kv head NKV-1 with its G query heads */
    float *out = sdp_test_alloc(N * C * 4), *lse = sdp_test_alloc(nl * 4);
    float *dqkv = sdp_test_alloc(N * QKV * 4);
    from_dev(out, d_out, N * C, dt);
    CK(cudaMemcpy(lse, d_lse, nl * 4, cudaMemcpyDeviceToHost));
    from_dev(dqkv, d_dqkv, N * QKV, dt);
    size_t nonfinite = 0;
    for (size_t i = 0; i < N * QKV; i++)
        nonfinite += !isfinite(dqkv[i]);
    for (size_t i = 0; i < N * C; i++)
        nonfinite += !isfinite(out[i]);
    printf("  non-finite values in out, dqkv: %zu  %s\n", nonfinite, nonfinite ? "BAD" : "ok");
    bad |= nonfinite != 0;

    const int b = B - 1, kv = NKV - 1, h0 = kv * G;
    const size_t sQKV = (size_t)(G + 2) * HD, sC = (size_t)G * HD;
    float *sq = sdp_test_alloc((size_t)T * sQKV * 4), *sdo = sdp_test_alloc((size_t)T * sC * 4);
    float *so = sdp_test_alloc((size_t)T * sC * 4), *sl = sdp_test_alloc((size_t)G * T * 4);
    float *ro = sdp_test_alloc((size_t)T * sC * 4), *rl = sdp_test_alloc((size_t)G * T * 4);
    float *go = sdp_test_alloc((size_t)T * sC * 4), *gl = sdp_test_alloc((size_t)G * T * 4);
    float *rd = sdp_test_alloc((size_t)T * sQKV * 4), *gd = sdp_test_alloc((size_t)T * sQKV * 4);
    for (int t = 0; t < T; t++) {
        const size_t row = (size_t)b * T + t;
        memcpy(sq + t * sQKV, qkv + row * QKV + (size_t)h0 * HD, sC * 4);
        memcpy(sq + t * sQKV + sC, qkv + row * QKV + (size_t)(NH + kv) * HD, (size_t)HD * 4);
        memcpy(sq + t * sQKV + sC + HD, qkv + row * QKV + (size_t)(NH + NKV + kv) * HD,
               (size_t)HD * 4);
        memcpy(sdo + t * sC, dout + row * C + (size_t)h0 * HD, sC * 4);
        memcpy(go + t * sC, out + row * C + (size_t)h0 * HD, sC * 4);
        memcpy(gd + t * sQKV, dqkv + row * QKV + (size_t)h0 * HD, sC * 4);
        memcpy(gd + t * sQKV + sC, dqkv + row * QKV + (size_t)(NH + kv) * HD, (size_t)HD * 4);
        memcpy(gd + t * sQKV + sC + HD, dqkv + row * QKV + (size_t)(NH + NKV + kv) * HD,
               (size_t)HD * 4);
    }
    for (int h = 0; h < G; h++)
        memcpy(gl + (size_t)h * T, lse + ((size_t)b * NH + h0 + h) * T, (size_t)T * 4);
    memcpy(so, go, (size_t)T * sC * 4);
    memcpy(sl, gl, (size_t)G * T * 4);
    sdp_cpu_attention_fwd_ref(ro, rl, sq, NULL, 1, T, G, 1, HD);
    sdp_cpu_attention_bwd_ref(rd, sdo, sq, so, sl, NULL, 1, T, G, 1, HD);
    float *mo = sdp_test_alloc((size_t)T * sC * 4), *md = sdp_test_alloc((size_t)T * sQKV * 4);
    mag_ref(mo, md, sq, sdo, so, sl, 1, T, G, 1, HD);
    const double Sa = score_bound(sq, &(struct shape){ "", 1, T, G, 1, HD, 1.0f, 0 });
    bad |=
        check_frob("out (last group)", go, ro, mo, (size_t)T * sC, TOL_REL_BF16, TOL_MAG_BF16(HD));
    bad |= check_lse("lse (last group)", gl, rl, (size_t)G * T,
                     SDP_SAFETY * SDP_U32 * (HD * (Sa + 1.0) + T));
    bad |= check_frob("dq,dk,dv (last group)", gd, rd, md, (size_t)T * sQKV, TOL_REL_BF16,
                      TOL_MAG_BF16(HD));

    free(mo);
    free(md);
    free(sq);
    free(sdo);
    free(so);
    free(sl);
    free(ro);
    free(rl);
    free(go);
    free(gl);
    free(rd);
    free(gd);
    free(out);
    free(lse);
    free(dqkv);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(d_qkv));
    CK(cudaFree(d_dout));
    CK(cudaFree(d_out));
    CK(cudaFree(d_lse));
    CK(cudaFree(d_dqkv));
    CK(cudaFree(d_ws));
    free(qkv);
    free(dout);
    return bad;
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    static const struct shape shapes[] = {
        { "tiny", 2, 16, 4, 2, 16, 1.0f, 0 },
        { "T=1", 2, 1, 4, 2, 64, 1.0f, 0 },
        { "tail GQA 4", 1, 200, 4, 1, 32, 1.0f, 0 },
        { "tail MHA", 2, 130, 2, 2, 64, 1.0f, 0 },
        { "tail GQA 2 HD128", 1, 257, 4, 2, 128, 1.0f, 0 },
        { "HD16 long", 1, 300, 2, 1, 16, 1.0f, 0 },
        { "large scores", 1, 100, 2, 1, 64, 8.0f, 0 },
        { "uniform (q=k=0)", 1, 77, 2, 1, 128, 0.0f, 1 },
    };
    struct sdp_rng rng = { 20240601u };
    int nfail = 0;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int dt = SDP_CUDA_F32; dt <= SDP_CUDA_BF16; dt++)
            nfail += run_shape(&rng, &shapes[i], dt);

    /* document masking, the own kernels: packed rows, documents across the key and query tiles */
    static const struct shape docs[] = {
        { "documents", 2, 200, 4, 2, 64, 1.0f, 0 },
        { "documents HD128", 1, 257, 4, 2, 128, 1.0f, 0 },
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        set_docs(&rng, docs[i].B, docs[i].T);
        for (int dt = SDP_CUDA_F32; dt <= SDP_CUDA_BF16; dt++)
            nfail += run_shape(&rng, &docs[i], dt);
        clear_docs();
    }

    const char *pb = getenv("SDP_TEST_ATTN_B"); /* production batch; 0 skips it */
    const int B = pb ? atoi(pb) : 2;
    if (B > 0)
        nfail += run_production(&rng, B);
#ifdef SDP_HAVE_CUDNN_FRONTEND
    /* the same checks on cuDNN's graphs, which the runtime uses for bf16 */
    use_cudnn = 1;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        nfail += run_shape(&rng, &shapes[i], SDP_CUDA_BF16);
    if (B > 0)
        nfail += run_production(&rng, B);
#else
    printf("built without cudnn_frontend: cuDNN's attention not checked\n");
#endif
    return sdp_test_finish(nfail);
}
