/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_adamw against the CPU's sdp_cpu_adamw_ref / sdp_cpu_adamw_gbf16_ref bit for bit:
 * p, m, v and the working copy, for fp32 and bf16 gradients, bf16 and fp32 working copies, with
 * and without weight decay, both forms of the moment's lerp (beta1 0.9 and 0.3), the first and a
 * later step, on random data and on data salted with NaN (quiet, signalling, payloads), Inf,
 * denormals, zeros and huge values; then the clipping coefficient read on the device, and a
 * non-finite norm with skip_nonfinite (p, m, v unchanged, the working copy rewritten).  The
 * fp64 oracle of the update itself is tests/kernels/test_kernels_adamw.c. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_cuda.h"

static const uint32_t special_bits[] = {
    0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fa5a5a5, 0x7f800000, 0xff800000,
    0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x7f7fffff, 0xff7fffff, 0x00800000,
};
#define NSPECIAL (sizeof(special_bits) / sizeof(special_bits[0]))

/* x (n): uniform in [lo, hi), about 1 in 8 replaced by a special value when salt is set */
static void fill(struct sdp_rng *rng, float *x, size_t n, float lo, float hi, int salt)
{
    for (size_t i = 0; i < n; i++)
        x[i] = salt && sdp_rng_next(rng) % 8 == 0
                   ? sdp_f32_from_bits(special_bits[sdp_rng_next(rng) % NSPECIAL])
                   : sdp_rng_uniform(rng, lo, hi);
}

static size_t count_diff(const void *a, const void *b, size_t n, size_t es)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0;
    return bad;
}

