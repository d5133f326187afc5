/* SPDX-License-Identifier: MIT */
/* Checks the kernels of the fp32 residual stream (train.residual_dtype fp32) against fp64
 * oracles computed here from the same (bf16-rounded where stored bf16) inputs:
 * sdp_cuda_rmsnorm_fwd_res (x f32 -> out bf16), sdp_cuda_rmsnorm_bwd_res (dout bf16, x f32, dx
 * added into an f32 dres, separate and aliased; dw f32), sdp_cuda_matmul_fwd_res (x, w bf16,
 * resid and out f32) and sdp_cuda_embedding_fwd_f32 (bf16 rows widened: bit-exact).  Rows of
 * random, zero, huge and tiny values; odd and wide D; the backward must be bitwise run-to-run
 * deterministic.  Exit 77 without a GPU. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_cuda.h"

/* ---- RMSNorm: fp64 oracle ----
 * out_i = x_i r w_i, r = (mean(x^2) + eps)^(-1/2); dx_j = dres_j + r w_j g_j - (r^3/D) x_j S with
 * S = sum_i g_i w_i x_i; dw_i += sum_rows g_i x_i r.  The kernels sum in double and round each
 * elementwise product in fp32, so the forward before its bf16 store is within a few u32 of the
 * oracle (the bf16 store then adds <= u_bf16: SDP_RTOL_BF16 covers both, as in
 * test_cuda_rmsnorm.c); dx is f32: first-order error <= SDP_SAFETY u32 times kappa = |dres| +
 * |r w g| + |c x| (the terms that cancel); dw: fp32 products (2 roundings) summed in double and
 * rounded once, <= 3 u32 sum |t| (SDP_SAFETY u32 leaves margin). */
