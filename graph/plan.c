/* SPDX-License-Identifier: MIT */
/* The per-layer plan (plan.h): today's knobs turned into one row per parameter group, overrides
 * per layer range, the checks of what the graph can build, and the table --print-plan shows. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/sdp_log.h"
#include "codelets/sdp_tasks.h"
#include "graph/plan.h"

/* The first chunk of group gi that holds only MLP weights (gate, up, down, the group's last
 * tensors), or -1 when no chunk does or they are not the group's tail. */
static int mlp_chunk0(const struct sdp_state *st, int gi)
{
    const struct sdp_group_state *gs = &st->groups[gi];
    size_t tail = (size_t)-1, end = 0;
    if (gs->frozen) /* LoRA's base: no gradient, no update */
        return -1;
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

/* Whether the AdamW of a decoder layer can run on the GPU (train.gpu_update): one rank, compute
 * on a GPU, and the bf16 return and the working copies on the host (every layer group returns
 * bf16 or none does, and is staged or not like the others) or LoRA, whose adapters' fp32 gradient
 * is made on the GPU and whose working copy the update writes in place. */
static int gpu_update_applies(const struct sdp_plan *p, const struct sdp_state *st)
{
    return sdp_plan_one_rank(p) && sdp_tasks_compute_on_gpu() && p->nlayers >= 1 &&
           (st->lora.rank > 0 || (st->groups[1].grad_ret && !st->groups[1].staged));
}

/* Whether the early MLP update can apply to decoder layer gi (mlp_early, graph/optim.c): one
 * rank, the bf16 return, no clipping, the update on the host. */
static int mlp_early_applies(const struct sdp_plan *p, int gi)
{
    const struct sdp_plan_group *pg = &p->group[gi];
    return sdp_plan_one_rank(p) && gi >= 1 && gi <= p->nlayers && pg->grad_bf16 && !p->clip &&
           !pg->update_gpu;
}

/* The activations of decoder layer l under recompute, keep_last and keep_mlp: the top keep_last
 * layers keep theirs (the last layer's backward follows the LM head); of the others the top
 * keep_mlp keep their mid residual and gate/up projection, whose backward comes first. */
static enum sdp_act_place act_of(const struct sdp_graph_conf *c, int L, int l)
{
    if (!c->recompute || l > L - c->keep_last)
        return SDP_ACT_KEEP;
    if (l > L - c->keep_last - c->keep_mlp)
        return SDP_ACT_KEEP_MLP;
    return c->recompute == SDP_RECOMPUTE_SELECTIVE ? SDP_ACT_SELECTIVE
           : c->recompute == SDP_RECOMPUTE_ATTN    ? SDP_ACT_KEEP_ATTN
                                                   : SDP_ACT_RECOMPUTE;
}

static void fill_group(struct sdp_plan *p, const struct sdp_state *st,
                       const struct sdp_graph_conf *c, int gi)
{
    struct sdp_plan_group *pg = &p->group[gi];
    const struct sdp_group_state *gs = &st->groups[gi];
    int L = p->nlayers, layer = gi >= 1 && gi <= L;
    const unsigned lora_targets = sdp_lora_layer_targets(&c->lora, &st->cfg, gi); /* 0: none */
    pg->act = layer ? act_of(c, L, gi) : SDP_ACT_KEEP;
    pg->offload = pg->act != SDP_ACT_KEEP && c->offload_inputs;
    pg->work_gpu = gs->staged;
    pg->grad_gpu =
        c->grad_route_gpu ? c->grad_route_gpu[gi] : c->grad_route == SDP_ROUTE_GPU_REDUCE;
    pg->grad_bf16 = gs->grad_ret != NULL;
    pg->norms_gpu = (sdp_plan_one_rank(p) && sdp_tasks_norms_on_gpu()) ||
                    (!sdp_plan_one_rank(p) && pg->grad_gpu);
    pg->nchunks = gs->nchunks;
    pg->chunk_elems = st->chunk_elems;
    /* LoRA: the adapters' master and moments move to the GPU with their update (graph/lora.c);
     * a sparse layer's full update stays on the host, whose AdamW skips the experts without token
     */
    pg->update_gpu =
        layer && gi <= c->gpu_update && gpu_update_applies(p, st) &&
        (c->lora.rank > 0 ? lora_targets != 0 : !sdp_model_layer_sparse(&st->cfg, gi - 1));
    /* with the working copies on the host, only layer 1's update ends the step early enough to
     * pay for the stage it then takes (graph/optim.c, mlp_early) */
    pg->mlp_early = c->mlp_early >= 0 && mlp_early_applies(p, gi) &&
                            (gs->staged || (gi == 1 && c->mlp_early >= 1))
                        ? mlp_chunk0(st, gi)
                        : -1;
    pg->embed_early = gi == 0 && st->cfg.tie_word_embeddings && pg->grad_bf16 &&
                      sdp_plan_one_rank(p) && c->embed_early >= 0 && !p->clip &&
                      (!st->work_staged || st->embed_staged);
    if (layer && lora_targets) {
        pg->lora_targets = lora_targets;
        pg->lora_rank = c->lora.rank;
    }
}

/* The chunk pipeline (work_chunks, grad_chunks): off by default, where the whole-group fetch
 * measured faster on the GPU-bound default workload (bench/results/2026-12-07-h100-lanes.md);
 * auto: where the compute runs on a GPU (on CPU workers the compute reads the host's copies
 * themselves); on: everywhere (2).  Its copies are the transfers themselves
 * (codelets/cl_common.h), not a GPU copy after StarPU's transfer, the form that measured slower
 * and bigger on a GPU than the whole-group fetch (bench/results/2026-12-06-h100-predict3.md). */
int sdp_plan_chunk_pipeline(int on_gpu)
{
    if (sdp_env_is("SDP_CHUNK_PIPELINE", "on"))
        return 2;
    return sdp_env_is("SDP_CHUNK_PIPELINE", "auto") && on_gpu;
}

/* The residual stream in fp32 (train.residual_dtype), asked and with bf16 working copies: the
 * fp32 ones have nothing to widen. */
int sdp_plan_residual_f32(const struct sdp_graph_conf *c, enum sdp_dtype work_dtype)
{
    return c->residual_f32 > 0 && work_dtype == SDP_BF16;
}

static int pipeline_wanted(void)
{
    return sdp_plan_chunk_pipeline(sdp_tasks_compute_on_gpu());
}

/* Routed streaming (docs/moe.md) of sparse layer gi: its working copy reaches the compute chunk by
 * chunk, less the chunks holding only experts, and its MoE tasks copy the experts their tokens
 * route to.  Where the compute runs on a GPU, unless SDP_MOE_ROUTED=off (every expert crosses: the
 * ablation) or simulated; on CPU workers where the chunk pipeline is on everywhere (the tests' way
 * to run it). */
static int moe_routed_wanted(const struct sdp_state *st, int gi)
{
#ifdef SDP_SIMGRID /* the tasks' own copies, which the simulation would not see */
    if (sdp_tasks_compute_on_gpu())
        return 0;
#endif
    return gi >= 1 && gi <= st->cfg.num_layers && sdp_model_layer_sparse(&st->cfg, gi - 1) &&
           !sdp_env_is("SDP_MOE_ROUTED", "off") &&
           (sdp_tasks_compute_on_gpu() || sdp_plan_chunk_pipeline(0) == 2);
}

/* Whether group gi's working copy goes to the compute chunk by chunk (work_chunks): one rank or
 * the replicated route (the sharded one sends chunks already), the copy on the host in more than
 * one chunk, written by host updates (not the GPU's), one copy (param_delay 0), not the embedding
 * that the host lookup reads there; a frozen group (LoRA's base) only for routed streaming under a
 * bounded window (without one, its copy stays on the GPU and crosses once). */
static int work_chunks_of(const struct sdp_plan *p, const struct sdp_state *st, int gi)
{
    const struct sdp_group_state *gs = &st->groups[gi];
    return ((pipeline_wanted() && !gs->frozen) ||
            (moe_routed_wanted(st, gi) && (!gs->frozen || p->window > 0))) &&
           (p->nranks == 1 || p->param_route != SDP_ROUTE_SHARDED) && !p->param_delay &&
           !gs->staged && gs->nchunks > 1 && (!p->group[gi].update_gpu || gs->frozen) &&
           !(gi == 0 && p->lookup_host);
}

/* Whether sparse layer gi's gradient returns only the experts that received a token (grad_routed):
 * trained (not LoRA's frozen base), one rank, the update on the host, where routed streaming
 * applies. */
static int grad_routed_of(const struct sdp_plan *p, const struct sdp_state *st, int gi)
{
    return moe_routed_wanted(st, gi) && !st->groups[gi].frozen && sdp_plan_one_rank(p) &&
           !p->group[gi].update_gpu;
}

/* Whether group gi's fp32 gradient returns chunk by chunk (grad_chunks): more than one chunk, not
 * frozen (nor LoRA's adapters), where the gradient is on a GPU when final (one rank with the norms
 * there) or the ranks sum (on rank 0's GPU, or on one node's host: each rank's chunks come down on
 * their own), or anywhere with SDP_CHUNK_PIPELINE=on. */
static int grad_chunks_of(const struct sdp_plan *p, const struct sdp_state *st, int gi)
{
    const struct sdp_group_state *gs = &st->groups[gi];
    const struct sdp_plan_group *pg = &p->group[gi];
    int wanted = pipeline_wanted();
    wanted = wanted ? wanted : grad_routed_of(p, st, gi); /* the routed return takes it */
    return wanted && !pg->grad_bf16 && !gs->frozen && p->lora.rank == 0 && gs->nchunks > 1 &&
           (wanted == 2 || (sdp_plan_one_rank(p) ? pg->norms_gpu : pg->grad_gpu || p->nodes == 1));
}

/* The plan's grad_routed: routing applies, and the return comes down chunk by chunk. */
static int grad_routed(const struct sdp_plan *p, const struct sdp_state *st, int gi)
{
    const struct sdp_plan_group *pg = &p->group[gi];
    return (pg->grad_bf16 || pg->grad_chunks) && grad_routed_of(p, st, gi);
}

int sdp_plan_init(struct sdp_plan *p, const struct sdp_state *st, const struct sdp_graph_conf *c)
{
    const struct sdp_model_cfg *m = &st->cfg;
    memset(p, 0, sizeof(*p));
    if (c->keep_last < 0 || c->keep_last > m->num_layers)
        return sdp_err(-EINVAL, "graph: keep_last = %d is outside 0..%d (the model's layers)",
                       c->keep_last, m->num_layers);
    if (c->keep_mlp < 0 || c->keep_mlp > m->num_layers)
        return sdp_err(-EINVAL, "graph: keep_mlp = %d is outside 0..%d (the model's layers)",
                       c->keep_mlp, m->num_layers);
    p->nlayers = m->num_layers;
    p->ngroups = st->ngroups;
    p->group = calloc((size_t)p->ngroups, sizeof(*p->group));
    if (!p->group)
        return sdp_err(-ENOMEM, "plan of %d groups", p->ngroups);
    p->nranks = c->nranks > 1 ? c->nranks : 1;
    p->nodes = c->nodes > 1 ? c->nodes : 1;
    p->param_route = c->param_route;
    p->window = c->window;
    p->bwd_lookahead = c->bwd_lookahead;
    p->param_delay = c->param_delay;
    p->clip = c->max_grad_norm > 0 || c->skip_nonfinite;
    p->lora = c->lora;
    p->residual_f32 = sdp_plan_residual_f32(c, st->work_dtype);
    p->attn_row_tokens = c->doc_mask ? c->attn_row_tokens : 0;
    if (p->residual_f32 && (c->lora.rank > 0 || sdp_model_num_sparse_layers(m) > 0)) {
        free(p->group);
        p->group = NULL;
        sdp_err(-EINVAL, "graph: train.residual_dtype fp32 with %s",
                c->lora.rank > 0 ? "LoRA adapters" : "sparse (MoE) layers");
        sdp_hint("train.residual_dtype fp32 covers dense full training; set it to bf16 here");
        return -EINVAL;
    }
    for (int gi = 0; gi < p->ngroups; gi++)
        fill_group(p, st, c, gi);
    if (c->embed_lookup_host && (!sdp_plan_one_rank(p) || st->groups[0].staged))
        SDP_WARN("train.embed_lookup host applies with one rank and the embedding's working copy "
                 "on the host; the lookup runs where the compute runs");
    p->lookup_host = c->embed_lookup_host && sdp_plan_one_rank(p) && !st->groups[0].staged;
    p->rows_pack =
        m->tie_word_embeddings && st->groups[0].grad_ret && !sdp_env_is("SDP_ROWS_PACK", "off");
    p->defer_rows = p->lookup_host && p->rows_pack && p->group[0].embed_early && !p->param_delay &&
                    !sdp_env_is("SDP_EMBED_DEFER", "off");
    p->gpu_writeback = sdp_env_long("SDP_GPU_UPDATE_WRITEBACK", 0) > 0;
    for (int gi = 0; gi < p->ngroups; gi++) {
        p->group[gi].work_chunks = work_chunks_of(p, st, gi);
        p->group[gi].grad_chunks = grad_chunks_of(p, st, gi);
        p->group[gi].moe_routed = p->group[gi].work_chunks && moe_routed_wanted(st, gi);
        p->group[gi].grad_routed = grad_routed(p, st, gi);
    }
    if (c->gpu_update > 0 && !gpu_update_applies(p, st))
        SDP_WARN("train.gpu_update %d does not apply here (it needs one rank, compute on a GPU, "
                 "%s): every update runs on the host",
                 c->gpu_update,
                 c->lora.rank ? "as LoRA's adapters have"
                              : "the bf16 gradient return and the working copies on the host");
    return 0;
}

/* value among names[0..n): its index, or -1 */
static int pick(const char *value, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(value, names[i]) == 0)
            return i;
    return -1;
}

