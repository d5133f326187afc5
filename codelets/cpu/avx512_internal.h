/* SPDX-License-Identifier: MIT */
/* What the AVX-512 host kernels (adamw_avx512.c, cast_avx512.c) share: the target attribute that
 * enables AVX-512 per function, and the fp32 -> bf16 conversion of 16 lanes.  SDP_X86 is 0 on
 * other architectures, where only the scalar references exist.  Only codelets/cpu/ includes
 * this. */
#ifndef SDP_AVX512_INTERNAL_H
#define SDP_AVX512_INTERNAL_H

#if defined(__x86_64__) || defined(__i386__)
#define SDP_X86 1
#include <immintrin.h>

#define SDP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define SDP_INLINE static inline __attribute__((always_inline)) SDP_AVX512

/* 16 fp32 -> 16 bf16: the operations of sdp_f32_to_bf16() lane by lane (round to nearest even,
 * NaN kept as a quiet NaN of the same sign) */
SDP_INLINE __m256i sdp_cvt_bf16x16(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    r = _mm512_srli_epi32(r, 16);
    const __m512i qnan =
        _mm512_or_si512(_mm512_and_si512(hi, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7fc0));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, qnan));
}
#else
#define SDP_X86 0
#endif

#endif
