/* SPDX-License-Identifier: MIT */
/* The training step graph (see step.h).  Builds tasks only; never touches StarPU directly.  Tensors
 * that live for one micro-batch are temporaries released right after their last use is submitted,
 * so StarPU frees (or reuses) their memory as soon as the tasks are done. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/sdp_tasks.h"
#include "graph/step.h"
#include "base/env.h"
#include "base/sdp_log.h"

struct sdp_graph {
    struct sdp_state *st;
    struct sdp_graph_conf c;
    sdp_rt_tensor_t **ids, **targets; /* [2][n_micro]: alternate sets per step */
    sdp_rt_tensor_t **loss;           /* [n_micro] (2) f64 */
    sdp_rt_tensor_t **sumsq;          /* [nchunks_total] (1) f64 */
    sdp_rt_tensor_t *clip;            /* (2) f64: norm, coefficient */
    int R, nm_rank;                   /* ranks, micro-batches per rank */
    sdp_rt_tensor_t **rgrad;          /* [(R - 1) * ngroups]: gradients of ranks 1..R-1 */
    sdp_rt_tensor_t **work2;          /* [ngroups]: second working copies (param_delay 1) */
    unsigned char *route_gpu;         /* [ngroups]: 1 where the ranks' gradients meet on a GPU */
    sdp_rt_tensor_t **rwork;          /* [R * ngroups]: each rank's replica (sharded route) */
    int *chunk0;                      /* [ngroups]: index of the group's first chunk in the model */
    int work2_valid, last_update;     /* work2 holds the masters; step of the latest update */
    int updating;                     /* the step being submitted updates (sdp_graph_step) */
    unsigned long long *tags;         /* the ordering tags of the step in flight (bwd_lookahead) */
    int ntags, cap_tags;
    struct sdp_rope_params rope;
    /* shorthands */
    int C, I, NH, NKV, HD, QKV, V, L;
    int head_group, lm_group;
    enum sdp_dtype act_dt; /* activations: the working copy's dtype (bf16 or f32) */
    size_t lm_off, norm_off, embed_off;
    unsigned char *row_mark;     /* [V] (tied embedding): 1 for the rows the step's tokens select */
    struct rows_put {            /* (early_embed, group 0 staged) the stages of the step's rows */
        sdp_rt_tensor_t **stage; /* [group 0's chunks], n of them filled */
        struct sdp_adamw_segment **segs;
        int *nsegs, n;
        size_t *off;
    } rput;
    sdp_rt_tensor_t **rows_grad; /* [group 0's chunks] (early_embed) the bf16 gradient of the rows
                                    of the step's tokens, packed (grad_pack_rows), from the pack
                                    to the chunk's update; NULL: SDP_ROWS_PACK=off */
    sdp_rt_tensor_t **x0;        /* [n_micro] (lookup_host_create) each micro-batch's
                                    embeddings, on the host, partitioned in whole sequences */
    int32_t *next_ids;           /* [n_micro * B * T] (x0) the next step's ids, when told */
    int32_t *looked_ids;         /* [n_micro * B * T] (x0) the ids of the lookups submitted ahead */
    int next_told;               /* sdp_graph_set_next gave next_ids for the next step */
    unsigned char *next_mark;    /* [V] (x0) 1 for the rows next_ids select */
    int defer;                   /* the step being submitted defers its late rows (defer_rows) */
    int looked_up;               /* the step whose lookups the previous step submitted, or -1 */
    int ndeferred;               /* steps that deferred their late rows */
    double lr;                   /* the learning rate of the step being submitted */
    int gpu_writeback;           /* SDP_GPU_UPDATE_WRITEBACK=1 (update_chunk_gpu) */
};

/* Activations of one decoder layer for one micro-batch. */
struct layer_acts {
    sdp_rt_tensor_t *h1, *rstd1, *qkv, *qkv2, *rstdqk, *att, *lse, *xmid, *h2, *rstd2, *gu, *act;
};

#define TRY_RET(expr)                                                                              \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* The same inside a function that cleans up through its fail: label (rc in scope). */
#define TRY_GOTO(expr)                                                                             \
    do {                                                                                           \
        if ((rc = (expr)) != 0)                                                                    \
            goto fail;                                                                             \
    } while (0)

static int temp(sdp_rt_tensor_t **t, enum sdp_dtype dt, size_t n, const char *what, int mb,
                int layer)
{
    char name[64];
    snprintf(name, sizeof(name), "%s.mb%d.l%d", what, mb, layer);
    return sdp_rt_tensor_temp(t, dt, n, name);
}

/* The rank that computes micro-batch mb (shared work, mb < 0, belongs to rank 0). */
static int rank_of(const sdp_graph_t *g, int mb)
{
    return mb < 0 ? 0 : mb / g->nm_rank;
}

/* The gradient of group gi that rank r accumulates into (rank 0's is the state's). */
static sdp_rt_tensor_t *grad_of(sdp_graph_t *g, int gi, int r)
{
    return r == 0 ? g->st->groups[gi].grad : g->rgrad[(size_t)(r - 1) * g->st->ngroups + gi];
}

/* The working copy of group gi that step `step` computes with.  Synchronous (param_delay 0): the
 * one copy, which the update of step - 1 rewrote.  param_delay 1: step s reads buffer s % 2, which
 * the update of step s - 2 wrote, while the update of step s - 1 writes the other one (the update
 * of step s writes buffer s % 2 once step s's compute has read it).  step < 0: evaluation. */
static sdp_rt_tensor_t *work_of(const sdp_graph_t *g, int gi, int step)
{
    if (step < 0) /* evaluation: the copy the latest update wrote */
        step = g->last_update;
    if (!g->c.param_delay || step < 0)
        return g->st->groups[gi].work;
    return step % 2 == 0 ? g->st->groups[gi].work : g->work2[gi];
}

/* The working copy rank r's compute reads at `step`: its own replica on the sharded route,
 * otherwise the shared one (StarPU replicates it to the rank's GPU). */
static sdp_rt_tensor_t *compute_work(const sdp_graph_t *g, int gi, int step, int r)
{
    if (g->rwork && step >= 0)
        return g->rwork[(size_t)r * g->st->ngroups + gi];
    return work_of(g, gi, step);
}

/* The parameter version (updates applied) the compute of `step` reads. */
static int version_read(const sdp_graph_t *g, int step)
{
    return g->c.param_delay && step > 0 ? step - 1 : step;
}

static struct sdp_task_opts opts(const sdp_graph_t *g, int step, int group, int mb,
                                 enum sdp_phase ph)
{
    struct sdp_task_opts o = { 0 };
    o.hint.rank = rank_of(g, mb);
    o.version = ph == SDP_PH_UPDATE ? step + 1 : version_read(g, step);
    o.hint.step = step;
    o.hint.group = group;
    o.hint.chunk = -1;
    o.hint.mb = mb;
    o.hint.phase = ph;
    return o;
}

/* A tag for an ordering edge of this step; forgotten by forget_tags() once the step has ended.
 * 0 when the list cannot grow (the edge is then left out: only memory use depends on it). */
static unsigned long long new_tag(sdp_graph_t *g)
{
    if (g->ntags == g->cap_tags) {
        int cap = g->cap_tags ? 2 * g->cap_tags : 256;
        unsigned long long *t = realloc(g->tags, (size_t)cap * sizeof(*t));
        if (!t)
            return 0;
        g->tags = t;
        g->cap_tags = cap;
    }
    return g->tags[g->ntags++] = sdp_task_tag_new();
}

static void forget_tags(sdp_graph_t *g)
{
    for (int i = 0; i < g->ntags; i++)
        sdp_task_tag_forget(g->tags[i]);
    g->ntags = 0;
}

/* Options o made to wait for the task tagged `after` (no change when after is 0). */
static struct sdp_task_opts gated(sdp_graph_t *g, struct sdp_task_opts o, unsigned long long after)
{
    if (after) {
        o.tag = new_tag(g);
        o.after = o.tag ? after : 0;
    }
    return o;
}

static void release_acts(struct layer_acts *a)
{
    sdp_rt_tensor_t **all[] = { &a->h1,  &a->rstd1, &a->qkv, &a->qkv2,  &a->rstdqk, &a->att,
                                &a->lse, &a->xmid,  &a->h2,  &a->rstd2, &a->gu,     &a->act };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sdp_rt_tensor_release(*all[i]);
        *all[i] = NULL;
    }
}

/* The MLP half of layer l's forward up to the down projection: a->xmid -> a->h2 (norm), a->gu,
 * a->act; the first task with options o1, the others with o.  When a->gu is already set (kept
 * from the forward, keeps_mlp) the gate/up projection is not computed again and the SwiGLU, which
 * then reads only data already there, takes options osw (gated like o1). */
static int mlp_fwd(sdp_graph_t *g, const struct sdp_task_opts *o1, const struct sdp_task_opts *o,
                   const struct sdp_task_opts *osw, int l, sdp_rt_tensor_t *W, struct layer_acts *a,
                   int N, float eps, int gu_kept)
{
    struct sdp_state *st = g->st;
    TRY_RET(sdp_task_rmsnorm_fwd(o1, a->h2, a->rstd2, a->xmid, W, sdp_state_off(st, l, SDP_PT_LN2),
                                 N, g->C, eps));
    if (!gu_kept)
        TRY_RET(sdp_task_matmul_fwd(o, a->gu, NULL, a->h2, W, sdp_state_off(st, l, SDP_PT_GATE), N,
                                    g->C, 2 * g->I));
    return sdp_task_swiglu_fwd(gu_kept ? osw : o, a->act, a->gu, N, g->I);
}

/* Forward of decoder layer l (group l) on x (N, C).  Fills a with every intermediate; writes the
 * layer output into out (N, C) unless out is NULL (recomputation needs the intermediates only).
 * mid, when given (selective recomputation, keeps_mlp), is the layer's mid residual x + attention
 * kept from the forward: a takes it over as its xmid, the attention's output projection is not
 * computed again, and the MLP half, which needs only mid, is submitted first, since the backward
 * starts there.  gu, when given with mid (keeps_mlp), is the gate/up projection kept from the
 * forward, taken over as a->gu: the MLP half then only normalises mid and applies the SwiGLU.  The
 * first task of each half, and with gu the SwiGLU, waits for the task tagged `after` (0: none). */
static int layer_fwd(sdp_graph_t *g, int step, int mb, int l, enum sdp_phase ph, sdp_rt_tensor_t *x,
                     sdp_rt_tensor_t *mid, sdp_rt_tensor_t *gu, struct layer_acts *a,
                     sdp_rt_tensor_t *out, unsigned long long after)
{
    struct sdp_state *st = g->st;
    sdp_rt_tensor_t *W = compute_work(g, l, step, rank_of(g, mb));
    int B = g->c.micro_batch, T = g->c.seq_len, N = B * T;
    int qk = st->cfg.qk_norm;
    float eps = (float)st->cfg.rms_norm_eps;
    struct sdp_task_opts o = opts(g, step, l, mb, ph);
    memset(a, 0, sizeof(*a));
    a->xmid = mid; /* taken over even if a temporary below cannot be made */
    a->gu = gu;
    TRY_RET(temp(&a->h1, g->act_dt, (size_t)N * g->C, "h1", mb, l));
    TRY_RET(temp(&a->rstd1, SDP_F32, (size_t)N, "rstd1", mb, l));
    TRY_RET(temp(&a->qkv, g->act_dt, (size_t)N * g->QKV, "qkv", mb, l));
    TRY_RET(temp(&a->qkv2, g->act_dt, (size_t)N * g->QKV, "qkv_rope", mb, l));
    if (qk)
        TRY_RET(temp(&a->rstdqk, SDP_F32, (size_t)N * (g->NH + g->NKV), "rstd_qk", mb, l));
    TRY_RET(temp(&a->att, g->act_dt, (size_t)N * g->NH * g->HD, "att", mb, l));
    TRY_RET(temp(&a->lse, SDP_F32, (size_t)B * g->NH * T, "lse", mb, l));
    if (!mid)
        TRY_RET(temp(&a->xmid, g->act_dt, (size_t)N * g->C, "xmid", mb, l));
    TRY_RET(temp(&a->h2, g->act_dt, (size_t)N * g->C, "h2", mb, l));
    TRY_RET(temp(&a->rstd2, SDP_F32, (size_t)N, "rstd2", mb, l));
    if (!gu)
        TRY_RET(temp(&a->gu, g->act_dt, (size_t)N * 2 * g->I, "gate_up", mb, l));
    TRY_RET(temp(&a->act, g->act_dt, (size_t)N * g->I, "swiglu", mb, l));

    struct sdp_task_opts o1, osw;
    if (mid) {
        o1 = gated(g, o, after); /* a tag per task: each one is waited for at the step's end */
        osw = gu ? gated(g, o, after) : o;
        TRY_RET(mlp_fwd(g, &o1, &o, &osw, l, W, a, N, eps, gu != NULL));
    }
    o1 = gated(g, o, after);
    TRY_RET(sdp_task_rmsnorm_fwd(&o1, a->h1, a->rstd1, x, W, sdp_state_off(st, l, SDP_PT_LN1), N,
                                 g->C, eps));
    TRY_RET(sdp_task_matmul_fwd(&o, a->qkv, NULL, a->h1, W, sdp_state_off(st, l, SDP_PT_Q), N, g->C,
                                g->QKV));
    TRY_RET(sdp_task_qknorm_rope_fwd(&o, a->qkv2, a->rstdqk, a->qkv, W,
                                     qk ? sdp_state_off(st, l, SDP_PT_QNORM) : (size_t)-1,
                                     qk ? sdp_state_off(st, l, SDP_PT_KNORM) : (size_t)-1, &g->rope,
                                     N, T, g->NH, g->NKV, g->HD, eps));
    TRY_RET(sdp_task_attention_fwd(&o, a->att, a->lse, a->qkv2, B, T, g->NH, g->NKV, g->HD));
    if (mid)
        return 0;
    TRY_RET(sdp_task_matmul_fwd(&o, a->xmid, x, a->att, W, sdp_state_off(st, l, SDP_PT_O), N,
                                g->NH * g->HD, g->C));
    TRY_RET(mlp_fwd(g, &o, &o, &o, l, W, a, N, eps, 0));
    if (out)
        TRY_RET(sdp_task_matmul_fwd(&o, out, a->xmid, a->act, W, sdp_state_off(st, l, SDP_PT_DOWN),
                                    N, g->I, g->C));
    return 0;
}

