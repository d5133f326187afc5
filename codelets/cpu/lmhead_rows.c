/* SPDX-License-Identifier: MIT */
/* The LM head's element-wise work on one row of a block of logits (codelets/cpu/lmhead_ce.c): its
 * max, exp(z - max) with the sum of those in double, and k exp(z - max).  Scalar references in 8
 * lanes (which the compiler vectorises) and AVX-512 versions that do the same operations lane by
 * lane in the same order (16 elements are two of the references' 8-lane steps): the same bits.
 * Built with -ffp-contract=off (no target fuses a multiply-add).  Also the dispatching entry
 * points.  Test: tests/kernels/test_kernels_lmhead_ce.c. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "codelets/cpu/avx512_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

#define LANES 8

/* exp(x) in fp32 for x <= 0 (logits minus a max at least as large): x below -104 (as bits: the
 * unsigned order of negative floats is that of their magnitudes) becomes -104, a Cody-Waite
 * reduction x = n ln2 + r, |r| <= ln2 / 2, Cephes' polynomial for exp(r), then 2^n in two factors
 * so that results below FLT_MIN round once into subnormals (0 below -103.3).  Max error 1 ulp (the
 * test measures it; glibc's expf: 0.5).  Positive x above 88 and NaN are outside its domain (the
 * row's max check catches NaN). */
static inline float exp_neg(float x)
{
    union {
        float f;
        uint32_t u;
    } c = { .f = x }, t, a, b;
    c.u = c.u < 0xC2D00000u ? c.u : 0xC2D00000u; /* -104.0f */
    x = c.f;
    t.f = x * 1.44269504088896341f + 12582912.0f; /* 1.5 2^23 + round(x log2 e): ulp 1 */
    const float n = t.f - 12582912.0f;
    const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * (r * r) + r + 1.0f;
    /* n as an integer from t's bits (no float -> int conversion, which a NaN would make
     * undefined), in two halves each >= -75: normal scales */
    const int32_t ni = (int32_t)(t.u - 0x4B400000u), n1 = ni >> 1, n2 = ni - n1;
    a.u = (uint32_t)(n1 + 127) << 23;
    b.u = (uint32_t)(n2 + 127) << 23;
    return y * a.f * b.f;
}

float sdp_cpu_exp_neg(float x)
{
    return exp_neg(x);
}

float sdp_cpu_lmhead_row_max_ref(const float *restrict z, int n)
{
    float m[LANES], chk[LANES];
    int v = 0;
    for (int l = 0; l < LANES; l++) {
        m[l] = -INFINITY;
        chk[l] = 0.0f;
    }
    for (; v + LANES <= n; v += LANES)
        for (int l = 0; l < LANES; l++) {
            m[l] = z[v + l] > m[l] ? z[v + l] : m[l];
            chk[l] += z[v + l] - z[v + l]; /* 0, or NaN for a NaN or an infinity */
        }
    for (; v < n; v++) {
        m[0] = z[v] > m[0] ? z[v] : m[0];
        chk[0] += z[v] - z[v];
    }
    for (int l = 1; l < LANES; l++) {
        m[0] = m[l] > m[0] ? m[l] : m[0];
        chk[0] += chk[l];
    }
    return chk[0] == 0.0f ? m[0] : NAN;
}

double sdp_cpu_lmhead_exp_sum_ref(const float *restrict z, int n, float m)
{
    double s[LANES] = { 0 };
    int v = 0;
    for (; v + LANES <= n; v += LANES)
        for (int l = 0; l < LANES; l++)
            s[l] += exp_neg(z[v + l] - m);
    for (; v < n; v++)
        s[0] += exp_neg(z[v] - m);
    double t = 0.0;
    for (int l = 0; l < LANES; l++)
        t += s[l];
    return t;
}

void sdp_cpu_lmhead_exp_scale_ref(float *restrict z, int n, float m, float k)
{
    int v = 0;
    for (; v + LANES <= n; v += LANES)
        for (int l = 0; l < LANES; l++)
            z[v + l] = exp_neg(z[v + l] - m) * k;
    for (; v < n; v++)
        z[v] = exp_neg(z[v] - m) * k;
}

#if SDP_X86
/* exp_neg() on 16 lanes, the same operations */
SDP_INLINE __m512 exp_neg16(__m512 x)
{
    const __m512i xc =
        _mm512_min_epu32(_mm512_castps_si512(x), _mm512_set1_epi32((int)0xC2D00000u));
    x = _mm512_castsi512_ps(xc);
    const __m512 big = _mm512_set1_ps(12582912.0f);
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), big);
    const __m512 n = _mm512_sub_ps(t, big);
    const __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f))),
                                   _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r),
                                   _mm512_set1_ps(1.0f));
    const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B400000)),
                  n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1),
                  e = _mm512_set1_epi32(127);
    const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, e), 23));
    const __m512 b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, e), 23));
    return _mm512_mul_ps(_mm512_mul_ps(y, a), b);
}

