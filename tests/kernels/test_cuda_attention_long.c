/* SPDX-License-Identifier: MIT */
/* The bf16 attention at T = 32768 (one sequence, GQA 4, HD 128) against an fp64 oracle on sampled
 * rows, forward (out, lse) and backward (dq, dk, dv), on cuDNN's graphs when built with
 * cudnn_frontend and on the project's kernels: with 8 query heads, causal over the whole row and
 * document masking with six documents (one of a single token, so that cuDNN's variable-length call
 * has empty slots); with qwen3-4b's 32 heads, the rows of the bundled text at seq 32768 that have
 * two and three documents (training at that shape once ended in a non-finite gradient).  First,
 * on the host, the document slots of a variable-length call (sdp_cuda_attention_docs).  Exit 77
 * without a CUDA device (after the host part). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_cuda.h"

enum { T = 32768, HD = 128, NH_MAX = 32, W = 16 /* rows a sampled window */ };
static int NH, NKV; /* the head shape of the case running */
#define G   (NH / NKV)
#define QKV ((size_t)(NH + 2 * NKV) * HD)
#define C   ((size_t)NH * HD)

/* Document starts of B rows of T tokens: documents of 1 to maxlen tokens drawn from rng */
static int32_t *make_segs(struct sdp_rng *rng, int B, int Tr, int maxlen)
{
    int32_t *seg = sdp_test_alloc((size_t)B * Tr * sizeof(*seg));
    for (int b = 0; b < B; b++) {
        int start = 0, left = 1 + (int)(sdp_rng_next(rng) % (uint64_t)maxlen);
        for (int t = 0; t < Tr; t++, left--) {
            if (left == 0) {
                start = t;
                left = 1 + (int)(sdp_rng_next(rng) % (uint64_t)maxlen);
            }
            seg[(size_t)b * Tr + t] = start;
        }
    }
    return seg;
}

/* The slots of every sub-batch rebuild seg token by token (each real slot covers its document, in
 * order; the empty ones are 0 long, at the next row), tok is the prefix sum of len, the longest
 * document is found, a row with more documents than slots is refused, and so is a malformed
 * start. */
static int check_docs_layout(void)
{
    enum { B = 4, TL = 50 };
    struct sdp_rng rng = { 31 };
    int32_t *seg = make_segs(&rng, B, TL, 12), len[B * 64], tok[B * 64 + 1], rebuilt[B * TL];
    int longest = 0, lmax = 0, ncalls = 0;
    const int D = sdp_cuda_attention_docs_max(seg, B, TL, &longest);
    for (int i = 0; i < B * TL; i++)
        lmax = i % TL - seg[i] + 1 > lmax ? i % TL - seg[i] + 1 : lmax;
    int bad = D < 3 || longest != lmax;
    for (int bs = 1; bs <= B; bs *= 2)
        for (int b0 = 0; b0 < B; b0 += bs, ncalls++) {
            const int Dp = D + 3; /* three empty slots a row at least */
            bad |= sdp_cuda_attention_docs(len, tok, seg, b0, bs, TL, Dp) != 0;
            for (int i = 0; i < bs * Dp; i++) {
                bad |= tok[i + 1] - tok[i] != len[i] || len[i] < 0;
                bad |= len[i] == 0 && tok[i] != (i / Dp + 1) * TL; /* empty: at the next row */
                for (int t = tok[i]; t < tok[i] + len[i]; t++)
                    rebuilt[t] = tok[i] % TL; /* the document's start in its row */
            }
            bad |= tok[0] != 0 || tok[bs * Dp] != bs * TL;
            bad |= memcmp(rebuilt, seg + (size_t)b0 * TL, (size_t)bs * TL * sizeof(*seg)) != 0;
        }
    bad |= sdp_cuda_attention_docs(len, tok, seg, 0, B, TL, D - 1) != -1; /* too few slots */
    seg[7] = seg[6] == 0 ? 1 : 0; /* neither token 6's start nor 7 */
    bad |= sdp_cuda_attention_docs_max(seg, B, TL, &longest) != -1;
    printf("document slots of a variable-length call (D = %d, %d calls): %s\n", D, ncalls,
           bad ? "BAD" : "ok");
    free(seg);
    return bad;
}

/* The oracle, fp64 from the same bf16-rounded inputs, on query rows w0..w1-1 of every head; with
 * key_side (w1 ends a document) also dk and dv of key rows w0..w1-1, whose queries all lie in the
 * window.  Per element the magnitude (sum of the absolute values of its terms) goes with the value:
 * ref[k], mag[k] for the sampled elements in the order check_window reads them. */
