/* SPDX-License-Identifier: MIT */
/* Checks the fused LM head + cross-entropy on the GPU (f32; bf16 with f32 and with bf16 logits;
 * several rows-per-block values, ignored targets including a whole ignored block, large logits,
 * N = 1, V not a multiple of 4) against the CPU fp64 oracle sdp_cpu_lmhead_ce_ref fed the same
 * (bf16-rounded) inputs: loss sum, valid count, dh, accumulated dw; also bit-reproducibility of
 * the loss.  Then the qwen3-4b shape (N=16384, C=2560, V=151936, bf16) is timed for three block
 * sizes with f32 logits and three with bf16 ones in the same workspaces, and two of its dh rows
 * are checked against an fp64 recomputation here. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"

#define CK(expr)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("%s:%d: %s: %s\nFAIL\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define GEMM_WS_BYTES (32u << 20)

static cublasLtHandle_t lt;
static cudaStream_t stream;
static void *gemm_ws;

static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = sdp_bf16_to_f32(sdp_f32_to_bf16(x[i]));
}

static void *upload(const float *h, size_t n, int dt)
{
    void *d;
    if (dt == SDP_CUDA_F32) {
        CK(cudaMalloc(&d, n * 4));
        CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
        return d;
    }
    uint16_t *b = sdp_test_alloc(n * 2);
    sdp_cpu_cast_bf16_ref(b, h, n);
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, b, n * 2, cudaMemcpyHostToDevice));
    free(b);
    return d;
}

static float *download(const void *d, size_t n, int dt)
{
    float *h = sdp_test_alloc(n * 4);
    if (dt == SDP_CUDA_F32) {
        CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
        return h;
    }
    uint16_t *b = sdp_test_alloc(n * 2);
    CK(cudaMemcpy(b, d, n * 2, cudaMemcpyDeviceToHost));
    sdp_cpu_bf16_to_f32_ref(h, b, n);
    free(b);
    return h;
}

/* First-order error magnitudes of the GPU path in units of u32 (bounds: SDP_SAFETY u32 kappa), per
 * row n with Zn = max_v sum_c |h_nc w_vc| and Mn = max_v |z_nv| (as in the CPU kernel's test):
 *  logits (fp32-accumulated GEMM over C):   Ez = C Zn, plus Mn u_bf16/u32 when stored as bf16;
 *                                           rho = 2 Ez + 2 Mn + 4 for p = exp(z - max)
 *  loss_n:                                 rho + Ez + 2
 *  g_nv: Eg = |scale| (P (rho + 3) + onehot), plus |g| u_bf16/u32 when g is stored as bf16
 *  dh_nc = sum_v g w over V terms:  sum_v (Eg + (V + 1) |g|) |w_vc|, plus |dh| u_bf16/u32 (bf16)
 *  dw_vc = dw0 + one GEMM of <= N terms per block (beta = 1):
 *          sum_n (Eg + (N + nblocks + 1) |g|) |h_nc| + nblocks |dw0| */
static void kappa_run(double *kloss, double *kdh, double *kdw, const float *h, const float *w,
                      const float *dw0, const int32_t *tgt, int N, int C, int V, double scale,
                      int nblocks, int bf16, int zbf16)
{
    double *z = sdp_test_alloc((size_t)V * 8), *Eg = sdp_test_alloc((size_t)V * 8);
    const double ub = bf16 ? SDP_UBF16 / SDP_U32 : 0.0, uz = zbf16 ? SDP_UBF16 / SDP_U32 : 0.0;

    *kloss = 0.0;
    for (size_t i = 0; i < (size_t)V * C; i++)
        kdw[i] = nblocks * fabs(dw0[i]);
    for (size_t i = 0; i < (size_t)N * C; i++)
        kdh[i] = 0.0;
    for (int n = 0; n < N; n++) {
        const float *hn = h + (size_t)n * C;
        if (tgt[n] < 0)
            continue;
        double mx = -INFINITY, Z = 0.0, M = 0.0, sum = 0.0;
        for (int v = 0; v < V; v++) {
            double d = 0.0, a = 0.0;
            for (int c = 0; c < C; c++) {
                d += (double)hn[c] * w[(size_t)v * C + c];
                a += fabs((double)hn[c] * w[(size_t)v * C + c]);
            }
            z[v] = d;
            mx = d > mx ? d : mx;
            Z = a > Z ? a : Z;
            M = fabs(d) > M ? fabs(d) : M;
        }
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - mx);
        const double Ez = C * Z + uz * M, lse = mx + log(sum), rho = 2.0 * Ez + 2 * M + 4;
        *kloss += rho + Ez + 2;
        for (int v = 0; v < V; v++) {
            const double P = exp(z[v] - lse);
            z[v] = scale * (P - (v == tgt[n])); /* now g */
            Eg[v] = fabs(scale) * (P * (rho + 3) + (v == tgt[n])) + ub * fabs(z[v]);
        }
        for (int c = 0; c < C; c++) {
            double dh = 0.0, k = 0.0;
            for (int v = 0; v < V; v++) {
                const double wv = w[(size_t)v * C + c];
                dh += z[v] * wv;
                k += (Eg[v] + (V + 1) * fabs(z[v])) * fabs(wv);
                kdw[(size_t)v * C + c] += (Eg[v] + (N + nblocks + 1) * fabs(z[v])) * fabs(hn[c]);
            }
            kdh[(size_t)n * C + c] = k + ub * fabs(dh);
        }
    }
    free(z), free(Eg);
}

