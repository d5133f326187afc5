// SPDX-License-Identifier: MIT
/* Per-head q/k RMSNorm (when the norm weights are given) then Hugging Face rotate_half RoPE on the
 * fused qkv (N, QKV) activation, on the GPU; v passes through.  Same math as qknorm_rope_ref.c:
 * angle = (float)pos * inv_freq[i] in fp32, cos/sin of it in double rounded once, head sums in
 * double.  Where HD and the pointers allow 16-byte vectors (qwen3's HD 128: 16 lanes a head) each
 * lane holds 8 bf16 or 4 f32 of one half of a head; otherwise one warp per head, element by
 * element.  The backward writes per-block dqnorm/dknorm partials (double) to ws, reduced in a
 * fixed order by a second kernel.  Enqueues only.  H200, N 16384, bf16 (the test's perf lines):
 * forward 242 us with the scalar kernel, 123 with the vector one; backward 429 and 227 us
 * (bench/results/2026-12-02-h200-kernels.md).
 * Test: tests/kernels/test_cuda_qknorm_rope.c (against sdp_cpu_qknorm_rope_*_ref). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

static __device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* cos/sin of the fp32 angle pos * inv_freq[i] for i < half, into shared memory */
static __device__ __forceinline__ void
rope_table(float *cs, float *sn, const struct sdp_cuda_inv_freq &inv, int pos, int half)
{
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float ang = (float)pos * inv.f[i];
        double sv, cv;
        sincos((double)ang, &sv, &cv);
        cs[i] = (float)cv;
        sn[i] = (float)sv;
    }
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

/* ---- forward: one block per token, one warp per q/k head ---- */

template <typename T>
static __global__ void qknorm_rope_fwd_kernel(T *__restrict__ out, float *__restrict__ rstd,
                                              const T *__restrict__ qkv, const T *__restrict__ qw,
                                              const T *__restrict__ kw,
                                              const struct sdp_cuda_inv_freq inv, int Tlen, int NH,
                                              int NKV, int HD, float eps, int vec16)
{
    __shared__ float cs[SDP_CUDA_MAX_HALF_HD], sn[SDP_CUDA_MAX_HALF_HD];
    const int n = blockIdx.x, half = HD / 2, NQK = NH + NKV;
    const size_t QKV = (size_t)(NQK + NKV) * HD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const T *xrow = qkv + (size_t)n * QKV;
    T *yrow = out + (size_t)n * QKV;

    rope_table(cs, sn, inv, n % Tlen, half);
    __syncthreads();
    for (int h = warp; h < NQK; h += nwarps) {
        const T *xh = xrow + (size_t)h * HD;
        T *yh = yrow + (size_t)h * HD;
        const T *w = h < NH ? qw : kw;
        float rs = 1.0f;
        if (w) {
            double ss = 0.0;
            for (int i = lane; i < HD; i += 32) {
                const float v = to_f(xh[i]);
                ss += (double)v * v;
            }
            ss = warp_sum(ss);
            rs = (float)(1.0 / sqrt(ss / HD + (double)eps));
            if (lane == 0)
                rstd[(size_t)n * NQK + h] = rs;
        }
        for (int i = lane; i < half; i += 32) {
            float a = to_f(xh[i]), b = to_f(xh[i + half]);
            if (w) {
                a = (a * rs) * to_f(w[i]);
                b = (b * rs) * to_f(w[i + half]);
            }
            from_f(&yh[i], a * cs[i] - b * sn[i]);
            from_f(&yh[i + half], b * cs[i] + a * sn[i]);
        }
        if ((HD & 1) && lane == 0) { /* an odd last element is normed, not rotated */
            float a = to_f(xh[HD - 1]);
            if (w)
                a = (a * rs) * to_f(w[HD - 1]);
            from_f(&yh[HD - 1], a);
        }
    }
    copy_v(yrow + (size_t)NQK * HD, xrow + (size_t)NQK * HD, NKV * HD, vec16);
}