static int rmsnorm_case(int R, int D, int alias, uint64_t seed)
{
    struct sdp_rng rng = { seed };
    const size_t n = (size_t)R * D;
    const float eps = 1e-6f;
    float *x = sdp_test_alloc(n * 4), *w = sdp_test_alloc((size_t)D * 4);
    float *g = sdp_test_alloc(n * 4), *dres = sdp_test_alloc(n * 4);
    float *out = sdp_test_alloc(n * 4), *rs = sdp_test_alloc((size_t)R * 4);
    float *dx = sdp_test_alloc(n * 4), *dx2 = sdp_test_alloc(n * 4);
    float *dw0 = sdp_test_alloc((size_t)D * 4), *dwg = sdp_test_alloc((size_t)D * 4);
    float *dwg2 = sdp_test_alloc((size_t)D * 4);
    double *oref = sdp_test_alloc(n * 8), *rref = sdp_test_alloc((size_t)R * 8);
    double *dxr = sdp_test_alloc(n * 8), *kap = sdp_test_alloc(n * 8);
    double *dwr = sdp_test_alloc((size_t)D * 8), *dwm = sdp_test_alloc((size_t)D * 8);
    const int bf = SDP_CUDA_BF16, f32 = SDP_CUDA_F32;
    char name[96];
    int nfail = 0;

    sdp_fill_normal(&rng, x, n, 1.0f);
    sdp_fill_uniform(&rng, w, (size_t)D, 0.5f, 1.5f);
    sdp_fill_normal(&rng, g, n, 1.0f);
    sdp_fill_normal(&rng, dres, n, 1.0f);
    sdp_fill_normal(&rng, dw0, (size_t)D, 1.0f);
    if (R >= 4) /* adversarial rows: zeros, huge, tiny (fp32 x holds what bf16 would not) */
        for (int i = 0; i < D; i++) {
            x[i] = 0.0f;
            x[(size_t)D + i] *= 1e30f;
            x[(size_t)2 * D + i] *= 1e-30f;
        }
    round_in(w, (size_t)D, bf);
    round_in(g, n, bf);

    void *d_x = upload(x, n, f32), *d_w = upload(w, (size_t)D, bf), *d_out;
    float *d_rs, *d_dw;
    CK(cudaMalloc(&d_out, n * 2 + 16));
    CK(cudaMalloc((void **)&d_rs, (size_t)R * 4));
    sdp_cuda_rmsnorm_fwd_res(d_out, d_rs, d_x, d_w, R, D, eps, bf, 0);
    CK(cudaGetLastError());
    download(out, d_out, n, bf);
    CK(cudaMemcpy(rs, d_rs, (size_t)R * 4, cudaMemcpyDeviceToHost));
    double omax = 0.0;
    for (int r = 0; r < R; r++) {
        double ss = 0.0;
        for (int i = 0; i < D; i++)
            ss += (double)x[(size_t)r * D + i] * x[(size_t)r * D + i];
        rref[r] = 1.0 / sqrt(ss / D + (double)eps);
        for (int i = 0; i < D; i++) {
            oref[(size_t)r * D + i] = (double)x[(size_t)r * D + i] * rref[r] * w[i];
            omax = fmax(omax, fabs(oref[(size_t)r * D + i]));
        }
    }
    snprintf(name, sizeof(name), "rmsnorm_res out R=%d D=%d", R, D);
    nfail += sdp_check(name, out, oref, NULL, n, SDP_RTOL_BF16, SDP_RTOL_ELEM * omax);
    snprintf(name, sizeof(name), "rmsnorm_res rstd R=%d D=%d", R, D);
    nfail += sdp_check_elem(name, rs, rref, (size_t)R);

    /* backward from the kernel's own rstd (the oracle too), twice (determinism) */
    void *d_g = upload(g, n, bf), *d_res = upload(dres, n, f32), *d_dx, *ws;
    CK(cudaMalloc(&d_dx, n * 4 + 16));
    CK(cudaMalloc(&ws, sdp_cuda_rmsnorm_bwd_res_ws(R, D) + 16));
    CK(cudaMalloc((void **)&d_dw, (size_t)D * 4));
    for (int rep = 0; rep < 2; rep++) {
        float *d_o = d_dx;
        if (alias) {
            CK(cudaMemcpy(d_dx, dres, n * 4, cudaMemcpyHostToDevice));
            d_o = d_dx;
        }
        CK(cudaMemcpy(d_dw, dw0, (size_t)D * 4, cudaMemcpyHostToDevice));
        sdp_cuda_rmsnorm_bwd_res(d_o, d_dw, alias ? d_o : d_res, d_g, d_x, d_w, d_rs, R, D, bf, ws,
                                 0);
        CK(cudaGetLastError());
        download(rep ? dx2 : dx, d_o, n, f32);
        CK(cudaMemcpy(rep ? dwg2 : dwg, d_dw, (size_t)D * 4, cudaMemcpyDeviceToHost));
    }
    for (int i = 0; i < D; i++) {
        dwr[i] = dw0[i];
        dwm[i] = fabs(dw0[i]);
    }
    for (int r = 0; r < R; r++) {
        double dot = 0.0;
        const double rr = rs[r];
        for (int i = 0; i < D; i++)
            dot += (double)g[(size_t)r * D + i] * w[i] * x[(size_t)r * D + i];
        const double c = rr * rr * rr * dot / D;
        for (int i = 0; i < D; i++) {
            const size_t k = (size_t)r * D + i;
            dxr[k] = dres[k] + rr * w[i] * g[k] - c * x[k];
            kap[k] = fabs(rr * w[i] * g[k]) + fabs(c * x[k]) + fabs(dres[k]);
            const double t = (double)g[k] * x[k] * rr;
            dwr[i] += t;
            dwm[i] += fabs(t);
        }
    }
    snprintf(name, sizeof(name), "rmsnorm_res dx R=%d D=%d%s", R, D, alias ? " alias" : "");
    nfail += sdp_check(name, dx, dxr, kap, n, SDP_SAFETY * SDP_U32, 0.0);
    snprintf(name, sizeof(name), "rmsnorm_res dw R=%d D=%d", R, D);
    nfail += sdp_check(name, dwg, dwr, dwm, (size_t)D, SDP_SAFETY * SDP_U32, 0.0);
    nfail += sdp_check_bits("rmsnorm_res dx rerun", dx2, dx, n);
    nfail += sdp_check_bits("rmsnorm_res dw rerun", dwg2, dwg, (size_t)D);

    CK(cudaFree(d_x));
    CK(cudaFree(d_w));
    CK(cudaFree(d_out));
    CK(cudaFree(d_rs));
    CK(cudaFree(d_g));
    CK(cudaFree(d_res));
    CK(cudaFree(d_dx));
    CK(cudaFree(ws));
    CK(cudaFree(d_dw));
    void *bufs[] = {
        x, w, g, dres, out, rs, dx, dx2, dw0, dwg, dwg2, oref, rref, dxr, kap, dwr, dwm
    };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]);
    return nfail;
}

/* ---- matmul with an fp32 residual: out (M, N) f32 = resid f32 + x (M, K) bf16 . w (N, K)^T
 * bf16, fp32 accumulation.  The fp64 oracle takes the same bf16 inputs; the sum of K products
 * plus the residual is K + 1 terms: the GEMM rule of sdp_test.h with norm ||x|| ||w|| + ||resid||
 * (the residual counted as one more term, as sdp_check_gemm says). */
