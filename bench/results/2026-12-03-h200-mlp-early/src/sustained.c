/* experiment: one qwen3-4b layer's 12 GEMMs (B32) back to back for a few seconds: steady-state rate
 */
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
static void *ws;
static size_t wsb = 32 << 20;
static void fill(void *d, size_t n)
{
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
struct g {
    int ta, tb, m, n, k, lda, ldb, ldd, f32;
    float beta;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t A, B, D;
    cublasLtMatmulAlgo_t algo;
    void *pa, *pb, *pd;
    double fl;
    float ms;
};
static void mk(struct g *p)
{
    cudaDataType_t d = p->f32 ? CUDA_R_32F : CUDA_R_16BF;
    cublasOperation_t oa = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                      ob = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa));
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob));
    int ar = p->ta ? p->k : p->m, ac = p->ta ? p->m : p->k, br = p->tb ? p->n : p->k,
        bc = p->tb ? p->k : p->n;
    CK(cublasLtMatrixLayoutCreate(&p->A, CUDA_R_16BF, ar, ac, p->lda));
    CK(cublasLtMatrixLayoutCreate(&p->B, CUDA_R_16BF, br, bc, p->ldb));
    CK(cublasLtMatrixLayoutCreate(&p->D, d, p->m, p->n, p->ldd));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = wsb;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                         sizeof(w));
    cublasLtMatmulHeuristicResult_t r;
    int nr;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->A, p->B, p->D, p->D, pref, 1, &r, &nr));
    p->algo = r.algo;
    CK(cudaMalloc(&p->pa, (size_t)ar * ac * 2));
    CK(cudaMalloc(&p->pb, (size_t)br * bc * 2));
    CK(cudaMalloc(&p->pd, (size_t)p->ldd * p->n * (p->f32 ? 4 : 2)));
    fill(p->pa, (size_t)ar * ac);
    fill(p->pb, (size_t)br * bc);
    cudaMemset(p->pd, 0, (size_t)p->ldd * p->n * (p->f32 ? 4 : 2));
    p->fl = 2.0 * p->m * p->n * (double)p->k;
}
static void go(struct g *p, cudaStream_t s)
{
    const float a = 1;
    CK(cublasLtMatmul(lt, p->op, &a, p->pa, p->A, p->pb, p->B, &p->beta, p->pd, p->D, p->pd, p->D,
                      &p->algo, ws, wsb, s));
}
int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 5;
    int M = 32768;
    CK(cublasLtCreate(&lt));
    CK(cudaMalloc(&ws, wsb));
    static const int L[4][2] = { { 2560, 6144 }, { 4096, 2560 }, { 2560, 19456 }, { 9728, 2560 } };
    struct g G[12];
    int n = 0;
    for (int i = 0; i < 4; i++) {
        int K = L[i][0], N = L[i][1];
        G[n++] = (struct g){ 1, 0, N, M, K, K, K, N, 0, 0.0f };
        G[n++] = (struct g){ 0, 0, K, M, N, K, N, K, 0, 0.0f };
        G[n++] = (struct g){ 0, 1, K, N, M, K, N, K, 1, 1.0f };
    }
    for (int i = 0; i < n; i++)
        mk(&G[i]);
    cudaEvent_t ev[13];
    for (int i = 0; i < 13; i++)
        cudaEventCreate(&ev[i]);
    double tot_fl = 0;
    for (int i = 0; i < n; i++)
        tot_fl += G[i].fl;
    for (int it = 0;; it++) {
        cudaEventRecord(ev[0], 0);
        for (int i = 0; i < n; i++) {
            go(&G[i], 0);
            cudaEventRecord(ev[i + 1], 0);
        }
        cudaEventSynchronize(ev[12]);
        float ms;
        cudaEventElapsedTime(&ms, ev[0], ev[12]);
        static double t = 0;
        t += ms / 1000;
        if (it % 25 == 0 || t > secs) {
            printf("t=%.2f s layer %.3f ms %.1f TFLOP/s |", t, ms, tot_fl / ms * 1e-9);
            for (int i = 0; i < n; i++) {
                float m;
                cudaEventElapsedTime(&m, ev[i], ev[i + 1]);
                printf(" %.2f", m);
            }
            printf("\n");
            fflush(stdout);
        }
        if (t > secs)
            break;
    }
    return 0;
}
