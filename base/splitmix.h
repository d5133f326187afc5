/* SPDX-License-Identifier: MIT */
/* splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014) as pure
 * functions of a counter, in C and in CUDA C, and the dropout mask that LoRA's adapters draw from
 * it (docs/lora.md): element i of a mask keyed k is dropped when the top 24 bits of the i-th draw
 * of the stream seeded with k, sdp_splitmix64(k + i * gamma), fall below thr = round(p 2^24).  The
 * same integers on every device, so the CPU and GPU kernels and a Python reference agree bit for
 * bit.  Tests: tests/kernels/test_kernels_lora.c. */
#ifndef SDP_SPLITMIX_H
#define SDP_SPLITMIX_H

#include <stdint.h>

#ifdef __CUDACC__
#define SDP_SPLITMIX_FN static inline __host__ __device__
#else
#define SDP_SPLITMIX_FN static inline
#endif

#define SDP_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull

/** The draw of splitmix64 whose state before the step is x: mix(x + gamma). */
SDP_SPLITMIX_FN uint64_t sdp_splitmix64(uint64_t x)
{
    x += SDP_SPLITMIX_GAMMA;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/** Uniform in [-1, 1), never 0, from the splitmix64 stream whose state is *x (advanced): the
 * typical values calibrate's kernels run on. */
SDP_SPLITMIX_FN float sdp_splitmix_unit(uint64_t *x)
{
    uint64_t z = sdp_splitmix64(*x);
    *x += SDP_SPLITMIX_GAMMA;
    return ((float)(z >> 40) + 0.5f) * (2.0f / 16777216.0f) - 1.0f;
}

/** 1 when element i of the dropout mask keyed `key` is kept (see above). */
SDP_SPLITMIX_FN int sdp_dropout_keep(uint64_t key, uint64_t i, uint32_t thr)
{
    return (uint32_t)(sdp_splitmix64(key + i * SDP_SPLITMIX_GAMMA) >> 40) >= thr;
}

#endif
