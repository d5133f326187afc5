/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_scatter16 against a host loop of memcpy on random segment tables: rows of an
 * embedding-like vector (aligned runs, the 16-byte path), odd lengths and offsets (the 2-byte
 * path), more segments than one launch holds, and segments that leave gaps (whose contents must
 * stay as they were). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_cuda.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* segments of about `row` units, each after the first kept with probability 1/3, at `base` plus a
 * random shift (0 keeps them aligned); the table in tab, the packed length returned */
static int make_table(size_t *tab, int maxsegs, size_t n, size_t row, size_t shift, size_t *packed)
{
    int k = 0;
    size_t run = 0;
    for (size_t off = shift; off + row <= n && k < maxsegs; off += row) {
        if (k > 0 && next() % 3) /* the first always */
            continue;
        size_t len = row - (shift ? next() % 3 : 0);
        tab[3 * k] = off;
        tab[3 * k + 1] = run;
        tab[3 * k + 2] = len;
        run += len;
        k++;
    }
    *packed = run;
    return k;
}

static int check(const char *what, size_t n, size_t row, size_t shift)
{
    int maxsegs = (int)(n / row) + 1;
    size_t *tab = sdp_test_alloc((size_t)maxsegs * 3 * sizeof(size_t)), packed;
    int nsegs = make_table(tab, maxsegs, n, row, shift, &packed);
    uint16_t *dst = sdp_test_alloc(n * 2), *src = sdp_test_alloc(packed * 2 + 2),
             *want = sdp_test_alloc(n * 2), *got = sdp_test_alloc(n * 2), *d_dst, *d_src;
    size_t nbad = 0;
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)next();
    for (size_t i = 0; i < packed; i++)
        src[i] = (uint16_t)next();
    memcpy(want, dst, n * 2);
    for (int i = 0; i < nsegs; i++)
        memcpy(want + tab[3 * i], src + tab[3 * i + 1], tab[3 * i + 2] * 2);
    CK(cudaMalloc((void **)&d_dst, n * 2));
    CK(cudaMalloc((void **)&d_src, packed * 2 + 2));
    CK(cudaMemcpy(d_dst, dst, n * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_src, src, packed * 2 + 2, cudaMemcpyHostToDevice));
    sdp_cuda_scatter16(d_dst, d_src, tab, nsegs, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, d_dst, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        nbad += got[i] != want[i];
    printf("%-28s n=%-9zu segments %-6d packed %-9zu %s\n", what, n, nsegs, packed,
           nbad ? "DIFFERENT" : "identical");
    CK(cudaFree(d_dst));
    CK(cudaFree(d_src));
    free(tab);
    free(dst);
    free(src);
    free(want);
    free(got);
    return nbad == 0 && nsegs > 0;
}

int main(void)
{
    int ndev = 0, ok = 1;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    ok &= check("rows of 2560 bf16", (size_t)4 << 20, 2560, 0);
    ok &= check("rows of 5120 units (f32)", (size_t)8 << 20, 5120, 0);
    ok &= check("odd rows and offsets", 1000003, 37, 5);
    ok &= check("one short segment", 100, 97, 1);
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
