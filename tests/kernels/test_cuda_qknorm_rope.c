/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_qknorm_rope_fwd/_bwd against the CPU's sdp_cpu_qknorm_rope_*_ref (out, rstd,
 * dqkv) and dqnorm_w/dknorm_w against fp64 sums, with and without the per-head norm, for f32 and
 * bf16 storage (the reference sees bf16-rounded inputs): the tiny shape (HD 16, NH 4, NKV 2,
 * T 16), an odd HD, HD 256 and 512, the qwen3-4b heads (HD 128, NH 32, NKV 8, T 1024, B 2), an
 * odd count of q/k heads, more tokens than backward blocks, a vector slot's pairs running on past
 * a token's heads, and more tokens a vector backward block than its cos/sin table holds at 1024
 * blocks (the vector paths and the scalar ones); tolerances scale with the terms that cancel in the
 * rotation and the norm backward.  Prints the bandwidth at N = 16384. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_cuda.h"

/* 1: the cases run with yarn's factor of cos and sin and positions restarting per document */
static int yarn_docs;

/* each token's document start in its row: documents of 1 to 50 tokens drawn from rng */
static int32_t *doc_starts(struct sdp_rng *rng, int B, int T)
{
    int32_t *seg = sdp_test_alloc((size_t)B * T * sizeof(*seg));
    for (int b = 0; b < B; b++) {
        int start = 0, left = 1 + (int)(sdp_rng_next(rng) % 50);
        for (int t = 0; t < T; t++, left--) {
            if (left == 0) {
                start = t;
                left = 1 + (int)(sdp_rng_next(rng) % 50);
            }
            seg[(size_t)b * T + t] = start;
        }
    }
    return seg;
}

