/* SPDX-License-Identifier: MIT */
/* Checks the embedding lookup (exact copy, bit for bit) and its scatter-add backward against an
 * fp64 oracle, with repeated ids (the same row hit many times), the first and last vocabulary rows,
 * and a non-zero starting gradient: |x - r| <= 10 u32 (k + 1) (|dwte0| + sum|dout|), k = hits of
 * the row. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

int main(void)
{
    enum { N = 257, C = 48, V = 19 };
    struct sdp_rng rng = { 3 };
    static int32_t ids[N];
    static float wte[V * C], out[N * C], dout[N * C], dwte[V * C], dwte0[V * C];
    static double ref[V * C], mag[V * C], outref[N * C];
    static int hits[V];
    int nfail = 0;

    for (int n = 0; n < N; n++) /* skewed: row 0 is hit about half the time */
        ids[n] = (sdp_rng_next(&rng) & 1) ? 0 : (int32_t)(sdp_rng_next(&rng) % V);
    ids[N - 1] = V - 1;
    sdp_fill_normal(&rng, wte, V * C, 1.0f);
    sdp_fill_normal(&rng, dout, N * C, 1.0f);
    sdp_fill_normal(&rng, dwte0, V * C, 0.1f);
    for (int i = 0; i < C; i++)
        dout[i] = 1e20f; /* a huge gradient next to ordinary ones */

    sdp_cpu_embedding_fwd_ref(out, ids, wte, N, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            outref[n * C + c] = wte[(size_t)ids[n] * C + c];
    nfail += sdp_check("embedding_fwd (exact)", out, outref, NULL, N * C, 0.0, 0.0);

    for (int i = 0; i < V * C; i++) {
        ref[i] = dwte0[i];
        mag[i] = fabs(dwte0[i]);
    }
    for (int n = 0; n < N; n++) {
        hits[ids[n]]++;
        for (int c = 0; c < C; c++) {
            ref[ids[n] * C + c] += dout[n * C + c];
            mag[ids[n] * C + c] += fabs(dout[n * C + c]);
        }
    }
    /* a sum of k + 1 terms in fp32: error <= k u32 sum|t| (see SDP_GEMM_RESID_MAX) */
    for (int v = 0; v < V; v++)
        for (int c = 0; c < C; c++)
            mag[v * C + c] *= hits[v] + 1;
    memcpy(dwte, dwte0, sizeof(dwte));
    sdp_cpu_embedding_bwd_ref(dwte, dout, ids, N, C);
    nfail += sdp_check("embedding_bwd", dwte, ref, mag, V * C, SDP_SAFETY * SDP_U32, 0.0);
    printf("row 0 hit %d times of %d\n", hits[0], N);
    return sdp_test_finish(nfail);
}
