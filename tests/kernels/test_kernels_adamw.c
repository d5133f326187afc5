/* SPDX-License-Identifier: MIT */
/* Checks AdamW against an fp64 oracle of torch.optim.AdamW's formula over several steps (each step
 * from the kernel's own previous state), with and without decay, gradient scaling, zero and huge
 * gradients; the bf16 / fp32 working copies and the zeroed gradient bit for bit; the bf16-gradient
 * entry against the fp32 one on the widened gradient (bit for bit: widening is exact); and the
 * gradient sum of squares against a long double sum. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

static int check_sumsq(struct sdp_rng *rng)
{
    enum { N = 100003 };
    static float g[N];
    int nfail = 0;

    sdp_fill_normal(rng, g, N, 1e-3f);
    g[5] = 1e18f;
    for (size_t n = 0; n <= 7; n++) { /* every tail length, and the empty sum */
        const size_t len = n < 7 ? n : N;
        long double ref = 0.0L;
        for (size_t i = 0; i < len; i++)
            ref += (long double)g[i] * g[i];
        const double got = sdp_cpu_sumsq_ref(g, len);
        /* products of floats are exact in double; len additions: len 2^-53 relative, times 10 */
        const double err = fabs(got - (double)ref), allowed = 10.0 * len * 0x1p-53 * (double)ref;
        const int bad = !(err <= allowed);
        printf("sumsq n=%-7zu got %.17g ref %.17Lg |err| %.3g  %s\n", len, got, ref, err,
               bad ? "BAD" : "ok");
        nfail += bad;
    }
    return nfail;
}

/* sdp_cpu_adamw_gbf16_ref(g) must equal sdp_cpu_adamw_ref(widen(g)) bit for bit, NaN and Inf
 * gradients included, and both dispatching entry points their references */
static int check_bf16_grad(struct sdp_rng *rng)
{
    enum { N = 1037 };
    static float p[3][N], m[3][N], v[3][N], gw[N], wf[3][N];
    static uint16_t gb[2][N], wb[3][N];
    const struct sdp_adamw_hp hp = { .lr = 1e-3f,
                                     .beta1 = 0.9f,
                                     .beta2 = 0.999f,
                                     .eps = 1e-8f,
                                     .weight_decay = 0.1f,
                                     .gscale = 0.5f,
                                     .step = 5 };
    int nbad = 0;

    sdp_fill_normal(rng, p[0], N, 1.0f);
    sdp_fill_normal(rng, m[0], N, 1e-3f);
    for (int i = 0; i < N; i++) {
        v[0][i] = fabsf(sdp_rng_normal(rng, 1e-4f));
        gb[0][i] = (uint16_t)sdp_rng_next(rng); /* every bf16 pattern: NaN, Inf, denormals */
        gw[i] = sdp_bf16_to_f32(gb[0][i]);
    }
    for (int k = 1; k < 3; k++) {
        memcpy(p[k], p[0], sizeof(p[0]));
        memcpy(m[k], m[0], sizeof(m[0]));
        memcpy(v[k], v[0], sizeof(v[0]));
    }
    memcpy(gb[1], gb[0], sizeof(gb[0]));
    sdp_cpu_adamw_ref(p[0], gw, m[0], v[0], wb[0], wf[0], N, &hp, 1, 1);
    sdp_cpu_adamw_gbf16_ref(p[1], gb[0], m[1], v[1], wb[1], wf[1], N, &hp, 1, 1);
    sdp_cpu_adamw_gbf16(p[2], gb[1], m[2], v[2], wb[2], wf[2], N, &hp, 1, 1);
    for (int k = 1; k < 3; k++) {
        nbad += memcmp(p[0], p[k], sizeof(p[0])) != 0;
        nbad += memcmp(m[0], m[k], sizeof(m[0])) != 0;
        nbad += memcmp(v[0], v[k], sizeof(v[0])) != 0;
        nbad += memcmp(wb[0], wb[k], sizeof(wb[0])) != 0;
        nbad += memcmp(wf[0], wf[k], sizeof(wf[0])) != 0;
    }
    for (int i = 0; i < N; i++)
        nbad += gb[0][i] != 0 || gb[1][i] != 0 || gw[i] != 0.0f;
    printf("adamw bf16 gradient == fp32 on the widened gradient (ref and %s): %d mismatches  %s\n",
           sdp_cpu_isa_name(sdp_cpu_isa()), nbad, nbad ? "BAD" : "ok");
    return nbad != 0;
}

