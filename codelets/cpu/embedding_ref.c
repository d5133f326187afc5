/* SPDX-License-Identifier: MIT */
/* Token embedding lookup and its backward scatter-add.  The backward adds rows in increasing token
 * order, so repeated ids accumulate deterministically.  Token ids are trusted (the data loader
 * checks them against V); nothing here validates or allocates.
 * Test: tests/kernels/test_kernels_embedding.c (fp64 gather/scatter oracle). */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

void sdp_cpu_embedding_fwd_ref(float *restrict out, const int32_t *restrict ids,
                               const float *restrict wte, int N, int C)
{
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, (size_t)C * sizeof(*out));
}

void sdp_cpu_embedding_bwd_ref(float *restrict dwte, const float *restrict dout,
                               const int32_t *restrict ids, int N, int C)
{
    for (int n = 0; n < N; n++) {
        float *drow = dwte + (size_t)ids[n] * C;
        const float *g = dout + (size_t)n * C;
        for (int c = 0; c < C; c++)
            drow[c] += g[c];
    }
}
