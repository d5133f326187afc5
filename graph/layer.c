/* SPDX-License-Identifier: MIT */
/* A decoder layer's forward (also its recomputation) and backward as tasks, and which layers
 * keep or recompute their activations. */
#include "config.h"

#include <string.h>

#include "graph/graph_internal.h"
#include "graph/predict.h"

/* The MLP half of layer l's forward up to the down projection: a->xmid -> a->h2 (norm), a->gu,
 * a->act; the first task with options o1, the others with o.  When a->gu is already set (kept
 * from the forward, keep-mlp) the gate/up projection is not computed again and the SwiGLU, which
 * then reads only data already there, takes options osw (gated like o1). */
static int mlp_fwd(sdp_graph_t *g, const struct sdp_task_opts *o1, const struct sdp_task_opts *o,
                   const struct sdp_task_opts *osw, int l, sdp_rt_tensor_t *W, struct layer_acts *a,
                   int N, float eps, int gu_kept, sdp_rt_tensor_t *out)
{
    struct sdp_state *st = g->st;
    TRY_RET(sdp_task_rmsnorm_fwd(o1, a->h2, a->rstd2, a->xmid, W, sdp_state_off(st, l, SDP_PT_LN2),
                                 N, g->C, eps));
    if (sdp_graph_sparse(g, l)) /* a->gu holds what the block keeps: kept, nothing more to do */
        return gu_kept ? 0 : sdp_graph_moe_fwd(g, o, l, W, a, out);
    if (!gu_kept) {
        TRY_RET(sdp_task_matmul_fwd(o, a->gu, NULL, a->h2, W, sdp_state_off(st, l, SDP_PT_GATE), N,
                                    g->C, 2 * g->I));
        TRY_RET(sdp_graph_lora_fwd(g, o, l, SDP_PT_GATE, a->gu, 2 * g->I, 0, a->h2, N));
        TRY_RET(sdp_graph_lora_fwd(g, o, l, SDP_PT_UP, a->gu, 2 * g->I, g->I, a->h2, N));
    }
    return sdp_task_swiglu_fwd(gu_kept ? osw : o, a->act, a->gu, N, g->I);
}

/* The attention tasks' workspace budget: what the plan leaves of the GPU limit, as the
 * prediction counts it (graph/predict_mem.c) */
static unsigned long long ws_budget(const sdp_graph_t *g)
{
    return sdp_predict_ws_budget(&g->plan, &g->st->cfg, g->st->work_dtype, g->c.micro_batch,
                                 g->c.seq_len, g->c.gpu_limit_bytes);
}

/* Forward of decoder layer l (group l) on x (N, C).  Fills a with every intermediate; writes the
 * layer output into out (N, C) unless out is NULL (recomputation needs the intermediates only).
 * keep (NULL: nothing) holds what the forward kept for a recomputation, taken over by a (even if
 * a temporary below cannot be made; keep may be a itself):
 * - xmid (selective recomputation, keep-mlp), the layer's mid residual x + attention: the
 *   attention's output projection is not computed again, and the MLP half, which needs only mid,
 *   is submitted first, since the backward starts there;
 * - gu with xmid (keep-mlp), the gate/up projection: the MLP half then only normalises mid and
 *   applies the SwiGLU;
 * - att and lse (keep-attn), the attention's output and log-sum-exp: the attention core is not
 *   computed again (its inputs are: the backward reads them).
 * The first task of each half, and with gu the SwiGLU, waits for the task tagged `after` (0:
 * none). */
