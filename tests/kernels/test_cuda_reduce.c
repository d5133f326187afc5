/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_add_f32 (the GPU route of the data-parallel gradient reduction) bit for bit
 * against the CPU's fp32 addition in rank order ((g0 + g1) + g2) + g3: n = 0, 1, odd and
 * misaligned lengths, 3e6 random values with Inf, NaN, denormals and cancellations.  Exits 77
 * without a GPU. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define NRANKS 4

static float value(uint64_t *s, size_t i)
{
    uint64_t r;
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    r = *s;
    switch (i % 997) {
    case 3:
        return INFINITY;
    case 5:
        return NAN;
    case 7:
        return 1e-41f; /* denormal */
    default:
        return (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * (i % 3 ? 1.0f : 3e4f);
    }
}

static int check(size_t n, size_t off, uint64_t seed)
{
    float *h[NRANKS], *ref, *got, *d[NRANKS];
    int bad = 0;
    ref = malloc(n * 4 + 4);
    got = malloc(n * 4 + 4);
    for (int r = 0; r < NRANKS; r++) {
        h[r] = malloc(n * 4 + 4);
        for (size_t i = 0; i < n; i++)
            h[r][i] = value(&seed, i + (size_t)r);
        CK(cudaMalloc((void **)&d[r], (n + off) * 4 + 16));
        if (n)
            CK(cudaMemcpy(d[r] + off, h[r], n * 4, cudaMemcpyHostToDevice));
    }
    for (size_t i = 0; i < n; i++) {
        float acc = h[0][i];
        for (int r = 1; r < NRANKS; r++)
            acc += h[r][i];
        ref[i] = acc;
    }
    for (int r = 1; r < NRANKS; r++)
        sdp_cuda_add_f32(d[0] + off, d[r] + off, n, 0);
    CK(cudaGetLastError());
    if (n)
        CK(cudaMemcpy(got, d[0] + off, n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n && !bad; i++)
        if (memcmp(&got[i], &ref[i], 4) != 0 && !(isnan(got[i]) && isnan(ref[i]))) {
            printf("n=%zu off %zu: element %zu gpu %.9g cpu %.9g\n", n, off, i, got[i], ref[i]);
            bad = 1;
        }
    printf("add_f32 x%d n=%-8zu off %zu %s\n", NRANKS - 1, n, off, bad ? "BAD" : "ok");
    for (int r = 0; r < NRANKS; r++) {
        CK(cudaFree(d[r]));
        free(h[r]);
    }
    free(ref);
    free(got);
    return bad;
}

int main(void)
{
    int ndev = 0, bad = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    const size_t sizes[] = { 0, 1, 3, 255, 256, 257, 4097, 3000001 };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t off = 0; off < 3; off += 2)
            bad |= check(sizes[i], off, 0x9e3779b97f4a7c15ull + i);
    printf("%s\n", bad ? "FAIL" : "PASS");
    return bad;
}
