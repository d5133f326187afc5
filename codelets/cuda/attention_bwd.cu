// SPDX-License-Identifier: MIT
/* Causal grouped-query attention on the GPU, backward (FlashAttention-2, Alg. 2): bf16 on tensor
 * cores keeps dK, dV of a kv head in registers over its query heads (no atomics there) and adds dQ
 * into an fp32 workspace with atomics; f32 runs on CUDA cores.  The forward (and its lse) is in
 * attention_fwd.cu.  Test: tests/kernels/test_cuda_attention.c. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "codelets/cuda/attention_internal.cuh"
#include "codelets/cuda/sdp_cuda_kernels.h"

/* ---- backward, shared pre/post passes ---- */

static __device__ __forceinline__ float to_f32(float x)
{
    return x;
}

static __device__ __forceinline__ float to_f32(bf16 x)
{
    return __bfloat162float(x);
}

/* D (B, NH, T) = rowsum(dO o O) per head, fp32; zeroes the fp32 dQ accumulator row when given.
 * One warp per (token, head). */
template <typename TS>
__global__ void attn_bwd_pre(float *__restrict__ Dv, float *__restrict__ dqacc,
                             const TS *__restrict__ dout, const TS *__restrict__ out, int B, int T,
                             int NH, int HD)
{
    const size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (w >= (size_t)B * T * NH)
        return;
    const int h = (int)(w % NH);
    const size_t row = w / NH; /* b T + t */
    const TS *dO = dout + w * HD, *o = out + w * HD;
    float acc = 0.0f;
    for (int d = lane; d < HD; d += 32) {
        acc += to_f32(dO[d]) * to_f32(o[d]);
        if (dqacc)
            dqacc[w * HD + d] = 0.0f;
    }
    for (int off = 16; off > 0; off /= 2)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        const size_t b = row / T, t = row % T;
        Dv[(b * NH + h) * T + t] = acc;
    }
}

/* dq slots of dqkv (bf16) from the fp32 accumulator (B*T, NH*HD) */
__global__ void attn_bwd_dq_cast(bf16 *__restrict__ dqkv, const float *__restrict__ dqacc,
                                 size_t rows, int C, int QKV)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * C)
        return;
    const size_t r = i / C, c = i % C;
    dqkv[r * QKV + c] = __float2bfloat16_rn(dqacc[i]);
}

/* ---- backward, bf16 tensor cores ----
 * Block: 8 warps, BK = 128 keys of one kv head (16 per warp), query tiles of BQ = 64 over the G
 * query heads of the group; dK, dV live in registers.  Per query tile (FlashAttention-2, Alg. 2,
 * computed transposed so that P^T and dS^T land in A-fragment layout):
 *   S^T = K Q^T, P^T = exp(S^T - lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D),
 *   dK += dS^T Q, then dS^T goes to smem and dQ (+)= dS K is added with fp32 atomics. */
enum { BW_NW = 8, BW_BK = 16 * BW_NW, BW_BQ = 64 };

template <int HD> static constexpr size_t bwd_smem_bytes(void)
{
    return (size_t)(2 * BW_BK + 4 * BW_BQ) * (HD + 8) * sizeof(bf16) +
           (size_t)BW_BK * (BW_BQ + 8) * sizeof(bf16) + 4 * BW_BQ * sizeof(float) +
           2 * BW_BQ * sizeof(int);
}

