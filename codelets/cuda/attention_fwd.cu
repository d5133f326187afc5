// SPDX-License-Identifier: MIT
/* Causal grouped-query attention on the GPU, forward, FlashAttention-2 style: tiles of q, k, v in
 * shared memory, scores in registers, online softmax; no (T, T) matrix ever reaches global memory.
 * With segment starts (document masking) the keys before a row's document are masked as the
 * causal ones are.
 * bf16 runs on tensor cores (mma.sync m16n8k16, fp32 accumulation); f32 runs on CUDA cores.
 * Test: tests/kernels/test_cuda_attention.c. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "codelets/cuda/attention_internal.cuh"
#include "codelets/cuda/sdp_cuda_kernels.h"

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
                  const int32_t *__restrict__ seg, int T, int NH, int NKV, float scale_log2)
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
    /* document masking: the first key of each of this thread's rows (0 without) */
    int lo[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int row = wr0 + mt * 16 + g + hf * 8;
            lo[mt][hf] = seg && row < T ? seg[(size_t)b * T + row] : 0;
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
            /* scale into the log2 domain, causal (and document) mask, online softmax; a row whose
             * keys of the tile are all masked keeps m = -inf and adds nothing (base 0) */
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
                            if ((need_mask && key > row) || key < lo[mt][hf])
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
template <int HD>
__global__ void __launch_bounds__(F32_ROWS * 32)
    attn_fwd_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv,
                 const int32_t *__restrict__ seg, int T, int NH, int NKV, float scale)
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
    const int lo = seg && row < T ? seg[(size_t)b * T + row] : 0; /* document masking */
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
        sc = key <= row && key >= lo ? sc * scale : -INFINITY;
        float mx = sc;
        for (int off = 16; off > 0; off /= 2)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float mnew = fmaxf(m, mx); /* finite once a key of the row's document was seen */
        if (mnew == -INFINITY)
            continue; /* every key so far before the row's document (the warp agrees) */
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

/* ---- launchers ---- */

template <int HD>
static void fwd_launch(void *out, float *lse, const void *qkv, const int32_t *seg, int B, int T,
                       int NH, int NKV, int dt, cudaStream_t s)
{
    const float scale = (float)(1.0 / sqrt((double)HD));
    if (dt == SDP_CUDA_BF16) {
        const size_t smem = fwd_smem_bytes<HD>();
        cudaFuncSetAttribute(attn_fwd_bf16<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem);
        const dim3 grid((T + FW_BR - 1) / FW_BR, NH, B);
        attn_fwd_bf16<HD><<<grid, FW_NW * 32, smem, s>>>((bf16 *)out, lse, (const bf16 *)qkv, seg,
                                                         T, NH, NKV, scale * LOG2E);
    } else {
        const dim3 grid((T + F32_ROWS - 1) / F32_ROWS, NH, B);
        attn_fwd_f32<HD><<<grid, F32_ROWS * 32, 0, s>>>((float *)out, lse, (const float *)qkv, seg,
                                                        T, NH, NKV, scale);
    }
}

/* HD outside {16, 32, 64, 128} enqueues nothing: the codelet layer validates shapes. */
extern "C" void sdp_cuda_attention_fwd(void *out, float *lse, const void *qkv, const int32_t *seg,
                                       int B, int T, int NH, int NKV, int HD, int dt,
                                       cudaStream_t s)
{
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV)
        return;
    switch (HD) {
    case 16:
        fwd_launch<16>(out, lse, qkv, seg, B, T, NH, NKV, dt, s);
        break;
    case 32:
        fwd_launch<32>(out, lse, qkv, seg, B, T, NH, NKV, dt, s);
        break;
    case 64:
        fwd_launch<64>(out, lse, qkv, seg, B, T, NH, NKV, dt, s);
        break;
    case 128:
        fwd_launch<128>(out, lse, qkv, seg, B, T, NH, NKV, dt, s);
        break;
    default:
        break;
    }
}
