// SPDX-License-Identifier: MIT
/* Per-head q/k RMSNorm (when the norm weights are given) then Hugging Face rotate_half RoPE on the
 * fused qkv (N, QKV) activation, on the GPU; v passes through.  Same math as qknorm_rope_ref.c:
 * angle = (float)pos * inv_freq[i] in fp32, cos/sin of it in double rounded once, head sums in
 * double.  Where HD and the pointers allow 16-byte vectors (qwen3's HD 128: 16 lanes a head) each
 * lane holds 8 bf16 or 4 f32 of one half of a head; otherwise one warp per head, element by
 * element.  The backward writes per-block dqnorm/dknorm partials (double) to ws, reduced in a
 * fixed order by a second kernel.  Enqueues only.  H200, N 16384, bf16: forward 242 -> 136 us,
 * backward 429 -> 359 us with the vector paths.
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
 * away (one __shfl_xor).  The head's sums are butterflies over its LPH lanes.  The scalar kernels
 * above take every other shape; both compute each element with the same fp32 expressions. */

template <typename T> struct vec16 {
    static constexpr int EPL = 16 / (int)sizeof(T);
    union {
        uint4 u;
        T e[16 / sizeof(T)];
    };
};

template <typename T>
static __device__ __forceinline__ void load16(float (&f)[16 / sizeof(T)], const T *p)
{
    vec16<T> r;
    r.u = *reinterpret_cast<const uint4 *>(p);
#pragma unroll
    for (int k = 0; k < vec16<T>::EPL; k++)
        f[k] = to_f(r.e[k]);
}

/* EPL elements of w from element i: one 16-byte load when w is 16-byte aligned */
template <typename T>
static __device__ __forceinline__ void load_w(float (&f)[16 / sizeof(T)], const T *w, int i,
                                              int waligned)
{
    if (waligned) {
        load16<T>(f, w + i);
        return;
    }
#pragma unroll
    for (int k = 0; k < vec16<T>::EPL; k++)
        f[k] = to_f(w[i + k]);
}

template <typename T>
static __device__ __forceinline__ void store16(T *p, const float (&f)[16 / sizeof(T)])
{
    vec16<T> r;
#pragma unroll
    for (int k = 0; k < vec16<T>::EPL; k++)
        from_f(&r.e[k], f[k]);
    *reinterpret_cast<uint4 *>(p) = r.u;
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

/* the v part of token rows [n0, n1) from src to dst in 16-byte words, by the whole block */
template <typename T>
static __device__ __forceinline__ void copy_v_rows(T *dst, const T *src, int n0, int n1, size_t QKV,
                                                   int voff, int vwords)
{
    const int nw = (n1 - n0) * vwords;
    for (int j = threadIdx.x; j < nw; j += blockDim.x) {
        const size_t row = (size_t)(n0 + j / vwords) * QKV + voff;
        reinterpret_cast<uint4 *>(dst + row)[j % vwords] =
            reinterpret_cast<const uint4 *>(src + row)[j % vwords];
    }
}

/* forward: one block per token, blockDim / LPH heads at a time */
template <typename T, int LPH>
static __global__ void
qknorm_rope_fwd_vec_kernel(T *__restrict__ out, float *__restrict__ rstd, const T *__restrict__ qkv,
                           const T *__restrict__ qw, const T *__restrict__ kw,
                           const struct sdp_cuda_inv_freq inv, int Tlen, int NH, int NKV, float eps,
                           int waligned)
{
    constexpr int EPL = vec16<T>::EPL, HD = EPL * LPH, half = HD / 2;
    __shared__ float cs[half], sn[half];
    const int n = blockIdx.x, NQK = NH + NKV, slots = blockDim.x / LPH;
    const size_t QKV = (size_t)(NQK + NKV) * HD;
    const int j = threadIdx.x % LPH, up = j >= LPH / 2, i0 = j * EPL, ci = i0 - (up ? half : 0);
    const T *xrow = qkv + (size_t)n * QKV;
    T *yrow = out + (size_t)n * QKV;

    rope_table(cs, sn, inv, n % Tlen, half);
    __syncthreads();
    for (int base = 0; base < NQK; base += slots) { /* uniform trip count: shuffles need it */
        const int h = base + (int)threadIdx.x / LPH, on = h < NQK;
        const T *w = on ? (h < NH ? qw : kw) : nullptr;
        float x[EPL], wv[EPL], p[EPL], y[EPL];
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < EPL; k++)
            x[k] = 0.0f;
        if (on)
            load16<T>(x, xrow + (size_t)h * HD + i0);
        float rs = 1.0f;
        if (qw) { /* the norm: the same for every head of the block */
#pragma unroll
            for (int k = 0; k < EPL; k++)
                ss += (double)x[k] * x[k];
            ss = head_sum<LPH>(ss);
            rs = (float)(1.0 / sqrt(ss / HD + (double)eps));
            if (on) {
                if (j == 0)
                    rstd[(size_t)n * NQK + h] = rs;
                load_w<T>(wv, w, i0, waligned);
#pragma unroll
                for (int k = 0; k < EPL; k++)
                    x[k] = (x[k] * rs) * wv[k];
            }
        }
        partner<LPH, EPL>(p, x);
        if (!on)
            continue;
#pragma unroll
        for (int k = 0; k < EPL; k++) /* a: the first half, b: the second */
            y[k] =
                up ? x[k] * cs[ci + k] + p[k] * sn[ci + k] : x[k] * cs[ci + k] - p[k] * sn[ci + k];
        store16<T>(yrow + (size_t)h * HD + i0, y);
    }
    copy_v_rows(out, qkv, n, n + 1, QKV, NQK * HD, NKV * HD / EPL);
}

