// SPDX-License-Identifier: MIT
/* RMSNorm with the residual stream in its own dtype (train.residual_dtype fp32, autocast's
 * numerics): the norm reads x in the residual type TR and writes out in the activations' type T
 * (bf16, as autocast casts a norm's output for the next matmul); the backward reads dout (T) and
 * adds dx into the residual gradient dres (TR).  Same maths as rmsnorm.cu and rmsnorm_ref.c (row
 * sums in double, elementwise fp32), in plain strided loops: one row per block for the forward;
 * the backward's blocks own fixed row ranges and write dw partials (double) that a second kernel
 * sums in a fixed order, so dw is deterministic for given (R, D).  Enqueues only.
 * Test: tests/kernels/test_cuda_residual.c (fp64 oracle). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

#define RES_THREADS 256

/* The block's sum of v in a fixed order (butterfly in each warp, then warps in index order);
 * every thread gets it.  red: 32 doubles of shared memory, free again after the next barrier. */
static __device__ __forceinline__ double block_sum1(double v, double *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    double t = 0.0;
    for (int k = 0; k < (int)(blockDim.x + 31) / 32; k++)
        t += red[k];
    __syncthreads();
    return t;
}

/* out (R, D) T, rstd (R) f32 from x (R, D) TR and w (D) T; block r takes rows r, r + grid, ... */
template <typename TR, typename T>
static __global__ void __launch_bounds__(RES_THREADS)
    rmsnorm_fwd_res_kernel(T *__restrict__ out, float *__restrict__ rstd, const TR *__restrict__ x,
                           const T *__restrict__ w, int R, int D, float eps)
{
    __shared__ double red[32];
    for (int r = blockIdx.x; r < R; r += gridDim.x) {
        const TR *xr = x + (size_t)r * D;
        double ss = 0.0;
        for (int i = threadIdx.x; i < D; i += blockDim.x) {
            const float v = to_f(xr[i]);
            ss += (double)v * v;
        }
        ss = block_sum1(ss, red);
        const float rs = (float)(1.0 / sqrt(ss / D + (double)eps));
        if (threadIdx.x == 0)
            rstd[r] = rs;
        for (int i = threadIdx.x; i < D; i += blockDim.x)
            from_f(&out[(size_t)r * D + i], (to_f(xr[i]) * rs) * to_f(w[i]));
    }
}

/* dx (R, D) TR = [dres] + r w g - (r^3 / D) x sum_i g_i w_i x_i (rmsnorm_ref.c's derivation);
 * part[b] (D) double = sum over block b's rows of g x r.  dx may alias dres (each element is read
 * once, then written, by the same thread). */
template <typename TR, typename T>
static __global__ void __launch_bounds__(RES_THREADS)
    rmsnorm_bwd_res_kernel(TR *dx, double *__restrict__ part, const TR *dres,
                           const T *__restrict__ dout, const TR *__restrict__ x,
                           const T *__restrict__ w, const float *__restrict__ rstd, int R, int D)
{
    __shared__ double red[32];
    const int r0 = (int)((long long)blockIdx.x * R / gridDim.x);
    const int r1 = (int)((long long)(blockIdx.x + 1) * R / gridDim.x);
    double *pb = part + (size_t)blockIdx.x * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x)
        pb[i] = 0.0;
    for (int r = r0; r < r1; r++) {
        const size_t off = (size_t)r * D;
        const float rs = rstd[r];
        double dot = 0.0;
        for (int i = threadIdx.x; i < D; i += blockDim.x)
            dot += (double)to_f(dout[off + i]) * to_f(w[i]) * to_f(x[off + i]);
        dot = block_sum1(dot, red);
        const float c = (float)((double)rs * rs * rs * dot / D);
        for (int i = threadIdx.x; i < D; i += blockDim.x) {
            const float g = to_f(dout[off + i]), xx = to_f(x[off + i]);
            const float v = rs * to_f(w[i]) * g - c * xx;
            from_f(&dx[off + i], dres ? to_f(dres[off + i]) + v : v);
            pb[i] += (double)(g * xx * rs);
        }
    }
}

/* dw (D) += sum over b < G of part (G, D), b in increasing order: deterministic */
static __global__ void colsum_res_kernel(float *__restrict__ dw, const double *__restrict__ part,
                                         int G, int D)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D)
        return;
    double t = 0.0;
    for (int b = 0; b < G; b++)
        t += part[(size_t)b * D + c];
    dw[c] = (float)((double)dw[c] + t);
}

/* blocks of the backward: a function of R alone (at least 4 rows a block, at most 264) */
static int bwd_res_blocks(int R)
{
    const int g = (R + 3) / 4;
    return g < 264 ? g : 264;
}

static int fwd_res_blocks(int R)
{
    return R < 65535 ? R : 65535;
}

extern "C" void sdp_cuda_rmsnorm_fwd_res(void *out, float *rstd, const float *x, const void *w,
                                         int R, int D, float eps, int dt, cudaStream_t s)
{
    if (R <= 0 || D <= 0)
        return;
    if (dt == SDP_CUDA_BF16)
        rmsnorm_fwd_res_kernel<float, uint16_t><<<fwd_res_blocks(R), RES_THREADS, 0, s>>>(
            (uint16_t *)out, rstd, x, (const uint16_t *)w, R, D, eps);
    else
        rmsnorm_fwd_res_kernel<float, float><<<fwd_res_blocks(R), RES_THREADS, 0, s>>>(
            (float *)out, rstd, x, (const float *)w, R, D, eps);
}

extern "C" size_t sdp_cuda_rmsnorm_bwd_res_ws(int R, int D)
{
    if (R <= 0 || D <= 0)
        return 0;
    return (size_t)bwd_res_blocks(R) * (size_t)D * sizeof(double);
}

extern "C" void sdp_cuda_rmsnorm_bwd_res(float *dx, float *dw, const float *dres, const void *dout,
                                         const float *x, const void *w, const float *rstd, int R,
                                         int D, int dt, void *ws, cudaStream_t s)
{
    if (R <= 0 || D <= 0)
        return;
    const int G = bwd_res_blocks(R);
    if (dt == SDP_CUDA_BF16)
        rmsnorm_bwd_res_kernel<float, uint16_t><<<G, RES_THREADS, 0, s>>>(
            dx, (double *)ws, dres, (const uint16_t *)dout, x, (const uint16_t *)w, rstd, R, D);
    else
        rmsnorm_bwd_res_kernel<float, float><<<G, RES_THREADS, 0, s>>>(
            dx, (double *)ws, dres, (const float *)dout, x, (const float *)w, rstd, R, D);
    colsum_res_kernel<<<(D + 255) / 256, 256, 0, s>>>(dw, (const double *)ws, G, D);
}
