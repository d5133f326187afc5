/* SPDX-License-Identifier: MIT */
/* Internals shared by the files of graph/ (the step graph of step.h): the graph's state, the
 * activations of a layer, the small helpers every file uses, and the cross-file functions.  Not
 * for use outside graph/. */
#ifndef SDP_GRAPH_INTERNAL_H
#define SDP_GRAPH_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "codelets/sdp_tasks.h"
#include "graph/plan.h"
#include "graph/step.h"

struct sdp_graph {
    struct sdp_state *st;
    struct sdp_graph_conf c;
    struct sdp_plan plan;             /* what the graph builds, group by group (plan.h) */
    sdp_rt_tensor_t **ids, **targets; /* [2][n_micro]: alternate sets per step */
    sdp_rt_tensor_t **segs;           /* [2][n_micro] (doc_mask): the tokens' document starts */
    sdp_rt_tensor_t *seg_mb;          /* those of the micro-batch being submitted, or NULL */
    const int32_t *seg_host;          /* the same starts on the host (the caller's, this step) */
    sdp_rt_tensor_t **loss;           /* [n_micro] (2) f64 */
    double *mb_loss;                  /* [n_micro] their loss sums, read after the step */
    sdp_rt_tensor_t **sumsq;          /* [nchunks_total] (1) f64 */
    sdp_rt_tensor_t *clip;            /* (2) f64: norm, coefficient */
    int R, nm_rank;                   /* ranks, micro-batches per rank */
    int P, node;                      /* nodes of the run (1: one), this one's index */
    sdp_rt_tensor_t **rgrad;          /* [(R - 1) * ngroups]: gradients of ranks 1..R-1 (of
                                         what each group trains: train_grad) */
    sdp_rt_tensor_t **work2;          /* [ngroups]: second working copies (param_delay 1) */
    sdp_rt_tensor_t **rwork;          /* [R * ngroups]: each rank's replica (sharded route) */
    sdp_rt_tensor_t ***gret;          /* [ngroups] (grad_chunks): each chunk's copy of the fp32
                                         gradient, from its grad_chunk to its update (the host
                                         route's sum: [r * nchunks + c], rank r's); else NULL */
    sdp_rt_tensor_t **cwork;          /* [R * ngroups]: each rank's compute copy of each group
                                         with work_chunks, written chunk by chunk; else NULL */
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
    enum sdp_dtype res_dt; /* the residual stream and its gradient: act_dt, or f32 under bf16
                              (train.residual_dtype fp32, plan.residual_f32) */
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
    int nsumsq;                  /* entries of sumsq: every chunk of the state, or with LoRA every
                                    adapter chunk (chunk0 then indexes those) */
    sdp_rt_tensor_t
        *lora_sink; /* LoRA: where the frozen norms' weight gradients go (graph/lora.c) */
    /* sparse layers (graph/moe.c): the groups of the first and last (0: none); per micro-batch
     * the load-balancing loss's statistics (2E f64) and value (1 f64); per sparse group the
     * experts that received a token in the step (E i32, else NULL) */
    int moe_first, moe_last;
    sdp_rt_tensor_t **moe_stats, **moe_aux, **moe_used;
};

/* Activations of one decoder layer for one micro-batch (a sparse layer: gu holds what its block
 * keeps, act is unused). */
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

unsigned long long sdp_graph_new_tag(sdp_graph_t *g);

static inline int temp(sdp_rt_tensor_t **t, enum sdp_dtype dt, size_t n, const char *what, int mb,
                       int layer)
{
    char name[64];
    snprintf(name, sizeof(name), "%s.mb%d.l%d", what, mb, layer);
    return sdp_rt_tensor_temp(t, dt, n, name);
}

/* The rank that computes micro-batch mb (shared work, mb < 0, belongs to rank 0). */
static inline int rank_of(const sdp_graph_t *g, int mb)
{
    return mb < 0 ? 0 : mb / g->nm_rank;
}

/* Whether the step reduces gradients after the backward: several ranks or several nodes (one
 * rank of one node: the norms, packs and returns follow each group's backward instead). */