static int mlp_early(const sdp_graph_t *g, int gi, int mb);
static int gpu_updates(const sdp_graph_t *g, int gi);

/* Backward of decoder layer l: dres (N, C) holds d(out) on entry and d(x) on exit (updated in
 * place).  With done != NULL the last task gets a tag, stored there once it is submitted.  With
 * the early MLP update (mlp_early) the chunks of the MLP's weights are packed once their last
 * gradient is in, and the tasks after that pack are marked as writing only the chunks before. */
static int layer_bwd(sdp_graph_t *g, int step, int mb, int l, sdp_rt_tensor_t *x,
                     struct layer_acts *a, sdp_rt_tensor_t *dres, unsigned long long *done)
{
    struct sdp_state *st = g->st;
    sdp_rt_tensor_t *W = compute_work(g, l, step, rank_of(g, mb));
    sdp_rt_tensor_t *G = grad_of(g, l, rank_of(g, mb));
    sdp_rt_tensor_t *dact, *dgu, *dh2, *datt, *dqkv2, *dqkv, *dh1;
    int B = g->c.micro_batch, T = g->c.seq_len, N = B * T;
    int qk = st->cfg.qk_norm;
    struct sdp_task_opts o = opts(g, step, l, mb, SDP_PH_BWD);
    size_t off_down = sdp_state_off(st, l, SDP_PT_DOWN),
           off_gate = sdp_state_off(st, l, SDP_PT_GATE);
    size_t off_o = sdp_state_off(st, l, SDP_PT_O), off_q = sdp_state_off(st, l, SDP_PT_Q);
    size_t off_ln1 = sdp_state_off(st, l, SDP_PT_LN1), off_ln2 = sdp_state_off(st, l, SDP_PT_LN2);
    size_t off_qn = qk ? sdp_state_off(st, l, SDP_PT_QNORM) : (size_t)-1;
    size_t off_kn = qk ? sdp_state_off(st, l, SDP_PT_KNORM) : (size_t)-1;

    /* MLP; with the early MLP update its tasks that write no gradient are marked so (od) */
    int c_mlp = mlp_early(g, l, mb);
    struct sdp_task_opts od = o;
    if (c_mlp > 0)
        od.hint.grad_lim = c_mlp;
    TRY_RET(temp(&dact, g->act_dt, (size_t)N * g->I, "d_swiglu", mb, l));
    TRY_RET(sdp_task_matmul_bwd_data(&od, dact, dres, W, off_down, N, g->I, g->C));
    TRY_RET(sdp_task_matmul_bwd_weight(&o, G, off_down, dres, a->act, N, g->I, g->C));
    TRY_RET(temp(&dgu, g->act_dt, (size_t)N * 2 * g->I, "d_gate_up", mb, l));
    TRY_RET(sdp_task_swiglu_bwd(&od, dgu, dact, a->gu, N, g->I));
    sdp_rt_tensor_release(dact);
    TRY_RET(temp(&dh2, g->act_dt, (size_t)N * g->C, "d_h2", mb, l));
    TRY_RET(sdp_task_matmul_bwd_data(&od, dh2, dgu, W, off_gate, N, g->C, 2 * g->I));
    TRY_RET(sdp_task_matmul_bwd_weight(&o, G, off_gate, dgu, a->h2, N, g->C, 2 * g->I));
    sdp_rt_tensor_release(dgu);
    if (c_mlp > 0) { /* the MLP's weight gradients are final: their chunks go */
        struct sdp_task_opts op = opts(g, step, l, -1, SDP_PH_NORM);
        op.hint.chunk = c_mlp;
        TRY_RET(
            sdp_task_grad_pack_mlp(&op, G, st->groups[l].grad_ret, &g->sumsq[g->chunk0[l]], c_mlp));
        o.hint.grad_lim = c_mlp;
    }
    TRY_RET(
        sdp_task_rmsnorm_bwd(&o, dres, 1, G, off_ln2, dh2, a->xmid, W, off_ln2, a->rstd2, N, g->C));
    sdp_rt_tensor_release(dh2);

    /* attention */
    TRY_RET(temp(&datt, g->act_dt, (size_t)N * g->NH * g->HD, "d_att", mb, l));
    TRY_RET(sdp_task_matmul_bwd_data(&o, datt, dres, W, off_o, N, g->NH * g->HD, g->C));
    TRY_RET(sdp_task_matmul_bwd_weight(&o, G, off_o, dres, a->att, N, g->NH * g->HD, g->C));
    TRY_RET(temp(&dqkv2, g->act_dt, (size_t)N * g->QKV, "d_qkv_rope", mb, l));
    TRY_RET(sdp_task_attention_bwd(&o, dqkv2, datt, a->qkv2, a->att, a->lse, B, T, g->NH, g->NKV,
                                   g->HD));
    sdp_rt_tensor_release(datt);
    TRY_RET(temp(&dqkv, g->act_dt, (size_t)N * g->QKV, "d_qkv", mb, l));
    TRY_RET(sdp_task_qknorm_rope_bwd(&o, dqkv, G, off_qn, off_kn, dqkv2, a->qkv, W, off_qn, off_kn,
                                     a->rstdqk, &g->rope, N, T, g->NH, g->NKV, g->HD));
    sdp_rt_tensor_release(dqkv2);
    TRY_RET(temp(&dh1, g->act_dt, (size_t)N * g->C, "d_h1", mb, l));
    TRY_RET(sdp_task_matmul_bwd_data(&o, dh1, dqkv, W, off_q, N, g->C, g->QKV));
    TRY_RET(sdp_task_matmul_bwd_weight(&o, G, off_q, dqkv, a->h1, N, g->C, g->QKV));
    sdp_rt_tensor_release(dqkv);
    o.tag = done ? new_tag(g) : 0;
    TRY_RET(sdp_task_rmsnorm_bwd(&o, dres, 1, G, off_ln1, dh1, x, W, off_ln1, a->rstd1, N, g->C));
    if (done)
        *done = o.tag;
    sdp_rt_tensor_release(dh1);
    return 0;
}

/* The rank that receives chunk c of group gi from the host on the sharded route: chunks are dealt
 * to the ranks in turn over the whole model, so every rank gets P/R within a chunk. */
static int owner_of(const sdp_graph_t *g, int gi, int c)
{
    return (g->chunk0[gi] + c) % g->R;
}

/* One rank: a param_fetch of group gi's working copy, ordered just ahead of the group's first
 * compute task of phase ph (micro-batch -1), where the compute runs.  It is ready as soon as the
 * copy is written, so the policy's prefetch window moves the weights while earlier groups still
 * compute; the backward's (after a bounded window let the weights go) waits for `after` like the
 * layer's recomputation. */
static int fetch(sdp_graph_t *g, int step, int gi, enum sdp_phase ph, unsigned long long after)
{
    struct sdp_task_opts o = gated(g, opts(g, step, gi, -1, ph), after);
    return sdp_task_param_fetch(&o, work_of(g, gi, step));
}

/* Sharded route: before the first forward of the step uses group gi (micro-batch 0), chunk c goes
 * from the host's working copy to its owner rank (owner_of), then from the owner to every other
 * rank: one NCCL broadcast when NCCL is set up for the ranks, else a copy on each receiving rank's
 * worker, for which StarPU moves the source. */
static int dispatch(sdp_graph_t *g, int step, int mb, int gi)
{
    sdp_rt_tensor_t *src = work_of(g, gi, step);
    int nchunks = g->st->groups[gi].nchunks;
    if (mb != 0)
        return 0;
    if (!g->rwork) /* one rank: the compute reads the working copy itself; bring it early */
        return fetch(g, step, gi, SDP_PH_FWD, 0);
    for (int c = 0; c < nchunks; c++) {
        int owner = owner_of(g, gi, c);
        sdp_rt_tensor_t *own = sdp_rt_tensor_part(compute_work(g, gi, step, owner), c);
        struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
        o.hint.chunk = c;
        o.hint.rank = owner;
        o.on_rank = 1;
        TRY_RET(sdp_task_param_copy(&o, own, sdp_rt_tensor_part(src, c)));
        /* the owner's GPU copy of the host chunk is not read again: let it go first */
        sdp_rt_tensor_wont_use(sdp_rt_tensor_part(src, c));
        if (sdp_tasks_nccl_ranks() == g->R) { /* one NCCL broadcast from the owner */
            sdp_rt_tensor_t *reps[SDP_MAX_RANKS];
            for (int r = 0; r < g->R; r++)
                reps[r] = sdp_rt_tensor_part(compute_work(g, gi, step, r), c);
            o.hint.rank = owner;
            TRY_RET(sdp_task_param_bcast_nccl(&o, reps, g->R, owner));
            continue;
        }
        for (int r = 0; r < g->R; r++) {
            if (r == owner)
                continue;
            o.hint.rank = r;
            TRY_RET(
                sdp_task_param_copy(&o, sdp_rt_tensor_part(compute_work(g, gi, step, r), c), own));
        }
    }
    return 0;
}

/* Clear group gi's gradient accumulator of rank r just before its first writer of the step (the
 * rank's first micro-batch), so a GPU holds a layer's gradient only from that layer's backward to
 * its return, instead of every group's from the start of the step. */
static int zero_grad(sdp_graph_t *g, int step, int mb, int gi, unsigned long long after)
{
    struct sdp_task_opts o;
    if (mb % g->nm_rank != 0)
        return 0;
    o = opts(g, step, gi, mb, SDP_PH_BWD);
    o.hint.mb = -1;
    o = gated(g, o, after);
    return sdp_task_zero(&o, grad_of(g, gi, rank_of(g, mb)));
}

/* The squared norms of group gi's gradient chunks, into sumsq[chunk0[gi] + c].  With one rank they
 * are submitted as soon as the group's gradient is final (after its backward in the last
 * micro-batch), before the window lets the gradient go; with more ranks they follow the reduction
 * (optimizer()).  Where the gradient is on a GPU (one rank with the norms there, or the GPU route's
 * sum on rank 0), one task reads the whole gradient where it is: a chunk's own task would make
 * StarPU split the vector on the host first, then bring each chunk back up.  On the host, one task
 * per chunk reads the chunks AdamW reads, in parallel. */
static int norms(sdp_graph_t *g, int step, int gi)
{
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_NORM);
    if ((g->R == 1 && sdp_tasks_norms_on_gpu()) || (g->R > 1 && g->route_gpu[gi])) {
        o.on_rank = g->R > 1; /* rank 0's worker, where the route summed */
        return sdp_task_grad_sumsq(&o, g->st->groups[gi].grad, &g->sumsq[g->chunk0[gi]]);
    }
    for (int c = 0; c < g->st->groups[gi].nchunks; c++) {
        o.hint.chunk = c;
        TRY_RET(sdp_task_sumsq(&o, g->sumsq[g->chunk0[gi] + c],
                               sdp_rt_tensor_part(g->st->groups[gi].grad, c)));
    }
    return 0;
}