template <int HD>
__global__ void __launch_bounds__(BW_NW * 32, 1)
    attn_bwd_bf16(bf16 *__restrict__ dqkv, float *__restrict__ dqacc, const bf16 *__restrict__ dout,
                  const bf16 *__restrict__ qkv, const float *__restrict__ lse,
                  const float *__restrict__ Dv, const int32_t *__restrict__ seg, int T, int NH,
                  int NKV, float scale)
{
    constexpr int LD = HD + 8, LDS = BW_BQ + 8, NKS = HD / 16, NNT = BW_BQ / 8, NOT = HD / 8;
    constexpr int DQW = HD >= 32 ? HD / 2 : HD; /* dQ columns per warp */
    constexpr int NTHR = BW_NW * 32;
    extern __shared__ uint4 smem_raw[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sV = sK + BW_BK * LD;
    bf16 *sQ = sV + BW_BK * LD;                               /* [2][BQ][LD] */
    bf16 *sdO = sQ + 2 * BW_BQ * LD;                          /* [2][BQ][LD] */
    bf16 *sdS = sdO + 2 * BW_BQ * LD;                         /* [BK][LDS]: dS^T */
    float *sL = reinterpret_cast<float *>(sdS + BW_BK * LDS); /* [2][BQ] lse log2e */
    float *sD = sL + 2 * BW_BQ;                               /* [2][BQ] */
    int *sG = reinterpret_cast<int *>(sD + 2 * BW_BQ);        /* [2][BQ] document starts */

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tig = lane % 4;
    const int kt = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z, G = NH / NKV;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const bf16 *bq = qkv + (size_t)b * T * QKV;
    const int k0 = kt * BW_BK, kw = k0 + warp * 16;
    const int qt0 = k0 / BW_BQ, nqt = (T + BW_BQ - 1) / BW_BQ, nq = nqt - qt0, niter = G * nq;
    const float scale_log2 = scale * LOG2E;

    load_tile<BW_BK, HD, LD, NTHR>(sK, bq + (size_t)(NH + kvh) * HD, QKV, k0, T, tid);
    load_tile<BW_BK, HD, LD, NTHR>(sV, bq + (size_t)(NH + NKV + kvh) * HD, QKV, k0, T, tid);

    /* issue the copies of iteration it (head, query tile) into buffer it & 1 */
    auto issue = [&](int it) {
        const int h = kvh * G + it / nq, q0 = (qt0 + it % nq) * BW_BQ, buf = it & 1;
        load_tile<BW_BQ, HD, LD, NTHR>(sQ + buf * BW_BQ * LD, bq + (size_t)h * HD, QKV, q0, T, tid);
        load_tile<BW_BQ, HD, LD, NTHR>(sdO + buf * BW_BQ * LD,
                                       dout + (size_t)b * T * C + (size_t)h * HD, C, q0, T, tid);
        if (tid < BW_BQ) {
            const size_t i = ((size_t)b * NH + h) * T + q0 + tid;
            const bool ok = q0 + tid < T;
            sL[buf * BW_BQ + tid] = ok ? lse[i] * LOG2E : 0.0f;
            sD[buf * BW_BQ + tid] = ok ? Dv[i] : 0.0f;
            sG[buf * BW_BQ + tid] = ok && seg ? seg[(size_t)b * T + q0 + tid] : 0;
        }
        cp_async_commit();
    };
    issue(0);

    float dk[NOT][4], dv[NOT][4];
#pragma unroll
    for (int nt = 0; nt < NOT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[nt][e] = dv[nt][e] = 0.0f;

    for (int it = 0; it < niter; it++) {
        const int buf = it & 1, h = kvh * G + it / nq, q0 = (qt0 + it % nq) * BW_BQ;
        if (it + 1 < niter) {
            issue(it + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16 *cQ = sQ + buf * BW_BQ * LD, *cdO = sdO + buf * BW_BQ * LD;
        const float *cL = sL + buf * BW_BQ, *cD = sD + buf * BW_BQ;
        const int *cG = sG + buf * BW_BQ;
        float s[NNT][4];
#pragma unroll
        for (int nt = 0; nt < NNT; nt++)
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
        if (q0 + BW_BQ - 1 >= kw) { /* else every query of the tile is above this warp's keys */
                                    /* S^T (16 keys x BQ) = K Q^T */
#pragma unroll
            for (int ks = 0; ks < NKS; ks++) {
                uint32_t a[4];
                ldsm_x4(a, sK + (warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + ks * 16 +
                               (lane / 16) * 8);
#pragma unroll
                for (int np = 0; np < NNT / 2; np++) {
                    uint32_t bb[4];
                    ldsm_x4(bb, cQ + (np * 16 + (lane % 8) + (lane / 16) * 8) * LD + ks * 16 +
                                    ((lane / 8) % 2) * 8);
                    mma16816(s[2 * np], a, bb[0], bb[1]);
                    mma16816(s[2 * np + 1], a, bb[2], bb[3]);
                }
            }
            /* P^T = exp(S^T - lse), 0 where the key is after the query, before the query's
             * document, or the query is past T */
#pragma unroll
            for (int nt = 0; nt < NNT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kw + g + (e / 2) * 8, ql = nt * 8 + tig * 2 + (e % 2);
                    const int q = q0 + ql;
                    s[nt][e] = (q >= key && q < T && key >= cG[ql])
                                   ? exp2f(s[nt][e] * scale_log2 - cL[ql])
                                   : 0.0f;
                }
                /* dV += P^T dO */
#pragma unroll
            for (int kk = 0; kk < BW_BQ / 16; kk++) {
                uint32_t a[4];
                a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
                a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
                a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int np = 0; np < NOT / 2; np++) {
                    uint32_t bb[4];
                    ldsm_x4_t(bb, cdO + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD +
                                      np * 16 + (lane / 16) * 8);
                    mma16816(dv[2 * np], a, bb[0], bb[1]);
                    mma16816(dv[2 * np + 1], a, bb[2], bb[3]);
                }
            }
            /* dP^T = V dO^T, then dS^T = P^T (dP^T - D) in place of P^T */
            float dp[NNT][4];
#pragma unroll
            for (int nt = 0; nt < NNT; nt++)
                dp[nt][0] = dp[nt][1] = dp[nt][2] = dp[nt][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < NKS; ks++) {
                uint32_t a[4];
                ldsm_x4(a, sV + (warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + ks * 16 +
                               (lane / 16) * 8);
#pragma unroll
                for (int np = 0; np < NNT / 2; np++) {
                    uint32_t bb[4];
                    ldsm_x4(bb, cdO + (np * 16 + (lane % 8) + (lane / 16) * 8) * LD + ks * 16 +
                                    ((lane / 8) % 2) * 8);
                    mma16816(dp[2 * np], a, bb[0], bb[1]);
                    mma16816(dp[2 * np + 1], a, bb[2], bb[3]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < NNT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[nt][e] *= dp[nt][e] - cD[nt * 8 + tig * 2 + (e % 2)];
                    /* dK += dS^T Q (scaled at the end) */
#pragma unroll
            for (int kk = 0; kk < BW_BQ / 16; kk++) {
                uint32_t a[4];
                a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
                a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
                a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int np = 0; np < NOT / 2; np++) {
                    uint32_t bb[4];
                    ldsm_x4_t(bb, cQ + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD +
                                      np * 16 + (lane / 16) * 8);
                    mma16816(dk[2 * np], a, bb[0], bb[1]);
                    mma16816(dk[2 * np + 1], a, bb[2], bb[3]);
                }
            }
        }
        /* dS^T to smem (zeros from inactive warps: dQ reads every key row) */
#pragma unroll
        for (int nt = 0; nt < NNT; nt++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                *reinterpret_cast<uint32_t *>(sdS + (warp * 16 + g + hf * 8) * LDS + nt * 8 +
                                              tig * 2) =
                    pack_bf16(s[nt][2 * hf], s[nt][2 * hf + 1]);
        __syncthreads();
        /* dQ (BQ x HD) += scale dS K: warp -> 16 queries x DQW columns */
        {
            const int mq = warp % 4, c0 = (warp / 4) * DQW;
            const int qa = q0 + mq * 16; /* first query of this m tile */
            if (c0 < HD && qa < T) {
                float dq[DQW / 8][4];
#pragma unroll
                for (int nt = 0; nt < DQW / 8; nt++)
                    dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.0f;
                /* keys above the last query of the m tile have dS = 0: skip their k-steps */
                const int kkend = min(BW_BK / 16, (qa + 15 - k0) / 16 + 1);
                for (int kk = 0; kk < kkend; kk++) {
                    uint32_t a[4];
                    ldsm_x4_t(a, sdS + (kk * 16 + (lane % 8) + (lane / 16) * 8) * LDS + mq * 16 +
                                     ((lane / 8) % 2) * 8);
#pragma unroll
                    for (int np = 0; np < DQW / 16; np++) {
                        uint32_t bb[4];
                        ldsm_x4_t(bb, sK + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + c0 +
                                          np * 16 + (lane / 16) * 8);
                        mma16816(dq[2 * np], a, bb[0], bb[1]);
                        mma16816(dq[2 * np + 1], a, bb[2], bb[3]);
                    }
                }
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int q = qa + g + hf * 8;
                    if (q >= T)
                        continue;
                    float *dst = dqacc + ((size_t)b * T + q) * C + (size_t)h * HD + c0 + tig * 2;
#pragma unroll
                    for (int nt = 0; nt < DQW / 8; nt++)
                        atomicAdd(reinterpret_cast<float2 *>(dst + nt * 8),
                                  make_float2(dq[nt][2 * hf] * scale, dq[nt][2 * hf + 1] * scale));
                }
            }
        }
    }

    /* dk, dv slots of dqkv: each key row of this kv head belongs to this block alone */
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int key = kw + g + hf * 8;
        if (key >= T)
            continue;
        bf16 *dkr = dqkv + ((size_t)b * T + key) * QKV + (size_t)(NH + kvh) * HD + tig * 2;
        bf16 *dvr = dkr + (size_t)NKV * HD;
#pragma unroll
        for (int nt = 0; nt < NOT; nt++) {
            *reinterpret_cast<__nv_bfloat162 *>(dkr + nt * 8) =
                __floats2bfloat162_rn(dk[nt][2 * hf] * scale, dk[nt][2 * hf + 1] * scale);
            *reinterpret_cast<__nv_bfloat162 *>(dvr + nt * 8) =
                __floats2bfloat162_rn(dv[nt][2 * hf], dv[nt][2 * hf + 1]);
        }
    }
}

/* ---- backward, f32 on CUDA cores ----
 * dq: a warp per query row (as the f32 forward), one key per lane.  dk, dv: a warp per key row,
 * 8 keys of one kv head per block, one query per lane, over the G heads of the group. */
template <int HD>
__global__ void __launch_bounds__(F32_ROWS * 32)
    attn_bwd_dq_f32(float *__restrict__ dqkv, const float *__restrict__ dout,
                    const float *__restrict__ qkv, const float *__restrict__ lse,
                    const float *__restrict__ Dv, const int32_t *__restrict__ seg, int T, int NH,
                    int NKV, float scale)
{
    constexpr int ND = (HD + 31) / 32;
    __shared__ float sQ[F32_ROWS][HD], sdO[F32_ROWS][HD], sK[F32_KT][HD + 1], sV[F32_KT][HD + 1];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const float *base = qkv + (size_t)b * T * QKV;
    const int r0 = blockIdx.x * F32_ROWS, row = r0 + warp, rmax = min(r0 + F32_ROWS, T) - 1;

    for (int i = threadIdx.x; i < F32_ROWS * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        const bool ok = r0 + r < T;
        sQ[r][d] = ok ? base[(size_t)(r0 + r) * QKV + (size_t)h * HD + d] : 0.0f;
        sdO[r][d] = ok ? dout[((size_t)b * T + r0 + r) * C + (size_t)h * HD + d] : 0.0f;
    }
    float L = 0.0f, D = 0.0f, dq[ND];
    int lo = 0; /* document masking: the row's first key */
    if (row < T) {
        L = lse[((size_t)b * NH + h) * T + row];
        D = Dv[((size_t)b * NH + h) * T + row];
        lo = seg ? seg[(size_t)b * T + row] : 0;
    }
    for (int i = 0; i < ND; i++)
        dq[i] = 0.0f;
    for (int k0 = 0; k0 <= rmax; k0 += F32_KT) {
        __syncthreads();
        for (int i = threadIdx.x; i < F32_KT * HD; i += blockDim.x) {
            const int r = i / HD, d = i % HD;
            const bool ok = k0 + r < T;
            const float *src = base + (size_t)(k0 + r) * QKV + (size_t)(NH + kvh) * HD + d;
            sK[r][d] = ok ? src[0] : 0.0f;
            sV[r][d] = ok ? src[(size_t)NKV * HD] : 0.0f;
        }
        __syncthreads();
        if (row >= T)
            continue;
        float sc = 0.0f, dp = 0.0f;
        for (int d = 0; d < HD; d++) {
            sc += sQ[warp][d] * sK[lane][d];
            dp += sdO[warp][d] * sV[lane][d];
        }
        const float p = k0 + lane <= row && k0 + lane >= lo ? expf(sc * scale - L) : 0.0f;
        const float ds = p * (dp - D) * scale;
        for (int j = 0; j < F32_KT; j++) {
            const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
            for (int i = 0; i < ND; i++)
                if (lane + 32 * i < HD)
                    dq[i] += dsj * sK[j][lane + 32 * i];
        }
    }
    if (row >= T)
        return;
    float *dst = dqkv + ((size_t)b * T + row) * QKV + (size_t)h * HD;
    for (int i = 0; i < ND; i++)
        if (lane + 32 * i < HD)
            dst[lane + 32 * i] = dq[i];
}

template <int HD>
__global__ void __launch_bounds__(F32_ROWS * 32)
    attn_bwd_dkv_f32(float *__restrict__ dqkv, const float *__restrict__ dout,
                     const float *__restrict__ qkv, const float *__restrict__ lse,
                     const float *__restrict__ Dv, const int32_t *__restrict__ seg, int T, int NH,
                     int NKV, float scale)
{
    constexpr int ND = (HD + 31) / 32;
    __shared__ float sK[F32_ROWS][HD], sV[F32_ROWS][HD], sQ[F32_KT][HD + 1], sdO[F32_KT][HD + 1];
    __shared__ float sL[F32_KT], sD[F32_KT];
    __shared__ int sG[F32_KT]; /* the queries' document starts */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kvh = blockIdx.y, b = blockIdx.z, G = NH / NKV;
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD, C = (size_t)NH * HD;
    const float *base = qkv + (size_t)b * T * QKV;
    const int r0 = blockIdx.x * F32_ROWS, key = r0 + warp;

    for (int i = threadIdx.x; i < F32_ROWS * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        const bool ok = r0 + r < T;
        const float *src = base + (size_t)(r0 + r) * QKV + (size_t)(NH + kvh) * HD + d;
        sK[r][d] = ok ? src[0] : 0.0f;
        sV[r][d] = ok ? src[(size_t)NKV * HD] : 0.0f;
    }
    float dk[ND], dv[ND];
    for (int i = 0; i < ND; i++)
        dk[i] = dv[i] = 0.0f;
    for (int h = kvh * G; h < (kvh + 1) * G; h++) {
        for (int q0 = r0; q0 < T; q0 += F32_KT) {
            __syncthreads();
            for (int i = threadIdx.x; i < F32_KT * HD; i += blockDim.x) {
                const int r = i / HD, d = i % HD;
                const bool ok = q0 + r < T;
                sQ[r][d] = ok ? base[(size_t)(q0 + r) * QKV + (size_t)h * HD + d] : 0.0f;
                sdO[r][d] = ok ? dout[((size_t)b * T + q0 + r) * C + (size_t)h * HD + d] : 0.0f;
            }
            if (threadIdx.x < F32_KT) {
                const int q = q0 + threadIdx.x;
                const size_t i = ((size_t)b * NH + h) * T + q;
                sL[threadIdx.x] = q < T ? lse[i] : 0.0f;
                sD[threadIdx.x] = q < T ? Dv[i] : 0.0f;
                sG[threadIdx.x] = q < T && seg ? seg[(size_t)b * T + q] : 0;
            }
            __syncthreads();
            if (key >= T)
                continue;
            float sc = 0.0f, dp = 0.0f;
            for (int d = 0; d < HD; d++) {
                sc += sQ[lane][d] * sK[warp][d];
                dp += sdO[lane][d] * sV[warp][d];
            }
            const int q = q0 + lane;
            const float p =
                (q >= key && q < T && key >= sG[lane]) ? expf(sc * scale - sL[lane]) : 0.0f;
            const float ds = p * (dp - sD[lane]) * scale;
            for (int j = 0; j < F32_KT; j++) {
                const float dsj = __shfl_sync(0xffffffffu, ds, j);
                const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                for (int i = 0; i < ND; i++)
                    if (lane + 32 * i < HD) {
                        dk[i] += dsj * sQ[j][lane + 32 * i];
                        dv[i] += pj * sdO[j][lane + 32 * i];
                    }
            }
        }
    }
    if (key >= T)
        return;
    float *dkr = dqkv + ((size_t)b * T + key) * QKV + (size_t)(NH + kvh) * HD;
    float *dvr = dkr + (size_t)NKV * HD;
    for (int i = 0; i < ND; i++)
        if (lane + 32 * i < HD) {
            dkr[lane + 32 * i] = dk[i];
            dvr[lane + 32 * i] = dv[i];
        }
}

/* ---- launchers ---- */

static size_t align256(size_t n)
{
    return (n + 255) / 256 * 256;
}

template <int HD>
static void bwd_launch(void *dqkv, const void *dout, const void *qkv, const void *out,
                       const float *lse, const int32_t *seg, int B, int T, int NH, int NKV, int dt,
                       void *ws, cudaStream_t s)
{
    const float scale = (float)(1.0 / sqrt((double)HD));
    const size_t rows = (size_t)B * T, nD = rows * NH;
    float *Dv = (float *)ws;
    const unsigned pre_blocks = (unsigned)((nD * 32 + 255) / 256);
    if (dt == SDP_CUDA_BF16) {
        float *dqacc = (float *)((char *)ws + align256(nD * sizeof(float)));
        attn_bwd_pre<bf16><<<pre_blocks, 256, 0, s>>>(Dv, dqacc, (const bf16 *)dout,
                                                      (const bf16 *)out, B, T, NH, HD);
        const size_t smem = bwd_smem_bytes<HD>();
        cudaFuncSetAttribute(attn_bwd_bf16<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem);
        const dim3 grid((T + BW_BK - 1) / BW_BK, NKV, B);
        attn_bwd_bf16<HD><<<grid, BW_NW * 32, smem, s>>>((bf16 *)dqkv, dqacc, (const bf16 *)dout,
                                                         (const bf16 *)qkv, lse, Dv, seg, T, NH,
                                                         NKV, scale);
        const size_t n = rows * NH * HD;
        attn_bwd_dq_cast<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((bf16 *)dqkv, dqacc, rows,
                                                                     NH * HD, (NH + 2 * NKV) * HD);
    } else {
        attn_bwd_pre<float><<<pre_blocks, 256, 0, s>>>(Dv, NULL, (const float *)dout,
                                                       (const float *)out, B, T, NH, HD);
        const dim3 gq((T + F32_ROWS - 1) / F32_ROWS, NH, B),
            gkv((T + F32_ROWS - 1) / F32_ROWS, NKV, B);
        attn_bwd_dq_f32<HD><<<gq, F32_ROWS * 32, 0, s>>>((float *)dqkv, (const float *)dout,
                                                         (const float *)qkv, lse, Dv, seg, T, NH,
                                                         NKV, scale);
        attn_bwd_dkv_f32<HD><<<gkv, F32_ROWS * 32, 0, s>>>((float *)dqkv, (const float *)dout,
                                                           (const float *)qkv, lse, Dv, seg, T, NH,
                                                           NKV, scale);
    }
}

/* D (B*NH*T f32), then for bf16 the fp32 dQ accumulator (B*T, NH*HD) */
extern "C" size_t sdp_cuda_attention_bwd_ws(int B, int T, int NH, int NKV, int HD)
{
    (void)NKV;
    const size_t rows = (size_t)B * T;
    return align256(rows * NH * sizeof(float)) + rows * NH * HD * sizeof(float);
}

extern "C" void sdp_cuda_attention_bwd(void *dqkv, const void *dout, const void *qkv,
                                       const void *out, const float *lse, const int32_t *seg, int B,
                                       int T, int NH, int NKV, int HD, int dt, void *ws,
                                       cudaStream_t s)
{
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV)
        return;
    switch (HD) {
    case 16:
        bwd_launch<16>(dqkv, dout, qkv, out, lse, seg, B, T, NH, NKV, dt, ws, s);
        break;
    case 32:
        bwd_launch<32>(dqkv, dout, qkv, out, lse, seg, B, T, NH, NKV, dt, ws, s);
        break;
    case 64:
        bwd_launch<64>(dqkv, dout, qkv, out, lse, seg, B, T, NH, NKV, dt, ws, s);
        break;
    case 128:
        bwd_launch<128>(dqkv, dout, qkv, out, lse, seg, B, T, NH, NKV, dt, ws, s);
        break;
    default:
        break;
    }
}