int sdp_graph_layer_fwd(sdp_graph_t *g, int step, int mb, int l, enum sdp_phase ph,
                        sdp_rt_tensor_t *x, const struct layer_acts *keep, struct layer_acts *a,
                        sdp_rt_tensor_t *out, unsigned long long after)
{
    struct sdp_state *st = g->st;
    sdp_rt_tensor_t *W = compute_work(g, l, step, rank_of(g, mb));
    int B = g->c.micro_batch, T = g->c.seq_len, N = B * T;
    int qk = st->cfg.qk_norm;
    float eps = (float)st->cfg.rms_norm_eps;
    struct sdp_task_opts o = opts(g, step, l, mb, ph);
    const struct sdp_attention_host ah = { g->seg_host, ws_budget(g) };
    struct layer_acts k = { 0 };
    if (keep)
        k = *keep;
    sdp_rt_tensor_t *mid = k.xmid, *gu = k.gu;
    int att_kept = k.att != NULL;
    memset(a, 0, sizeof(*a));
    a->xmid = mid;
    a->gu = gu;
    a->att = k.att;
    a->lse = k.lse;
    TRY_RET(temp(&a->h1, g->act_dt, (size_t)N * g->C, "h1", mb, l));
    TRY_RET(temp(&a->rstd1, SDP_F32, (size_t)N, "rstd1", mb, l));
    TRY_RET(temp(&a->qkv, g->act_dt, (size_t)N * g->QKV, "qkv", mb, l));
    TRY_RET(temp(&a->qkv2, g->act_dt, (size_t)N * g->QKV, "qkv_rope", mb, l));
    if (qk)
        TRY_RET(temp(&a->rstdqk, SDP_F32, (size_t)N * (g->NH + g->NKV), "rstd_qk", mb, l));
    if (!att_kept) {
        TRY_RET(temp(&a->att, g->act_dt, (size_t)N * g->NH * g->HD, "att", mb, l));
        TRY_RET(temp(&a->lse, SDP_F32, (size_t)B * g->NH * T, "lse", mb, l));
    }
    if (!mid)
        TRY_RET(temp(&a->xmid, g->res_dt, (size_t)N * g->C, "xmid", mb, l));
    TRY_RET(temp(&a->h2, g->act_dt, (size_t)N * g->C, "h2", mb, l));
    TRY_RET(temp(&a->rstd2, SDP_F32, (size_t)N, "rstd2", mb, l));
    if (sdp_graph_sparse(g, l)) { /* the block's kept vector in place of gate/up and SwiGLU */
        if (!gu)
            TRY_RET(temp(&a->gu, SDP_F32, sdp_graph_moe_acts_elems(g, N), "moe", mb, l));
    } else {
        if (!gu)
            TRY_RET(temp(&a->gu, g->act_dt, (size_t)N * 2 * g->I, "gate_up", mb, l));
        TRY_RET(temp(&a->act, g->act_dt, (size_t)N * g->I, "swiglu", mb, l));
    }

    struct sdp_task_opts o1, osw;
    if (mid) {
        o1 = gated(g, o, after); /* a tag per task: each one is waited for at the step's end */
        osw = gu ? gated(g, o, after) : o;
        TRY_RET(mlp_fwd(g, &o1, &o, &osw, l, W, a, N, eps, gu != NULL, NULL));
    }
    o1 = gated(g, o, after);
    TRY_RET(sdp_task_rmsnorm_fwd(&o1, a->h1, a->rstd1, x, W, sdp_state_off(st, l, SDP_PT_LN1), N,
                                 g->C, eps));
    TRY_RET(sdp_task_matmul_fwd(&o, a->qkv, NULL, a->h1, W, sdp_state_off(st, l, SDP_PT_Q), N, g->C,
                                g->QKV));
    TRY_RET(sdp_graph_lora_fwd(g, &o, l, SDP_PT_Q, a->qkv, g->QKV, 0, a->h1, N));
    TRY_RET(sdp_graph_lora_fwd(g, &o, l, SDP_PT_K, a->qkv, g->QKV, g->NH * g->HD, a->h1, N));
    TRY_RET(
        sdp_graph_lora_fwd(g, &o, l, SDP_PT_V, a->qkv, g->QKV, (g->NH + g->NKV) * g->HD, a->h1, N));
    TRY_RET(sdp_task_qknorm_rope_fwd_seg(
        &o, a->qkv2, a->rstdqk, a->qkv, W, qk ? sdp_state_off(st, l, SDP_PT_QNORM) : (size_t)-1,
        qk ? sdp_state_off(st, l, SDP_PT_KNORM) : (size_t)-1, &g->rope,
        g->c.doc_positions ? g->seg_mb : NULL, N, T, g->NH, g->NKV, g->HD, eps));
    if (!att_kept)
        TRY_RET(sdp_task_attention_fwd_seg(&o, a->att, a->lse, a->qkv2, g->seg_mb, &ah, B, T, g->NH,
                                           g->NKV, g->HD));
    if (mid)
        return 0;
    TRY_RET(sdp_task_matmul_fwd(&o, a->xmid, x, a->att, W, sdp_state_off(st, l, SDP_PT_O), N,
                                g->NH * g->HD, g->C));
    TRY_RET(sdp_graph_lora_fwd(g, &o, l, SDP_PT_O, a->xmid, g->C, 0, a->att, N));
    TRY_RET(mlp_fwd(g, &o, &o, &o, l, W, a, N, eps, 0, out));
    if (out && !sdp_graph_sparse(g, l)) {
        TRY_RET(sdp_task_matmul_fwd(&o, out, a->xmid, a->act, W, sdp_state_off(st, l, SDP_PT_DOWN),
                                    N, g->I, g->C));
        TRY_RET(sdp_graph_lora_fwd(g, &o, l, SDP_PT_DOWN, out, g->C, 0, a->act, N));
    }
    return 0;
}

