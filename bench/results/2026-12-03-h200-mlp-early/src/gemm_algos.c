/* experiment: time cuBLASLt's heuristic candidates for the qwen3-4b B32 GEMMs */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <cublasLt.h>
#include <cuda_runtime.h>
#define CK(x)                                                                                      \
    do {                                                                                           \
        if ((x) != 0) {                                                                            \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, #x);                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
static cublasLtHandle_t lt;
static void fill(void *d, size_t n)
{ /* bf16 of uniform(-1, 1) */
    uint16_t *h = malloc(n * 2);
    uint64_t x = 88172645463325252ull ^ n;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        float f = (float)((x >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = u >> 16;
    }
    cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice);
    free(h);
}
static void *ws;
static size_t wsb;
static void run(const char *name, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldd,
                int fp32out, float beta, int nalgo)
{
    cudaDataType_t ab = CUDA_R_16BF, d = fp32out ? CUDA_R_32F : CUDA_R_16BF;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t A, B, D;
    cublasLtMatmulPreference_t pref;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
    CK(cublasLtMatrixLayoutCreate(&A, ab, ta ? k : m, ta ? m : k, lda));
    CK(cublasLtMatrixLayoutCreate(&B, ab, tb ? n : k, tb ? k : n, ldb));
    CK(cublasLtMatrixLayoutCreate(&D, d, m, n, ldd));
    CK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = wsb;
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                         sizeof(w));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red,
                                         sizeof(red));
    cublasLtMatmulHeuristicResult_t res[32];
    int nres = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, op, A, B, D, D, pref, nalgo, res, &nres));
    void *pa, *pb, *pd;
    size_t sa = (size_t)(ta ? k : m) * (ta ? m : k) * 2 + (size_t)lda * 0,
           sb = (size_t)(tb ? n : k) * (tb ? k : n) * 2;
    size_t sd = (size_t)ldd * n * (fp32out ? 4 : 2);
    CK(cudaMalloc(&pa, sa));
    CK(cudaMalloc(&pb, sb));
    CK(cudaMalloc(&pd, sd));
    fill(pa, sa / 2);
    fill(pb, sb / 2);
    cudaMemset(pd, 0, sd);
    const float alpha = 1.0f;
    double fl = 2.0 * m * n * (double)k;
    float best = 1e30f, first = 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < nres; i++) {
        for (int r = 0; r < 3; r++)
            cublasLtMatmul(lt, op, &alpha, pa, A, pb, B, &beta, pd, D, pd, D, &res[i].algo, ws, wsb,
                           0);
        cudaEventRecord(e0, 0);
        const int reps = 20;
        for (int r = 0; r < reps; r++)
            cublasLtMatmul(lt, op, &alpha, pa, A, pb, B, &beta, pd, D, pd, D, &res[i].algo, ws, wsb,
                           0);
        cudaEventRecord(e1, 0);
        if (cudaEventSynchronize(e1) != cudaSuccess) {
            printf("  %s algo %d failed\n", name, i);
            cudaGetLastError();
            continue;
        }
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        ms /= reps;
        if (i == 0)
            first = ms;
        if (ms < best)
            best = ms;
        printf("  %-14s rank %2d  %.3f ms  %.1f TFLOP/s  ws %zu\n", name, i, ms, fl / ms * 1e-9,
               res[i].workspaceSize);
    }
    printf("%-14s m=%d n=%d k=%d: heuristic %.3f ms (%.1f), best %.3f ms (%.1f), gain %.1f%%\n",
           name, m, n, k, first, fl / first * 1e-9, best, fl / best * 1e-9,
           100.0 * (first - best) / first);
    fflush(stdout);
    cudaFree(pa);
    cudaFree(pb);
    cudaFree(pd);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(A);
    cublasLtMatrixLayoutDestroy(B);
    cublasLtMatrixLayoutDestroy(D);
    cublasLtMatmulDescDestroy(op);
}
int main(int argc, char **argv)
{
    int M = argc > 1 ? atoi(argv[1]) : 32768, nalgo = argc > 2 ? atoi(argv[2]) : 12;
    wsb = (argc > 3 ? atoi(argv[3]) : 32) << 20;
    CK(cublasLtCreate(&lt));
    CK(cudaMalloc(&ws, wsb));
    static const struct {
        const char *n;
        int K, N;
    } L[] = { { "qkv", 2560, 6144 },
              { "o", 4096, 2560 },
              { "gate_up", 2560, 19456 },
              { "down", 9728, 2560 } };
    printf("M=%d tokens, %d candidates, workspace %zu MiB\n", M, nalgo, wsb >> 20);
    for (int i = 0; i < 4; i++) {
        int K = L[i].K, N = L[i].N;
        char nm[64];
        snprintf(nm, sizeof nm, "%s fwd", L[i].n);
        run(nm, 1, 0, N, M, K, K, K, N, 0, (i == 1 || i == 3) ? 1.0f : 0.0f, nalgo);
        snprintf(nm, sizeof nm, "%s bwd_data", L[i].n);
        run(nm, 0, 0, K, M, N, K, N, K, 0, 0.0f, nalgo);
        snprintf(nm, sizeof nm, "%s dW", L[i].n);
        run(nm, 0, 1, K, N, M, K, N, K, 1, 1.0f, nalgo);
    }
    int C = 2560, V = 151936, bs = 3532;
    run("lmhead fwd", 1, 0, V, bs, C, C, C, V, 0, 0.0f, nalgo);
    run("lmhead dh", 0, 0, C, bs, V, C, V, C, 0, 0.0f, nalgo);
    run("lmhead dW", 0, 1, C, V, bs, C, V, C, 1, 1.0f, nalgo);
    return 0;
}
