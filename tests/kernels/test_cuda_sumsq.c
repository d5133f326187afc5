/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_sumsq against the CPU's sdp_cpu_sumsq_ref: n = 0, 1, odd and misaligned
 * lengths, 1e7 random values, huge and tiny magnitudes; both sum exact double squares of floats,
 * so each is within (n - 1) u64 of the exact sum and the two within 2 n u64 (Higham Thm 3.1).
 * Two runs must agree bit for bit.  Prints the bandwidth at n = 16384 x 9728. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d\nFAIL\n", cudaGetErrorString(e_), __FILE__, __LINE__);  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const double u64 = 1.0 / 9007199254740992.0; /* 2^-53 */

/* sumsq of g (n) placed at element offset off of a device buffer, run twice */
static int check(const char *name, const float *g, size_t n, size_t off)
{
    float *d_g;
    double *d_out, res[2];
    void *ws;
    CK(cudaMalloc((void **)&d_g, (n + off) * 4 + 16));
    CK(cudaMalloc((void **)&d_out, 8));
    CK(cudaMalloc(&ws, sdp_cuda_sumsq_ws(n) + 16));
    if (n)
        CK(cudaMemcpy(d_g + off, g, n * 4, cudaMemcpyHostToDevice));
    for (int r = 0; r < 2; r++) {
        CK(cudaMemset(d_out, 0xff, 8));
        sdp_cuda_sumsq(d_out, d_g + off, n, ws, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(&res[r], d_out, 8, cudaMemcpyDeviceToHost));
    }
    const double ref = sdp_cpu_sumsq_ref(g, n);
    const double err = fabs(res[0] - ref), allowed = 2.0 * (double)n * u64 * ref;
    const int bad = !(err <= allowed) || memcmp(&res[0], &res[1], 8) != 0;
    printf("%-34s n=%-9zu off %zu gpu %.17g cpu %.17g |err| %.3g (%.1f%% of allowed)%s  %s\n", name,
           n, off, res[0], ref, err, allowed > 0 ? 100.0 * err / allowed : 0.0,
           memcmp(&res[0], &res[1], 8) ? " RERUN DIFFERS" : "", bad ? "BAD" : "ok");
    CK(cudaFree(d_g));
    CK(cudaFree(d_out));
    CK(cudaFree(ws));
    return bad;
}

static void bench(void)
{
    const size_t n = (size_t)16384 * 9728;
    const int reps = 10;
    float *d_g, ms;
    double *d_out;
    void *ws;
    cudaEvent_t e0, e1;
    CK(cudaMalloc((void **)&d_g, n * 4));
    CK(cudaMalloc((void **)&d_out, 8));
    CK(cudaMalloc(&ws, sdp_cuda_sumsq_ws(n)));
    CK(cudaMemset(d_g, 0x3c, n * 4));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    sdp_cuda_sumsq(d_out, d_g, n, ws, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_sumsq(d_out, d_g, n, ws, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= reps;
    printf("perf sumsq f32 n=16384x9728: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n", ms * 1e3,
           n * 4.0 / (ms * 1e-3) / 1e9, n * 4.0 / (ms * 1e-3) / 4.8e10);
    CK(cudaFree(d_g));
    CK(cudaFree(d_out));
    CK(cudaFree(ws));
}

int main(void)
{
    int ndev = 0, nfail = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    const size_t nmax = 10000000;
    float *g = sdp_test_alloc(nmax * 4);
    struct sdp_rng rng = { 42 };
    sdp_fill_normal(&rng, g, nmax, 1.0f);
    nfail += check("sumsq n=0", g, 0, 0);
    nfail += check("sumsq n=1", g, 1, 0);
    nfail += check("sumsq n=7 misaligned", g, 7, 1);
    nfail += check("sumsq n=1000003 misaligned", g, 1000003, 3);
    nfail += check("sumsq n=1e7", g, nmax, 0);
    for (size_t i = 0; i < 4096; i++)
        g[i] = (i & 1) ? 1e30f : 1e-30f; /* squares far outside the float range */
    nfail += check("sumsq huge/tiny", g, 4096, 0);
    bench();
    free(g);
    return sdp_test_finish(nfail);
}