/* backward: block b takes the tokens [b N / Gx, (b + 1) N / Gx), tc at a time, and runs through
 * their (token, head) pairs blockDim / LPH at a time; each lane keeps its EPL columns' dw sums of
 * q and of k heads in registers, and the block adds its slots' sums in slot order into part[b]
 * (2 HD doubles: q then k). */
template <typename T, int LPH>
static __global__ void
qknorm_rope_bwd_vec_kernel(T *__restrict__ dqkv, double *__restrict__ part,
                           const T *__restrict__ dout, const T *__restrict__ qkv,
                           const T *__restrict__ qw, const T *__restrict__ kw,
                           const float *__restrict__ rstd, const struct sdp_cuda_inv_freq inv,
                           int N, int Tlen, int NH, int NKV, int tc, int waligned)
{
    constexpr int EPL = vec16<T>::EPL, HD = EPL * LPH, half = HD / 2;
    extern __shared__ double smem[];
    float *cs = (float *)smem, *sn = cs + (size_t)tc * half;
    const int NQK = NH + NKV, Gx = gridDim.x, slots = blockDim.x / LPH;
    const size_t QKV = (size_t)(NQK + NKV) * HD;
    const int j = threadIdx.x % LPH, slot = threadIdx.x / LPH, up = j >= LPH / 2;
    const int i0 = j * EPL, ci = i0 - (up ? half : 0);
    const int r0 = (int)((long long)blockIdx.x * N / Gx);
    const int r1 = (int)((long long)(blockIdx.x + 1) * N / Gx);
    const int norm = qw != nullptr;
    float wq[EPL], wk[EPL];
    double aq[EPL], ak[EPL];

#pragma unroll
    for (int k = 0; k < EPL; k++)
        aq[k] = ak[k] = 0.0;
    if (norm) {
        load_w<T>(wq, qw, i0, waligned);
        load_w<T>(wk, kw, i0, waligned);
    }
    for (int n0 = r0; n0 < r1; n0 += tc) {
        const int nt = r1 - n0 < tc ? r1 - n0 : tc;
        __syncthreads(); /* the previous tokens are done with cs, sn */
        for (int q = threadIdx.x; q < nt * half; q += blockDim.x) {
            const float ang = (float)((n0 + q / half) % Tlen) * inv.f[q % half];
            double sv, cv;
            sincos((double)ang, &sv, &cv);
            cs[q] = (float)cv;
            sn[q] = (float)sv;
        }
        __syncthreads();
        for (int base = 0; base < nt * NQK; base += slots) { /* uniform trip count */
            const int pr = base + slot, on = pr < nt * NQK;
            const int t = on ? pr / NQK : 0, h = on ? pr % NQK : 0, isk = h >= NH;
            const size_t off = (size_t)(n0 + t) * QKV + (size_t)h * HD + i0;
            const float *ct = cs + (size_t)t * half + ci, *st = sn + (size_t)t * half + ci;
            float g[EPL], p[EPL], gu[EPL], x[EPL];
#pragma unroll
            for (int k = 0; k < EPL; k++)
                g[k] = x[k] = 0.0f;
            if (on) {
                load16<T>(g, dout + off);
                if (norm)
                    load16<T>(x, qkv + off);
            }
            partner<LPH, EPL>(p, g);
#pragma unroll
            for (int k = 0; k < EPL; k++) /* the inverse rotation: ga = a c + b s, gb = b c - a s */
                gu[k] = up ? g[k] * ct[k] - p[k] * st[k] : g[k] * ct[k] + p[k] * st[k];
            if (!norm) {
                if (on)
                    store16<T>(dqkv + off, gu);
                continue;
            }
            double dot = 0.0;
#pragma unroll
            for (int k = 0; k < EPL; k++)
                dot += (double)gu[k] * (isk ? wk[k] : wq[k]) * x[k];
            dot = head_sum<LPH>(dot);
            if (!on)
                continue;
            const float rs = rstd[(size_t)(n0 + t) * NQK + h];
            const float c = (float)((double)rs * rs * rs * dot / HD);
            float d[EPL];
#pragma unroll
            for (int k = 0; k < EPL; k++) {
                const float wv = isk ? wk[k] : wq[k];
                const double a = (double)(gu[k] * x[k] * rs);
                if (isk)
                    ak[k] += a;
                else
                    aq[k] += a;
                d[k] = rs * wv * gu[k] - c * x[k];
            }
            store16<T>(dqkv + off, d);
        }
    }
    copy_v_rows(dqkv, dout, r0, r1, QKV, NQK * HD, NKV * HD / EPL);
    if (!norm)
        return;
    __syncthreads();    /* cs, sn are free: the slots' sums go there */
    double *acc = smem; /* slots x 2 HD */
#pragma unroll
    for (int k = 0; k < EPL; k++) {
        acc[(size_t)slot * 2 * HD + i0 + k] = aq[k];
        acc[(size_t)slot * 2 * HD + HD + i0 + k] = ak[k];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * HD; c += blockDim.x) {
        double sum = 0.0;
        for (int sl = 0; sl < slots; sl++)
            sum += acc[(size_t)sl * 2 * HD + c];
        part[(size_t)blockIdx.x * 2 * HD + c] = sum;
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

/* tokens whose cos/sin sit in shared memory at once (at most 2048 pairs, 16 KiB) */
static int bwd_tc(int HD)
{
    return HD / 2 > 0 ? 2048 / (HD / 2) : 2048;
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

static const int fwd_vec_threads = 128, bwd_vec_threads = 256;

/* The vector forward when the shape and pointers allow it; 0: use the scalar kernel. */
template <typename T>
static int fwd_vec(T *out, float *rstd, const T *qkv, const T *qw, const T *kw,
                   const struct sdp_cuda_inv_freq &inv, int N, int Tl, int NH, int NKV, int HD,
                   float eps, cudaStream_t s)
{
    const int lph = vec_lph<T>(HD);
    if (!lph || !al16(out) || !al16(qkv) || (qw == nullptr) != (kw == nullptr))
        return 0;
    const int wal = qw && al16(qw) && al16(kw);
    SDP_LPH_DISPATCH(lph, qknorm_rope_fwd_vec_kernel, T, N, fwd_vec_threads, 0, s, out, rstd, qkv,
                     qw, kw, inv, Tl, NH, NKV, eps, wal);
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
    const int wal = qw && al16(qw) && al16(kw), Gx = bwd_blocks(N), tc = bwd_tc(HD);
    const size_t tab = (size_t)tc * (HD / 2) * 2 * sizeof(float);
    const size_t sums = (size_t)(bwd_vec_threads / lph) * 2 * HD * sizeof(double);
    const size_t smem = tab > sums ? tab : sums;
    SDP_LPH_DISPATCH(lph, qknorm_rope_bwd_vec_kernel, T, Gx, bwd_vec_threads, smem, s, dqkv, part,
                     dout, qkv, qw, kw, rstd, inv, N, Tl, NH, NKV, tc, wal);
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
    return (size_t)bwd_blocks(N) * groups(NH + NKV, bwd_warps(HD)) * 2 * (size_t)HD *
           sizeof(double);
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
