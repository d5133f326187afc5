/* SPDX-License-Identifier: MIT */
/* Per-op costs for the stage split (predict_ops.h), on predict.c's formulas: the forward's FLOPs
 * at the GEMM and attention rates, the forward's element-wise bytes (two norms, RoPE with the q/k
 * norms, SwiGLU) at elem_bps, and the backward as the rest of sdp_predict_layer_s. */
#include "config.h"

#include "graph/predict_ops.h"
#include "models/sdp_models.h"

/* The forward's attention FLOPs of one micro-batch (causal half counted, as predict.c). */
static double attn_flops(const struct sdp_model_cfg *m, int B, int T)
{
    return 2.0 * B * (double)m->num_heads * T * (double)T * m->head_dim;
}

double sdp_predict_layer_fwd_s(const struct sdp_model_cfg *m, int B, int T, enum sdp_dtype work,
                               const struct sdp_predict_machine *mc)
{
    double attn = attn_flops(m, B, T), C = m->hidden_size, I = m->intermediate_size;
    double qkv = (double)(m->num_heads + 2 * m->num_kv_heads) * m->head_dim;
    double t =
        (sdp_model_layer_fwd_flops(m, B, T) - attn) / mc->gpu_flops + attn / mc->gpu_attn_flops;
    if (mc->elem_bps > 0)
        t += (double)B * T * (work == SDP_F32 ? 4 : 2) * (4 * C + 2 * qkv + 3 * I) / mc->elem_bps;
    return t;
}

double sdp_predict_layer_bwd_s(const struct sdp_model_cfg *m, int B, int T, enum sdp_dtype work,
                               const struct sdp_predict_machine *mc, enum sdp_act_place act,
                               int frozen)
{
    double t =
        sdp_predict_layer_s(m, B, T, work, mc, act) - sdp_predict_layer_fwd_s(m, B, T, work, mc);
    if (frozen) /* no weight gradient: one GEMM pass of the forward's fewer (predict.c's rule) */
        t -= (sdp_model_layer_fwd_flops(m, B, T) - attn_flops(m, B, T)) / mc->gpu_flops;
    return t;
}

void sdp_predict_head_ops_s(const struct sdp_model_cfg *m, int B, int T,
                            const struct sdp_predict_machine *mc, int frozen, double *fwd_s,
                            double *bwd_s)
{
    double pass = 2.0 * (double)B * T * m->hidden_size * m->vocab_size /
                  (mc->head_flops > 0 ? mc->head_flops : mc->gpu_flops);
    *fwd_s = pass, *bwd_s = frozen ? pass : 2.0 * pass;
}

/* The embedding: a row gather forward (read and write C elements a token), a scatter-add into its
 * fp32 gradient backward (read dy, read and write the gradient). */
static double embed_s(const struct sdp_model_cfg *m, int B, int T, int es, int bwd,
                      const struct sdp_predict_machine *mc)
{
    double bytes = (double)B * T * m->hidden_size * (bwd ? es + 8 : 2 * es);
    return mc->elem_bps > 0 ? bytes / mc->elem_bps : 0.0;
}

int sdp_predict_split_ops(const struct sdp_plan *p, const struct sdp_model_cfg *m, int B, int T,
                          enum sdp_dtype work, const struct sdp_predict_machine *mc,
                          struct sdp_split_op *ops)
{
    int L = p->nlayers, H = SDP_PLAN_HEAD(p), frozen = p->lora.rank > 0,
        es = work == SDP_F32 ? 4 : 2;
    int nops = 2 * (H + 1); /* ops[g]: forward of g; ops[nops - 1 - g]: its backward */
    for (int g = 0; g <= H; g++) {
        ops[g] = (struct sdp_split_op){ .group = g, .join = g == H };
        ops[nops - 1 - g] = (struct sdp_split_op){ .group = g, .bwd = 1 };
    }
    for (int g = 1; g <= L; g++) {
        ops[g].cost_s = sdp_predict_layer_fwd_s(m, B, T, work, mc);
        ops[nops - 1 - g].cost_s =
            sdp_predict_layer_bwd_s(m, B, T, work, mc, p->group[g].act, frozen);
    }
    ops[0].cost_s = embed_s(m, B, T, es, 0, mc);
    ops[nops - 1].cost_s = frozen ? 0.0 : embed_s(m, B, T, es, 1, mc);
    sdp_predict_head_ops_s(m, B, T, mc, frozen, &ops[H].cost_s, &ops[H + 1].cost_s);
    return nops;
}