struct window {
    int w0, w1, key_side;
};

struct oracle {
    double *o, *mo, *lse, *sa, *dq, *mdq, *dk, *mdk, *dv, *mdv; /* (W, NH*HD) etc. */
    double *p, *dp;                                             /* (T) scratch */
};

static void oracle_row(struct oracle *r, const float *qkv, const float *dout, const int32_t *seg,
                       struct window w, int t, int h)
{
    const double scale = 1.0 / sqrt((double)HD);
    const int kv = h / G, lo = seg ? seg[t] : 0, i = t - w.w0;
    const float *q = qkv + (size_t)t * QKV + (size_t)h * HD, *dO = dout + (size_t)t * C + h * HD;
    const size_t ko = (size_t)(NH + kv) * HD, vo = ko + (size_t)NKV * HD;
    double m = -INFINITY, l = 0.0, sa = 0.0, D = 0.0, Dmag = 0.0;
    for (int j = lo; j <= t; j++) {
        double s = 0.0;
        for (int d = 0; d < HD; d++)
            s += (double)q[d] * qkv[(size_t)j * QKV + ko + d];
        r->p[j] = s * scale;
        m = r->p[j] > m ? r->p[j] : m;
        sa = fabs(r->p[j]) > sa ? fabs(r->p[j]) : sa;
    }
    for (int j = lo; j <= t; j++)
        l += exp(r->p[j] - m);
    const double L = m + log(l);
    double *o = r->o + (size_t)i * C + h * HD, *mo = r->mo + (size_t)i * C + h * HD;
    for (int j = lo; j <= t; j++) {
        const float *v = qkv + (size_t)j * QKV + vo;
        r->p[j] = exp(r->p[j] - L);
        double dp = 0.0;
        for (int d = 0; d < HD; d++) {
            o[d] += r->p[j] * v[d];
            mo[d] += r->p[j] * fabs(v[d]);
            dp += (double)dO[d] * v[d];
        }
        r->dp[j] = dp;
    }
    for (int d = 0; d < HD; d++) {
        D += dO[d] * o[d];
        Dmag += fabs(dO[d]) * mo[d]; /* bounds D's error through out's (see tol_terms) */
    }
    r->lse[(size_t)i * NH + h] = L;
    r->sa[(size_t)i * NH + h] = sa;
    double *dq = r->dq + (size_t)i * C + h * HD, *mdq = r->mdq + (size_t)i * C + h * HD;
    for (int j = lo; j <= t; j++) {
        const float *k = qkv + (size_t)j * QKV + ko;
        const double ds = scale * r->p[j] * (r->dp[j] - D);
        const double dsa = scale * r->p[j] * (fabs(r->dp[j]) + Dmag);
        for (int d = 0; d < HD; d++) {
            dq[d] += ds * k[d];
            mdq[d] += dsa * fabs(k[d]);
        }
        if (!w.key_side || j < w.w0)
            continue;
        const size_t kr = (size_t)(j - w.w0) * NKV * HD + (size_t)kv * HD;
        for (int d = 0; d < HD; d++) {
            r->dk[kr + d] += ds * q[d];
            r->mdk[kr + d] += dsa * fabs(q[d]);
            r->dv[kr + d] += r->p[j] * dO[d];
            r->mdv[kr + d] += r->p[j] * fabs(dO[d]);
        }
    }
}

/* Tolerances, elementwise on every sampled element, from the kernels' arithmetic on bf16 inputs
 * (their products exact in fp32), with mag the element's sum of absolute terms (>= |ref|):
 *  - bf16 roundings: the output's (u_bf16 |ref|) and one per term where the kernel rounds P to
 *    bf16 before P V (forward), P and dS = P (dP - D) before the dV, dK, dQ products (backward):
 *    2 u_bf16 mag;
 *  - fp32 work: each score an HD-term dot, off by HD u32 Sa absolute (Sa: the row's largest
 *    |scaled score|), which exp turns into a relative error of the weights, twice (the weight and
 *    its normaliser); the sums over up to L = T terms, L u32 of the magnitude at worst (Higham
 *    Thm 3.1, first order; L u32 = u_bf16 / 2 at T = 32768): F = (2 HD Sa + L + 8) u32 mag.
 * Forward: 2 (2 u_bf16 + F), doubled for second-order terms and the online softmax's rescales (one
 * per key tile, each a product by a rounded exp).  Backward: the same for its own work, plus the
 * error of D = dO . out taken from the kernel's bf16 out, which the forward bound limits to
 * tol_fwd sum_d |dO_d| mag_out_d: that sum replaces |D| in the magnitudes of dq and dk, so the
 * backward's factor is twice the forward's.
 *  lse is fp32 throughout: |lse - ref| <= 2 (HD Sa + L + 4) u32 (the scores, the L-term sum). */
