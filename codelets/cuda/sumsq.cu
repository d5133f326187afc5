// SPDX-License-Identifier: MIT
/* Sum of squares of an fp32 vector on the GPU, in double (the squared gradient norm): pass 1 has a
 * fixed number of blocks (a function of n alone) write partial sums to ws, pass 2 adds them in a
 * fixed order, so the result is deterministic for a given n.  Enqueues only; no allocation.
 * Test: tests/kernels/test_cuda_sumsq.c (against sdp_cpu_sumsq_ref, and run-to-run bitwise). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"

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
