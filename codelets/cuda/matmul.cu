// SPDX-License-Identifier: MIT
/* The three GEMMs of a linear layer through cuBLASLt, and the column-major GEMM they share with the
 * LM head (gemm_internal.h).  Row-major (r, c) operands are passed as column-major (c, r) matrices,
 * so every product is computed transposed.  fp32 compute; dt=F32 runs pedantic fp32 (never TF32).
 * Descriptors and heuristic algorithms are cached per shape in a mutex-guarded table, since several
 * workers may call at once.  Never allocates device memory or synchronizes.
 * Test: tests/kernels/test_cuda_matmul.c (fp64 oracle, TF32 detector, qwen3-4b shapes timed). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/gemm_internal.h"

/* ---- plan cache ---- */

/* Everything the descriptors and the algorithm depend on.  Alignments enter the heuristic (an
 * algorithm chosen for 256-byte aligned pointers may fail on an offset block of rows). */
struct gemm_key {
    int transa, transb, m, n, k, lda, ldb, ldd, ab_dt, d_dt, has_beta, c_is_d, dev;
    unsigned align_a, align_b, align_c, align_d;
    size_t ws_bytes;
};

struct gemm_plan {
    struct gemm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, cd;
    cublasLtMatmulAlgo_t algo;
};

/* Enough for every (shape, dt) of one model (~12 per layer kind) plus the LM head's blocks; when
 * full, plans are built per call and destroyed after the enqueue (descriptors are host-only). */
#define NPLANS 64
static struct gemm_plan plans[NPLANS];
static int nplans;
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

static void lt_fail(const char *what, cublasStatus_t st, const struct gemm_key *k)
{
    fprintf(stderr,
            "[sdp][error][sdp_cuda_gemm_lt@%s] %s: %s (m=%d n=%d k=%d transa=%d transb=%d "
            "lda=%d ldb=%d ldd=%d ab_dt=%d d_dt=%d ws=%zu)\n",
            __FILE__, what, cublasLtGetStatusString(st), k->m, k->n, k->k, k->transa, k->transb,
            k->lda, k->ldb, k->ldd, k->ab_dt, k->d_dt, k->ws_bytes);
    fprintf(stderr, "hint: the launchers expect valid shapes and a cuBLASLt workspace of 32 MiB\n");
    abort();
}

static unsigned ptr_align(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    unsigned a = 256;
    while (a > 1 && (u & (a - 1)))
        a >>= 1;
    return a;
}

static cudaDataType_t cuda_type(int dt)
{
    return dt == SDP_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static void plan_destroy(struct gemm_plan *p)
{
    cublasLtMatrixLayoutDestroy(p->cd);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatmulDescDestroy(p->op);
}

/* Descriptors for compute type ct, and the heuristic's first algorithm; returns the heuristic's
 * status (CUBLAS_STATUS_NOT_SUPPORTED when it finds none). */
static cublasStatus_t plan_try(cublasLtHandle_t lt, struct gemm_plan *p, cublasComputeType_t ct)
{
    const struct gemm_key *k = &p->key;
    const cublasOperation_t ta = k->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = k->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t ab = cuda_type(k->ab_dt), d = cuda_type(k->d_dt);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    cublasStatus_t st;
    int nres = 0;
    const uint64_t ws = k->ws_bytes;
    const uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;

    st = cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st; /* this compute type is not available: the caller may try another */
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    /* stored shapes: A is (m, k) or, transposed, (k, m); likewise B (k, n) or (n, k) */
    if ((st = cublasLtMatrixLayoutCreate(&p->a, ab, k->transa ? k->k : k->m,
                                         k->transa ? k->m : k->k, k->lda)) ||
        (st = cublasLtMatrixLayoutCreate(&p->b, ab, k->transb ? k->n : k->k,
                                         k->transb ? k->k : k->n, k->ldb)) ||
        (st = cublasLtMatrixLayoutCreate(&p->cd, d, k->m, k->n, k->ldd)))
        lt_fail("cublasLtMatrixLayoutCreate", st, k);

    if ((st = cublasLtMatmulPreferenceCreate(&pref)))
        lt_fail("cublasLtMatmulPreferenceCreate", st, k);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    /* split-K partial sums reduced in fp32 in the workspace, never in the output buffer: an
     * in-place reduction rounds partials to a bf16 output and, with out aliasing resid, lost
     * accuracy in the test (errors of several bf16 ulps) */
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red,
                                         sizeof(red));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                         &k->align_a, sizeof(k->align_a));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                         &k->align_b, sizeof(k->align_b));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                         &k->align_c, sizeof(k->align_c));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                         &k->align_d, sizeof(k->align_d));
    st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->cd, p->cd, pref, 1, &res, &nres);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && nres < 1)
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st == CUBLAS_STATUS_SUCCESS)
        p->algo = res.algo;
    else
        plan_destroy(p);
    return st;
}

