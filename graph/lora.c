/* SPDX-License-Identifier: MIT */
/* LoRA in the step graph (docs/lora.md): the adapters' tasks beside each adapted linear of a
 * frozen base (lora_fwd, lora_bwd) with the dropout of their input, their gradient's zeroing and
 * squared norms, and their AdamW.
 * The base has no gradient: its norms' weight gradients, which the norm backward kernels always
 * write, go to a small sink that nothing reads.  With data-parallel ranks each rank accumulates
 * into adapter gradients of its own (train_grad), which the ranks' reduction adds into rank 0's
 * like a parameter group's (graph/routes.c).  param_delay 0 (sdp_graph_create_plan). */
#include "config.h"

#include <string.h>

#include "base/sdp_log.h"
#include "base/splitmix.h"
#include "graph/graph_internal.h"

/* The key of the dropout mask of layer l's adapter on target t (sdp_lora_kinds' index) at the
 * step's micro-batch mb (docs/lora.md): splitmix64 folded over the run's seed, the step, the
 * micro-batch, the layer and the target, so that a micro-batch's mask is the same in its forward,
 * its recomputation and its backward, on any rank and after a resume. */
static uint64_t drop_key(unsigned long long seed, int step, int mb, int l, int t)
{
    uint64_t k = sdp_splitmix64(seed);
    k = sdp_splitmix64(k ^ (uint64_t)step);
    k = sdp_splitmix64(k ^ (uint64_t)mb);
    k = sdp_splitmix64(k ^ (uint64_t)l);
    return sdp_splitmix64(k ^ (uint64_t)t);
}

/* Layer l's adapter's dropout at o's step and micro-batch: while training only (not in an
 * evaluation: sdp_graph_step without an update, or a step < 0) */
static void dropout(const sdp_graph_t *g, const struct sdp_task_opts *o, int l,
                    enum sdp_ptensor kind, struct sdp_lora_dims *d)
{
    double p = g->plan.lora.dropout;
    int t = 0;
    if (!(p > 0) || !g->updating || o->hint.step < 0)
        return;
    while (t < SDP_LORA_NTARGETS && sdp_lora_kinds[t] != kind)
        t++;
    d->drop_key = drop_key(g->c.seed, o->hint.step, o->hint.mb, l, t);
    d->drop_thr = (uint32_t)(p * 16777216.0 + 0.5);
    d->drop_scale = (float)(1.0 / (1.0 - p));
}

/* The dimensions of layer l's adapter on the linear `kind`; 0 when the plan gives it none. */
static int dims(const sdp_graph_t *g, int l, enum sdp_ptensor kind, int N, int ldy, int col0,
                struct sdp_lora_dims *d)
{
    const struct sdp_lora_state *ls = g->st->groups[l].lora;
    memset(d, 0, sizeof(*d));
    if (!ls || !(g->plan.group[l].lora_targets & SDP_LORA_BIT(kind)))
        return 0;
    for (int i = 0; i + 1 < ls->ntensors; i += 2)
        if (ls->tensors[i].kind == kind) {
            d->a_off = ls->tensors[i].offset;
            d->b_off = ls->tensors[i + 1].offset;
            d->in = ls->tensors[i].cols;
            d->out = ls->tensors[i + 1].rows;
        }
    d->M = N;
    d->r = g->plan.lora.rank;
    d->ldy = ldy;
    d->col0 = col0;
    d->s = (float)sdp_lora_scale(&g->plan.lora);
    return 1;
}

int sdp_graph_lora_fwd(sdp_graph_t *g, const struct sdp_task_opts *o, int l, enum sdp_ptensor kind,
                       sdp_rt_tensor_t *y, int ldy, int col0, sdp_rt_tensor_t *x, int N)
{
    struct sdp_lora_dims d;
    if (!dims(g, l, kind, N, ldy, col0, &d))
        return 0;
    dropout(g, o, l, kind, &d);
    return sdp_task_lora_fwd(o, y, x, g->st->groups[l].lora->work, &d);
}

