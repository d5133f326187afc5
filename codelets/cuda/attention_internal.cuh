// SPDX-License-Identifier: MIT
/* Internal to the causal attention kernels (attention_fwd.cu, attention_bwd.cu): the PTX helpers
 * (cp.async, ldmatrix, mma.sync), the tile loader and the f32 paths' block shape.  Device code
 * only; included by those two .cu files.  Test: tests/kernels/test_cuda_attention.c. */
#ifndef SDP_CUDA_ATTENTION_INTERNAL_CUH
#define SDP_CUDA_ATTENTION_INTERNAL_CUH

#include <cuda_bf16.h>
#include <stdint.h>

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

/* f32 paths: a warp per row, F32_ROWS rows per block, key tiles of F32_KT in smem */
enum { F32_ROWS = 8, F32_KT = 32 };

#endif
