/* SPDX-License-Identifier: MIT */
/* models/workspace.c, the workspaces the codelets take and the plan counts: cuDNN's attention
 * backward against the workspaces cuDNN asked on GPUs (the bench logs quoted in workspace.c, to
 * the byte: the model is exact there), the rows a call under a budget (a divisor of B, one at
 * least), the own kernels' workspace, and the LM head's blocks, against the kernels' own sizing
 * (sdp_cuda_attention_bwd_ws, sdp_cuda_lmhead_ce_ws: host code, no GPU needed) at production and
 * small shapes. */
#include "config.h"

#include <stdio.h>

#include "models/sdp_models.h"
#include "tests/lib/sdp_test.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

#define MIB (1ull << 20)

static void check_attention(void)
{
    /* qwen3-4b (NH 32, HD 128) at 1024 tokens: 32 sequences asked 1028.0 MiB, 16 514.0, 2 64.3;
     * qwen3-14b (NH 40): 8 sequences 321.3 MiB (printed to 0.1 MiB; the model's bytes exactly) */
    CHECK(sdp_model_attention_ws_bytes(1, 32, 1024, 32, 128) == 1028 * MIB, "4b, 32 sequences");
    CHECK(sdp_model_attention_ws_bytes(1, 16, 1024, 32, 128) == 514 * MIB, "4b, 16 sequences");
    CHECK(sdp_model_attention_ws_bytes(1, 8, 1024, 40, 128) == 32125 * MIB / 100,
          "14b, 8 sequences: %llu", sdp_model_attention_ws_bytes(1, 8, 1024, 40, 128));
    CHECK(sdp_model_attention_ws_bytes(0, 32, 1024, 32, 128) == 0, "the forward takes none");
    /* linear in the sequences: a call of bs costs bs calls of one */
    CHECK(sdp_model_attention_ws_bytes(1, 4, 32768, 32, 128) ==
              4 * sdp_model_attention_ws_bytes(1, 1, 32768, 32, 128),
          "linear in bs");
    /* the rows a call: the largest divisor of B within the budget, else 1 */
    CHECK(sdp_model_attention_batch(1, 32, 1024, 32, 128, 1100 * MIB) == 32, "32 in 1100 MiB");
    CHECK(sdp_model_attention_batch(1, 32, 1024, 32, 128, 1027 * MIB) == 16, "16 in 1027 MiB");
    CHECK(sdp_model_attention_batch(1, 6, 1024, 32, 128, 130 * MIB) == 3, "6 rows, 4 fit: 3");
    CHECK(sdp_model_attention_batch(1, 4, 32768, 32, 128, 0) == 1, "no budget: one row");
    CHECK(sdp_model_attention_batch(0, 4, 32768, 32, 128, 0) == 4, "the forward: all rows");
    /* the own kernels: the sums (a multiple of 256 bytes here) and one fp32 dQ */
    CHECK(sdp_model_attention_own_ws_bytes(4, 1024, 32, 128) == 4ull * 1024 * 32 * (4 + 512),
          "own kernels");
#ifdef SDP_HAVE_CUDA /* the kernel's own sizing, which the codelet replaced by the model's */
    static const int own[][4] = { { 4, 1024, 32, 128 }, { 1, 77, 2, 16 }, { 3, 257, 4, 64 } };
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        CHECK(sdp_model_attention_own_ws_bytes(own[i][0], own[i][1], own[i][2], own[i][3]) ==
                  sdp_cuda_attention_bwd_ws(own[i][0], own[i][1], own[i][2], 1, own[i][3]),
              "own kernels, shape %zu: the model and the kernel differ", i);
#endif
}

/* The LM head: the block's size by limit, its rows, and the workspace the kernel asks for them */
static void check_lmhead(void)
{
    static const int shapes[][2] = { { 16384, 151936 }, { 32768, 151936 }, { 100, 151936 },
                                     { 7, 50 },         { 1, 151936 },     { 65536, 32000 } };
    CHECK(sdp_model_lmhead_block_bytes(0, 0) == 1ull << 30, "no limit: 1 GiB");
    CHECK(sdp_model_lmhead_block_bytes(16ull << 30, 0) == 1ull << 28, "16 GiB: 256 MiB");
    CHECK(sdp_model_lmhead_block_bytes(23ull << 30, 0) == 1ull << 30, "23 GiB: 1 GiB");
    CHECK(sdp_model_lmhead_block_bytes(16ull << 30, 5 * MIB) == 5 * MIB, "requested");
    /* 1 GiB of bf16 logits at Qwen3's vocabulary: 3533 rows */
    CHECK(sdp_model_lmhead_block_rows(16384, 151936, 1ull << 30, 2) == 3533, "3533 rows");
    CHECK(sdp_model_lmhead_block_rows(100, 151936, 1ull << 30, 2) == 100, "at most N");
    CHECK(sdp_model_lmhead_block_rows(100, 151936, 1, 4) == 1, "at least 1");
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        for (int es = 2; es <= 4; es += 2) {
            const int N = shapes[i][0], V = shapes[i][1];
            const int rows = sdp_model_lmhead_block_rows(N, V, 1ull << 28, es);
            const unsigned long long ws = sdp_model_lmhead_ws_bytes(N, V, rows, es);
            CHECK(ws >= (unsigned long long)rows * V * es + 16ull * N && ws % 256 == 0,
                  "N %d V %d: %llu bytes", N, V, ws);
#ifdef SDP_HAVE_CUDA
            const size_t k =
                sdp_cuda_lmhead_ce_ws(N, 1024, V, rows, es == 2 ? SDP_CUDA_BF16 : SDP_CUDA_F32);
            CHECK(ws == k, "N %d V %d es %d: the model %llu bytes, the kernel %zu", N, V, es, ws,
                  k);
#endif
        }
}

int main(void)
{
    check_attention();
    check_lmhead();
    return sdp_test_finish(sdp_test_nfail);
}
