/* SPDX-License-Identifier: MIT */
/* fp32 <-> bf16 conversion, the scalar reference: round to nearest, ties to even, through the
 * uint32 bit pattern; NaN becomes the quiet NaN 0x7fc0 with its sign kept (never rounds into Inf).
 * Must not depend on the FPU rounding mode or on the host's bf16 support.
 * Test: tests/kernels/test_kernels_cast_bf16.c (bit for bit against an independent rounding). */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

uint16_t sdp_f32_to_bf16(float x)
{
    uint32_t u;

    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, force the quiet bit */
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    /* adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out of the
     * mantissa correctly bumps the exponent (the largest finite values round to Inf) */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float sdp_bf16_to_f32(uint16_t x)
{
    uint32_t u = (uint32_t)x << 16;
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

void sdp_cpu_cast_bf16_ref(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = sdp_f32_to_bf16(src[i]);
}

void sdp_cpu_bf16_to_f32_ref(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = sdp_bf16_to_f32(src[i]);
}
