/* SPDX-License-Identifier: MIT */
/* sdp_graph_gpu_bytes_min, the GPU memory a run needs at least (the train command refuses a GPU
 * limit below it): each activation setting against the parts it adds, computed here from the
 * model's shapes, the benchmarks' qwen3-4b configurations under the limits they run with, the
 * workspaces at length within the budget a limit leaves (sdp_graph_ws_bytes), and the fp32
 * residual stream (train.residual_dtype fp32) against the bytes it doubles. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "graph/plan.h"
#include "graph/predict.h"
#include "graph/step.h"
#include "models/sdp_models.h"
#include "tests/lib/sdp_test.h"

enum { NONE = SDP_RECOMPUTE_NONE, FULL = SDP_RECOMPUTE_FULL, SEL = SDP_RECOMPUTE_SELECTIVE };

static unsigned long long need_mlp(const struct sdp_model_cfg *m, int B, int recompute, int offload,
                                   int keep_last, int keep_mlp)
{
    struct sdp_graph_conf c = { .micro_batch = B,
                                .seq_len = 1024,
                                .recompute = recompute,
                                .offload_inputs = offload,
                                .keep_last = keep_last,
                                .keep_mlp = keep_mlp };
    return sdp_graph_gpu_bytes_min(m, SDP_BF16, &c);
}

static unsigned long long need(const struct sdp_model_cfg *m, int B, int recompute, int offload,
                               int keep_last)
{
    return need_mlp(m, B, recompute, offload, keep_last, 0);
}

/* The per-layer account of the plan the knobs make: the knobs' figure less the inputs that one
 * also counts for the keep_last kept layers (not when offloaded: then it counts a pool of 4);
 * then a plan the knobs cannot make, its kept layers in the middle. */
static void plan_bytes(const struct sdp_model_cfg *m)
{
    static const int recs[] = { NONE, FULL, SEL };
    for (int ri = 0; ri < 3; ri++)
        for (int off = 0; off <= 1; off++)
            for (int kl = 0; kl <= 2; kl++)
                for (int km = 0; km <= 3; km += 3) {
                    struct sdp_graph_conf c = { .micro_batch = 16,
                                                .seq_len = 1024,
                                                .recompute = recs[ri],
                                                .offload_inputs = off,
                                                .keep_last = kl,
                                                .keep_mlp = km };
                    struct sdp_plan p;
                    unsigned long long knobs = sdp_graph_gpu_bytes_min(m, SDP_BF16, &c), plan;
                    unsigned long long in =
                        recs[ri] ? sdp_model_layer_act_bytes(m, 16, 1024, 2, recs[ri]) : 0;
                    CHECK(sdp_predict_plan_from_conf(&p, m, &c, 16u << 20, 1) == 0, "plan");
                    plan = sdp_plan_gpu_bytes_min(&p, m, SDP_BF16, 16, 1024, 0, NULL);
                    CHECK(plan == knobs - (off ? 0 : (unsigned long long)kl * in),
                          "plan of the knobs (recompute %d, offload %d, keep_last %d, keep_mlp %d):"
                          " %llu against %llu",
                          recs[ri], off, kl, km, plan, knobs);
                    sdp_plan_free(&p);
                }
    struct sdp_graph_conf c = { .micro_batch = 16, .seq_len = 1024, .recompute = FULL };
    struct sdp_plan p;
    CHECK(sdp_predict_plan_from_conf(&p, m, &c, 16u << 20, 1) == 0, "plan");
    unsigned long long all = sdp_plan_gpu_bytes_min(&p, m, SDP_BF16, 16, 1024, 0, NULL);
    unsigned long long full = sdp_model_layer_act_bytes(m, 16, 1024, 2, 0);
    unsigned long long in = sdp_model_layer_act_bytes(m, 16, 1024, 2, FULL);
    for (int l = 10; l < 14; l++)
        p.group[l].act = SDP_ACT_KEEP;
    CHECK(sdp_plan_gpu_bytes_min(&p, m, SDP_BF16, 16, 1024, 0, NULL) == all + 4 * (full - in),
          "four layers kept in the middle: each its intermediates instead of its input");
    sdp_plan_free(&p);
}

