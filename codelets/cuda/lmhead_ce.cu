// SPDX-License-Identifier: MIT
/* LM head fused with softmax cross-entropy on the GPU, blocked over tokens so the (N, V) logits
 * never exist whole: per block, logits by cuBLASLt into the workspace (fp32 accumulation, stored
 * as zdt: f32, or for bf16 weights bf16 as a bf16 model's logits are), one kernel turning each
 * row into its loss term (fp32 exp, double sums) and dlogits (as the weights' dtype, written over
 * the row it reads), then two cuBLASLt GEMMs for dh and dw.  bf16 logits halve the block's bytes:
 * the same workspace holds twice the rows, and the kernel moves half the data.  The loss
 * is reduced in double in a fixed order (no atomics): bit-reproducible.  Never allocates or
 * synchronizes.  Test: tests/kernels/test_cuda_lmhead_ce.c (vs the CPU oracle).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_bf16.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/gemm_internal.h"

#define CE_THREADS  1024
#define RED_THREADS 1024

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Workspace: logits block (R, V) as zdt | per-row loss (N) double | per-row validity (N) double. */
static int clamp_rows(int N, int rows_per_block)
{
    return rows_per_block <= 0 || rows_per_block > N ? N : rows_per_block;
}

/* Bytes of one element of dtype dt. */
static size_t dt_size(int dt)
{
    return dt == SDP_CUDA_BF16 ? 2 : 4;
}

extern "C" size_t sdp_cuda_lmhead_ce_ws(int N, int C, int V, int rows_per_block, int zdt)
{
    (void)C;
    if (N <= 0 || V <= 0)
        return 256;
    const int R = clamp_rows(N, rows_per_block);
    return align256((size_t)R * V * dt_size(zdt)) + 2 * align256((size_t)N * sizeof(double));
}

/* ---- per-row softmax cross-entropy ---- */

__device__ __forceinline__ void store(float *p, float v)
{
    *p = v;
}

__device__ __forceinline__ void store(__nv_bfloat16 *p, float v)
{
    *p = __float2bfloat16_rn(v);
}

__device__ __forceinline__ float load(const float *p)
{
    return *p;
}

__device__ __forceinline__ float load(const __nv_bfloat16 *p)
{
    return __bfloat162float(*p);
}

/* VEC consecutive elements from p (16-byte aligned): one float4 or one 8 x bf16 load. */
template <int VEC> __device__ __forceinline__ void load_vec(float *x, const float *p)
{
    static_assert(VEC == 4, "f32 rows load 4 at a time");
    const float4 q = *reinterpret_cast<const float4 *>(p);
    x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
}

template <int VEC> __device__ __forceinline__ void load_vec(float *x, const __nv_bfloat16 *p)
{
    static_assert(VEC == 8, "bf16 rows load 8 at a time");
    const uint4 q = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *b = reinterpret_cast<const __nv_bfloat162 *>(&q);
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(b[i]);
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

/* Block-wide reductions over CE_THREADS threads, in a fixed order (warp shuffles, then warp 0). */
__device__ float block_max(float v, float *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : -INFINITY;
    if (threadIdx.x < 32)
        for (int o = 16; o > 0; o >>= 1)
            v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0)
        sh[32] = v;
    __syncthreads();
    return sh[32];
}

__device__ double block_sum(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.0;
    if (threadIdx.x < 32)
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
    return v; /* valid in thread 0 */
}

/* One CTA per row r of z (R, V) as TZ (row stride V).  Loss term lse(z) - z[t] in double (exp in
 * fp32, each thread's partial sum in fp32, combined in double); then the row becomes
 * g = scale (softmax(z) - onehot(t)) as TG, written from the row's start (row stride V for TG = TZ,
 * 2V bf16 elements over fp32 logits).  Same type: each element is stored where the thread that
 * computed it read it.  bf16 over fp32: each chunk of VEC * CE_THREADS elements is loaded, then a
 * barrier, then stored; a store of chunk j only overwrites elements of chunks <= j, all loaded by
 * then.  VEC > 1: vector loads of VEC elements (rows then start 16-byte aligned: V % VEC == 0).
 * Targets outside [0, V) mark the row ignored: loss 0, g = 0. */
