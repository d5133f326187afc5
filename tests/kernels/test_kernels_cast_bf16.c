/* SPDX-License-Identifier: MIT */
/* Checks fp32 <-> bf16 conversion bit for bit against an independent oracle that picks the nearer
 * of the two neighbouring bf16 values in double (ties to the even one, overflow past the rounding
 * boundary to Inf, NaN to the quiet NaN with the sign kept): all specials, all 65536 upper halves
 * with edge lower halves, and random bit patterns; plus the exact widening of every bf16 value, and
 * the dispatching sdp_cpu_cast_bf16() (AVX-512 or scalar, as selected) on the same arrays. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

/* Value of a bf16 bit pattern, in double, by its definition; exponent 255 with mantissa 0 decodes
 * to 2^128 (the rounding boundary sits between the largest finite bf16 and 2^128). */
static double bf16_value(uint32_t b)
{
    const int sign = (b >> 15) & 1, e = (b >> 7) & 0xff, mant = b & 0x7f;
    double v = e ? ldexp(1.0 + mant / 128.0, e - 127) : ldexp(mant / 128.0, -126);
    return sign ? -v : v;
}

static uint16_t oracle_to_bf16(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    if (isnan(x))
        return (uint16_t)(((u >> 16) & 0x8000) | 0x7fc0);
    if (isinf(x))
        return (uint16_t)(u >> 16);
    const uint32_t lo = u >> 16, hi = lo + 1; /* truncation and the next value away from zero */
    const double dl = fabs((double)x - bf16_value(lo)), dh = fabs(bf16_value(hi) - (double)x);
    if (dl < dh)
        return (uint16_t)lo;
    if (dh < dl)
        return (uint16_t)hi;
    return (uint16_t)((lo & 1) ? hi : lo);
}

static int check_pattern(uint32_t u, long *nbad)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    const uint16_t got = sdp_f32_to_bf16(x), want = oracle_to_bf16(u);
    if (got != want) {
        if (*nbad < 5)
            printf("  f32 0x%08x (%.9g): got 0x%04x, oracle 0x%04x\n", (unsigned)u, (double)x, got,
                   want);
        (*nbad)++;
        return 1;
    }
    return 0;
}

int main(void)
{
    int nfail = 0;
    long nbad = 0, ncases = 0;
    struct sdp_rng rng = { 42 };
    static const uint32_t specials[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, /* +-0, +-Inf */
        0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, /* quiet and signalling NaNs */
        0x7fffffff, 0x7fbfffff, 0xffffffff,             /* NaN payloads that would carry into Inf */
        0x7f7fffff, 0xff7fffff, 0x7f7f7fff, 0x7f7f8000, /* largest finite, around the boundary */
        0x7f7f8001, 0x00000001, 0x80000001, 0x007fffff, /* denormals */
        0x00008000, 0x00018000, 0x3f808000, 0x3f818000, /* exact ties: to even (down, up) */
        0x3f800000, 0x3f807fff, 0x3f808001,
    };

    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++, ncases++)
        check_pattern(specials[i], &nbad);
    /* every upper half with the lower halves where rounding decides */
    static const uint32_t lows[] = { 0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff };
    for (uint32_t hi = 0; hi < 0x10000; hi++)
        for (size_t j = 0; j < sizeof(lows) / sizeof(lows[0]); j++, ncases++)
            check_pattern(hi << 16 | lows[j], &nbad);
    for (int i = 0; i < 1000000; i++, ncases++)
        check_pattern((uint32_t)sdp_rng_next(&rng), &nbad);
    printf("f32 -> bf16 scalar: %ld patterns, %ld differ from the oracle  %s\n", ncases, nbad,
           nbad ? "BAD" : "ok");
    nfail += nbad != 0;

    /* quiet NaN with sign kept, explicitly */
    const float nan_neg = -NAN;
    if (sdp_f32_to_bf16(nan_neg) != 0xffc0 || sdp_f32_to_bf16(NAN) != 0x7fc0) {
        printf("NaN: got 0x%04x / 0x%04x, want 0xffc0 / 0x7fc0  BAD\n", sdp_f32_to_bf16(nan_neg),
               sdp_f32_to_bf16(NAN));
        nfail++;
    }

    /* bf16 -> f32 is exact: every pattern equals its decoded value (NaN stays NaN) */
    long nwide = 0;
    for (uint32_t b = 0; b < 0x10000; b++) {
        const float f = sdp_bf16_to_f32((uint16_t)b);
        const int is_nan = ((b >> 7) & 0xff) == 0xff && (b & 0x7f);
        const int is_inf = ((b >> 7) & 0xff) == 0xff && !(b & 0x7f);
        int ok;
        if (is_nan)
            ok = isnan(f) && (signbit(f) != 0) == ((b >> 15) & 1);
        else if (is_inf)
            ok = isinf(f) && (f < 0) == ((b >> 15) & 1);
        else
            ok = (double)f == bf16_value(b) && (signbit(f) != 0) == ((b >> 15) & 1);
        if (!ok) {
            if (nwide < 5)
                printf("  bf16 0x%04x -> %.9g, want %.9g\n", (unsigned)b, (double)f, bf16_value(b));
            nwide++;
        }
    }
    printf("bf16 -> f32 scalar: 65536 patterns, %ld wrong  %s\n", nwide, nwide ? "BAD" : "ok");
    nfail += nwide != 0;

    /* the array versions agree with the scalar ones, and the round trip is the identity */
    enum { NA = 4099 };
    static float src[NA], back[NA];
    static uint16_t dst[NA], dst_sel[NA];
    long narr = 0;
    for (int i = 0; i < NA; i++)
        src[i] = sdp_rng_normal(&rng, i % 7 == 0 ? 1e30f : 3.0f);
    src[0] = INFINITY;
    src[1] = -0.0f;
    src[2] = NAN;
    sdp_cpu_cast_bf16_ref(dst, src, NA);
    sdp_cpu_cast_bf16(dst_sel + 1, src + 1, NA - 1); /* odd offset: unaligned head */
    sdp_cpu_cast_bf16(dst_sel, src, 1);
    sdp_cpu_bf16_to_f32_ref(back, dst, NA);
    for (int i = 0; i < NA; i++) {
        uint16_t again;
        sdp_cpu_cast_bf16_ref(&again, &back[i], 1);
        if (dst[i] != sdp_f32_to_bf16(src[i]) || again != dst[i] || dst_sel[i] != dst[i])
            narr++;
    }
    printf("array cast (ref and %s) + round trip: %d values, %ld mismatches  %s\n",
           sdp_cpu_isa_name(sdp_cpu_isa()), NA, narr, narr ? "BAD" : "ok");
    nfail += narr != 0;
    return sdp_test_finish(nfail);
}
