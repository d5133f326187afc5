// SPDX-License-Identifier: MIT
/* Scatter of a packed buffer into segments of a vector on the GPU (param_put_rows and
 * param_put_early, codelets/param_copy.c): the rows an update of the tied embedding wrote, packed
 * on the host, go into the working copy the GPU keeps.  One block per segment; 16-byte copies
 * where both ends and the length allow them.  Enqueues only.
 * Test: tests/kernels/test_cuda_scatter.c (against a host loop of memcpy). */
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"

#define SEG_BATCH 256

struct seg_batch { /* passed by value: 3 KiB of kernel parameters */
    uint32_t dst[SEG_BATCH], src[SEG_BATCH], len[SEG_BATCH];
};

static __global__ void scatter16_kernel(uint16_t *__restrict__ dst,
                                        const uint16_t *__restrict__ src, size_t dbase,
                                        size_t sbase, const struct seg_batch b)
{
    uint16_t *d = dst + dbase + b.dst[blockIdx.x];
    const uint16_t *s = src + sbase + b.src[blockIdx.x];
    const uint32_t n = b.len[blockIdx.x];
    if ((((uintptr_t)d | (uintptr_t)s) % 16 == 0) && n % 8 == 0) {
        for (uint32_t v = threadIdx.x; v < n / 8; v += blockDim.x)
            reinterpret_cast<uint4 *>(d)[v] = reinterpret_cast<const uint4 *>(s)[v];
        return;
    }
    for (uint32_t j = threadIdx.x; j < n; j += blockDim.x)
        d[j] = s[j];
}

extern "C" void sdp_cuda_scatter16(uint16_t *dst, const uint16_t *src, const size_t *tab, int nsegs,
                                   cudaStream_t s)
{
    for (int i0 = 0; i0 < nsegs; i0 += SEG_BATCH) {
        int nb = nsegs - i0 < SEG_BATCH ? nsegs - i0 : SEG_BATCH;
        /* offsets relative to the batch's first segment, so that 32 bits hold them */
        size_t dbase = tab[3 * i0], sbase = tab[3 * i0 + 1];
        struct seg_batch b;
        for (int i = 0; i < nb; i++) {
            const size_t *t = tab + 3 * (size_t)(i0 + i);
            b.dst[i] = (uint32_t)(t[0] - dbase);
            b.src[i] = (uint32_t)(t[1] - sbase);
            b.len[i] = (uint32_t)t[2];
        }
        scatter16_kernel<<<nb, 256, 0, s>>>(dst, src, dbase, sbase, b);
    }
}