int main(void)
{
    enum { N = 4101, STEPS = 4 };
    static float p[N], g[N], m[N], v[N], wf[N], gsave[N];
    static uint16_t wb[N];
    static double pref[N], pmag[N], mref[N], mmag[N], vref[N];
    struct sdp_rng rng = { 41 };
    int nfail = 0;

    nfail += check_sumsq(&rng);
    nfail += check_bf16_grad(&rng);
    sdp_fill_normal(&rng, p, N, 1.0f);
    p[0] = 0.0f;
    p[1] = 1e30f;
    for (int cfg = 0; cfg < 2; cfg++) {
        const struct sdp_adamw_hp hp = { .lr = cfg ? 3e-4f : 1e-2f,
                                         .beta1 = 0.9f,
                                         .beta2 = cfg ? 0.999f : 0.95f,
                                         .eps = 1e-8f,
                                         .weight_decay = 0.1f,
                                         .gscale = cfg ? 1.0f : 0.37f };
        const int decay = !cfg;
        memset(m, 0, sizeof(m));
        memset(v, 0, sizeof(v));
        printf("-- lr %g beta2 %g decay %d gscale %g\n", (double)hp.lr, (double)hp.beta2, decay,
               (double)hp.gscale);
        for (int step = 1; step <= STEPS; step++) {
            struct sdp_adamw_hp h = hp;
            char name[64];
            h.step = step;
            sdp_fill_normal(&rng, g, N, 1e-2f);
            g[2] = 0.0f;  /* zero gradient on a fresh moment */
            g[3] = 1e15f; /* huge, g^2 still finite in fp32 */
            g[4] = 1e-30f;
            memcpy(gsave, g, sizeof(g));
            /* oracle: PyTorch AdamW in double, from the current fp32 state */
            const double bc1 = 1.0 - pow(hp.beta1, step), bc2 = 1.0 - pow(hp.beta2, step);
            for (int i = 0; i < N; i++) {
                const double gi = (double)g[i] * hp.gscale;
                const double pd = p[i] * (decay ? 1.0 - (double)hp.lr * hp.weight_decay : 1.0);
                mref[i] = hp.beta1 * (double)m[i] + (1.0 - hp.beta1) * gi;
                vref[i] = hp.beta2 * (double)v[i] + (1.0 - hp.beta2) * gi * gi;
                const double upd = hp.lr / bc1 * mref[i] / (sqrt(vref[i]) / sqrt(bc2) + hp.eps);
                pref[i] = pd - upd;
                /* magnitudes: m and p are sums of two terms, rounded a few times each */
                mmag[i] = fabs(hp.beta1 * (double)m[i]) + fabs((1.0 - hp.beta1) * gi);
                pmag[i] = fabs(pd) + fabs(upd);
            }
            sdp_cpu_adamw_ref(p, g, m, v, step % 2 ? wb : NULL, step % 2 ? NULL : wf, N, &h, decay,
                              step != 2);
            snprintf(name, sizeof(name), "adamw step %d p", step);
            nfail += sdp_check(name, p, pref, pmag, N, SDP_RTOL_ELEM, 0.0);
            snprintf(name, sizeof(name), "adamw step %d m", step);
            nfail += sdp_check(name, m, mref, mmag, N, SDP_RTOL_ELEM, 0.0);
            snprintf(name, sizeof(name), "adamw step %d v", step);
            /* g^2 of a tiny gradient underflows in fp32: each of the ~3 operations then loses
             * less than the smallest denormal 2^-149; atol 2^-147 covers that and nothing else */
            nfail += sdp_check(name, v, vref, NULL, N, SDP_RTOL_ELEM, 0x1p-147);
            /* side outputs, bit for bit */
            int nbad = 0;
            for (int i = 0; i < N; i++) {
                if (step % 2 && wb[i] != sdp_f32_to_bf16(p[i]))
                    nbad++;
                if (!(step % 2) && memcmp(&wf[i], &p[i], 4))
                    nbad++;
                if (step != 2 ? g[i] != 0.0f : memcmp(&g[i], &gsave[i], 4) != 0)
                    nbad++;
            }
            printf("adamw step %d %s copy and %s gradient: %d mismatches  %s\n", step,
                   step % 2 ? "bf16" : "fp32", step != 2 ? "zeroed" : "kept", nbad,
                   nbad ? "BAD" : "ok");
            nfail += nbad != 0;
        }
    }
    return sdp_test_finish(nfail);
}