/* The workspaces at length (qwen3-4b, 4 rows of 8192 tokens): the attention backward's cuDNN call
 * takes the rows the budget allows, a divisor of 4: 2 rows of 257 MiB each under the 1 GiB of no
 * limit; all 4 when the limit leaves exactly their bytes, 2 when it leaves a byte less; the LM
 * head's block shrinks to 256 MiB under a limit below 20 GiB.  The figures here are computed from
 * the shapes (cuDNN: two fp32 (rows, NH, T, HD) accumulators and the fp32 softmax sums). */
static void workspaces(const struct sdp_model_cfg *m)
{
    const unsigned long long T = 8192, NH = (unsigned long long)m->num_heads,
                             HD = (unsigned long long)m->head_dim,
                             V = (unsigned long long)m->vocab_size;
    const unsigned long long row = 2 * NH * T * HD * 4 + NH * T * 4; /* cuDNN's, a row */
    struct sdp_graph_conf c = { .micro_batch = 4, .seq_len = (int)T, .recompute = FULL };
    unsigned long long budget;
    unsetenv("SDP_ATTENTION_WS_MIB"); /* the figures below are the defaults' */
    unsetenv("SDP_LMHEAD_BLOCK_MIB");
    unsetenv("SDP_LMHEAD_LOGITS");
    unsigned long long none = sdp_graph_gpu_bytes_min(m, SDP_BF16, &c);
    /* the rest: all but the attention's 2 rows; the LM head's 1 GiB block: 3533 rows of V bf16 */
    unsigned long long rest = none - 2 * row;
    CHECK(sdp_graph_ws_bytes(m, SDP_BF16, 4, (int)T, 0, 0, 0, &budget) ==
              (64ull << 20) + 3533 * V * 2 + 2 * 4 * T * 8 + 2 * row,
          "no limit: 64 MiB, the LM head's block, 2 rows of attention");
    CHECK(budget == 1ull << 30, "no limit: a 1 GiB budget (%llu)", budget);
    /* the block pinned at 1 GiB, so that the limits below (under 20 GiB here) leave the rest as
     * it is: only the attention's rows move */
    setenv("SDP_LMHEAD_BLOCK_MIB", "1024", 1);
    c.gpu_limit_bytes = rest + 4 * row; /* leaves the attention the bytes of 4 rows exactly */
    CHECK(sdp_graph_gpu_bytes_min(m, SDP_BF16, &c) == rest + 4 * row,
          "a limit leaving 4 rows' bytes: calls of 4 rows");
    c.gpu_limit_bytes--;
    CHECK(sdp_graph_gpu_bytes_min(m, SDP_BF16, &c) == rest + 2 * row,
          "a byte less: calls of 2 rows");
    c.gpu_limit_bytes = rest; /* nothing left: one row, whatever it takes */
    CHECK(sdp_graph_gpu_bytes_min(m, SDP_BF16, &c) == rest + row, "nothing left: 1 row");
    unsetenv("SDP_LMHEAD_BLOCK_MIB");
    /* below 20 GiB: a 256 MiB block, 883 rows; a rest of the whole limit leaves nothing */
    CHECK(sdp_graph_ws_bytes(m, SDP_BF16, 4, (int)T, 0, 16ull << 30, 16ull << 30, &budget) ==
                  (64ull << 20) + 883 * V * 2 + 2 * 4 * T * 8 + row &&
              budget == 0,
          "16 GiB, nothing left: the LM head's block of 256 MiB, one row");
    /* document masking: rows laid out in 4 slots of T tokens take 4 rows' bytes, one row a call
     * (the budget fits 2 unmasked rows); fewer tokens than T count T */
    CHECK(sdp_graph_ws_bytes(m, SDP_BF16, 4, (int)T, 4 * (long long)T, 0, 0, &budget) ==
              (64ull << 20) + 3533 * V * 2 + 2 * 4 * T * 8 + 4 * row,
          "masked rows of 4 T tokens: one a call, 4 rows' bytes");
    CHECK(sdp_graph_ws_bytes(m, SDP_BF16, 4, (int)T, (long long)T / 2, 0, 0, &budget) ==
              (64ull << 20) + 3533 * V * 2 + 2 * 4 * T * 8 + 2 * row,
          "masked rows of T / 2 tokens count T");
    c.gpu_limit_bytes = 0, c.attn_row_tokens = 4 * (long long)T;
    CHECK(sdp_graph_gpu_bytes_min(m, SDP_BF16, &c) == none + 2 * row,
          "the conf's masked rows of 4 T tokens: 2 rows' bytes more than unmasked");
}

