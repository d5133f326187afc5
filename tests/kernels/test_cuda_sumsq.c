/* SPDX-License-Identifier: MIT */
/* Checks sdp_cuda_sumsq against the CPU's sdp_cpu_sumsq_ref: n = 0, 1, odd and misaligned
 * lengths, 1e7 random values, huge and tiny magnitudes; both sum exact double squares of floats,
 * so each is within (n - 1) u64 of the exact sum and the two within 2 n u64 (Higham Thm 3.1).
 * Two runs must agree bit for bit.  Then sdp_cuda_sumsq_cast (grad_pack's fused pass) bit for bit
 * against sdp_cuda_sumsq and sdp_cuda_cast on each chunk: odd chunk lengths, empty chunks, chunk
 * starts that are and are not 16-byte aligned, a chunk of 1024 blocks, more chunks than one batch,
 * NaN / Inf / denormal / tie inputs, 8-byte aligned, 2-byte aligned and NULL bf16 destinations
 * (nothing written outside a chunk's copy, nor past the workspace).  Prints the bandwidth at
 * n = 16384 x 9728, and of grad_pack's loop against the fused pass at 24 chunks of 4M. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "tests/lib/sdp_test.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("CUDA error %s at %s:%d\nFAIL\n", cudaGetErrorString(e_), __FILE__, __LINE__);  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const double u64 = 1.0 / 9007199254740992.0; /* 2^-53 */

/* sumsq of g (n) placed at element offset off of a device buffer, run twice */
static int check(const char *name, const float *g, size_t n, size_t off)
{
    float *d_g;
    double *d_out, res[2];
    void *ws;
    CK(cudaMalloc((void **)&d_g, (n + off) * 4 + 16));
    CK(cudaMalloc((void **)&d_out, 8));
    CK(cudaMalloc(&ws, sdp_cuda_sumsq_ws(n) + 16));
    if (n)
        CK(cudaMemcpy(d_g + off, g, n * 4, cudaMemcpyHostToDevice));
    for (int r = 0; r < 2; r++) {
        CK(cudaMemset(d_out, 0xff, 8));
        sdp_cuda_sumsq(d_out, d_g + off, n, ws, 0);
        CK(cudaGetLastError());
        CK(cudaMemcpy(&res[r], d_out, 8, cudaMemcpyDeviceToHost));
    }
    const double ref = sdp_cpu_sumsq_ref(g, n);
    const double err = fabs(res[0] - ref), allowed = 2.0 * (double)n * u64 * ref;
    const int bad = !(err <= allowed) || memcmp(&res[0], &res[1], 8) != 0;
    printf("%-34s n=%-9zu off %zu gpu %.17g cpu %.17g |err| %.3g (%.1f%% of allowed)%s  %s\n", name,
           n, off, res[0], ref, err, allowed > 0 ? 100.0 * err / allowed : 0.0,
           memcmp(&res[0], &res[1], 8) ? " RERUN DIFFERS" : "", bad ? "BAD" : "ok");
    CK(cudaFree(d_g));
    CK(cudaFree(d_out));
    CK(cudaFree(ws));
    return bad;
}

static void bench(void)
{
    const size_t n = (size_t)16384 * 9728;
    const int reps = 10;
    float *d_g, ms;
    double *d_out;
    void *ws;
    cudaEvent_t e0, e1;
    CK(cudaMalloc((void **)&d_g, n * 4));
    CK(cudaMalloc((void **)&d_out, 8));
    CK(cudaMalloc(&ws, sdp_cuda_sumsq_ws(n)));
    CK(cudaMemset(d_g, 0x3c, n * 4));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    sdp_cuda_sumsq(d_out, d_g, n, ws, 0);
    CK(cudaEventRecord(e0, 0));
    for (int r = 0; r < reps; r++)
        sdp_cuda_sumsq(d_out, d_g, n, ws, 0);
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= reps;
    printf("perf sumsq f32 n=16384x9728: %.1f us, %.0f GB/s (%.0f%% of 4.8 TB/s)\n", ms * 1e3,
           n * 4.0 / (ms * 1e-3) / 1e9, n * 4.0 / (ms * 1e-3) / 4.8e10);
    CK(cudaFree(d_g));
    CK(cudaFree(d_out));
    CK(cudaFree(ws));
}

/* ---- sdp_cuda_sumsq_cast: every chunk of a group at once ---- */

enum { DST_ALIGNED, DST_MISALIGNED, DST_SOME, DST_NONE };
static const char *const dst_mode[] = { "dst 8-aligned", "dst 2-aligned", "dst odd NULL",
                                        "dst NULL" };