static int run_case(int B, int T, int NH, int NKV, int HD, int norm, int dt, uint64_t seed)
{
    struct sdp_rng rng = { seed };
    const int N = B * T, NQK = NH + NKV, QKV = (NQK + NKV) * HD, half = HD / 2;
    const size_t n = (size_t)N * QKV, nr = (size_t)N * NQK;
    const float eps = 1e-6f;
    float *x = sdp_test_alloc(n * 4), *g = sdp_test_alloc(n * 4);
    float *qw = sdp_test_alloc((size_t)HD * 4), *kw = sdp_test_alloc((size_t)HD * 4);
    float *out = sdp_test_alloc(n * 4), *outc = sdp_test_alloc(n * 4);
    float *rs = sdp_test_alloc(nr * 4), *rsc = sdp_test_alloc(nr * 4);
    float *dx = sdp_test_alloc(n * 4), *dxc = sdp_test_alloc(n * 4);
    float *dw0 = sdp_test_alloc((size_t)2 * HD * 4), *dwg = sdp_test_alloc((size_t)2 * HD * 4);
    float *dwc = sdp_test_alloc((size_t)2 * HD * 4);
    double *kf = sdp_test_alloc(n * 8), *kb = sdp_test_alloc(n * 8);
    double *dwr = sdp_test_alloc((size_t)2 * HD * 8), *dwm = sdp_test_alloc((size_t)2 * HD * 8);
    struct sdp_cuda_inv_freq inv;
    char name[128];
    int nfail = 0;

    int32_t *seg = yarn_docs ? doc_starts(&rng, B, T) : NULL;
    memset(&inv, 0, sizeof(inv));
    sdp_cpu_rope_inv_freq(inv.f, HD, 1000000.0, 0.0, 0.0, 0.0, 0);
    inv.scale = yarn_docs ? 1.0693147f : 1.0f; /* yarn's factor 2 */
    if (seg) {
        CK(cudaMalloc((void **)&inv.seg, (size_t)N * sizeof(*seg)));
        CK(cudaMemcpy((void *)inv.seg, seg, (size_t)N * sizeof(*seg), cudaMemcpyHostToDevice));
    }
    sdp_fill_normal(&rng, x, n, 1.0f);
    sdp_fill_normal(&rng, g, n, 1.0f);
    sdp_fill_uniform(&rng, qw, (size_t)HD, 0.5f, 1.5f);
    sdp_fill_uniform(&rng, kw, (size_t)HD, 0.5f, 1.5f);
    sdp_fill_normal(&rng, dw0, (size_t)2 * HD, 1.0f);
    for (int i = 0; i < HD; i++) /* adversarial heads: zeros (token 0, q head 0), huge (k head 0) */
        x[i] = 0.0f, x[(size_t)NH * HD + i] *= 1e20f;
    round_in(x, n, dt);
    round_in(g, n, dt);
    round_in(qw, (size_t)HD, dt);
    round_in(kw, (size_t)HD, dt);

    void *d_x = upload(x, n, dt), *d_g = upload(g, n, dt);
    void *d_qw = norm ? upload(qw, (size_t)HD, dt) : NULL;
    void *d_kw = norm ? upload(kw, (size_t)HD, dt) : NULL;
    void *d_out, *d_dx, *ws;
    float *d_rs, *d_dw;
    const size_t ws_bytes = sdp_cuda_qknorm_rope_bwd_ws(N, NH, NKV, HD);
    CK(cudaMalloc(&d_out, n * esize(dt) + 16));
    CK(cudaMalloc(&d_dx, n * esize(dt) + 16));
    CK(cudaMalloc(&ws, ws_bytes + 16));
    CK(cudaMalloc((void **)&d_rs, nr * 4 + 16));
    CK(cudaMalloc((void **)&d_dw, (size_t)2 * HD * 4));

    sdp_cuda_qknorm_rope_fwd(d_out, d_rs, d_x, d_qw, d_kw, inv, N, T, NH, NKV, HD, eps, dt, 0);
    CK(cudaGetLastError());
    download(out, d_out, n, dt);
    CK(cudaMemcpy(rs, d_rs, nr * 4, cudaMemcpyDeviceToHost));
    sdp_cpu_qknorm_rope_fwd_ref(outc, rsc, x, norm ? qw : NULL, norm ? kw : NULL, inv.f, inv.scale,
                                seg, N, T, NH, NKV, HD, eps);

    /* kappa of the forward: |a c| + |b s| of the rotation (a, b normed), |x| for v and odd tails;
     * of the backward: r |w| (|g_a c| + |g_b s|) + (|c_n| + r^3/HD sum |g' w x|) |x| (un-rotation,
     * then the norm, whose c_n inherits the roundings of every g'), and the dw sums of |g' x r| */
    for (int i = 0; i < 2 * HD; i++) {
        dwr[i] = dw0[i];
        dwm[i] = fabs(dw0[i]);
    }
    for (int t = 0; t < N; t++) {
        const size_t row = (size_t)t * QKV;
        for (size_t j = (size_t)NQK * HD; j < (size_t)QKV; j++)
            kf[row + j] = fabs(x[row + j]), kb[row + j] = fabs(g[row + j]);
        for (int h = 0; h < NQK; h++) {
            const float *w = h < NH ? qw : kw;
            const double r = norm ? rsc[(size_t)t * NQK + h] : 1.0;
            const float *xh = x + row + (size_t)h * HD, *gh = g + row + (size_t)h * HD;
            double *kfh = kf + row + (size_t)h * HD, *kbh = kb + row + (size_t)h * HD;
            double gp[512], dot = 0.0, gm[512];
            for (int i = 0; i < half; i++) {
                const float ang = (float)(t % T - (seg ? seg[t] : 0)) * inv.f[i];
                const double c = (float)cos((double)ang) * inv.scale;
                const double s = (float)sin((double)ang) * inv.scale;
                const double wa = norm ? w[i] : 1.0, wb = norm ? w[i + half] : 1.0;
                const double a = xh[i] * r * wa, b = xh[i + half] * r * wb;
                kfh[i] = fabs(a * c) + fabs(b * s);
                kfh[i + half] = fabs(b * c) + fabs(a * s);
                gp[i] = gh[i] * c + gh[i + half] * s;
                gp[i + half] = gh[i + half] * c - gh[i] * s;
                gm[i] = fabs(gh[i] * c) + fabs(gh[i + half] * s);
                gm[i + half] = fabs(gh[i + half] * c) + fabs(gh[i] * s);
            }
            if (HD & 1) {
                kfh[HD - 1] = fabs(xh[HD - 1] * r * (norm ? w[HD - 1] : 1.0));
                gp[HD - 1] = gh[HD - 1];
                gm[HD - 1] = fabs(gh[HD - 1]);
            }
            if (!norm) {
                for (int i = 0; i < HD; i++)
                    kbh[i] = gm[i];
                continue;
            }
            double sa = 0.0; /* sum |g' w x|: c's error from the rounding of g' */
            for (int i = 0; i < HD; i++) {
                dot += gp[i] * w[i] * xh[i];
                sa += gm[i] * fabs(w[i] * xh[i]);
            }
            const double cn = r * r * r * dot / HD, cm = r * r * r * sa / HD;
            double *dr = dwr + (h < NH ? 0 : HD), *dm = dwm + (h < NH ? 0 : HD);
            for (int i = 0; i < HD; i++) {
                kbh[i] = r * fabs(w[i]) * gm[i] + (fabs(cn) + cm) * fabs(xh[i]);
                dr[i] += gp[i] * xh[i] * r;
                dm[i] += gm[i] * fabs(xh[i]) * r;
            }
        }
    }
    const double rtol = dt == SDP_CUDA_BF16 ? SDP_RTOL_BF16 : SDP_RTOL_ELEM;
    double *ref = to_double(outc, n);
    snprintf(name, sizeof(name), "qkrope out %s N=%d HD=%d%s", dt_name(dt), N, HD,
             norm ? " norm" : "");
    nfail += sdp_check(name, out, ref, kf, n, rtol, 0.0);
    free(ref);
    if (norm) {
        ref = to_double(rsc, nr);
        snprintf(name, sizeof(name), "qkrope rstd %s N=%d HD=%d", dt_name(dt), N, HD);
        nfail += sdp_check_elem(name, rs, ref, nr);
        free(ref);
    }

    /* backward from the CPU's rstd */
    CK(cudaMemcpy(d_rs, rsc, nr * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_dw, dw0, (size_t)2 * HD * 4, cudaMemcpyHostToDevice));
    sdp_cuda_qknorm_rope_bwd(d_dx, norm ? d_dw : NULL, norm ? d_dw + HD : NULL, d_g, d_x, d_qw,
                             d_kw, d_rs, inv, N, T, NH, NKV, HD, dt, ws, 0);
    CK(cudaGetLastError());
    download(dx, d_dx, n, dt);
    CK(cudaMemcpy(dwg, d_dw, (size_t)2 * HD * 4, cudaMemcpyDeviceToHost));
    memcpy(dwc, dw0, (size_t)2 * HD * 4);
    sdp_cpu_qknorm_rope_bwd_ref(dxc, dwc, dwc + HD, g, x, norm ? qw : NULL, norm ? kw : NULL, rsc,
                                inv.f, inv.scale, seg, N, T, NH, NKV, HD);
    ref = to_double(dxc, n);
    snprintf(name, sizeof(name), "qkrope dqkv %s N=%d HD=%d%s", dt_name(dt), N, HD,
             norm ? " norm" : "");
    nfail += sdp_check(name, dx, ref, kb, n, rtol, 0.0);
    free(ref);
    if (norm) {
        /* fp32 products (3 roundings) of an un-rotated g' (2 more) summed in double: <= 6 u32 */
        snprintf(name, sizeof(name), "qkrope dq|dk norm_w %s N=%d HD=%d", dt_name(dt), N, HD);
        nfail += sdp_check(name, dwg, dwr, dwm, (size_t)2 * HD, SDP_SAFETY * SDP_U32, 0.0);
    } else {
        snprintf(name, sizeof(name), "qkrope norm_w untouched %s", dt_name(dt));
        nfail += sdp_check_bits(name, dwg, dw0, (size_t)2 * HD);
    }

    CK(cudaFree(d_x));
    CK(cudaFree(d_g));
    CK(cudaFree(d_qw));
    CK(cudaFree(d_kw));
    CK(cudaFree(d_out));
    CK(cudaFree(d_dx));
    CK(cudaFree(ws));
    CK(cudaFree(d_rs));
    CK(cudaFree(d_dw));
    CK(cudaFree((void *)inv.seg));
    free(seg);
    free(x), free(g), free(qw), free(kw), free(out), free(outc), free(rs), free(rsc), free(dx);
    free(dxc), free(dw0), free(dwg), free(dwc), free(kf), free(kb), free(dwr), free(dwm);
    return nfail;
}

