/* SPDX-License-Identifier: MIT */
/* AdamW on one fp32 segment with AVX-512, fused with the copy-out of the next working copy (bf16 or
 * fp32, non-temporal stores): one pass over p, m, v, g.  Bit for bit the result of adamw_ref.c:
 * the same fp32 constants (sdp_cpu_adamw_consts), the same operations in the same order, each
 * rounded on its own (this file, like the reference, is built with -ffp-contract=off), and IEEE
 * division and square root are correctly rounded in both.  Also the dispatching entry points.
 * Only functions marked SDP_AVX512 use AVX-512.  Test: tests/kernels/test_kernels_host_simd.c. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "codelets/cpu/avx512_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

#if SDP_X86

struct vconsts {
    __m512 wd_mul, w1, omw1, b2, c2, nstep, bc2_sqrt, eps, gscale;
    int lerp_small;
};

/* The gradient of lanes k, widened to fp32 (bf16 -> fp32 is a 16-bit shift, exact). */
SDP_INLINE __m512 load_g_f32(const float *g, __mmask16 k)
{
    return _mm512_maskz_loadu_ps(k, g);
}

SDP_INLINE __m512 load_g_bf16(const uint16_t *g, __mmask16 k)
{
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, g));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* NaN lanes -> 0x7fc00000, as canon_nan() in adamw_ref.c */
SDP_INLINE __m512 canon_nan16(__m512 x)
{
    return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                              _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
}

/* adamw_elem() of adamw_ref.c on lanes k of p, m, v (fp32, any alignment); returns the new p. */
SDP_INLINE __m512 update16(float *p, float *m, float *v, __m512 g, const struct vconsts *c,
                           __mmask16 k)
{
    const __m512 gi = _mm512_mul_ps(g, c->gscale);
    __m512 pi = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p), c->wd_mul);
    __m512 mi = _mm512_maskz_loadu_ps(k, m);
    const __m512 d = _mm512_sub_ps(gi, mi);
    mi = c->lerp_small ? _mm512_add_ps(mi, _mm512_mul_ps(c->w1, d))
                       : _mm512_sub_ps(gi, _mm512_mul_ps(d, c->omw1));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, v), c->b2),
                                    _mm512_mul_ps(_mm512_mul_ps(c->c2, gi), gi));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), c->bc2_sqrt), c->eps);
    pi = canon_nan16(_mm512_add_ps(pi, _mm512_div_ps(_mm512_mul_ps(c->nstep, mi), denom)));
    _mm512_mask_storeu_ps(p, k, pi);
    _mm512_mask_storeu_ps(m, k, canon_nan16(mi));
    _mm512_mask_storeu_ps(v, k, canon_nan16(vi));
    return pi;
}

/* One segment; gbf16 selects the gradient dtype (g is float * or uint16_t *).  The body handles 32
 * elements at a time so that each non-temporal store of the working copy fills whole 64-byte lines
 * (bf16: one line, fp32: two); until the working copy is 64-byte aligned, and for the tail, masked
 * 16-lane steps run the same arithmetic with ordinary stores. */
SDP_INLINE void adamw_avx512(float *p, void *g, int gbf16, float *m, float *v, uint16_t *work_bf16,
                             float *work_f32, size_t n, const struct sdp_adamw_hp *hp, int decay,
                             int zero_grad)
{
    struct sdp_adamw_consts s;
    struct vconsts c;
    size_t i = 0, head = 0;
    const uintptr_t wa = work_bf16 ? (uintptr_t)work_bf16 : (uintptr_t)work_f32;
    const size_t wsize = work_bf16 ? 2 : 4;

    sdp_cpu_adamw_consts(&s, hp, decay);
    c.wd_mul = _mm512_set1_ps(s.wd_mul);
    c.w1 = _mm512_set1_ps(s.w1);
    c.omw1 = _mm512_set1_ps(s.omw1);
    c.b2 = _mm512_set1_ps(s.b2);
    c.c2 = _mm512_set1_ps(s.c2);
    c.nstep = _mm512_set1_ps(s.nstep);
    c.bc2_sqrt = _mm512_set1_ps(s.bc2_sqrt);
    c.eps = _mm512_set1_ps(s.eps);
    c.gscale = _mm512_set1_ps(s.gscale);
    c.lerp_small = s.lerp_small;

    if (wa)
        head = wa % wsize ? n : ((64 - (wa & 63)) & 63) / wsize;
    if (head > n)
        head = n;

#define STEP16(K)                                                                                  \
    do {                                                                                           \
        const __mmask16 k_ = (K);                                                                  \
        const __m512 g_ = gbf16 ? load_g_bf16((const uint16_t *)g + i, k_)                         \
                                : load_g_f32((const float *)g + i, k_);                            \
        const __m512 p_ = update16(p + i, m + i, v + i, g_, &c, k_);                               \
        if (work_f32)                                                                              \
            _mm512_mask_storeu_ps(work_f32 + i, k_, p_);                                           \
        if (work_bf16)                                                                             \
            _mm256_mask_storeu_epi16(work_bf16 + i, k_, sdp_cvt_bf16x16(p_));                      \
        if (zero_grad && gbf16)                                                                    \
            _mm256_mask_storeu_epi16((uint16_t *)g + i, k_, _mm256_setzero_si256());               \
        else if (zero_grad)                                                                        \
            _mm512_mask_storeu_ps((float *)g + i, k_, _mm512_setzero_ps());                        \
    } while (0)

    while (i < head) {
        const size_t len = head - i < 16 ? head - i : 16;
        STEP16((__mmask16)((1u << len) - 1));
        i += len;
    }
    /* the working copy of the body is streamed where 64-byte aligned (both copies requested: the
     * second one may not be, then it is stored normally) */
    const int nt_bf16 = work_bf16 && ((uintptr_t)(work_bf16 + i) & 63) == 0;
    const int nt_f32 = work_f32 && ((uintptr_t)(work_f32 + i) & 63) == 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 g0 = gbf16 ? load_g_bf16((const uint16_t *)g + i, 0xffff)
                                : load_g_f32((const float *)g + i, 0xffff);
        const __m512 g1 = gbf16 ? load_g_bf16((const uint16_t *)g + i + 16, 0xffff)
                                : load_g_f32((const float *)g + i + 16, 0xffff);
        const __m512 p0 = update16(p + i, m + i, v + i, g0, &c, 0xffff);
        const __m512 p1 = update16(p + i + 16, m + i + 16, v + i + 16, g1, &c, 0xffff);
        if (work_bf16) {
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(sdp_cvt_bf16x16(p0)),
                                                 sdp_cvt_bf16x16(p1), 1);
            if (nt_bf16)
                _mm512_stream_si512((void *)(work_bf16 + i), w);
            else
                _mm512_storeu_si512(work_bf16 + i, w);
        }
        if (work_f32 && nt_f32) {
            _mm512_stream_ps(work_f32 + i, p0);
            _mm512_stream_ps(work_f32 + i + 16, p1);
        } else if (work_f32) {
            _mm512_storeu_ps(work_f32 + i, p0);
            _mm512_storeu_ps(work_f32 + i + 16, p1);
        }
        if (zero_grad && gbf16) {
            _mm512_storeu_si512((uint16_t *)g + i, _mm512_setzero_si512());
        } else if (zero_grad) {
            _mm512_storeu_ps((float *)g + i, _mm512_setzero_ps());
            _mm512_storeu_ps((float *)g + i + 16, _mm512_setzero_ps());
        }
    }
    while (i < n) {
        const size_t len = n - i < 16 ? n - i : 16;
        STEP16((__mmask16)((1u << len) - 1));
        i += len;
    }
