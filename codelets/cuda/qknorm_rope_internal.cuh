// SPDX-License-Identifier: MIT
/* Internal to the q/k norm + RoPE kernels (qknorm_rope_fwd.cu, qknorm_rope_bwd.cu): the warp and
 * v-copy helpers of the scalar kernels, the 16-byte vector path's shape, loads, stores, packing,
 * lane shuffles and cos/sin rows, and the vector launchers' checks.  Included by those two .cu
 * files.  Test: tests/kernels/test_cuda_qknorm_rope.c. */
#ifndef SDP_CUDA_QKNORM_ROPE_INTERNAL_CUH
#define SDP_CUDA_QKNORM_ROPE_INTERNAL_CUH

#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

static __device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* the v part of a row, (NKV * HD) elements starting at element off: 16-byte words when vec16 */
template <typename T>
static __device__ __forceinline__ void copy_v(T *dst, const T *src, int nelem, int vec16)
{
    if (vec16) {
        const int nw = nelem * (int)sizeof(T) / 16;
        for (int j = threadIdx.x; j < nw; j += blockDim.x)
            reinterpret_cast<uint4 *>(dst)[j] = reinterpret_cast<const uint4 *>(src)[j];
    } else {
        for (int j = threadIdx.x; j < nelem; j += blockDim.x)
            dst[j] = src[j];
    }
}

/* ---- vector paths: EPL = 16 / sizeof(T) elements a lane, LPH = HD / EPL lanes a head ----
 * For HD a multiple of 2 EPL with LPH a power of two in [2, 32] and 16-byte aligned rows (qwen3's
 * HD 128 in bf16: 16 lanes a head, two heads a warp).  A lane holds EPL consecutive elements of one
 * half of a head; rotate_half's partner of element i < half is i + half, held by the lane LPH / 2
 * away (one __shfl_xor).  The head's sums are butterflies over its LPH lanes.  A block's LPH-lane
 * slots run through its tokens' (token, head) pairs vec_pairs at a time, the loads of all of them
 * (and the backward's rstd) issued before any is used, so that a lane has several 16-byte loads in
 * flight; stores are 16 bytes too.  The cos, sin and -sin of the block's tokens and the norm
 * weights sit in shared memory, the sign chosen by the half, so that every lane rotates as
 * x c + p s.  The scalar kernels (one warp per head) take every other shape; both compute each
 * element with the same fp32 expressions. */

static constexpr int vec_pairs = 2, fwd_vec_threads = 128, fwd_vec_tokens = 2;
static constexpr int bwd_vec_threads = 256;

template <typename T> struct vec16 {
    static constexpr int EPL = 16 / (int)sizeof(T);
};

