// SPDX-License-Identifier: MIT
/* Backward of the per-head q/k RMSNorm + rotate_half RoPE (qknorm_rope_fwd.cu), on the GPU: the
 * inverse rotation, then the norm's backward.  Per-block dqnorm/dknorm partials (double) go to ws
 * and are reduced in a fixed order by a second kernel; the 16-byte vector kernel where HD and the
 * pointers allow, else one warp per head.  Enqueues only.
 * Test: tests/kernels/test_cuda_qknorm_rope.c (against sdp_cpu_qknorm_rope_*_ref). */
#include <stdint.h>

#include "codelets/cuda/qknorm_rope_internal.cuh"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

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
            const float ang = (float)rope_pos(inv, n0 + j / half, Tlen) * inv.f[j % half];
            double sv, cv;
            sincos((double)ang, &sv, &cv);
            cs[j] = (float)cv * inv.scale;
            sn[j] = (float)sv * inv.scale;
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