static double tol_terms(int bwd, double sa)
{
    return (bwd ? 4.0 : 2.0) * (2.0 * SDP_UBF16 + (2.0 * HD * sa + T + 8.0) * SDP_U32);
}

/* |x - ref| <= tol mag on every element; counts the bad ones and prints the worst */
static int check_vals(const char *what, const float *x, const double *ref, const double *mag,
                      size_t n, const double *tol, size_t tol_every, double *worst)
{
    int nbad = 0;
    for (size_t k = 0; k < n; k++) {
        const double e = fabs((double)x[k] - ref[k]), allowed = tol[k / tol_every] * mag[k];
        if (!(e <= allowed)) {
            if (nbad++ < 3)
                printf("    %s[%zu] = %.6g, ref %.6g, mag %.3g: error %.3g > %.3g\n", what, k,
                       (double)x[k], ref[k], mag[k], e, allowed);
        }
        const double f = allowed > 0 ? e / allowed : (e > 0 ? INFINITY : 0.0);
        *worst = f > *worst || isnan(e) ? f : *worst;
    }
    return nbad;
}

static void gather(float *dst, const float *src, int rows, size_t ld, size_t off, size_t width)
{
    for (int r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * width, src + (size_t)r * ld + off, width * sizeof(float));
}

/* the oracle on window w against the kernel's out (T, C), lse (NH, T), dqkv (T, QKV) */
static int check_window(struct oracle *r, const float *qkv, const float *dout, const int32_t *seg,
                        struct window w, const float *out, const float *lse, const float *dqkv,
                        double worst[2])
{
    const int nr = w.w1 - w.w0;
    const size_t ck = (size_t)NKV * HD;
    memset(r->o, 0, (size_t)W * C * 8), memset(r->mo, 0, (size_t)W * C * 8);
    memset(r->dq, 0, (size_t)W * C * 8), memset(r->mdq, 0, (size_t)W * C * 8);
    memset(r->dk, 0, W * ck * 8), memset(r->mdk, 0, W * ck * 8);
    memset(r->dv, 0, W * ck * 8), memset(r->mdv, 0, W * ck * 8);
    for (int t = w.w0; t < w.w1; t++)
        for (int h = 0; h < NH; h++)
            oracle_row(r, qkv, dout, seg, w, t, h);
    double tf[W * NH_MAX], tb[W * NH_MAX], sa_max = 0.0;
    int nbad = 0;
    for (int k = 0; k < nr * NH; k++) {
        tf[k] = tol_terms(0, r->sa[k]);
        tb[k] = tol_terms(1, r->sa[k]);
        sa_max = r->sa[k] > sa_max ? r->sa[k] : sa_max;
        const int i = k / NH, h = k % NH;
        const double e = fabs(lse[(size_t)h * T + w.w0 + i] - r->lse[k]);
        const double allowed = 2.0 * (HD * r->sa[k] + T + 4.0) * SDP_U32;
        worst[0] = e / allowed > worst[0] || isnan(e) ? e / allowed : worst[0];
        if (!(e <= allowed) && nbad++ < 3)
            printf("    lse[h %d, t %d] = %.9g, ref %.9g\n", h, w.w0 + i,
                   (double)lse[(size_t)h * T + w.w0 + i], r->lse[k]);
    }
    float *x = sdp_test_alloc((size_t)W * C * sizeof(float));
    nbad += check_vals("out", out + (size_t)w.w0 * C, r->o, r->mo, nr * C, tf, HD, &worst[0]);
    gather(x, dqkv + (size_t)w.w0 * QKV, nr, QKV, 0, C);
    nbad += check_vals("dq", x, r->dq, r->mdq, nr * C, tb, HD, &worst[1]);
    if (w.key_side) {
        const double tk = tol_terms(1, sa_max);
        gather(x, dqkv + (size_t)w.w0 * QKV, nr, QKV, C, ck);
        nbad += check_vals("dk", x, r->dk, r->mdk, nr * ck, &tk, nr * ck, &worst[1]);
        gather(x, dqkv + (size_t)w.w0 * QKV, nr, QKV, C + ck, ck);
        nbad += check_vals("dv", x, r->dv, r->mdv, nr * ck, &tk, nr * ck, &worst[1]);
    }
    free(x);
    return nbad;
}

