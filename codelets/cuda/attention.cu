// SPDX-License-Identifier: MIT
/* Causal grouped-query attention on the GPU, FlashAttention-2 style: tiles of q, k, v in shared
 * memory, scores in registers, online softmax; no (T, T) matrix ever reaches global memory.  bf16
 * runs on tensor cores (mma.sync m16n8k16, fp32 accumulation); f32 runs on CUDA cores.  The
 * backward keeps dK, dV of a kv head in registers over its query heads (no atomics there) and adds
 * dQ into an fp32 workspace with atomics.  Test: tests/kernels/test_cuda_attention.c. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "codelets/cuda/sdp_cuda_kernels.h"

typedef __nv_bfloat16 bf16;

#define LOG2E 1.4426950408889634f
#define LN2   0.6931471805599453f

/* ---- PTX helpers: cp.async, ldmatrix, mma.sync (sm_80+) ---- */

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte async copy; nbytes = 0 zero-fills the destination (rows past T) */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int nbytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(nbytes));
}

static __device__ __forceinline__ void cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> static __device__ __forceinline__ void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

static __device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* c (16x8 f32) += a (16x16 bf16, row) . b (16x8 bf16, col) */
static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                                uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Copy rows [r0, r0 + ROWS) x HD of a (T, ld) bf16 matrix into smem rows of stride LD; rows past T
 * are zero-filled so that masked products never meet uninitialised (possibly NaN) bits. */
template <int ROWS, int HD, int LD, int NTHR>
static __device__ __forceinline__ void load_tile(bf16 *s, const bf16 *g, size_t ld, int r0, int T,
                                                 int tid)
{
    constexpr int CPR = HD / 8; /* 16-byte chunks per row */
    for (int i = tid; i < ROWS * CPR; i += NTHR) {
        const int r = i / CPR, c = i % CPR, row = r0 + r;
        const bool ok = row < T;
        cp_async16(s + r * LD + c * 8, g + (size_t)(ok ? row : 0) * ld + c * 8, ok ? 16 : 0);
    }
}

/* ---- forward, bf16 tensor cores ----
 * Block: FW_NW warps, BR = 32 FW_NW query rows (each warp two m16 tiles), key tiles of BC = 64,
 * double-buffered with cp.async.  grid (query tiles, NH, B), heaviest (last) query tile first. */
enum { FW_NW = 4, FW_BR = 32 * FW_NW, FW_BC = 64 }; /* BC = 32 measured 2% slower at HD 128 */

template <int HD> static constexpr size_t fwd_smem_bytes(void)
{
    return (size_t)(FW_BR + 4 * FW_BC) * (HD + 8) * sizeof(bf16);
}

