// SPDX-License-Identifier: MIT
/* Token embedding on the GPU: the forward copies rows of wte (bytes, any dtype); the backward
 * adds dout rows into the fp32 gradient table id by id in position order (a stable sort of the
 * positions by id), deterministic and with the CPU reference's bits.  Ids are trusted (checked by
 * the data loader). Test: tests/kernels/test_cuda_embedding.c (against sdp_cpu_embedding_*_ref). */
#include <stdint.h>

#include <cub/device/device_radix_sort.cuh>

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

/* out (N, C) f32 = wte[ids] (V, C) bf16, widened (exact) */
static __global__ void embedding_fwd_f32_kernel(float *__restrict__ out,
                                                const int32_t *__restrict__ ids,
                                                const uint16_t *__restrict__ wte, int C)
{
    const int n = blockIdx.x;
    const uint16_t *src = wte + (size_t)ids[n] * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x)
        out[(size_t)n * C + j] = bf2f(src[j]);
}

/* dwte (V, C) f32 += dout (N, C) scattered by ids, deterministic: the positions sorted by id
 * (sid, spos: a stable radix sort, so each id's positions stay in increasing order), one block per
 * run of equal ids adds that id's rows in position order, as the CPU reference does: the same bits
 * on every run, and as sdp_cpu_embedding_bwd_ref. */
template <typename T>
static __global__ void embedding_bwd_kernel(float *__restrict__ dwte, const T *__restrict__ dout,
                                            const int32_t *__restrict__ sid,
                                            const int32_t *__restrict__ spos, int N, int C)
{
    const int i = blockIdx.x;
    if (i > 0 && sid[i] == sid[i - 1])
        return; /* not the first of its run */
    const int id = sid[i];
    float *drow = dwte + (size_t)id * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = drow[c];
        for (int j = i; j < N && sid[j] == id; j++) {
            const T v = dout[(size_t)spos[j] * C + c];
            if constexpr (sizeof(T) == 2)
                acc += bf2f(v);
            else
                acc += v;
        }
        drow[c] = acc;
    }
}

static __global__ void iota_kernel(int32_t *p, int N)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N)
        p[n] = n;
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

extern "C" void sdp_cuda_embedding_fwd_f32(float *out, const int32_t *ids, const uint16_t *wte,
                                           int N, int C, cudaStream_t s)
{
    if (N <= 0 || C <= 0)
        return;
    const int threads = C < 256 ? (C + 31) / 32 * 32 : 256;
    embedding_fwd_f32_kernel<<<N, threads, 0, s>>>(out, ids, wte, C);
}

extern "C" void sdp_cuda_embedding_bwd(float *dwte, const void *dout, const int32_t *ids, int N,
                                       int C, int dt, cudaStream_t s)
{
    size_t tmp_bytes = 0;
    char *buf = NULL;
    if (N <= 0 || C <= 0)
        return;
    cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, ids, (int32_t *)NULL, (const int32_t *)NULL,
                                    (int32_t *)NULL, N, 0, 32, s);
    /* the positions, the sorted ids and positions, then cub's temporary storage (256-aligned) */
    const size_t ints = ((size_t)3 * N * sizeof(int32_t) + 255) / 256 * 256;
    if (cudaMallocAsync((void **)&buf, ints + tmp_bytes, s) != cudaSuccess)
        return; /* the task's error check reports the failed allocation */
    int32_t *pos = (int32_t *)buf, *sid = pos + N, *spos = sid + N;
    iota_kernel<<<(N + 255) / 256, 256, 0, s>>>(pos, N);
    cub::DeviceRadixSort::SortPairs(buf + ints, tmp_bytes, ids, sid, pos, spos, N, 0, 32, s);
    const int threads = C < 256 ? (C + 31) / 32 * 32 : 256;
    if (dt == SDP_CUDA_BF16)
        embedding_bwd_kernel<uint16_t>
            <<<N, threads, 0, s>>>(dwte, (const uint16_t *)dout, sid, spos, N, C);
    else
        embedding_bwd_kernel<float>
            <<<N, threads, 0, s>>>(dwte, (const float *)dout, sid, spos, N, C);
    cudaFreeAsync(buf, s);
}