/* Whether group gi's gradient returns in bf16 this step (it is packed only when the step
 * updates: a step without update leaves the fp32 accumulators in place). */
static int packs(const sdp_graph_t *g, int gi)
{
    return g->st->groups[gi].grad_ret && g->updating;
}

/* The first chunk of layer group gi that holds only MLP weights (gate, up, down, the group's last
 * tensors), or -1 when no chunk does or they are not the group's tail. */
static int mlp_chunk0(const sdp_graph_t *g, int gi)
{
    const struct sdp_group_state *gs = &g->st->groups[gi];
    size_t tail = (size_t)-1, end = 0;
    for (int i = 0; i < gs->ntensors; i++) {
        const struct sdp_param_desc *d = &gs->tensors[i];
        if (d->kind == SDP_PT_GATE || d->kind == SDP_PT_UP || d->kind == SDP_PT_DOWN)
            tail = d->offset < tail ? d->offset : tail;
    }
    if (tail == (size_t)-1)
        return -1;
    for (int i = 0; i < gs->ntensors; i++) {
        const struct sdp_param_desc *d = &gs->tensors[i];
        if (d->kind != SDP_PT_GATE && d->kind != SDP_PT_UP && d->kind != SDP_PT_DOWN) {
            size_t e = d->offset + (size_t)d->rows * d->cols;
            end = e > end ? e : end;
        }
    }
    if (end > tail)
        return -1;
    for (int c = 1; c < gs->nchunks; c++)
        if (sdp_rt_tensor_part_offset(gs->grad, c) >= tail)
            return c;
    return -1;
}

/* The early MLP update: with one rank, the bf16 return, no clipping and a step that updates, the
 * gradient of a layer's MLP weights (the layer's last tensors) is final once the MLP's backward of
 * the step's last micro-batch has run, while the attention's backward still adds to the chunks
 * before them.  The chunks that hold only MLP weights are then packed (grad_pack_mlp) and their
 * AdamW may start; each writes a stage, whose put into the working copy the compute reads waits
 * until the layer's backward has read that copy.  The layer's other chunks are packed after its
 * backward.  With the working copies off the host (sdp_state.work_staged) every update writes a
 * stage anyway, and it applies to every layer.  With them on the host an update writes its chunk
 * of the copy in place, which StarPU lets it do only once every task reading the group's copy has
 * run; there it applies, when asked for (mlp_early 1), to layer 1 alone, whose update ends the
 * step (the next forward waits for it), and its MLP chunks take a stage and a stage_put each, a
 * copy of the chunk that the other layers, updated while the backward goes on, would pay for
 * nothing.  Layer 1's MLP chunks, 18 of qwen3-4b's 25, then update on the CPU while the GPU still
 * runs the attention's backward and the embedding's, if the CPU has the time; at qwen3-4b/32 on
 * two H200 machines it gained nothing (17,710 and 18,018 tokens/s against 17,836 and 18,092: the
 * embedding's side bounds the step's end too; bench/results/2026-12-03-h200-mlp-early.md), so it
 * is not the default there.
 * Returns the first such chunk of group gi for micro-batch mb, or -1 where it does not apply. */
static int mlp_early(const sdp_graph_t *g, int gi, int mb)
{
    if (g->R != 1 || mb != g->c.n_micro - 1 || g->c.mlp_early < 0 || gi < 1 || gi > g->L ||
        !packs(g, gi) || g->c.max_grad_norm > 0 || g->c.skip_nonfinite ||
        (!g->st->groups[gi].staged && (gi != 1 || g->c.mlp_early < 1)) || gpu_updates(g, gi))
        return -1;
    return mlp_chunk0(g, gi);
}

/* The update of a layer on the GPU (train.gpu_update): with one rank, compute on a GPU, the bf16
 * return and the working copies on the host, the AdamW of layers 1 .. gpu_update runs on the GPU
 * (codelets/cuda/adamw.cu, the host's bits) instead of the host's cores.  Their gradients are the
 * last of the backward, so on the host their updates are what the next forward waits for after
 * it (qwen3-4b/32 on an H200: layer 1's about 260-300 ms of core time, 29-39 ms per CPU worker
 * left with the embedding's rows when the embedding's backward ends,
 * bench/results/2026-12-03-h200-embed-rows.md).  On the GPU the packed gradient does not cross
 * PCIe; the fp32 master and moments do, the first time, and then stay where StarPU keeps them
 * while it has the memory (12 bytes a parameter: 1.2 GB a layer of qwen3-4b), coming back to the
 * host when it needs the room or when the host reads them (a checkpoint, the end of the run).
 * Each updated chunk goes into a stage on the GPU, and a param_put copies it into the working
 * copy there, so the next forward's fetch finds it on the GPU: an update of the chunk in place
 * would gather the group's copy on the host first (its partition plan's home).  Measured, it has
 * not made a step faster yet (bench/results/2026-12-03-h200-gpu-update.md): under qwen3-4b/32's
 * 23 GiB limit the state crowds the GPU (the backward's first matmuls and the last packs wait for
 * room); without a limit layer 1's update ends 7 ms after the embedding's backward, but other
 * packs wait for their data and the step stays as long.  Hence 0 by default. */
static int gpu_update_applies(const sdp_graph_t *g)
{
    /* every layer group returns bf16 or none does, and is staged or not like the others */
    return g->R == 1 && sdp_tasks_compute_on_gpu() && g->L >= 1 && g->st->groups[1].grad_ret &&
           !g->st->groups[1].staged;
}

static int gpu_updates(const sdp_graph_t *g, int gi)
{
    return gi >= 1 && gi <= g->c.gpu_update && gi <= g->L && g->updating && gpu_update_applies(g);
}

static int early_embed(const sdp_graph_t *g);
static int chunk_segs(const sdp_graph_t *g, int gi, int c, int rows,
                      struct sdp_adamw_segment **out);
static int packed_segs(const sdp_graph_t *g, int c, struct sdp_adamw_segment **out, size_t *first);

/* The length of a packed buffer of `covered` elements of a chunk of n (update_chunk, pack_rows):
 * rounded up to 256 K elements while that stays below n, so that the packed gradients and stages
 * of every step come in a few sizes that StarPU's cache of freed buffers hands out again.  With a
 * length of its own each step (each a new allocation, the likely cause), the CPU workers at
 * qwen3-4b/32's step boundary sat idle 10-20 ms a step, and with these lengths mostly not
 * (bench/results/2026-12-03-h200-embed-rows.md). */
static size_t packed_len(size_t covered, size_t n)
{
    size_t q = (size_t)1 << 18, len = (covered + q - 1) / q * q;
    return len < n ? len : covered;
}

/* The tied embedding's final pack after its early update (early_embed): the norms of every chunk,
 * and the bf16 gradient of the rows of the step's tokens alone, packed, into rows_grad, which the
 * updates of those rows read; only they cross PCIe then (for qwen3-4b at 32 K uniform random
 * tokens about 29.5 K of 151,936 rows are expected, about 150 MB, instead of the group's 778 MB).
 */
static int pack_rows(sdp_graph_t *g, int step)
{
    struct sdp_group_state *gs = &g->st->groups[0];
    struct sdp_task_opts o = opts(g, step, 0, -1, SDP_PH_NORM);
    int nc = gs->nchunks, rc = 0;
    struct sdp_adamw_segment **segs = calloc((size_t)nc, sizeof(*segs));
    int *nsegs = calloc((size_t)nc, sizeof(*nsegs));
    if (!segs || !nsegs)
        rc = sdp_err(-ENOMEM, "segments of %d chunks", nc);
    for (int c = 0; c < nc && !rc; c++) {
        size_t covered = 0;
        char name[64];
        nsegs[c] = packed_segs(g, c, &segs[c], NULL);
        if (nsegs[c] < 0) {
            rc = sdp_err(nsegs[c], "AdamW segments of group 0, chunk %d", c);
            nsegs[c] = 0;
            break;
        }
        for (int k = 0; k < nsegs[c]; k++)
            covered += segs[c][k].nelems;
        snprintf(name, sizeof(name), "g0.rows_grad.%d", c);
        if (nsegs[c] > 0)
            rc = sdp_rt_tensor_temp(
                &g->rows_grad[c], SDP_BF16,
                packed_len(covered, sdp_rt_tensor_nelems(sdp_rt_tensor_part(gs->master, c))), name);
    }
    if (!rc)
        rc = sdp_task_grad_pack_rows(&o, gs->grad, g->rows_grad, &g->sumsq[g->chunk0[0]], segs,
                                     nsegs);
    if (!rc)
        sdp_rt_tensor_discard(gs->grad);
    for (int c = 0; c < nc; c++) {
        if (rc && g->rows_grad[c]) {
            sdp_rt_tensor_release(g->rows_grad[c]);
            g->rows_grad[c] = NULL;
        }
        if (segs)
            free(segs[c]);
    }
    free(segs);
    free(nsegs);
    return rc;
}

/* The bf16 gradient return of group gi (one rank): one task reads the final fp32 gradient whole
 * where it was made and writes each chunk's squared norm and bf16 copy; the accumulator is then
 * discarded, unsplit, so nothing of it comes back to the host and the next step's zeroing waits
 * for the pack through the accumulator's own dependencies. */
static int pack(sdp_graph_t *g, int step, int mb, int gi)
{
    struct sdp_group_state *gs = &g->st->groups[gi];
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_NORM);
    int c1 = mlp_early(g, gi, mb); /* the chunks from c1 on were packed already */
    if (gi == 0 && g->rows_grad && early_embed(g))
        return pack_rows(g, step);
    TRY_RET(c1 > 0
                ? sdp_task_grad_pack_head(&o, gs->grad, gs->grad_ret, &g->sumsq[g->chunk0[gi]], c1)
                : sdp_task_grad_pack(&o, gs->grad, gs->grad_ret, &g->sumsq[g->chunk0[gi]]));
    sdp_rt_tensor_discard(gs->grad);
    return 0;
}

/* norms() (or pack(), which computes them too) of group gi if micro-batch mb was the last of the
 * step and there is one rank. */
static int norms_if_final(sdp_graph_t *g, int step, int mb, int gi)
{
    if (g->R != 1 || mb != g->c.n_micro - 1)
        return 0;
    return packs(g, gi) ? pack(g, step, mb, gi) : norms(g, step, gi);
}

/* The early update of the tied embedding: with one rank, the bf16 return, no clipping and a step
 * that updates, the gradient of every embedding row that none of the step's tokens selects is
 * final once the LM head's backward of the last micro-batch has run (the embedding's backward
 * adds only to the rows of the step's tokens).  Those rows are packed (grad_pack_early) and
 * updated (adamw_early) while the backward goes on; the rows of the step's tokens (about a tenth
 * of Qwen3's vocabulary for 16 K random tokens, fewer for text) and the group's other tensors are
 * updated after the embedding's backward, from the group's usual pack.  Without it the whole
 * embedding's update started when the backward ended, and the next step's forward, which starts
 * with the embedding, waited for all of it (qwen3-4b/16 on an H200: about 80 ms a step on 15
 * cores).  With the embedding's working copy off the host (its group staged: train.embed_home gpu;
 * with work_home gpu alone it does not apply: there the embedding's early updates, first in the
 * policy's order, took the stages the early MLP updates of the layers need) each of the two updates
 * of a chunk writes the rows it updates into a packed stage, and a param_put_early or
 * param_put_rows scatters them into the copy the GPU keeps: the early rows cross PCIe while the
 * backward goes on, and after the embedding's backward only the rows of the step's tokens do,
 * instead of the whole copy. */
static int early_embed(const sdp_graph_t *g)
{
    return g->row_mark && g->R == 1 && g->lm_group == 0 && packs(g, 0) && g->c.embed_early >= 0 &&
           !(g->c.max_grad_norm > 0) && !g->c.skip_nonfinite &&
           (!g->st->work_staged || g->st->embed_staged);
}

static void add_seg(struct sdp_adamw_segment *segs, int *n, size_t off, size_t len, int decay)
{
    if (*n > 0 && segs[*n - 1].decay == decay && segs[*n - 1].offset + segs[*n - 1].nelems == off) {
        segs[*n - 1].nelems += len;
        return;
    }
    segs[*n].offset = off;
    segs[*n].nelems = len;
    segs[*n].decay = decay;
    (*n)++;
}

/* AdamW's segments of chunk c of group gi (offsets in the chunk), one per run of elements with
 * one decay setting: all of the chunk (rows 0); or, of the tied embedding, only the rows that the
 * step's tokens do not select, with every other tensor of the chunk (rows 1, the early update);
 * or only the rows they select (rows 2, the rest); of those, the rows the next step's tokens
 * select too (rows 3, defer_rows) or do not (rows 4, the late update).  Returns the count (0:
 * nothing of the kind in the chunk) or -ENOMEM; *out is malloc'd. */
