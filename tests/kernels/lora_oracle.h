/* SPDX-License-Identifier: MIT */
/* The fp64 oracle of the LoRA kernels, shared by tests/kernels/test_kernels_lora.c (CPU) and
 * test_cuda_lora.c (GPU): the shapes, the forward into a column slice of a wider output, the
 * backward's dx, dA and dB accumulated onto given values, and for every element kappa, the
 * first-order error magnitude of the two chained GEMMs: for D = C + s P Q with P itself a product
 * of n terms, the outer GEMM of k terms contributes (k + 1) s sum |P||Q| (Higham, Thm 3.1, plus
 * the accumulation), the inner one (n + 1) s sum |Q| sum |P's terms|, and the final addition |D|.
 * A result passes when |x_i - ref_i| <= SDP_SAFETY * u * kappa_i, u the unit roundoff of the step
 * that rounds most.  With the dropout (lora_keep below) the oracle applies the kernels' mask. */
#ifndef SDP_TEST_LORA_ORACLE_H
#define SDP_TEST_LORA_ORACLE_H

#include <math.h>
#include <stdio.h>

#include "tests/lib/sdp_test.h"

enum { M = 37, IN = 24, OUT = 20, R = 5, LDY = 52, COL0 = 12 };
static const double S = 1.75;

/* The dropout of the adapter's input (PEFT's lora_dropout): with lora_keep set, the oracle reads
 * x[i] * lora_scale where lora_keep[i], else 0 (in fp64, exact), and its kappas count one more
 * rounding where the kernels round the dropped input and the masked input gradient (d = 1). */
static const unsigned char *lora_keep;
static float lora_scale = 1.0f;

static double lora_x(const float *x, int i)
{
    return !lora_keep ? (double)x[i] : lora_keep[i] ? (double)x[i] * lora_scale : 0.0;
}

/* count of elements of got[0..n) beyond SDP_SAFETY u kappa of ref; prints the worst ratio */
static int lora_compare(const char *what, const float *got, const double *ref, const double *kappa,
                        int n, double u)
{
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double r = fabs(got[i] - ref[i]) / (SDP_SAFETY * u * (kappa[i] > 1e-30 ? kappa[i] : 1e-30));
        worst = r > worst ? r : worst;
        bad += !(r <= 1);
    }
    printf("%-22s %4d values, worst error %.3f of its bound\n", what, n, worst);
    CHECK(bad == 0, "%s: %d values beyond the bound", what, bad);
    return bad;
}

/* u = x A^T (M, R) and sum |x||A| per element */
static void lora_oracle_u(const float *x, const float *a, double *u, double *uabs)
{
    for (int m = 0; m < M; m++)
        for (int k = 0; k < R; k++) {
            double acc = 0, abs_ = 0;
            for (int l = 0; l < IN; l++) {
                acc += lora_x(x, m * IN + l) * a[k * IN + l];
                abs_ += fabs(lora_x(x, m * IN + l) * a[k * IN + l]);
            }
            u[m * R + k] = acc, uabs[m * R + k] = abs_;
        }
}

/* The forward's slice y0[:, COL0:COL0+OUT] + s u B^T into ref (M, OUT), kappa into kap */
static void lora_oracle_fwd(const float *x, const float *a, const float *b, const float *y0,
                            double *ref, double *kap)
{
    static double du[M * R], uabs[M * R];
    int dk = lora_keep != NULL;
    lora_oracle_u(x, a, du, uabs);
    for (int m = 0; m < M; m++)
        for (int j = 0; j < OUT; j++) {
            double acc = 0, k1 = 0, k2 = 0;
            for (int k = 0; k < R; k++) {
                acc += du[m * R + k] * b[j * R + k];
                k1 += fabs(du[m * R + k] * b[j * R + k]);
                k2 += fabs((double)b[j * R + k]) * uabs[m * R + k];
            }
            ref[m * OUT + j] = y0[m * LDY + COL0 + j] + S * acc;
            kap[m * OUT + j] = fabs(ref[m * OUT + j]) + S * ((R + 1) * k1 + (IN + 1 + dk) * k2);
        }
}

/* The backward from dy's slice onto dx0, ga0, gb0: dB += s dy^T u, dA += s v^T x, dx += s v A with
 * v = dy B; results and their kappas into rgb/kgb (OUT, R), rga/kga (R, IN), rdx/kdx (M, IN) */
static void lora_oracle_bwd(const float *x, const float *a, const float *b, const float *dy,
                            const float *dx0, const float *ga0, const float *gb0, double *rdx,
                            double *kdx, double *rga, double *kga, double *rgb, double *kgb)
{
    static double du[M * R], uabs[M * R], dv[M * R], vabs[M * R];
    int dk = lora_keep != NULL;
    lora_oracle_u(x, a, du, uabs);
    for (int m = 0; m < M; m++) /* v = dy B */
        for (int k = 0; k < R; k++) {
            double acc = 0, abs_ = 0;
            for (int j = 0; j < OUT; j++) {
                acc += (double)dy[m * LDY + COL0 + j] * b[j * R + k];
                abs_ += fabs((double)dy[m * LDY + COL0 + j] * b[j * R + k]);
            }
            dv[m * R + k] = acc, vabs[m * R + k] = abs_;
        }
    for (int j = 0; j < OUT; j++) /* dB += s dy^T u */
        for (int k = 0; k < R; k++) {
            double acc = 0, k1 = 0, k2 = 0;
            for (int m = 0; m < M; m++) {
                double d = dy[m * LDY + COL0 + j];
                acc += d * du[m * R + k], k1 += fabs(d * du[m * R + k]);
                k2 += fabs(d) * uabs[m * R + k];
            }
            rgb[j * R + k] = gb0[j * R + k] + S * acc;
            kgb[j * R + k] = fabs(rgb[j * R + k]) + S * ((M + 1) * k1 + (IN + 1 + dk) * k2);
        }
    for (int k = 0; k < R; k++) /* dA += s v^T x */
        for (int l = 0; l < IN; l++) {
            double acc = 0, k1 = 0, k2 = 0;
            for (int m = 0; m < M; m++) {
                double xv = lora_x(x, m * IN + l);
                acc += dv[m * R + k] * xv, k1 += fabs(dv[m * R + k] * xv);
                k2 += fabs(xv) * vabs[m * R + k];
            }
            rga[k * IN + l] = ga0[k * IN + l] + S * acc;
            kga[k * IN + l] = fabs(rga[k * IN + l]) + S * ((M + 1 + dk) * k1 + (OUT + 1) * k2);
        }
    for (int m = 0; m < M; m++) /* dx += s v A, through the dropout's mask and scale */
        for (int l = 0; l < IN; l++) {
            double acc = 0, k1 = 0, k2 = 0, f = 1;
            for (int k = 0; k < R; k++) {
                double av = a[k * IN + l];
                acc += dv[m * R + k] * av, k1 += fabs(dv[m * R + k] * av);
                k2 += fabs(av) * vabs[m * R + k];
            }
            if (lora_keep)
                f = lora_keep[m * IN + l] ? lora_scale : 0.0;
            rdx[m * IN + l] = dx0[m * IN + l] + f * S * acc;
            kdx[m * IN + l] = fabs(rdx[m * IN + l]) + f * S * ((R + 1 + dk) * k1 + (OUT + 1) * k2);
        }
}

#endif