static const char *const act_names[] = { "keep", "recompute", "selective", "keep-mlp",
                                         "keep-attn" };
static const char *const onoff[] = { "off", "on" };

/* Set key to value on group gi (checked by the caller: known key and value). */
static void set_one(struct sdp_plan *p, const struct sdp_state *st, int gi, int key, int v)
{
    struct sdp_plan_group *pg = &p->group[gi];
    switch (key) {
    case 0: /* activations */
        pg->act = (enum sdp_act_place)v;
        pg->offload = pg->offload && pg->act != SDP_ACT_KEEP;
        break;
    case 1: /* offload */
        pg->offload = v;
        break;
    case 2: /* grad_route */
        pg->grad_gpu = v;
        pg->norms_gpu = !sdp_plan_one_rank(p) ? v : pg->norms_gpu;
        pg->grad_chunks = st && grad_chunks_of(p, st, gi);
        pg->grad_routed = st && grad_routed(p, st, gi);
        break;
    case 3: /* update */
        pg->update_gpu = v;
        pg->mlp_early = v ? -1 : pg->mlp_early;
        pg->work_chunks =
            st && work_chunks_of(p, st, gi); /* the GPU's update puts, unless frozen */
        pg->moe_routed = pg->work_chunks && moe_routed_wanted(st, gi);
        pg->grad_chunks = st && grad_chunks_of(p, st, gi);
        pg->grad_routed = st && grad_routed(p, st, gi);
        break;
    default:                                                   /* mlp_early */
        pg->mlp_early = !v ? -1 : st ? mlp_chunk0(st, gi) : 1; /* no state: as asked */
        break;
    }
}