static inline int reduces(const sdp_graph_t *g)
{
    return g->R > 1 || g->P > 1;
}

/* The gradient of what group gi trains that rank r accumulates into (rank 0's is the state's):
 * its parameters', or under LoRA its adapters' (NULL for a frozen group without adapters). */
static inline sdp_rt_tensor_t *train_grad(const sdp_graph_t *g, int gi, int r)
{
    const struct sdp_group_state *gs = &g->st->groups[gi];
    if (r > 0)
        return g->rgrad[(size_t)(r - 1) * g->st->ngroups + gi];
    return gs->frozen ? (gs->lora ? gs->lora->grad : NULL) : gs->grad;
}

/* Whether group gi's ranks sum on the host chunk by chunk with the fp32 return chunk by chunk
 * (grad_chunks, the host route of one node): each rank's chunk comes down on its own, into
 * gret[gi][r * nchunks + c], and the sum goes into rank 0's (graph/routes.c). */
static inline int host_return(const sdp_graph_t *g, int gi)
{
    return g->R > 1 && g->P == 1 && g->plan.group[gi].grad_chunks && !g->plan.group[gi].grad_gpu;
}

/* The gradient of group gi's parameters that rank r accumulates into; NULL when they are frozen
 * (LoRA's base, on every rank). */
static inline sdp_rt_tensor_t *grad_of(sdp_graph_t *g, int gi, int r)
{
    return g->st->groups[gi].frozen ? NULL : train_grad(g, gi, r);
}

/* The working copy of group gi that step `step` computes with.  Synchronous (param_delay 0): the
 * one copy, which the update of step - 1 rewrote.  param_delay 1: step s reads buffer s % 2, which
 * the update of step s - 2 wrote, while the update of step s - 1 writes the other one (the update
 * of step s writes buffer s % 2 once step s's compute has read it).  step < 0: evaluation. */
static inline sdp_rt_tensor_t *work_of(const sdp_graph_t *g, int gi, int step)
{
    if (step < 0) /* evaluation: the copy the latest update wrote */
        step = g->last_update;
    if (!g->plan.param_delay || step < 0)
        return g->st->groups[gi].work;
    return step % 2 == 0 ? g->st->groups[gi].work : g->work2[gi];
}

/* The working copy rank r's compute reads at `step`: its own replica on the sharded route, its
 * compute copy of the group with work_chunks, otherwise the shared one (StarPU replicates it to
 * the rank's GPU). */
static inline sdp_rt_tensor_t *compute_work(const sdp_graph_t *g, int gi, int step, int r)
{
    if (g->rwork && step >= 0)
        return g->rwork[(size_t)r * g->st->ngroups + gi];
    if (g->cwork && g->cwork[gi] && step >= 0)
        return g->cwork[(size_t)r * g->st->ngroups + gi];
    return work_of(g, gi, step);
}

/* Whether group gi reaches the compute chunk by chunk (the plan's work_chunks, sdp_graph_fetch). */
static inline int chunked_fetch(const sdp_graph_t *g, int gi)
{
    return g->cwork && g->cwork[gi];
}

/* The chunks of group gi's working copy that its fetch into a compute copy sends (graph/routes.c):
 * every one, or with routed streaming those before the experts, which end the group, and the one
 * they start in (the MoE tasks copy the routed experts themselves, graph/moe.c). */
static inline int fetched_chunks(const sdp_graph_t *g, int gi)
{
    const struct sdp_group_state *gs = &g->st->groups[gi];
    if (!g->plan.group[gi].moe_routed)
        return gs->nchunks;
    size_t experts = sdp_state_off(g->st, gi, SDP_PT_EXP_GU);
    int c = 1;
    while (c < gs->nchunks && sdp_rt_tensor_part_offset(gs->work, c) < experts)
        c++;
    return c;
}

/* Whether the forward of micro-batch mb lets group gi's weights go after its last use, the
 * backward fetching them again: a bounded window, the rank's last micro-batch, a layer outside the
 * window's last groups, no replicas (graph/step.c). */
