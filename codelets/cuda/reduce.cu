// SPDX-License-Identifier: MIT
/* out += in, fp32, for the reduction of data-parallel gradients (codelets/grad_reduce.c).
 * Enqueues only.  Test: tests/kernels/test_cuda_reduce.c. */
#include "codelets/cuda/sdp_cuda_kernels.h"

static __global__ void add_f32_kernel(float *__restrict__ out, const float *__restrict__ in,
                                      size_t n)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] += in[i];
}

extern "C" void sdp_cuda_add_f32(float *out, const float *in, size_t n, cudaStream_t s)
{
    const int threads = 256;
    size_t blocks = (n + threads - 1) / threads;
    if (n == 0)
        return;
    if (blocks > 4096)
        blocks = 4096;
    add_f32_kernel<<<(unsigned)blocks, threads, 0, s>>>(out, in, n);
}