static void bench(int dt)
{
    const int N = 16384, T = 1024, NH = 32, NKV = 8, HD = 128, reps = 10;
    const int QKV = (NH + 2 * NKV) * HD;
    const size_t n = (size_t)N * QKV, es = esize(dt);
    struct sdp_cuda_inv_freq inv;
    void *d_x, *d_out, *d_g, *d_w, *ws;
    float *d_rs, *d_dw;
    cudaEvent_t e0, e1;
    float ms_f, ms_b;

    memset(&inv, 0, sizeof(inv));
    sdp_cpu_rope_inv_freq(inv.f, HD, 1000000.0, 0.0, 0.0, 0.0, 0);
    inv.scale = 1.0f;
    CK(cudaMalloc(&d_x, n * es));
    CK(cudaMalloc(&d_out, n * es));
    CK(cudaMalloc(&d_g, n * es));
    CK(cudaMalloc(&d_w, (size_t)HD * es));
    CK(cudaMalloc((void **)&d_rs, (size_t)N * (NH + NKV) * 4));
    CK(cudaMalloc((void **)&d_dw, (size_t)2 * HD * 4));
    CK(cudaMalloc(&ws, sdp_cuda_qknorm_rope_bwd_ws(N, NH, NKV, HD)));
    CK(cudaMemset(d_x, 0x3c, n * es));
    CK(cudaMemset(d_g, 0x3c, n * es));
    CK(cudaMemset(d_w, 0x3c, (size_t)HD * es));
    CK(cudaMemset(d_dw, 0, (size_t)2 * HD * 4));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    sdp_cuda_qknorm_rope_fwd(d_out, d_rs, d_x, d_w, d_w, inv, N, T, NH, NKV, HD, 1e-6f, dt, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_qknorm_rope_fwd(d_out, d_rs, d_x, d_w, d_w, inv, N, T, NH, NKV, HD, 1e-6f, dt, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_f, e0, e1));
    sdp_cuda_qknorm_rope_bwd(d_out, d_dw, d_dw + HD, d_g, d_x, d_w, d_w, d_rs, inv, N, T, NH, NKV,
                             HD, dt, ws, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_qknorm_rope_bwd(d_out, d_dw, d_dw + HD, d_g, d_x, d_w, d_w, d_rs, inv, N, T, NH,
                                 NKV, HD, dt, ws, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    CK(cudaEventElapsedTime(&ms_b, e0, e1));
    ms_f /= reps;
    ms_b /= reps;
    const double bf = 2.0 * n * es, bb = (2.0 * QKV + (NH + NKV) * HD) * N * es;
    printf("perf qknorm_rope fwd %s N=%d QKV=%d: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n",
           dt_name(dt), N, QKV, ms_f * 1e3, bf / (ms_f * 1e-3) / 1e9, bf / (ms_f * 1e-3) / 4.8e10);
    printf("perf qknorm_rope bwd %s N=%d QKV=%d: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n",
           dt_name(dt), N, QKV, ms_b * 1e3, bb / (ms_b * 1e-3) / 1e9, bb / (ms_b * 1e-3) / 4.8e10);
    CK(cudaFree(d_x));
    CK(cudaFree(d_out));
    CK(cudaFree(d_g));
    CK(cudaFree(d_w));
    CK(cudaFree(d_rs));
    CK(cudaFree(d_dw));
    CK(cudaFree(ws));
}

int main(void)
{
    int ndev = 0, nfail = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    for (int dt = SDP_CUDA_F32; dt <= SDP_CUDA_BF16; dt++) {
        nfail += run_case(2, 16, 4, 2, 16, 1, dt, 1);
        nfail += run_case(2, 16, 4, 2, 16, 0, dt, 2);
        nfail += run_case(1, 9, 3, 1, 17, 1, dt, 3);
        nfail += run_case(1, 9, 3, 1, 17, 0, dt, 4);
        nfail += run_case(2, 1024, 32, 8, 128, 1, dt, 5);
        nfail += run_case(1, 300, 8, 8, 64, 0, dt, 6);
        nfail += run_case(1, 40, 5, 2, 256, 1, dt, 7);
        nfail += run_case(1, 20, 3, 1, 512, 1, dt, 8);
        nfail += run_case(1, 33, 7, 2, 128, 1, dt, 9);     /* 9 q/k heads: a part-filled round */
        nfail += run_case(3, 700, 6, 3, 64, 1, dt, 10);    /* N = 2100: N / 1024 tokens a block */
        nfail += run_case(1, 8200, 5, 1, 64, 1, dt, 11);   /* a slot's pairs wrap past a token */
        nfail += run_case(1, 16500, 3, 1, 256, 1, dt, 12); /* > bwd_tc tokens: 1032 vector blocks */
    }
    /* yarn's factor of cos and sin, and positions restarting per document: the scalar and the
     * vector paths */
    yarn_docs = 1;
    printf("-- cos and sin times 1.0693147, positions restarting per document\n");
    for (int dt = SDP_CUDA_F32; dt <= SDP_CUDA_BF16; dt++) {
        nfail += run_case(2, 16, 4, 2, 16, 1, dt, 13);
        nfail += run_case(1, 9, 3, 1, 17, 0, dt, 14);
        nfail += run_case(2, 1024, 32, 8, 128, 1, dt, 15);
        nfail += run_case(3, 700, 6, 3, 64, 0, dt, 16);
    }
    yarn_docs = 0;
    bench(SDP_CUDA_BF16);
    bench(SDP_CUDA_F32);
    return sdp_test_finish(nfail);
}
