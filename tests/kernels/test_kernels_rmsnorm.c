/* SPDX-License-Identifier: MIT */
/* Checks RMSNorm forward (out, rstd) and backward (dx with and without a residual gradient,
 * aliased, and the accumulated dw) against an analytic fp64 oracle, on random rows, a zero row,
 * huge and tiny rows and D = 1.  The oracle's backward is itself checked against central finite
 * differences of its forward, in double. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

/* y (R, D) = x r w, r = 1/sqrt(mean(x^2) + eps), all double */
static void oracle_fwd(double *y, double *rstd, const double *x, const double *w, int R, int D,
                       double eps)
{
    for (int r = 0; r < R; r++) {
        double ss = 0.0;
        for (int i = 0; i < D; i++)
            ss += x[r * D + i] * x[r * D + i];
        const double rs = 1.0 / sqrt(ss / D + eps);
        rstd[r] = rs;
        for (int i = 0; i < D; i++)
            y[r * D + i] = x[r * D + i] * rs * w[i];
    }
}

/* dx_j = r w_j g_j - r^3/D x_j sum_i g_i w_i x_i (mag: |first| + |second|); dw_i = sum_r g x r */
static void oracle_bwd(double *dx, double *dxmag, double *dw, double *dwmag, const double *g,
                       const double *x, const double *w, int R, int D, double eps)
{
    for (int i = 0; i < D; i++)
        dw[i] = dwmag[i] = 0.0;
    for (int r = 0; r < R; r++) {
        double ss = 0.0, dot = 0.0, adot = 0.0;
        for (int i = 0; i < D; i++) {
            ss += x[r * D + i] * x[r * D + i];
            dot += g[r * D + i] * w[i] * x[r * D + i];
            adot += fabs(g[r * D + i] * w[i] * x[r * D + i]);
        }
        const double rs = 1.0 / sqrt(ss / D + eps), c = rs * rs * rs / D;
        for (int i = 0; i < D; i++) {
            const double a = rs * w[i] * g[r * D + i], b = c * x[r * D + i] * dot;
            dx[r * D + i] = a - b;
            if (dxmag)
                dxmag[r * D + i] = fabs(a) + c * fabs(x[r * D + i]) * adot;
            dw[i] += g[r * D + i] * x[r * D + i] * rs;
            dwmag[i] += fabs(g[r * D + i] * x[r * D + i] * rs);
        }
    }
}

/* finite differences of L = sum g . y(x, w) against oracle_bwd, in double */
static int check_oracle_fd(void)
{
    enum { R = 3, D = 5 };
    struct sdp_rng rng = { 99 };
    double x[R * D], w[D], g[R * D], y[R * D], rs[R], dx[R * D], dw[D], dwmag[D];
    double worst = 0.0;
    const double eps = 1e-5;

    for (int i = 0; i < R * D; i++) {
        x[i] = sdp_rng_normal(&rng, 1.0f);
        g[i] = sdp_rng_normal(&rng, 1.0f);
    }
    for (int i = 0; i < D; i++)
        w[i] = 1.0 + sdp_rng_normal(&rng, 0.3f);
    oracle_bwd(dx, NULL, dw, dwmag, g, x, w, R, D, eps);
    for (int which = 0; which < 2; which++) {
        double *p = which ? w : x;
        const double *an = which ? dw : dx;
        for (int i = 0; i < (which ? D : R * D); i++) {
            const double h = 1e-6, save = p[i];
            double lp = 0.0, lm = 0.0;
            p[i] = save + h;
            oracle_fwd(y, rs, x, w, R, D, eps);
            for (int j = 0; j < R * D; j++)
                lp += g[j] * y[j];
            p[i] = save - h;
            oracle_fwd(y, rs, x, w, R, D, eps);
            for (int j = 0; j < R * D; j++)
                lm += g[j] * y[j];
            p[i] = save;
            const double fd = (lp - lm) / (2 * h), e = fabs(fd - an[i]) / (1.0 + fabs(an[i]));
            worst = e > worst ? e : worst;
        }
    }
    /* central differences: truncation h^2 ~ 1e-12, cancellation ~ 1e-16 / h ~ 1e-10 */
    const int bad = !(worst < 1e-7);
    printf("oracle backward vs finite differences: max rel err %.3g (allowed 1e-7)  %s\n", worst,
           bad ? "BAD" : "ok");
    return bad;
}