static int chunk_segs(const sdp_graph_t *g, int gi, int c, int rows, struct sdp_adamw_segment **out)
{
    const struct sdp_group_state *gs = &g->st->groups[gi];
    size_t c0 = sdp_rt_tensor_part_offset(gs->master, c);
    size_t c1 = c0 + sdp_rt_tensor_nelems(sdp_rt_tensor_part(gs->master, c));
    size_t cap = (size_t)gs->ntensors + (rows ? (c1 - c0) / (size_t)g->C + 2 : 0);
    struct sdp_adamw_segment *segs = malloc(cap * sizeof(*segs));
    int n = 0;
    if (!segs)
        return -ENOMEM;
    for (int i = 0; i < gs->ntensors; i++) {
        const struct sdp_param_desc *d = &gs->tensors[i];
        size_t t0 = d->offset, t1 = d->offset + (size_t)d->rows * d->cols;
        size_t s0 = t0 > c0 ? t0 : c0, s1 = t1 < c1 ? t1 : c1;
        if (s0 >= s1)
            continue;
        if (!rows || gi != 0 || d->offset != g->embed_off) {
            if (rows < 2)
                add_seg(segs, &n, s0 - c0, s1 - s0, d->decay);
            continue;
        }
        for (size_t r = (s0 - t0) / d->cols; t0 + r * d->cols < s1; r++) {
            size_t r0 = t0 + r * d->cols, r1 = r0 + d->cols;
            r0 = r0 > s0 ? r0 : s0;
            r1 = r1 < s1 ? r1 : s1;
            int mine = rows == 1   ? !g->row_mark[r]
                       : rows == 2 ? g->row_mark[r]
                                   : g->row_mark[r] && !g->next_mark[r] == (rows == 4);
            if (mine)
                add_seg(segs, &n, r0 - c0, r1 - r0, d->decay);
        }
    }
    *out = segs;
    return n;
}

/* The segments of the tied embedding's chunk c that its final pack puts back to back (pack_rows):
 * the rows of the step's tokens (rows 2) or, when the step defers its late rows (defer_rows), the
 * rows the next step's tokens select too (rows 3), then the others (rows 4); *first: the elements
 * of rows 3 (where rows 4 starts in the packed chunk).  Returns the count or -ENOMEM. */
static int packed_segs(const sdp_graph_t *g, int c, struct sdp_adamw_segment **out, size_t *first)
{
    struct sdp_adamw_segment *a = NULL, *b = NULL, *ab;
    int na, nb;
    if (first)
        *first = 0;
    if (!g->defer)
        return chunk_segs(g, 0, c, 2, out);
    na = chunk_segs(g, 0, c, 3, &a);
    nb = na < 0 ? na : chunk_segs(g, 0, c, 4, &b);
    if (nb < 0 || !(ab = realloc(a, ((size_t)na + (size_t)nb + 1) * sizeof(*ab)))) {
        free(a);
        free(b);
        return -ENOMEM;
    }
    size_t na_el = 0, nb_el = 0;
    for (int k = 0; k < na; k++)
        na_el += ab[k].nelems;
    for (int k = 0; k < nb; k++)
        nb_el += b[k].nelems;
    if (na_el + nb_el == sdp_rt_tensor_nelems(sdp_rt_tensor_part(g->st->groups[0].master, c))) {
        /* the step's rows fill the chunk: its packed gradient is as long as the chunk, which
         * AdamW reads in place, so in the chunk's order, and rows 3 takes it all (defer_segs) */
        free(ab);
        free(b);
        if (first)
            *first = na_el + nb_el;
        return chunk_segs(g, 0, c, 2, out);
    }
    if (first)
        *first = na_el;
    if (nb > 0)
        memcpy(ab + na, b, (size_t)nb * sizeof(*b));
    free(b);
    *out = ab;
    return na + nb;
}

/* The segments of the tied embedding's chunk c that update `rows` takes when the step defers its
 * late rows (rows 3: those the next step's tokens select too, before its lookup; rows 4: the
 * others, after it), and *gbase, where they start in the chunk's packed gradient (packed_segs'
 * order).  Returns the count or -ENOMEM; *out is malloc'd. */
static int defer_segs(const sdp_graph_t *g, int c, int rows, struct sdp_adamw_segment **out,
                      size_t *gbase)
{
    struct sdp_adamw_segment *all;
    size_t first;
    int n = packed_segs(g, c, &all, &first), k = 0;
    if (n < 0)
        return n;
    size_t run = 0;
    while (k < n && run < first) /* rows 3 come first, whole segments */
        run += all[k++].nelems;
    *gbase = rows == 3 ? 0 : first;
    if (rows == 4) {
        memmove(all, all + k, (size_t)(n - k) * sizeof(*all));
        n -= k;
    } else {
        n = k;
    }
    *out = all;
    return n;
}

/* Chunk c of group gi's working copy into the copy the compute reads, where it keeps it, when the
 * working copies are off the host (sdp_state.work_staged): the stage AdamW or the cast wrote is
 * copied in (StarPU brings it over PCIe) and dropped, so the host holds only the stages in
 * flight.  Nothing to do otherwise: the chunk was written in place. */
static int put_chunk(sdp_graph_t *g, int step, int gi, int c, enum sdp_phase ph)
{
    struct sdp_group_state *gs = &g->st->groups[gi];
    struct sdp_task_opts o = opts(g, step, gi, -1, ph);
    if (!gs->staged)
        return 0;
    o.hint.chunk = c;
    TRY_RET(sdp_task_param_put(&o, work_of(g, gi, step), sdp_rt_tensor_part_offset(gs->master, c),
                               gs->work_stage[c]));
    sdp_rt_tensor_discard(gs->work_stage[c]);
    return 0;
}

/* Where AdamW or the cast writes chunk c of group gi's next working copy: the chunk itself, or its
 * stage when the working copies are off the host. */
static sdp_rt_tensor_t *work_chunk(const sdp_graph_t *g, int gi, int c, int step)
{
    const struct sdp_group_state *gs = &g->st->groups[gi];
    return gs->staged ? gs->work_stage[c] : sdp_rt_tensor_part(work_of(g, gi, step), c);
}

/* Whether the update of chunk c of group gi goes through a stage of its own because of the early
 * MLP update (mlp_early) with the working copies on the host. */
static int early_stage(const sdp_graph_t *g, int gi, int c)
{
    int c0 = mlp_early(g, gi, g->c.n_micro - 1);
    return !g->st->groups[gi].staged && c0 > 0 && c >= c0;
}

/* AdamW on chunk c of group gi on the GPU (gpu_updates): from the chunk's packed gradient into a
 * stage there, then a param_put into the working copy.  Neither task fills a stage the policy
 * counts (they hold no host buffer). */
static int update_chunk_gpu(sdp_graph_t *g, int step, int gi, int c)
{
    struct sdp_group_state *gs = &g->st->groups[gi];
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_UPDATE);
    sdp_rt_tensor_t *p = sdp_rt_tensor_part(gs->master, c), *stage = NULL;
    struct sdp_adamw_segment *segs;
    int nsegs = chunk_segs(g, gi, c, 0, &segs), rc;
    char name[64];
    if (nsegs < 0)
        return sdp_err(nsegs, "AdamW segments of group %d, chunk %d", gi, c);
    o.hint.chunk = c;
    o.hint.stage_role = SDP_STAGE_NONE;
    snprintf(name, sizeof(name), "g%d.gpu_stage.%d", gi, c);
    rc = nsegs > 0 ? sdp_rt_tensor_temp(&stage, sdp_rt_tensor_dtype(gs->work),
                                        sdp_rt_tensor_nelems(p), name)
                   : 0;
    if (!rc && stage)
        rc = sdp_task_adamw_gpu(&o, p, gs->grad_ret[c], sdp_rt_tensor_part(gs->m, c),
                                sdp_rt_tensor_part(gs->v, c), stage,
                                g->c.max_grad_norm > 0 || g->c.skip_nonfinite ? g->clip : NULL,
                                g->c.skip_nonfinite, g->lr, g->c.beta1, g->c.beta2, g->c.eps,
                                g->c.weight_decay, step + 1, segs, nsegs);
    free(segs);
    if (!rc) /* its memory goes back to StarPU for the next chunk */
        sdp_rt_tensor_discard(gs->grad_ret[c]);
    if (!rc && stage)
        rc = sdp_task_param_put(&o, work_of(g, gi, step), sdp_rt_tensor_part_offset(gs->master, c),
                                stage);
    if (!rc && stage && g->gpu_writeback) {
        /* SDP_GPU_UPDATE_WRITEBACK=1: StarPU writes the chunk's state back to the host when the
         * bus is idle, so that evicting it later costs no transfer */
        sdp_rt_tensor_wont_use(p);
        sdp_rt_tensor_wont_use(sdp_rt_tensor_part(gs->m, c));
        sdp_rt_tensor_wont_use(sdp_rt_tensor_part(gs->v, c));
    }
    if (stage)
        sdp_rt_tensor_release(stage);
    return rc;
}

/* AdamW on chunk c of group gi (rows: chunk_segs), from the chunk's gradient (bf16 return: its
 * packed copy, given back to StarPU afterwards). */
static int update_chunk(sdp_graph_t *g, int step, int gi, int c, int rows)
{
    if (rows == 0 && gpu_updates(g, gi))
        return update_chunk_gpu(g, step, gi, c);
    struct sdp_group_state *gs = &g->st->groups[gi];
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_UPDATE);
    /* the packed rows of the step's tokens (pack_rows), or the chunk's gradient */
    sdp_rt_tensor_t *rows_grad = gi == 0 && rows >= 2 && g->rows_grad ? g->rows_grad[c] : NULL;
    sdp_rt_tensor_t *grad = rows_grad      ? rows_grad
                            : gs->grad_ret ? gs->grad_ret[c]
                                           : sdp_rt_tensor_part(gs->grad, c);
    sdp_rt_tensor_t *p = sdp_rt_tensor_part(gs->master, c), *m = sdp_rt_tensor_part(gs->m, c),
                    *v = sdp_rt_tensor_part(gs->v, c), *w = work_chunk(g, gi, c, step);
    struct sdp_adamw_segment *segs;
    sdp_rt_tensor_t *stage = NULL;  /* the early MLP update's stage, working copies on the host */
    sdp_rt_tensor_t *packed = NULL; /* a staged group's rows: the segments back to back */
    size_t covered = 0, gbase = 0;  /* gbase: rows 4's start in the packed gradient */
    int nsegs =
            rows >= 3 ? defer_segs(g, c, rows, &segs, &gbase) : chunk_segs(g, gi, c, rows, &segs),
        rc = 0;
    if (nsegs < 0)
        return sdp_err(nsegs, "AdamW segments of group %d, chunk %d", gi, c);
    for (int i = 0; i < nsegs; i++)
        covered += segs[i].nelems;
    o.hint.chunk = c;
    if (gs->staged) /* it writes the chunk's stage, alive until its put */
        o.hint.stage_role = rows == 2 ? SDP_STAGE_BY_PHASE : SDP_STAGE_FILL; /* 2: see put_rows */
    if (gs->staged && nsegs > 0 && rows != 0) {
        /* only the rows it updates cross PCIe (the rest of the copy there stays as it is) */
        char name[64];
        snprintf(name, sizeof(name), "g%d.rows_stage.%d.%d", gi, c, rows);
        rc = sdp_rt_tensor_temp(&packed, sdp_rt_tensor_dtype(w),
                                packed_len(covered, sdp_rt_tensor_nelems(p)), name);
        if (rc) {
            free(segs);
            return rc;
        }
        w = packed; /* alive until its put below */
    }
    if (rows == 0 && nsegs > 0 && early_stage(g, gi, c)) {
        char name[64];
        snprintf(name, sizeof(name), "g%d.mlp_stage.%d", gi, c);
        rc = sdp_rt_tensor_temp(&stage, sdp_rt_tensor_dtype(w), sdp_rt_tensor_nelems(w), name);
        if (rc) {
            free(segs);
            return rc;
        }
        w = stage; /* alive until its stage_put below */
        o.hint.stage_role = SDP_STAGE_FILL;
    }
    if (nsegs > 0 && rows == 1) {
        rc = sdp_task_adamw_early(&o, p, grad, m, v, w, g->lr, g->c.beta1, g->c.beta2, g->c.eps,
                                  g->c.weight_decay, step + 1, segs, nsegs);
    } else if (nsegs > 0 && rows == 4) { /* read by the next step's head only: after the rest */
        o.hint.late = 1;
        rc = sdp_task_adamw_late(&o, p, grad, gbase, m, v, w, g->lr, g->c.beta1, g->c.beta2,
                                 g->c.eps, g->c.weight_decay, step + 1, segs, nsegs);
    } else if (nsegs > 0)
        rc = sdp_task_adamw_ex(&o, p, grad, m, v, w,
                               g->c.max_grad_norm > 0 || g->c.skip_nonfinite ? g->clip : NULL,
                               g->c.skip_nonfinite, g->lr, g->c.beta1, g->c.beta2, g->c.eps,
                               g->c.weight_decay, step + 1, segs, nsegs);
    if (!rc && packed && rows == 1) {
        struct sdp_task_opts op = opts(g, step, gi, -1, SDP_PH_UPDATE);
        size_t off = sdp_rt_tensor_part_offset(gs->master, c);
        op.hint.chunk = c;
        rc = sdp_task_param_put_segs(&op, work_of(g, gi, step), 1, &off, &packed, &segs, &nsegs, 1);
    } else if (!rc && packed) { /* the rows of the step's tokens: one put for all (put_rows) */
        struct rows_put *rp = &g->rput;
        rp->stage[rp->n] = packed;
        rp->segs[rp->n] = segs;
        rp->nsegs[rp->n] = nsegs;
        rp->off[rp->n++] = sdp_rt_tensor_part_offset(gs->master, c);
        packed = NULL;
        segs = NULL;
    }
    free(segs);
    if (rows_grad) { /* dropped once its (last) update has read it */
        if (rows != 3) {
            sdp_rt_tensor_release(rows_grad);
            g->rows_grad[c] = NULL;
        }
    } else if (!rc && gs->grad_ret) /* its memory goes back to StarPU for the next chunk */
        sdp_rt_tensor_discard(gs->grad_ret[c]);
    if (!rc && stage) {
        struct sdp_task_opts op = opts(g, step, gi, -1, SDP_PH_UPDATE);
        op.hint.chunk = c;
        rc = sdp_task_stage_put(&op, sdp_rt_tensor_part(work_of(g, gi, step), c), stage);
    }
    if (stage)
        sdp_rt_tensor_release(stage);
    if (packed)
        sdp_rt_tensor_release(packed);
    else if (!rc && nsegs > 0 && !(gs->staged && rows != 0))
        rc = put_chunk(g, step, gi, c, SDP_PH_UPDATE);
    return rc;
}

