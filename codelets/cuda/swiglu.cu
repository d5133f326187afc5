// SPDX-License-Identifier: MIT
/* SwiGLU on the fused gate|up activation on the GPU, as swiglu_ref.c: out = silu(gate) * up with
 * sigmoid = 1/(1 + exp(-g)) in fp32 (saturates to 0 or 1, never Inf/Inf); storage fp32 or bf16.
 * Vectorized 16-byte loads when the rows allow; enqueues only.
 * Test: tests/kernels/test_cuda_swiglu.c (against sdp_cpu_swiglu_*_ref). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

static __device__ __forceinline__ float sigmoid(float g)
{
    return 1.0f / (1.0f + expf(-g));
}

/* out (N, I) = silu(gate) * up, gu (N, 2I) = gate | up.  x: vectors of a row, y: rows. */
template <typename T, int V>
static __global__ void swiglu_fwd_kernel(T *__restrict__ out, const T *__restrict__ gu, int N,
                                         int I)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j * V >= I)
        return;
    for (int n = blockIdx.y; n < N; n += gridDim.y) {
        const T *g = gu + (size_t)n * 2 * I + (size_t)j * V;
        float gv[V], uv[V], o[V];
        load_vec<T, V>(gv, g);
        load_vec<T, V>(uv, g + I);
#pragma unroll
        for (int e = 0; e < V; e++)
            o[e] = gv[e] * sigmoid(gv[e]) * uv[e];
        store_vec<T, V>(out + (size_t)n * I + (size_t)j * V, o);
    }
}

/* d silu(g)/dg = sig (1 + g (1 - sig));  dgate = dout * up * silu'(g),  dup = dout * silu(g). */
template <typename T, int V>
static __global__ void swiglu_bwd_kernel(T *__restrict__ dgu, const T *__restrict__ dout,
                                         const T *__restrict__ gu, int N, int I)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j * V >= I)
        return;
    for (int n = blockIdx.y; n < N; n += gridDim.y) {
        const size_t row = (size_t)n * 2 * I + (size_t)j * V;
        float gv[V], uv[V], dv[V], dg[V], du[V];
        load_vec<T, V>(gv, gu + row);
        load_vec<T, V>(uv, gu + row + I);
        load_vec<T, V>(dv, dout + (size_t)n * I + (size_t)j * V);
#pragma unroll
        for (int e = 0; e < V; e++) {
            const float sig = sigmoid(gv[e]);
            dg[e] = dv[e] * uv[e] * (sig * (1.0f + gv[e] * (1.0f - sig)));
            du[e] = dv[e] * (gv[e] * sig);
        }
        store_vec<T, V>(dgu + row, dg);
        store_vec<T, V>(dgu + row + I, du);
    }
}

static int aligned16(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

/* grid: ceil(I / V / 256) x min(N, 65535) blocks of 256 threads */
static dim3 grid_of(int N, int I, int V)
{
    const int nvec = I / V;
    return dim3((unsigned)((nvec + 255) / 256), (unsigned)(N < 65535 ? N : 65535));
}

template <typename T> static void fwd_launch(T *out, const T *gu, int N, int I, cudaStream_t s)
{
    constexpr int V = 16 / sizeof(T);
    if (I % V == 0 && aligned16(out) && aligned16(gu))
        swiglu_fwd_kernel<T, V><<<grid_of(N, I, V), 256, 0, s>>>(out, gu, N, I);
    else
        swiglu_fwd_kernel<T, 1><<<grid_of(N, I, 1), 256, 0, s>>>(out, gu, N, I);
}

template <typename T>
static void bwd_launch(T *dgu, const T *dout, const T *gu, int N, int I, cudaStream_t s)
{
    constexpr int V = 16 / sizeof(T);
    if (I % V == 0 && aligned16(dgu) && aligned16(dout) && aligned16(gu))
        swiglu_bwd_kernel<T, V><<<grid_of(N, I, V), 256, 0, s>>>(dgu, dout, gu, N, I);
    else
        swiglu_bwd_kernel<T, 1><<<grid_of(N, I, 1), 256, 0, s>>>(dgu, dout, gu, N, I);
}

extern "C" void sdp_cuda_swiglu_fwd(void *out, const void *gu, int N, int inter, int dt,
                                    cudaStream_t s)
{
    if (N <= 0 || inter <= 0)
        return;
    if (dt == SDP_CUDA_BF16)
        fwd_launch<uint16_t>((uint16_t *)out, (const uint16_t *)gu, N, inter, s);
    else
        fwd_launch<float>((float *)out, (const float *)gu, N, inter, s);
}

extern "C" void sdp_cuda_swiglu_bwd(void *dgu, const void *dout, const void *gu, int N, int inter,
                                    int dt, cudaStream_t s)
{
    if (N <= 0 || inter <= 0)
        return;
    if (dt == SDP_CUDA_BF16)
        bwd_launch<uint16_t>((uint16_t *)dgu, (const uint16_t *)dout, (const uint16_t *)gu, N,
                             inter, s);
    else
        bwd_launch<float>((float *)dgu, (const float *)dout, (const float *)gu, N, inter, s);
}
