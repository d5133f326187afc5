/* SPDX-License-Identifier: MIT */
/* The LoRA kernels on the GPU (codelets/cuda/lora.cu) against the fp64 oracle of
 * tests/kernels/lora_oracle.h, for dt f32 and bf16 (inputs rounded to bf16 first, so the
 * oracle sees the GPU's inputs): the forward into a column slice of a wider output, the
 * backward's dx, dA and dB accumulated onto non-zero values, the columns outside the slice
 * untouched.  Each element must satisfy |x_i - ref_i| <= SDP_SAFETY * u * kappa_i with kappa_i the
 * oracle's first-order magnitude and u the unit roundoff of the step that rounds most: u32 for
 * f32 (fp32 GEMMs, no TF32), ubf16 for bf16 (the scaled rank-r intermediate, the output and its
 * in-place accumulation are rounded to bf16; the GEMMs accumulate in fp32).  Each also with the
 * dropout of the adapter's input (the dropped input rounded to dt; the oracle applies the mask).
 * Exit 77 without a GPU. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "base/splitmix.h"
#include "tests/kernels/lora_oracle.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_cuda.h"

#define GEMM_WS_BYTES (32u << 20)

static cublasLtHandle_t lt;
static cudaStream_t stream;
static void *gemm_ws, *ws[6];
static struct sdp_cuda_dropout drop; /* thr 0: none; else its mask in lora_keep, xd in ws[5] */
static double U;                     /* the unit roundoff of the dtype under test */

static void test_fwd(int dt, const float *x, const float *a, const float *b, const float *y0)
{
    static float y[M * LDY], got[M * OUT];
    static double ref[M * OUT], kap[M * OUT];
    void *dy = upload(y0, M * LDY, dt), *dx = upload(x, M * IN, dt), *da = upload(a, R * IN, dt);
    void *db = upload(b, OUT * R, dt);
    int outside = 0;
    sdp_cuda_lora_fwd(lt, (char *)dy + COL0 * esize(dt), LDY, dx, da, db, M, IN, OUT, R, (float)S,
                      dt, ws[0], ws[1], ws[4], gemm_ws, GEMM_WS_BYTES, stream, &drop);
    CK(cudaStreamSynchronize(stream));
    download(y, dy, M * LDY, dt);
    lora_oracle_fwd(x, a, b, y0, ref, kap);
    for (int m = 0; m < M; m++)
        for (int j = 0; j < OUT; j++)
            got[m * OUT + j] = y[m * LDY + COL0 + j];
    lora_compare("forward y slice", got, ref, kap, M * OUT, U);
    for (int m = 0; m < M; m++)
        for (int c = 0; c < LDY; c++)
            if ((c < COL0 || c >= COL0 + OUT) &&
                sdp_f32_bits(y[m * LDY + c]) != sdp_f32_bits(y0[m * LDY + c]))
                outside++;
    CHECK(outside == 0, "forward wrote %d values outside its slice", outside);
    cudaFree(dy), cudaFree(dx), cudaFree(da), cudaFree(db);
}