/* The put of the embedding's rows of the step's tokens (update_chunk's rows 2 with the group
 * staged): one task takes every chunk's packed stage, so StarPU brings them all over PCIe at once.
 * A put per chunk ran one at a time (the puts of one copy commute: StarPU hands them out one by
 * one), each waiting for its stage behind the next forward's weight fetches, and qwen3-4b/32's
 * step grew from 1.84 to 2.09 s.  Its stages are not counted against the bound on stages alive
 * (their updates do not fill a stage for the policy, and the put drains none): the bound would
 * hold back the very updates this put waits for. */
static int put_rows(sdp_graph_t *g, int step)
{
    struct rows_put *rp = &g->rput;
    struct sdp_task_opts o = opts(g, step, 0, -1, SDP_PH_UPDATE);
    o.hint.stage_role = SDP_STAGE_NONE; /* it drains no counted stage */
    int rc = rp->n > 0 ? sdp_task_param_put_segs(&o, work_of(g, 0, step), rp->n, rp->off, rp->stage,
                                                 rp->segs, rp->nsegs, 0)
                       : 0;
    for (int k = 0; k < rp->n; k++) {
        sdp_rt_tensor_release(rp->stage[k]);
        free(rp->segs[k]);
    }
    rp->n = 0;
    return rc;
}

/* The pack and the early update of the tied embedding (early_embed), after the LM head's
 * backward of the step's last micro-batch: the accumulator stays for the embedding's backward. */
static int embed_early(sdp_graph_t *g, int step)
{
    struct sdp_group_state *gs = &g->st->groups[0];
    struct sdp_task_opts o = opts(g, step, 0, -1, SDP_PH_NORM);
    /* its sums are not the norms: the group's pack after the embedding's backward rewrites them */
    TRY_RET(sdp_task_grad_pack_early(&o, gs->grad, gs->grad_ret, &g->sumsq[g->chunk0[0]]));
    for (int c = 0; c < gs->nchunks; c++)
        TRY_RET(update_chunk(g, step, 0, c, 1));
    return 0;
}

/* What a bounded window lets go of after rank r's last backward of group gi: the working copy,
 * and the fp32 gradient unless it was packed (then it is discarded already, and the bf16 chunks
 * wait on the GPU for their updates to fetch them, so the host holds only the chunks being
 * updated). */
static void window_release(sdp_graph_t *g, int step, int gi, int r)
{
    if (!g->st->groups[gi].staged) /* a staged copy has nowhere else to go */
        sdp_rt_tensor_wont_use(work_of(g, gi, step));
    if (!(g->R == 1 && packs(g, gi)))
        sdp_rt_tensor_wont_use(grad_of(g, gi, r));
}

/* Whether the backward recomputes layer l's activations: with recompute, every layer but the
 * top keep_last, whose backward follows their forward closely (the last layer's right after the
 * LM head), so they keep theirs from the forward. */
static int recomputed(const sdp_graph_t *g, int l)
{
    return g->c.recompute && l <= g->L - g->c.keep_last;
}

/* Whether recomputed layer l keeps its mid residual and gate/up projection from the forward on the
 * GPU (keep_mlp): the top keep_mlp of the L - keep_last recomputed layers, whose backward comes
 * first, so the memory they hold is freed early in the backward; all of them when keep_mlp reaches
 * their number. */
static int keeps_mlp(const sdp_graph_t *g, int l)
{
    return recomputed(g, l) && l > g->L - g->c.keep_last - g->c.keep_mlp;
}

/* What layer l's backward preparations (recomputation, gradient zeroing) wait for: the end of
 * the backward of layer l + 1 + bwd_lookahead (done[L + 1]: the final norm's), or nothing. */
static unsigned long long bwd_gate(const sdp_graph_t *g, const unsigned long long *done, int l)
{
    int k = l + 1 + g->c.bwd_lookahead;
    return g->c.bwd_lookahead >= 0 && k <= g->L + 1 ? done[k] : 0;
}

/* The forward's lookup on the host (lookup_host_create) of micro-batch mb of `step`: its part
 * tasks, each of whole sequences, on the CPU workers from the working copy. */
static int lookup_host(sdp_graph_t *g, int step, int mb, sdp_rt_tensor_t *ids)
{
    struct sdp_task_opts o = opts(g, step, 0, mb, SDP_PH_FWD);
    sdp_rt_tensor_t *x0 = g->x0[mb];
    for (int k = 0; k < sdp_rt_tensor_nparts(x0); k++) { /* part k: its rows' ids */
        sdp_rt_tensor_t *part = sdp_rt_tensor_part(x0, k);
        TRY_RET(sdp_task_embedding_fwd_host(
            &o, part, ids, sdp_rt_tensor_part_offset(x0, k) / (size_t)g->C, work_of(g, 0, step),
            sdp_state_off(g->st, 0, SDP_PT_EMBED), (int)(sdp_rt_tensor_nelems(part) / (size_t)g->C),
            g->C));
    }
    return 0;
}

/* Forward, loss and backward of one micro-batch. */
static int micro_batch(sdp_graph_t *g, int step, int mb, sdp_rt_tensor_t *ids,
                       sdp_rt_tensor_t *targets, float scale)
{
    struct sdp_state *st = g->st;
    int B = g->c.micro_batch, T = g->c.seq_len, N = B * T, L = g->L;
    float eps = (float)st->cfg.rms_norm_eps;
    sdp_rt_tensor_t **xs = calloc((size_t)L + 1, sizeof(*xs));
    struct layer_acts *kept = calloc((size_t)L + 1, sizeof(*kept));
    unsigned long long *done = calloc((size_t)L + 2, sizeof(*done)); /* bwd end tags (bwd_gate) */
    sdp_rt_tensor_t *hN = NULL, *rstdN = NULL, *dh = NULL, *dres = NULL;
    struct sdp_task_opts o;
    int rc = 0, l, r = rank_of(g, mb);
    /* the rank's last micro-batch of the step: with a bounded window, GPU copies go after it */
    int last = g->c.window > 0 && (mb + 1) % g->nm_rank == 0;
    if (!xs || !kept || !done) {
        free(xs);
        free(kept);
        free(done);
        return sdp_err(-ENOMEM, "micro-batch bookkeeping for %d layers", L);
    }
    /* forward: xs[l] is the input of layer l + 1 (xs[0] the embeddings, xs[L] the last output) */
    o = opts(g, step, 0, mb, SDP_PH_FWD);
    if (g->x0) { /* lookup_host: on the CPU workers (submitted by the previous step: defer_rows) */
        xs[0] = g->x0[mb];
        if (g->looked_up != step)
            TRY_GOTO(lookup_host(g, step, mb, ids));
    } else {
        TRY_GOTO(temp(&xs[0], g->act_dt, (size_t)N * g->C, "x", mb, 0));
        TRY_GOTO(dispatch(g, step, mb, 0));
        TRY_GOTO(sdp_task_embedding_fwd(&o, xs[0], ids, compute_work(g, 0, step, r),
                                        sdp_state_off(st, 0, SDP_PT_EMBED), N, g->C));
    }
    for (l = 1; l <= L; l++) {
        TRY_GOTO(temp(&xs[l], g->act_dt, (size_t)N * g->C, "x", mb, l));
        TRY_GOTO(dispatch(g, step, mb, l));
        TRY_GOTO(layer_fwd(g, step, mb, l, SDP_PH_FWD, xs[l - 1], NULL, NULL, &kept[l], xs[l], 0));
        if (recomputed(g, l)) { /* else kept whole for the backward */
            /* selective: only the mid residual stays for the recomputation; keeps_mlp: the mid
             * residual and the gate/up projection */
            int km = keeps_mlp(g, l);
            sdp_rt_tensor_t *mid =
                g->c.recompute == SDP_RECOMPUTE_SELECTIVE || km ? kept[l].xmid : NULL;
            sdp_rt_tensor_t *gu = km ? kept[l].gu : NULL;
            if (mid)
                kept[l].xmid = NULL;
            if (gu)
                kept[l].gu = NULL;
            release_acts(&kept[l]);
            kept[l].xmid = mid;
            kept[l].gu = gu;
        }
        if (recomputed(g, l) && g->c.offload_inputs) { /* back for layer l's recomputation */
            sdp_rt_tensor_offload(xs[l - 1]);
            if (kept[l].xmid && !keeps_mlp(g, l)) /* keep_mlp's tensors stay on the GPU */
                sdp_rt_tensor_offload(kept[l].xmid);
        }
        if (last && l <= L - g->c.window && !g->rwork)
            sdp_rt_tensor_wont_use(work_of(g, l, step));
    }

    /* head: final norm, LM head + cross-entropy (forward and backward), final norm backward */
    o = opts(g, step, g->head_group, mb, SDP_PH_LOSS);
    TRY_GOTO(temp(&hN, g->act_dt, (size_t)N * g->C, "h_final", mb, L + 1));
    TRY_GOTO(temp(&rstdN, SDP_F32, (size_t)N, "rstd_final", mb, L + 1));
    TRY_GOTO(temp(&dh, g->act_dt, (size_t)N * g->C, "d_h_final", mb, L + 1));
    TRY_GOTO(temp(&dres, g->act_dt, (size_t)N * g->C, "d_x", mb, L + 1));
    TRY_GOTO(zero_grad(g, step, mb, g->lm_group, 0));
    if (g->lm_group != g->head_group)
        TRY_GOTO(zero_grad(g, step, mb, g->head_group, 0));
    TRY_GOTO(dispatch(g, step, mb, g->head_group));
    if (g->x0 && g->lm_group == 0 && mb == 0) {
        /* lookup_host: the tied LM head is the forward's first reader of the embedding's copy on
         * the GPU; fetched with the head's key, the policy's window brings it during the last
         * layers instead of at the step's boundary */
        struct sdp_task_opts of = opts(g, step, g->head_group, -1, SDP_PH_LOSS);
        of.hint.tied = 1;
        TRY_GOTO(sdp_task_param_fetch(&of, work_of(g, 0, step)));
    }
    TRY_GOTO(sdp_task_rmsnorm_fwd(&o, hN, rstdN, xs[L], compute_work(g, g->head_group, step, r),
                                  g->norm_off, N, g->C, eps));
    {
        struct sdp_task_opts ol = o; /* the tied LM head reads the embedding's weights too */
        ol.hint.tied = g->lm_group != g->head_group;
        TRY_GOTO(sdp_task_lmhead_ce(&ol, g->loss[mb], dh, grad_of(g, g->lm_group, r), g->lm_off, hN,
                                    compute_work(g, g->lm_group, step, r), g->lm_off, targets, N,
                                    g->C, g->V, scale));
    }
    o.tag = g->c.bwd_lookahead >= 0 ? new_tag(g) : 0;
    TRY_GOTO(sdp_task_rmsnorm_bwd(&o, dres, 0, grad_of(g, g->head_group, r), g->norm_off, dh, xs[L],
                                  compute_work(g, g->head_group, step, r), g->norm_off, rstdN, N,
                                  g->C));
    done[L + 1] = o.tag;
    /* the LM head's gradient is final here too unless it is the embedding's (tied, group 0) */
    TRY_GOTO(norms_if_final(g, step, mb, g->head_group));
    if (mb == g->c.n_micro - 1 && early_embed(g))
        TRY_GOTO(embed_early(g, step));

    /* backward through the layers, recomputing each layer's activations from its saved input */
    for (l = L; l >= 1; l--) {
        /* with a bounded window the forward let these weights go (after the step's last
         * micro-batch: this fetch follows that in submission order) */
        if (last && !g->rwork)
            TRY_GOTO(fetch(g, step, l, recomputed(g, l) ? SDP_PH_RECOMPUTE : SDP_PH_BWD,
                           bwd_gate(g, done, l)));
        if (recomputed(g, l)) /* kept[l] holds the mid residual, if any, and fills up */
            TRY_GOTO(layer_fwd(g, step, mb, l, SDP_PH_RECOMPUTE, xs[l - 1], kept[l].xmid,
                               kept[l].gu, &kept[l], NULL, bwd_gate(g, done, l)));
        TRY_GOTO(zero_grad(g, step, mb, l, bwd_gate(g, done, l)));
        TRY_GOTO(layer_bwd(g, step, mb, l, xs[l - 1], &kept[l], dres,
                           g->c.bwd_lookahead >= 0 ? &done[l] : NULL));
        TRY_GOTO(norms_if_final(g, step, mb, l));
        if (last)
            window_release(g, step, l, r);
        if (g->rwork && (mb + 1) % g->nm_rank == 0) /* the replica's last use this step */
            sdp_rt_tensor_discard(compute_work(g, l, step, r));
        release_acts(&kept[l]);
        sdp_rt_tensor_release(xs[l]);
        xs[l] = NULL;
    }
    if (g->lm_group != 0)
        TRY_GOTO(zero_grad(g, step, mb, 0, bwd_gate(g, done, 0)));
    o = opts(g, step, 0, mb, SDP_PH_BWD);
    TRY_GOTO(sdp_task_embedding_bwd(&o, grad_of(g, 0, r), sdp_state_off(st, 0, SDP_PT_EMBED), dres,
                                    ids, N, g->C));
    TRY_GOTO(norms_if_final(g, step, mb, 0));
    if (g->rwork && (mb + 1) % g->nm_rank == 0)
        for (int gi = 0; gi < st->ngroups; gi += g->head_group)
            sdp_rt_tensor_discard(compute_work(g, gi, step, r));
    if (last) /* not the embedding updated early: its chunks are being written on the host */
        for (int gi = early_embed(g) ? g->head_group : 0; gi < st->ngroups; gi += g->head_group)
            window_release(g, step, gi, r);
fail:
    if (g->x0) /* the graph's own buffer, written again by the next step's lookup */
        xs[0] = NULL;
    for (l = 0; l <= L; l++) {
        release_acts(&kept[l]);
        sdp_rt_tensor_release(xs[l]);
    }
    sdp_rt_tensor_release(hN);
    sdp_rt_tensor_release(rstdN);
    sdp_rt_tensor_release(dh);
    sdp_rt_tensor_release(dres);
    free(xs);
    free(kept);
    free(done);
    return rc;
}

