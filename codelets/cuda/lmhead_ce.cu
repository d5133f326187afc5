// SPDX-License-Identifier: MIT
/* LM head fused with softmax cross-entropy on the GPU, blocked over tokens so the (N, V) logits
 * never exist whole: per block, fp32 logits by cuBLASLt into the workspace, one kernel turning each
 * row into its loss term and dlogits (written over the row it reads), then two cuBLASLt GEMMs for
 * dh and dw.  The loss is reduced in double in a fixed order (no atomics): bit-reproducible.
 * Never allocates or synchronizes.  Test: tests/kernels/test_cuda_lmhead_ce.c (vs the CPU oracle).
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

/* Workspace: logits block (R, V) f32 | per-row loss (N) double | per-row validity (N) double. */
static int clamp_rows(int N, int rows_per_block)
{
    return rows_per_block <= 0 || rows_per_block > N ? N : rows_per_block;
}

extern "C" size_t sdp_cuda_lmhead_ce_ws(int N, int C, int V, int rows_per_block)
{
    (void)C;
    if (N <= 0 || V <= 0)
        return 256;
    const int R = clamp_rows(N, rows_per_block);
    return align256((size_t)R * V * sizeof(float)) + 2 * align256((size_t)N * sizeof(double));
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

/* One CTA per row r of z (R, V) f32 (row stride V).  Loss term lse(z) - z[t] in double (exp in
 * fp32, each thread's partial sum in fp32, combined in double); then the row becomes
 * g = scale (softmax(z) - onehot(t)) as T, written from the row's start: for bf16 the dlogits
 * matrix has row stride 2V elements.  Each chunk of VEC * CE_THREADS elements is loaded, then a
 * barrier, then stored: a bf16 store of chunk j only overwrites fp32 elements of chunks <= j, all
 * loaded by then.  Targets outside [0, V) mark the row ignored: loss 0, g = 0. */
template <typename T, int VEC>
__global__ void __launch_bounds__(CE_THREADS)
    ce_rows_kernel(float *z_all, int V, const int32_t *targets, float scale, double *row_loss,
                   double *row_valid)
{
    __shared__ float shf[33];
    __shared__ double shd[32];
    __shared__ float zt;
    const int r = blockIdx.x;
    float *z = z_all + (size_t)r * V;
    T *g = reinterpret_cast<T *>(z);
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
        zt = z[t];

    /* pass 1: running max m and sum s of exp(z - m) per thread */
    float m = -INFINITY, s = 0.0f;
    for (int base = 0; base < V; base += step) {
        const int v0 = base + threadIdx.x * VEC;
        float x[VEC];
        if (VEC == 4 && v0 < V) {
            const float4 q = *reinterpret_cast<const float4 *>(z + v0);
            x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
        } else {
            for (int i = 0; i < VEC; i++)
                x[i] = v0 + i < V ? z[v0 + i] : -INFINITY;
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

    /* pass 2: g = scale softmax - scale onehot, stored over the row */
    for (int base = 0; base < V; base += step) {
        const int v0 = base + threadIdx.x * VEC;
        float x[VEC];
        if (VEC == 4 && v0 < V) {
            const float4 q = *reinterpret_cast<const float4 *>(z + v0);
            x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
        } else {
            for (int i = 0; i < VEC; i++)
                x[i] = v0 + i < V ? z[v0 + i] : 0.0f;
        }
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
    fprintf(stderr, "hint: size it with sdp_cuda_lmhead_ce_ws() with the same rows_per_block\n");
    abort();
}

extern "C" void sdp_cuda_lmhead_ce(cublasLtHandle_t lt, double *loss, void *dh, float *dw,
                                   const void *h, const void *w, const int32_t *targets, int N,
                                   int C, int V, float scale, int rows_per_block, int dt, void *ws,
                                   size_t ws_bytes, void *gemm_ws, size_t gemm_ws_bytes,
                                   cudaStream_t s)
{
    const size_t esz = dt == SDP_CUDA_BF16 ? 2 : 4;

    if (N <= 0 || V <= 0) {
        cudaMemsetAsync(loss, 0, 2 * sizeof(double), s);
        if (N > 0 && C > 0)
            cudaMemsetAsync(dh, 0, (size_t)N * C * esz, s);
        return;
    }
    const int R = clamp_rows(N, rows_per_block);
    const size_t need = sdp_cuda_lmhead_ce_ws(N, C, V, R);
    if (ws_bytes < need)
        ws_fail("workspace too small", ws_bytes, need);
    float *z = (float *)ws;
    double *row_loss = (double *)((char *)ws + align256((size_t)R * V * sizeof(float)));
    double *row_valid = row_loss + align256((size_t)N * sizeof(double)) / sizeof(double);
    /* dlogits (bs, V) as dt: f32 in place (ld V), bf16 from each row's start (ld 2V) */
    const int ldg = dt == SDP_CUDA_BF16 ? 2 * V : V;

    for (int n0 = 0; n0 < N; n0 += R) {
        const int bs = N - n0 < R ? N - n0 : R;
        const char *hb = (const char *)h + (size_t)n0 * C * esz;
        char *dhb = (char *)dh + (size_t)n0 * C * esz;

        /* logits^T (V, bs) f32 = w (C, V)^T . h_blk^T (C, bs), column-major */
        if (C > 0)
            sdp_cuda_gemm_lt(lt, 1, 0, V, bs, C, w, C, hb, C, 0.0f, NULL, z, V, dt, SDP_CUDA_F32,
                             gemm_ws, gemm_ws_bytes, s);
        else
            cudaMemsetAsync(z, 0, (size_t)bs * V * sizeof(float), s);

        if (dt == SDP_CUDA_BF16) {
            if (V % 4 == 0)
                ce_rows_kernel<__nv_bfloat16, 4><<<bs, CE_THREADS, 0, s>>>(
                    z, V, targets + n0, scale, row_loss + n0, row_valid + n0);
            else
                ce_rows_kernel<__nv_bfloat16, 1><<<bs, CE_THREADS, 0, s>>>(
                    z, V, targets + n0, scale, row_loss + n0, row_valid + n0);
        } else {
            if (V % 4 == 0)
                ce_rows_kernel<float, 4><<<bs, CE_THREADS, 0, s>>>(z, V, targets + n0, scale,
                                                                   row_loss + n0, row_valid + n0);
            else
                ce_rows_kernel<float, 1><<<bs, CE_THREADS, 0, s>>>(z, V, targets + n0, scale,
                                                                   row_loss + n0, row_valid + n0);
        }
        if (C <= 0)
            continue;
        /* dh_blk^T (C, bs) = w^T (C, V) . g^T (V, bs) */
        sdp_cuda_gemm_lt(lt, 0, 0, C, bs, V, w, C, z, ldg, 0.0f, NULL, dhb, C, dt, dt, gemm_ws,
                         gemm_ws_bytes, s);
        /* dw^T (C, V) += h_blk^T (C, bs) . g (bs, V), dw fp32 */
        sdp_cuda_gemm_lt(lt, 0, 1, C, V, bs, hb, C, z, ldg, 1.0f, dw, dw, C, dt, SDP_CUDA_F32,
                         gemm_ws, gemm_ws_bytes, s);
    }
    loss_reduce_kernel<<<1, RED_THREADS, 0, s>>>(loss, row_loss, row_valid, N);
}
