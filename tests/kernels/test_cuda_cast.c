/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_cast bit for bit against the CPU's sdp_cpu_cast_bf16_ref: every special value
 * (signed zeros, denormals, ties, the largest finite values that round to Inf, Inf, NaNs with
 * payloads), 1M uniformly random 32-bit patterns, odd lengths and a misaligned source (the scalar
 * path); an f32 destination must be an exact copy.  Prints the bandwidth at 16384 x 2560. */
#include "config.h"

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

/* cast src (n) on the GPU from element offset `off` of a device buffer; compare with the CPU */
static int check_bf16(const char *name, const float *src, size_t n, size_t off)
{
    float *d_src;
    uint16_t *d_dst, *gpu = sdp_test_alloc(n * 2 + 2), *cpu = sdp_test_alloc(n * 2 + 2);
    size_t nbad = 0;

    CK(cudaMalloc((void **)&d_src, (n + off) * sizeof(float) + 16));
    CK(cudaMalloc((void **)&d_dst, (n + off) * 2 + 16));
    CK(cudaMemcpy(d_src + off, src, n * sizeof(float), cudaMemcpyHostToDevice));
    sdp_cuda_cast(d_dst + off, SDP_CUDA_BF16, d_src + off, n, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(gpu, d_dst + off, n * 2, cudaMemcpyDeviceToHost));
    sdp_cpu_cast_bf16_ref(cpu, src, n);
    for (size_t i = 0; i < n; i++) {
        if (gpu[i] != cpu[i]) {
            uint32_t u;
            memcpy(&u, &src[i], 4);
            if (nbad < 5)
                printf("  %s[%zu]: src 0x%08x -> gpu 0x%04x, cpu 0x%04x\n", name, i, (unsigned)u,
                       gpu[i], cpu[i]);
            nbad++;
        }
    }
    printf("%-34s n=%-8zu offset %zu  bf16 bitwise %s\n", name, n, off,
           nbad ? "DIFFERENT" : "identical");
    CK(cudaFree(d_src));
    CK(cudaFree(d_dst));
    free(gpu);
    free(cpu);
    return nbad != 0;
}

static int check_f32(const char *name, const float *src, size_t n)
{
    float *d_src, *d_dst, *gpu = sdp_test_alloc(n * sizeof(float));
    CK(cudaMalloc((void **)&d_src, n * sizeof(float)));
    CK(cudaMalloc((void **)&d_dst, n * sizeof(float)));
    CK(cudaMemcpy(d_src, src, n * sizeof(float), cudaMemcpyHostToDevice));
    sdp_cuda_cast(d_dst, SDP_CUDA_F32, d_src, n, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(gpu, d_dst, n * sizeof(float), cudaMemcpyDeviceToHost));
    const int bad = sdp_check_bits(name, gpu, src, n);
    CK(cudaFree(d_src));
    CK(cudaFree(d_dst));
    free(gpu);
    return bad;
}

static void bench(void)
{
    const size_t n = (size_t)16384 * 2560;
    float *d_src;
    uint16_t *d_dst;
    cudaEvent_t e0, e1;
    float ms;
    const int reps = 20;

    CK(cudaMalloc((void **)&d_src, n * sizeof(float)));
    CK(cudaMalloc((void **)&d_dst, n * 2));
    CK(cudaMemset(d_src, 0x3f, n * sizeof(float)));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    sdp_cuda_cast(d_dst, SDP_CUDA_BF16, d_src, n, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_cast(d_dst, SDP_CUDA_BF16, d_src, n, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= reps;
    printf("perf cast f32->bf16 n=16384x2560: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n", ms * 1e3,
           n * 6.0 / (ms * 1e-3) / 1e9, n * 6.0 / (ms * 1e-3) / 4.8e12 * 100);
    CK(cudaFree(d_src));
    CK(cudaFree(d_dst));
}

int main(void)
{
    int ndev = 0, nfail = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }

    /* special values: zeros, denormals, ties around bf16 ulps, overflow, Inf, NaN payloads */
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x00007fffu, 0x00008000u,
        0x00008001u, 0x00018000u, 0x007fffffu, 0x00800000u, 0x3f800000u, 0x3f808000u,
        0x3f818000u, 0x3f807fffu, 0x3f808001u, 0xbf808000u, 0xbf818000u, 0x7f7f7fffu,
        0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
        0xff800001u, 0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu, 0x7f80ffffu,
        0x7fbfffffu, 0x40490fdbu, 0x3eaaaaabu, 0xc2f6e979u, 0x0001ffffu, 0x807f8000u,
    };
    const size_t ns = sizeof(special) / sizeof(special[0]);
    float sv[sizeof(special) / sizeof(special[0])];
    for (size_t i = 0; i < ns; i++)
        sv[i] = sdp_f32_from_bits(special[i]);
    nfail += check_bf16("cast special values", sv, ns, 0);
    nfail += check_bf16("cast special values (misaligned)", sv, ns, 1);

    /* 1M random bit patterns (every class: NaNs, denormals, huge), plus odd lengths */
    const size_t nr = 1u << 20;
    float *r = sdp_test_alloc(nr * sizeof(float));
    struct sdp_rng rng = { 12345 };
    for (size_t i = 0; i < nr; i++)
        r[i] = sdp_f32_from_bits((uint32_t)sdp_rng_next(&rng));
    nfail += check_bf16("cast random bits", r, nr, 0);
    nfail += check_bf16("cast random bits (n odd)", r, nr - 5, 0);
    nfail += check_bf16("cast random bits (misaligned)", r + 3, 1001, 3);
    nfail += check_bf16("cast n=7", r, 7, 0);

    /* every bf16 tie: low 16 bits exactly 0x8000 over many exponents */
    for (size_t i = 0; i < nr; i++)
        r[i] = sdp_f32_from_bits(((uint32_t)sdp_rng_next(&rng) & 0xffff0000u) | 0x8000u);
    nfail += check_bf16("cast exact ties", r, nr, 0);

    nfail += check_f32("cast f32 copy (random bits)", r, nr);
    nfail += check_f32("cast f32 copy n=3", r, 3);

    bench();
    free(r);
    return sdp_test_finish(nfail);
}