/* train.residual_dtype fp32 under bf16: each saved input (selective: and mid residual) and each
 * kept layer's input and mid residual take 4 bytes an element instead of 2; d_x too, and its bf16
 * cast for the matmuls' backward is one more (N, C) bf16 tensor.  With fp32 working copies nothing
 * changes.  The plan's account follows, layer by layer. */
static void residual_bytes(const struct sdp_model_cfg *m)
{
    const unsigned long long L = (unsigned long long)m->num_layers;
    const unsigned long long nc2 = 16ull * 1024 * m->hidden_size * 2; /* an (N, C) bf16 tensor */
    static const int recs[] = { NONE, FULL, SEL };
    for (int ri = 0; ri < 3; ri++)
        for (int off = 0; off <= 1; off++) {
            struct sdp_graph_conf c = { .micro_batch = 16,
                                        .seq_len = 1024,
                                        .recompute = recs[ri],
                                        .offload_inputs = off,
                                        .keep_last = 1 };
            unsigned long long b16 = sdp_graph_gpu_bytes_min(m, SDP_BF16, &c);
            unsigned long long f32 = sdp_graph_gpu_bytes_min(m, SDP_F32, &c), pb16, pr32;
            unsigned long long saved = recs[ri] == SEL ? 2 * nc2 : recs[ri] ? nc2 : 0;
            unsigned long long nfull = recs[ri] ? 3 : L + 1; /* 2 at work + keep_last */
            struct sdp_plan p;
            CHECK(sdp_predict_plan_from_conf(&p, m, &c, 16u << 20, 1) == 0, "plan");
            pb16 = sdp_plan_gpu_bytes_min(&p, m, SDP_BF16, 16, 1024, 0, NULL);
            sdp_plan_free(&p);
            c.residual_f32 = 1;
            CHECK(sdp_predict_plan_from_conf(&p, m, &c, 16u << 20, 1) == 0, "plan");
            pr32 = sdp_plan_gpu_bytes_min(&p, m, SDP_BF16, 16, 1024, 0, NULL);
            sdp_plan_free(&p);
            unsigned long long r32 = sdp_graph_gpu_bytes_min(m, SDP_BF16, &c);
            unsigned long long want = b16 + (off ? 4 : L) * saved + 2 * nc2 + nfull * 2 * nc2;
            CHECK(r32 == want, "residual fp32 (recompute %d, offload %d): %llu, want %llu",
                  recs[ri], off, r32, want);
            CHECK(sdp_graph_gpu_bytes_min(m, SDP_F32, &c) == f32,
                  "residual fp32 with fp32 working copies changes nothing");
            CHECK(pr32 - pb16 == r32 - b16 - (off || !recs[ri] ? 0 : saved),
                  "the plan's account (recompute %d, offload %d): +%llu, knobs +%llu", recs[ri],
                  off, pr32 - pb16, r32 - b16);
        }
}