static int run_case(struct sdp_rng *rng, int N, int C, int V, float hamp, int dt, int zdt,
                    const int *rpbs, int nrpb)
{
    const size_t nh = (size_t)N * C, nw = (size_t)V * C;
    const int bf16 = dt == SDP_CUDA_BF16, zbf16 = zdt == SDP_CUDA_BF16;
    float *h = sdp_test_alloc(nh * 4), *w = sdp_test_alloc(nw * 4), *dw0 = sdp_test_alloc(nw * 4);
    float *rdh = sdp_test_alloc(nh * 4), *rdw = sdp_test_alloc(nw * 4);
    int32_t *tgt = sdp_test_alloc((size_t)N * 4);
    double *dref = sdp_test_alloc((nh > nw ? nh : nw) * 8);
    double *kdh = sdp_test_alloc(nh * 8), *kdw = sdp_test_alloc(nw * 8), kloss, rloss;
    int rvalid, nv = 0, nfail = 0;
    char name[128];

    sdp_fill_normal(rng, h, nh, hamp);
    sdp_fill_normal(rng, w, nw, 0.5f);
    sdp_fill_normal(rng, dw0, nw, 0.01f);
    if (bf16)
        round_bf16(h, nh), round_bf16(w, nw);
    for (int n = 0; n < N; n++) {
        /* ignore about one in four, and all of rows 8..15 (a whole block of 8) */
        tgt[n] = (sdp_rng_next(rng) % 4 == 0 || (n >= 8 && n < 16))
                     ? -1 - (int32_t)(sdp_rng_next(rng) % 100)
                     : (int32_t)(sdp_rng_next(rng) % V);
    }
    if (N == 1)
        tgt[0] = V - 1;
    for (int n = 0; n < N; n++)
        nv += tgt[n] >= 0;
    const float scale = 1.0f / (float)(nv > 0 ? nv : 1);
    memcpy(rdw, dw0, nw * 4);
    sdp_cpu_lmhead_ce_ref(&rloss, &rvalid, rdh, rdw, h, w, tgt, N, C, V, scale);
    printf("-- %s, %s logits, N=%d C=%d V=%d, h std %g, %d valid rows\n", bf16 ? "bf16" : "f32",
           zbf16 ? "bf16" : "f32", N, C, V, (double)hamp, nv);

    void *d_h = upload(h, nh, dt), *d_w = upload(w, nw, dt), *d_dh, *ws;
    float *d_dw;
    int32_t *d_tgt;
    double *d_loss, loss[2], loss_first[2];
    CK(cudaMalloc(&d_dh, nh * 4));
    CK(cudaMalloc((void **)&d_dw, nw * 4));
    CK(cudaMalloc((void **)&d_tgt, (size_t)N * 4));
    CK(cudaMalloc((void **)&d_loss, 16));
    CK(cudaMemcpy(d_tgt, tgt, (size_t)N * 4, cudaMemcpyHostToDevice));

    for (int b = 0; b < nrpb; b++) {
        const int rpb = rpbs[b], R = rpb > N ? N : rpb;
        const int nblocks = (N + R - 1) / R;
        const size_t wsb = sdp_cuda_lmhead_ce_ws(N, C, V, rpb, zdt);
        CK(cudaMalloc(&ws, wsb));
        CK(cudaMemset(ws, 0xff, wsb)); /* NaN garbage: every read byte must have been written */
        for (int rep = 0; rep < 2; rep++) {
            CK(cudaMemcpy(d_dw, dw0, nw * 4, cudaMemcpyHostToDevice));
            CK(cudaMemset(d_dh, 0x7f, nh * 4));
            CK(cudaMemset(d_loss, 0x7f, 16));
            sdp_cuda_lmhead_ce(lt, d_loss, d_dh, d_dw, d_h, d_w, d_tgt, N, C, V, scale, rpb, dt,
                               zdt, ws, wsb, gemm_ws, GEMM_WS_BYTES, stream);
            CK(cudaGetLastError());
            CK(cudaStreamSynchronize(stream));
            CK(cudaMemcpy(loss, d_loss, 16, cudaMemcpyDeviceToHost));
            if (rep == 0)
                memcpy(loss_first, loss, 16);
        }
        kappa_run(&kloss, kdh, kdw, h, w, dw0, tgt, N, C, V, scale, nblocks, bf16, zbf16);
        const double err = fabs(loss[0] - rloss), allowed = SDP_SAFETY * SDP_U32 * kloss;
        const int lbad =
            !(err <= allowed) || loss[1] != (double)rvalid || memcmp(loss, loss_first, 16);
        printf("rows/block %-4d loss %.12g ref %.12g |err| %.3g (%.1f%% of allowed)  count %g ref "
               "%d  repeat %s  %s\n",
               rpb, loss[0], rloss, err, allowed > 0 ? 100 * err / allowed : 0.0, loss[1], rvalid,
               memcmp(loss, loss_first, 16) ? "differs" : "bit-identical", lbad ? "BAD" : "ok");
        nfail += lbad;

        float *dh = download(d_dh, nh, dt), *dw = download(d_dw, nw, SDP_CUDA_F32);
        for (size_t i = 0; i < nh; i++)
            dref[i] = rdh[i];
        snprintf(name, sizeof(name), "  dh (rows/block %d)", rpb);
        nfail += sdp_check(name, dh, dref, kdh, nh, SDP_SAFETY * SDP_U32, 0.0);
        for (size_t i = 0; i < nw; i++)
            dref[i] = rdw[i];
        snprintf(name, sizeof(name), "  dw (rows/block %d)", rpb);
        nfail += sdp_check(name, dw, dref, kdw, nw, SDP_SAFETY * SDP_U32, 0.0);
        int nz = 0;
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C && tgt[n] < 0; c++)
                nz += dh[(size_t)n * C + c] != 0.0f;
        if (nz) {
            printf("  %d dh elements of ignored rows are not 0  BAD\n", nz);
            nfail++;
        }
        free(dh), free(dw);
        cudaFree(ws);
    }
    cudaFree(d_h), cudaFree(d_w), cudaFree(d_dh), cudaFree(d_dw), cudaFree(d_tgt), cudaFree(d_loss);
    free(h), free(w), free(dw0), free(rdh), free(rdw), free(tgt), free(dref), free(kdh), free(kdw);
    return nfail;
}