template <int HD>
__global__ void __launch_bounds__(FW_NW * 32)
    attn_fwd_bf16(bf16 *__restrict__ out, float *__restrict__ lse, const bf16 *__restrict__ qkv,
                  int T, int NH, int NKV, float scale_log2)
{
    constexpr int LD = HD + 8, NKS = HD / 16, NNT = FW_BC / 8, NOT = HD / 8, MT = 2;
    extern __shared__ uint4 smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw);
    bf16 *sK = sQ + FW_BR * LD;     /* [2][BC][LD] */
    bf16 *sV = sK + 2 * FW_BC * LD; /* [2][BC][LD] */

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tig = lane % 4;
    const int nqt = (T + FW_BR - 1) / FW_BR, qt = nqt - 1 - (int)blockIdx.x;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const bf16 *qg = qkv + (size_t)b * T * QKV + (size_t)h * HD;
    const bf16 *kg = qkv + (size_t)b * T * QKV + (size_t)(NH + kvh) * HD;
    const bf16 *vg = kg + (size_t)NKV * HD;
    const int q0 = qt * FW_BR, wr0 = q0 + warp * 16 * MT;
    const int nkt = min((T + FW_BC - 1) / FW_BC, (q0 + FW_BR - 1) / FW_BC + 1);

    load_tile<FW_BR, HD, LD, FW_NW * 32>(sQ, qg, QKV, q0, T, tid);
    load_tile<FW_BC, HD, LD, FW_NW * 32>(sK, kg, QKV, 0, T, tid);
    load_tile<FW_BC, HD, LD, FW_NW * 32>(sV, vg, QKV, 0, T, tid);
    cp_async_commit();

    float o[MT][NOT][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int nt = 0; nt < NOT; nt++)
            o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int kt = 0; kt < nkt; kt++) {
        const int st = kt & 1;
        if (kt + 1 < nkt) {
            load_tile<FW_BC, HD, LD, FW_NW * 32>(sK + (st ^ 1) * FW_BC * LD, kg, QKV,
                                                 (kt + 1) * FW_BC, T, tid);
            load_tile<FW_BC, HD, LD, FW_NW * 32>(sV + (st ^ 1) * FW_BC * LD, vg, QKV,
                                                 (kt + 1) * FW_BC, T, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int k0 = kt * FW_BC;
        if (k0 <= wr0 + 32 - 1) { /* else every key of the tile is above this warp's rows */
            const bf16 *cK = sK + st * FW_BC * LD, *cV = sV + st * FW_BC * LD;
            float s[MT][NNT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NNT; nt++)
                    s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
                    /* S (32 x BC per warp) = Q K^T */
#pragma unroll
            for (int ks = 0; ks < NKS; ks++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    ldsm_x4(a[mt],
                            sQ + (warp * 32 + mt * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD +
                                ks * 16 + (lane / 16) * 8);
#pragma unroll
                for (int np = 0; np < NNT / 2; np++) {
                    uint32_t bb[4];
                    ldsm_x4(bb, cK + (np * 16 + (lane % 8) + (lane / 16) * 8) * LD + ks * 16 +
                                    ((lane / 8) % 2) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816(s[mt][2 * np], a[mt], bb[0], bb[1]);
                        mma16816(s[mt][2 * np + 1], a[mt], bb[2], bb[3]);
                    }
                }
            }
            /* scale into the log2 domain, causal mask, online softmax */
            const bool need_mask = k0 + FW_BC - 1 > wr0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    const int row = wr0 + mt * 16 + g + hf * 8;
                    float mx = -INFINITY;
#pragma unroll
                    for (int nt = 0; nt < NNT; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int key = k0 + nt * 8 + tig * 2 + e;
                            float v = s[mt][nt][hf * 2 + e] * scale_log2;
                            if (need_mask && key > row)
                                v = -INFINITY;
                            s[mt][nt][hf * 2 + e] = v;
                            mx = fmaxf(mx, v);
                        }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mnew = fmaxf(m[mt][hf], mx);
                    const float base = mnew == -INFINITY ? 0.0f : mnew;
                    const float alpha = exp2f(m[mt][hf] - base);
                    m[mt][hf] = mnew;
                    float sum = 0.0f;
#pragma unroll
                    for (int nt = 0; nt < NNT; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const float p = exp2f(s[mt][nt][hf * 2 + e] - base);
                            s[mt][nt][hf * 2 + e] = p;
                            sum += p;
                        }
                    /* this thread's part of the row sum; the quad sums it at the end */
                    l[mt][hf] = l[mt][hf] * alpha + sum;
#pragma unroll
                    for (int nt = 0; nt < NOT; nt++) {
                        o[mt][nt][hf * 2] *= alpha;
                        o[mt][nt][hf * 2 + 1] *= alpha;
                    }
                }
            }
            /* O += P V: P's accumulator fragments are the A fragments of the next mma */
#pragma unroll
            for (int kk = 0; kk < FW_BC / 16; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int np = 0; np < NOT / 2; np++) {
                    uint32_t bb[4];
                    ldsm_x4_t(bb, cV + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD +
                                      np * 16 + (lane / 16) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816(o[mt][2 * np], a[mt], bb[0], bb[1]);
                        mma16816(o[mt][2 * np + 1], a[mt], bb[2], bb[3]);
                    }
                }
            }
        }
        __syncthreads(); /* the next iteration's copy overwrites this stage */
    }

    const size_t C = (size_t)NH * HD;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            float lt = l[mt][hf];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const int row = wr0 + mt * 16 + g + hf * 8;
            if (row >= T)
                continue;
            const float inv = 1.0f / lt;
            bf16 *orow = out + ((size_t)b * T + row) * C + (size_t)h * HD;