static inline int window_drops(const sdp_graph_t *g, int mb, int gi)
{
    return g->plan.window > 0 && (mb + 1) % g->nm_rank == 0 && gi <= g->L - g->plan.window &&
           !g->rwork;
}

/* The parameter version (updates applied) the compute of `step` reads. */
static inline int version_read(const sdp_graph_t *g, int step)
{
    return g->plan.param_delay && step > 0 ? step - 1 : step;
}

static inline struct sdp_task_opts opts(const sdp_graph_t *g, int step, int group, int mb,
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

/* Options o made to wait for the task tagged `after` (no change when after is 0). */
static inline struct sdp_task_opts gated(sdp_graph_t *g, struct sdp_task_opts o,
                                         unsigned long long after)
{
    if (after) {
        o.tag = sdp_graph_new_tag(g);
        o.after = o.tag ? after : 0;
    }
    return o;
}

/* tags and activations (graph/common.c) */
void sdp_graph_forget_tags(sdp_graph_t *g);
void sdp_graph_release_acts(struct layer_acts *a);
int sdp_graph_fill_i32(sdp_rt_tensor_t *t, const int32_t *src, size_t n);

/* a decoder layer's forward and backward (graph/layer.c) */
int sdp_graph_layer_fwd(sdp_graph_t *g, int step, int mb, int l, enum sdp_phase ph,
                        sdp_rt_tensor_t *x, const struct layer_acts *keep, struct layer_acts *a,
                        sdp_rt_tensor_t *out, unsigned long long after);
int sdp_graph_layer_bwd(sdp_graph_t *g, int step, int mb, int l, sdp_rt_tensor_t *x,
                        struct layer_acts *a, sdp_rt_tensor_t *dres, unsigned long long *done);
void sdp_graph_keep_for_recompute(struct layer_acts *a, enum sdp_act_place act);
int sdp_graph_recomputed(const sdp_graph_t *g, int l);
unsigned long long sdp_graph_bwd_gate(const sdp_graph_t *g, const unsigned long long *done, int l);

/* graph/nodes.c: group gi's gradient across the nodes (the ranks' sum of this node included), the
 * step's count of targets (*valid: this node's, then the run's) and its loss sum over every node's
 * micro-batches (mine: this node's, per micro-batch). */
int sdp_graph_reduce_nodes(sdp_graph_t *g, int step, int gi, struct sdp_task_opts o);
int sdp_graph_nodes_valid(sdp_graph_t *g, long long *valid);
int sdp_graph_nodes_loss(sdp_graph_t *g, const double *mine, double *sum);
/* parameter dispatch, gradient zeroing, norms and rank reduction (graph/routes.c) */
int sdp_graph_owner_of(const sdp_graph_t *g, int gi, int c);
int sdp_graph_fetch(sdp_graph_t *g, int step, int gi, enum sdp_phase ph, unsigned long long after,
                    int r);
int sdp_graph_dispatch(sdp_graph_t *g, int step, int mb, int gi);
void sdp_graph_window_let_go(sdp_graph_t *g, int step, int gi, int r);
int sdp_graph_chunks_create(sdp_graph_t *g);
void sdp_graph_chunks_destroy(sdp_graph_t *g);
int sdp_graph_zero_grad(sdp_graph_t *g, int step, int mb, int gi, unsigned long long after);
int sdp_graph_norms(sdp_graph_t *g, int step, int gi);
int sdp_graph_reduce_ranks(sdp_graph_t *g, int step);
void sdp_graph_window_release(sdp_graph_t *g, int step, int gi, int r);

/* gradient packs and AdamW per chunk (graph/optim.c) */
int sdp_graph_packs(const sdp_graph_t *g, int gi);
sdp_rt_tensor_t **sdp_graph_grad_out(const sdp_graph_t *g, int gi);
int sdp_graph_grad_chunks(sdp_graph_t *g, int step, int gi);
int sdp_graph_mlp_early(const sdp_graph_t *g, int gi, int mb);
size_t sdp_graph_packed_len(size_t covered, size_t n);
int sdp_graph_norms_if_final(sdp_graph_t *g, int step, int mb, int gi);
int sdp_graph_chunk_segs(const sdp_graph_t *g, int gi, int c, int rows,
                         struct sdp_adamw_segment **out);
int sdp_graph_update_chunk(sdp_graph_t *g, int step, int gi, int c, int rows);
int sdp_graph_optimizer(sdp_graph_t *g, int step, int update);
int sdp_graph_refresh_work(sdp_graph_t *g, int step);
int sdp_graph_refresh_work2(sdp_graph_t *g, int step);

/* LoRA: the adapters' tasks, gradient, norms and updates (graph/lora.c) */
int sdp_graph_lora_fwd(sdp_graph_t *g, const struct sdp_task_opts *o, int l, enum sdp_ptensor kind,
                       sdp_rt_tensor_t *y, int ldy, int col0, sdp_rt_tensor_t *x, int N);
int sdp_graph_lora_bwd(sdp_graph_t *g, const struct sdp_task_opts *o, int l, enum sdp_ptensor kind,
                       sdp_rt_tensor_t *dx, sdp_rt_tensor_t *dy, int ldy, int col0,
                       sdp_rt_tensor_t *x, int N);
int sdp_graph_lora_create(sdp_graph_t *g);
int sdp_graph_lora_zero(sdp_graph_t *g, int step, int mb, int gi, unsigned long long after);
int sdp_graph_lora_norms(sdp_graph_t *g, int step, int gi);
int sdp_graph_lora_update(sdp_graph_t *g, int step);

/* the tied embedding and LM head, the host lookup and its lookahead (graph/embed.c) */
int sdp_graph_pack_rows(sdp_graph_t *g, int step);
int sdp_graph_early_embed(const sdp_graph_t *g);
int sdp_graph_defer_segs(const sdp_graph_t *g, int c, int rows, struct sdp_adamw_segment **out,
                         size_t *gbase);
int sdp_graph_put_rows(sdp_graph_t *g, int step);
int sdp_graph_embed_early(sdp_graph_t *g, int step);
int sdp_graph_lookup_host(sdp_graph_t *g, int step, int mb, sdp_rt_tensor_t *ids);
int sdp_graph_defer_rows(const sdp_graph_t *g, int update);
int sdp_graph_lookup_ahead(sdp_graph_t *g, int step);
int sdp_graph_lookup_host_create(sdp_graph_t *g);

/* a sparse layer's MLP, the load-balancing loss, the experts' usage (graph/moe.c) */
int sdp_graph_sparse(const sdp_graph_t *g, int gi);
size_t sdp_graph_moe_acts_elems(const sdp_graph_t *g, int N);
int sdp_graph_moe_fwd(sdp_graph_t *g, const struct sdp_task_opts *o, int gi, sdp_rt_tensor_t *W,
                      struct layer_acts *a, sdp_rt_tensor_t *out);
int sdp_graph_moe_bwd(sdp_graph_t *g, const struct sdp_task_opts *o, int gi, sdp_rt_tensor_t *W,
                      sdp_rt_tensor_t *G, struct layer_acts *a, sdp_rt_tensor_t *dres,
                      sdp_rt_tensor_t *dh2);
sdp_rt_tensor_t *sdp_graph_moe_used(const sdp_graph_t *g, int gi);
int sdp_graph_moe_loss(const sdp_graph_t *g, double *aux);
int sdp_graph_moe_sync(sdp_graph_t *g, struct sdp_step_result *res);
int sdp_graph_moe_create(sdp_graph_t *g);
void sdp_graph_moe_destroy(sdp_graph_t *g);

/* RoPE parameters and document masking (graph/seq.c) */
void sdp_graph_rope_params(struct sdp_rope_params *r, const struct sdp_model_cfg *m);
int sdp_graph_docs_create(sdp_graph_t *g);
void sdp_graph_docs_destroy(sdp_graph_t *g);
int sdp_graph_docs_check(const sdp_graph_t *g, int step, const int32_t *segs);

#endif
