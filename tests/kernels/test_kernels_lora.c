/* SPDX-License-Identifier: MIT */
/* The LoRA kernels (codelets/cpu/lora.c) against the fp64 oracle of tests/kernels/lora_oracle.h:
 * the forward into a column slice of a wider output (a fused projection's q, k or v part), and
 * the backward's dx, dA and dB, each accumulated onto non-zero values.  Each element must satisfy
 *   |x_i - ref_i| <= SDP_SAFETY * u32 * kappa_i
 * with kappa_i the oracle's first-order error magnitude of the two chained fp32 GEMMs.  Columns
 * outside the slice must keep their bits.  The same with the dropout of the adapter's input, and
 * the dropout's mask generator. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/splitmix.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/kernels/lora_oracle.h"
#include "tests/lib/sdp_test.h"

static struct sdp_cpu_dropout drop; /* thr 0: none; else its mask in lora_keep */

static void test_fwd(const float *x, const float *a, const float *b, const float *y0)
{
    float y[M * LDY], u[M * R];
    static double ref[M * OUT], kap[M * OUT];
    float got[M * OUT];
    int outside = 0;
    memcpy(y, y0, sizeof(y));
    sdp_cpu_lora_fwd(y + COL0, LDY, x, a, b, M, IN, OUT, R, (float)S, u, &drop);
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
    sdp_cpu_lora_bwd(dx, dy + COL0, LDY, x, a, b, ga, gb, M, IN, OUT, R, (float)S, u, v, &drop);
    lora_oracle_bwd(x, a, b, dy, dx0, ga0, gb0, rdx, kdx, rga, kga, rgb, kgb);
    lora_compare("backward dB", gb, rgb, kgb, OUT * R, SDP_U32);
    lora_compare("backward dA", ga, rga, kga, R * IN, SDP_U32);
    lora_compare("backward dx", dx, rdx, kdx, M * IN, SDP_U32);
}

/* The mask's generator against splitmix64's published first outputs for seed 0 (Vigna's
 * splitmix64.c: 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4), and the dropped fraction of 2^20
 * elements at p = 0.1 within 6 standard deviations of p (binomial: sqrt(p (1 - p) / n) = 2.9e-4) */
static void test_mask(void)
{
    const uint32_t thr = (uint32_t)(0.1 * 16777216.0 + 0.5);
    const size_t n = 1u << 20;
    size_t dropped = 0;
    CHECK(sdp_splitmix64(0) == 0xe220a8397b1dcdafull, "splitmix64's first output for seed 0");
    CHECK(sdp_splitmix64(SDP_SPLITMIX_GAMMA) == 0x6e789e6aa1b965f4ull,
          "splitmix64's second output for seed 0");
    for (size_t i = 0; i < n; i++)
        dropped += !sdp_dropout_keep(12345, i, thr);
    printf("dropout mask: %.5f of %zu elements dropped at p = 0.1\n", (double)dropped / n, n);
    CHECK(fabs((double)dropped / n - 0.1) < 6 * sqrt(0.1 * 0.9 / n), "dropped fraction");
    CHECK(sdp_dropout_keep(7, 3, 0) && !sdp_dropout_keep(7, 3, 1u << 24), "thresholds 0 and 2^24");
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
    test_mask();
    { /* dropout p = 0.3 on the input: the oracle applies the same mask */
        static float xd[M * IN];
        static unsigned char keep[M * IN];
        int kept = 0;
        drop = (struct sdp_cpu_dropout){ 0x5eedull, (uint32_t)(0.3 * 16777216.0 + 0.5),
                                         (float)(1.0 / 0.7), xd };
        for (int i = 0; i < M * IN; i++)
            kept += keep[i] = (unsigned char)sdp_dropout_keep(drop.key, (uint64_t)i, drop.thr);
        lora_keep = keep, lora_scale = drop.scale;
        printf("dropout p 0.3: %d of %d inputs kept\n", kept, M * IN);
        test_fwd(x, a, b, y0);
        test_bwd(x, a, b, dy);
    }
    return sdp_test_finish(sdp_test_nfail);
}
