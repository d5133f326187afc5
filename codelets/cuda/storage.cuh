// SPDX-License-Identifier: MIT
// Storage helpers shared by the elementwise CUDA kernels: T is float or uint16_t (bf16 bits); values
// are computed in fp32 and rounded to bf16 with the CPU's round-to-nearest-even (same bits as
// sdp_f32_to_bf16), NaN kept quiet.  Device code only; included by .cu files.
#ifndef SDP_CUDA_STORAGE_CUH
#define SDP_CUDA_STORAGE_CUH

#include <cstdint>

static __device__ __forceinline__ float to_f(float x)
{
    return x;
}

static __device__ __forceinline__ float to_f(uint16_t b)
{
    return __uint_as_float((uint32_t)b << 16);
}

/* round to nearest even, NaN -> quiet NaN: the same bits as sdp_f32_to_bf16 */
static __device__ __forceinline__ void from_f(uint16_t *p, float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        *p = (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    else
        *p = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static __device__ __forceinline__ void from_f(float *p, float x)
{
    *p = x;
}

template <typename T, int V>
static __device__ __forceinline__ void load_vec(float (&f)[V], const T *p)
{
    if constexpr (V * sizeof(T) == 16) {
        union {
            uint4 u;
            T e[V];
        } r;
        r.u = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
        for (int k = 0; k < V; k++)
            f[k] = to_f(r.e[k]);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            f[k] = to_f(p[k]);
    }
}

template <typename T, int V>
static __device__ __forceinline__ void store_vec(T *p, const float (&f)[V])
{
    if constexpr (V * sizeof(T) == 16) {
        union {
            uint4 u;
            T e[V];
        } r;
#pragma unroll
        for (int k = 0; k < V; k++)
            from_f(&r.e[k], f[k]);
        *reinterpret_cast<uint4 *>(p) = r.u;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            from_f(&p[k], f[k]);
    }
}

#endif