int sdp_plan_set(struct sdp_plan *p, const struct sdp_state *st, int first, int last,
                 const char *key, const char *value)
{
    static const char *const keys[] = { "activations", "offload", "grad_route", "update",
                                        "mlp_early" };
    static const char *const allowed[] = { "keep, recompute, selective, keep-mlp or keep-attn",
                                           "on or off", "cpu or gpu", "host or gpu", "on or off" };
    static const char *const routes[] = { "cpu", "gpu" }, *const homes[] = { "host", "gpu" };
    int k = pick(key, keys, 5), v, L = p->nlayers;
    if (k < 0)
        return sdp_err(-EINVAL,
                       "plan: unknown key '%s' (activations, offload, grad_route, update, "
                       "mlp_early)",
                       key);
    v = k == 0   ? pick(value, act_names, 5)
        : k == 2 ? pick(value, routes, 2)
        : k == 3 ? pick(value, homes, 2)
                 : pick(value, onoff, 2);
    if (v < 0)
        return sdp_err(-EINVAL, "plan: %s '%s' is not one of %s", key, value, allowed[k]);
    if (first < 0 || last > L + 1 || first > last)
        return sdp_err(-EINVAL, "plan: groups %d..%d are outside 0..%d (embedding, layers, head)",
                       first, last, L + 1);
    if (k != 2 && (first < 1 || last > L))
        return sdp_err(-EINVAL, "plan: %s applies to the decoder layers 1..%d, not %d..%d", key, L,
                       first, last);
    for (int gi = first; gi <= last; gi++) {
        if (k == 4 && v && st && mlp_chunk0(st, gi) < 0)
            return sdp_err(-EINVAL,
                           "plan: layer %d has no chunk of MLP weights alone to update "
                           "early (train.chunk_mib smaller than its MLP)",
                           gi);
        set_one(p, st, gi, k, v);
    }
    return 0;
}