/* ---- backward: inverse rotation, then the norm's backward ----
 * dx_j = r w_j g_j - (r^3 / HD) x_j sum_i g_i w_i x_i,  dw_i += g_i x_i r  (g after un-rotation).
 * Block (b, y) takes the tokens [b N / Gx, (b + 1) N / Gx) and the heads y * nwarps + warp (one a
 * warp, so its norm weights and dw sums stay in registers); the last y copies dv.  cos/sin of up
 * to tc tokens at a time sit in shared memory.  Each block adds its warps' sums in warp order into
 * part[y * Gx + b] (2 HD doubles: q then k). */

template <typename T, int KMAX>
static __global__ void qknorm_rope_bwd_kernel(T *__restrict__ dqkv, double *__restrict__ part,
                                              const T *__restrict__ dout, const T *__restrict__ qkv,
                                              const T *__restrict__ qw, const T *__restrict__ kw,
                                              const float *__restrict__ rstd,
                                              const struct sdp_cuda_inv_freq inv, int N, int Tlen,
                                              int NH, int NKV, int HD, int tc, int vec16)
{
    extern __shared__ double smem[];
    const int half = HD / 2, NQK = NH + NKV, Gx = gridDim.x;
    const size_t QKV = (size_t)(NQK + NKV) * HD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int r0 = (int)((long long)blockIdx.x * N / Gx);
    const int r1 = (int)((long long)(blockIdx.x + 1) * N / Gx);
    const int norm = qw != nullptr;

    if (blockIdx.y == gridDim.y - 1) {
        for (int n = r0; n < r1; n++)
            copy_v(dqkv + (size_t)n * QKV + (size_t)NQK * HD,
                   dout + (size_t)n * QKV + (size_t)NQK * HD, NKV * HD, vec16);
        return;
    }
    double *acc = smem; /* nwarps x HD, when norm */
    float *cs = (float *)(smem + (norm ? nwarps * HD : 0)), *sn = cs + (size_t)tc * half;
    const int h = blockIdx.y * nwarps + warp, active = h < NQK;
    const T *w = active ? (h < NH ? qw : kw) : nullptr;
    float wa[KMAX], wb[KMAX], we = 0.0f;
    double da[KMAX], db[KMAX], de = 0.0;

#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        const int i = lane + 32 * k;
        da[k] = db[k] = 0.0;
        if (w && i < half) {
            wa[k] = to_f(w[i]);
            wb[k] = to_f(w[i + half]);
        }
    }
    if (w && (HD & 1))
        we = to_f(w[HD - 1]);
    for (int n0 = r0; n0 < r1; n0 += tc) {
        const int nt = r1 - n0 < tc ? r1 - n0 : tc;
        __syncthreads(); /* the previous tokens are done with cs, sn */
        for (int j = threadIdx.x; j < nt * half; j += blockDim.x) {
            const float ang = (float)((n0 + j / half) % Tlen) * inv.f[j % half];
            double sv, cv;
            sincos((double)ang, &sv, &cv);
            cs[j] = (float)cv;
            sn[j] = (float)sv;
        }
        __syncthreads();
        if (!active)
            continue;
        for (int t = 0; t < nt; t++) {
            const size_t off = (size_t)(n0 + t) * QKV + (size_t)h * HD;
            const float *ct = cs + (size_t)t * half, *st = sn + (size_t)t * half;
            const T *g = dout + off, *x = qkv + off;
            T *d = dqkv + off;
            float ga[KMAX], gb[KMAX], ge = 0.0f;
#pragma unroll
            for (int k = 0; k < KMAX; k++) {
                const int i = lane + 32 * k;
                if (i < half) {
                    const float a = to_f(g[i]), b = to_f(g[i + half]);
                    ga[k] = a * ct[i] + b * st[i];
                    gb[k] = b * ct[i] - a * st[i];
                }
            }
            if ((HD & 1) && lane == 0)
                ge = to_f(g[HD - 1]);
            if (!w) {
#pragma unroll
                for (int k = 0; k < KMAX; k++) {
                    const int i = lane + 32 * k;
                    if (i < half) {
                        from_f(&d[i], ga[k]);
                        from_f(&d[i + half], gb[k]);
                    }
                }
                if ((HD & 1) && lane == 0)
                    d[HD - 1] = g[HD - 1];
                continue;
            }
            float xa[KMAX], xb[KMAX], xe = 0.0f;
            double dot = 0.0;
#pragma unroll
            for (int k = 0; k < KMAX; k++) {
                const int i = lane + 32 * k;
                if (i < half) {
                    xa[k] = to_f(x[i]);
                    xb[k] = to_f(x[i + half]);
                    dot += (double)ga[k] * wa[k] * xa[k];
                    dot += (double)gb[k] * wb[k] * xb[k];
                }
            }
            if ((HD & 1) && lane == 0) {
                xe = to_f(x[HD - 1]);
                dot += (double)ge * we * xe;
            }
            dot = warp_sum(dot);
            const float rs = rstd[(size_t)(n0 + t) * NQK + h];
            const float c = (float)((double)rs * rs * rs * dot / HD);
#pragma unroll
            for (int k = 0; k < KMAX; k++) {
                const int i = lane + 32 * k;
                if (i < half) {
                    da[k] += (double)(ga[k] * xa[k] * rs);
                    db[k] += (double)(gb[k] * xb[k] * rs);
                    from_f(&d[i], rs * wa[k] * ga[k] - c * xa[k]);
                    from_f(&d[i + half], rs * wb[k] * gb[k] - c * xb[k]);
                }
            }
            if ((HD & 1) && lane == 0) {
                de += (double)(ge * xe * rs);
                from_f(&d[HD - 1], rs * we * ge - c * xe);
            }
        }
    }
    if (norm) {
        double *aw = acc + (size_t)warp * HD;
#pragma unroll
        for (int k = 0; k < KMAX; k++) {
            const int i = lane + 32 * k;
            if (i < half) {
                aw[i] = w ? da[k] : 0.0;
                aw[i + half] = w ? db[k] : 0.0;
            }
        }
        if ((HD & 1) && lane == 0)
            aw[HD - 1] = w ? de : 0.0;
        __syncthreads();
        for (int t = threadIdx.x; t < 2 * HD; t += blockDim.x) {
            const int isk = t >= HD, i = t - (isk ? HD : 0);
            double sum = 0.0;
            for (int wp = 0; wp < nwarps; wp++) {
                const int hh = blockIdx.y * nwarps + wp;
                if (hh < NQK && (hh >= NH) == isk)
                    sum += acc[(size_t)wp * HD + i];
            }
            part[((size_t)blockIdx.y * Gx + blockIdx.x) * 2 * HD + t] = sum;
        }
    }
}