#pragma unroll
            for (int nt = 0; nt < NOT; nt++)
                *reinterpret_cast<__nv_bfloat162 *>(orow + nt * 8 + tig * 2) =
                    __floats2bfloat162_rn(o[mt][nt][hf * 2] * inv, o[mt][nt][hf * 2 + 1] * inv);
            if (tig == 0)
                lse[((size_t)b * NH + h) * T + row] = (m[mt][hf] + log2f(lt)) * LN2;
        }
    }
}

/* ---- forward, f32 on CUDA cores ----
 * A warp per query row, 8 consecutive rows of one head per block; key tiles of 32 in smem, one key
 * per lane for the scores, lanes over d for the output. */
enum { F32_ROWS = 8, F32_KT = 32 };

template <int HD>
__global__ void __launch_bounds__(F32_ROWS * 32)
    attn_fwd_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv,
                 int T, int NH, int NKV, float scale)
{
    constexpr int ND = (HD + 31) / 32;
    __shared__ float sQ[F32_ROWS][HD], sK[F32_KT][HD + 1], sV[F32_KT][HD];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    const size_t QKV = (size_t)(NH + 2 * NKV) * HD;
    const float *base = qkv + (size_t)b * T * QKV;
    const int r0 = blockIdx.x * F32_ROWS, row = r0 + warp, rmax = min(r0 + F32_ROWS, T) - 1;

    for (int i = threadIdx.x; i < F32_ROWS * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        sQ[r][d] = r0 + r < T ? base[(size_t)(r0 + r) * QKV + (size_t)h * HD + d] : 0.0f;
    }
    float o[ND], m = -INFINITY, l = 0.0f;
    for (int i = 0; i < ND; i++)
        o[i] = 0.0f;
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
        const int key = k0 + lane;
        float sc = 0.0f;
        for (int d = 0; d < HD; d++)
            sc += sQ[warp][d] * sK[lane][d];
        sc = key <= row ? sc * scale : -INFINITY;
        float mx = sc;
        for (int off = 16; off > 0; off /= 2)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float mnew = fmaxf(m, mx); /* key k0 <= row: finite */
        const float alpha = expf(m - mnew), p = expf(sc - mnew);
        float ps = p;
        for (int off = 16; off > 0; off /= 2)
            ps += __shfl_xor_sync(0xffffffffu, ps, off);
        l = l * alpha + ps;
        m = mnew;
        for (int i = 0; i < ND; i++)
            o[i] *= alpha;
        for (int j = 0; j < F32_KT; j++) {
            const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
            for (int i = 0; i < ND; i++)
                if (lane + 32 * i < HD)
                    o[i] += pj * sV[j][lane + 32 * i];
        }
    }
    if (row >= T)
        return;
    float *orow = out + ((size_t)b * T + row) * NH * HD + (size_t)h * HD;
    for (int i = 0; i < ND; i++)
        if (lane + 32 * i < HD)
            orow[lane + 32 * i] = o[i] / l;
    if (lane == 0)
        lse[((size_t)b * NH + h) * T + row] = m + logf(l);
}

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
           (size_t)BW_BK * (BW_BQ + 8) * sizeof(bf16) + 4 * BW_BQ * sizeof(float);
}

template <int HD>
__global__ void __launch_bounds__(BW_NW * 32, 1)
    attn_bwd_bf16(bf16 *__restrict__ dqkv, float *__restrict__ dqacc, const bf16 *__restrict__ dout,
                  const bf16 *__restrict__ qkv, const float *__restrict__ lse,
                  const float *__restrict__ Dv, int T, int NH, int NKV, float scale)
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
            /* P^T = exp(S^T - lse), 0 where the key is after the query or the query is past T */