/* ---- production shape ---- */

/* fp64 dh row n and its kappa (same model as kappa_run, without dw) */
static void prod_row_ref(double *dh, double *kdh, const float *h, const float *w, int32_t t, int C,
                         int V, double scale)
{
    double *z = sdp_test_alloc((size_t)V * 8), *Eg = sdp_test_alloc((size_t)V * 8);
    double mx = -INFINITY, Z = 0.0, M = 0.0, sum = 0.0;
    const double ub = SDP_UBF16 / SDP_U32;

    for (int v = 0; v < V; v++) {
        double d = 0.0, a = 0.0;
        for (int c = 0; c < C; c++) {
            const double p = (double)h[c] * w[(size_t)v * C + c];
            d += p, a += fabs(p);
        }
        z[v] = d;
        mx = d > mx ? d : mx;
        Z = a > Z ? a : Z;
        M = fabs(d) > M ? fabs(d) : M;
    }
    for (int v = 0; v < V; v++)
        sum += exp(z[v] - mx);
    const double lse = mx + log(sum), rho = 2.0 * (C * Z + ub * M) + 2 * M + 4;
    for (int v = 0; v < V; v++) {
        const double P = exp(z[v] - lse);
        z[v] = scale * (P - (v == t));
        Eg[v] = fabs(scale) * (P * (rho + 3) + (v == t)) + ub * fabs(z[v]);
    }
    for (int c = 0; c < C; c++)
        dh[c] = kdh[c] = 0.0;
    for (int v = 0; v < V; v++) {
        const float *wv = w + (size_t)v * C;
        for (int c = 0; c < C; c++) {
            dh[c] += z[v] * wv[c];
            kdh[c] += (Eg[v] + (V + 1) * fabs(z[v])) * fabs(wv[c]);
        }
    }
    for (int c = 0; c < C; c++)
        kdh[c] += ub * fabs(dh[c]);
    free(z), free(Eg);
}