/* The gradient return of ranks 1..R-1 into rank 0's gradient, one task per group on the whole
 * vectors (the route decides where the sum runs).  Chunk by chunk, StarPU split every rank's
 * gradient on the host first, so even the GPU route sent each gradient through host memory. */
static int reduce_ranks(sdp_graph_t *g, int step)
{
    struct sdp_state *st = g->st;
    sdp_rt_tensor_t *in[SDP_MAX_RANKS];
    for (int gi = 0; gi < st->ngroups; gi++) {
        struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_NORM);
        o.on_rank = g->route_gpu[gi];
        for (int r = 1; r < g->R; r++)
            in[r - 1] = grad_of(g, gi, r);
        TRY_RET(sdp_task_grad_reduce(&o, st->groups[gi].grad, in, g->R - 1));
    }
    return 0;
}

static int fill_i32(sdp_rt_tensor_t *t, const int32_t *src, size_t n)
{
    int rc = sdp_rt_tensor_acquire(t, 1);
    if (rc)
        return rc;
    memcpy(sdp_rt_tensor_data(t), src, n * sizeof(int32_t));
    sdp_rt_tensor_release_acquire(t);
    return 0;
}

/* Whether the step being submitted defers its late rows: with the lookup on the host
 * (lookup_host_create), the early update of the tied embedding (early_embed) and its rows pack,
 * and the next step's ids told (sdp_graph_set_next).  After the embedding's backward only the
 * rows of the step's tokens are left to update (rows 2), and of those the next step's lookup
 * reads only the ones its own tokens select too (rows 3): their updates come first, then the next
 * step's lookups (lookup_ahead), then the others (rows 4, adamw_late), which only the next step's
 * LM head reads, at the end of its forward.  So the next forward waits for the update of about a
 * fifth of those rows (qwen3-4b/32's 32 K uniform random tokens a step: V (1 - e^(-32768 / V))^2,
 * about 5.7 K of 29.5 K rows expected for V = 151,936) instead
 * of all of them.  Every read still sees every row's update of the step before (invariant 3, row
 * by row): StarPU orders the lookups after rows 3's updates, and the late updates after the
 * lookups and before the head's reads, through the working copy's chunks.  SDP_EMBED_DEFER=off
 * turns it off (for measuring). */
static int defer_rows(const sdp_graph_t *g, int update)
{
    return update && g->x0 && g->next_told && g->rows_grad && early_embed(g) && !g->c.param_delay &&
           !sdp_env_is("SDP_EMBED_DEFER", "off");
}

/* The lookups of `step` (the next one), submitted by the step before it (defer_rows) with the
 * ids sdp_graph_set_next told: into the ids of its set, which the step before that one has done
 * with (its embedding's backward ended before this step was submitted). */
static int lookup_ahead(sdp_graph_t *g, int step)
{
    int nm = g->c.n_micro, set = step & 1;
    size_t per_mb = (size_t)g->c.micro_batch * g->c.seq_len;
    for (int mb = 0; mb < nm; mb++) {
        sdp_rt_tensor_t *ti = g->ids[set * nm + mb];
        struct sdp_task_opts o = opts(g, step, 0, mb, SDP_PH_FWD);
        TRY_RET(fill_i32(ti, g->next_ids + mb * per_mb, per_mb));
        TRY_RET(lookup_host(g, step, mb, ti));
        /* the embeddings go to the GPU once looked up, before layer 1's update has ended: else
         * they would cross PCIe with its weights, once its first task is ready */
        TRY_RET(sdp_task_act_fetch(&o, g->x0[mb]));
    }
    int32_t *looked = g->next_ids; /* the next sdp_graph_set_next writes the other buffer */
    g->next_ids = g->looked_ids;
    g->looked_ids = looked;
    g->looked_up = step;
    return 0;
}

/* Squared norms per chunk (already submitted with one rank, see norms()), the global norm, then
 * AdamW per chunk. */
static int optimizer(sdp_graph_t *g, int step, int update)
{
    struct sdp_state *st = g->st;
    int rc;
    if (g->R > 1) {
        TRY_RET(reduce_ranks(g, step));
        for (int gi = 0; gi < st->ngroups; gi++)
            TRY_RET(norms(g, step, gi));
    }
    struct sdp_task_opts on = opts(g, step, -1, -1, SDP_PH_NORM);
    rc = sdp_task_grad_norm(&on, g->clip, g->sumsq, st->nchunks_total, g->c.max_grad_norm);
    if (rc || !update)
        return rc;
    for (int gi = 0; gi < st->ngroups; gi++) {
        for (int c = 0; c < st->groups[gi].nchunks; c++)
            TRY_RET(
                update_chunk(g, step, gi, c, gi == 0 && early_embed(g) ? (g->defer ? 3 : 2) : 0));
        if (gi == 0 && g->defer) { /* the next step's lookups, then the late rows */
            TRY_RET(lookup_ahead(g, step + 1));
            for (int c = 0; c < st->groups[gi].nchunks; c++)
                TRY_RET(update_chunk(g, step, gi, c, 4));
        }
        if (gi == 0)
            TRY_RET(put_rows(g, step));
    }
    return 0;
}

static int refresh_work(sdp_graph_t *g, int step)
{
    struct sdp_state *st = g->st;
    if (st->work_valid)
        return 0;
    for (int gi = 0; gi < st->ngroups; gi++) {
        struct sdp_group_state *gs = &st->groups[gi];
        if (gs->staged) { /* the copy off the host gets a first value where it is computed */
            struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
            /* a GPU memset: no staging slot, so the group's puts need not wait for the casts */
            o.hint.stage_role = SDP_STAGE_NONE;
            TRY_RET(sdp_task_zero(&o, gs->work));
        }
        for (int c = 0; c < gs->nchunks; c++) {
            struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
            o.hint.chunk = c;
            o.priority = 1;
            if (gs->staged)
                o.hint.stage_role = SDP_STAGE_FILL;
            TRY_RET(
                sdp_task_cast(&o, work_chunk(g, gi, c, step), sdp_rt_tensor_part(gs->master, c)));
            TRY_RET(put_chunk(g, step, gi, c, SDP_PH_CAST));
        }
    }
    st->work_valid = 1;
    g->work2_valid = 0;
    return 0;
}

/* param_delay 1: the second working copies start from the masters too. */
static int refresh_work2(sdp_graph_t *g, int step)
{
    struct sdp_state *st = g->st;
    if (!g->c.param_delay || g->work2_valid)
        return 0;
    for (int gi = 0; gi < st->ngroups; gi++)
        for (int c = 0; c < st->groups[gi].nchunks; c++) {
            struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
            o.hint.chunk = c;
            o.priority = 1;
            TRY_RET(sdp_task_cast(&o, sdp_rt_tensor_part(g->work2[gi], c),
                                  sdp_rt_tensor_part(st->groups[gi].master, c)));
        }
    g->work2_valid = 1;
    return 0;
}