#pragma unroll
            for (int nt = 0; nt < NNT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kw + g + (e / 2) * 8, ql = nt * 8 + tig * 2 + (e % 2);
                    const int q = q0 + ql;
                    s[nt][e] = (q >= key && q < T) ? exp2f(s[nt][e] * scale_log2 - cL[ql]) : 0.0f;
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
                    const float *__restrict__ Dv, int T, int NH, int NKV, float scale)
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
    if (row < T) {
        L = lse[((size_t)b * NH + h) * T + row];
        D = Dv[((size_t)b * NH + h) * T + row];
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
        const float p = k0 + lane <= row ? expf(sc * scale - L) : 0.0f;
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
                     const float *__restrict__ Dv, int T, int NH, int NKV, float scale)
{
    constexpr int ND = (HD + 31) / 32;
    __shared__ float sK[F32_ROWS][HD], sV[F32_ROWS][HD], sQ[F32_KT][HD + 1], sdO[F32_KT][HD + 1];
    __shared__ float sL[F32_KT], sD[F32_KT];
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
            const float p = (q >= key && q < T) ? expf(sc * scale - sL[lane]) : 0.0f;
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

template <int HD>
static void fwd_launch(void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV,
                       int dt, cudaStream_t s)
{
    const float scale = (float)(1.0 / sqrt((double)HD));
    if (dt == SDP_CUDA_BF16) {
        const size_t smem = fwd_smem_bytes<HD>();
        cudaFuncSetAttribute(attn_fwd_bf16<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem);
        const dim3 grid((T + FW_BR - 1) / FW_BR, NH, B);
        attn_fwd_bf16<HD><<<grid, FW_NW * 32, smem, s>>>((bf16 *)out, lse, (const bf16 *)qkv, T, NH,
                                                         NKV, scale * LOG2E);
    } else {
        const dim3 grid((T + F32_ROWS - 1) / F32_ROWS, NH, B);
        attn_fwd_f32<HD><<<grid, F32_ROWS * 32, 0, s>>>((float *)out, lse, (const float *)qkv, T,
                                                        NH, NKV, scale);
    }
}

static size_t align256(size_t n)
{
    return (n + 255) / 256 * 256;
}

template <int HD>
static void bwd_launch(void *dqkv, const void *dout, const void *qkv, const void *out,
                       const float *lse, int B, int T, int NH, int NKV, int dt, void *ws,
                       cudaStream_t s)
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
        attn_bwd_bf16<HD><<<grid, BW_NW * 32, smem, s>>>(
            (bf16 *)dqkv, dqacc, (const bf16 *)dout, (const bf16 *)qkv, lse, Dv, T, NH, NKV, scale);
        const size_t n = rows * NH * HD;
        attn_bwd_dq_cast<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((bf16 *)dqkv, dqacc, rows,
                                                                     NH * HD, (NH + 2 * NKV) * HD);
    } else {
        attn_bwd_pre<float><<<pre_blocks, 256, 0, s>>>(Dv, NULL, (const float *)dout,
                                                       (const float *)out, B, T, NH, HD);
        const dim3 gq((T + F32_ROWS - 1) / F32_ROWS, NH, B),
            gkv((T + F32_ROWS - 1) / F32_ROWS, NKV, B);
        attn_bwd_dq_f32<HD><<<gq, F32_ROWS * 32, 0, s>>>(
            (float *)dqkv, (const float *)dout, (const float *)qkv, lse, Dv, T, NH, NKV, scale);
        attn_bwd_dkv_f32<HD><<<gkv, F32_ROWS * 32, 0, s>>>(
            (float *)dqkv, (const float *)dout, (const float *)qkv, lse, Dv, T, NH, NKV, scale);
    }
}

/* HD outside {16, 32, 64, 128} enqueues nothing: the codelet layer validates shapes. */
extern "C" void sdp_cuda_attention_fwd(void *out, float *lse, const void *qkv, int B, int T, int NH,
                                       int NKV, int HD, int dt, cudaStream_t s)
{
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV)
        return;
    switch (HD) {
    case 16:
        fwd_launch<16>(out, lse, qkv, B, T, NH, NKV, dt, s);
        break;
    case 32:
        fwd_launch<32>(out, lse, qkv, B, T, NH, NKV, dt, s);
        break;
    case 64:
        fwd_launch<64>(out, lse, qkv, B, T, NH, NKV, dt, s);
        break;
    case 128:
        fwd_launch<128>(out, lse, qkv, B, T, NH, NKV, dt, s);
        break;
    default:
        break;
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
                                       const void *out, const float *lse, int B, int T, int NH,
                                       int NKV, int HD, int dt, void *ws, cudaStream_t s)
{
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV)
        return;
    switch (HD) {
    case 16:
        bwd_launch<16>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, dt, ws, s);
        break;
    case 32:
        bwd_launch<32>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, dt, ws, s);
        break;
    case 64:
        bwd_launch<64>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, dt, ws, s);
        break;
    case 128:
        bwd_launch<128>(dqkv, dout, qkv, out, lse, B, T, NH, NKV, dt, ws, s);
        break;
    default:
        break;
    }
}