static void *ws_buf;
static size_t ws_cap;

/* the workspace of a call, grown as asked (sdp_cudnn_attention_docs_*'s ws_fn) */
static void *grow_ws(size_t n)
{
    if (n > ws_cap) {
        CK(cudaDeviceSynchronize());
        CK(cudaFree(ws_buf));
        CK(cudaMalloc(&ws_buf, n));
        ws_cap = n;
    }
    return ws_buf;
}

struct dev {
    void *qkv, *dout, *out, *dqkv;
    float *lse;
    int32_t *seg;        /* NULL: causal over the row */
    const int32_t *hseg; /* the same starts on the host (cuDNN's variable-length calls) */
};

/* forward then backward on one implementation (cuDNN: 1); 0, or 1 when cuDNN refused */
static int run_impl(const struct dev *d, int cudnn, float ms[2])
{
    cudaEvent_t e[3];
    for (int i = 0; i < 3; i++)
        CK(cudaEventCreate(&e[i]));
    CK(cudaMemset(d->dqkv, 0xff, (size_t)T * QKV * 2)); /* NaN: every slot must be written */
    CK(cudaMemset(d->out, 0xff, (size_t)T * C * 2));
    CK(cudaEventRecord(e[0], 0));
    int rc = 0;
#ifdef SDP_HAVE_CUDNN_FRONTEND
    struct sdp_cudnn_docs_call call[2] = { { 0 }, { 0 } };
    size_t wf = 0, wb = 0;
    if (cudnn && d->seg) {
        rc = sdp_cudnn_attention_docs_fwd(d->out, d->lse, d->qkv, d->hseg, 1, T, NH, NKV, HD, 0,
                                          grow_ws, 0, &call[0]);
        CK(cudaEventRecord(e[1], 0));
        rc = rc ? rc
                : sdp_cudnn_attention_docs_bwd(d->dqkv, d->dout, d->qkv, d->out, d->lse, d->hseg, 1,
                                               T, NH, NKV, HD, 0, grow_ws, 0, &call[1]);
        printf("  cuDNN: document slots %d, longest %d, workspaces %.1f and %.1f MiB\n",
               call[1].docs, call[1].longest, call[0].ws / 1048576.0, call[1].ws / 1048576.0);
    } else if (cudnn) {
        rc = sdp_cudnn_attention_ws(&wf, 0, 1, T, NH, NKV, HD, 0) ||
             sdp_cudnn_attention_ws(&wb, 1, 1, T, NH, NKV, HD, 0);
        void *ws = rc ? NULL : grow_ws(wf > wb ? wf : wb);
        CK(cudaEventRecord(e[0], 0));
        rc = rc || sdp_cudnn_attention_fwd(d->out, d->lse, d->qkv, 1, T, NH, NKV, HD, 0, ws, 0);
        CK(cudaEventRecord(e[1], 0));
        rc = rc || sdp_cudnn_attention_bwd(d->dqkv, d->dout, d->qkv, d->out, d->lse, 1, T, NH, NKV,
                                           HD, 0, ws, 0);
    }
    if (rc)
        printf("  cuDNN refused: %s\n", sdp_cudnn_attention_error());
#endif
    if (!cudnn) {
        void *ws = grow_ws(sdp_cuda_attention_bwd_ws(1, T, NH, NKV, HD));
        CK(cudaEventRecord(e[0], 0));
        sdp_cuda_attention_fwd(d->out, d->lse, d->qkv, d->seg, 1, T, NH, NKV, HD, SDP_CUDA_BF16, 0);
        CK(cudaEventRecord(e[1], 0));
        sdp_cuda_attention_bwd(d->dqkv, d->dout, d->qkv, d->out, d->lse, d->seg, 1, T, NH, NKV, HD,
                               SDP_CUDA_BF16, ws, 0);
    }
    CK(cudaEventRecord(e[2], 0));
    CK(cudaGetLastError());
    CK(cudaEventSynchronize(e[2]));
    CK(cudaEventElapsedTime(&ms[0], e[0], e[1]));
    CK(cudaEventElapsedTime(&ms[1], e[1], e[2]));
    for (int i = 0; i < 3; i++)
        CK(cudaEventDestroy(e[i]));
    return rc != 0;
}

