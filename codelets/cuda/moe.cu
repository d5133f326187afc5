// SPDX-License-Identifier: MIT
/* The mixture-of-experts router on the GPU, as codelets/cpu/moe_router.c: logits by GEMM, the
 * softmax and the top-k (one warp per token; the CPU's order, tie rule and NaN rule), their
 * backward, the router's backward GEMMs, the load-balancing loss's statistics, value and gradient;
 * and the token permutation of codelets/cpu/moe_experts.c (counts, offsets, rows, where: the same
 * arrays, each expert's slots in slot order).  No atomics, fixed reduction trees: a run repeats bit
 * for bit.  Enqueues only, but for sdp_cuda_moe_offsets_host.
 * Test: tests/kernels/test_cuda_moe.c (fp64 oracle, the routing against the CPU kernels). */
#include <math.h>
#include <stdint.h>

#include "codelets/cuda/moe_internal.h"
#include "codelets/cuda/sdp_cuda_kernels.h"

#define FULL 0xffffffffu

static __device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(FULL, v, o);
    return v;
}

/* The lowest id not among ids[0..k) (the CPU's first_free: NaN probabilities order nothing). */
static __device__ int first_free(const int32_t *ids, int k)
{
    for (int e = 0;; e++) {
        int taken = 0;
        for (int j = 0; j < k && !taken; j++)
            taken = ids[j] == e;
        if (!taken)
            return e;
    }
}

/* One warp per token: p = softmax(z) (max subtracted; exp in double rounded once to fp32, within
 * one u of exp; the sum in double), then the top-K by decreasing p, ties to the lower id: pick k is
 * the best candidate after pick k - 1 in that order.  A NaN is never a candidate; with none left
 * the pick is the lowest free id, which is what the CPU's loop picks for a NaN row (a row is all
 * NaN or has none: one NaN makes the sum NaN). */
static __global__ void softmax_topk_kernel(float *__restrict__ probs, int32_t *__restrict__ ids,
                                           float *__restrict__ wts,
                                           const float *__restrict__ logits, int N, int E, int K,
                                           int norm)
{
    const int n = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (n >= N)
        return; /* whole warps: blockDim.x is a multiple of 32 */
    const float *z = logits + (size_t)n * E;
    float *p = probs + (size_t)n * E;
    int32_t *id = ids + (size_t)n * K;
    float m = -INFINITY;
    double sum = 0.0;
    for (int e = lane; e < E; e += 32)
        m = z[e] > m ? z[e] : m;
    for (int o = 16; o > 0; o >>= 1) {
        const float q = __shfl_xor_sync(FULL, m, o);
        m = q > m ? q : m;
    }
    for (int e = lane; e < E; e += 32) {
        p[e] = (float)exp((double)(z[e] - m));
        sum += p[e];
    }
    sum = warp_sum(sum);
    for (int e = lane; e < E; e += 32)
        p[e] = (float)(p[e] / sum);
    __syncwarp();
    int prev = -1;
    float prevp = 0.0f;
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bp = 0.0f;
        for (int e = lane; e < E; e += 32) {
            const float pe = p[e];
            const int cand = k == 0 ? pe == pe : pe < prevp || (pe == prevp && e > prev);
            if (cand && (best < 0 || pe > bp))
                best = e, bp = pe;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const int ob = __shfl_xor_sync(FULL, best, o);
            const float op = __shfl_xor_sync(FULL, bp, o);
            if (ob >= 0 && (best < 0 || op > bp || (op == bp && ob < best)))
                best = ob, bp = op;
        }
        if (best < 0)
            best = first_free(id, k);
        if (lane == 0)
            id[k] = best;
        __syncwarp();
        prev = best, prevp = p[best];
    }
    if (lane == 0) { /* the weights in k order, the fp32 sum of the CPU */
        float *w = wts + (size_t)n * K, s = 0.0f;
        for (int k = 0; k < K; k++) {
            w[k] = p[id[k]];
            s += w[k];
        }
        for (int k = 0; norm && k < K; k++)
            w[k] /= s;
    }
}

extern "C" void sdp_cuda_moe_router_fwd(cublasHandle_t h, float *logits, float *probs,
                                        const struct sdp_cuda_moe_routing *r, const float *x,
                                        const float *wr, int C, int norm_topk, cudaStream_t s)
{
    const int N = r->N, E = r->E;
    if (N <= 0)
        return;
    sdp_cuda_moe_gemm_on(h, s);
    sdp_cuda_moe_gemm(h, 0, 1, N, E, C, x, C, wr, C, 0.0f, logits, E);
    softmax_topk_kernel<<<(N + 3) / 4, 128, 0, s>>>(probs, r->ids, r->wts, logits, N, E, r->K,
                                                    norm_topk);
}

