/* SPDX-License-Identifier: MIT */
/* The choice of host kernels (AVX-512 or the scalar references, by CPU features and
 * SDP_HOST_KERNELS) and the AVX-512 fp32 -> bf16 cast.  The cast reproduces cast_bf16_ref.c bit
 * for bit with integer arithmetic (vcvtneps2bf16 is not used: it flushes denormals to zero and
 * keeps NaN payloads, where the reference keeps denormals and writes 0x7fc0 | sign) and writes
 * with non-temporal stores, so a chunk being prepared for DMA does not evict the optimizer's
 * working set.  Only functions marked SDP_AVX512 use AVX-512; the rest of the build stays generic.
 * Test: tests/kernels/test_kernels_host_simd.c. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/avx512_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "base/sdp_log.h"
#include "base/env.h"

/* ---- kernel selection ---- */

int sdp_cpu_have_avx512(void)
{
#if SDP_X86
    /* libgcc / compiler-rt also check that the OS saves the zmm and mask registers (XCR0) */
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

static enum sdp_cpu_isa pick_isa(void)
{
    const char *env = sdp_env("SDP_HOST_KERNELS");
    const int have = sdp_cpu_have_avx512();

    if (env && strcmp(env, "scalar") == 0)
        return SDP_CPU_ISA_SCALAR;
    if (env && strcmp(env, "avx512") == 0 && !have)
        SDP_WARN("SDP_HOST_KERNELS=avx512 but this CPU lacks AVX-512 F/BW/VL: scalar kernels");
    else if (env && *env && strcmp(env, "auto") != 0 && strcmp(env, "avx512") != 0)
        SDP_WARN("SDP_HOST_KERNELS=%s is not one of auto, avx512, scalar: using auto", env);
    return have ? SDP_CPU_ISA_AVX512 : SDP_CPU_ISA_SCALAR;
}

enum sdp_cpu_isa sdp_cpu_isa(void)
{
    /* -1 until decided; racing first callers compute the same value, so relaxed atomics suffice */
    static int isa = -1;
    int v = __atomic_load_n(&isa, __ATOMIC_RELAXED);

    if (v < 0) {
        v = (int)pick_isa();
        __atomic_store_n(&isa, v, __ATOMIC_RELAXED);
    }
    return (enum sdp_cpu_isa)v;
}

const char *sdp_cpu_isa_name(enum sdp_cpu_isa isa)
{
    return isa == SDP_CPU_ISA_AVX512 ? "avx512" : "scalar";
}

/* ---- fp32 -> bf16 ---- */

#if SDP_X86
/* dst (n) bf16, src (n) fp32; any alignment.  Unaligned head and the tail go through masked
 * 16-lane steps (the same arithmetic), the body through 32 elements = one 64-byte line per
 * non-temporal store. */
SDP_AVX512 void sdp_cpu_cast_bf16_avx512(uint16_t *restrict dst, const float *restrict src,
                                         size_t n)
{
    size_t i = 0, head = n;
    int streamed = 0;

    if (((uintptr_t)dst & 1) == 0)
        head = ((64 - ((uintptr_t)dst & 63)) & 63) / 2;
    if (head > n)
        head = n;
    while (i < head) {
        const size_t len = head - i < 16 ? head - i : 16;
        const __mmask16 k = (__mmask16)((1u << len) - 1);
        _mm256_mask_storeu_epi16(dst + i, k, sdp_cvt_bf16x16(_mm512_maskz_loadu_ps(k, src + i)));
        i += len;
    }
    for (; i + 32 <= n; i += 32) {
        const __m256i lo = sdp_cvt_bf16x16(_mm512_loadu_ps(src + i));
        const __m256i hi = sdp_cvt_bf16x16(_mm512_loadu_ps(src + i + 16));
        _mm512_stream_si512((void *)(dst + i),
                            _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
        streamed = 1;
    }
    while (i < n) {
        const size_t len = n - i < 16 ? n - i : 16;
        const __mmask16 k = (__mmask16)((1u << len) - 1);
        _mm256_mask_storeu_epi16(dst + i, k, sdp_cvt_bf16x16(_mm512_maskz_loadu_ps(k, src + i)));
        i += len;
    }
    if (streamed)
        _mm_sfence(); /* order the weakly-ordered stores before whoever reads dst next */
}
#else
void sdp_cpu_cast_bf16_avx512(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    sdp_cpu_cast_bf16_ref(dst, src, n); /* never selected: sdp_cpu_have_avx512() is 0 here */
}
#endif

void sdp_cpu_cast_bf16(uint16_t *dst, const float *src, size_t n)
{
    if (sdp_cpu_isa() == SDP_CPU_ISA_AVX512)
        sdp_cpu_cast_bf16_avx512(dst, src, n);
    else
        sdp_cpu_cast_bf16_ref(dst, src, n);
}