int sdp_graph_step(sdp_graph_t *g, int step, const int32_t *ids, const int32_t *targets, double lr,
                   int update, struct sdp_step_result *res)
{
    int B = g->c.micro_batch, T = g->c.seq_len, nm = g->c.n_micro;
    size_t per_mb = (size_t)B * T, total = per_mb * nm;
    long long valid = 0;
    double loss_sum = 0.0;
    int set = step & 1, rc;

    for (size_t i = 0; i < total; i++) {
        if (ids[i] < 0 || ids[i] >= g->V)
            return sdp_err(-EINVAL,
                           "step %d: token id %d at position %zu is outside the vocabulary (V=%d)",
                           step, ids[i], i, g->V);
        if (targets[i] >= g->V)
            return sdp_err(-EINVAL,
                           "step %d: target id %d at position %zu is outside the vocabulary (V=%d)",
                           step, targets[i], i, g->V);
        valid += targets[i] >= 0;
    }
    if (valid == 0)
        return sdp_err(-EINVAL, "step %d: every target is ignored; nothing to learn from", step);

    /* the tags of a step that failed part-way may belong to tasks never submitted: leave them */
    g->ntags = 0;
    g->updating = update;
    g->lr = lr;
    /* lookups the previous step submitted (lookup_ahead) on other ids than these are redone */
    if (g->looked_up == step && memcmp(ids, g->looked_ids, total * sizeof(*ids)) != 0)
        g->looked_up = -1;
    if (early_embed(g)) { /* the embedding rows the step's tokens select */
        memset(g->row_mark, 0, (size_t)g->V);
        for (size_t i = 0; i < total; i++)
            g->row_mark[ids[i]] = 1;
    }
    g->defer = defer_rows(g, update);
    g->ndeferred += g->defer;
    g->next_told = 0;
    if (g->defer) { /* the rows the next step's lookup reads */
        memset(g->next_mark, 0, (size_t)g->V);
        for (size_t i = 0; i < total; i++)
            g->next_mark[g->next_ids[i]] = 1;
    }
    rc = refresh_work(g, step);
    if (!rc)
        rc = refresh_work2(g, step);
    /* every step accumulates from zero: each rank clears a group's gradient where and when its
     * backward first writes it (no upload of zeros; see zero_grad) */
    for (int mb = 0; mb < nm && !rc; mb++) {
        sdp_rt_tensor_t *ti = g->ids[set * nm + mb], *tt = g->targets[set * nm + mb];
        if (g->looked_up != step) /* else lookup_ahead filled them with these ids */
            rc = fill_i32(ti, ids + mb * per_mb, per_mb);
        if (!rc)
            rc = fill_i32(tt, targets + mb * per_mb, per_mb);
        /* the gradient of the step's mean loss: every micro-batch scales by the step's valid count
         */
        if (!rc)
            rc = micro_batch(g, step, mb, ti, tt, (float)(1.0 / (double)valid));
    }
    if (!rc)
        rc = optimizer(g, step, update);
    if (rc)
        return rc;
    if (update)
        g->last_update = step;

    for (int mb = 0; mb < nm; mb++) {
        rc = sdp_rt_tensor_acquire(g->loss[mb], 0);
        if (rc)
            return rc;
        loss_sum += ((const double *)sdp_rt_tensor_data(g->loss[mb]))[0];
        sdp_rt_tensor_release_acquire(g->loss[mb]);
    }
    rc = sdp_rt_tensor_acquire(g->clip, 0);
    if (rc)
        return rc;
    res->grad_norm = ((const double *)sdp_rt_tensor_data(g->clip))[0];
    sdp_rt_tensor_release_acquire(g->clip);
    /* the norm read every gradient, so every tagged task of the step has ended */
    forget_tags(g);
    res->bad_group = -1;
    if (!isfinite(res->grad_norm)) {
        /* name the first group whose chunk norms are not finite (for the error message) */
        int k = 0;
        for (int gi = 0; gi < g->st->ngroups && res->bad_group < 0; gi++)
            for (int c = 0; c < g->st->groups[gi].nchunks; c++, k++) {
                double v;
                if (sdp_rt_tensor_acquire(g->sumsq[k], 0))
                    return -EIO;
                v = *(const double *)sdp_rt_tensor_data(g->sumsq[k]);
                sdp_rt_tensor_release_acquire(g->sumsq[k]);
                if (!isfinite(v) && res->bad_group < 0)
                    res->bad_group = gi;
            }
    }
    res->loss = loss_sum / (double)valid;
    res->tokens = (long long)total;
    res->valid_targets = valid;
    return 0;
}

int sdp_graph_deferred_steps(const sdp_graph_t *g)
{
    return g->ndeferred;
}

void sdp_graph_set_next(sdp_graph_t *g, const int32_t *ids)
{
    size_t total = (size_t)g->c.n_micro * g->c.micro_batch * g->c.seq_len;
    g->next_told = 0;
    if (!g->next_ids)
        return;
    for (size_t i = 0; i < total; i++)
        if (ids[i] < 0 || ids[i] >= g->V)
            return; /* the step of these ids says what is wrong with them */
    memcpy(g->next_ids, ids, total * sizeof(*ids));
    g->next_told = 1;
}

int sdp_graph_logits(sdp_graph_t *g, const int32_t *ids, int nseq, float *logits)
{
    struct sdp_state *st = g->st;
    int T = g->c.seq_len, N = nseq * T, rc = 0, l;
    sdp_rt_tensor_t *tid = NULL, *out = NULL, *hN = NULL, *rstdN = NULL, *x = NULL, *y = NULL;
    struct layer_acts a;
    struct sdp_task_opts o = opts(g, -1, 0, 0, SDP_PH_FWD);
    int saved_b = g->c.micro_batch;
    if (nseq < 1 || nseq > g->c.micro_batch)
        return sdp_err(-EINVAL, "logits for %d sequences (1..%d)", nseq, g->c.micro_batch);
    g->c.micro_batch = nseq;
    rc = refresh_work(g, -1);
    if (!rc)
        rc = sdp_rt_tensor_create(&tid, SDP_I32, (size_t)N, "logits.ids");
    if (!rc)
        rc = sdp_rt_tensor_create(&out, g->act_dt, (size_t)N * g->V, "logits");
    if (rc)
        goto done;
    memcpy(sdp_rt_tensor_data(tid), ids, (size_t)N * sizeof(int32_t));
    TRY_GOTO(temp(&x, g->act_dt, (size_t)N * g->C, "x", 0, 0));
    TRY_GOTO(sdp_task_embedding_fwd(&o, x, tid, work_of(g, 0, -1),
                                    sdp_state_off(st, 0, SDP_PT_EMBED), N, g->C));
    for (l = 1; l <= g->L; l++) {
        TRY_GOTO(temp(&y, g->act_dt, (size_t)N * g->C, "x", 0, l));
        rc = layer_fwd(g, -1, 0, l, SDP_PH_FWD, x, NULL, NULL, &a, y, 0);
        release_acts(&a);
        if (rc)
            goto fail;
        sdp_rt_tensor_release(x);
        x = y;
        y = NULL;
    }
    TRY_GOTO(temp(&hN, g->act_dt, (size_t)N * g->C, "h_final", 0, g->L + 1));
    TRY_GOTO(temp(&rstdN, SDP_F32, (size_t)N, "rstd_final", 0, g->L + 1));
    TRY_GOTO(sdp_task_rmsnorm_fwd(&o, hN, rstdN, x, work_of(g, g->head_group, -1), g->norm_off, N,
                                  g->C, (float)st->cfg.rms_norm_eps));
    TRY_GOTO(sdp_task_matmul_fwd(&o, out, NULL, hN, work_of(g, g->lm_group, -1), g->lm_off, N, g->C,
                                 g->V));
    TRY_GOTO(sdp_rt_tensor_acquire(out, 0));
    if (g->act_dt == SDP_BF16) {
        const uint16_t *src = sdp_rt_tensor_data(out);
        for (size_t i = 0; i < (size_t)N * g->V; i++) {
            uint32_t bits = (uint32_t)src[i] << 16; /* bf16 -> fp32 is exact */
            memcpy(&logits[i], &bits, sizeof(bits));
        }
    } else {
        memcpy(logits, sdp_rt_tensor_data(out), (size_t)N * g->V * sizeof(float));
    }
    sdp_rt_tensor_release_acquire(out);
fail:
    sdp_rt_tensor_release(x);
    sdp_rt_tensor_release(y);
    sdp_rt_tensor_release(hN);
    sdp_rt_tensor_release(rstdN);
done:
    sdp_rt_tensor_release(tid);
    sdp_rt_tensor_release(out);
    g->c.micro_batch = saved_b;
    return rc;
}

void sdp_graph_route_bytes(const sdp_graph_t *g, int rank, struct sdp_route_bytes *rb)
{
    const struct sdp_state *st = g->st;
    size_t es = sdp_dtype_size(st->work_dtype);
    memset(rb, 0, sizeof(*rb));
    for (int gi = 0; gi < st->ngroups; gi++) {
        unsigned long long n = st->groups[gi].nelems;
        int twice = g->c.window > 0 && g->c.recompute && gi >= 1 && gi <= g->L - g->c.window;
        if (g->rwork) { /* sharded: the owned chunks from the host, the others from their owners */
            for (int c = 0; c < st->groups[gi].nchunks; c++) {
                unsigned long long nb =
                    sdp_rt_tensor_nelems(sdp_rt_tensor_part(st->groups[gi].work, c)) * es;
                *(owner_of(g, gi, c) == rank ? &rb->param_h2d : &rb->param_peer) += nb;
            }
        } else {
            rb->param_h2d += n * es * (twice ? 2u : 1u);
        }
        unsigned long long gb = st->groups[gi].grad_ret ? 2u : sizeof(float); /* one rank */
        unsigned long long again = 0; /* the early update's second return (early_embed) */
        if (gi == 0 && early_embed(g) && g->rows_grad) { /* the rows of the latest step's tokens */
            for (int r = 0; r < g->V; r++)
                again += g->row_mark[r];
            again *= (unsigned long long)g->C;
        } else if (gi == 0 && early_embed(g)) {
            again = n; /* packed twice */
        }
        if (rank == 0 || !g->route_gpu[gi])
            rb->grad_d2h += (n + again) * gb;
        else
            rb->grad_peer += n * sizeof(float);
    }
}

unsigned long long sdp_graph_gpu_bytes_min(const struct sdp_model_cfg *m, enum sdp_dtype work_dtype,
                                           const struct sdp_graph_conf *c)
{
    size_t es = sdp_dtype_size(work_dtype), group_max = 0;
    unsigned long long n = (unsigned long long)c->micro_batch * c->seq_len, bytes, nfull;
    for (int g = 0; g < sdp_model_num_groups(m); g++) {
        size_t ne = sdp_model_group_nelems(m, g);
        group_max = ne > group_max ? ne : group_max;
    }
    bytes = 2ull * group_max * (es + 4);                      /* work + fp32 grad */
    bytes += 3 * n * (unsigned long long)m->hidden_size * es; /* d_x, h */
    /* recomputing, what each layer saves (its input; selective, its mid residual too) for every
     * layer or, offloaded, the few around the layer at work */
    if (c->recompute)
        bytes += (c->offload_inputs ? 4ull : (unsigned long long)m->num_layers) *
                 sdp_model_layer_act_bytes(m, c->micro_batch, c->seq_len, (int)es, c->recompute);
    /* keep_mlp: each chosen layer's gate/up projection and, unless selective without offload
     * counted it above, its mid residual, kept on the GPU (at most the L - keep_last recomputed
     * layers) */
    if (c->recompute && c->keep_mlp > 0) {
        int nrec = m->num_layers - (c->keep_last > 0 ? c->keep_last : 0);
        unsigned long long k =
            (unsigned long long)(c->keep_mlp < nrec ? c->keep_mlp : (nrec > 0 ? nrec : 0));
        unsigned long long per;
        per = n *
              (2ull * (unsigned long long)m->intermediate_size +
               (c->recompute == SDP_RECOMPUTE_SELECTIVE && !c->offload_inputs
                    ? 0ull
                    : (unsigned long long)m->hidden_size)) *
              es;
        bytes += k * per;
    }
    /* every intermediate of the layers at work (two), of those that keep theirs from the forward
     * (keep_last; all of them without recomputation) */
    nfull = c->recompute ? 2u + (unsigned)c->keep_last : (unsigned)m->num_layers + 1u;
    bytes += nfull * sdp_model_layer_act_bytes(m, c->micro_batch, c->seq_len, (int)es, 0);
    bytes +=
        (1ull << 30) + (64ull << 20); /* LM-head logits block, cuBLASLt and kernel workspaces */
    return bytes;
}

/* The forward's embedding lookup on the host (embed_lookup_host): where it applies (one rank, the
 * embedding's working copy on the host), a pinned buffer per micro-batch for its embeddings, in
 * parts of whole sequences (at most 16: about one per CPU worker), which the CPU workers fill from
 * the updated working copy as soon as the embedding's update has written it; the next forward
 * then waits for 2 x B x T x C bytes over PCIe instead of the whole table (0.78 GB for qwen3-4b).
 * Elsewhere the lookup stays where the compute runs, with a warning. */
static int lookup_host_create(sdp_graph_t *g)
{
    const struct sdp_graph_conf *c = &g->c;
    int B = c->micro_batch, T = c->seq_len, rc = 0, nparts, per;
    size_t *parts;
    char name[64];
    if (g->R > 1 || g->st->groups[0].staged) {
        SDP_WARN("train.embed_lookup host applies with one rank and the embedding's working copy "
                 "on the host; the lookup runs where the compute runs");
        return 0;
    }
    per = (B + 15) / 16; /* sequences a part (the last may hold fewer) */
    nparts = (B + per - 1) / per;
    g->x0 = calloc((size_t)c->n_micro, sizeof(*g->x0));
    parts = calloc((size_t)nparts, sizeof(*parts));
    if (!g->x0 || !parts) {
        free(parts);
        return sdp_err(-ENOMEM, "embedding buffers of %d micro-batches", c->n_micro);
    }
    for (int k = 0; k < nparts; k++)
        parts[k] = (size_t)(B - k * per < per ? B - k * per : per) * T * g->C;
    g->next_ids = calloc((size_t)c->n_micro * B * T, sizeof(*g->next_ids));
    g->looked_ids = calloc((size_t)c->n_micro * B * T, sizeof(*g->looked_ids));
    g->next_mark = calloc((size_t)g->V, 1);
    if (!g->next_ids || !g->looked_ids || !g->next_mark)
        rc = sdp_err(-ENOMEM, "the next step's ids (%d x %d tokens)", c->n_micro, B * T);
    for (int i = 0; i < c->n_micro && !rc; i++) {
        snprintf(name, sizeof(name), "x0.mb%d", i);
        rc = sdp_rt_tensor_create(&g->x0[i], g->act_dt, (size_t)B * T * g->C, name);
        if (!rc)
            rc = sdp_rt_tensor_partition(g->x0[i], nparts, parts);
    }
    free(parts);
    return rc;
}

