// SPDX-License-Identifier: MIT
/* Per-head q/k RMSNorm (when the norm weights are given) then Hugging Face rotate_half RoPE on the
 * fused qkv (N, QKV) activation, on the GPU, forward; v passes through.  Same math as
 * qknorm_rope_ref.c: angle = (float)pos * inv_freq[i] in fp32, cos/sin of it in double rounded
 * once, head sums in double.  The 16-byte vector kernel where HD and the pointers allow, else one
 * warp per head (bench/results/2026-12-02-h200-kernels.md).  Enqueues only.
 * Test: tests/kernels/test_cuda_qknorm_rope.c (against sdp_cpu_qknorm_rope_*_ref). */
#include <stdint.h>

#include "codelets/cuda/qknorm_rope_internal.cuh"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

/* cos/sin of the fp32 angle pos * inv_freq[i] for i < half, into shared memory */
static __device__ __forceinline__ void
rope_table(float *cs, float *sn, const struct sdp_cuda_inv_freq &inv, int pos, int half)
{
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float ang = (float)pos * inv.f[i];
        double sv, cv;
        sincos((double)ang, &sv, &cv);
        cs[i] = (float)cv * inv.scale;
        sn[i] = (float)sv * inv.scale;
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

    rope_table(cs, sn, inv, rope_pos(inv, n, Tlen), half);
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

/* ---- launchers ---- */

static const int fwd_threads = 256;

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