static void test_bwd(int dt, const float *x, const float *a, const float *b, const float *dy)
{
    static float dx[M * IN], ga[R * IN], gb[OUT * R];
    static double rdx[M * IN], kdx[M * IN], rga[R * IN], kga[R * IN], rgb[OUT * R], kgb[OUT * R];
    struct sdp_rng rng = { 21 };
    float dx0[M * IN], ga0[R * IN], gb0[OUT * R];
    sdp_fill_uniform(&rng, dx0, M * IN, -1, 1);
    round_in(dx0, M * IN, dt);
    sdp_fill_uniform(&rng, ga0, R * IN, -0.1f, 0.1f);
    sdp_fill_uniform(&rng, gb0, OUT * R, -0.1f, 0.1f);
    {
        void *ddx = upload(dx0, M * IN, dt), *ddy = upload(dy, M * LDY, dt);
        void *dxx = upload(x, M * IN, dt), *da = upload(a, R * IN, dt),
             *db = upload(b, OUT * R, dt);
        float *dga, *dgb;
        CK(cudaMalloc((void **)&dga, sizeof(ga)));
        CK(cudaMalloc((void **)&dgb, sizeof(gb)));
        CK(cudaMemcpy(dga, ga0, sizeof(ga), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dgb, gb0, sizeof(gb), cudaMemcpyHostToDevice));
        sdp_cuda_lora_bwd(lt, ddx, (char *)ddy + COL0 * esize(dt), LDY, dxx, da, db, dga, dgb, M,
                          IN, OUT, R, (float)S, dt, ws[0], ws[1], ws[2], ws[3], gemm_ws,
                          GEMM_WS_BYTES, stream, &drop);
        CK(cudaStreamSynchronize(stream));
        download(dx, ddx, M * IN, dt);
        CK(cudaMemcpy(ga, dga, sizeof(ga), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gb, dgb, sizeof(gb), cudaMemcpyDeviceToHost));
        cudaFree(ddx), cudaFree(ddy), cudaFree(dxx), cudaFree(da), cudaFree(db);
        cudaFree(dga), cudaFree(dgb);
    }
    lora_oracle_bwd(x, a, b, dy, dx0, ga0, gb0, rdx, kdx, rga, kga, rgb, kgb);
    lora_compare("backward dB", gb, rgb, kgb, OUT * R, U);
    lora_compare("backward dA", ga, rga, kga, R * IN, U);
    lora_compare("backward dx", dx, rdx, kdx, M * IN, U);
}

int main(void)
{
    static float x[M * IN], a[R * IN], b[OUT * R], y0[M * LDY], dy[M * LDY];
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: SKIP\n");
        return 77;
    }
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        printf("cublasLtCreate failed\nFAIL\n");
        return 1;
    }
    CK(cudaStreamCreate(&stream));
    CK(cudaMalloc(&gemm_ws, GEMM_WS_BYTES));
    for (int i = 0; i < 6; i++) /* u, us, v (then dx's product), vs; the forward's product; xd */
        CK(cudaMalloc(&ws[i], (size_t)M * (LDY > IN ? LDY : IN) * 4));
    for (int dt = SDP_CUDA_F32; dt <= SDP_CUDA_BF16; dt++) {
        struct sdp_rng rng = { 7 };
        sdp_fill_uniform(&rng, x, M * IN, -1, 1);
        sdp_fill_uniform(&rng, a, R * IN, -0.2f, 0.2f); /* PEFT's A: uniform in +-1/sqrt(in) */
        sdp_fill_uniform(&rng, b, OUT * R, -0.5f, 0.5f);
        sdp_fill_uniform(&rng, y0, M * LDY, -1, 1);
        sdp_fill_uniform(&rng, dy, M * LDY, -1, 1);
        round_in(x, M * IN, dt), round_in(a, R * IN, dt), round_in(b, OUT * R, dt);
        round_in(y0, M * LDY, dt), round_in(dy, M * LDY, dt);
        U = dt == SDP_CUDA_BF16 ? SDP_UBF16 : SDP_U32;
        printf("%s: M %d, in %d, out %d (columns %d.. of %d), r %d, s %.2f\n", dt_name(dt), M, IN,
               OUT, COL0, LDY, R, S);
        drop = (struct sdp_cuda_dropout){ 0 };
        lora_keep = NULL;
        test_fwd(dt, x, a, b, y0);
        test_bwd(dt, x, a, b, dy);
        { /* dropout p = 0.3 on the input (the CPU test's mask): the oracle applies it */
            static unsigned char keep[M * IN];
            drop = (struct sdp_cuda_dropout){ 0x5eedull, (uint32_t)(0.3 * 16777216.0 + 0.5),
                                              (float)(1.0 / 0.7), ws[5] };
            for (int i = 0; i < M * IN; i++)
                keep[i] = (unsigned char)sdp_dropout_keep(drop.key, (uint64_t)i, drop.thr);
            lora_keep = keep, lora_scale = drop.scale;
            printf("%s with dropout p 0.3\n", dt_name(dt));
            test_fwd(dt, x, a, b, y0);
            test_bwd(dt, x, a, b, dy);
        }
    }
    return sdp_test_finish(sdp_test_nfail);
}