int sdp_graph_create(sdp_graph_t **out, struct sdp_state *st, const struct sdp_graph_conf *c)
{
    sdp_graph_t *g = calloc(1, sizeof(*g));
    const struct sdp_model_cfg *m = &st->cfg;
    int rc = 0;
    char name[64];
    if (!g)
        return sdp_err(-ENOMEM, "graph");
    if (c->micro_batch < 1 || c->n_micro < 1 || c->seq_len < 1) {
        free(g);
        return sdp_err(-EINVAL, "graph: micro_batch=%d n_micro=%d seq_len=%d must be positive",
                       c->micro_batch, c->n_micro, c->seq_len);
    }
    g->st = st;
    g->c = *c;
    g->gpu_writeback = sdp_env_long("SDP_GPU_UPDATE_WRITEBACK", 0) > 0;
    g->R = c->nranks > 1 ? c->nranks : 1;
    if (g->R > SDP_MAX_RANKS || c->n_micro % g->R != 0) {
        int R = g->R;
        free(g);
        return sdp_err(-EINVAL, "graph: %d micro-batches cannot be shared by %d ranks (at most %d)",
                       c->n_micro, R, SDP_MAX_RANKS);
    }
    if (st->work_staged &&
        (c->window > 0 || c->param_delay || (g->R > 1 && c->param_route == SDP_ROUTE_SHARDED))) {
        free(g);
        return sdp_err(-EINVAL,
                       "graph: working copies off the host (train.work_home: gpu) need "
                       "window 0 (no gpu_memory_gib), param_delay 0 and the replicated route");
    }
    if (st->groups[0].staged && !st->work_staged &&
        (c->param_delay || (g->R > 1 && c->param_route == SDP_ROUTE_SHARDED))) {
        free(g);
        return sdp_err(-EINVAL, "graph: the embedding's working copy off the host "
                                "(train.embed_home: gpu) needs param_delay 0 and the replicated "
                                "route");
    }
    if (c->keep_last < 0 || c->keep_last > m->num_layers) {
        int k = c->keep_last;
        free(g);
        return sdp_err(-EINVAL, "graph: keep_last = %d is outside 0..%d (the model's layers)", k,
                       m->num_layers);
    }
    if (c->keep_mlp < 0 || c->keep_mlp > m->num_layers) {
        int k = c->keep_mlp;
        free(g);
        return sdp_err(-EINVAL, "graph: keep_mlp = %d is outside 0..%d (the model's layers)", k,
                       m->num_layers);
    }
    g->nm_rank = c->n_micro / g->R;
    g->C = m->hidden_size;
    g->I = m->intermediate_size;
    g->NH = m->num_heads;
    g->NKV = m->num_kv_heads;
    g->HD = m->head_dim;
    g->QKV = (g->NH + 2 * g->NKV) * g->HD;
    g->V = m->vocab_size;
    g->L = m->num_layers;
    g->act_dt = st->work_dtype;
    g->head_group = g->L + 1;
    g->norm_off = sdp_state_off(st, g->head_group, SDP_PT_NORM);
    g->lm_group = m->tie_word_embeddings ? 0 : g->head_group;
    g->lm_off =
        sdp_state_off(st, g->lm_group, m->tie_word_embeddings ? SDP_PT_EMBED : SDP_PT_LM_HEAD);
    g->embed_off = sdp_state_off(st, 0, SDP_PT_EMBED);
    g->rope.theta = m->rope_theta;
    g->rope.factor = m->rope_scaling_factor;
    g->rope.low_freq_factor = m->rope_low_freq_factor;
    g->rope.high_freq_factor = m->rope_high_freq_factor;
    g->rope.original_max_pos = m->rope_original_max_pos;
    g->ids = calloc(2 * (size_t)c->n_micro, sizeof(*g->ids));
    g->targets = calloc(2 * (size_t)c->n_micro, sizeof(*g->targets));
    g->loss = calloc((size_t)c->n_micro, sizeof(*g->loss));
    g->sumsq = calloc((size_t)st->nchunks_total, sizeof(*g->sumsq));
    if (!g->ids || !g->targets || !g->loss || !g->sumsq) {
        sdp_graph_destroy(g);
        return sdp_err(-ENOMEM, "graph buffers");
    }
    for (int i = 0; i < 2 * c->n_micro && !rc; i++) {
        snprintf(name, sizeof(name), "ids.%d", i);
        rc = sdp_rt_tensor_create(&g->ids[i], SDP_I32, (size_t)c->micro_batch * c->seq_len, name);
        snprintf(name, sizeof(name), "targets.%d", i);
        if (!rc)
            rc = sdp_rt_tensor_create(&g->targets[i], SDP_I32, (size_t)c->micro_batch * c->seq_len,
                                      name);
    }
    for (int i = 0; i < c->n_micro && !rc; i++) {
        snprintf(name, sizeof(name), "loss.mb%d", i);
        rc = sdp_rt_tensor_create(&g->loss[i], SDP_F64, 2, name);
    }
    for (int i = 0; i < st->nchunks_total && !rc; i++) {
        snprintf(name, sizeof(name), "sumsq.%d", i);
        rc = sdp_rt_tensor_create(&g->sumsq[i], SDP_F64, 1, name);
    }
    if (!rc)
        rc = sdp_rt_tensor_create(&g->clip, SDP_F64, 2, "clip");
    if (!rc && g->lm_group == 0 && st->groups[0].grad_ret) { /* early_embed's bookkeeping */
        g->row_mark = calloc((size_t)g->V, 1);
        if (!g->row_mark)
            rc = sdp_err(-ENOMEM, "embedding rows");
        if (!rc && !sdp_env_is("SDP_ROWS_PACK", "off") &&
            !(g->rows_grad = calloc((size_t)st->groups[0].nchunks, sizeof(*g->rows_grad))))
            rc = sdp_err(-ENOMEM, "embedding rows");
        size_t nc = (size_t)st->groups[0].nchunks;
        g->rput.stage = calloc(nc, sizeof(*g->rput.stage));
        g->rput.segs = calloc(nc, sizeof(*g->rput.segs));
        g->rput.nsegs = calloc(nc, sizeof(*g->rput.nsegs));
        g->rput.off = calloc(nc, sizeof(*g->rput.off));
        if (!rc && (!g->rput.stage || !g->rput.segs || !g->rput.nsegs || !g->rput.off))
            rc = sdp_err(-ENOMEM, "embedding rows");
    }
    if (!rc && c->embed_lookup_host)
        rc = lookup_host_create(g);
    g->last_update = -1;
    g->looked_up = -1;
    if (!rc && !(g->route_gpu = calloc((size_t)st->ngroups, 1)))
        rc = sdp_err(-ENOMEM, "routes");
    for (int gi = 0; !rc && gi < st->ngroups; gi++)
        g->route_gpu[gi] =
            c->grad_route_gpu ? c->grad_route_gpu[gi] : c->grad_route == SDP_ROUTE_GPU_REDUCE;
    if (!rc && c->param_delay) {
        g->work2 = calloc((size_t)st->ngroups, sizeof(*g->work2));
        if (!g->work2)
            rc = sdp_err(-ENOMEM, "second working copies");
        for (int gi = 0; gi < st->ngroups && !rc; gi++) {
            snprintf(name, sizeof(name), "g%d.work2", gi);
            rc = sdp_rt_tensor_create(&g->work2[gi], st->work_dtype, st->groups[gi].nelems, name);
            if (!rc)
                rc = sdp_rt_tensor_partition_like(g->work2[gi], st->groups[gi].work);
        }
    }
    if (!rc) {
        g->chunk0 = calloc((size_t)st->ngroups, sizeof(*g->chunk0));
        if (!g->chunk0)
            rc = sdp_err(-ENOMEM, "chunk index of %d groups", st->ngroups);
        for (int gi = 1; !rc && gi < st->ngroups; gi++)
            g->chunk0[gi] = g->chunk0[gi - 1] + st->groups[gi - 1].nchunks;
    }
    if (!rc && g->R > 1 && c->param_route == SDP_ROUTE_SHARDED) {
        /* every rank's replica of every group, chunked like the working copy, device memory only */
        g->rwork = calloc((size_t)g->R * st->ngroups, sizeof(*g->rwork));
        if (!g->rwork)
            rc = sdp_err(-ENOMEM, "replicas of %d ranks", g->R);
        for (int r = 0; r < g->R && !rc; r++)
            for (int gi = 0; gi < st->ngroups && !rc; gi++) {
                sdp_rt_tensor_t **t = &g->rwork[(size_t)r * st->ngroups + gi];
                snprintf(name, sizeof(name), "g%d.work.rank%d", gi, r);
                rc = sdp_rt_tensor_create_device(t, st->work_dtype, st->groups[gi].nelems, name);
                if (!rc)
                    rc = sdp_rt_tensor_partition_like(*t, st->groups[gi].work);
            }
    }
    if (!rc && g->R > 1 && st->grad_dtype != SDP_F32)
        rc = sdp_err(-EINVAL, "graph: the bf16 gradient return is for one rank (%d ranks asked)",
                     g->R);
    if (!rc && c->gpu_update > 0 && !gpu_update_applies(g))
        SDP_WARN("train.gpu_update %d does not apply here (it needs one rank, compute on a GPU, "
                 "the bf16 gradient return and the working copies on the host): every update "
                 "runs on the host",
                 c->gpu_update);
    if (!rc && g->R > 1) {
        /* ranks 1..R-1 accumulate into gradients of their own, chunked like rank 0's */
        g->rgrad = calloc((size_t)(g->R - 1) * st->ngroups, sizeof(*g->rgrad));
        if (!g->rgrad)
            rc = sdp_err(-ENOMEM, "gradients of %d ranks", g->R);
        for (int r = 1; r < g->R && !rc; r++)
            for (int gi = 0; gi < st->ngroups && !rc; gi++) {
                sdp_rt_tensor_t **t = &g->rgrad[(size_t)(r - 1) * st->ngroups + gi];
                snprintf(name, sizeof(name), "g%d.grad.rank%d", gi, r);
                rc = sdp_rt_tensor_create(t, SDP_F32, st->groups[gi].nelems, name);
                if (!rc)
                    rc = sdp_rt_tensor_partition_like(*t, st->groups[gi].grad);
            }
    }
    if (rc) {
        sdp_graph_destroy(g);
        return rc;
    }
    *out = g;
    return 0;
}

void sdp_graph_destroy(sdp_graph_t *g)
{
    if (!g)
        return;
    for (int i = 0; g->ids && i < 2 * g->c.n_micro; i++) {
        sdp_rt_tensor_release(g->ids[i]);
        sdp_rt_tensor_release(g->targets[i]);
    }
    for (int i = 0; g->loss && i < g->c.n_micro; i++)
        sdp_rt_tensor_release(g->loss[i]);
    for (int i = 0; g->sumsq && i < g->st->nchunks_total; i++)
        sdp_rt_tensor_release(g->sumsq[i]);
    sdp_rt_tensor_release(g->clip);
    free(g->row_mark);
    for (int c = 0; g->rows_grad && c < g->st->groups[0].nchunks; c++)
        sdp_rt_tensor_release(g->rows_grad[c]);
    free(g->rows_grad);
    for (int k = 0; k < g->rput.n; k++) {
        sdp_rt_tensor_release(g->rput.stage[k]);
        free(g->rput.segs[k]);
    }
    free(g->rput.stage);
    free(g->rput.segs);
    free(g->rput.nsegs);
    free(g->rput.off);
    for (int i = 0; g->x0 && i < g->c.n_micro; i++)
        sdp_rt_tensor_release(g->x0[i]);
    free(g->x0);
    free(g->next_ids);
    free(g->looked_ids);
    free(g->next_mark);
    for (int i = 0; g->rgrad && i < (g->R - 1) * g->st->ngroups; i++)
        sdp_rt_tensor_release(g->rgrad[i]);
    free(g->rgrad);
    for (int i = 0; g->work2 && i < g->st->ngroups; i++)
        sdp_rt_tensor_release(g->work2[i]);
    free(g->work2);
    free(g->route_gpu);
    for (int i = 0; g->rwork && i < g->R * g->st->ngroups; i++)
        sdp_rt_tensor_release(g->rwork[i]);
    free(g->rwork);
    free(g->chunk0);
    free(g->ids);
    free(g->targets);
    free(g->loss);
    free(g->sumsq);
    free(g->tags); /* a failed step's tags stay with StarPU until it shuts down */
    free(g);
}
