// SPDX-License-Identifier: MIT
/* fp32 -> storage dtype cast on the GPU: bf16 rounds to nearest even through the bit pattern, the
 * same integer code as sdp_f32_to_bf16 of the CPU, so the results are bit-identical (NaN -> quiet
 * NaN with its sign, overflow -> Inf); an f32 destination is a plain device copy; and the widening
 * back to f32 (sdp_cuda_cast_f32, exact).  Enqueues only.
 * Test: tests/kernels/test_cuda_cast.c (bit for bit against the CPU on special and random bits). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"

static __device__ __forceinline__ uint16_t f2bf(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, force the quiet bit */
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* dst (n) bf16 = src (n) f32.  VEC = 8: 32-byte loads and a 16-byte store per thread, both
 * pointers 16-byte aligned; the n % 8 tail is done elementwise. */
template <int VEC>
static __global__ void cast_bf16_kernel(uint16_t *__restrict__ dst, const float *__restrict__ src,
                                        size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t nvec = 0;

    if constexpr (VEC == 8) {
        nvec = n / 8;
        for (size_t v = i; v < nvec; v += stride) {
            const float4 a = reinterpret_cast<const float4 *>(src)[2 * v];
            const float4 b = reinterpret_cast<const float4 *>(src)[2 * v + 1];
            uint4 o;
            o.x = f2bf(a.x) | ((uint32_t)f2bf(a.y) << 16);
            o.y = f2bf(a.z) | ((uint32_t)f2bf(a.w) << 16);
            o.z = f2bf(b.x) | ((uint32_t)f2bf(b.y) << 16);
            o.w = f2bf(b.z) | ((uint32_t)f2bf(b.w) << 16);
            reinterpret_cast<uint4 *>(dst)[v] = o;
        }
    }
    for (size_t j = nvec * VEC + i; j < n; j += stride)
        dst[j] = f2bf(src[j]);
}

extern "C" void sdp_cuda_cast(void *dst, int dt, const float *src, size_t n, cudaStream_t s)
{
    if (n == 0)
        return;
    if (dt == SDP_CUDA_F32) {
        if (dst != (const void *)src)
            cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
        return;
    }
    const int threads = 256;
    const int aligned = ((uintptr_t)dst % 16 == 0) && ((uintptr_t)src % 16 == 0);
    const size_t work = aligned ? (n + 7) / 8 : n;
    const size_t blocks = (work + threads - 1) / threads;
    const int grid = (int)(blocks < 8192 ? blocks : 8192);
    if (aligned)
        cast_bf16_kernel<8><<<grid, threads, 0, s>>>((uint16_t *)dst, src, n);
    else
        cast_bf16_kernel<1><<<grid, threads, 0, s>>>((uint16_t *)dst, src, n);
}

/* Up to GATHER_BATCH segments of sdp_cuda_gather_cast, passed by value (3 KiB of parameters). */
#define GATHER_BATCH 256
struct gather_batch {
    uint32_t src[GATHER_BATCH], dst[GATHER_BATCH], len[GATHER_BATCH];
};

/* Segment blockIdx.x: dst[dst .. + len) = bf16 of src[src .. + len) */
static __global__ void gather_cast_kernel(uint16_t *__restrict__ dst, const float *__restrict__ src,
                                          size_t dbase, const struct gather_batch b)
{
    uint16_t *d = dst + dbase + b.dst[blockIdx.x];
    const float *s = src + b.src[blockIdx.x];
    for (uint32_t j = threadIdx.x; j < b.len[blockIdx.x]; j += blockDim.x)
        d[j] = f2bf(s[j]);
}

extern "C" void sdp_cuda_gather_cast(uint16_t *dst, const float *src, const size_t *tab, int nsegs,
                                     cudaStream_t s)
{
    for (int i0 = 0; i0 < nsegs; i0 += GATHER_BATCH) {
        int nb = nsegs - i0 < GATHER_BATCH ? nsegs - i0 : GATHER_BATCH;
        size_t dbase = tab[3 * i0 + 1]; /* so that 32 bits hold the batch's offsets */
        struct gather_batch b;
        for (int i = 0; i < nb; i++) {
            const size_t *t = tab + 3 * (size_t)(i0 + i);
            b.src[i] = (uint32_t)t[0];
            b.dst[i] = (uint32_t)(t[1] - dbase);
            b.len[i] = (uint32_t)t[2];
        }
        gather_cast_kernel<<<nb, 256, 0, s>>>(dst, src, dbase, b);
    }
}

/* dst (n) f32 = the bf16 bits of src (n) widened (exact) */
static __global__ void widen_bf16_kernel(float *__restrict__ dst, const uint16_t *__restrict__ src,
                                         size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __uint_as_float((uint32_t)src[i] << 16);
}

extern "C" void sdp_cuda_cast_f32(float *dst, const void *src, int dt, size_t n, cudaStream_t s)
{
    if (n == 0)
        return;
    if (dt == SDP_CUDA_F32) {
        if ((const void *)dst != src)
            cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
        return;
    }
    const size_t blocks = (n + 255) / 256;
    widen_bf16_kernel<<<(unsigned)(blocks < 8192 ? blocks : 8192), 256, 0, s>>>(
        dst, (const uint16_t *)src, n);
}