static void to_host_bf16(float *x, const void *d, size_t n)
{
    uint16_t *h = sdp_test_alloc(n * sizeof(*h));
    CK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    sdp_cpu_bf16_to_f32_ref(x, h, n);
    free(h);
}

static void *to_dev_bf16(const float *x, size_t n)
{
    uint16_t *h = sdp_test_alloc(n * sizeof(*h));
    void *d;
    sdp_cpu_cast_bf16_ref(h, x, n);
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

struct result {
    float *out, *lse, *dqkv;
    int refused;
    double worst[2]; /* the largest error / allowed: forward (out, lse), backward */
    int nbad;
};

static int run_case(const char *name, const float *qkv, const float *dout, const int32_t *seg,
                    struct dev *d, const struct window *ws, int nw)
{
    const char *impl[2] = { "own kernels", "cuDNN" };
    struct result res[2] = { { 0 } };
    int nimpl = 1, nbad = 0;
#ifdef SDP_HAVE_CUDNN_FRONTEND
    nimpl = 2;
#endif
    d->seg = NULL;
    d->hseg = seg;
    if (seg) {
        CK(cudaMalloc((void **)&d->seg, (size_t)T * sizeof(*seg)));
        CK(cudaMemcpy(d->seg, seg, (size_t)T * sizeof(*seg), cudaMemcpyHostToDevice));
    }
    for (int k = 0; k < nimpl; k++) {
        float ms[2];
        printf("%s (T=%d NH=%d NKV=%d HD=%d) bf16, %s\n", name, T, NH, NKV, HD, impl[k]);
        res[k].refused = run_impl(d, k, ms) || run_impl(d, k, ms); /* the second call is timed */
        nbad += res[k].refused; /* qwen3's head shape must run on cuDNN */
        /* causal FLOPs of the whole row (the masked case does less) */
        const double fl = 4.0 * NH * (double)T * T * HD / 2.0;
        printf("  forward %.2f ms, backward %.2f ms (%.0f and %.0f TFLOP/s of a causal row)\n",
               ms[0], ms[1], fl / ms[0] * 1e-9, 2.5 * fl / ms[1] * 1e-9);
        res[k].out = sdp_test_alloc((size_t)T * C * 4);
        res[k].dqkv = sdp_test_alloc((size_t)T * QKV * 4);
        res[k].lse = sdp_test_alloc((size_t)NH * T * 4);
        to_host_bf16(res[k].out, d->out, (size_t)T * C);
        to_host_bf16(res[k].dqkv, d->dqkv, (size_t)T * QKV);
        CK(cudaMemcpy(res[k].lse, d->lse, (size_t)NH * T * 4, cudaMemcpyDeviceToHost));
        size_t nonfinite = 0;
        for (size_t i = 0; i < (size_t)T * QKV; i++)
            nonfinite +=
                !isfinite(res[k].dqkv[i]) || (i < (size_t)T * C && !isfinite(res[k].out[i]));
        printf("  non-finite values in out, dqkv: %zu  %s\n", nonfinite, nonfinite ? "BAD" : "ok");
        nbad += nonfinite != 0;
    }
    struct oracle r;
    const size_t ck = (size_t)NKV * HD;
    double **arrs[] = { &r.o,  &r.mo,  &r.dq,  &r.mdq, &r.dk, &r.mdk,
                        &r.dv, &r.mdv, &r.lse, &r.sa,  &r.p,  &r.dp };
    const size_t sizes[] = { W * C,  W * C,  W * C,  W * C,  W * ck, W * ck,
                             W * ck, W * ck, W * NH, W * NH, T,      T };
    for (int i = 0; i < 12; i++)
        *arrs[i] = sdp_test_alloc(sizes[i] * sizeof(double));
    for (int i = 0; i < nw; i++)
        for (int k = 0; k < nimpl; k++)
            if (!res[k].refused)
                res[k].nbad += check_window(&r, qkv, dout, seg, ws[i], res[k].out, res[k].lse,
                                            res[k].dqkv, res[k].worst);
    for (int k = 0; k < nimpl; k++) {
        printf("  %s: %d sampled windows of %d rows, largest error / allowed: forward %.3f, "
               "backward %.3f; %d elements out of bounds  %s\n",
               impl[k], nw, W, res[k].worst[0], res[k].worst[1], res[k].nbad,
               res[k].nbad || res[k].refused ? "BAD" : "ok");
        nbad += res[k].nbad;
        free(res[k].out), free(res[k].dqkv), free(res[k].lse);
    }
    for (int i = 0; i < 12; i++)
        free(*arrs[i]);
    if (d->seg)
        CK(cudaFree(d->seg));
    return nbad;
}

/* the windows: the first, a middle and the last rows of a causal row; of each document its first
 * rows and its last (whose keys are checked too) */
static int windows(struct window *ws, const int32_t *seg)
{
    int n = 0;
    if (!seg) {
        ws[n++] = (struct window){ 0, W, 0 };
        ws[n++] = (struct window){ T / 2, T / 2 + W, 0 };
        ws[n++] = (struct window){ T - W, T, 1 };
        return n;
    }
    for (int a = 0; a < T;) {
        int b = a + 1;
        while (b < T && seg[b] == a)
            b++;
        ws[n++] = (struct window){ a, b - a < W ? b : a + W, b - a <= W };
        if (b - a > W)
            ws[n++] = (struct window){ b - W, b, 1 };
        a = b;
    }
    return n;
}

/* Documents of the given lengths (summing to T at most; the rest one more document) as starts */
static int32_t *docs_of(const int *lens, int n)
{
    int32_t *seg = sdp_test_alloc((size_t)T * sizeof(*seg));
    for (int t = 0, i = 0, a = 0; t < T; t++) {
        if (i < n && t == a + lens[i])
            a += lens[i++];
        seg[t] = a;
    }
    return seg;
}

/* Every case of one head shape (nh query heads, nkv key-value heads) on inputs drawn from rng:
 * causal when asked, then each layout of documents (nd[i] lengths from lens[i]) */
static int run_shape(int nh, int nkv, struct sdp_rng *rng, int causal, const int *const *lens,
                     const int *nd, int nlayouts)
{
    NH = nh, NKV = nkv;
    float *qkv = sdp_test_alloc((size_t)T * QKV * 4), *dout = sdp_test_alloc((size_t)T * C * 4);
    sdp_fill_normal(rng, qkv, (size_t)T * QKV, 1.0f);
    sdp_fill_normal(rng, dout, (size_t)T * C, 1.0f);
    struct dev d = { to_dev_bf16(qkv, (size_t)T * QKV),
                     to_dev_bf16(dout, (size_t)T * C),
                     NULL,
                     NULL,
                     NULL,
                     NULL,
                     NULL };
    to_host_bf16(qkv, d.qkv, (size_t)T * QKV); /* the oracle reads the very inputs */
    to_host_bf16(dout, d.dout, (size_t)T * C);
    CK(cudaMalloc(&d.out, (size_t)T * C * 2));
    CK(cudaMalloc(&d.dqkv, (size_t)T * QKV * 2));
    CK(cudaMalloc((void **)&d.lse, (size_t)NH * T * 4));
    struct window ws[32];
    int nfail = 0;
    if (causal)
        nfail += run_case("causal", qkv, dout, NULL, &d, ws, windows(ws, NULL));
    for (int i = 0; i < nlayouts; i++) {
        int32_t *seg = docs_of(lens[i], nd[i]);
        char name[32];
        snprintf(name, sizeof(name), "documents (layout %d)", i + 1);
        nfail += run_case(name, qkv, dout, seg, &d, ws, windows(ws, seg));
        free(seg);
    }
    free(qkv), free(dout);
    void *bufs[] = { d.qkv, d.dout, d.out, d.dqkv, d.lse };
    for (int i = 0; i < 5; i++)
        CK(cudaFree(bufs[i]));
    return nfail;
}

int main(void)
{
    int nfail = check_docs_layout(), ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return nfail ? 1 : 77;
    }
    struct sdp_rng rng = { 20261206u };
    /* six documents, one of a single token: 8 slots, two of them empty */
    static const int six[] = { 1, 6999, 129, 20000, 3 };
    /* data/kjv/train.tok at seq 32768, seed 1234: the rows of steps 4 and 5 (2 and 3 documents) */
    static const int kjv4[] = { 23641 }, kjv5[] = { 14831, 3266 };
    const int *small[] = { six }, *qwen[] = { kjv4, kjv5 };
    const int nsmall[] = { 5 }, nqwen[] = { 1, 2 };
    nfail += run_shape(8, 2, &rng, 1, small, nsmall, 1);
    nfail += run_shape(32, 8, &rng, 0, qwen, nqwen, 2);
    CK(cudaFree(ws_buf));
    return sdp_test_finish(nfail);
}