/* Lanes l and l + 8 of the 16 are the reference's lane l: the max and the check do not depend on
 * the order (every finite z - z is +0; the max's sign of a zero max may differ, which no later
 * use sees: z - (+0) and z - (-0) are equal). */
SDP_AVX512 float sdp_cpu_lmhead_row_max_avx512(const float *restrict z, int n)
{
    __m512 m = _mm512_set1_ps(-INFINITY), chk = _mm512_setzero_ps();
    int v = 0;
    for (; v + 16 <= n; v += 16) {
        const __m512 x = _mm512_loadu_ps(z + v);
        m = _mm512_max_ps(x, m);
        chk = _mm512_add_ps(chk, _mm512_sub_ps(x, x));
    }
    float mx = _mm512_reduce_max_ps(m);
    const float c = _mm512_reduce_add_ps(chk);
    const float tail = sdp_cpu_lmhead_row_max_ref(z + v, n - v);
    if (!(c == 0.0f) || isnan(tail))
        return NAN;
    return tail > mx ? tail : mx;
}

SDP_AVX512 double sdp_cpu_lmhead_exp_sum_avx512(const float *restrict z, int n, float m)
{
    __m512d s = _mm512_setzero_pd();
    const __m512 mv = _mm512_set1_ps(m);
    int v = 0;
    for (; v + 16 <= n; v += 16) {
        const __m512 e = exp_neg16(_mm512_sub_ps(_mm512_loadu_ps(z + v), mv));
        s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s = _mm512_add_pd(
            s, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    if (v + 8 <= n) {
        const __m512 e = exp_neg16(_mm512_sub_ps(_mm512_maskz_loadu_ps(0xff, z + v), mv));
        s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        v += 8;
    }
    double l[LANES];
    _mm512_storeu_pd(l, s);
    for (; v < n; v++)
        l[0] += exp_neg(z[v] - m);
    double t = 0.0;
    for (int i = 0; i < LANES; i++)
        t += l[i];
    return t;
}

SDP_AVX512 void sdp_cpu_lmhead_exp_scale_avx512(float *restrict z, int n, float m, float k)
{
    const __m512 mv = _mm512_set1_ps(m), kv = _mm512_set1_ps(k);
    int v = 0;
    for (; v + 16 <= n; v += 16)
        _mm512_storeu_ps(z + v,
                         _mm512_mul_ps(exp_neg16(_mm512_sub_ps(_mm512_loadu_ps(z + v), mv)), kv));
    if (v < n) {
        const __mmask16 t = (__mmask16)((1u << (n - v)) - 1);
        _mm512_mask_storeu_ps(
            z + v, t,
            _mm512_mul_ps(exp_neg16(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, z + v), mv)), kv));
    }
}
#else
/* Never selected on other architectures (sdp_cpu_have_avx512() is 0): the references. */
float sdp_cpu_lmhead_row_max_avx512(const float *z, int n)
{
    return sdp_cpu_lmhead_row_max_ref(z, n);
}
double sdp_cpu_lmhead_exp_sum_avx512(const float *z, int n, float m)
{
    return sdp_cpu_lmhead_exp_sum_ref(z, n, m);
}
void sdp_cpu_lmhead_exp_scale_avx512(float *z, int n, float m, float k)
{
    sdp_cpu_lmhead_exp_scale_ref(z, n, m, k);
}
#endif

float sdp_cpu_lmhead_row_max(const float *z, int n)
{
    return sdp_cpu_isa() == SDP_CPU_ISA_AVX512 ? sdp_cpu_lmhead_row_max_avx512(z, n)
                                               : sdp_cpu_lmhead_row_max_ref(z, n);
}

double sdp_cpu_lmhead_exp_sum(const float *z, int n, float m)
{
    return sdp_cpu_isa() == SDP_CPU_ISA_AVX512 ? sdp_cpu_lmhead_exp_sum_avx512(z, n, m)
                                               : sdp_cpu_lmhead_exp_sum_ref(z, n, m);
}

void sdp_cpu_lmhead_exp_scale(float *z, int n, float m, float k)
{
    if (sdp_cpu_isa() == SDP_CPU_ISA_AVX512)
        sdp_cpu_lmhead_exp_scale_avx512(z, n, m, k);
    else
        sdp_cpu_lmhead_exp_scale_ref(z, n, m, k);
}
