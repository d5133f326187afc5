/* SPDX-License-Identifier: MIT */
/* The LoRA kernels (codelets/cpu/lora.c) against the fp64 oracle of tests/kernels/lora_oracle.h:
 * the forward into a column slice of a wider output (a fused projection's q, k or v part), and
 * the backward's dx, dA and dB, each accumulated onto non-zero values.  Each element must satisfy
 *   |x_i - ref_i| <= SDP_SAFETY * u32 * kappa_i
 * with kappa_i the oracle's first-order error magnitude of the two chained fp32 GEMMs.  Columns
 * outside the slice must keep their bits. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/kernels/lora_oracle.h"
#include "tests/lib/sdp_test.h"

static void test_fwd(const float *x, const float *a, const float *b, const float *y0)
{
    float y[M * LDY], u[M * R];
    static double ref[M * OUT], kap[M * OUT];
    float got[M * OUT];
    int outside = 0;
    memcpy(y, y0, sizeof(y));
    sdp_cpu_lora_fwd(y + COL0, LDY, x, a, b, M, IN, OUT, R, (float)S, u);
    lora_oracle_fwd(x, a, b, y0, ref, kap);
    for (int m = 0; m < M; m++)
        for (int j = 0; j < OUT; j++)
            got[m * OUT + j] = y[m * LDY + COL0 + j];
    lora_compare("forward y slice", got, ref, kap, M * OUT, SDP_U32);
    for (int m = 0; m < M; m++)
        for (int c = 0; c < LDY; c++)
            if ((c < COL0 || c >= COL0 + OUT) &&
                sdp_f32_bits(y[m * LDY + c]) != sdp_f32_bits(y0[m * LDY + c]))
                outside++;
    CHECK(outside == 0, "forward wrote %d values outside its slice", outside);
}

static void test_bwd(const float *x, const float *a, const float *b, const float *dy)
{
    static float dx[M * IN], ga[R * IN], gb[OUT * R], u[M * R], v[M * R];
    static double rdx[M * IN], kdx[M * IN], rga[R * IN], kga[R * IN], rgb[OUT * R], kgb[OUT * R];
    struct sdp_rng rng = { 21 };
    float dx0[M * IN], ga0[R * IN], gb0[OUT * R];
    sdp_fill_uniform(&rng, dx0, M * IN, -1, 1);
    sdp_fill_uniform(&rng, ga0, R * IN, -0.1f, 0.1f);
    sdp_fill_uniform(&rng, gb0, OUT * R, -0.1f, 0.1f);
    memcpy(dx, dx0, sizeof(dx)), memcpy(ga, ga0, sizeof(ga)), memcpy(gb, gb0, sizeof(gb));
    sdp_cpu_lora_bwd(dx, dy + COL0, LDY, x, a, b, ga, gb, M, IN, OUT, R, (float)S, u, v);
    lora_oracle_bwd(x, a, b, dy, dx0, ga0, gb0, rdx, kdx, rga, kga, rgb, kgb);
    lora_compare("backward dB", gb, rgb, kgb, OUT * R, SDP_U32);
    lora_compare("backward dA", ga, rga, kga, R * IN, SDP_U32);
    lora_compare("backward dx", dx, rdx, kdx, M * IN, SDP_U32);
}

int main(void)
{
    static float x[M * IN], a[R * IN], b[OUT * R], y0[M * LDY], dy[M * LDY];
    struct sdp_rng rng = { 7 };
    sdp_fill_uniform(&rng, x, M * IN, -1, 1);
    sdp_fill_uniform(&rng, a, R * IN, -0.2f, 0.2f); /* PEFT's A: uniform in +-1/sqrt(in) */
    sdp_fill_uniform(&rng, b, OUT * R, -0.5f, 0.5f);
    sdp_fill_uniform(&rng, y0, M * LDY, -1, 1);
    sdp_fill_uniform(&rng, dy, M * LDY, -1, 1);
    printf("M %d, in %d, out %d (columns %d.. of %d), r %d, s %.2f\n", M, IN, OUT, COL0, LDY, R, S);
    test_fwd(x, a, b, y0);
    test_bwd(x, a, b, dy);
    return sdp_test_finish(sdp_test_nfail);
}