/* The plan's LoRA against the model: a valid configuration, adapters only on decoder layers and
 * with the run's rank, and at least one adapted layer. */
static int check_lora(const struct sdp_plan *p, const struct sdp_state *st)
{
    char why[256];
    int any = 0;
    if (p->lora.rank < 1)
        return 0;
    if (sdp_lora_validate(&p->lora, &st->cfg, why, sizeof(why)))
        return sdp_err(-EINVAL, "plan: %s", why);
    for (int gi = 0; gi < p->ngroups; gi++) {
        const struct sdp_plan_group *pg = &p->group[gi];
        int layer = gi >= 1 && gi <= p->nlayers;
        if (pg->lora_targets &&
            (!layer || pg->lora_rank != p->lora.rank || (pg->lora_targets & ~p->lora.targets)))
            return sdp_err(-EINVAL,
                           "plan: group %d's adapters are not the run's (decoder layers, "
                           "rank %d)",
                           gi, p->lora.rank);
        any |= pg->lora_targets != 0;
    }
    if (!any)
        return sdp_err(-EINVAL, "plan: lora.rank %d but no layer carries an adapter", p->lora.rank);
    return 0;
}

/* The configuration's checks that do not depend on a group. */
static int check_run(const struct sdp_plan *p, const struct sdp_state *st,
                     const struct sdp_graph_conf *c)
{
    int sharded = p->nranks > 1 && c->param_route == SDP_ROUTE_SHARDED;
    if (c->micro_batch < 1 || c->n_micro < 1 || c->seq_len < 1)
        return sdp_err(-EINVAL, "graph: micro_batch=%d n_micro=%d seq_len=%d must be positive",
                       c->micro_batch, c->n_micro, c->seq_len);
    if (p->nranks > SDP_MAX_RANKS || c->n_micro % p->nranks != 0)
        return sdp_err(-EINVAL, "graph: %d micro-batches cannot be shared by %d ranks (at most %d)",
                       c->n_micro, p->nranks, SDP_MAX_RANKS);
    if (st->work_staged && (c->window > 0 || c->param_delay || sharded))
        return sdp_err(-EINVAL,
                       "graph: working copies off the host (train.work_home: gpu) need "
                       "window 0 (no gpu_memory_gib), param_delay 0 and the replicated route");
    if (st->groups[0].staged && !st->work_staged && (c->param_delay || sharded))
        return sdp_err(-EINVAL, "graph: the embedding's working copy off the host "
                                "(train.embed_home: gpu) needs param_delay 0 and the replicated "
                                "route");
    if (p->nlayers != st->cfg.num_layers || p->ngroups != st->ngroups)
        return sdp_err(-EINVAL, "plan: made for %d layers, the model has %d", p->nlayers,
                       st->cfg.num_layers);
    return check_lora(p, st);
}

