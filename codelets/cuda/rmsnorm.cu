// SPDX-License-Identifier: MIT
/* RMSNorm over rows of length D on the GPU (Hugging Face LlamaRMSNorm, as rmsnorm_ref.c): row sums
 * in double, elementwise math in fp32.  A block spans whole rows: each thread owns NV vectors of V
 * columns (the same columns of every row), held as loaded (16 bytes, or one element on the scalar
 * path) until used; bf16 results are rounded by cvt.rn.bf16x2, bit-identical to from_f.
 * Forward: one row per block (grid R, at most 128 threads).
 * Backward: block b of G = min(ceil(R / 4), 264) owns a fixed range of rows (a function of R
 * alone) and takes it 2 rows a step (one reduction for both dots).  Each thread copies its own
 * vectors of dout, x and dres two steps ahead into shared memory (cp.async), so the loads of 4 to
 * 6 rows are in flight while it computes; it writes its dw partial (double) into ws and a second
 * kernel reduces the partials in a fixed order: deterministic for given (R, D).  264 blocks fill
 * the H200's 132 SMs twice, in one wave: measured there (R = 16384 and 32768, D = 2560, bf16)
 * faster than 512 or 1024 blocks, or than 1 row a step.  Wide rows and the scalar path load
 * straight into registers.  Enqueues only.
 * Test: tests/kernels/test_cuda_rmsnorm.c (against sdp_cpu_rmsnorm_*_ref and an fp64 dw). */
#include <stdint.h>

#include <type_traits>

#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/cuda/storage.cuh"

/* ---- packed vectors: V elements of T as loaded, 16 bytes in a uint4 or one T (V = 1) ---- */

template <typename T, int V> using packed = std::conditional_t<V == 1, T, uint4>;

template <typename T, int V> static __device__ __forceinline__ packed<T, V> load_packed(const T *p)
{
    static_assert(V == 1 || V * sizeof(T) == 16, "vectors are 16 bytes or one element");
    if constexpr (V == 1)
        return *p;
    else
        return *reinterpret_cast<const uint4 *>(p);
}

/* the floats of a packed vector, as to_f (a bf16 pair per word, element 2m in the low half) */
template <typename T, int V>
static __device__ __forceinline__ void unpack(float (&f)[V], const packed<T, V> &p)
{
    if constexpr (V == 1) {
        f[0] = to_f(p);
    } else {
        const uint32_t u[4] = { p.x, p.y, p.z, p.w };
#pragma unroll
        for (int m = 0; m < 4; m++)
            if constexpr (sizeof(T) == 2) {
                f[2 * m] = __uint_as_float(u[m] << 16);
                f[2 * m + 1] = __uint_as_float(u[m] & 0xffff0000u);
            } else {
                f[m] = __uint_as_float(u[m]);
            }
    }
}

/* store_vec; 16 bytes of bf16 rounded in pairs by cvt.rn.bf16x2.f32, which gives from_f's bits for
 * every float but NaN (checked over all 2^32 on an H200); a vector holding a NaN takes from_f */
template <typename T, int V>
static __device__ __forceinline__ void store_out(T *p, const float (&f)[V])
{
    if constexpr (V * sizeof(T) == 16 && sizeof(T) == 2) {
        bool nan = false;
#pragma unroll
        for (int e = 0; e < V; e++)
            nan |= f[e] != f[e];
        if (!nan) {
            uint32_t u[4];
#pragma unroll
            for (int m = 0; m < 4; m++)
                asm("cvt.rn.bf16x2.f32 %0, %1, %2;"
                    : "=r"(u[m])
                    : "f"(f[2 * m + 1]), "f"(f[2 * m]));
            *reinterpret_cast<uint4 *>(p) = make_uint4(u[0], u[1], u[2], u[3]);
            return;
        }
    }
    store_vec<T, V>(p, f);
}

/* Hides a packed vector's value from the optimizer: what was unpacked from it before is unpacked
 * again after rather than kept live in registers (the packed form is half the size for bf16). */
static __device__ __forceinline__ void opaque(uint4 &u)
{
    asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w));
}

static __device__ __forceinline__ void opaque(float &)
{
}

static __device__ __forceinline__ void opaque(uint16_t &h)
{
    asm volatile("" : "+h"(h));
}

/* ---- asynchronous copies global -> shared (cp.async, 16 bytes, cached in L2 only) ---- */

static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

static __device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* waits until at most N of this thread's groups are pending; the completed copies are visible to
 * this thread (only) */
