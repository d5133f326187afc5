// SPDX-License-Identifier: MIT
/* Token embedding on the GPU: the forward copies rows of wte (bytes, any dtype); the backward
 * scatter-adds dout rows into the fp32 gradient table with atomics, so repeated ids accumulate in
 * a run-dependent order (not bit-reproducible).  Ids are trusted (checked by the data loader).
 * Test: tests/kernels/test_cuda_embedding.c (against sdp_cpu_embedding_*_ref). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"

/* out (N, C) = wte[ids] (V, C), rows of `words` words of type W (16-byte words when aligned). */
template <typename W>
static __global__ void embedding_fwd_kernel(W *__restrict__ out, const int32_t *__restrict__ ids,
                                            const W *__restrict__ wte, int words)
{
    const int n = blockIdx.x;
    const W *src = wte + (size_t)ids[n] * words;
    W *dst = out + (size_t)n * words;
    for (int j = threadIdx.x; j < words; j += blockDim.x)
        dst[j] = src[j];
}

static __device__ __forceinline__ float bf2f(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

/* dwte (V, C) f32 += dout (N, C) scattered by ids; VEC = 4 uses the sm_90 float4 atomicAdd. */
template <typename T, int VEC>
static __global__ void embedding_bwd_kernel(float *__restrict__ dwte, const T *__restrict__ dout,
                                            const int32_t *__restrict__ ids, int C)
{
    const int n = blockIdx.x;
    float *drow = dwte + (size_t)ids[n] * C;
    const T *g = dout + (size_t)n * C;

    for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
        float v[VEC];
        for (int k = 0; k < VEC; k++) {
            if constexpr (sizeof(T) == 2)
                v[k] = bf2f(g[c + k]);
            else
                v[k] = g[c + k];
        }
        if constexpr (VEC == 4)
            atomicAdd(reinterpret_cast<float4 *>(drow + c), make_float4(v[0], v[1], v[2], v[3]));
        else
            atomicAdd(drow + c, v[0]);
    }
}

extern "C" void sdp_cuda_embedding_fwd(void *out, const int32_t *ids, const void *wte, int N, int C,
                                       int dt, cudaStream_t s)
{
    if (N <= 0 || C <= 0)
        return;
    const size_t esize = dt == SDP_CUDA_BF16 ? 2 : 4, row = (size_t)C * esize;
    if (row % 16 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)wte % 16 == 0) {
        const int words = (int)(row / 16);
        const int threads = words < 256 ? (words + 31) / 32 * 32 : 256;
        embedding_fwd_kernel<uint4>
            <<<N, threads, 0, s>>>((uint4 *)out, ids, (const uint4 *)wte, words);
    } else if (esize == 2) {
        embedding_fwd_kernel<uint16_t>
            <<<N, 256, 0, s>>>((uint16_t *)out, ids, (const uint16_t *)wte, C);
    } else {
        embedding_fwd_kernel<float><<<N, 256, 0, s>>>((float *)out, ids, (const float *)wte, C);
    }
}

extern "C" void sdp_cuda_embedding_bwd(float *dwte, const void *dout, const int32_t *ids, int N,
                                       int C, int dt, cudaStream_t s)
{
    if (N <= 0 || C <= 0)
        return;
    const int vec4 = C % 4 == 0 && (uintptr_t)dwte % 16 == 0;
    const int per = vec4 ? C / 4 : C;
    const int threads = per < 256 ? (per + 31) / 32 * 32 : 256;
    if (dt == SDP_CUDA_BF16) {
        if (vec4)
            embedding_bwd_kernel<uint16_t, 4>
                <<<N, threads, 0, s>>>(dwte, (const uint16_t *)dout, ids, C);
        else
            embedding_bwd_kernel<uint16_t, 1>
                <<<N, threads, 0, s>>>(dwte, (const uint16_t *)dout, ids, C);
    } else {
        if (vec4)
            embedding_bwd_kernel<float, 4><<<N, threads, 0, s>>>(dwte, (const float *)dout, ids, C);
        else
            embedding_bwd_kernel<float, 1><<<N, threads, 0, s>>>(dwte, (const float *)dout, ids, C);
    }
}
