/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_swiglu_fwd/_bwd against the CPU's sdp_cpu_swiglu_*_ref for f32 and bf16 storage
 * (the reference sees bf16-rounded inputs), on random gates, saturating gates (|g| up to 100, where
 * sigmoid is 0 or 1), zeros, an odd I (scalar path), the tiny I = 64 and qwen3-4b's I = 9728; the
 * tolerance scales with the terms of silu'(g) = sig (1 + g (1 - sig)).  Prints the bandwidth at
 * N = 16384, I = 9728. */
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

static int run_case(int N, int I, int dt, float gscale, uint64_t seed)
{
    struct sdp_rng rng = { seed };
    const size_t ng = (size_t)N * 2 * I, no = (size_t)N * I;
    float *gu = sdp_test_alloc(ng * 4), *d = sdp_test_alloc(no * 4);
    float *out = sdp_test_alloc(no * 4), *outc = sdp_test_alloc(no * 4);
    float *dgu = sdp_test_alloc(ng * 4), *dguc = sdp_test_alloc(ng * 4);
    double *kf = sdp_test_alloc(no * 8), *kb = sdp_test_alloc(ng * 8);
    char name[96];
    int nfail = 0;

    sdp_fill_normal(&rng, gu, ng, 1.0f);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++)
            gu[(size_t)n * 2 * I + i] *= gscale;
    if (N > 1)
        memset(gu, 0, (size_t)I * 4); /* a zero gate row */
    sdp_fill_normal(&rng, d, no, 1.0f);
    round_in(gu, ng, dt);
    round_in(d, no, dt);

    void *d_gu = upload(gu, ng, dt), *d_d = upload(d, no, dt), *d_out, *d_dgu;
    CK(cudaMalloc(&d_out, no * esize(dt) + 16));
    CK(cudaMalloc(&d_dgu, ng * esize(dt) + 16));
    sdp_cuda_swiglu_fwd(d_out, d_gu, N, I, dt, 0);
    CK(cudaGetLastError());
    sdp_cuda_swiglu_bwd(d_dgu, d_d, d_gu, N, I, dt, 0);
    CK(cudaGetLastError());
    download(out, d_out, no, dt);
    download(dgu, d_dgu, ng, dt);
    sdp_cpu_swiglu_fwd_ref(outc, gu, N, I);
    sdp_cpu_swiglu_bwd_ref(dguc, d, gu, N, I);

    /* kappa: |g sig u| forward; |d u| sig (1 + |g| (1 + sig)) for dgate (the cancellation in
     * 1 - sig is scaled by |g|), |d g sig| for dup */
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            const size_t k = (size_t)n * I + i, kg = (size_t)n * 2 * I + i;
            const double g = gu[kg], u = gu[kg + I], sig = 1.0 / (1.0 + exp(-g));
            kf[k] = fabs(g * sig * u);
            kb[kg] = fabs(d[k] * u) * sig * (1.0 + fabs(g) * (1.0 + sig));
            kb[kg + I] = fabs(d[k] * g * sig);
        }
    const double rtol = dt == SDP_CUDA_BF16 ? SDP_RTOL_BF16 : SDP_RTOL_ELEM;
    double *ref = to_double(outc, no);
    snprintf(name, sizeof(name), "swiglu out %s N=%d I=%d g*%g", dt_name(dt), N, I, gscale);
    nfail += sdp_check(name, out, ref, kf, no, rtol, 0.0);
    free(ref);
    ref = to_double(dguc, ng);
    snprintf(name, sizeof(name), "swiglu dgu %s N=%d I=%d g*%g", dt_name(dt), N, I, gscale);
    nfail += sdp_check(name, dgu, ref, kb, ng, rtol, 0.0);
    free(ref);

    CK(cudaFree(d_gu));
    CK(cudaFree(d_d));
    CK(cudaFree(d_out));
    CK(cudaFree(d_dgu));
    free(gu), free(d), free(out), free(outc), free(dgu), free(dguc), free(kf), free(kb);
    return nfail;
}

static void bench(int dt)
{
    const int N = 16384, I = 9728, reps = 10;
    const size_t no = (size_t)N * I, es = esize(dt);
    void *d_gu, *d_out, *d_dgu;
    cudaEvent_t e0, e1;
    float ms_f, ms_b;

    CK(cudaMalloc(&d_gu, 2 * no * es));
    CK(cudaMalloc(&d_dgu, 2 * no * es));
    CK(cudaMalloc(&d_out, no * es));
    CK(cudaMemset(d_gu, 0x3c, 2 * no * es));
    CK(cudaMemset(d_out, 0x3c, no * es));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    sdp_cuda_swiglu_fwd(d_out, d_gu, N, I, dt, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_swiglu_fwd(d_out, d_gu, N, I, dt, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_f, e0, e1));
    sdp_cuda_swiglu_bwd(d_dgu, d_out, d_gu, N, I, dt, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_swiglu_bwd(d_dgu, d_out, d_gu, N, I, dt, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    CK(cudaEventElapsedTime(&ms_b, e0, e1));
    ms_f /= reps;
    ms_b /= reps;
    const double bf = 3.0 * no * es, bb = 5.0 * no * es;
    printf("perf swiglu fwd %s N=%d I=%d: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n", dt_name(dt),
           N, I, ms_f * 1e3, bf / (ms_f * 1e-3) / 1e9, bf / (ms_f * 1e-3) / 4.8e10);
    printf("perf swiglu bwd %s N=%d I=%d: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n", dt_name(dt),
           N, I, ms_b * 1e3, bb / (ms_b * 1e-3) / 1e9, bb / (ms_b * 1e-3) / 4.8e10);
    CK(cudaFree(d_gu));
    CK(cudaFree(d_dgu));
    CK(cudaFree(d_out));
}

int main(void)
{
    int ndev = 0, nfail = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    for (int dt = SDP_CUDA_F32; dt <= SDP_CUDA_BF16; dt++) {
        nfail += run_case(16, 64, dt, 1.0f, 1);
        nfail += run_case(16, 64, dt, 30.0f, 2);
        nfail += run_case(13, 37, dt, 3.0f, 3);
        nfail += run_case(256, 9728, dt, 4.0f, 4);
    }
    bench(SDP_CUDA_BF16);
    bench(SDP_CUDA_F32);
    return sdp_test_finish(nfail);
}