static void plan_build(cublasLtHandle_t lt, struct gemm_plan *p)
{
    cublasStatus_t st;

    if (p->key.ab_dt == SDP_CUDA_BF16) {
        st = plan_try(lt, p, CUBLAS_COMPUTE_32F);
    } else {
        /* pedantic: fp32 products and sums whatever NVIDIA_TF32_OVERRIDE says; plain 32F (which
         * never uses TF32 either) if this cuBLASLt has no pedantic kernel for the shape */
        st = plan_try(lt, p, CUBLAS_COMPUTE_32F_PEDANTIC);
        if (st != CUBLAS_STATUS_SUCCESS)
            st = plan_try(lt, p, CUBLAS_COMPUTE_32F);
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        lt_fail("cublasLtMatmulAlgoGetHeuristic", st, &p->key);
}

/* Returns the cached plan for key, building it on a miss; *tmp is set when the table was full and
 * the caller must destroy the plan after use.  The lock is held while building: the heuristic
 * runs once per shape, and holding it keeps two workers from building the same plan. */
static struct gemm_plan *plan_get(cublasLtHandle_t lt, const struct gemm_key *key,
                                  struct gemm_plan *tmp, int *is_tmp)
{
    struct gemm_plan *p = NULL;

    *is_tmp = 0;
    pthread_mutex_lock(&plans_lock);
    for (int i = 0; i < nplans; i++)
        if (!memcmp(&plans[i].key, key, sizeof(*key))) {
            p = &plans[i];
            break;
        }
    if (!p) {
        if (nplans < NPLANS) {
            p = &plans[nplans];
        } else {
            p = tmp;
            *is_tmp = 1;
        }
        p->key = *key;
        plan_build(lt, p);
        if (!*is_tmp)
            nplans++; /* published only once complete: readers take the same lock */
    }
    pthread_mutex_unlock(&plans_lock);
    return p;
}

void sdp_cuda_gemm_lt(cublasLtHandle_t lt, int transa, int transb, int m, int n, int k,
                      const void *A, int lda, const void *B, int ldb, float beta, const void *C,
                      void *D, int ldd, int ab_dt, int d_dt, void *ws, size_t ws_bytes,
                      cudaStream_t s)
{
    struct gemm_key key;
    struct gemm_plan tmp, *p;
    const float alpha = 1.0f;
    int is_tmp;
    cublasStatus_t st;

    if (beta == 0.0f)
        C = D;
    memset(&key, 0, sizeof(key)); /* padding too: keys are compared with memcmp */
    key.transa = !!transa;
    key.transb = !!transb;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldd = ldd;
    key.ab_dt = ab_dt;
    key.d_dt = d_dt;
    key.has_beta = beta != 0.0f;
    key.c_is_d = C == D;
    if (cudaGetDevice(&key.dev) != cudaSuccess)
        key.dev = -1;
    key.align_a = ptr_align(A);
    key.align_b = ptr_align(B);
    key.align_c = ptr_align(C);
    key.align_d = ptr_align(D);
    key.ws_bytes = ws ? ws_bytes : 0;

    p = plan_get(lt, &key, &tmp, &is_tmp);
    st = cublasLtMatmul(lt, p->op, &alpha, A, p->a, B, p->b, &beta, C, p->cd, D, p->cd, &p->algo,
                        ws, key.ws_bytes, s);
    if (is_tmp)
        plan_destroy(p);
    if (st != CUBLAS_STATUS_SUCCESS)
        lt_fail("cublasLtMatmul", st, &key);
}

/* ---- the three GEMMs of a linear layer (row-major, see sdp_cuda_kernels.h) ---- */

static size_t dt_size(int dt)
{
    return dt == SDP_CUDA_BF16 ? 2 : 4;
}

void sdp_cuda_matmul_fwd(cublasLtHandle_t lt, void *out, const void *resid, const void *x,
                         const void *w, int M, int K, int N, int dt, void *ws, size_t ws_bytes,
                         cudaStream_t s)
{
    sdp_cuda_matmul_fwd_res(lt, out, resid, x, w, M, K, N, dt, dt, ws, ws_bytes, s);
}

/* x and w in dt, out and resid in out_dt: cuBLASLt takes C/D of another type than A/B (bf16 A/B
 * with fp32 C/D and fp32 compute), so the fp32 residual add happens in the GEMM's epilogue */
void sdp_cuda_matmul_fwd_res(cublasLtHandle_t lt, void *out, const void *resid, const void *x,
                             const void *w, int M, int K, int N, int dt, int out_dt, void *ws,
                             size_t ws_bytes, cudaStream_t s)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* empty sum: out = resid or 0 */
        const size_t nbytes = (size_t)M * N * dt_size(out_dt);
        if (!resid)
            cudaMemsetAsync(out, 0, nbytes, s);
        else if (resid != out)
            cudaMemcpyAsync(out, resid, nbytes, cudaMemcpyDeviceToDevice, s);
        return;
    }
    /* out^T (N, M) = w (K, N)^T . x^T (K, M) [+ resid^T], all column-major */
    sdp_cuda_gemm_lt(lt, 1, 0, N, M, K, w, K, x, K, resid ? 1.0f : 0.0f, resid, out, N, dt, out_dt,
                     ws, ws_bytes, s);
}

void sdp_cuda_matmul_bwd_data(cublasLtHandle_t lt, void *dx, const void *dout, const void *w, int M,
                              int K, int N, int dt, void *ws, size_t ws_bytes, cudaStream_t s)
{
    if (M <= 0 || K <= 0)
        return;
    if (N <= 0) {
        cudaMemsetAsync(dx, 0, (size_t)M * K * dt_size(dt), s);
        return;
    }
    /* dx^T (K, M) = w^T (K, N) . dout^T (N, M) */
    sdp_cuda_gemm_lt(lt, 0, 0, K, M, N, w, K, dout, N, 0.0f, NULL, dx, K, dt, dt, ws, ws_bytes, s);
}

void sdp_cuda_matmul_bwd_weight(cublasLtHandle_t lt, float *dw, const void *dout, const void *x,
                                int M, int K, int N, int dt, void *ws, size_t ws_bytes,
                                cudaStream_t s)
{
    if (M <= 0 || K <= 0 || N <= 0)
        return;
    /* dw^T (K, N) += x^T (K, M) . dout (M, N), dw fp32 */
    sdp_cuda_gemm_lt(lt, 0, 1, K, N, M, x, K, dout, N, 1.0f, dw, dw, K, dt, SDP_CUDA_F32, ws,
                     ws_bytes, s);
}