/* 16 bytes at p (16-byte aligned), by the read-only path */
template <typename T> static __device__ __forceinline__ uint4 ld16(const T *p)
{
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

/* one 16-byte store at p (16-byte aligned): a plain uint4 assignment may come out as four */
template <typename T> static __device__ __forceinline__ void st16(T *p, uint4 v)
{
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}

/* a 16-byte word as floats: 8 bf16 (the low half of a 32-bit word first) or 4 f32 */
static __device__ __forceinline__ void unpack(float (&f)[8], uint4 v)
{
    const uint32_t w[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
    for (int m = 0; m < 4; m++) {
        f[2 * m] = __uint_as_float(w[m] << 16);
        f[2 * m + 1] = __uint_as_float(w[m] & 0xffff0000u);
    }
}

static __device__ __forceinline__ void unpack(float (&f)[4], uint4 v)
{
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
}

/* from_f's bf16 of x in the upper 16 bits (the lower 16 are junk); bf16_rne is exact for all but
 * NaN, bf16_any for all */
static __device__ __forceinline__ uint32_t bf16_rne(float x)
{
    const uint32_t u = __float_as_uint(x);
    return u + 0x7fffu + ((u >> 16) & 1u);
}

static __device__ __forceinline__ uint32_t bf16_any(float x)
{
    const uint32_t u = __float_as_uint(x);
    return (u & 0x7fffffffu) > 0x7f800000u ? (u & 0x80000000u) | 0x7fc00000u : bf16_rne(x);
}

/* the 16-byte word of f rounded as from_f does: 8 bf16 or 4 f32.  A NaN among f makes their sum
 * NaN and takes the exact path (so does an inf - inf, harmlessly). */
static __device__ __forceinline__ uint4 pack(const float (&f)[8])
{
    const float s = ((f[0] + f[1]) + (f[2] + f[3])) + ((f[4] + f[5]) + (f[6] + f[7]));
    uint32_t w[4];
    if (s == s) {
#pragma unroll
        for (int m = 0; m < 4; m++)
            w[m] = __byte_perm(bf16_rne(f[2 * m]), bf16_rne(f[2 * m + 1]), 0x7632);
    } else {
#pragma unroll
        for (int m = 0; m < 4; m++)
            w[m] = __byte_perm(bf16_any(f[2 * m]), bf16_any(f[2 * m + 1]), 0x7632);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

static __device__ __forceinline__ uint4 pack(const float (&f)[4])
{
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
}

/* sum over the LPH lanes of a head (aligned groups of a warp); every lane of the warp calls it */
template <int LPH> static __device__ __forceinline__ double head_sum(double v)
{
#pragma unroll
    for (int o = LPH / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* the partner half's EPL floats (the lane LPH / 2 away) */
template <int LPH, int EPL>
static __device__ __forceinline__ void partner(float (&p)[EPL], const float (&f)[EPL])
{
#pragma unroll
    for (int k = 0; k < EPL; k++)
        p[k] = __shfl_xor_sync(0xffffffffu, f[k], LPH / 2);
}

/* the partner half's raw 16-byte word (converted after the shuffle: the same floats) */
template <int LPH> static __device__ __forceinline__ uint4 partner_raw(uint4 v)
{
    uint4 r;
    r.x = __shfl_xor_sync(0xffffffffu, v.x, LPH / 2);
    r.y = __shfl_xor_sync(0xffffffffu, v.y, LPH / 2);
    r.z = __shfl_xor_sync(0xffffffffu, v.z, LPH / 2);
    r.w = __shfl_xor_sync(0xffffffffu, v.w, LPH / 2);
    return r;
}

/* the v part of token rows [n0, n1) from src to dst in 16-byte words, by the whole block: four
 * words a thread loaded before any is stored */
template <typename T>
static __device__ __forceinline__ void copy_v_rows(T *__restrict__ dst, const T *__restrict__ src,
                                                   int n0, int n1, size_t QKV, int voff, int vwords)
{
    constexpr int B = 4;
    const int nw = (n1 - n0) * vwords;
    for (int j0 = threadIdx.x; j0 < nw; j0 += B * blockDim.x) {
        uint4 v[B];
        size_t at[B];
#pragma unroll
        for (int b = 0; b < B; b++) {
            const int q = j0 + b * (int)blockDim.x;
            at[b] = (size_t)(n0 + q / vwords) * QKV + voff + (size_t)(q % vwords) * vec16<T>::EPL;
            v[b] = q < nw ? ld16(src + at[b]) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int b = 0; b < B; b++)
            if (j0 + b * (int)blockDim.x < nw)
                st16(dst + at[b], v[b]);
    }
}

/* the position of token n: n % Tlen, less its document's start when positions restart */
static __device__ __forceinline__ int rope_pos(const struct sdp_cuda_inv_freq &inv, int n, int Tlen)
{
    return n % Tlen - (inv.seg ? inv.seg[n] : 0);
}

/* cos, sin and -sin of the fp32 angle pos * inv_freq[i], pos = rope_pos(n0 + t), at [t half + i]
 * for the nt tokens from n0: with the sign in the table, either half's rotation reads x c + p s */
static __device__ __forceinline__ void rope_rows(float *cs, float *sn, float *snm,
                                                 const struct sdp_cuda_inv_freq &inv, int n0,
                                                 int nt, int Tlen, int half)
{
    for (int q = threadIdx.x; q < nt * half; q += blockDim.x) {
        const float ang = (float)rope_pos(inv, n0 + q / half, Tlen) * inv.f[q % half];
        double sv, cv;
        sincos((double)ang, &sv, &cv);
        cs[q] = (float)cv * inv.scale;
        sn[q] = (float)sv * inv.scale;
        snm[q] = -((float)sv * inv.scale);
    }
}

/* pair pr of a run through nh heads a token, as (token t, head h) */
static __device__ __forceinline__ void pair_at(int &t, int &h, int pr, int nh)
{
    t = pr / nh;
    h = pr - t * nh;
}

/* the pair step_t * nh + step_h (step_h < nh) further on */
static __device__ __forceinline__ void pair_next(int &t, int &h, int step_t, int step_h, int nh)
{
    t += step_t;
    h += step_h;
    if (h >= nh) {
        h -= nh;
        t++;
    }
}

/* v may be copied in 16-byte words when every row start and the v offset are 16-byte aligned */
static int v_vec16(const void *a, const void *b, int NH, int NKV, int HD, size_t esize)
{
    const size_t row = (size_t)(NH + 2 * NKV) * HD * esize, off = (size_t)(NH + NKV) * HD * esize;
    const size_t vbytes = (size_t)NKV * HD * esize;
    return (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 && row % 16 == 0 && off % 16 == 0 &&
           vbytes % 16 == 0;
}

/* LPH of the vector path for HD elements of T (0: the scalar kernels) */
template <typename T> static int vec_lph(int HD)
{
    const int epl = 16 / (int)sizeof(T), lph = HD / epl;
    if (HD % (2 * epl) || lph < 2 || lph > 32 || (lph & (lph - 1)))
        return 0;
    return lph;
}

static int al16(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

#define SDP_LPH_DISPATCH(lph, KERNEL, T, grid, threads, smem, s, ...)                              \
    do {                                                                                           \
        switch (lph) {                                                                             \
        case 2:                                                                                    \
            KERNEL<T, 2><<<grid, threads, smem, s>>>(__VA_ARGS__);                                 \
            break;                                                                                 \
        case 4:                                                                                    \
            KERNEL<T, 4><<<grid, threads, smem, s>>>(__VA_ARGS__);                                 \
            break;                                                                                 \
        case 8:                                                                                    \
            KERNEL<T, 8><<<grid, threads, smem, s>>>(__VA_ARGS__);                                 \
            break;                                                                                 \
        case 16:                                                                                   \
            KERNEL<T, 16><<<grid, threads, smem, s>>>(__VA_ARGS__);                                \
            break;                                                                                 \
        default:                                                                                   \
            KERNEL<T, 32><<<grid, threads, smem, s>>>(__VA_ARGS__);                                \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

#endif
