/* SPDX-License-Identifier: MIT */
/* Helpers of the CUDA kernel tests: error checks that fail the test, and host <-> device copies in
 * a storage dtype (bf16 via the CPU's round-to-nearest-even cast, so reference and GPU see the same
 * inputs).  Header-only; include after tests/lib/sdp_test.h. */
#ifndef SDP_TEST_CUDA_H
#define SDP_TEST_CUDA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d\nFAIL\n", cudaGetErrorString(e_), __FILE__, __LINE__);  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static inline size_t esize(int dt)
{
    return dt == SDP_CUDA_BF16 ? 2 : 4;
}

/* round x (n) to bf16 in place when dt is bf16: the reference then sees the GPU's inputs */
static inline void round_in(float *x, size_t n, int dt)
{
    if (dt == SDP_CUDA_BF16)
        for (size_t i = 0; i < n; i++)
            x[i] = sdp_bf16_to_f32(sdp_f32_to_bf16(x[i]));
}

/* a device copy of x (n) in storage dtype dt */
static inline void *upload(const float *x, size_t n, int dt)
{
    void *d;
    CK(cudaMalloc(&d, n * esize(dt) + 16));
    if (dt == SDP_CUDA_BF16) {
        uint16_t *h = sdp_test_alloc(n * 2 + 2);
        sdp_cpu_cast_bf16_ref(h, x, n);
        CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
        free(h);
    } else {
        CK(cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice));
    }
    return d;
}

static inline void download(float *x, const void *d, size_t n, int dt)
{
    if (dt == SDP_CUDA_BF16) {
        uint16_t *h = sdp_test_alloc(n * 2 + 2);
        CK(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
        sdp_cpu_bf16_to_f32_ref(x, h, n);
        free(h);
    } else {
        CK(cudaMemcpy(x, d, n * 4, cudaMemcpyDeviceToHost));
    }
}

static inline double *to_double(const float *x, size_t n)
{
    double *d = sdp_test_alloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static inline const char *dt_name(int dt)
{
    return dt == SDP_CUDA_BF16 ? "bf16" : "f32";
}

#endif