/* A decoder layer's or the embedding's and head's row against what the graph can build. */
static int check_group(const struct sdp_plan *p, const struct sdp_state *st, int gi)
{
    const struct sdp_plan_group *pg = &p->group[gi];
    int layer = gi >= 1 && gi <= p->nlayers;
    if (!layer && (pg->act != SDP_ACT_KEEP || pg->offload || pg->update_gpu || pg->mlp_early > 0))
        return sdp_err(-EINVAL,
                       "plan: group %d (%s) keeps its activations and updates on the "
                       "host",
                       gi, gi ? "head" : "embedding");
    if (pg->offload && pg->act == SDP_ACT_KEEP_ATTN) /* bench/results/2026-12-07-h100-long.md */
        return sdp_err(-EINVAL,
                       "plan: layer %d keeps its attention output and offloads: not built (the "
                       "host's copies grew without bound on a GPU); keep-attn stays on the GPU",
                       gi);
    if (pg->offload && pg->act == SDP_ACT_KEEP)
        return sdp_err(-EINVAL,
                       "plan: layer %d offloads its input but keeps its activations "
                       "(offload is for recomputed layers)",
                       gi);
    if (pg->update_gpu && sdp_model_layer_sparse(&st->cfg, gi - 1) && p->lora.rank <= 0)
        return sdp_err(-EINVAL,
                       "plan: layer %d is a Qwen3-MoE sparse layer, whose update runs on the host "
                       "(the GPU's AdamW does not skip the experts without token; LoRA's adapters "
                       "may update on the GPU)",
                       gi);
    if (pg->update_gpu && !gpu_update_applies(p, st))
        return sdp_err(-EINVAL,
                       "plan: layer %d's update on the GPU needs one rank, compute on a "
                       "GPU, the bf16 gradient return and the working copies on the host",
                       gi);
    if (pg->mlp_early > 0 && !mlp_early_applies(p, gi))
        return sdp_err(-EINVAL,
                       "plan: layer %d's early MLP update needs one rank, the bf16 "
                       "return, no clipping and its update on the host",
                       gi);
    if (pg->mlp_early == 0 || pg->mlp_early >= pg->nchunks)
        return sdp_err(-EINVAL,
                       "plan: layer %d has no chunk of MLP weights alone to update early "
                       "(chunk %d of %d)",
                       gi, pg->mlp_early, pg->nchunks);
    if (pg->grad_bf16 != (st->groups[gi].grad_ret != NULL) || pg->work_gpu != st->groups[gi].staged)
        return sdp_err(-EINVAL,
                       "plan: group %d's gradient dtype and working copy's home are the "
                       "state's (train.grad_dtype, work_home, embed_home)",
                       gi);
    if (pg->embed_early && (gi != 0 || !p->group[0].grad_bf16 || !sdp_plan_one_rank(p) || p->clip))
        return sdp_err(-EINVAL, "plan: the embedding's early update is for group 0 with one rank, "
                                "the bf16 return and no clipping");
    return 0;
}

