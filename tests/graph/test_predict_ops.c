/* SPDX-License-Identifier: MIT */
/* The per-op costs of the stage split (graph/predict_ops.h) on a toy Qwen3 against hand formulas:
 * a layer's forward is its FLOPs at the machine's rate, its backward twice the GEMMs and 2.5x the
 * attention (BENCH.md's 3.5x forward+backward), plus the forward again when recomputed; with the
 * element-wise kernels on, forward + backward is sdp_predict_layer_s for every placement; the
 * head's backward is twice its forward; the step's ops come in running order with the head
 * joined, and their split over 4 GPUs is asymmetric (more layers a forward stage than a backward
 * one, the seed's point).  Relative tolerance 1e-12: the same few doubles added in other orders
 * (a few ulps, 2^-52 each). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/predict_ops.h"
#include "models/sdp_models.h"
#include "tests/lib/sdp_test.h"

#define NEAR(a, b) (fabs((a) - (b)) <= 1e-12 * fabs(b))

static struct sdp_model_cfg model;

static void layers(void)
{
    struct sdp_predict_machine mc = { .gpu_flops = 1e12, .gpu_attn_flops = 1e12 };
    int B = 4, T = 256;
    double N = (double)B * T, C = model.hidden_size, I = model.intermediate_size;
    double q = (double)model.num_heads * model.head_dim,
           kv = (double)model.num_kv_heads * model.head_dim;
    double gemm = 2.0 * N * (C * q + 2.0 * C * kv + q * C + 3.0 * C * I);
    double attn = 2.0 * B * model.num_heads * (double)T * T * model.head_dim;
    double f = sdp_predict_layer_fwd_s(&model, B, T, SDP_BF16, &mc);
    double bk = sdp_predict_layer_bwd_s(&model, B, T, SDP_BF16, &mc, SDP_ACT_KEEP, 0);
    double br = sdp_predict_layer_bwd_s(&model, B, T, SDP_BF16, &mc, SDP_ACT_RECOMPUTE, 0);
    double bf = sdp_predict_layer_bwd_s(&model, B, T, SDP_BF16, &mc, SDP_ACT_KEEP, 1);
    CHECK(NEAR(f, (gemm + attn) / 1e12), "forward %.9g, hand %.9g", f, (gemm + attn) / 1e12);
    CHECK(NEAR(bk, (2 * gemm + 2.5 * attn) / 1e12), "backward (keep) %.9g", bk);
    CHECK(NEAR(br, (3 * gemm + 3.5 * attn) / 1e12), "backward (recompute) %.9g", br);
    CHECK(NEAR(bf, (gemm + 2.5 * attn) / 1e12), "backward (frozen) %.9g", bf);
    mc.elem_bps = 1e10;
    for (int a = SDP_ACT_KEEP; a <= SDP_ACT_KEEP_MLP; a++) {
        double s = sdp_predict_layer_fwd_s(&model, B, T, SDP_BF16, &mc) +
                   sdp_predict_layer_bwd_s(&model, B, T, SDP_BF16, &mc, a, 0);
        double want = sdp_predict_layer_s(&model, B, T, SDP_BF16, &mc, a);
        CHECK(NEAR(s, want), "placement %d: forward + backward %.9g, layer %.9g", a, s, want);
    }
    double hf, hb;
    sdp_predict_head_ops_s(&model, B, T, &mc, 0, &hf, &hb);
    CHECK(NEAR(hf, 2.0 * N * C * model.vocab_size / 1e12) && NEAR(hb, 2 * hf), "head %.9g + %.9g",
          hf, hb);
}

/* The step's ops for a recomputing plan, and their split. */
static void step_ops(void)
{
    struct sdp_predict_machine mc;
    sdp_predict_machine_h200(&mc);
    struct sdp_graph_conf gc = { .micro_batch = 4,
                                 .seq_len = 256,
                                 .n_micro = 4,
                                 .nranks = 4,
                                 .recompute = 1,
                                 .window = 2,
                                 .bwd_lookahead = 1 };
    struct sdp_plan p;
    if (sdp_predict_plan_from_conf(&p, &model, &gc, 16u << 20, 1))
        exit(1);
    int L = model.num_layers, n0 = 2 * (L + 2);
    struct sdp_split_op *ops = calloc((size_t)n0, sizeof(*ops));
    int n = sdp_predict_split_ops(&p, &model, 4, 256, SDP_BF16, &mc, ops);
    CHECK(n == n0, "%d ops, want %d", n, n0);
    for (int i = 0; i < n && n == n0; i++) {
        int g = i <= L + 1 ? i : n - 1 - i, bwd = i > L + 1;
        CHECK(ops[i].group == g && ops[i].bwd == bwd && ops[i].join == (i == L + 1),
              "op %d: group %d bwd %d join %d", i, ops[i].group, ops[i].bwd, ops[i].join);
        if (g >= 1 && g <= L)
            CHECK(ops[i].cost_s == (bwd ? sdp_predict_layer_bwd_s(&model, 4, 256, SDP_BF16, &mc,
                                                                  SDP_ACT_RECOMPUTE, 0)
                                        : sdp_predict_layer_fwd_s(&model, 4, 256, SDP_BF16, &mc)),
                  "op %d: cost %g", i, ops[i].cost_s);
    }
    struct sdp_split_conf c = { .ranks = 4, .n_micro = 4 };
    struct sdp_split s;
    CHECK(sdp_split_dp(n, ops, &c, &s) == 0, "split refused");
    int nf = 0, nb = 0, lf = 0, lb = 0; /* stages of forward (backward) layers only, their layers */
    for (int k = 0; k < s.nstages; k++) {
        int a = s.first[k], b = s.first[k + 1], f = 0, w = 0;
        for (int i = a; i < b; i++)
            f += !ops[i].bwd && ops[i].group >= 1 && ops[i].group <= L,
                w += ops[i].bwd && ops[i].group >= 1 && ops[i].group <= L;
        nf += f > 0 && !w, lf += w ? 0 : f, nb += w > 0 && !f, lb += f ? 0 : w;
    }
    printf("4 GPUs: %d stages, %d forward ones (%d layers), %d backward (%d layers)\n", s.nstages,
           nf, lf, nb, lb);
    CHECK(nf > 0 && nb > 0 && lf * nb > lb * nf, "no asymmetry: forward %d/%d, backward %d/%d", lf,
          nf, lb, nb);
    sdp_split_free(&s);
    free(ops);
    sdp_plan_free(&p);
}

int main(void)
{
    /* the toy Qwen3 of test_predict.c: 8 layers, C 256, I 768, 4 heads of 64, 2 KV heads, V 1000 */
    sdp_model_defaults(&model, SDP_ARCH_QWEN3);
    model.vocab_size = 1000, model.hidden_size = 256, model.intermediate_size = 768;
    model.num_layers = 8, model.num_heads = 4, model.num_kv_heads = 2, model.head_dim = 64;
    model.tie_word_embeddings = 1, model.max_position_embeddings = 4096;
    layers();
    step_ops();
    return sdp_test_finish(sdp_test_nfail);
}