static int matmul_case(cublasLtHandle_t lt, int M, int K, int N, uint64_t seed)
{
    struct sdp_rng rng = { seed };
    float *x = sdp_test_alloc((size_t)M * K * 4), *w = sdp_test_alloc((size_t)N * K * 4);
    float *res = sdp_test_alloc((size_t)M * N * 4), *out = sdp_test_alloc((size_t)M * N * 4);
    double *ref = sdp_test_alloc((size_t)M * N * 8);
    const size_t ws_bytes = 32u << 20;
    void *ws, *d_out;
    char name[96];

    sdp_fill_normal(&rng, x, (size_t)M * K, 1.0f);
    sdp_fill_normal(&rng, w, (size_t)N * K, 0.05f);
    sdp_fill_normal(&rng, res, (size_t)M * N, 4.0f);
    round_in(x, (size_t)M * K, SDP_CUDA_BF16);
    round_in(w, (size_t)N * K, SDP_CUDA_BF16);
    void *d_x = upload(x, (size_t)M * K, SDP_CUDA_BF16),
         *d_w = upload(w, (size_t)N * K, SDP_CUDA_BF16);
    void *d_res = upload(res, (size_t)M * N, SDP_CUDA_F32);
    CK(cudaMalloc(&ws, ws_bytes));
    CK(cudaMalloc(&d_out, (size_t)M * N * 4 + 16));
    sdp_cuda_matmul_fwd_res(lt, d_out, d_res, d_x, d_w, M, K, N, SDP_CUDA_BF16, SDP_CUDA_F32, ws,
                            ws_bytes, 0);
    CK(cudaGetLastError());
    download(out, d_out, (size_t)M * N, SDP_CUDA_F32);
    for (int m = 0; m < M; m++)
        for (int j = 0; j < N; j++) {
            double s = res[(size_t)m * N + j];
            for (int k = 0; k < K; k++)
                s += (double)x[(size_t)m * K + k] * w[(size_t)j * K + k];
            ref[(size_t)m * N + j] = s;
        }
    const double norm = sdp_norm_f(x, (size_t)M * K) * sdp_norm_f(w, (size_t)N * K) +
                        sdp_norm_f(res, (size_t)M * N);
    snprintf(name, sizeof(name), "matmul_fwd_res M=%d K=%d N=%d", M, K, N);
    int nfail = sdp_check_gemm(name, out, ref, (size_t)M * N, K + 1, norm);
    CK(cudaFree(d_x));
    CK(cudaFree(d_w));
    CK(cudaFree(d_res));
    CK(cudaFree(ws));
    CK(cudaFree(d_out));
    free(x);
    free(w);
    free(res);
    free(out);
    free(ref);
    return nfail;
}

/* ---- embedding into fp32: bf16 -> f32 is exact, so the rows must match bit for bit ---- */
static int embedding_case(int N, int C, int V, uint64_t seed)
{
    struct sdp_rng rng = { seed };
    float *wte = sdp_test_alloc((size_t)V * C * 4), *out = sdp_test_alloc((size_t)N * C * 4);
    float *ref = sdp_test_alloc((size_t)N * C * 4);
    int32_t *ids = sdp_test_alloc((size_t)N * 4);
    int32_t *d_ids;
    float *d_out;
    sdp_fill_normal(&rng, wte, (size_t)V * C, 1.0f);
    round_in(wte, (size_t)V * C, SDP_CUDA_BF16);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)(sdp_rng_next(&rng) % (uint64_t)V);
    for (int i = 0; i < N; i++)
        memcpy(ref + (size_t)i * C, wte + (size_t)ids[i] * C, (size_t)C * 4);
    void *d_wte = upload(wte, (size_t)V * C, SDP_CUDA_BF16);
    CK(cudaMalloc((void **)&d_ids, (size_t)N * 4));
    CK(cudaMalloc((void **)&d_out, (size_t)N * C * 4));
    CK(cudaMemcpy(d_ids, ids, (size_t)N * 4, cudaMemcpyHostToDevice));
    sdp_cuda_embedding_fwd_f32(d_out, d_ids, d_wte, N, C, 0);
    CK(cudaGetLastError());
    download(out, d_out, (size_t)N * C, SDP_CUDA_F32);
    int nfail = sdp_check_bits("embedding_fwd_f32", out, ref, (size_t)N * C);
    CK(cudaFree(d_wte));
    CK(cudaFree(d_ids));
    CK(cudaFree(d_out));
    free(wte);
    free(out);
    free(ref);
    free(ids);
    return nfail;
}

int main(void)
{
    int ndev = 0, nfail = 0;
    cublasLtHandle_t lt;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    nfail += rmsnorm_case(16, 64, 0, 1);
    nfail += rmsnorm_case(16, 64, 1, 2);
    nfail += rmsnorm_case(37, 63, 0, 3);
    nfail += rmsnorm_case(1, 1, 1, 4);
    nfail += rmsnorm_case(2048, 1024, 1, 5);
    nfail += rmsnorm_case(4099, 2560, 0, 6);
    nfail += rmsnorm_case(7, 16384, 1, 7);
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        printf("cublasLtCreate failed\nFAIL\n");
        return 1;
    }
    nfail += matmul_case(lt, 64, 128, 96, 8);
    nfail += matmul_case(lt, 37, 65, 33, 9);
    nfail += matmul_case(lt, 512, 1024, 1024, 10);
    cublasLtDestroy(lt);
    nfail += embedding_case(300, 1024, 500, 12);
    nfail += embedding_case(17, 63, 20, 13);
    return sdp_test_finish(nfail);
}
