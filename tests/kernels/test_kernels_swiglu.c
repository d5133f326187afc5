/* SPDX-License-Identifier: MIT */
/* Checks SwiGLU forward and backward against an fp64 oracle on random inputs and adversarial gates
 * (0, +-1.278 where silu' crosses zero, +-17 where 1 - sigmoid drops below u32, +-100 where exp
 * overflows); the oracle's backward is checked against finite differences. */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

static double silu(double g)
{
    return g / (1.0 + exp(-g));
}

int main(void)
{
    enum { N = 9, I = 200 };
    static float gu[N * 2 * I], out[N * I], dout[N * I], dgu[N * 2 * I];
    static double ref[N * 2 * I], mag[N * 2 * I];
    static const float special[] = { 0.0f,    -0.0f, 1.278464f, -1.278464f, 17.0f, -17.0f, 100.0f,
                                     -100.0f, 88.0f, -88.0f,    1e-30f,     30.0f, -30.0f };
    struct sdp_rng rng = { 29 };
    int nfail = 0;

    sdp_fill_normal(&rng, gu, N * 2 * I, 3.0f);
    sdp_fill_normal(&rng, dout, N * I, 1.0f);
    for (size_t j = 0; j < sizeof(special) / sizeof(special[0]); j++)
        gu[j] = special[j];

    /* finite differences of the oracle's derivative d silu(g)/dg = sig (1 + g (1 - sig)) */
    double worst = 0.0;
    for (int j = 0; j < 64; j++) {
        const double g = -8.0 + 0.25 * j, h = 1e-6, sig = 1.0 / (1.0 + exp(-g));
        const double an = sig * (1.0 + g * (1.0 - sig)), fd = (silu(g + h) - silu(g - h)) / (2 * h);
        worst = fabs(an - fd) > worst ? fabs(an - fd) : worst;
    }
    printf("oracle silu' vs finite differences: max abs err %.3g (allowed 1e-8)  %s\n", worst,
           worst < 1e-8 ? "ok" : "BAD");
    nfail += !(worst < 1e-8);

    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++)
            ref[n * I + i] = silu(gu[n * 2 * I + i]) * gu[n * 2 * I + I + i];
    sdp_cpu_swiglu_fwd_ref(out, gu, N, I);
    nfail += sdp_check_elem("swiglu_fwd", out, ref, N * I);

    /* dgate = dout up sig (1 + g (1 - sig)): magnitude |dout up| sig (1 + |g| (1 - sig)), plus the
     * absolute error u32 of the rounded sig that 1 - sig inherits, times |g|: 2 u32 |dout up g| sig
     * expressed in units of SDP_RTOL_ELEM.  dup = dout silu(g): elementwise. */
    double rmax = 0.0;
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            const double g = gu[n * 2 * I + i], u = gu[n * 2 * I + I + i], d = dout[n * I + i];
            const double sig = 1.0 / (1.0 + exp(-g));
            double *r = ref + n * 2 * I, *m = mag + n * 2 * I;
            r[i] = d * u * sig * (1.0 + g * (1.0 - sig));
            m[i] = fabs(d * u) * sig *
                   (1.0 + fabs(g) * (1.0 - sig) + fabs(g) * 2 * SDP_U32 / SDP_RTOL_ELEM);
            r[I + i] = d * silu(g);
            m[I + i] = fabs(r[I + i]);
            rmax = fabs(r[i]) > rmax ? fabs(r[i]) : rmax;
            rmax = fabs(r[I + i]) > rmax ? fabs(r[I + i]) : rmax;
        }
    sdp_cpu_swiglu_bwd_ref(dgu, dout, gu, N, I);
    nfail += sdp_check("swiglu_bwd", dgu, ref, mag, N * 2 * I, SDP_RTOL_ELEM, SDP_RTOL_ELEM * rmax);
    return sdp_test_finish(nfail);
}