/* dres as the matmuls' backward reads it: itself, or with the fp32 residual stream its bf16 cast
 * into *lo (a temporary), as autocast casts the gradient of a bf16 matmul's output. */
static int dres_lo(sdp_graph_t *g, const struct sdp_task_opts *o, int mb, int l,
                   sdp_rt_tensor_t *dres, sdp_rt_tensor_t **lo)
{
    *lo = dres;
    if (g->res_dt == g->act_dt)
        return 0;
    TRY_RET(temp(lo, g->act_dt, sdp_rt_tensor_nelems(dres), "d_x_cast", mb, l));
    return sdp_task_cast_act(o, *lo, dres);
}

static void dres_lo_release(sdp_rt_tensor_t *lo, sdp_rt_tensor_t *dres)
{
    if (lo != dres)
        sdp_rt_tensor_release(lo);
}

/* The dense MLP's backward of layer l: *dh2 (made here) from dres; with the early MLP update the
 * chunks of its weights are packed once their last gradient is in, its tasks that write no
 * gradient are marked so, and so are (through o) the tasks after that pack. */
static int mlp_bwd(sdp_graph_t *g, struct sdp_task_opts *o, int mb, int l, sdp_rt_tensor_t *W,
                   sdp_rt_tensor_t *G, struct layer_acts *a, sdp_rt_tensor_t *dres,
                   sdp_rt_tensor_t **dh2)
{
    struct sdp_state *st = g->st;
    sdp_rt_tensor_t *dact, *dgu, *dlo;
    int N = g->c.micro_batch * g->c.seq_len, step = o->hint.step;
    size_t off_down = sdp_state_off(st, l, SDP_PT_DOWN),
           off_gate = sdp_state_off(st, l, SDP_PT_GATE);
    int c_mlp = sdp_graph_mlp_early(g, l, mb);
    struct sdp_task_opts od = *o;
    if (c_mlp > 0)
        od.hint.grad_lim = c_mlp;
    TRY_RET(dres_lo(g, &od, mb, l, dres, &dlo));
    TRY_RET(temp(&dact, g->act_dt, (size_t)N * g->I, "d_swiglu", mb, l));
    TRY_RET(sdp_task_matmul_bwd_data(&od, dact, dlo, W, off_down, N, g->I, g->C));
    if (G)
        TRY_RET(sdp_task_matmul_bwd_weight(o, G, off_down, dlo, a->act, N, g->I, g->C));
    TRY_RET(sdp_graph_lora_bwd(g, o, l, SDP_PT_DOWN, dact, dlo, g->C, 0, a->act, N));
    dres_lo_release(dlo, dres);
    TRY_RET(temp(&dgu, g->act_dt, (size_t)N * 2 * g->I, "d_gate_up", mb, l));
    TRY_RET(sdp_task_swiglu_bwd(&od, dgu, dact, a->gu, N, g->I));
    sdp_rt_tensor_release(dact);
    TRY_RET(temp(dh2, g->act_dt, (size_t)N * g->C, "d_h2", mb, l));
    TRY_RET(sdp_task_matmul_bwd_data(&od, *dh2, dgu, W, off_gate, N, g->C, 2 * g->I));
    if (G)
        TRY_RET(sdp_task_matmul_bwd_weight(o, G, off_gate, dgu, a->h2, N, g->C, 2 * g->I));
    TRY_RET(sdp_graph_lora_bwd(g, o, l, SDP_PT_GATE, *dh2, dgu, 2 * g->I, 0, a->h2, N));
    TRY_RET(sdp_graph_lora_bwd(g, o, l, SDP_PT_UP, *dh2, dgu, 2 * g->I, g->I, a->h2, N));
    sdp_rt_tensor_release(dgu);
    if (c_mlp > 0) { /* the MLP's weight gradients are final: their chunks go */
        struct sdp_task_opts op = opts(g, step, l, -1, SDP_PH_NORM);
        op.hint.chunk = c_mlp;
        TRY_RET(
            sdp_task_grad_pack_mlp(&op, G, st->groups[l].grad_ret, &g->sumsq[g->chunk0[l]], c_mlp));
        o->hint.grad_lim = c_mlp;
    }
    return 0;
}

