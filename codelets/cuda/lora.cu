// SPDX-License-Identifier: MIT
/* A LoRA adapter beside a frozen linear on the GPU (codelets/lora.c): five cuBLASLt GEMMs
 * (gemm_internal.h) and one kernel that scales the rank-r intermediate by s = alpha / r and rounds
 * it to the operands' dtype, since one GEMM takes both operands in one dtype.  Row-major (rows,
 * cols) operands are column-major (cols, rows) matrices: every product is computed transposed.
 * The accumulations into y and dx run in place (beta 1, C = D) in f32; in bf16 the product goes
 * to an fp32 buffer t and a kernel adds it, rounding once (cuBLASLt's in-place bf16 epilogue was
 * measured well beyond two roundings: sdp_cuda_matmul_fwd's note).  With dropout (PEFT's
 * lora_dropout, base/splitmix.h's mask) a kernel drops the input into dp->xd first, and the input
 * gradient goes through t and a kernel that applies the mask.  Never allocates or
 * synchronizes.  Test: tests/kernels/test_cuda_lora.c (fp64 oracle, f32 and bf16). */
#include <stdint.h>

#include <cuda_bf16.h>

#include "base/splitmix.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/gemm_internal.h"

/* out[i] = s * in[i] as dt (bf16: rounded to nearest even) */
__global__ void lora_scale_kernel(void *out, const float *in, size_t n, float s, int dt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    if (dt == SDP_CUDA_BF16)
        ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(s * in[i]);
    else
        ((float *)out)[i] = s * in[i];
}

/* y (M, n; row stride ldy) dt += t (M, n) f32, one rounding */
__global__ void lora_add_kernel(void *y, int ldy, const float *t, int M, int n, int dt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)M * n)
        return;
    size_t at = (i / n) * (size_t)ldy + i % n;
    if (dt == SDP_CUDA_BF16) {
        __nv_bfloat16 *p = (__nv_bfloat16 *)y + at;
        *p = __float2bfloat16_rn(__bfloat162float(*p) + t[i]);
    } else {
        ((float *)y)[at] += t[i];
    }
}

/* y (M, n; ldy) += op(A) op(B) as sdp_cuda_gemm_lt's m = n, n = M: in place in f32, through t in
 * bf16 */
static void gemm_add(cublasLtHandle_t lt, int transa, int transb, int n, int M, int k,
                     const void *a, int lda, const void *b, int ldb, void *y, int ldy, int dt,
                     float *t, void *ws, size_t ws_bytes, cudaStream_t st)
{
    if (dt != SDP_CUDA_BF16) {
        sdp_cuda_gemm_lt(lt, transa, transb, n, M, k, a, lda, b, ldb, 1.0f, y, y, ldy, dt, dt, ws,
                         ws_bytes, st);
        return;
    }
    sdp_cuda_gemm_lt(lt, transa, transb, n, M, k, a, lda, b, ldb, 0.0f, NULL, t, n, dt,
                     SDP_CUDA_F32, ws, ws_bytes, st);
    const int threads = 256;
    size_t total = (size_t)M * n;
    lora_add_kernel<<<(unsigned)((total + threads - 1) / threads), threads, 0, st>>>(y, ldy, t, M,
                                                                                     n, dt);
}

/* xd[i] = x[i] * scale as dt where element i of the mask is kept, else 0 */
__global__ void lora_dropout_kernel(void *xd, const void *x, size_t n, uint64_t key, uint32_t thr,
                                    float scale, int dt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int keep = sdp_dropout_keep(key, i, thr);
    if (dt == SDP_CUDA_BF16) {
        float v = __bfloat162float(((const __nv_bfloat16 *)x)[i]) * scale;
        ((__nv_bfloat16 *)xd)[i] = __float2bfloat16_rn(keep ? v : 0.0f);
    } else {
        ((float *)xd)[i] = keep ? ((const float *)x)[i] * scale : 0.0f;
    }
}

/* dx[i] (dt) += t[i] * scale where element i is kept, one rounding */
__global__ void lora_dropout_add_kernel(void *dx, const float *t, size_t n, uint64_t key,
                                        uint32_t thr, float scale, int dt)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || !sdp_dropout_keep(key, i, thr))
        return;
    if (dt == SDP_CUDA_BF16) {
        __nv_bfloat16 *p = (__nv_bfloat16 *)dx + i;
        *p = __float2bfloat16_rn(__bfloat162float(*p) + t[i] * scale);
    } else {
        ((float *)dx)[i] += t[i] * scale;
    }
}