template <int N> static __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Sums over the block of v[0..N-1], each in a fixed order (butterfly in each warp, then warps in
 * index order); every thread gets the totals.  red: N x 32 doubles of shared memory.  One barrier
 * only: red may be written again only after the block's next barrier, so a loop alternates two
 * buffers (a thread past the next call's barrier implies every thread has read this one's). */
template <int N>
static __device__ __forceinline__ void block_sum(double (&v)[N], double (*__restrict__ red)[32])
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int i = 0; i < N; i++)
            v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
    const int nwarps = (blockDim.x + 31) / 32;
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int i = 0; i < N; i++)
            red[i][threadIdx.x / 32] = v[i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; i++) {
        double t = 0.0;
#pragma unroll 4
        for (int k = 0; k < nwarps; k++)
            t += red[i][k];
        v[i] = t;
    }
}

/* ---- forward: out (R, D), rstd (R) from x (R, D), w (D); one row per block iteration ---- */

template <typename T, int V, int NV>
static __global__ void __launch_bounds__(512)
    rmsnorm_fwd_kernel(T *__restrict__ out, float *__restrict__ rstd, const T *__restrict__ x,
                       const T *__restrict__ w, int R, int D, float eps)
{
    __shared__ double red[2][1][32];
    const int nvec = D / V;
    int buf = 0;

    for (int r = blockIdx.x; r < R; r += gridDim.x, buf ^= 1) {
        const T *xr = x + (size_t)r * D;
        packed<T, V> xp[NV];
        double ss[1] = { 0.0 };
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int j = threadIdx.x + k * blockDim.x;
            xp[k] = {};
            if (j < nvec)
                xp[k] = load_packed<T, V>(xr + (size_t)j * V);
        }
#pragma unroll
        for (int k = 0; k < NV; k++) {
            float xv[V];
            unpack<T, V>(xv, xp[k]);
#pragma unroll
            for (int e = 0; e < V; e++)
                ss[0] += (double)xv[e] * xv[e];
            opaque(xp[k]);
        }
        block_sum<1>(ss, red[buf]);
        const float rs = (float)(1.0 / sqrt(ss[0] / D + (double)eps));
        if (threadIdx.x == 0)
            rstd[r] = rs;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int j = threadIdx.x + k * blockDim.x;
            if (j < nvec) {
                float wv[V], xv[V], y[V];
                load_vec<T, V>(wv, w + (size_t)j * V);
                unpack<T, V>(xv, xp[k]);
#pragma unroll
                for (int e = 0; e < V; e++)
                    y[e] = (xv[e] * rs) * wv[e];
                store_out<T, V>(out + (size_t)r * D + (size_t)j * V, y);
            }
        }
    }
}

/* ---- backward ----
 * With y_i = x_i r w_i, r = (mean(x^2) + eps)^(-1/2):
 *   dx_j = r w_j g_j - (r^3 / D) x_j sum_i g_i w_i x_i,   dw_i += g_i x_i r.
 * Block b owns rows [b R / G, (b + 1) R / G) and takes them RB at a time (a step).  With S > 0
 * stages, each thread copies its own vectors of dout, x and dres of the step S - 1 ahead into its
 * slots of shared memory while it works on this one: only it reads them back, so waiting for its
 * own copies suffices, and a stage is refilled only after the thread has read it.  Its dw partial
 * (D doubles, summed over its rows in order) goes to part[b]. */

/* rows per step, stages (0: loads straight into registers) and launch bounds, for NV vectors of
 * V elements per thread; one vector a thread (D <= 320 V) runs 2 blocks of 320 threads an SM */
template <int NV> constexpr int bwd_rows = NV == 1 ? 2 : 1;
template <int V, int NV> constexpr int bwd_stages = V == 1 || NV > 2 ? 0 : 3;
template <int V, int NV> constexpr int bwd_max_threads = V > 1 && NV == 1 ? 320 : 512;
template <int V, int NV> constexpr int bwd_min_blocks = V > 1 && NV == 1 ? 2 : 1;

/* vector k of array a (0 dout, 1 x, 2 dres) of row i in this thread's stage st */
template <typename T, int V, int NV>
static __device__ __forceinline__ packed<T, V> *staged(packed<T, V> *st, int i, int a, int k)
{
    return st + ((i * 3 + a) * NV + k) * blockDim.x;
}

/* Copies this thread's vectors of rows r .. r + min(RB, n) - 1 of dout, x and dres (o: offset of
 * row r) into its stage st; one commit group, possibly empty. */