/* Backward of decoder layer l: dres (N, C) holds d(out) on entry and d(x) on exit (updated in
 * place).  With done != NULL the last task gets a tag, stored there once it is submitted.  With
 * the early MLP update (mlp_early) the chunks of the MLP's weights are packed once their last
 * gradient is in, and the tasks after that pack are marked as writing only the chunks before. */
int sdp_graph_layer_bwd(sdp_graph_t *g, int step, int mb, int l, sdp_rt_tensor_t *x,
                        struct layer_acts *a, sdp_rt_tensor_t *dres, unsigned long long *done)
{
    struct sdp_state *st = g->st;
    sdp_rt_tensor_t *W = compute_work(g, l, step, rank_of(g, mb));
    sdp_rt_tensor_t *G = grad_of(g, l, rank_of(g, mb));
    sdp_rt_tensor_t *dh2, *datt, *dqkv2, *dqkv, *dh1, *dlo;
    /* a frozen base (LoRA): no weight gradient; the norms' go to the sink, from its start */
    sdp_rt_tensor_t *GN = G ? G : g->lora_sink;
    int B = g->c.micro_batch, T = g->c.seq_len, N = B * T;
    int qk = st->cfg.qk_norm;
    struct sdp_task_opts o = opts(g, step, l, mb, SDP_PH_BWD);
    const struct sdp_attention_host ah = { g->seg_host, ws_budget(g) };
    size_t off_o = sdp_state_off(st, l, SDP_PT_O), off_q = sdp_state_off(st, l, SDP_PT_Q);
    size_t off_ln1 = sdp_state_off(st, l, SDP_PT_LN1), off_ln2 = sdp_state_off(st, l, SDP_PT_LN2);
    size_t off_qn = qk ? sdp_state_off(st, l, SDP_PT_QNORM) : (size_t)-1;
    size_t off_kn = qk ? sdp_state_off(st, l, SDP_PT_KNORM) : (size_t)-1;
    size_t g_ln1 = G ? off_ln1 : 0, g_ln2 = G ? off_ln2 : 0;
    size_t g_qn = G || !qk ? off_qn : 0, g_kn = G || !qk ? off_kn : (size_t)g->HD;

    /* MLP (a sparse layer's block), then its norm */
    if (sdp_graph_sparse(g, l)) {
        TRY_RET(temp(&dh2, g->act_dt, (size_t)N * g->C, "d_h2", mb, l));
        TRY_RET(sdp_graph_moe_bwd(g, &o, l, W, G, a, dres, dh2));
    } else {
        TRY_RET(mlp_bwd(g, &o, mb, l, W, G, a, dres, &dh2));
    }
    TRY_RET(
        sdp_task_rmsnorm_bwd(&o, dres, 1, GN, g_ln2, dh2, a->xmid, W, off_ln2, a->rstd2, N, g->C));
    sdp_rt_tensor_release(dh2);