template <typename TZ, typename TG, int VEC>
__global__ void __launch_bounds__(CE_THREADS)
    ce_rows_kernel(TZ *z_all, int V, const int32_t *targets, float scale, double *row_loss,
                   double *row_valid)
{
    __shared__ float shf[33];
    __shared__ double shd[32];
    __shared__ float zt;
    const int r = blockIdx.x;
    TZ *z = z_all + (size_t)r * V;
    TG *g = reinterpret_cast<TG *>(z);
    const int32_t t = targets[r];
    const int step = CE_THREADS * VEC;

    if (t < 0 || t >= V) {
        for (int v = threadIdx.x; v < V; v += CE_THREADS)
            store(g + v, 0.0f);
        if (threadIdx.x == 0)
            row_loss[r] = row_valid[r] = 0.0;
        return;
    }
    if (threadIdx.x == 0)
        zt = load(z + t);

    /* pass 1: running max m and sum s of exp(z - m) per thread */
    float m = -INFINITY, s = 0.0f;
    for (int base = 0; base < V; base += step) {
        const int v0 = base + threadIdx.x * VEC;
        float x[VEC];
        if constexpr (VEC > 1) {
            if (v0 < V)
                load_vec<VEC>(x, z + v0);
            else
                for (int i = 0; i < VEC; i++)
                    x[i] = -INFINITY;
        } else {
            x[0] = v0 < V ? load(z + v0) : -INFINITY;
        }
        for (int i = 0; i < VEC; i++) {
            if (x[i] > m) {
                s = s * expf(m - x[i]) + 1.0f;
                m = x[i];
            } else if (x[i] != -INFINITY) {
                s += expf(x[i] - m);
            }
        }
    }
    const float M = block_max(m, shf);
    const double S = block_sum(m == -INFINITY ? 0.0 : (double)s * exp((double)m - (double)M), shd);
    if (threadIdx.x == 0) {
        const double lse = (double)M + log(S);
        row_loss[r] = lse - (double)zt;
        row_valid[r] = 1.0;
        shd[0] = S;
    }
    __syncthreads();
    const float k = (float)((double)scale / shd[0]);

    /* pass 2: g = scale softmax - scale onehot */
    for (int base = 0; base < V; base += step) {
        const int v0 = base + threadIdx.x * VEC;
        float x[VEC];
        if constexpr (VEC > 1) {
            if (v0 < V)
                load_vec<VEC>(x, z + v0);
            else
                for (int i = 0; i < VEC; i++)
                    x[i] = 0.0f;
        } else {
            x[0] = v0 < V ? load(z + v0) : 0.0f;
        }
        if constexpr (sizeof(TG) != sizeof(TZ))
            __syncthreads();
        for (int i = 0; i < VEC; i++)
            if (v0 + i < V) {
                float p = expf(x[i] - M) * k;
                if (v0 + i == t)
                    p -= scale;
                store(g + v0 + i, p);
            }
    }
}

template <typename TZ, typename TG, int VEC>
static void ce_rows(void *z, int bs, int V, const int32_t *targets, float scale, double *row_loss,
                    double *row_valid, cudaStream_t s)
{
    if (V % VEC == 0)
        ce_rows_kernel<TZ, TG, VEC>
            <<<bs, CE_THREADS, 0, s>>>((TZ *)z, V, targets, scale, row_loss, row_valid);
    else
        ce_rows_kernel<TZ, TG, 1>
            <<<bs, CE_THREADS, 0, s>>>((TZ *)z, V, targets, scale, row_loss, row_valid);
}

/* loss[0] = sum of row_loss, loss[1] = sum of row_valid, each in a fixed order (one CTA). */
__global__ void __launch_bounds__(RED_THREADS)
    loss_reduce_kernel(double *loss, const double *row_loss, const double *row_valid, int N)
{
    __shared__ double sh[32];
    double a = 0.0, b = 0.0;

    for (int i = threadIdx.x; i < N; i += RED_THREADS) {
        a += row_loss[i];
        b += row_valid[i];
    }
    a = block_sum(a, sh);
    __syncthreads();
    b = block_sum(b, sh);
    if (threadIdx.x == 0) {
        loss[0] = a;
        loss[1] = b;
    }
}

/* ---- launcher ---- */