/* dqw (HD) += sum over b < G of part[b][0, HD), dkw (HD) += of part[b][HD, 2 HD); fixed order. */
static __global__ void colsum2_kernel(float *__restrict__ dqw, float *__restrict__ dkw,
                                      const double *__restrict__ part, int G, int HD)
{
    __shared__ double sm[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x, D = 2 * HD;
    double t = 0.0;

    if (c < D)
        for (int b = threadIdx.y; b < G; b += 32)
            t += part[(size_t)b * D + c];
    sm[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && c < D) {
        double u = 0.0;
        for (int k = 0; k < 32; k++)
            u += sm[k][threadIdx.x];
        float *dst = c < HD ? dqw + c : dkw + (c - HD);
        *dst = (float)((double)*dst + u);
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
 * x c + p s.  The scalar kernels above take every other shape; both compute each element with the
 * same fp32 expressions. */

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

/* cos, sin and -sin of the fp32 angle pos * inv_freq[i], pos = (n0 + t) % Tlen, at [t half + i]
 * for the nt tokens from n0: with the sign in the table, either half's rotation reads x c + p s */
static __device__ __forceinline__ void rope_rows(float *cs, float *sn, float *snm,
                                                 const struct sdp_cuda_inv_freq &inv, int n0,
                                                 int nt, int Tlen, int half)
{
    for (int q = threadIdx.x; q < nt * half; q += blockDim.x) {
        const float ang = (float)((n0 + q / half) % Tlen) * inv.f[q % half];
        double sv, cv;
        sincos((double)ang, &sv, &cv);
        cs[q] = (float)cv;
        sn[q] = (float)sv;
        snm[q] = -(float)sv;
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

/* forward: block b takes the tokens [b TPB, (b + 1) TPB), TPB = fwd_vec_tokens */
template <typename T, int LPH>
static __global__ void __launch_bounds__(fwd_vec_threads)
    qknorm_rope_fwd_vec_kernel(T *__restrict__ out, float *__restrict__ rstd,
                               const T *__restrict__ qkv, const T *__restrict__ qw,
                               const T *__restrict__ kw, const struct sdp_cuda_inv_freq inv, int N,
                               int Tlen, int NH, int NKV, float eps)
{
    constexpr int EPL = vec16<T>::EPL, HD = EPL * LPH, half = HD / 2, U = vec_pairs;
    constexpr int TPB = fwd_vec_tokens;
    __shared__ float cs[TPB * half], sn[TPB * half], snm[TPB * half], ws[2 * HD];
    const int NQK = NH + NKV, slots = blockDim.x / LPH, n0 = blockIdx.x * TPB;
    const int nt = N - n0 < TPB ? N - n0 : TPB, nqk = NQK > 0 ? NQK : 1;
    const size_t QKV = (size_t)(NQK + NKV) * HD;
    const int j = threadIdx.x % LPH, slot = threadIdx.x / LPH, up = j >= LPH / 2;
    const int i0 = j * EPL, ci = i0 - (up ? half : 0);
    const int P = nt * NQK, step = slots * U, step_t = step / nqk, step_h = step % nqk;
    int t[U], h[U];

    copy_v_rows(out, qkv, n0, n0 + nt, QKV, NQK * HD, NKV * HD / EPL);
    rope_rows(cs, sn, snm, inv, n0, nt, Tlen, half);
    if (qw)
        for (int c = threadIdx.x; c < 2 * HD; c += blockDim.x)
            ws[c] = to_f(c < HD ? qw[c] : kw[c - HD]);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < U; u++)
        pair_at(t[u], h[u], slot + u * slots, nqk);
    for (int base = 0; base < P; base += step) { /* uniform trip count: shuffles need it */
        uint4 xr[U];
        size_t off[U];
        int on[U];
#pragma unroll
        for (int u = 0; u < U; u++) { /* past the end, a pair of token n0 is loaded again */
            on[u] = t[u] < nt;
            off[u] = (size_t)(n0 + (on[u] ? t[u] : 0)) * QKV + (size_t)h[u] * HD + i0;
            xr[u] = ld16(qkv + off[u]);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float x[EPL], p[EPL], y[EPL];
            unpack(x, xr[u]);
            if (qw) { /* the norm: the same for every head of the block */
                double ss = 0.0;
#pragma unroll
                for (int k = 0; k < EPL; k++)
                    ss += (double)x[k] * x[k];
                ss = head_sum<LPH>(ss);
                const float rs = (float)(1.0 / sqrt(ss / HD + (double)eps));
                const float *wv = ws + (h[u] < NH ? 0 : HD) + i0;
                if (on[u] && j == 0)
                    rstd[(size_t)(n0 + t[u]) * NQK + h[u]] = rs;
#pragma unroll
                for (int k = 0; k < EPL; k++)
                    x[k] = (x[k] * rs) * wv[k];
            }
            partner<LPH, EPL>(p, x);
            const int tt = on[u] ? t[u] : 0;
            const float *ct = cs + tt * half + ci, *st = (up ? sn : snm) + tt * half + ci;
#pragma unroll
            for (int k = 0; k < EPL; k++) /* ya = a c - b s, yb = b c + a s */
                y[k] = x[k] * ct[k] + p[k] * st[k];
            if (on[u])
                st16(out + off[u], pack(y));
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            pair_next(t[u], h[u], step_t, step_h, nqk);
    }
}

/* backward: block b takes the tokens [b N / Gx, (b + 1) N / Gx), at most tc (the launcher's Gx),
 * copies their v part, then runs through their (token, q head) pairs and then their (token, k
 * head) pairs (without the norm, one run of all heads).  A lane keeps its EPL columns' dw sums of
 * the current run in registers (EPL doubles, not 2 EPL); at the end of a run the block adds its
 * slots' sums in slot order into part[b] (2 HD doubles: q then k).  The partner half comes over as
 * the raw 16-byte word; the norm weights sit in shared memory in double as well, so that
 * (double) w costs no conversion a pair.  256 threads of at most 64 registers: 4 blocks an SM. */
template <typename T, int LPH>
static __global__ void __launch_bounds__(bwd_vec_threads, 4)
    qknorm_rope_bwd_vec_kernel(T *__restrict__ dqkv, double *__restrict__ part,
                               const T *__restrict__ dout, const T *__restrict__ qkv,
                               const T *__restrict__ qw, const T *__restrict__ kw,
                               const float *__restrict__ rstd, const struct sdp_cuda_inv_freq inv,
                               int N, int Tlen, int NH, int NKV, int tc)
{
    constexpr int EPL = vec16<T>::EPL, HD = EPL * LPH, half = HD / 2, U = vec_pairs;
    extern __shared__ double smem[];
    const int NQK = NH + NKV, Gx = gridDim.x, slots = blockDim.x / LPH;
    const size_t QKV = (size_t)(NQK + NKV) * HD;
    const int j = threadIdx.x % LPH, slot = threadIdx.x / LPH, up = j >= LPH / 2;
    const int i0 = j * EPL, ci = i0 - (up ? half : 0);
    const int r0 = (int)((long long)blockIdx.x * N / Gx);
    const int nt = (int)((long long)(blockIdx.x + 1) * N / Gx) - r0;
    const int norm = qw != nullptr;
    float *cs = (float *)smem, *sn = cs + (size_t)tc * half, *snm = sn + (size_t)tc * half;
    double *wd = smem + (3 * (size_t)tc * half + 3) / 4 * 2; /* 16-byte aligned, 2 HD: q, k */
    double *sums = wd + 2 * HD;                              /* slots x HD (when norm) */
    float *wsf = (float *)(sums + (size_t)slots * HD);       /* 2 HD: the weights in float */

    copy_v_rows(dqkv, dout, r0, r0 + nt, QKV, NQK * HD, NKV * HD / EPL);
    rope_rows(cs, sn, snm, inv, r0, nt, Tlen, half);
    if (norm)
        for (int c = threadIdx.x; c < 2 * HD; c += blockDim.x) {
            wsf[c] = to_f(c < HD ? qw[c] : kw[c - HD]);
            wd[c] = (double)wsf[c];
        }
    __syncthreads();
    for (int run = 0; run < (norm ? 2 : 1); run++) {
        const int hb = run ? NH : 0, nh = norm ? (run ? NKV : NH) : NQK, nhd = nh > 0 ? nh : 1;
        const int P = nt * nh, step = slots * U, step_t = step / nhd, step_h = step % nhd;
        const double *wdr = wd + (run ? HD : 0) + i0;
        const float *wf = wsf + (run ? HD : 0) + i0;
        double acc[EPL];
        int t[U], h[U];
#pragma unroll
        for (int k = 0; k < EPL; k++)
            acc[k] = 0.0;
#pragma unroll
        for (int u = 0; u < U; u++)
            pair_at(t[u], h[u], slot + u * slots, nhd);
        for (int base = 0; base < P; base += step) { /* uniform trip count: shuffles need it */
            uint4 g[U], x[U];
            float rs[U];
            size_t off[U];
            int on[U];
#pragma unroll
            for (int u = 0; u < U; u++) { /* past the end, a pair of token r0 is loaded again */
                on[u] = t[u] < nt;
                const unsigned n = (unsigned)(r0 + (on[u] ? t[u] : 0));
                off[u] = (size_t)n * (unsigned)QKV + (unsigned)((hb + h[u]) * HD + i0);
                g[u] = ld16(dout + off[u]);
                x[u] = norm ? ld16(qkv + off[u]) : g[u];
                rs[u] = norm ? rstd[(size_t)n * NQK + hb + h[u]] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const uint4 pw = partner_raw<LPH>(g[u]);
                const int tt = on[u] ? t[u] : 0;
                const float *ct = cs + tt * half + ci, *st = (up ? snm : sn) + tt * half + ci;
                float gf[EPL], pf[EPL], gu[EPL], xf[EPL];
                unpack(gf, g[u]);
                unpack(pf, pw);
#pragma unroll
                for (int k = 0; k < EPL; k++) /* ga = a c + b s, gb = b c - a s */
                    gu[k] = gf[k] * ct[k] + pf[k] * st[k];
                if (!norm) {
                    if (on[u])
                        st16(dqkv + off[u], pack(gu));
                    continue;
                }
                unpack(xf, x[u]);
                double dot = 0.0;
#pragma unroll
                for (int k = 0; k < EPL; k++)
                    dot += (double)gu[k] * wdr[k] * xf[k];
                dot = head_sum<LPH>(dot);
                if (!on[u])
                    continue;
                const float r = rs[u];
                const float c = (float)((double)r * r * r * dot / HD);
                float d[EPL];
#pragma unroll
                for (int k = 0; k < EPL; k++) {
                    acc[k] += (double)(gu[k] * xf[k] * r);
                    d[k] = r * wf[k] * gu[k] - c * xf[k];
                }
                st16(dqkv + off[u], pack(d));
            }
#pragma unroll
            for (int u = 0; u < U; u++)
                pair_next(t[u], h[u], step_t, step_h, nhd);
        }
        if (!norm)
            break;
#pragma unroll
        for (int k = 0; k < EPL; k++)
            sums[(size_t)slot * HD + i0 + k] = acc[k];
        __syncthreads();
        for (int c = threadIdx.x; c < HD; c += blockDim.x) {
            double sum = 0.0;
            for (int sl = 0; sl < slots; sl++)
                sum += sums[(size_t)sl * HD + c];
            part[(size_t)blockIdx.x * 2 * HD + (run ? HD : 0) + c] = sum;
        }
        __syncthreads(); /* the k run reuses sums */
    }
}

/* ---- launchers ---- */

static const int fwd_threads = 256;

/* token blocks of the backward: a function of N alone, so the summation order is fixed for a
 * shape */
static int bwd_blocks(int N)
{
    return N < 1024 ? N : 1024;
}

static int bwd_warps(int HD)
{
    return HD > 256 ? 4 : 8; /* keeps the shared dw sums and cos/sin within 32 KiB */
}

/* tokens whose cos/sin sit in shared memory at once (at most 2048 (token, i) pairs: 16 KiB, the
 * vector backward's -sin 8 more) */
static int bwd_tc(int HD)
{
    return HD / 2 > 0 ? 2048 / (HD / 2) : 2048;
}

/* token blocks of the vector backward, whose tokens' cos/sin sit in shared memory all at once:
 * bwd_blocks(N) unless that leaves a block more than bwd_tc(HD) tokens; a function of the shape */
static int bwd_vec_blocks(int N, int HD)
{
    const int G = bwd_blocks(N), tc = bwd_tc(HD);
    return (N + G - 1) / G <= tc ? G : (N + tc - 1) / tc;
}

/* KMAX: pairs per lane, a power of two >= HD / 64 (HD / 2 <= SDP_CUDA_MAX_HALF_HD = 256) */
static int pick_k(int HD)
{
    int k = 1;
    while (k < SDP_CUDA_MAX_HALF_HD / 32 && 32 * k < HD / 2)
        k *= 2;
    return k;
}

#define SDP_K_DISPATCH(k, KERNEL, T, grid, threads, smem, s, ...)                                  \
    do {                                                                                           \
        switch (k) {                                                                               \
        case 1:                                                                                    \
            KERNEL<T, 1><<<grid, threads, smem, s>>>(__VA_ARGS__);                                 \
            break;                                                                                 \
        case 2:                                                                                    \
            KERNEL<T, 2><<<grid, threads, smem, s>>>(__VA_ARGS__);                                 \
            break;                                                                                 \
        case 4:                                                                                    \
            KERNEL<T, 4><<<grid, threads, smem, s>>>(__VA_ARGS__);                                 \
            break;                                                                                 \
        default:                                                                                   \
            KERNEL<T, 8><<<grid, threads, smem, s>>>(__VA_ARGS__);                                 \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

static int groups(int nqk, int nwarps)
{
    return (nqk + nwarps - 1) / nwarps;
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

/* The vector forward when the shape and pointers allow it; 0: use the scalar kernel. */
template <typename T>
static int fwd_vec(T *out, float *rstd, const T *qkv, const T *qw, const T *kw,
                   const struct sdp_cuda_inv_freq &inv, int N, int Tl, int NH, int NKV, int HD,
                   float eps, cudaStream_t s)
{
    const int lph = vec_lph<T>(HD);
    if (!lph || !al16(out) || !al16(qkv) || (qw == nullptr) != (kw == nullptr))
        return 0;
    const int G = (N + fwd_vec_tokens - 1) / fwd_vec_tokens;
    SDP_LPH_DISPATCH(lph, qknorm_rope_fwd_vec_kernel, T, G, fwd_vec_threads, 0, s, out, rstd, qkv,
                     qw, kw, inv, N, Tl, NH, NKV, eps);
    return 1;
}

/* The vector backward (then the dw column sums of its Gx partials); 0: use the scalar kernel. */
template <typename T>
static int bwd_vec(T *dqkv, float *dqw, float *dkw, const T *dout, const T *qkv, const T *qw,
                   const T *kw, const float *rstd, const struct sdp_cuda_inv_freq &inv, int N,
                   int Tl, int NH, int NKV, int HD, double *part, cudaStream_t s)
{
    const int lph = vec_lph<T>(HD);
    if (!lph || !al16(dqkv) || !al16(dout) || !al16(qkv) || (qw == nullptr) != (kw == nullptr))
        return 0;
    const int Gx = bwd_vec_blocks(N, HD), tc = bwd_tc(HD);
    const size_t tab = ((size_t)3 * tc * (HD / 2) + 3) / 4 * 16; /* cos, sin, -sin */
    const size_t wsum = (size_t)(2 * HD + bwd_vec_threads / lph * HD) * sizeof(double) +
                        (size_t)2 * HD * sizeof(float);
    const size_t smem = tab + (qw ? wsum : 0); /* <= 24 + 22 KiB: HD <= 256, tc HD / 2 <= 2048 */
    SDP_LPH_DISPATCH(lph, qknorm_rope_bwd_vec_kernel, T, Gx, bwd_vec_threads, smem, s, dqkv, part,
                     dout, qkv, qw, kw, rstd, inv, N, Tl, NH, NKV, tc);
    if (qw)
        colsum2_kernel<<<(2 * HD + 31) / 32, dim3(32, 32), 0, s>>>(dqw, dkw, part, Gx, HD);
    return 1;
}

extern "C" void sdp_cuda_qknorm_rope_fwd(void *out, float *rstd, const void *qkv,
                                         const void *qnorm_w, const void *knorm_w,
                                         struct sdp_cuda_inv_freq inv_freq, int N, int T, int NH,
                                         int NKV, int HD, float eps, int dt, cudaStream_t s)
{
    if (N <= 0 || HD <= 0 || T <= 0)
        return;
    const size_t esize = dt == SDP_CUDA_BF16 ? 2 : 4;
    const int vec16 = v_vec16(out, qkv, NH, NKV, HD, esize);
    if (dt == SDP_CUDA_BF16
            ? fwd_vec((uint16_t *)out, rstd, (const uint16_t *)qkv, (const uint16_t *)qnorm_w,
                      (const uint16_t *)knorm_w, inv_freq, N, T, NH, NKV, HD, eps, s)
            : fwd_vec((float *)out, rstd, (const float *)qkv, (const float *)qnorm_w,
                      (const float *)knorm_w, inv_freq, N, T, NH, NKV, HD, eps, s))
        return;
    if (dt == SDP_CUDA_BF16)
        qknorm_rope_fwd_kernel<uint16_t><<<N, fwd_threads, 0, s>>>(
            (uint16_t *)out, rstd, (const uint16_t *)qkv, (const uint16_t *)qnorm_w,
            (const uint16_t *)knorm_w, inv_freq, T, NH, NKV, HD, eps, vec16);
    else
        qknorm_rope_fwd_kernel<float><<<N, fwd_threads, 0, s>>>(
            (float *)out, rstd, (const float *)qkv, (const float *)qnorm_w, (const float *)knorm_w,
            inv_freq, T, NH, NKV, HD, eps, vec16);
}

extern "C" size_t sdp_cuda_qknorm_rope_bwd_ws(int N, int NH, int NKV, int HD)
{
    if (N <= 0 || HD <= 0)
        return 0;
    const size_t scalar = (size_t)bwd_blocks(N) * groups(NH + NKV, bwd_warps(HD));
    const size_t vec = (size_t)bwd_vec_blocks(N, HD); /* either dtype may take the vector path */
    return (scalar > vec ? scalar : vec) * 2 * (size_t)HD * sizeof(double);
}

extern "C" void sdp_cuda_qknorm_rope_bwd(void *dqkv, float *dqnorm_w, float *dknorm_w,
                                         const void *dout, const void *qkv, const void *qnorm_w,
                                         const void *knorm_w, const float *rstd,
                                         struct sdp_cuda_inv_freq inv_freq, int N, int T, int NH,
                                         int NKV, int HD, int dt, void *ws, cudaStream_t s)
{
    if (N <= 0 || HD <= 0 || T <= 0)
        return;
    const size_t esize = dt == SDP_CUDA_BF16 ? 2 : 4;
    const int vec16 = v_vec16(dqkv, dout, NH, NKV, HD, esize);
    if (dt == SDP_CUDA_BF16
            ? bwd_vec((uint16_t *)dqkv, dqnorm_w, dknorm_w, (const uint16_t *)dout,
                      (const uint16_t *)qkv, (const uint16_t *)qnorm_w, (const uint16_t *)knorm_w,
                      rstd, inv_freq, N, T, NH, NKV, HD, (double *)ws, s)
            : bwd_vec((float *)dqkv, dqnorm_w, dknorm_w, (const float *)dout, (const float *)qkv,
                      (const float *)qnorm_w, (const float *)knorm_w, rstd, inv_freq, N, T, NH, NKV,
                      HD, (double *)ws, s))
        return;
    const int Gx = bwd_blocks(N), nwarps = bwd_warps(HD), G = groups(NH + NKV, nwarps);
    const int tc = bwd_tc(HD);
    const size_t smem = (qnorm_w ? (size_t)nwarps * HD * sizeof(double) : 0) +
                        (size_t)tc * (HD / 2) * 2 * sizeof(float);
    const dim3 grid((unsigned)Gx, (unsigned)G + 1);
    double *part = (double *)ws;
    const int k = pick_k(HD);
    if (dt == SDP_CUDA_BF16)
        SDP_K_DISPATCH(k, qknorm_rope_bwd_kernel, uint16_t, grid, nwarps * 32, smem, s,
                       (uint16_t *)dqkv, part, (const uint16_t *)dout, (const uint16_t *)qkv,
                       (const uint16_t *)qnorm_w, (const uint16_t *)knorm_w, rstd, inv_freq, N, T,
                       NH, NKV, HD, tc, vec16);
    else
        SDP_K_DISPATCH(k, qknorm_rope_bwd_kernel, float, grid, nwarps * 32, smem, s, (float *)dqkv,
                       part, (const float *)dout, (const float *)qkv, (const float *)qnorm_w,
                       (const float *)knorm_w, rstd, inv_freq, N, T, NH, NKV, HD, tc, vec16);
    if (qnorm_w)
        colsum2_kernel<<<(2 * HD + 31) / 32, dim3(32, 32), 0, s>>>(dqnorm_w, dknorm_w, part, Gx * G,
                                                                   HD);
}
