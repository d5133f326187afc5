// SPDX-License-Identifier: MIT
/* AdamW on the GPU, element for element the operations of sdp_cpu_adamw_ref
 * (codelets/cpu/adamw_ref.c) in the same order, each rounded on its own (the _rn intrinsics: nvcc
 * never fuses them into an FMA), the same quiet NaN for a NaN result and the same bf16 rounding of
 * the working copy: p, m, v and the copy come out bit-identical to the CPU's. (The conversions:
 * codelets/cuda/storage.cuh.)  The clipping coefficient, when there is one, is read on the device
 * from the grad_norm result.  Enqueues only. Test: tests/kernels/test_cuda_adamw.c (bit for bit
 * against the CPU kernel). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

static __device__ __forceinline__ float canon_nan(float x)
{
    return isnan(x) ? __int_as_float(0x7fc00000) : x;
}

static __device__ __forceinline__ void store_work(void *work, int wdt, size_t i, float x)
{
    if (wdt == SDP_CUDA_BF16)
        from_f((uint16_t *)work + i, x);
    else
        from_f((float *)work + i, x);
}

static __global__ void adamw_kernel(float *__restrict__ p, const void *__restrict__ g, int gdt,
                                    float *__restrict__ m, float *__restrict__ v,
                                    void *__restrict__ work, int wdt, size_t n,
                                    struct sdp_cuda_adamw_consts c, const double *clip,
                                    int skip_nonfinite)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    float gscale = c.gscale;
    if (clip) {
        if (skip_nonfinite && !isfinite(clip[0])) {
            /* a non-finite gradient somewhere: p, m, v stay; the working copy is still written */
            for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
                store_work(work, wdt, i, p[i]);
            return;
        }
        gscale = (float)clip[1];
    }
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float graw =
            gdt == SDP_CUDA_BF16 ? to_f(((const uint16_t *)g)[i]) : to_f(((const float *)g)[i]);
        const float gi = __fmul_rn(graw, gscale);
        float pi = __fmul_rn(p[i], c.wd_mul);
        float mi = m[i];
        mi = c.lerp_small ? __fadd_rn(mi, __fmul_rn(c.w1, __fsub_rn(gi, mi)))
                          : __fsub_rn(gi, __fmul_rn(__fsub_rn(gi, mi), c.omw1));
        const float vi = __fadd_rn(__fmul_rn(v[i], c.b2), __fmul_rn(__fmul_rn(c.c2, gi), gi));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bc2_sqrt), c.eps);
        pi = canon_nan(__fadd_rn(pi, __fdiv_rn(__fmul_rn(c.nstep, mi), denom)));
        p[i] = pi;
        m[i] = canon_nan(mi);
        v[i] = canon_nan(vi);
        store_work(work, wdt, i, pi);
    }
}

extern "C" void sdp_cuda_adamw(float *p, const void *g, int gdt, float *m, float *v, void *work,
                               int wdt, size_t n, const struct sdp_cuda_adamw_consts *c,
                               const double *clip, int skip_nonfinite, cudaStream_t s)
{
    if (n == 0)
        return;
    const int threads = 256;
    const size_t blocks = (n + threads - 1) / threads;
    const int grid = (int)(blocks < 8192 ? blocks : 8192);
    adamw_kernel<<<grid, threads, 0, s>>>(p, g, gdt, m, v, work, wdt, n, *c, clip, skip_nonfinite);
}