static void ws_fail(const char *what, size_t have, size_t need)
{
    fprintf(stderr, "[sdp][error][sdp_cuda_lmhead_ce@%s] %s: %zu bytes given, %zu needed\n",
            __FILE__, what, have, need);
    fprintf(stderr,
            "hint: size it with sdp_cuda_lmhead_ce_ws() with the same rows_per_block and zdt\n");
    abort();
}

extern "C" void sdp_cuda_lmhead_ce(cublasLtHandle_t lt, double *loss, void *dh, float *dw,
                                   const void *h, const void *w, const int32_t *targets, int N,
                                   int C, int V, float scale, int rows_per_block, int dt, int zdt,
                                   void *ws, size_t ws_bytes, void *gemm_ws, size_t gemm_ws_bytes,
                                   cudaStream_t s)
{
    const size_t esz = dt_size(dt);

    if (zdt == SDP_CUDA_BF16 && dt != SDP_CUDA_BF16) {
        fprintf(stderr, "[sdp][error][sdp_cuda_lmhead_ce@%s] bf16 logits of f32 weights\n",
                __FILE__);
        fprintf(stderr, "hint: f32 weights take f32 logits (zdt SDP_CUDA_F32)\n");
        abort();
    }
    if (N <= 0 || V <= 0) {
        cudaMemsetAsync(loss, 0, 2 * sizeof(double), s);
        if (N > 0 && C > 0)
            cudaMemsetAsync(dh, 0, (size_t)N * C * esz, s);
        return;
    }
    const int R = clamp_rows(N, rows_per_block);
    const size_t need = sdp_cuda_lmhead_ce_ws(N, C, V, R, zdt);
    if (ws_bytes < need)
        ws_fail("workspace too small", ws_bytes, need);
    void *z = ws; /* logits (bs, V) as zdt, then dlogits as dt from each row's start */
    double *row_loss = (double *)((char *)ws + align256((size_t)R * V * dt_size(zdt)));
    double *row_valid = row_loss + align256((size_t)N * sizeof(double)) / sizeof(double);
    const int ldg = (int)((size_t)V * dt_size(zdt) / esz);

    for (int n0 = 0; n0 < N; n0 += R) {
        const int bs = N - n0 < R ? N - n0 : R;
        const char *hb = (const char *)h + (size_t)n0 * C * esz;
        char *dhb = (char *)dh + (size_t)n0 * C * esz;

        /* logits^T (V, bs) = w (C, V)^T . h_blk^T (C, bs), column-major, fp32 accumulation */
        if (C > 0)
            sdp_cuda_gemm_lt(lt, 1, 0, V, bs, C, w, C, hb, C, 0.0f, NULL, z, V, dt, zdt, gemm_ws,
                             gemm_ws_bytes, s);
        else
            cudaMemsetAsync(z, 0, (size_t)bs * V * dt_size(zdt), s);

        if (zdt == SDP_CUDA_BF16)
            ce_rows<__nv_bfloat16, __nv_bfloat16, 8>(z, bs, V, targets + n0, scale, row_loss + n0,
                                                     row_valid + n0, s);
        else if (dt == SDP_CUDA_BF16)
            ce_rows<float, __nv_bfloat16, 4>(z, bs, V, targets + n0, scale, row_loss + n0,
                                             row_valid + n0, s);
        else
            ce_rows<float, float, 4>(z, bs, V, targets + n0, scale, row_loss + n0, row_valid + n0,
                                     s);
        if (C <= 0)
            continue;
        /* dh_blk^T (C, bs) = w^T (C, V) . g^T (V, bs) */
        sdp_cuda_gemm_lt(lt, 0, 0, C, bs, V, w, C, z, ldg, 0.0f, NULL, dhb, C, dt, dt, gemm_ws,
                         gemm_ws_bytes, s);
        /* dw^T (C, V) += h_blk^T (C, bs) . g (bs, V), dw fp32; none for a frozen head (LoRA) */
        if (dw)
            sdp_cuda_gemm_lt(lt, 0, 1, C, V, bs, hb, C, z, ldg, 1.0f, dw, dw, C, dt, SDP_CUDA_F32,
                             gemm_ws, gemm_ws_bytes, s);
    }
    loss_reduce_kernel<<<1, RED_THREADS, 0, s>>>(loss, row_loss, row_valid, N);
}