static int run_case(struct sdp_rng *rng, const char *label, int R, int D, float amp, int zero_row)
{
    const size_t n = (size_t)R * D;
    const float eps = 1e-6f;
    float *x = sdp_test_alloc(n * 4), *w = sdp_test_alloc(D * 4), *out = sdp_test_alloc(n * 4);
    float *rstd = sdp_test_alloc(R * 4), *dout = sdp_test_alloc(n * 4),
          *dres = sdp_test_alloc(n * 4);
    float *dx = sdp_test_alloc(n * 4), *dw = sdp_test_alloc(D * 4), *dw0 = sdp_test_alloc(D * 4);
    double *xd = sdp_test_alloc(n * 8), *wd = sdp_test_alloc(D * 8), *gd = sdp_test_alloc(n * 8);
    double *yref = sdp_test_alloc(n * 8), *rref = sdp_test_alloc(R * 8);
    double *dxref = sdp_test_alloc(n * 8), *dxmag = sdp_test_alloc(n * 8);
    double *dwref = sdp_test_alloc(D * 8), *dwmag = sdp_test_alloc(D * 8);
    char name[96];
    int nfail = 0;

    printf("-- %s: R=%d D=%d amp=%g\n", label, R, D, (double)amp);
    sdp_fill_normal(rng, x, n, amp);
    if (zero_row)
        memset(x, 0, (size_t)D * 4);
    for (int i = 0; i < D; i++)
        w[i] = 1.0f + sdp_rng_normal(rng, 0.2f);
    sdp_fill_normal(rng, dout, n, 1.0f);
    sdp_fill_normal(rng, dres, n, 1.0f);
    sdp_fill_normal(rng, dw0, D, 1.0f);
    for (size_t i = 0; i < n; i++) {
        xd[i] = x[i];
        gd[i] = dout[i];
    }
    for (int i = 0; i < D; i++)
        wd[i] = w[i];

    oracle_fwd(yref, rref, xd, wd, R, D, eps);
    sdp_cpu_rmsnorm_fwd_ref(out, rstd, x, w, R, D, eps);
    snprintf(name, sizeof(name), "rmsnorm_fwd out (%s)", label);
    nfail += sdp_check_elem(name, out, yref, n);
    snprintf(name, sizeof(name), "rmsnorm_fwd rstd (%s)", label);
    nfail += sdp_check_elem(name, rstd, rref, R);

    /* backward: dx and dw magnitudes from the oracle; dx: ~8 roundings (r^3 from the rounded rstd,
     * products, the difference, the residual add) relative to |a| + |b|: SDP_RTOL_ELEM. dw: a sum
     * of R + 1 terms, each after 2 products: 10 u32 (R + 3) sum|t|. */
    oracle_bwd(dxref, dxmag, dwref, dwmag, gd, xd, wd, R, D, eps);
    for (int i = 0; i < D; i++) {
        dwref[i] += dw0[i];
        dwmag[i] = (R + 3) * (dwmag[i] + fabs(dw0[i]));
    }
    memcpy(dw, dw0, D * 4);
    sdp_cpu_rmsnorm_bwd_ref(dx, dw, NULL, dout, x, w, rstd, R, D);
    snprintf(name, sizeof(name), "rmsnorm_bwd dx (%s)", label);
    nfail += sdp_check(name, dx, dxref, dxmag, n, SDP_RTOL_ELEM, 0.0);
    snprintf(name, sizeof(name), "rmsnorm_bwd dw (%s)", label);
    nfail += sdp_check(name, dw, dwref, dwmag, D, SDP_SAFETY * SDP_U32, 0.0);

    /* with a residual gradient, dx aliasing dres */
    for (size_t i = 0; i < n; i++) {
        dxref[i] += dres[i];
        dxmag[i] += fabs(dres[i]);
    }
    memcpy(dx, dres, n * 4);
    sdp_cpu_rmsnorm_bwd_ref(dx, dw, dx, dout, x, w, rstd, R, D);
    snprintf(name, sizeof(name), "rmsnorm_bwd dx+dres aliased (%s)", label);
    nfail += sdp_check(name, dx, dxref, dxmag, n, SDP_RTOL_ELEM, 0.0);

    free(x), free(w), free(out), free(rstd), free(dout), free(dres), free(dx), free(dw), free(dw0);
    free(xd), free(wd), free(gd), free(yref), free(rref), free(dxref), free(dxmag), free(dwref);
    free(dwmag);
    return nfail;
}

int main(void)
{
    struct sdp_rng rng = { 11 };
    int nfail = 0;

    nfail += check_oracle_fd();
    nfail += run_case(&rng, "random", 13, 64, 1.0f, 0);
    nfail += run_case(&rng, "zero row", 4, 96, 1.0f, 1);
    nfail += run_case(&rng, "huge", 5, 128, 1e15f, 0);
    nfail += run_case(&rng, "tiny", 5, 128, 1e-5f, 0);
    nfail += run_case(&rng, "D=1", 7, 1, 2.0f, 0);
    nfail += run_case(&rng, "wide", 16, 4096, 1.0f, 0);
    return sdp_test_finish(nfail);
}