/* ---- the permutation: block e counts, then places, the slots of expert e ---- */

#define PERM_THREADS 256

/* counts[e] = slots with ids == e (block e) */
static __global__ void count_kernel(int32_t *__restrict__ counts, const int32_t *__restrict__ ids,
                                    int S)
{
    __shared__ int part[PERM_THREADS / 32];
    const int e = blockIdx.x;
    int c = 0;
    for (int s = threadIdx.x; s < S; s += PERM_THREADS)
        c += ids[s] == e;
    for (int o = 16; o > 0; o >>= 1)
        c += __shfl_xor_sync(FULL, c, o);
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int t = 0;
        for (int w = 0; w < PERM_THREADS / 32; w++)
            t += part[w];
        counts[e] = t;
    }
}

/* Block e: offsets[e] = sum of the counts before e (offsets[E] by the last block), then its slots
 * in increasing order, 256 at a time: a slot's row is the offset plus the slots of e before it
 * (earlier chunks, earlier warps of its chunk, lower lanes of its warp). */
static __global__ void place_kernel(int32_t *__restrict__ offsets, int32_t *__restrict__ rows,
                                    int32_t *__restrict__ where, const int32_t *__restrict__ ids,
                                    const int32_t *__restrict__ counts, int S, int E)
{
    __shared__ int warp_n[PERM_THREADS / 32], base;
    const int e = blockIdx.x, lane = threadIdx.x % 32, w = threadIdx.x / 32;
    if (threadIdx.x == 0) {
        int b = 0;
        for (int f = 0; f < e; f++)
            b += counts[f];
        offsets[e] = b;
        if (e == E - 1)
            offsets[E] = b + counts[e];
        base = b;
    }
    __syncthreads();
    int run = base;
    for (int s0 = 0; s0 < S; s0 += PERM_THREADS) {
        const int s = s0 + threadIdx.x, mine = s < S && ids[s] == e;
        const unsigned ball = __ballot_sync(FULL, mine);
        if (lane == 0)
            warp_n[w] = __popc(ball);
        __syncthreads();
        int before = run, total = 0;
        for (int v = 0; v < PERM_THREADS / 32; v++) {
            before += v < w ? warp_n[v] : 0;
            total += warp_n[v];
        }
        if (mine) {
            const int row = before + __popc(ball & ((1u << lane) - 1u));
            rows[row] = s;
            where[s] = row;
        }
        run += total;
        __syncthreads(); /* warp_n is rewritten by the next chunk */
    }
}

extern "C" void sdp_cuda_moe_permute(const struct sdp_cuda_moe_routing *r, cudaStream_t s)
{
    const int S = r->N * r->K;
    if (r->E <= 0)
        return;
    count_kernel<<<r->E, PERM_THREADS, 0, s>>>(r->counts, r->ids, S);
    place_kernel<<<r->E, PERM_THREADS, 0, s>>>(r->offsets, r->rows, r->where, r->ids, r->counts, S,
                                               r->E);
}

extern "C" void sdp_cuda_moe_offsets_host(int32_t *off, const struct sdp_cuda_moe_routing *r,
                                          cudaStream_t s)
{
    cudaMemcpyAsync(off, r->offsets, ((size_t)r->E + 1) * sizeof(*off), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
}

/* ---- backward ---- */

/* One thread per token, the CPU's arithmetic (double sums in k order). */
static __global__ void topk_bwd_kernel(float *__restrict__ dprobs, const float *__restrict__ dwts,
                                       const float *__restrict__ probs,
                                       const int32_t *__restrict__ ids, int N, int E, int K,
                                       int norm)
{
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N)
        return;
    const int32_t *id = ids + (size_t)n * K;
    const float *dw = dwts + (size_t)n * K, *p = probs + (size_t)n * E;
    float *dp = dprobs + (size_t)n * E;
    double s = 0.0, dot = 0.0;
    for (int e = 0; e < E; e++)
        dp[e] = 0.0f;
    if (!norm) {
        for (int k = 0; k < K; k++)
            dp[id[k]] = dw[k];
        return;
    }
    for (int k = 0; k < K; k++)
        s += p[id[k]];
    for (int k = 0; k < K; k++)
        dot += (double)dw[k] * (p[id[k]] / s);
    for (int k = 0; k < K; k++)
        dp[id[k]] = (float)((dw[k] - dot) / s);
}

