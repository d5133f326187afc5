/* SPDX-License-Identifier: MIT */
/* A sparse layer's MLP in the step graph (Qwen3-MoE, docs/moe.md): its forward and backward
 * tasks, the load-balancing loss added to the step's loss, which experts received a token in the
 * step (their AdamW: graph/optim.c), and what the graph refuses around them.  The block runs
 * where the compute runs, CPU workers or one GPU (codelets/moe.c, codelets/moe_cuda.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "base/sdp_log.h"

int sdp_graph_sparse(const sdp_graph_t *g, int gi)
{
    return gi >= 1 && gi <= g->L && sdp_model_layer_sparse(&g->st->cfg, gi - 1);
}

/* Whether the loss adds the load-balancing loss: as Qwen3MoeForCausalLM, with
 * output_router_logits (a zero coefficient adds nothing and is skipped). */
static int aux_on(const sdp_graph_t *g)
{
    const struct sdp_model_cfg *m = &g->st->cfg;
    return g->moe_first > 0 && m->output_router_logits && m->router_aux_loss_coef > 0.0;
}

static struct sdp_moe_shape shape(const sdp_graph_t *g, int gi, int N)
{
    const struct sdp_model_cfg *m = &g->st->cfg;
    struct sdp_moe_shape s = { .N = N,
                               .C = g->C,
                               .E = m->num_experts,
                               .K = m->num_experts_per_tok,
                               .IM = m->moe_intermediate_size,
                               .norm_topk = m->norm_topk_prob };
    s.off_router = sdp_state_off(g->st, gi, SDP_PT_ROUTER);
    s.off_gu = sdp_state_off(g->st, gi, SDP_PT_EXP_GU);
    s.off_down = sdp_state_off(g->st, gi, SDP_PT_EXP_DOWN);
    return s;
}

size_t sdp_graph_moe_acts_elems(const sdp_graph_t *g, int N)
{
    struct sdp_moe_shape s = shape(g, g->moe_first, N);
    return sdp_task_moe_acts_elems(&s);
}

/* The load-balancing loss's rows: the micro-batch's tokens times the sparse layers. */
static double aux_rows(const sdp_graph_t *g)
{
    return (double)g->c.micro_batch * g->c.seq_len * sdp_model_num_sparse_layers(&g->st->cfg);
}

/* Routed streaming (docs/moe.md): the host's working copy, from which the layer's MoE task of
 * phase ph copies the experts its tokens route to into the compute copy W, where it must; NULL
 * where it need not.  The forward always does; the recomputation and the backward only where the
 * window let the compute copy go after the forward (the fetch again brings no expert), the
 * backward only where no recomputation of the block came before it (keep, keep-mlp). */
static sdp_rt_tensor_t *routed_src(const sdp_graph_t *g, int gi, int step, int mb,
                                   enum sdp_phase ph)
{
    const struct sdp_plan_group *pg = &g->plan.group[gi];
    if (step < 0 || !pg->moe_routed || !chunked_fetch(g, gi))
        return NULL;
    if (ph != SDP_PH_FWD && !window_drops(g, mb, gi))
        return NULL;
    if (ph == SDP_PH_BWD && pg->act != SDP_ACT_KEEP && pg->act != SDP_ACT_KEEP_MLP)
        return NULL;
    return work_of(g, gi, step);
}

int sdp_graph_moe_fwd(sdp_graph_t *g, const struct sdp_task_opts *o, int gi, sdp_rt_tensor_t *W,
                      struct layer_acts *a, sdp_rt_tensor_t *out)
{
    int N = g->c.micro_batch * g->c.seq_len, mb = o->hint.mb, step = o->hint.step;
    struct sdp_moe_shape s = shape(g, gi, N);
    /* the step's forward counts the routing; a recomputation (the same bits) and logits do not */
    int track = o->hint.phase == SDP_PH_FWD && step >= 0 && out;
    sdp_rt_tensor_t *Wh = routed_src(g, gi, step, mb, o->hint.phase);
    TRY_RET(sdp_task_moe_fwd(o, &s, a->gu, a->h2, W, Wh, out, out ? a->xmid : NULL,
                             track ? g->moe_stats[mb] : NULL, track ? g->moe_used[gi] : NULL,
                             gi == g->moe_first, mb == 0, mb == g->c.n_micro - 1 && g->updating));
    if (track && gi == g->moe_last && aux_on(g)) /* the micro-batch's statistics are complete */
        TRY_RET(sdp_task_moe_aux(o, g->moe_aux[mb], g->moe_stats[mb], s.E, aux_rows(g)));
    return 0;
}

int sdp_graph_moe_bwd(sdp_graph_t *g, const struct sdp_task_opts *o, int gi, sdp_rt_tensor_t *W,
                      sdp_rt_tensor_t *G, struct layer_acts *a, sdp_rt_tensor_t *dres,
                      sdp_rt_tensor_t *dh2)
{
    int N = g->c.micro_batch * g->c.seq_len;
    struct sdp_moe_shape s = shape(g, gi, N);
    /* the step's loss adds coef times the mean over its micro-batches of each one's loss */
    float scale = (float)(g->st->cfg.router_aux_loss_coef / g->c.n_micro);
    sdp_rt_tensor_t *Wh = routed_src(g, gi, o->hint.step, o->hint.mb, SDP_PH_BWD);
    return sdp_task_moe_bwd(o, &s, dh2, dres, a->h2, W, Wh, a->gu, G,
                            aux_on(g) ? g->moe_stats[o->hint.mb] : NULL, scale, aux_rows(g));
}