int sdp_graph_lora_bwd(sdp_graph_t *g, const struct sdp_task_opts *o, int l, enum sdp_ptensor kind,
                       sdp_rt_tensor_t *dx, sdp_rt_tensor_t *dy, int ldy, int col0,
                       sdp_rt_tensor_t *x, int N)
{
    struct sdp_lora_dims d;
    const struct sdp_lora_state *ls = g->st->groups[l].lora;
    if (!dims(g, l, kind, N, ldy, col0, &d))
        return 0;
    dropout(g, o, l, kind, &d);
    /* into the adapters' gradient of the micro-batch's rank (the ranks' sum: reduce_ranks) */
    return sdp_task_lora_bwd(o, dx, dy, x, ls->work, train_grad(g, l, o->hint.rank), &d);
}

int sdp_graph_lora_create(sdp_graph_t *g)
{
    struct sdp_state *st = g->st;
    size_t n = (size_t)(g->C > 2 * g->HD ? g->C : 2 * g->HD);
    g->nsumsq = 0;
    for (int gi = 0; gi < st->ngroups; gi++) {
        g->chunk0[gi] = g->nsumsq;
        g->nsumsq += st->groups[gi].lora ? st->groups[gi].lora->nchunks : 0;
    }
    /* host home (zeroed): its first reader may accumulate into it */
    return sdp_rt_tensor_create(&g->lora_sink, SDP_F32, n, "lora.sink");
}

int sdp_graph_lora_zero(sdp_graph_t *g, int step, int mb, int gi, unsigned long long after)
{
    struct sdp_task_opts o;
    if (!g->st->groups[gi].lora || mb % g->nm_rank != 0)
        return 0;
    o = opts(g, step, gi, mb, SDP_PH_BWD);
    o.hint.mb = -1;
    o = gated(g, o, after);
    return sdp_task_zero(&o, train_grad(g, gi, rank_of(g, mb)));
}

/* The squared norms of group gi's adapter gradient (rank 0's: with more ranks, their sum), per
 * chunk; with ranks whose route sums on rank 0's GPU, one task there reads it whole, as for a
 * parameter group (sdp_graph_norms; the same bits). */
int sdp_graph_lora_norms(sdp_graph_t *g, int step, int gi)
{
    struct sdp_lora_state *ls = g->st->groups[gi].lora;
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_NORM);
    if (ls && g->R > 1 && g->plan.group[gi].norms_gpu) {
        o.on_rank = 1;
        return sdp_task_grad_sumsq(&o, ls->grad, &g->sumsq[g->chunk0[gi]]);
    }
    for (int c = 0; ls && c < ls->nchunks; c++) {
        o.hint.chunk = c;
        TRY_RET(sdp_task_sumsq(&o, g->sumsq[g->chunk0[gi] + c], sdp_rt_tensor_part(ls->grad, c)));
    }
    return 0;
}

/* AdamW on every adapter chunk, weight decay on all of it (A and B are matrices), writing the
 * next working copy of the adapters in place.  On the host, or where the plan's update_gpu says
 * (train.gpu_update, the plan's update key) on the GPU with the layers' GPU update codelet (the
 * host's bits): the gradient is read where lora_bwd made it, and the master and moments move to
 * the GPU with their first update and stay there while StarPU has the memory (it writes them back
 * to the host when it needs the room, and for a checkpoint). */
int sdp_graph_lora_update(sdp_graph_t *g, int step)
{
    struct sdp_state *st = g->st;
    for (int gi = 0; gi < st->ngroups; gi++) {
        struct sdp_lora_state *ls = st->groups[gi].lora;
        int on_gpu = g->plan.group[gi].update_gpu;
        for (int c = 0; ls && c < ls->nchunks; c++) {
            struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_UPDATE);
            sdp_rt_tensor_t *p = sdp_rt_tensor_part(ls->master, c);
            struct sdp_adamw_segment seg = { 0, sdp_rt_tensor_nelems(p), 1, 0 };
            o.hint.chunk = c;
            if (on_gpu) /* it drains no counted stage: no host buffer is written */
                o.hint.stage_role = SDP_STAGE_NONE;
            TRY_RET((on_gpu ? sdp_task_adamw_gpu : sdp_task_adamw_ex)(
                &o, p, sdp_rt_tensor_part(ls->grad, c), sdp_rt_tensor_part(ls->m, c),
                sdp_rt_tensor_part(ls->v, c), sdp_rt_tensor_part(ls->work, c),
                g->c.max_grad_norm > 0 || g->c.skip_nonfinite ? g->clip : NULL, g->c.skip_nonfinite,
                g->lr, g->c.beta1, g->c.beta2, g->c.eps, g->c.weight_decay, step + 1, &seg, 1));
        }
    }
    return 0;
}
