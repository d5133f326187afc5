/* SPDX-License-Identifier: MIT */
/* The gradient sum of squares with AVX-512: four accumulators of 8 doubles hold the 32 partial
 * sums of sdp_cpu_sumsq_ref() (accumulator a, lane k: partial sum 8a + k), the tail is loaded
 * with a mask (a masked lane adds +0.0, which leaves a sum of squares unchanged), and the halving
 * at the end is the reference's pairwise order.  Each product of two widened fp32 values is exact
 * in double, so a fused multiply-add rounds exactly as the reference's multiply then add.  Same
 * bits as the reference for every input, NaN and Inf included.  Also the dispatching entry point.
 * Test: tests/kernels/test_kernels_host_simd.c. */
#include "config.h"

#include <stddef.h>

#include "codelets/cpu/avx512_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

#if SDP_X86
_Static_assert(SDP_SUMSQ_LANES == 32, "four accumulators of 8 doubles");

SDP_INLINE __m512d sq_acc(__m512d acc, const float *g, __mmask8 k)
{
    const __m512d x = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, g));
    return _mm512_fmadd_pd(x, x, acc);
}

SDP_AVX512 double sdp_cpu_sumsq_avx512(const float *restrict g, size_t n)
{
    __m512d a[4] = { _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                     _mm512_setzero_pd() };
    size_t i = 0;
    for (; i + SDP_SUMSQ_LANES <= n; i += SDP_SUMSQ_LANES)
        for (int j = 0; j < 4; j++)
            a[j] = sq_acc(a[j], g + i + 8 * j, 0xff);
    for (int j = 0; i + 8 * (size_t)j < n && j < 4; j++) {
        const size_t left = n - i - 8 * (size_t)j;
        a[j] = sq_acc(a[j], g + i + 8 * j, left >= 8 ? 0xff : (__mmask8)((1u << left) - 1));
    }
    /* s[j] += s[j + 16], s[j] += s[j + 8], then within the register 4, 2, 1 */
    const __m512d h8 = _mm512_add_pd(_mm512_add_pd(a[0], a[2]), _mm512_add_pd(a[1], a[3]));
    const __m256d h4 = _mm256_add_pd(_mm512_castpd512_pd256(h8), _mm512_extractf64x4_pd(h8, 1));
    const __m128d h2 = _mm_add_pd(_mm256_castpd256_pd128(h4), _mm256_extractf128_pd(h4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h2, _mm_unpackhi_pd(h2, h2)));
}
#else
/* Never selected on other architectures (sdp_cpu_have_avx512() is 0): the reference. */
double sdp_cpu_sumsq_avx512(const float *g, size_t n)
{
    return sdp_cpu_sumsq_ref(g, n);
}
#endif

double sdp_cpu_sumsq(const float *g, size_t n)
{
    return sdp_cpu_isa() == SDP_CPU_ISA_AVX512 ? sdp_cpu_sumsq_avx512(g, n)
                                               : sdp_cpu_sumsq_ref(g, n);
}