static int run_production(struct sdp_rng *rng)
{
    enum { N = 16384, C = 2560, V = 151936 };
    const size_t nh = (size_t)N * C, nw = (size_t)V * C;
    /* f32 logits, then bf16 ones in the same workspaces (twice the rows) */
    enum { NB = 6 };
    static const int rpbs[NB] = { 1024, 2048, 4096, 2048, 4096, 8192 };
    static const int zdts[NB] = { SDP_CUDA_F32,  SDP_CUDA_F32,  SDP_CUDA_F32,
                                  SDP_CUDA_BF16, SDP_CUDA_BF16, SDP_CUDA_BF16 };
    float *h = sdp_test_alloc(nh * 4), *w = sdp_test_alloc(nw * 4);
    int32_t *tgt = sdp_test_alloc((size_t)N * 4);
    double losses[NB][2];
    int nv = 0, nfail = 0;

    sdp_fill_uniform(rng, h, nh, -1.0f, 1.0f); /* logits std ~ sqrt(C) 0.58 0.058 ~ 1.7 */
    sdp_fill_uniform(rng, w, nw, -0.1f, 0.1f);
    round_bf16(h, nh), round_bf16(w, nw);
    for (int n = 0; n < N; n++) {
        tgt[n] = sdp_rng_next(rng) % 8 == 0 ? -1 : (int32_t)(sdp_rng_next(rng) % V);
        nv += tgt[n] >= 0;
    }
    const float scale = 1.0f / nv;
    void *d_h = upload(h, nh, SDP_CUDA_BF16), *d_w = upload(w, nw, SDP_CUDA_BF16), *d_dh, *ws;
    float *d_dw;
    int32_t *d_tgt;
    double *d_loss;
    CK(cudaMalloc(&d_dh, nh * 2));
    CK(cudaMalloc((void **)&d_dw, nw * 4));
    CK(cudaMalloc((void **)&d_tgt, (size_t)N * 4));
    CK(cudaMalloc((void **)&d_loss, 16));
    CK(cudaMemcpy(d_tgt, tgt, (size_t)N * 4, cudaMemcpyHostToDevice));
    printf("-- qwen3-4b LM head: N=%d C=%d V=%d bf16, %d valid rows\n", N, C, V, nv);

    for (int b = 0; b < NB; b++) {
        const size_t wsb = sdp_cuda_lmhead_ce_ws(N, C, V, rpbs[b], zdts[b]);
        cudaEvent_t e0, e1;
        float ms;
        const int iters = 3;
        CK(cudaMalloc(&ws, wsb));
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        CK(cudaMemset(d_dw, 0, nw * 4));
        sdp_cuda_lmhead_ce(lt, d_loss, d_dh, d_dw, d_h, d_w, d_tgt, N, C, V, scale, rpbs[b],
                           SDP_CUDA_BF16, zdts[b], ws, wsb, gemm_ws, GEMM_WS_BYTES, stream);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(losses[b], d_loss, 16, cudaMemcpyDeviceToHost, stream));
        CK(cudaEventRecord(e0, stream));
        for (int i = 0; i < iters; i++)
            sdp_cuda_lmhead_ce(lt, d_loss, d_dh, d_dw, d_h, d_w, d_tgt, N, C, V, scale, rpbs[b],
                               SDP_CUDA_BF16, zdts[b], ws, wsb, gemm_ws, GEMM_WS_BYTES, stream);
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ms /= iters;
        printf("time bf16 lmhead_ce %s logits rows/block %-5d ws %7.1f MiB  %8.2f ms  %6.1f "
               "TFLOP/s (6 N C V; LM head fwd reference 687.1)  loss/count %.9f\n",
               zdts[b] == SDP_CUDA_BF16 ? "bf16" : "f32 ", rpbs[b], wsb / 1048576.0, ms,
               6.0 * N * C * V / (ms * 1e-3) / 1e12, losses[b][0] / losses[b][1]);
        cudaEventDestroy(e0), cudaEventDestroy(e1);
        cudaFree(ws);
        if (losses[b][1] != nv) {
            printf("  count %g, expected %d  BAD\n", losses[b][1], nv);
            nfail++;
        }
    }
    /* Different block sizes only change the GEMM algorithms of the logits: the totals agree to a
     * few fp32 roundings per row (each loss term ~ log V ~ 12, logit errors ~ sqrt(C) u32 |z|),
     * and where such an error flips a bf16 logit's rounding (about one in a thousand), the row's
     * term moves by at most u_bf16 |z| (~0.01): a few 1e-7 of the total.  bf16 against f32
     * logits: each row's term moves by at most about u_bf16 (|z_t| + max |z|) (~0.02 here), the
     * roundings of independent rows of either sign, so the totals agree to about sqrt(N) 0.01 /
     * (N 12) ~ 1e-5; allowed 1e-4. */
    for (int b = 1; b < NB; b++) {
        if (b == 3)
            continue;
        const int r = zdts[b] == zdts[0] ? 0 : 3;
        const double rel = fabs(losses[b][0] - losses[r][0]) / fabs(losses[r][0]);
        const int bad = !(rel < 1e-5);
        printf("loss rows/block %d vs %d (%s logits): rel diff %.3g (allowed 1e-5)  %s\n", rpbs[b],
               rpbs[r], zdts[b] == SDP_CUDA_BF16 ? "bf16" : "f32", rel, bad ? "BAD" : "ok");
        nfail += bad;
    }
    {
        const double rel = fabs(losses[3][0] - losses[0][0]) / fabs(losses[0][0]);
        const int bad = !(rel < 1e-4);
        printf("loss bf16 logits (rows/block %d) vs f32 (%d): rel diff %.3g (allowed 1e-4)  %s\n",
               rpbs[3], rpbs[0], rel, bad ? "BAD" : "ok");
        nfail += bad;
    }
    /* dh rows of the last run (bf16 logits, rows/block 8192) against fp64 */
    float *dh = download(d_dh, nh, SDP_CUDA_BF16);
    double *rdh = sdp_test_alloc(C * 8), *kdh = sdp_test_alloc(C * 8);
    const int rows[2] = { 5, N - 3 };
    for (int i = 0; i < 2; i++) {
        int n = rows[i];
        char name[64];
        while (tgt[n] < 0)
            n++;
        prod_row_ref(rdh, kdh, h + (size_t)n * C, w, tgt[n], C, V, scale);
        snprintf(name, sizeof(name), "  production dh row %d", n);
        nfail += sdp_check(name, dh + (size_t)n * C, rdh, kdh, C, SDP_SAFETY * SDP_U32, 0.0);
    }
    free(dh), free(rdh), free(kdh), free(h), free(w), free(tgt);
    cudaFree(d_h), cudaFree(d_w), cudaFree(d_dh), cudaFree(d_dw), cudaFree(d_tgt), cudaFree(d_loss);
    return nfail;
}