static void *dup_to_device(const void *h, size_t bytes)
{
    void *d;
    CK(cudaMalloc(&d, bytes + 16));
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* One case: n elements; gbf16 / wbf16: bf16 gradient / working copy; clip: NULL or (norm, coef)
 * read on the device; skip: skip_nonfinite. */
static int check(const char *what, size_t n, int gbf16, int wbf16, int decay, double beta1,
                 int step, int salt, const double *clip, int skip)
{
    struct sdp_rng rng = { 0x5eed0000u + (uint64_t)n + 31u * (uint64_t)step };
    struct sdp_adamw_hp hp = { 1e-3f, (float)beta1, 0.95f, 1e-8f, 0.1f, 1.0f, step };
    float *p = sdp_test_alloc(n * 4), *m = sdp_test_alloc(n * 4), *v = sdp_test_alloc(n * 4),
          *g = sdp_test_alloc(n * 4), *wf = sdp_test_alloc(n * 4);
    uint16_t *gb = sdp_test_alloc(n * 2 + 2), *wb = sdp_test_alloc(n * 2 + 2);
    float *gp = sdp_test_alloc(n * 4), *gm = sdp_test_alloc(n * 4), *gv = sdp_test_alloc(n * 4);
    void *gw = sdp_test_alloc(n * 4);
    size_t bad;
    fill(&rng, p, n, -1.0f, 1.0f, salt);
    fill(&rng, m, n, -0.01f, 0.01f, salt);
    fill(&rng, v, n, 0.0f, 1e-4f, salt);
    fill(&rng, g, n, -0.1f, 0.1f, salt);
    for (size_t i = 0; i < n; i++)
        v[i] = isnan(v[i]) ? v[i] : fabsf(v[i]);
    sdp_cpu_cast_bf16_ref(gb, g, n);
    void *dp = dup_to_device(p, n * 4), *dm = dup_to_device(m, n * 4),
         *dv = dup_to_device(v, n * 4),
         *dg = gbf16 ? dup_to_device(gb, n * 2) : dup_to_device(g, n * 4), *dw,
         *dclip = clip ? dup_to_device(clip, 2 * sizeof(double)) : NULL;
    CK(cudaMalloc(&dw, n * 4 + 16));

    /* the CPU's reference */
    if (clip && skip && !isfinite(clip[0])) {
        if (wbf16)
            sdp_cpu_cast_bf16_ref(wb, p, n);
        else
            memcpy(wf, p, n * 4);
    } else {
        if (clip)
            hp.gscale = (float)clip[1];
        if (gbf16)
            sdp_cpu_adamw_gbf16_ref(p, gb, m, v, wbf16 ? wb : NULL, wbf16 ? NULL : wf, n, &hp,
                                    decay, 0);
        else
            sdp_cpu_adamw_ref(p, g, m, v, wbf16 ? wb : NULL, wbf16 ? NULL : wf, n, &hp, decay, 0);
        hp.gscale = 1.0f;
    }

    /* the GPU's */
    struct sdp_adamw_consts c;
    sdp_cpu_adamw_consts(&c, &hp, decay);
    struct sdp_cuda_adamw_consts cc = { c.wd_mul, c.w1,       c.omw1, c.b2,     c.c2,
                                        c.nstep,  c.bc2_sqrt, c.eps,  c.gscale, c.lerp_small };
    sdp_cuda_adamw(dp, dg, gbf16 ? SDP_CUDA_BF16 : SDP_CUDA_F32, dm, dv, dw,
                   wbf16 ? SDP_CUDA_BF16 : SDP_CUDA_F32, n, &cc, dclip, skip, 0);
    CK(cudaGetLastError());
    CK(cudaMemcpy(gp, dp, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gm, dm, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gv, dv, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gw, dw, n * (wbf16 ? 2 : 4), cudaMemcpyDeviceToHost));
    bad = count_diff(gp, p, n, 4) + count_diff(gm, m, n, 4) + count_diff(gv, v, n, 4) +
          (wbf16 ? count_diff(gw, wb, n, 2) : count_diff(gw, wf, n, 4));
    printf("%-44s n=%-8zu %s\n", what, n, bad ? "DIFFERENT" : "identical");
    if (bad)
        printf("  %zu elements differ\n", bad);
    CK(cudaFree(dp));
    CK(cudaFree(dm));
    CK(cudaFree(dv));
    CK(cudaFree(dg));
    CK(cudaFree(dw));
    if (dclip)
        CK(cudaFree(dclip));
    free(p);
    free(m);
    free(v);
    free(g);
    free(wf);
    free(gb);
    free(wb);
    free(gp);
    free(gm);
    free(gv);
    free(gw);
    return bad == 0;
}

int main(void)
{
    int ndev = 0, ok = 1;
    const double clip[2] = { 3.5, 0.25 }, nan_norm[2] = { NAN, 1.0 };
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    ok &= check("bf16 gradient, bf16 copy, decay", (size_t)4 << 20, 1, 1, 1, 0.9, 1, 0, NULL, 0);
    ok &= check("bf16 gradient, bf16 copy, no decay, step 7", 1000003, 1, 1, 0, 0.9, 7, 0, NULL, 0);
    ok &= check("fp32 gradient, fp32 copy, decay, step 3", 1000003, 0, 0, 1, 0.9, 3, 0, NULL, 0);
    ok &= check("fp32 gradient, bf16 copy, beta1 0.3", 65537, 0, 1, 1, 0.3, 2, 0, NULL, 0);
    ok &= check("salted, bf16 gradient, bf16 copy", 1000003, 1, 1, 1, 0.9, 5, 1, NULL, 0);
    ok &=
        check("salted, fp32 gradient, fp32 copy, beta1 0.3", 1000003, 0, 0, 0, 0.3, 1, 1, NULL, 0);
    ok &= check("clipped (coefficient on the device)", 1000003, 1, 1, 1, 0.9, 4, 0, clip, 1);
    ok &= check("non-finite norm, skip_nonfinite", 1000003, 1, 1, 1, 0.9, 4, 0, nan_norm, 1);
    ok &= check("one element", 1, 1, 1, 1, 0.9, 1, 0, NULL, 0);
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
