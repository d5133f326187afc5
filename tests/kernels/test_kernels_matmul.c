/* SPDX-License-Identifier: MIT */
/* Checks the three linear-layer GEMMs, BLAS-backed and triple-loop reference, against fp64 oracles
 * (||C - Cref||_F / (k u32 ||A||_F ||B||_F) < 10), with and without a residual (also aliased), on
 * odd shapes, k = 1, zeros and large magnitudes; and that the BLAS path gives the same bits when
 * called twice and from another thread. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "tests/lib/sdp_test.h"

/* out (M, N) = resid + x (M, K) . w (N, K)^T, in double */
static void oracle_fwd(double *out, const float *resid, const float *x, const float *w, int M,
                       int K, int N)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = resid ? resid[(size_t)m * N + n] : 0.0;
            for (int k = 0; k < K; k++)
                s += (double)x[(size_t)m * K + k] * w[(size_t)n * K + k];
            out[(size_t)m * N + n] = s;
        }
}

/* dx (M, K) = dout (M, N) . w (N, K) */
static void oracle_bwd_data(double *dx, const float *dout, const float *w, int M, int K, int N)
{
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {
            double s = 0.0;
            for (int n = 0; n < N; n++)
                s += (double)dout[(size_t)m * N + n] * w[(size_t)n * K + k];
            dx[(size_t)m * K + k] = s;
        }
}

/* dw (N, K) = dw0 + dout^T . x */
static void oracle_bwd_weight(double *dw, const float *dw0, const float *dout, const float *x,
                              int M, int K, int N)
{
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double s = dw0[(size_t)n * K + k];
            for (int m = 0; m < M; m++)
                s += (double)dout[(size_t)m * N + n] * x[(size_t)m * K + k];
            dw[(size_t)n * K + k] = s;
        }
}

struct thread_job {
    float *out;
    const float *x, *w;
    int M, K, N;
};

static void *thread_fwd(void *arg)
{
    struct thread_job *j = arg;
    sdp_cpu_matmul_fwd(j->out, NULL, j->x, j->w, j->M, j->K, j->N);
    return NULL;
}

static int run_shape(struct sdp_rng *rng, int M, int K, int N, float amp, int zeros)
{
    const size_t nx = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
    float *x = sdp_test_alloc(nx * 4), *w = sdp_test_alloc(nw * 4), *res = sdp_test_alloc(no * 4);
    float *dout = sdp_test_alloc(no * 4), *out = sdp_test_alloc(no * 4);
    float *dx = sdp_test_alloc(nx * 4), *dw = sdp_test_alloc(nw * 4), *dw0 = sdp_test_alloc(nw * 4);
    double *ref = sdp_test_alloc((no > nw ? (no > nx ? no : nx) : (nw > nx ? nw : nx)) * 8);
    char name[96];
    int nfail = 0;

    if (!zeros) {
        sdp_fill_normal(rng, x, nx, amp);
        sdp_fill_normal(rng, w, nw, amp);
        sdp_fill_normal(rng, res, no, amp * amp);
        sdp_fill_normal(rng, dout, no, amp);
        sdp_fill_normal(rng, dw0, nw, amp * amp);
    }
    const double nxf = sdp_norm_f(x, nx), nwf = sdp_norm_f(w, nw), nres = sdp_norm_f(res, no);
    const double ndo = sdp_norm_f(dout, no), ndw0 = sdp_norm_f(dw0, nw);
    printf("-- M=%d K=%d N=%d amp=%g%s\n", M, K, N, (double)amp, zeros ? " (zeros)" : "");

    for (int impl = 0; impl < 2; impl++) {
        const char *tag = impl ? "ref" : "blas";
        void (*fwd)(float *, const float *, const float *, const float *, int, int, int) =
            impl ? sdp_cpu_matmul_fwd_ref : sdp_cpu_matmul_fwd;
        void (*bwdd)(float *, const float *, const float *, int, int, int) =
            impl ? sdp_cpu_matmul_bwd_data_ref : sdp_cpu_matmul_bwd_data;
        void (*bwdw)(float *, const float *, const float *, int, int, int) =
            impl ? sdp_cpu_matmul_bwd_weight_ref : sdp_cpu_matmul_bwd_weight;

        oracle_fwd(ref, NULL, x, w, M, K, N);
        memset(out, 0x7f, no * 4); /* garbage: must be overwritten */
        fwd(out, NULL, x, w, M, K, N);
        snprintf(name, sizeof(name), "matmul_fwd %s", tag);
        nfail += sdp_check_gemm(name, out, ref, no, K, nxf * nwf);

        oracle_fwd(ref, res, x, w, M, K, N);
        fwd(out, res, x, w, M, K, N);
        snprintf(name, sizeof(name), "matmul_fwd+resid %s", tag);
        nfail += sdp_check_gemm(name, out, ref, no, K + 1, nxf * nwf + nres);

        memcpy(out, res, no * 4); /* out aliases resid */
        fwd(out, out, x, w, M, K, N);
        snprintf(name, sizeof(name), "matmul_fwd+resid aliased %s", tag);
        nfail += sdp_check_gemm(name, out, ref, no, K + 1, nxf * nwf + nres);

        oracle_bwd_data(ref, dout, w, M, K, N);
        memset(dx, 0x7f, nx * 4);
        bwdd(dx, dout, w, M, K, N);
        snprintf(name, sizeof(name), "matmul_bwd_data %s", tag);
        nfail += sdp_check_gemm(name, dx, ref, nx, N, ndo * nwf);

        oracle_bwd_weight(ref, dw0, dout, x, M, K, N);
        memcpy(dw, dw0, nw * 4);
        bwdw(dw, dout, x, M, K, N);
        snprintf(name, sizeof(name), "matmul_bwd_weight %s", tag);
        nfail += sdp_check_gemm(name, dw, ref, nw, M + 1, ndo * nxf + ndw0);
    }

    /* determinism of the BLAS path: same bits twice, and from another thread */
    float *again = sdp_test_alloc(no * 4);
    sdp_cpu_matmul_fwd(out, NULL, x, w, M, K, N);
    sdp_cpu_matmul_fwd(again, NULL, x, w, M, K, N);
    nfail += sdp_check_bits("matmul_fwd blas twice", again, out, no);
    struct thread_job job = { again, x, w, M, K, N };
    pthread_t th;
    memset(again, 0, no * 4);
    if (pthread_create(&th, NULL, thread_fwd, &job) == 0) {
        pthread_join(th, NULL);
        nfail += sdp_check_bits("matmul_fwd blas other thread", again, out, no);
    }
    free(again);
    free(x), free(w), free(res), free(dout), free(out), free(dx), free(dw), free(dw0), free(ref);
    return nfail;
}

int main(void)
{
    struct sdp_rng rng = { 7 };
    int nfail = 0;

    nfail += run_shape(&rng, 1, 1, 1, 1.0f, 0);
    nfail += run_shape(&rng, 7, 13, 5, 1.0f, 0);
    nfail += run_shape(&rng, 64, 128, 96, 1.0f, 0);
    nfail += run_shape(&rng, 33, 257, 65, 0.02f, 0);
    nfail += run_shape(&rng, 5, 1, 9, 1.0f, 0);       /* k = 1 */
    nfail += run_shape(&rng, 17, 31, 3, 1e17f, 0);    /* products near 1e34 */
    nfail += run_shape(&rng, 8, 16, 12, 1.0f, 1);     /* all zeros: exact 0 */
    nfail += run_shape(&rng, 128, 384, 256, 1.0f, 0); /* BLAS blocking in play */
    return sdp_test_finish(nfail);
}