int sdp_plan_check(const struct sdp_plan *p, const struct sdp_state *st,
                   const struct sdp_graph_conf *c)
{
    int rc = check_run(p, st, c);
    for (int gi = 0; !rc && gi < p->ngroups; gi++)
        rc = check_group(p, st, gi);
    return rc;
}

static int same_row(const struct sdp_plan_group *a, const struct sdp_plan_group *b)
{
    return a->act == b->act && a->offload == b->offload && a->work_gpu == b->work_gpu &&
           a->work_chunks == b->work_chunks && a->grad_chunks == b->grad_chunks &&
           a->moe_routed == b->moe_routed && a->grad_routed == b->grad_routed &&
           a->grad_gpu == b->grad_gpu && a->grad_bf16 == b->grad_bf16 &&
           a->norms_gpu == b->norms_gpu && a->nchunks == b->nchunks &&
           a->update_gpu == b->update_gpu && a->mlp_early == b->mlp_early &&
           a->embed_early == b->embed_early && a->lora_targets == b->lora_targets &&
           a->lora_rank == b->lora_rank;
}

/* " q_proj,v_proj": the adapted linears of a row */
static void lora_targets_print(FILE *f, unsigned targets)
{
    const char *sep = " ";
    for (int i = 0; i < SDP_LORA_NTARGETS; i++)
        if (targets & SDP_LORA_BIT(sdp_lora_kinds[i])) {
            fprintf(f, "%s%s", sep, sdp_lora_target_name(sdp_lora_kinds[i]));
            sep = ",";
        }
}