#undef STEP16
    if (nt_bf16 || nt_f32)
        _mm_sfence(); /* order the weakly-ordered stores before whoever reads the copy next */
}

SDP_AVX512 void sdp_cpu_adamw_avx512(float *restrict p, float *restrict g, float *restrict m,
                                     float *restrict v, uint16_t *restrict work_bf16,
                                     float *restrict work_f32, size_t n,
                                     const struct sdp_adamw_hp *hp, int decay, int zero_grad)
{
    adamw_avx512(p, g, 0, m, v, work_bf16, work_f32, n, hp, decay, zero_grad);
}

SDP_AVX512 void sdp_cpu_adamw_gbf16_avx512(float *restrict p, uint16_t *restrict g,
                                           float *restrict m, float *restrict v,
                                           uint16_t *restrict work_bf16, float *restrict work_f32,
                                           size_t n, const struct sdp_adamw_hp *hp, int decay,
                                           int zero_grad)
{
    adamw_avx512(p, g, 1, m, v, work_bf16, work_f32, n, hp, decay, zero_grad);
}
#else
/* Never selected on other architectures (sdp_cpu_have_avx512() is 0): the references. */
void sdp_cpu_adamw_avx512(float *restrict p, float *restrict g, float *restrict m,
                          float *restrict v, uint16_t *restrict work_bf16, float *restrict work_f32,
                          size_t n, const struct sdp_adamw_hp *hp, int decay, int zero_grad)
{
    sdp_cpu_adamw_ref(p, g, m, v, work_bf16, work_f32, n, hp, decay, zero_grad);
}

void sdp_cpu_adamw_gbf16_avx512(float *restrict p, uint16_t *restrict g, float *restrict m,
                                float *restrict v, uint16_t *restrict work_bf16,
                                float *restrict work_f32, size_t n, const struct sdp_adamw_hp *hp,
                                int decay, int zero_grad)
{
    sdp_cpu_adamw_gbf16_ref(p, g, m, v, work_bf16, work_f32, n, hp, decay, zero_grad);
}
#endif

void sdp_cpu_adamw(float *p, float *g, float *m, float *v, uint16_t *work_bf16, float *work_f32,
                   size_t n, const struct sdp_adamw_hp *hp, int decay, int zero_grad)
{
    if (sdp_cpu_isa() == SDP_CPU_ISA_AVX512)
        sdp_cpu_adamw_avx512(p, g, m, v, work_bf16, work_f32, n, hp, decay, zero_grad);
    else
        sdp_cpu_adamw_ref(p, g, m, v, work_bf16, work_f32, n, hp, decay, zero_grad);
}

void sdp_cpu_adamw_gbf16(float *p, uint16_t *g, float *m, float *v, uint16_t *work_bf16,
                         float *work_f32, size_t n, const struct sdp_adamw_hp *hp, int decay,
                         int zero_grad)
{
    if (sdp_cpu_isa() == SDP_CPU_ISA_AVX512)
        sdp_cpu_adamw_gbf16_avx512(p, g, m, v, work_bf16, work_f32, n, hp, decay, zero_grad);
    else
        sdp_cpu_adamw_gbf16_ref(p, g, m, v, work_bf16, work_f32, n, hp, decay, zero_grad);
}
