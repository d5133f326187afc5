/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_rmsnorm_fwd/_bwd against the CPU's sdp_cpu_rmsnorm_*_ref (out, rstd, dx with no
 * residual, with one and aliased to it) and dw against an fp64 sum, for f32 and bf16 storage (the
 * reference sees bf16-rounded inputs): random rows, a zero row, huge and tiny rows, odd D (scalar
 * path), D = 64, 128, 2560 and wide rows up to 16384; R from 1 (one block) to 40000 (many rows a
 * block), odd and not a multiple of the backward's rows a step; the backward must be bitwise
 * run-to-run deterministic.  Prints the bandwidth at R = 16384, D = 2560. */
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

/* residual mode of the backward: none, a separate dres, or dx aliased to dres */
enum { RES_NONE, RES_SEP, RES_ALIAS };

static int run_case(int R, int D, int dt, int res, uint64_t seed)
{
    struct sdp_rng rng = { seed };
    const size_t n = (size_t)R * D;
    const float eps = 1e-6f;
    float *x = sdp_test_alloc(n * 4), *w = sdp_test_alloc((size_t)D * 4);
    float *g = sdp_test_alloc(n * 4), *dres = sdp_test_alloc(n * 4);
    float *out = sdp_test_alloc(n * 4), *outc = sdp_test_alloc(n * 4);
    float *rs = sdp_test_alloc((size_t)R * 4), *rsc = sdp_test_alloc((size_t)R * 4);
    float *dx = sdp_test_alloc(n * 4), *dxc = sdp_test_alloc(n * 4), *dx2 = sdp_test_alloc(n * 4);
    float *dw0 = sdp_test_alloc((size_t)D * 4), *dwg = sdp_test_alloc((size_t)D * 4);
    float *dwg2 = sdp_test_alloc((size_t)D * 4), *dwc = sdp_test_alloc((size_t)D * 4);
    double *kap = sdp_test_alloc(n * sizeof(double)), *dwr = sdp_test_alloc((size_t)D * 8);
    double *dwm = sdp_test_alloc((size_t)D * 8);
    char name[96];
    int nfail = 0;

    sdp_fill_normal(&rng, x, n, 1.0f);
    sdp_fill_uniform(&rng, w, (size_t)D, 0.5f, 1.5f);
    sdp_fill_normal(&rng, g, n, 1.0f);
    sdp_fill_normal(&rng, dres, n, 1.0f);
    sdp_fill_normal(&rng, dw0, (size_t)D, 1.0f);
    if (R >= 4) { /* adversarial rows: zeros, huge, tiny */
        memset(x, 0, (size_t)D * 4);
        for (int i = 0; i < D; i++) {
            x[(size_t)D + i] *= 1e30f;
            x[(size_t)2 * D + i] *= 1e-30f;
        }
    }
    round_in(x, n, dt);
    round_in(w, (size_t)D, dt);
    round_in(g, n, dt);
    round_in(dres, n, dt);

    /* forward */
    void *d_x = upload(x, n, dt), *d_w = upload(w, (size_t)D, dt), *d_out;
    float *d_rs, *d_dw;
    CK(cudaMalloc(&d_out, n * esize(dt) + 16));
    CK(cudaMalloc((void **)&d_rs, (size_t)R * 4));
    sdp_cuda_rmsnorm_fwd(d_out, d_rs, d_x, d_w, R, D, eps, dt, 0);
    CK(cudaGetLastError());
    download(out, d_out, n, dt);
    CK(cudaMemcpy(rs, d_rs, (size_t)R * 4, cudaMemcpyDeviceToHost));
    sdp_cpu_rmsnorm_fwd_ref(outc, rsc, x, w, R, D, eps);
    double *ref = to_double(outc, n);
    double rmax = 0;
    for (size_t i = 0; i < n; i++)
        rmax = fmax(rmax, fabs(ref[i]));
    snprintf(name, sizeof(name), "rmsnorm out %s R=%d D=%d", dt_name(dt), R, D);
    nfail += sdp_check(name, out, ref, NULL, n, dt == SDP_CUDA_BF16 ? SDP_RTOL_BF16 : SDP_RTOL_ELEM,
                       SDP_RTOL_ELEM * rmax);
    free(ref);
    ref = to_double(rsc, (size_t)R);
    snprintf(name, sizeof(name), "rmsnorm rstd %s R=%d D=%d", dt_name(dt), R, D);
    nfail += sdp_check_elem(name, rs, ref, (size_t)R);
    free(ref);

    /* backward, twice (determinism), both from the CPU's rstd */
    const size_t ws_bytes = sdp_cuda_rmsnorm_bwd_ws(R, D);
    void *d_g = upload(g, n, dt), *d_res = upload(dres, n, dt), *d_dx, *ws;
    CK(cudaMalloc(&d_dx, n * esize(dt) + 16));
    CK(cudaMalloc(&ws, ws_bytes + 16));
    CK(cudaMalloc((void **)&d_dw, (size_t)D * 4));
    CK(cudaMemcpy(d_rs, rsc, (size_t)R * 4, cudaMemcpyHostToDevice));
    for (int rep = 0; rep < 2; rep++) {
        void *d_r = res == RES_NONE ? NULL : d_res, *d_o = d_dx;
        if (res == RES_ALIAS) {
            void *tmp = upload(dres, n, dt);
            CK(cudaMemcpy(d_res, tmp, n * esize(dt), cudaMemcpyDeviceToDevice));
            CK(cudaFree(tmp));
            d_o = d_res;
        }
        CK(cudaMemcpy(d_dw, dw0, (size_t)D * 4, cudaMemcpyHostToDevice));
        sdp_cuda_rmsnorm_bwd(d_o, d_dw, d_r, d_g, d_x, d_w, d_rs, R, D, dt, ws, 0);
        CK(cudaGetLastError());
        download(rep ? dx2 : dx, d_o, n, dt);
        CK(cudaMemcpy(rep ? dwg2 : dwg, d_dw, (size_t)D * 4, cudaMemcpyDeviceToHost));
    }
    memcpy(dwc, dw0, (size_t)D * 4);
    sdp_cpu_rmsnorm_bwd_ref(dxc, dwc, res == RES_NONE ? NULL : dres, g, x, w, rsc, R, D);

    /* kappa: |dres| + |r w g| + |c x| (the two terms that cancel), c = r^3/D sum g w x */
    for (int i = 0; i < D; i++) {
        dwr[i] = dw0[i];
        dwm[i] = fabs(dw0[i]);
    }
    for (int r = 0; r < R; r++) {
        double dot = 0.0;
        for (int i = 0; i < D; i++)
            dot += (double)g[(size_t)r * D + i] * w[i] * x[(size_t)r * D + i];
        const double rr = rsc[r], c = rr * rr * rr * dot / D;
        for (int i = 0; i < D; i++) {
            const size_t k = (size_t)r * D + i;
            kap[k] = fabs(rr * w[i] * g[k]) + fabs(c * x[k]) + (res ? fabs(dres[k]) : 0.0);
            const double t = (double)g[k] * x[k] * rr;
            dwr[i] += t;
            dwm[i] += fabs(t);
        }
    }
    static const char *rname[] = { "", " +dres", " alias" };
    ref = to_double(dxc, n);
    snprintf(name, sizeof(name), "rmsnorm dx %s R=%d D=%d%s", dt_name(dt), R, D, rname[res]);
    nfail +=
        sdp_check(name, dx, ref, kap, n, dt == SDP_CUDA_BF16 ? SDP_RTOL_BF16 : SDP_RTOL_ELEM, 0.0);
    free(ref);
    /* dw: fp32 products (2 roundings) summed in double, one final rounding: <= 3 u32 sum|t| */
    snprintf(name, sizeof(name), "rmsnorm dw %s R=%d D=%d%s", dt_name(dt), R, D, rname[res]);
    nfail += sdp_check(name, dwg, dwr, dwm, (size_t)D, SDP_SAFETY * SDP_U32, 0.0);
    snprintf(name, sizeof(name), "rmsnorm dx rerun %s", dt_name(dt));
    nfail += sdp_check_bits(name, dx2, dx, n);
    snprintf(name, sizeof(name), "rmsnorm dw rerun %s", dt_name(dt));
    nfail += sdp_check_bits(name, dwg2, dwg, (size_t)D);

    CK(cudaFree(d_x));
    CK(cudaFree(d_w));
    CK(cudaFree(d_out));
    CK(cudaFree(d_rs));
    CK(cudaFree(d_g));
    CK(cudaFree(d_res));
    CK(cudaFree(d_dx));
    CK(cudaFree(ws));
    CK(cudaFree(d_dw));
    free(x), free(w), free(g), free(dres), free(out), free(outc), free(rs), free(rsc);
    free(dx), free(dxc), free(dx2), free(dw0), free(dwg), free(dwg2), free(dwc), free(kap);
    free(dwr), free(dwm);
    return nfail;
}

