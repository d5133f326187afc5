/* SPDX-License-Identifier: MIT */
/* The GPU workspaces of the two tasks whose scratch grows with the tokens of a micro-batch: the
 * attention backward through cuDNN (codelets/cuda/attention_cudnn.cu) and the LM head's blocked
 * cross-entropy (codelets/cuda/lmhead_ce.cu).  The codelets size their calls with these functions
 * and the plan counts the same bytes (graph/cost.c), so the two cannot drift apart.
 * Test: tests/models/test_workspace.c. */
#include "config.h"

#include "models/sdp_models.h"

#define FP32 4ull /* bytes of an fp32 accumulator */

static unsigned long long up256(unsigned long long n)
{
    return (n + 255) & ~255ull;
}

/* cuDNN's fused backward over bs whole rows (sequences of T tokens) keeps two fp32 (bs, NH, T, HD)
 * accumulators (the frontend's dQ accumulator and the engine's own) and the fp32 (bs, NH, T)
 * softmax sums (cudnn_frontend's sdpa_backward: dQ_accum_size, softmax_sum_size); the forward
 * needs none.  It is what cuDNN 9 asked at 1024 tokens, HD 128, linear in the sequences: 32.1 MiB
 * a sequence at 32 heads (qwen3-4b, bench/results/2026-12-02-h200-lmhead-logits), 40.2 at 40
 * (qwen3-14b, 2026-12-06-h100-predict3).  Document masking's calls ask the same for bs D S rows
 * (D slots a row, S the longest document, each rounded up to a power of two: at least bs T, the
 * plan's count, and up to D times it; bench/results/2026-12-07-h100-masked-attention.md). */
unsigned long long sdp_model_attention_ws_bytes(int bwd, int bs, int T, int NH, int HD)
{
    const unsigned long long rows = (unsigned long long)bs * T * NH;
    if (!bwd || bs <= 0 || T <= 0)
        return 0;
    return 2 * rows * HD * FP32 + rows * FP32;
}

/* The project's own backward kernels (codelets/cuda/attention_bwd.cu: f32 runs, SDP_ATTENTION=own
 * or a shape cuDNN refuses) in one call over all B rows: the fp32 softmax sums (B, NH, T), then an
 * fp32 dQ accumulator (B*T, NH*HD). */
unsigned long long sdp_model_attention_own_ws_bytes(int B, int T, int NH, int HD)
{
    const unsigned long long rows = (unsigned long long)B * T * NH;
    return up256(rows * FP32) + rows * HD * FP32;
}

/* The rows of one call: the largest divisor of B whose workspace fits the budget, else 1 (a
 * single row runs whatever it asks: the rows cannot be split further). */
int sdp_model_attention_batch(int bwd, int B, int T, int NH, int HD, unsigned long long budget)
{
    for (int bs = B; bs > 1; bs--)
        if (B % bs == 0 && sdp_model_attention_ws_bytes(bwd, bs, T, NH, HD) <= budget)
            return bs;
    return 1;
}

/* The logits block: 1 GiB, a quarter of it under a GPU limit below 20 GiB, where the block is
 * workspace the limit counts but StarPU cannot evict (bench/results/2026-12-01-h200-fetch-gate.md);
 * requested (> 0) sizes as given. */
unsigned long long sdp_model_lmhead_block_bytes(unsigned long long gpu_limit,
                                                unsigned long long requested)
{
    if (requested > 0)
        return requested;
    return gpu_limit > 0 && gpu_limit < (20ull << 30) ? 1ull << 28 : 1ull << 30;
}

int sdp_model_lmhead_block_rows(int N, int V, unsigned long long block_bytes, int logits_es)
{
    unsigned long long rows =
        V > 0 && logits_es > 0 ? block_bytes / ((unsigned long long)V * logits_es) : 1;
    if (rows < 1)
        rows = 1;
    return rows > (unsigned long long)N ? (N > 0 ? N : 1) : (int)rows;
}

/* One block of logits (rows, V) and two fp64 per-token vectors (loss, validity), each 256-byte
 * aligned: what sdp_cuda_lmhead_ce_ws asks for the same rows. */
unsigned long long sdp_model_lmhead_ws_bytes(int N, int V, int rows, int logits_es)
{
    if (N <= 0 || V <= 0)
        return 256;
    if (rows > N)
        rows = N;
    if (rows < 1)
        rows = 1;
    return up256((unsigned long long)rows * V * logits_es) + 2 * up256((unsigned long long)N * 8);
}