sdp_rt_tensor_t *sdp_graph_moe_used(const sdp_graph_t *g, int gi)
{
    return g->moe_used && sdp_graph_sparse(g, gi) ? g->moe_used[gi] : NULL;
}

int sdp_graph_moe_loss(const sdp_graph_t *g, double *aux)
{
    double sum = 0.0;
    *aux = 0.0;
    if (!aux_on(g))
        return 0;
    for (int mb = 0; mb < g->c.n_micro; mb++) {
        int rc = sdp_rt_tensor_acquire(g->moe_aux[mb], 0);
        if (rc)
            return rc;
        sum += *(const double *)sdp_rt_tensor_data(g->moe_aux[mb]);
        sdp_rt_tensor_release_acquire(g->moe_aux[mb]);
    }
    *aux = g->st->cfg.router_aux_loss_coef * sum / g->c.n_micro;
    return 0;
}

int sdp_graph_moe_sync(sdp_graph_t *g, struct sdp_step_result *res)
{
    const int E = g->st->cfg.num_experts;
    res->experts_routed = res->experts_total = 0;
    for (int gi = g->moe_first; g->moe_used && gi <= g->moe_last; gi++) {
        if (!g->moe_used[gi])
            continue;
        int rc = sdp_rt_tensor_acquire(g->moe_used[gi], 0);
        if (rc)
            return rc;
        const int32_t *used = (const int32_t *)sdp_rt_tensor_data(g->moe_used[gi]);
        memcpy(g->st->groups[gi].expert_steps, used + E, (size_t)E * sizeof(int32_t));
        for (int e = 0; e < E; e++) /* the marks of the step's micro-batches */
            res->experts_routed += used[e] != 0;
        res->experts_total += E;
        sdp_rt_tensor_release_acquire(g->moe_used[gi]);
    }
    return 0;
}

/* What the sparse layers do not run with yet, named; 0 when the graph can run them. */
static int refused(const sdp_graph_t *g)
{
    if (g->R == 1 && g->P == 1)
        return 0;
    /* each rank's moe_used marks its own routing only */
    int rc = sdp_err(-ENOTSUP,
                     "graph: %d Qwen3-MoE sparse layers: several ranks or nodes: the experts' "
                     "usage is marked per rank, and AdamW would skip an expert that another "
                     "rank's tokens used (no reduction of the marks yet)",
                     sdp_model_num_sparse_layers(&g->st->cfg));
    sdp_hint("train MoE models on one rank (CPU workers or one GPU)");
    return rc;
}

int sdp_graph_moe_create(sdp_graph_t *g)
{
    int rc = 0, nm = g->c.n_micro;
    char name[64];
    for (int gi = 1; gi <= g->L; gi++)
        if (sdp_graph_sparse(g, gi)) {
            g->moe_first = g->moe_first ? g->moe_first : gi;
            g->moe_last = gi;
        }
    if (!g->moe_first)
        return 0;
    if ((rc = refused(g)) != 0)
        return rc;
    g->moe_stats = calloc((size_t)nm, sizeof(*g->moe_stats));
    g->moe_aux = calloc((size_t)nm, sizeof(*g->moe_aux));
    g->moe_used = calloc((size_t)g->L + 2, sizeof(*g->moe_used));
    if (!g->moe_stats || !g->moe_aux || !g->moe_used)
        return sdp_err(-ENOMEM, "graph: MoE bookkeeping");
    for (int mb = 0; mb < nm && !rc; mb++) {
        snprintf(name, sizeof(name), "moe_stats.mb%d", mb);
        rc = sdp_rt_tensor_create(&g->moe_stats[mb], SDP_F64, 2 * (size_t)g->st->cfg.num_experts,
                                  name);
        snprintf(name, sizeof(name), "moe_aux.mb%d", mb);
        if (!rc)
            rc = sdp_rt_tensor_create(&g->moe_aux[mb], SDP_F64, 1, name);
    }
    const int E = g->st->cfg.num_experts;
    int32_t *init = calloc(2 * (size_t)E, sizeof(*init));
    if (!init)
        rc = sdp_err(-ENOMEM, "graph: MoE bookkeeping");
    for (int gi = g->moe_first; gi <= g->moe_last && !rc; gi++) {
        snprintf(name, sizeof(name), "g%d.moe_used", gi);
        if (!sdp_graph_sparse(g, gi))
            continue;
        rc = sdp_rt_tensor_create(&g->moe_used[gi], SDP_I32, 2 * (size_t)E, name);
        /* no expert marked; the step counts where the state has them (a resumed run) */
        memcpy(init + E, g->st->groups[gi].expert_steps, (size_t)E * sizeof(*init));
        if (!rc)
            rc = sdp_graph_fill_i32(g->moe_used[gi], init, 2 * (size_t)E);
    }
    free(init);
    return rc;
}

void sdp_graph_moe_destroy(sdp_graph_t *g)
{
    for (int mb = 0; g->moe_stats && g->moe_aux && mb < g->c.n_micro; mb++) {
        sdp_rt_tensor_release(g->moe_stats[mb]);
        sdp_rt_tensor_release(g->moe_aux[mb]);
    }
    for (int gi = 0; g->moe_used && gi < g->L + 2; gi++)
        sdp_rt_tensor_release(g->moe_used[gi]);
    free(g->moe_stats);
    free(g->moe_aux);
    free(g->moe_used);
}