extern "C" void sdp_cuda_moe_topk_bwd(float *dprobs, const float *dwts, const float *probs,
                                      const struct sdp_cuda_moe_routing *r, int norm_topk,
                                      cudaStream_t s)
{
    if (r->N > 0)
        topk_bwd_kernel<<<(r->N + 127) / 128, 128, 0, s>>>(dprobs, dwts, probs, r->ids, r->N, r->E,
                                                           r->K, norm_topk);
}

/* One warp per token: dz = p (dp - sum p dp), the sum in double. */
static __global__ void softmax_bwd_kernel(float *__restrict__ dlogits,
                                          const float *__restrict__ dprobs,
                                          const float *__restrict__ probs, int N, int E)
{
    const int n = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (n >= N)
        return;
    const float *p = probs + (size_t)n * E, *dp = dprobs + (size_t)n * E;
    double dot = 0.0;
    for (int e = lane; e < E; e += 32)
        dot += (double)p[e] * dp[e];
    dot = warp_sum(dot);
    for (int e = lane; e < E; e += 32)
        dlogits[(size_t)n * E + e] = (float)(p[e] * (dp[e] - dot));
}

extern "C" void sdp_cuda_moe_softmax_bwd(float *dlogits, const float *dprobs, const float *probs,
                                         int N, int E, cudaStream_t s)
{
    if (N > 0)
        softmax_bwd_kernel<<<(N + 3) / 4, 128, 0, s>>>(dlogits, dprobs, probs, N, E);
}

extern "C" void sdp_cuda_moe_router_bwd(cublasHandle_t h, float *dx, float *dwr,
                                        const float *dlogits, const float *x, const float *wr,
                                        int N, int C, int E, cudaStream_t s)
{
    if (N <= 0 || C <= 0 || E <= 0)
        return;
    sdp_cuda_moe_gemm_on(h, s);
    sdp_cuda_moe_gemm(h, 0, 0, N, C, E, dlogits, E, wr, C, 1.0f, dx, C); /* dx += dz . wr */
    if (dwr)
        sdp_cuda_moe_gemm(h, 1, 0, E, C, N, dlogits, E, x, C, 1.0f, dwr, C); /* dwr += dz^T x */
}

/* ---- the load-balancing loss ---- */

/* Block e: count[e] += counts[e]; psum[e] += the column sum of probs (double, a fixed tree); the
 * used-expert flags. */
static __global__ void aux_stats_kernel(double *__restrict__ count, double *__restrict__ psum,
                                        int32_t *__restrict__ used, int first_m, int last_m,
                                        const float *__restrict__ probs,
                                        const int32_t *__restrict__ counts, int N, int E)
{
    __shared__ double part[8];
    const int e = blockIdx.x;
    double v = 0.0;
    for (int n = threadIdx.x; n < N; n += 256)
        v += probs[(size_t)n * E + e];
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int w = 1; w < 8; w++)
        v += part[w];
    count[e] += counts[e];
    psum[e] += v;
    if (used) {
        used[e] = (first_m ? 0 : used[e]) | (counts[e] > 0);
        used[E + e] += last_m ? used[e] : 0;
    }
}

extern "C" void sdp_cuda_moe_aux_stats(double *count, double *psum, int32_t *used, int first_m,
                                       int last_m, const float *probs,
                                       const struct sdp_cuda_moe_routing *r, cudaStream_t s)
{
    if (r->E > 0)
        aux_stats_kernel<<<r->E, 256, 0, s>>>(count, psum, used, first_m, last_m, probs, r->counts,
                                              r->N, r->E);
}

/* One thread, the CPU's loop with its roundings (no fused multiply-add). */
static __global__ void aux_loss_kernel(double *loss, const double *count, const double *psum,
                                       double rows, int E)
{
    double s = 0.0;
    for (int e = 0; e < E; e++)
        s = __dadd_rn(s, __dmul_rn(count[e] / rows, psum[e] / rows));
    *loss = E * s;
}

extern "C" void sdp_cuda_moe_aux_loss(double *loss, const double *count, const double *psum,
                                      double rows, int E, cudaStream_t s)
{
    aux_loss_kernel<<<1, 1, 0, s>>>(loss, count, psum, rows, E);
}

static __global__ void aux_bwd_kernel(float *__restrict__ dprobs, const double *__restrict__ count,
                                      double rows, int N, int E, float scale)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * E)
        return;
    const int e = (int)(i % E);
    dprobs[i] += (float)(scale * (double)E * count[e] / (rows * rows));
}

extern "C" void sdp_cuda_moe_aux_bwd(float *dprobs, const double *count, double rows, int N, int E,
                                     float scale, cudaStream_t s)
{
    const size_t n = (size_t)N * E;
    if (n > 0)
        aux_bwd_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(dprobs, count, rows, N, E,
                                                                   scale);
}