/* x, or its dropped copy dp->xd */
static const void *dropped(const void *x, size_t n, int dt, const struct sdp_cuda_dropout *dp,
                           cudaStream_t st)
{
    const int threads = 256;
    if (!dp || !dp->thr)
        return x;
    lora_dropout_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, st>>>(
        dp->xd, x, n, dp->key, dp->thr, dp->scale, dt);
    return dp->xd;
}

static void scale_to(void *out, const float *in, size_t n, float s, int dt, cudaStream_t st)
{
    const int threads = 256;
    lora_scale_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, st>>>(out, in, n, s,
                                                                                   dt);
}

/* us (M, r) dt = s x (M, in) . A (r, in)^T, through u (M, r) f32 */
static void down(cublasLtHandle_t lt, const void *x, const void *a, int M, int in, int r, float s,
                 int dt, float *u, void *us, void *ws, size_t ws_bytes, cudaStream_t st)
{
    /* u^T (r, M) = A (in, r)^T . x^T (in, M) */
    sdp_cuda_gemm_lt(lt, 1, 0, r, M, in, a, in, x, in, 0.0f, NULL, u, r, dt, SDP_CUDA_F32, ws,
                     ws_bytes, st);
    scale_to(us, u, (size_t)M * r, s, dt, st);
}

extern "C" void sdp_cuda_lora_fwd(cublasLtHandle_t lt, void *y, int ldy, const void *x,
                                  const void *a, const void *b, int M, int in, int out, int r,
                                  float s, int dt, void *u, void *us, void *t, void *ws,
                                  size_t ws_bytes, cudaStream_t st,
                                  const struct sdp_cuda_dropout *dp)
{
    if (M <= 0 || in <= 0 || out <= 0 || r <= 0)
        return;
    x = dropped(x, (size_t)M * in, dt, dp, st);
    down(lt, x, a, M, in, r, s, dt, (float *)u, us, ws, ws_bytes, st);
    /* y^T (out, M) += B (r, out)^T . us^T (r, M) */
    gemm_add(lt, 1, 0, out, M, r, b, r, us, r, y, ldy, dt, (float *)t, ws, ws_bytes, st);
}

extern "C" void sdp_cuda_lora_bwd(cublasLtHandle_t lt, void *dx, const void *dy, int ldy,
                                  const void *x, const void *a, const void *b, float *ga, float *gb,
                                  int M, int in, int out, int r, float s, int dt, void *u, void *us,
                                  void *v, void *vs, void *ws, size_t ws_bytes, cudaStream_t st,
                                  const struct sdp_cuda_dropout *dp)
{
    if (M <= 0 || in <= 0 || out <= 0 || r <= 0)
        return;
    x = dropped(x, (size_t)M * in, dt, dp, st);
    down(lt, x, a, M, in, r, s, dt, (float *)u, us, ws, ws_bytes, st);
    /* v^T (r, M) = B^T (r, out) . dy^T (out, M): B's storage is the column-major (r, out) */
    sdp_cuda_gemm_lt(lt, 0, 0, r, M, out, b, r, dy, ldy, 0.0f, NULL, v, r, dt, SDP_CUDA_F32, ws,
                     ws_bytes, st);
    scale_to(vs, (const float *)v, (size_t)M * r, s, dt, st);
    /* dB^T (r, out) += us^T (r, M) . dy (M, out): dy's storage is dy^T (out, M), transposed */
    sdp_cuda_gemm_lt(lt, 0, 1, r, out, M, us, r, dy, ldy, 1.0f, gb, gb, r, dt, SDP_CUDA_F32, ws,
                     ws_bytes, st);
    /* dA^T (in, r) += x^T (in, M) . vs (M, r): vs's storage is vs^T (r, M), transposed */
    sdp_cuda_gemm_lt(lt, 0, 1, in, r, M, x, in, vs, r, 1.0f, ga, ga, in, dt, SDP_CUDA_F32, ws,
                     ws_bytes, st);
    /* dx^T (in, M) += A^T (in, r) . vs^T (r, M); t reuses v, read by then */
    if (!dp || !dp->thr) {
        gemm_add(lt, 0, 0, in, M, r, a, in, vs, r, dx, in, dt, (float *)v, ws, ws_bytes, st);
        return;
    }
    /* with dropout: t = A^T vs^T in f32, then dx += t * scale where kept */
    const int threads = 256;
    size_t n = (size_t)M * in;
    sdp_cuda_gemm_lt(lt, 0, 0, in, M, r, a, in, vs, r, 0.0f, NULL, v, in, dt, SDP_CUDA_F32, ws,
                     ws_bytes, st);
    lora_dropout_add_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, st>>>(
        dx, (const float *)v, n, dp->key, dp->thr, dp->scale, dt);
}
