/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_embedding_fwd and sdp_cuda_embedding_bwd (each id's rows added in position
 * order) bit for bit against the CPU's
 * sdp_cpu_embedding_*_ref, for f32 and bf16 storage (the reference sees bf16-rounded inputs), on
 * random ids, all-equal ids, an odd row length (scalar path) and the qwen3-4b width C = 2560.
 * Prints the bandwidth at N = 16384, C = 2560. */
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

static int run_case(int V, int N, int C, int dt, int same_ids, uint64_t seed)
{
    struct sdp_rng rng = { seed };
    const size_t nw = (size_t)V * C, no = (size_t)N * C;
    float *wte = sdp_test_alloc(nw * 4), *out = sdp_test_alloc(no * 4);
    float *ref = sdp_test_alloc(no * 4);
    float *dout = sdp_test_alloc(no * 4), *dw0 = sdp_test_alloc(nw * 4);
    float *dwg = sdp_test_alloc(nw * 4), *dwc = sdp_test_alloc(nw * 4);
    int32_t *ids = sdp_test_alloc((size_t)N * 4);
    int *count = sdp_test_alloc((size_t)V * sizeof(int));
    char name[96];
    int nfail = 0, kmax = 0;

    sdp_fill_normal(&rng, wte, nw, 1.0f);
    sdp_fill_normal(&rng, dout, no, 1.0f);
    sdp_fill_normal(&rng, dw0, nw, 0.5f);
    round_in(wte, nw, dt);
    round_in(dout, no, dt);
    for (int n = 0; n < N; n++) {
        ids[n] = same_ids ? V - 1 : (int32_t)(sdp_rng_next(&rng) % (uint64_t)V);
        if (++count[ids[n]] > kmax)
            kmax = count[ids[n]];
    }

    void *d_wte = upload(wte, nw, dt), *d_out, *d_dout = upload(dout, no, dt);
    float *d_dw;
    int32_t *d_ids;
    CK(cudaMalloc(&d_out, no * esize(dt) + 16));
    CK(cudaMalloc((void **)&d_ids, (size_t)N * 4));
    CK(cudaMalloc((void **)&d_dw, nw * 4));
    CK(cudaMemcpy(d_ids, ids, (size_t)N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_dw, dw0, nw * 4, cudaMemcpyHostToDevice));

    sdp_cuda_embedding_fwd(d_out, d_ids, d_wte, N, C, dt, 0);
    CK(cudaGetLastError());
    sdp_cuda_embedding_bwd(d_dw, d_dout, d_ids, N, C, dt, 0);
    CK(cudaGetLastError());
    download(out, d_out, no, dt);
    CK(cudaMemcpy(dwg, d_dw, nw * 4, cudaMemcpyDeviceToHost));

    sdp_cpu_embedding_fwd_ref(ref, ids, wte, N, C);
    snprintf(name, sizeof(name), "emb fwd %s V=%d N=%d C=%d%s", dt_name(dt), V, N, C,
             same_ids ? " same" : "");
    nfail += sdp_check_bits(name, out, ref, no);

    memcpy(dwc, dw0, nw * 4);
    sdp_cpu_embedding_bwd_ref(dwc, dout, ids, N, C);
    /* the GPU adds each id's rows in position order (a stable sort by id), as the reference's loop
     * does: the same fp32 additions in the same order, so the same bits (an id repeated up to kmax
     * times checks the order) */
    snprintf(name, sizeof(name), "emb bwd %s V=%d N=%d C=%d%s (ids repeated up to %d times)",
             dt_name(dt), V, N, C, same_ids ? " same" : "", kmax);
    nfail += sdp_check_bits(name, dwg, dwc, nw);

    CK(cudaFree(d_wte));
    CK(cudaFree(d_out));
    CK(cudaFree(d_dout));
    CK(cudaFree(d_ids));
    CK(cudaFree(d_dw));
    free(wte), free(out), free(ref), free(dout), free(dw0), free(dwg), free(dwc);
    free(ids), free(count);
    return nfail;
}

static void bench(int dt)
{
    const int N = 16384, C = 2560, V = 151936, reps = 10;
    void *d_wte, *d_out;
    float *d_dw;
    int32_t *d_ids, *ids = sdp_test_alloc((size_t)N * 4);
    struct sdp_rng rng = { 7 };
    cudaEvent_t e0, e1;
    float ms_f, ms_b;

    for (int n = 0; n < N; n++)
        ids[n] = (int32_t)(sdp_rng_next(&rng) % (uint64_t)V);
    CK(cudaMalloc(&d_wte, (size_t)V * C * esize(dt)));
    CK(cudaMalloc(&d_out, (size_t)N * C * esize(dt)));
    CK(cudaMalloc((void **)&d_dw, (size_t)V * C * 4));
    CK(cudaMalloc((void **)&d_ids, (size_t)N * 4));
    CK(cudaMemset(d_wte, 0, (size_t)V * C * esize(dt)));
    CK(cudaMemset(d_out, 0, (size_t)N * C * esize(dt)));
    CK(cudaMemset(d_dw, 0, (size_t)V * C * 4));
    CK(cudaMemcpy(d_ids, ids, (size_t)N * 4, cudaMemcpyHostToDevice));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    sdp_cuda_embedding_fwd(d_out, d_ids, d_wte, N, C, dt, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_embedding_fwd(d_out, d_ids, d_wte, N, C, dt, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_f, e0, e1));
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_embedding_bwd(d_dw, d_out, d_ids, N, C, dt, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    CK(cudaEventElapsedTime(&ms_b, e0, e1));
    ms_f /= reps;
    ms_b /= reps;
    const double bf = 2.0 * N * C * esize(dt), bb = (double)N * C * (esize(dt) + 8.0);
    printf("perf embedding fwd %s N=%d C=%d: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n",
           dt_name(dt), N, C, ms_f * 1e3, bf / (ms_f * 1e-3) / 1e9, bf / (ms_f * 1e-3) / 4.8e10);
    printf("perf embedding bwd %s N=%d C=%d: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n",
           dt_name(dt), N, C, ms_b * 1e3, bb / (ms_b * 1e-3) / 1e9, bb / (ms_b * 1e-3) / 4.8e10);
    CK(cudaFree(d_wte));
    CK(cudaFree(d_out));
    CK(cudaFree(d_dw));
    CK(cudaFree(d_ids));
    free(ids);
}

int main(void)
{
    int ndev = 0, nfail = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    for (int dt = SDP_CUDA_F32; dt <= SDP_CUDA_BF16; dt++) {
        nfail += run_case(50, 16, 64, dt, 0, 1);
        nfail += run_case(50, 16, 64, dt, 1, 2);
        nfail += run_case(37, 33, 63, dt, 0, 3);
        nfail += run_case(4096, 2048, 2560, dt, 0, 4);
        nfail += run_case(8, 2048, 2560, dt, 0, 5);
    }
    bench(SDP_CUDA_BF16);
    bench(SDP_CUDA_F32);
    return sdp_test_finish(nfail);
}