int main(void)
{
    struct sdp_model_cfg m;
    const double gib = 1073741824.0;
    if (sdp_model_preset("qwen3-4b", &m)) {
        printf("no qwen3-4b preset\nFAIL\n");
        return 1;
    }
    const unsigned long long L = (unsigned long long)m.num_layers;
    for (int B = 16; B <= 32; B += 16) {
        /* one layer input (bf16) and every intermediate of one layer, for B x 1024 tokens */
        unsigned long long in = (unsigned long long)B * 1024 * m.hidden_size * 2;
        unsigned long long full = sdp_model_layer_act_bytes(&m, B, 1024, 2, 0);
        unsigned long long base = need(&m, B, FULL, 0, 0);
        printf("qwen3-4b/%d: recompute %.2f GiB (layer input %.0f MiB, layer %.0f MiB)\n", B,
               base / gib, in / 1048576.0, full / 1048576.0);
        CHECK(need(&m, B, FULL, 0, 1) == base + full, "keep_last 1 adds one layer's intermediates");
        CHECK(need(&m, B, FULL, 0, 3) == base + 3 * full, "keep_last 3 adds three");
        CHECK(need(&m, B, SEL, 0, 0) == base + L * in, "selective adds a mid residual a layer");
        CHECK(need(&m, B, FULL, 1, 0) == base - (L - 4) * in, "offload keeps four inputs");
        CHECK(need(&m, B, SEL, 1, 0) == base - L * in + 8 * in,
              "selective offload keeps four inputs and four residuals");
        CHECK(need(&m, B, NONE, 0, 0) == base - L * in + (L - 1) * full,
              "keep: every layer's intermediates, no separate inputs");
        CHECK(need(&m, B, NONE, 0, 5) == need(&m, B, NONE, 0, 0),
              "keep_last means nothing in keep");
        /* keep_mlp: a kept layer's gate/up projection (2 x intermediate) and mid residual; with
         * selective the residual is already counted; no more layers than are recomputed */
        unsigned long long gu = (unsigned long long)B * 1024 * 2 * m.intermediate_size * 2;
        CHECK(need_mlp(&m, B, FULL, 0, 1, 4) == need(&m, B, FULL, 0, 1) + 4 * (gu + in),
              "keep_mlp 4 adds four gate/up projections and mid residuals");
        CHECK(need_mlp(&m, B, SEL, 0, 1, 4) == need(&m, B, SEL, 0, 1) + 4 * gu,
              "selective keep_mlp 4 adds four gate/up projections");
        CHECK(need_mlp(&m, B, FULL, 1, 1, 4) == need(&m, B, FULL, 1, 1) + 4 * (gu + in),
              "offloaded keep_mlp keeps its tensors on the GPU");
        CHECK(need_mlp(&m, B, SEL, 1, 1, 4) == need(&m, B, SEL, 1, 1) + 4 * (gu + in),
              "selective offload keeps the kept layers' residuals on the GPU too");
        CHECK(need_mlp(&m, B, FULL, 0, 1, (int)L) == need_mlp(&m, B, FULL, 0, 1, (int)L - 1),
              "keep_mlp counts at most the L - keep_last recomputed layers");
        CHECK(need_mlp(&m, B, NONE, 0, 0, 4) == need(&m, B, NONE, 0, 0),
              "keep_mlp means nothing in keep");
    }
    /* the benchmarks' settings fit their limits: qwen3-4b/32 under 23 GiB and qwen3-4b/16 under
     * 15 GiB with the defaults (recompute, the last layer kept) */
    printf("qwen3-4b/32, keep_last 1: %.2f GiB; qwen3-4b/16: %.2f GiB\n",
           need(&m, 32, FULL, 0, 1) / gib, need(&m, 16, FULL, 0, 1) / gib);
    CHECK(need(&m, 32, FULL, 0, 1) < 23 * gib, "qwen3-4b/32 must fit 23 GiB");
    CHECK(need(&m, 16, FULL, 0, 1) < 15 * gib, "qwen3-4b/16 must fit 15 GiB");
    CHECK(need(&m, 32, NONE, 0, 0) > 80 * gib,
          "qwen3-4b/32 keeping every activation needs > 80 GiB");
    plan_bytes(&m);
    workspaces(&m);
    residual_bytes(&m);
    return sdp_test_finish(sdp_test_nfail);
}