static void print_row(const struct sdp_plan *p, FILE *f, int g0, int g1)
{
    const struct sdp_plan_group *pg = &p->group[g0];
    char name[32], update[48];
    if (g0 == 0)
        snprintf(name, sizeof(name), "embedding");
    else if (g0 == SDP_PLAN_HEAD(p))
        snprintf(name, sizeof(name), "head");
    else if (g0 == g1)
        snprintf(name, sizeof(name), "%d", g0);
    else
        snprintf(name, sizeof(name), "%d-%d", g0, g1);
    if (p->lora.rank > 0) /* the adapters' AdamW on the host, or on the GPU (update_gpu) */
        snprintf(update, sizeof(update), "%s",
                 !pg->lora_targets ? "frozen"
                 : pg->update_gpu  ? "adapters, gpu"
                                   : "adapters");
    else if (pg->embed_early)
        snprintf(update, sizeof(update), "host, rows early");
    else if (pg->mlp_early > 0)
        snprintf(update, sizeof(update), "host, MLP early from chunk %d", pg->mlp_early);
    else
        snprintf(update, sizeof(update), "%s", pg->update_gpu ? "gpu" : "host");
    fprintf(f, "%-10s %-10s %-8s %-6s %-6s %-6s %-6s %4d x %-10zu %s", name, act_names[pg->act],
            onoff[pg->offload],
            pg->work_gpu      ? "gpu"
            : pg->moe_routed  ? "host/r"
            : pg->work_chunks ? "host/c"
                              : "host",
            pg->grad_gpu ? "gpu" : "cpu",
            pg->grad_routed && pg->grad_bf16 ? "bf16/r"
            : pg->grad_routed                ? "f32/r"
            : pg->grad_bf16                  ? "bf16"
            : pg->grad_chunks                ? "f32/c"
                                             : "fp32",
            pg->norms_gpu ? "gpu" : "host", pg->nchunks, pg->chunk_elems, update);
    if (p->lora.rank > 0 && pg->lora_targets)
        lora_targets_print(f, pg->lora_targets);
    fputc('\n', f);
}

void sdp_plan_print(const struct sdp_plan *p, FILE *f)
{
    fprintf(f,
            "plan: %d layers, %d rank%s (%s), window %d, lookahead %d, param_delay %d, "
            "lookup %s, rows pack %s, defer rows %s, clipping %s\n",
            p->nlayers, p->nranks, p->nranks > 1 ? "s" : "",
            p->param_route == SDP_ROUTE_SHARDED ? "sharded" : "replicated", p->window,
            p->bwd_lookahead, p->param_delay, p->lookup_host ? "host" : "compute",
            onoff[p->rows_pack], onoff[p->defer_rows], onoff[p->clip]);
    if (p->lora.rank > 0)
        fprintf(f,
                "lora: rank %d, alpha %g (scale %g), dropout %g; the base is frozen, the "
                "adapters train (fp32 masters and moments)\n",
                p->lora.rank, p->lora.alpha, sdp_lora_scale(&p->lora), p->lora.dropout);
    fprintf(f, "%-10s %-10s %-8s %-6s %-6s %-6s %-6s %-17s %s\n", "group", "activation", "offload",
            "params", "reduce", "grad", "norms", "chunks x elems", "update");
    for (int g0 = 0; g0 < p->ngroups;) {
        int g1 = g0;
        while (g0 >= 1 && g1 + 1 < SDP_PLAN_HEAD(p) && same_row(&p->group[g0], &p->group[g1 + 1]))
            g1++;
        print_row(p, f, g0, g1);
        g0 = g1 + 1;
    }
}

int sdp_plan_copy(struct sdp_plan *dst, const struct sdp_plan *src)
{
    *dst = *src;
    dst->group = malloc((size_t)src->ngroups * sizeof(*dst->group));
    if (!dst->group)
        return sdp_err(-ENOMEM, "plan of %d groups", src->ngroups);
    memcpy(dst->group, src->group, (size_t)src->ngroups * sizeof(*dst->group));
    return 0;
}

void sdp_plan_free(struct sdp_plan *p)
{
    free(p->group);
    p->group = NULL;
}