static void bench(int dt)
{
    const int R = 16384, D = 2560, reps = 10;
    const size_t n = (size_t)R * D, es = esize(dt);
    void *d_x, *d_w, *d_out, *d_g, *ws;
    float *d_rs, *d_dw;
    cudaEvent_t e0, e1;
    float ms_f, ms_b;

    CK(cudaMalloc(&d_x, n * es));
    CK(cudaMalloc(&d_out, n * es));
    CK(cudaMalloc(&d_g, n * es));
    CK(cudaMalloc(&d_w, (size_t)D * es));
    CK(cudaMalloc((void **)&d_rs, (size_t)R * 4));
    CK(cudaMalloc((void **)&d_dw, (size_t)D * 4));
    CK(cudaMalloc(&ws, sdp_cuda_rmsnorm_bwd_ws(R, D)));
    CK(cudaMemset(d_x, 0x3c, n * es));
    CK(cudaMemset(d_g, 0x3c, n * es));
    CK(cudaMemset(d_out, 0x3c, n * es));
    CK(cudaMemset(d_w, 0x3c, (size_t)D * es));
    CK(cudaMemset(d_dw, 0, (size_t)D * 4));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    sdp_cuda_rmsnorm_fwd(d_out, d_rs, d_x, d_w, R, D, 1e-6f, dt, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_rmsnorm_fwd(d_out, d_rs, d_x, d_w, R, D, 1e-6f, dt, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_f, e0, e1));
    /* backward with the residual aliased: reads dout, x, dres, writes dx */
    sdp_cuda_rmsnorm_bwd(d_out, d_dw, d_out, d_g, d_x, d_w, d_rs, R, D, dt, ws, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_rmsnorm_bwd(d_out, d_dw, d_out, d_g, d_x, d_w, d_rs, R, D, dt, ws, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    CK(cudaEventElapsedTime(&ms_b, e0, e1));
    ms_f /= reps;
    ms_b /= reps;
    const double bf = 2.0 * n * es + R * 4.0, bb = 4.0 * n * es + R * 4.0;
    printf("perf rmsnorm fwd %s R=%d D=%d: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n", dt_name(dt),
           R, D, ms_f * 1e3, bf / (ms_f * 1e-3) / 1e9, bf / (ms_f * 1e-3) / 4.8e10);
    printf("perf rmsnorm bwd %s R=%d D=%d (+dres): %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n",
           dt_name(dt), R, D, ms_b * 1e3, bb / (ms_b * 1e-3) / 1e9, bb / (ms_b * 1e-3) / 4.8e10);
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
        nfail += run_case(16, 64, dt, RES_NONE, 1);
        nfail += run_case(16, 64, dt, RES_SEP, 2);
        nfail += run_case(16, 64, dt, RES_ALIAS, 3);
        nfail += run_case(37, 63, dt, RES_SEP, 4);
        nfail += run_case(1, 1, dt, RES_NONE, 5);
        nfail += run_case(2048, 128, dt, RES_NONE, 6);
        nfail += run_case(2048, 2560, dt, RES_ALIAS, 7);
        nfail += run_case(1500, 2560, dt, RES_SEP, 8);
        nfail += run_case(3, 2560, dt, RES_ALIAS, 9);
        nfail += run_case(4099, 2560, dt, RES_SEP, 10);
        nfail += run_case(40000, 64, dt, RES_ALIAS, 11);
        nfail += run_case(7, 8192, dt, RES_ALIAS, 12);
        nfail += run_case(5, 16384, dt, RES_NONE, 13);
        nfail += run_case(3, 4999, dt, RES_ALIAS, 14);
    }
    bench(SDP_CUDA_BF16);
    bench(SDP_CUDA_F32);
    return sdp_test_finish(nfail);
}