int main(int argc, char **argv)
{
    struct sdp_rng rng = { 151936 };
    int ndev = 0, nfail = 0;
    static const int rpb_a[] = { 3, 8, 64 }, rpb_b[] = { 16, 7 }, rpb_c[] = { 4 };

    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        printf("cublasLtCreate failed\nFAIL\n");
        return 1;
    }
    CK(cudaStreamCreate(&stream));
    CK(cudaMalloc(&gemm_ws, GEMM_WS_BYTES));
    /* f32; bf16 with f32 logits; bf16 with bf16 logits */
    for (int k = 0; k < 3; k++) {
        const int dt = k ? SDP_CUDA_BF16 : SDP_CUDA_F32,
                  zdt = k == 2 ? SDP_CUDA_BF16 : SDP_CUDA_F32;
        nfail += run_case(&rng, 24, 64, 37, 1.0f, dt, zdt, rpb_a, 3);   /* V odd: scalar path */
        nfail += run_case(&rng, 32, 64, 1000, 1.0f, dt, zdt, rpb_b, 2); /* V % 8 == 0: vectors */
        nfail += run_case(&rng, 20, 48, 3000, 6.0f, dt, zdt, rpb_b, 1); /* large logits */
        nfail += run_case(&rng, 1, 16, 5, 1.0f, dt, zdt, rpb_c, 1);     /* N = 1 */
    }
    /* the production shape needs ~5 GiB of GPU memory; "quick" skips it */
    if (!(argc > 1 && !strcmp(argv[1], "quick")))
        nfail += run_production(&rng);
    cudaFree(gemm_ws);
    cudaStreamDestroy(stream);
    cublasLtDestroy(lt);
    return sdp_test_finish(nfail);
}
