// SPDX-License-Identifier: MIT
/* Sum of squares of an fp32 vector on the GPU, in double (the squared gradient norm): pass 1 has a
 * fixed number of blocks (a function of n alone) write partial sums to ws, pass 2 adds them in a
 * fixed order, so the result is deterministic for a given n.  Enqueues only; no allocation.
 * sdp_cuda_sumsq_cast (grad_pack) runs the same two passes over every chunk of a gradient group at
 * once and writes each chunk's bf16 copy from the same loads: one launch of each pass per batch of
 * up to 64 chunks (blockIdx.y the chunk), each chunk with its own block count, grid-stride
 * partition, tail and final order, so its sum has the bits sdp_cuda_sumsq gives on it.  Squares of
 * floats are exact in double, so FMA contraction cannot change a sum; only the order could.
 * Test: tests/kernels/test_cuda_sumsq.c (against sdp_cpu_sumsq_ref, and run-to-run bitwise; the
 * fused path bit for bit against sdp_cuda_sumsq and sdp_cuda_cast on each chunk). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

static const int sumsq_threads = 256;

/* Sum over the block in a fixed order (butterfly per warp, then warps in index order), thread 0
 * gets it. */
static __device__ __forceinline__ double block_sum(double v)
{
    __shared__ double red[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    double t = 0.0;
    if (threadIdx.x == 0)
        for (int i = 0; i < (int)(blockDim.x / 32); i++)
            t += red[i];
    return t;
}

/* part[b] = sum of g[i]^2 over the block's grid-stride share; float4 loads when VEC4. */
template <int VEC4>
static __global__ void sumsq_partial_kernel(double *__restrict__ part, const float *__restrict__ g,
                                            size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    double s0 = 0.0, s1 = 0.0;
    size_t done = 0;

    if constexpr (VEC4) {
        const size_t nv = n / 4;
        for (size_t v = i0; v < nv; v += stride) {
            const float4 a = reinterpret_cast<const float4 *>(g)[v];
            s0 += (double)a.x * a.x + (double)a.y * a.y;
            s1 += (double)a.z * a.z + (double)a.w * a.w;
        }
        done = nv * 4;
    }
    for (size_t i = done + i0; i < n; i += stride)
        s0 += (double)g[i] * g[i];
    const double t = block_sum(s0 + s1);
    if (threadIdx.x == 0)
        part[blockIdx.x] = t;
}

static __global__ void sumsq_final_kernel(double *__restrict__ out, const double *__restrict__ part,
                                          int G)
{
    double s = 0.0;
    for (int b = threadIdx.x; b < G; b += blockDim.x)
        s += part[b];
    s = block_sum(s);
    if (threadIdx.x == 0)
        *out = s;
}

/* blocks of pass 1: a function of n alone (at most 1024, about 16 float4 per thread) */
static int sumsq_blocks(size_t n)
{
    const size_t per_block = (size_t)sumsq_threads * 4 * 16;
    const size_t b = (n + per_block - 1) / per_block;
    return b < 1 ? 1 : (b > 1024 ? 1024 : (int)b);
}

extern "C" size_t sdp_cuda_sumsq_ws(size_t n)
{
    return (size_t)sumsq_blocks(n) * sizeof(double);
}

extern "C" void sdp_cuda_sumsq(double *out, const float *g, size_t n, void *ws, cudaStream_t s)
{
    const int G = sumsq_blocks(n);
    double *part = (double *)ws;
    if ((uintptr_t)g % 16 == 0)
        sumsq_partial_kernel<1><<<G, sumsq_threads, 0, s>>>(part, g, n);
    else
        sumsq_partial_kernel<0><<<G, sumsq_threads, 0, s>>>(part, g, n);
    sumsq_final_kernel<<<1, sumsq_threads, 0, s>>>(out, part, G);
}

/* ---- sumsq and bf16 cast of the chunks of a group ---- */

/* bf16 bits of x: storage.cuh's from_f, the CPU's rounding (and cast.cu's) */
static __device__ __forceinline__ uint16_t f2bf(float x)
{
    uint16_t b;
    from_f(&b, x);
    return b;
}

/* Up to SUMSQ_CAST_BATCH chunks, passed by value (2.5 KB of kernel parameters). */
#define SUMSQ_CAST_BATCH 64
struct sumsq_cast_batch {
    const float *g[SUMSQ_CAST_BATCH]; /* the chunk's first element */
    uint16_t *dst[SUMSQ_CAST_BATCH];  /* its bf16 copy, or NULL */
    double *out[SUMSQ_CAST_BATCH];    /* its sum of squares (device) */
    size_t n[SUMSQ_CAST_BATCH];       /* its length */
    int G[SUMSQ_CAST_BATCH];          /* its pass-1 blocks, sumsq_blocks(n) */
    int part[SUMSQ_CAST_BATCH];       /* its first partial sum in ws */
};

/* dst[4v .. 4v + 4) = bf16 of a: one 8-byte store when dst is 8-byte aligned (st8) */
static __device__ __forceinline__ void put_bf16x4(uint16_t *dst, size_t v, float4 a, int st8)
{
    if (st8) {
        uint2 o;
        o.x = f2bf(a.x) | ((uint32_t)f2bf(a.y) << 16);
        o.y = f2bf(a.z) | ((uint32_t)f2bf(a.w) << 16);
        reinterpret_cast<uint2 *>(dst)[v] = o;
    } else {
        dst[4 * v] = f2bf(a.x);
        dst[4 * v + 1] = f2bf(a.y);
        dst[4 * v + 2] = f2bf(a.z);
        dst[4 * v + 3] = f2bf(a.w);
    }
}

/* Pass 1 of chunk c = blockIdx.y: sumsq_partial_kernel on it with gridDim.x = G[c] (the blocks
 * beyond return), VEC4 when its start is 16-byte aligned, plus the bf16 copy.  The vector loop
 * issues four loads before adding them, in the same order as one at a time. */
static __global__ void __launch_bounds__(256)
    sumsq_cast_partial_kernel(double *__restrict__ ws, const __grid_constant__ sumsq_cast_batch b)
{
    const int c = blockIdx.y, G = b.G[c];
    if ((int)blockIdx.x >= G)
        return;
    const float *__restrict__ g = b.g[c];
    uint16_t *__restrict__ dst = b.dst[c];
    const size_t n = b.n[c];
    const size_t stride = (size_t)G * blockDim.x;
    const size_t i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    double s0 = 0.0, s1 = 0.0;
    size_t done = 0;

    if ((uintptr_t)g % 16 == 0) {
        const float4 *g4 = reinterpret_cast<const float4 *>(g);
        const size_t nv = n / 4;
        const int st8 = (uintptr_t)dst % 8 == 0;
        size_t v = i0;
        for (; v + 3 * stride < nv; v += 4 * stride) {
            float4 a[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                a[k] = __ldg(g4 + v + k * stride);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                s0 += (double)a[k].x * a[k].x + (double)a[k].y * a[k].y;
                s1 += (double)a[k].z * a[k].z + (double)a[k].w * a[k].w;
                if (dst)
                    put_bf16x4(dst, v + k * stride, a[k], st8);
            }
        }
        for (; v < nv; v += stride) {
            const float4 a = __ldg(g4 + v);
            s0 += (double)a.x * a.x + (double)a.y * a.y;
            s1 += (double)a.z * a.z + (double)a.w * a.w;
            if (dst)
                put_bf16x4(dst, v, a, st8);
        }
        done = nv * 4;
    }
    for (size_t i = done + i0; i < n; i += stride) {
        const float x = g[i];
        s0 += (double)x * x;
        if (dst)
            dst[i] = f2bf(x);
    }
    const double t = block_sum(s0 + s1);
    if (threadIdx.x == 0)
        ws[b.part[c] + blockIdx.x] = t;
}

/* Pass 2 of chunk c = blockIdx.x: sumsq_final_kernel on its G[c] partials. */
static __global__ void __launch_bounds__(256)
    sumsq_cast_final_kernel(const double *__restrict__ ws,
                            const __grid_constant__ sumsq_cast_batch b)
{
    const int c = blockIdx.x, G = b.G[c];
    const double *part = ws + b.part[c];
    double s = 0.0;
    for (int i = threadIdx.x; i < G; i += blockDim.x)
        s += part[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        *b.out[c] = s;
}

/* The partials of the batch of chunks from c0: G of each chunk, packed in chunk order. */
static size_t sumsq_cast_parts(const size_t *off, int c0, int nb)
{
    size_t parts = 0;
    for (int k = 0; k < nb; k++)
        parts += (size_t)sumsq_blocks(off[c0 + k + 1] - off[c0 + k]);
    return parts;
}

static int sumsq_cast_nb(int nchunks, int c0)
{
    return nchunks - c0 < SUMSQ_CAST_BATCH ? nchunks - c0 : SUMSQ_CAST_BATCH;
}

extern "C" size_t sdp_cuda_sumsq_cast_ws(const size_t *off, int nchunks)
{
    size_t most = 0;
    for (int c0 = 0; c0 < nchunks; c0 += SUMSQ_CAST_BATCH) {
        const size_t parts = sumsq_cast_parts(off, c0, sumsq_cast_nb(nchunks, c0));
        most = parts > most ? parts : most;
    }
    return most * sizeof(double);
}

extern "C" void sdp_cuda_sumsq_cast(double *const *sumsq, uint16_t *const *dst, const float *g,
                                    const size_t *off, int nchunks, void *ws, cudaStream_t s)
{
    for (int c0 = 0; c0 < nchunks; c0 += SUMSQ_CAST_BATCH) {
        /* zeroed: the unused entries are copied to the device too.  The next batch reuses ws
         * after this one's final pass, in stream order. */
        sumsq_cast_batch b = {};
        const int nb = sumsq_cast_nb(nchunks, c0);
        int maxG = 1, parts = 0;
        for (int k = 0; k < nb; k++) {
            const int c = c0 + k;
            b.g[k] = g + off[c];
            b.dst[k] = dst ? dst[c] : NULL;
            b.out[k] = sumsq[c];
            b.n[k] = off[c + 1] - off[c];
            b.G[k] = sumsq_blocks(b.n[k]);
            b.part[k] = parts;
            parts += b.G[k];
            maxG = b.G[k] > maxG ? b.G[k] : maxG;
        }
        sumsq_cast_partial_kernel<<<dim3(maxG, nb), sumsq_threads, 0, s>>>((double *)ws, b);
        sumsq_cast_final_kernel<<<nb, sumsq_threads, 0, s>>>((const double *)ws, b);
    }
}