    /* attention */
    TRY_RET(dres_lo(g, &o, mb, l, dres, &dlo));
    TRY_RET(temp(&datt, g->act_dt, (size_t)N * g->NH * g->HD, "d_att", mb, l));
    TRY_RET(sdp_task_matmul_bwd_data(&o, datt, dlo, W, off_o, N, g->NH * g->HD, g->C));
    if (G)
        TRY_RET(sdp_task_matmul_bwd_weight(&o, G, off_o, dlo, a->att, N, g->NH * g->HD, g->C));
    TRY_RET(sdp_graph_lora_bwd(g, &o, l, SDP_PT_O, datt, dlo, g->C, 0, a->att, N));
    dres_lo_release(dlo, dres);
    TRY_RET(temp(&dqkv2, g->act_dt, (size_t)N * g->QKV, "d_qkv_rope", mb, l));
    TRY_RET(sdp_task_attention_bwd_seg(&o, dqkv2, datt, a->qkv2, a->att, a->lse, g->seg_mb, &ah, B,
                                       T, g->NH, g->NKV, g->HD));
    sdp_rt_tensor_release(datt);
    TRY_RET(temp(&dqkv, g->act_dt, (size_t)N * g->QKV, "d_qkv", mb, l));
    TRY_RET(sdp_task_qknorm_rope_bwd_seg(&o, dqkv, GN, g_qn, g_kn, dqkv2, a->qkv, W, off_qn, off_kn,
                                         a->rstdqk, &g->rope, g->c.doc_positions ? g->seg_mb : NULL,
                                         N, T, g->NH, g->NKV, g->HD));
    sdp_rt_tensor_release(dqkv2);
    TRY_RET(temp(&dh1, g->act_dt, (size_t)N * g->C, "d_h1", mb, l));
    TRY_RET(sdp_task_matmul_bwd_data(&o, dh1, dqkv, W, off_q, N, g->C, g->QKV));
    if (G)
        TRY_RET(sdp_task_matmul_bwd_weight(&o, G, off_q, dqkv, a->h1, N, g->C, g->QKV));
    TRY_RET(sdp_graph_lora_bwd(g, &o, l, SDP_PT_Q, dh1, dqkv, g->QKV, 0, a->h1, N));
    TRY_RET(sdp_graph_lora_bwd(g, &o, l, SDP_PT_K, dh1, dqkv, g->QKV, g->NH * g->HD, a->h1, N));
    TRY_RET(sdp_graph_lora_bwd(g, &o, l, SDP_PT_V, dh1, dqkv, g->QKV, (g->NH + g->NKV) * g->HD,
                               a->h1, N));
    sdp_rt_tensor_release(dqkv);
    o.tag = done ? sdp_graph_new_tag(g) : 0;
    TRY_RET(sdp_task_rmsnorm_bwd(&o, dres, 1, GN, g_ln1, dh1, x, W, off_ln1, a->rstd1, N, g->C));
    if (done)
        *done = o.tag;
    sdp_rt_tensor_release(dh1);
    return 0;
}

/* What a recomputed layer keeps of its forward's intermediates a (the rest released): selective
 * its mid residual; keep-mlp the mid residual and the gate/up projection; keep-attn the
 * attention's output and LSE; recompute nothing (its input is kept by the caller). */
void sdp_graph_keep_for_recompute(struct layer_acts *a, enum sdp_act_place act)
{
    struct layer_acts k = { 0 };
    int km = act == SDP_ACT_KEEP_MLP, ka = act == SDP_ACT_KEEP_ATTN;
    if (act == SDP_ACT_SELECTIVE || km)
        k.xmid = a->xmid, a->xmid = NULL;
    if (km)
        k.gu = a->gu, a->gu = NULL;
    if (ka) {
        k.att = a->att, a->att = NULL;
        k.lse = a->lse, a->lse = NULL;
    }
    sdp_graph_release_acts(a);
    *a = k;
}

/* Whether the backward recomputes layer l's activations (the plan's act). */
int sdp_graph_recomputed(const sdp_graph_t *g, int l)
{
    return g->plan.group[l].act != SDP_ACT_KEEP;
}

/* What layer l's backward preparations (recomputation, gradient zeroing) wait for: the end of
 * the backward of layer l + 1 + bwd_lookahead (done[L + 1]: the final norm's), or nothing. */
unsigned long long sdp_graph_bwd_gate(const sdp_graph_t *g, const unsigned long long *done, int l)
{
    int k = l + 1 + g->plan.bwd_lookahead;
    return g->plan.bwd_lookahead >= 0 && k <= g->L + 1 ? done[k] : 0;
}