template <typename T, int V, int NV, int RB>
static __device__ __forceinline__ void bwd_stage(packed<T, V> *st, const T *dres,
                                                 const T *__restrict__ dout,
                                                 const T *__restrict__ x, size_t o, int n, int D)
{
    const int nvec = D / V;
#pragma unroll
    for (int i = 0; i < RB; i++)
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int j = threadIdx.x + k * blockDim.x;
            const size_t oi = o + (size_t)i * D + (size_t)j * V;
            if (i < n && j < nvec) {
                cp_async16(staged<T, V, NV>(st, i, 0, k), dout + oi);
                cp_async16(staged<T, V, NV>(st, i, 1, k), x + oi);
                if (dres)
                    cp_async16(staged<T, V, NV>(st, i, 2, k), dres + oi);
            }
        }
    cp_async_commit();
}

template <typename T, int V, int NV>
static __global__ void __launch_bounds__(bwd_max_threads<V, NV>, bwd_min_blocks<V, NV>)
    rmsnorm_bwd_kernel(T *dx, double *__restrict__ part, const T *dres, const T *__restrict__ dout,
                       const T *__restrict__ x, const T *__restrict__ w,
                       const float *__restrict__ rstd, int R, int D)
{
    constexpr int RB = bwd_rows<NV>, S = bwd_stages<V, NV>;
    using P = packed<T, V>;
    extern __shared__ uint4 stage_mem[]; /* S stages of RB * 3 * NV * blockDim.x vectors */
    __shared__ double red[2][RB][32];
    P *const stages = reinterpret_cast<P *>(stage_mem) + threadIdx.x; /* this thread's slots */
    const int nvec = D / V, bd = blockDim.x, ssize = RB * 3 * NV * bd;
    const int r0 = (int)((long long)blockIdx.x * R / gridDim.x);
    const int r1 = (int)((long long)(blockIdx.x + 1) * R / gridDim.x);
    const int nsteps = (r1 - r0 + RB - 1) / RB;
    float wf[NV][V];
    double wd[NV][V], acc[NV][V];
    int buf = 0, rd = 0, wr = 0; /* red buffer; stage read this step, stage written next */

#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int j = threadIdx.x + k * bd;
        P wp = {};
        if (j < nvec)
            wp = load_packed<T, V>(w + (size_t)j * V);
        unpack<T, V>(wf[k], wp);
#pragma unroll
        for (int e = 0; e < V; e++) {
            wd[k][e] = wf[k][e];
            acc[k][e] = 0.0;
        }
    }
    if constexpr (S > 0)
        for (; wr < S - 1; wr++)
            bwd_stage<T, V, NV, RB>(stages + wr * ssize, dres, dout, x, (size_t)(r0 + wr * RB) * D,
                                    r1 - r0 - wr * RB, D);
    for (int t = 0; t < nsteps; t++, buf ^= 1) {
        const int r = r0 + t * RB;
        P gp[RB][NV], xp[RB][NV], qp[RB][NV];
        float gv[RB][NV][V], xv[RB][NV][V], rs[RB];
        double dot[RB];
        if constexpr (S > 0) {
            bwd_stage<T, V, NV, RB>(stages + wr * ssize, dres, dout, x,
                                    (size_t)(r + (S - 1) * RB) * D, r1 - r - (S - 1) * RB, D);
            wr = wr == S - 1 ? 0 : wr + 1;
            cp_async_wait<S - 1>(); /* this step's copies have landed */
        }
#pragma unroll
        for (int i = 0; i < RB; i++) {
            const size_t off = (size_t)(r + i) * D;
            rs[i] = r + i < r1 ? rstd[r + i] : 0.0f;
#pragma unroll
            for (int k = 0; k < NV; k++) {
                const int j = threadIdx.x + k * bd;
                gp[i][k] = xp[i][k] = qp[i][k] = {};
                if (r + i < r1 && j < nvec) {
                    if constexpr (S > 0) {
                        gp[i][k] = *staged<T, V, NV>(stages + rd * ssize, i, 0, k);
                        xp[i][k] = *staged<T, V, NV>(stages + rd * ssize, i, 1, k);
                    } else {
                        gp[i][k] = load_packed<T, V>(dout + off + (size_t)j * V);
                        xp[i][k] = load_packed<T, V>(x + off + (size_t)j * V);
                        if (dres) /* read before dx is written: dx may alias dres */
                            qp[i][k] = load_packed<T, V>(dres + off + (size_t)j * V);
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < RB; i++) {
            dot[i] = 0.0;
#pragma unroll
            for (int k = 0; k < NV; k++) {
                unpack<T, V>(gv[i][k], gp[i][k]);
                unpack<T, V>(xv[i][k], xp[i][k]);
#pragma unroll
                for (int e = 0; e < V; e++)
                    dot[i] += (double)gv[i][k][e] * wd[k][e] * xv[i][k][e];
            }
        }
        block_sum<RB>(dot, red[buf]);
        if constexpr (S > 0) {
            if (dres) /* staged, so read before dx is written */
#pragma unroll
                for (int i = 0; i < RB; i++)
#pragma unroll
                    for (int k = 0; k < NV; k++)
                        if (r + i < r1 && threadIdx.x + k * bd < nvec)
                            qp[i][k] = *staged<T, V, NV>(stages + rd * ssize, i, 2, k);
            rd = rd == S - 1 ? 0 : rd + 1;
        }
#pragma unroll
        for (int i = 0; i < RB; i++) {
            if (r + i >= r1)
                break;
            const size_t off = (size_t)(r + i) * D;
            const float c = (float)((double)rs[i] * rs[i] * rs[i] * dot[i] / D);
#pragma unroll
            for (int k = 0; k < NV; k++) {
                const int j = threadIdx.x + k * bd;
                if (j < nvec) {
                    const float *g = gv[i][k], *xx = xv[i][k];
                    float res[V], o[V];
                    unpack<T, V>(res, qp[i][k]);
#pragma unroll
                    for (int e = 0; e < V; e++) {
                        const float v = rs[i] * wf[k][e] * g[e] - c * xx[e];
                        o[e] = dres ? res[e] + v : v;
                        acc[k][e] += (double)(g[e] * xx[e] * rs[i]);
                    }
                    store_out<T, V>(dx + off + (size_t)j * V, o);
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < NV; k++) {
        const int j = threadIdx.x + k * bd;
        if (j < nvec)
#pragma unroll
            for (int e = 0; e < V; e++)
                part[(size_t)blockIdx.x * D + (size_t)j * V + e] = acc[k][e];
    }
}

/* dw (D) += sum over b < G of part (G, D), in a fixed order: 32 columns x 32 row-strides per
 * block, then the 32 strides summed in index order.  Unrolled so that several loads are in
 * flight; the additions stay in order. */
static __global__ void colsum_kernel(float *__restrict__ dw, const double *__restrict__ part, int G,
                                     int D)
{
    __shared__ double sm[32][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    double t = 0.0;

    if (c < D)
#pragma unroll 8
        for (int b = threadIdx.y; b < G; b += 32)
            t += part[(size_t)b * D + c];
    sm[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
    if (threadIdx.y == 0 && c < D) {
        double u = 0.0;
        for (int k = 0; k < 32; k++)
            u += sm[k][threadIdx.x];
        dw[c] = (float)((double)dw[c] + u);
    }
}

/* ---- launchers ---- */

/* Blocks of the backward: a function of R alone, so the summation order is fixed for a shape (on
 * any GPU); at least 4 rows a block, at most 264 blocks (2 on each of the H200's 132 SMs). */
static int bwd_blocks(int R)
{
    const int g = (R + 3) / 4;
    return g < 264 ? g : 264;
}

/* NV (vectors per thread, a power of two <= 16) and the block size for nvec vectors: at most
 * max1 threads with NV = 1, else at most max_threads while NV allows. */
static int pick_nv(int nvec, int max_threads, int max1, int *threads)
{
    int nv = 1;
    while (nv < 16 && nvec > (nv == 1 ? max1 : nv * max_threads))
        nv *= 2;
    const int t = (nvec + nv - 1) / nv;
    *threads = (t + 31) / 32 * 32;
    return nv;
}

static int aligned16(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

template <typename T, int V, int NV>
static void fwd_run(T *out, float *rstd, const T *x, const T *w, int R, int D, float eps,
                    int threads, cudaStream_t s)
{
    rmsnorm_fwd_kernel<T, V, NV><<<R, threads, 0, s>>>(out, rstd, x, w, R, D, eps);
}

template <typename T, int V, int NV>
static void bwd_run(T *dx, const T *dres, const T *dout, const T *x, const T *w, const float *rstd,
                    int R, int D, double *part, int G, int threads, cudaStream_t s)
{
    constexpr int RB = bwd_rows<NV>, S = bwd_stages<V, NV>;
    const size_t smem = (size_t)S * RB * 3 * NV * threads * sizeof(packed<T, V>);
    if (smem > 48 * 1024)
        cudaFuncSetAttribute(rmsnorm_bwd_kernel<T, V, NV>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    rmsnorm_bwd_kernel<T, V, NV><<<G, threads, smem, s>>>(dx, part, dres, dout, x, w, rstd, R, D);
}

#define SDP_NV_DISPATCH(nv, RUN, T, V, ...)                                                        \
    do {                                                                                           \
        switch (nv) {                                                                              \
        case 1:                                                                                    \
            RUN<T, V, 1>(__VA_ARGS__);                                                             \
            break;                                                                                 \
        case 2:                                                                                    \
            RUN<T, V, 2>(__VA_ARGS__);                                                             \
            break;                                                                                 \
        case 4:                                                                                    \
            RUN<T, V, 4>(__VA_ARGS__);                                                             \
            break;                                                                                 \
        case 8:                                                                                    \
            RUN<T, V, 8>(__VA_ARGS__);                                                             \
            break;                                                                                 \
        default:                                                                                   \
            RUN<T, V, 16>(__VA_ARGS__);                                                            \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

/* The forward takes at most 128 threads a row (several 16-byte loads in flight per thread, many
 * blocks an SM); the backward 320 with NV = 1 (bwd_max_threads), else 512.  Rows up to 16 x 512
 * vectors. */
template <typename T>
static void fwd_launch(T *out, float *rstd, const T *x, const T *w, int R, int D, float eps,
                       cudaStream_t s)
{
    constexpr int V = 16 / sizeof(T);
    int threads;
    if (D % V == 0 && aligned16(out) && aligned16(x) && aligned16(w)) {
        const int nv = pick_nv(D / V, 128, 128, &threads);
        SDP_NV_DISPATCH(nv, fwd_run, T, V, out, rstd, x, w, R, D, eps, threads, s);
    } else {
        const int nv = pick_nv(D, 128, 128, &threads);
        SDP_NV_DISPATCH(nv, fwd_run, T, 1, out, rstd, x, w, R, D, eps, threads, s);
    }
}

template <typename T>
static void bwd_launch(T *dx, float *dw, const T *dres, const T *dout, const T *x, const T *w,
                       const float *rstd, int R, int D, double *part, cudaStream_t s)
{
    constexpr int V = 16 / sizeof(T);
    const int G = bwd_blocks(R);
    int threads;
    if (D % V == 0 && aligned16(dx) && aligned16(dres) && aligned16(dout) && aligned16(x) &&
        aligned16(w)) {
        const int nv = pick_nv(D / V, 512, bwd_max_threads<V, 1>, &threads);
        SDP_NV_DISPATCH(nv, bwd_run, T, V, dx, dres, dout, x, w, rstd, R, D, part, G, threads, s);
    } else {
        const int nv = pick_nv(D, 512, 512, &threads);
        SDP_NV_DISPATCH(nv, bwd_run, T, 1, dx, dres, dout, x, w, rstd, R, D, part, G, threads, s);
    }
    colsum_kernel<<<(D + 31) / 32, dim3(32, 32), 0, s>>>(dw, part, G, D);
}

extern "C" void sdp_cuda_rmsnorm_fwd(void *out, float *rstd, const void *x, const void *w, int R,
                                     int D, float eps, int dt, cudaStream_t s)
{
    if (R <= 0 || D <= 0)
        return;
    if (dt == SDP_CUDA_BF16)
        fwd_launch<uint16_t>((uint16_t *)out, rstd, (const uint16_t *)x, (const uint16_t *)w, R, D,
                             eps, s);
    else
        fwd_launch<float>((float *)out, rstd, (const float *)x, (const float *)w, R, D, eps, s);
}

extern "C" size_t sdp_cuda_rmsnorm_bwd_ws(int R, int D)
{
    if (R <= 0 || D <= 0)
        return 0;
    return (size_t)bwd_blocks(R) * (size_t)D * sizeof(double);
}

extern "C" void sdp_cuda_rmsnorm_bwd(void *dx, float *dw, const void *dres, const void *dout,
                                     const void *x, const void *w, const float *rstd, int R, int D,
                                     int dt, void *ws, cudaStream_t s)
{
    if (R <= 0 || D <= 0)
        return;
    if (dt == SDP_CUDA_BF16)
        bwd_launch<uint16_t>((uint16_t *)dx, dw, (const uint16_t *)dres, (const uint16_t *)dout,
                             (const uint16_t *)x, (const uint16_t *)w, rstd, R, D, (double *)ws, s);
    else
        bwd_launch<float>((float *)dx, dw, (const float *)dres, (const float *)dout,
                          (const float *)x, (const float *)w, rstd, R, D, (double *)ws, s);
}