/* count the elements of x (n) that differ from y (n), or from 0xabab (the fill) when y is NULL */
static size_t bf16_diff(const uint16_t *x, const uint16_t *y, size_t n)
{
    size_t nbad = 0;
    for (size_t i = 0; i < n; i++)
        nbad += x[i] != (y ? y[i] : 0xabab);
    return nbad;
}

/* Chunks len[0 .. nc) of g, placed at element offset base of a device buffer: the fused sumsq and
 * cast against sdp_cuda_sumsq and sdp_cuda_cast on each chunk, bit for bit.  Chunk 1 gets NaNs
 * (its sum is NaN), chunk 2 both infinities (its sum Inf).  The bf16 buffers have one element of
 * 0xabab fill on each side of the copy, which must stay, as must the whole buffer of a NULL dst. */
static int check_fused(const char *name, const float *g, const size_t *len, int nc, size_t base,
                       int mode)
{
    size_t *off = sdp_test_alloc((size_t)(nc + 1) * sizeof(*off)), wsr = 0;
    double **sums = sdp_test_alloc((size_t)nc * sizeof(*sums)), *d_sum, *d_ref;
    double *got = sdp_test_alloc((size_t)nc * 8), *ref = sdp_test_alloc((size_t)nc * 8);
    uint16_t **buf = sdp_test_alloc((size_t)nc * sizeof(*buf));
    uint16_t **rbuf = sdp_test_alloc((size_t)nc * sizeof(*rbuf));
    uint16_t **dst = sdp_test_alloc((size_t)nc * sizeof(*dst));
    size_t nbad_sum = 0, nbad_bf = 0, nbad_fill = 0;
    unsigned char canary[64];
    float *d_g;
    void *ws, *ws_ref;

    off[0] = 0;
    for (int c = 0; c < nc; c++) {
        off[c + 1] = off[c] + len[c];
        if (sdp_cuda_sumsq_ws(len[c]) > wsr)
            wsr = sdp_cuda_sumsq_ws(len[c]);
    }
    const size_t N = off[nc], wsb = sdp_cuda_sumsq_cast_ws(off, nc);
    float *h = sdp_test_alloc(N * 4 + 4);
    memcpy(h, g, N * 4);
    if (nc > 1 && len[1] >= 4) {
        h[off[1]] = sdp_f32_from_bits(0x7fc00000u);     /* quiet NaN */
        h[off[1] + 1] = sdp_f32_from_bits(0xffc12345u); /* negative NaN with a payload */
        h[off[1] + 2] = sdp_f32_from_bits(0x7f800001u); /* signalling NaN */
        h[off[1] + len[1] - 1] = sdp_f32_from_bits(0xff812345u);
    }
    if (nc > 2 && len[2] >= 2) {
        h[off[2]] = INFINITY;
        h[off[2] + len[2] - 1] = -INFINITY;
    }
    CK(cudaMalloc((void **)&d_g, (N + base) * 4 + 16));
    CK(cudaMemcpy(d_g + base, h, N * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&d_sum, (size_t)nc * 8));
    CK(cudaMalloc((void **)&d_ref, (size_t)nc * 8));
    CK(cudaMemset(d_sum, 0xff, (size_t)nc * 8));
    CK(cudaMalloc(&ws, wsb + sizeof(canary)));
    CK(cudaMemset(ws, 0xab, wsb + sizeof(canary)));
    CK(cudaMalloc(&ws_ref, wsr));
    const float *dg = d_g + base;
    for (int c = 0; c < nc; c++) {
        sums[c] = d_sum + c;
        CK(cudaMalloc((void **)&buf[c], len[c] * 2 + 16));
        CK(cudaMemset(buf[c], 0xab, len[c] * 2 + 16));
        CK(cudaMalloc((void **)&rbuf[c], len[c] * 2 + 16));
        dst[c] = buf[c] + (mode == DST_MISALIGNED);
        if (mode == DST_NONE || (mode == DST_SOME && c % 2))
            dst[c] = NULL;
        sdp_cuda_sumsq(d_ref + c, dg + off[c], len[c], ws_ref, 0);
        sdp_cuda_cast(rbuf[c], SDP_CUDA_BF16, dg + off[c], len[c], 0);
    }
    sdp_cuda_sumsq_cast(sums, mode == DST_NONE ? NULL : dst, dg, off, nc, ws, 0);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());

    CK(cudaMemcpy(got, d_sum, (size_t)nc * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ref, d_ref, (size_t)nc * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(canary, (char *)ws + wsb, sizeof(canary), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof(canary); i++)
        nbad_fill += canary[i] != 0xab;
    for (int c = 0; c < nc; c++) {
        /* the copy at element m of buf[c], the fill at m - 1 (when m = 1) and m + len */
        const size_t m = mode == DST_MISALIGNED, nb = len[c] + 1 + m;
        uint16_t *hb = sdp_test_alloc(nb * 2), *hr = sdp_test_alloc(len[c] * 2 + 2);
        if (memcmp(&got[c], &ref[c], 8) != 0) {
            if (nbad_sum < 5)
                printf("  %s: chunk %d (n %zu at %zu) sumsq %.17g, sdp_cuda_sumsq %.17g\n", name, c,
                       len[c], base + off[c], got[c], ref[c]);
            nbad_sum++;
        }
        CK(cudaMemcpy(hb, buf[c], nb * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hr, rbuf[c], len[c] * 2, cudaMemcpyDeviceToHost));
        if (dst[c]) {
            const size_t d = bf16_diff(hb + m, hr, len[c]);
            if (d && nbad_bf < 5)
                printf("  %s: chunk %d (n %zu at %zu) %zu bf16 differ from sdp_cuda_cast\n", name,
                       c, len[c], base + off[c], d);
            nbad_bf += d;
            nbad_fill += bf16_diff(hb, NULL, m) + bf16_diff(hb + m + len[c], NULL, 1);
        } else {
            nbad_fill += bf16_diff(hb, NULL, nb);
        }
        free(hb);
        free(hr);
        CK(cudaFree(buf[c]));
        CK(cudaFree(rbuf[c]));
    }
    const int bad = nbad_sum || nbad_bf || nbad_fill;
    printf("%-34s %2d chunks, n=%-9zu base %zu, %-13s: sumsq %s, bf16 %s, fill %s  %s\n", name, nc,
           N, base, dst_mode[mode], nbad_sum ? "DIFFERENT" : "identical",
           mode == DST_NONE ? "-" : (nbad_bf ? "DIFFERENT" : "identical"),
           nbad_fill ? "OVERWRITTEN" : "kept", bad ? "BAD" : "ok");
    CK(cudaFree(d_g));
    CK(cudaFree(d_sum));
    CK(cudaFree(d_ref));
    CK(cudaFree(ws));
    CK(cudaFree(ws_ref));
    free(off);
    free(sums);
    free(got);
    free(ref);
    free(buf);
    free(rbuf);
    free(dst);
    free(h);
    return bad;
}

static int check_fused_all(void)
{
    /* 5 x 4097 + 1001: starts at 0 and 16388 aligned, the others not; one block each */
    static const size_t l1[] = { 4097, 4097, 4097, 4097, 4097, 1001 };
    /* from element 1: a 17M chunk of 1024 blocks (aligned, with a tail), empty and tiny chunks */
    static const size_t l2[] = { 3, 17000001, 6, 0, 4096, 7, 262147, 1 };
    /* 24 aligned chunks of 64K (4 blocks each) */
    size_t l3[24], l4[70];
    const size_t nmax = 17300000;
    float *g = sdp_test_alloc(nmax * 4);
    struct sdp_rng rng = { 7 };
    int nfail = 0;

    for (int c = 0; c < 24; c++)
        l3[c] = 65536;
    /* 70 chunks: two batches, the second with a larger chunk (its own block count) */
    for (int c = 0; c < 70; c++)
        l4[c] = c == 66 ? 300001 : 1000 + 37 * (size_t)c;
    sdp_fill_uniform(&rng, g, nmax, -2.0f, 2.0f);
    for (size_t i = 0; i < nmax; i += 1009) {
        static const uint32_t special[] = {
            0x00000001u, 0x807fffffu, 0x00012345u, /* denormals */
            0x7f7fffffu, 0xff7fffffu,              /* largest finite (round to Inf in bf16) */
            0x80000000u, 0x00000000u,              /* signed zeros */
            0x3f808000u, 0x3f818000u, 0xbf808001u, /* ties to even, just above a tie */
        };
        g[i] = sdp_f32_from_bits(special[(i / 1009) % (sizeof(special) / sizeof(special[0]))]);
    }
    for (int mode = DST_ALIGNED; mode <= DST_NONE; mode++) {
        nfail += check_fused("sumsq_cast 5x4097+1001", g, l1, 6, 0, mode);
        nfail += check_fused("sumsq_cast 5x4097+1001 misaligned", g, l1, 6, 1, mode);
        nfail += check_fused("sumsq_cast 17M + small", g, l2, 8, 1, mode);
        nfail += check_fused("sumsq_cast 24x64K", g, l3, 24, 0, mode);
        nfail += check_fused("sumsq_cast 70 chunks", g, l4, 70, 0, mode);
        nfail += check_fused("sumsq_cast 70 chunks misaligned", g, l4, 70, 2, mode);
    }
    free(g);
    return nfail;
}

/* grad_pack of a transformer layer's 24 chunks of 4M: its former loop of sdp_cuda_sumsq +
 * sdp_cuda_cast per chunk against one sdp_cuda_sumsq_cast, with and without the bf16 copy */
static void bench_fused(void)
{
    enum { NC = 24, REPS = 10 };
    const size_t len = (size_t)4 << 20, N = NC * len;
    size_t off[NC + 1];
    double *sums[NC], *d_sum;
    uint16_t *dst[NC], *d_dst;
    float *d_g, ms[2][2];
    void *ws, *ws_ref;
    cudaEvent_t e0, e1;

    CK(cudaMalloc((void **)&d_g, N * 4));
    CK(cudaMalloc((void **)&d_dst, N * 2));
    CK(cudaMalloc((void **)&d_sum, NC * 8));
    for (int c = 0; c <= NC; c++)
        off[c] = c * len;
    for (int c = 0; c < NC; c++) {
        sums[c] = d_sum + c;
        dst[c] = d_dst + off[c];
    }
    CK(cudaMalloc(&ws, sdp_cuda_sumsq_cast_ws(off, NC)));
    CK(cudaMalloc(&ws_ref, sdp_cuda_sumsq_ws(len)));
    CK(cudaMemset(d_g, 0x3c, N * 4));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int pack = 0; pack < 2; pack++)
        for (int fused = 0; fused < 2; fused++) {
            for (int r = -1; r < REPS; r++) { /* r = -1: warm-up */
                if (r == 0)
                    CK(cudaEventRecord(e0, 0));
                if (fused) {
                    sdp_cuda_sumsq_cast(sums, pack ? dst : NULL, d_g, off, NC, ws, 0);
                    continue;
                }
                for (int c = 0; c < NC; c++) {
                    sdp_cuda_sumsq(sums[c], d_g + off[c], len, ws_ref, 0);
                    if (pack)
                        sdp_cuda_cast(dst[c], SDP_CUDA_BF16, d_g + off[c], len, 0);
                }
            }
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            CK(cudaEventElapsedTime(&ms[pack][fused], e0, e1));
            ms[pack][fused] /= REPS;
        }
    for (int pack = 0; pack < 2; pack++) {
        /* the bytes that must move: the f32 read once, the bf16 written */
        const double bytes = N * (pack ? 6.0 : 4.0);
        printf("perf %-13s 24x4M f32: loop %.1f us, %.0f GB/s; fused %.1f us, %.0f GB/s (%.0f%% of "
               "4.8 TB/s)\n",
               pack ? "sumsq+cast" : "sumsq", ms[pack][0] * 1e3, bytes / (ms[pack][0] * 1e-3) / 1e9,
               ms[pack][1] * 1e3, bytes / (ms[pack][1] * 1e-3) / 1e9,
               bytes / (ms[pack][1] * 1e-3) / 4.8e10);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(d_g));
    CK(cudaFree(d_dst));
    CK(cudaFree(d_sum));
    CK(cudaFree(ws));
    CK(cudaFree(ws_ref));
}

int main(void)
{
    int ndev = 0, nfail = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    const size_t nmax = 10000000;
    float *g = sdp_test_alloc(nmax * 4);
    struct sdp_rng rng = { 42 };
    sdp_fill_normal(&rng, g, nmax, 1.0f);
    nfail += check("sumsq n=0", g, 0, 0);
    nfail += check("sumsq n=1", g, 1, 0);
    nfail += check("sumsq n=7 misaligned", g, 7, 1);
    nfail += check("sumsq n=1000003 misaligned", g, 1000003, 3);
    nfail += check("sumsq n=1e7", g, nmax, 0);
    for (size_t i = 0; i < 4096; i++)
        g[i] = (i & 1) ? 1e30f : 1e-30f; /* squares far outside the float range */
    nfail += check("sumsq huge/tiny", g, 4096, 0);
    nfail += check_fused_all();
    bench();
    bench_fused();
    free(g);
    return sdp_test_finish(nfail);
}
