// SPDX-License-Identifier: MIT
/* Per-head q/k RMSNorm (when the norm weights are given) then Hugging Face rotate_half RoPE on the
 * fused qkv (N, QKV) activation, on the GPU; v passes through.  Same math as qknorm_rope_ref.c:
 * angle = (float)pos * inv_freq[i] in fp32, cos/sin of it in double rounded once, head sums in
 * double.  One warp per head; the backward writes per-block dqnorm/dknorm partials (double) to ws,
 * reduced in a fixed order by a second kernel.  Enqueues only.
 * Test: tests/kernels/test_cuda_qknorm_rope.c (against sdp_cpu_qknorm_rope_*_ref). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"

/* ---- storage helpers: T is float or uint16_t (bf16 bits) ---- */

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
 * Block b takes tokens b, b + G, ...; acc (shared, nwarps x {q, k} x HD doubles) holds each warp's
 * dw sums, which the block adds in warp order into part[b] (2 HD doubles: q then k). */

template <typename T>
static __global__ void qknorm_rope_bwd_kernel(T *__restrict__ dqkv, double *__restrict__ part,
                                              const T *__restrict__ dout, const T *__restrict__ qkv,
                                              const T *__restrict__ qw, const T *__restrict__ kw,
                                              const float *__restrict__ rstd,
                                              const struct sdp_cuda_inv_freq inv, int N, int Tlen,
                                              int NH, int NKV, int HD, int vec16)
{
    extern __shared__ double acc[];
    __shared__ float cs[SDP_CUDA_MAX_HALF_HD], sn[SDP_CUDA_MAX_HALF_HD];
    const int half = HD / 2, NQK = NH + NKV;
    const size_t QKV = (size_t)(NQK + NKV) * HD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int norm = qw != nullptr;

    if (norm)
        for (int j = threadIdx.x; j < nwarps * 2 * HD; j += blockDim.x)
            acc[j] = 0.0;
    for (int n = blockIdx.x; n < N; n += gridDim.x) {
        __syncthreads(); /* the previous token is done with cs, sn */
        rope_table(cs, sn, inv, n % Tlen, half);
        __syncthreads();
        const T *grow = dout + (size_t)n * QKV, *xrow = qkv + (size_t)n * QKV;
        T *drow = dqkv + (size_t)n * QKV;
        for (int h = warp; h < NQK; h += nwarps) {
            const T *g = grow + (size_t)h * HD, *x = xrow + (size_t)h * HD;
            T *d = drow + (size_t)h * HD;
            const T *w = h < NH ? qw : kw;
            if (!w) {
                for (int i = lane; i < half; i += 32) {
                    const float a = to_f(g[i]), b = to_f(g[i + half]);
                    from_f(&d[i], a * cs[i] + b * sn[i]);
                    from_f(&d[i + half], b * cs[i] - a * sn[i]);
                }
                if ((HD & 1) && lane == 0)
                    d[HD - 1] = g[HD - 1];
                continue;
            }
            const float rs = rstd[(size_t)n * NQK + h];
            double dot = 0.0;
            for (int i = lane; i < half; i += 32) {
                const float a = to_f(g[i]), b = to_f(g[i + half]);
                const float ga = a * cs[i] + b * sn[i], gb = b * cs[i] - a * sn[i];
                dot += (double)ga * to_f(w[i]) * to_f(x[i]);
                dot += (double)gb * to_f(w[i + half]) * to_f(x[i + half]);
            }
            if ((HD & 1) && lane == 0)
                dot += (double)to_f(g[HD - 1]) * to_f(w[HD - 1]) * to_f(x[HD - 1]);
            dot = warp_sum(dot);
            const float c = (float)((double)rs * rs * rs * dot / HD);
            double *ac = acc + (size_t)(warp * 2 + (h < NH ? 0 : 1)) * HD;
            for (int i = lane; i < half; i += 32) {
                const float a = to_f(g[i]), b = to_f(g[i + half]);
                const float ga = a * cs[i] + b * sn[i], gb = b * cs[i] - a * sn[i];
                const float xa = to_f(x[i]), xb = to_f(x[i + half]);
                ac[i] += (double)(ga * xa * rs);
                ac[i + half] += (double)(gb * xb * rs);
                from_f(&d[i], rs * to_f(w[i]) * ga - c * xa);
                from_f(&d[i + half], rs * to_f(w[i + half]) * gb - c * xb);
            }
            if ((HD & 1) && lane == 0) {
                const float ge = to_f(g[HD - 1]), xe = to_f(x[HD - 1]);
                ac[HD - 1] += (double)(ge * xe * rs);
                from_f(&d[HD - 1], rs * to_f(w[HD - 1]) * ge - c * xe);
            }
        }
        copy_v(drow + (size_t)NQK * HD, grow + (size_t)NQK * HD, NKV * HD, vec16);
    }
    if (norm) {
        __syncthreads();
        for (int t = threadIdx.x; t < 2 * HD; t += blockDim.x) {
            double sum = 0.0;
            for (int wp = 0; wp < nwarps; wp++)
                sum += acc[(size_t)(wp * 2 + t / HD) * HD + t % HD];
            part[(size_t)blockIdx.x * 2 * HD + t] = sum;
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

/* ---- launchers ---- */

static const int fwd_threads = 256;

/* Blocks of the backward: a function of N alone, so the summation order is fixed for a shape. */
static int bwd_blocks(int N)
{
    return N < 1024 ? N : 1024;
}

static int bwd_warps(int HD)
{
    return HD > 256 ? 4 : 8; /* keeps the shared dw sums within 32 KiB */
}

/* v may be copied in 16-byte words when every row start and the v offset are 16-byte aligned */
static int v_vec16(const void *a, const void *b, int NH, int NKV, int HD, size_t esize)
{
    const size_t row = (size_t)(NH + 2 * NKV) * HD * esize, off = (size_t)(NH + NKV) * HD * esize;
    const size_t vbytes = (size_t)NKV * HD * esize;
    return (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 && row % 16 == 0 && off % 16 == 0 &&
           vbytes % 16 == 0;
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
    (void)NH;
    (void)NKV;
    if (N <= 0 || HD <= 0)
        return 0;
    return (size_t)bwd_blocks(N) * 2 * (size_t)HD * sizeof(double);
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
    const int G = bwd_blocks(N), nwarps = bwd_warps(HD);
    const size_t smem = qnorm_w ? (size_t)nwarps * 2 * HD * sizeof(double) : 0;
    double *part = (double *)ws;
    if (dt == SDP_CUDA_BF16)
        qknorm_rope_bwd_kernel<uint16_t><<<G, nwarps * 32, smem, s>>>(
            (uint16_t *)dqkv, part, (const uint16_t *)dout, (const uint16_t *)qkv,
            (const uint16_t *)qnorm_w, (const uint16_t *)knorm_w, rstd, inv_freq, N, T, NH, NKV, HD,
            vec16);
    else
        qknorm_rope_bwd_kernel<float><<<G, nwarps * 32, smem, s>>>(
            (float *)dqkv, part, (const float *)dout, (const float *)qkv, (const float *)qnorm_w,
            (const float *)knorm_w, rstd, inv_freq, N, T, NH, NKV, HD, vec16);
    if (qnorm_w)
        colsum2_kernel<<<(2 * HD + 31) / 32, dim3(32, 32), 0, s>>>(dqnorm_w, dknorm_w, part, G, HD);
}
