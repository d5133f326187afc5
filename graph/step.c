/* SPDX-License-Identifier: MIT */
/* The training step graph (see step.h): the driver of a step and its micro-batches, the
 * graph's creation and destruction.  Builds tasks only; never touches StarPU directly.  Tensors
 * that live for one micro-batch are temporaries released right after their last use is submitted,
 * so StarPU frees (or reuses) their memory as soon as the tasks are done. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "base/sdp_log.h"

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
    int last = g->plan.window > 0 && (mb + 1) % g->nm_rank == 0;
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
            TRY_GOTO(sdp_graph_lookup_host(g, step, mb, ids));
    } else {
        TRY_GOTO(temp(&xs[0], g->res_dt, (size_t)N * g->C, "x", mb, 0));
        TRY_GOTO(sdp_graph_dispatch(g, step, mb, 0));
        TRY_GOTO(sdp_task_embedding_fwd(&o, xs[0], ids, compute_work(g, 0, step, r),
                                        sdp_state_off(st, 0, SDP_PT_EMBED), N, g->C));
    }
    for (l = 1; l <= L; l++) {
        TRY_GOTO(temp(&xs[l], g->res_dt, (size_t)N * g->C, "x", mb, l));
        TRY_GOTO(sdp_graph_dispatch(g, step, mb, l));
        TRY_GOTO(
            sdp_graph_layer_fwd(g, step, mb, l, SDP_PH_FWD, xs[l - 1], NULL, &kept[l], xs[l], 0));
        enum sdp_act_place act = g->plan.group[l].act;
        if (act != SDP_ACT_KEEP) /* else kept whole for the backward */
            sdp_graph_keep_for_recompute(&kept[l], act);
        if (g->plan.group[l].offload) { /* back for layer l's recomputation */
            sdp_rt_tensor_offload(xs[l - 1]);
            if (kept[l].xmid && act != SDP_ACT_KEEP_MLP) /* keep-mlp's tensors stay on the GPU */
                sdp_rt_tensor_offload(kept[l].xmid);
            if (kept[l].att) {
                sdp_rt_tensor_offload(kept[l].att);
                sdp_rt_tensor_offload(kept[l].lse);
            }
        }
        if (window_drops(g, mb, l))
            sdp_graph_window_let_go(g, step, l, r);
    }

    /* head: final norm, LM head + cross-entropy (forward and backward), final norm backward */
    o = opts(g, step, g->head_group, mb, SDP_PH_LOSS);
    TRY_GOTO(temp(&hN, g->act_dt, (size_t)N * g->C, "h_final", mb, L + 1));
    TRY_GOTO(temp(&rstdN, SDP_F32, (size_t)N, "rstd_final", mb, L + 1));
    TRY_GOTO(temp(&dh, g->act_dt, (size_t)N * g->C, "d_h_final", mb, L + 1));
    TRY_GOTO(temp(&dres, g->res_dt, (size_t)N * g->C, "d_x", mb, L + 1));
    TRY_GOTO(sdp_graph_zero_grad(g, step, mb, g->lm_group, 0));
    if (g->lm_group != g->head_group)
        TRY_GOTO(sdp_graph_zero_grad(g, step, mb, g->head_group, 0));
    TRY_GOTO(sdp_graph_dispatch(g, step, mb, g->head_group));
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
    o.tag = g->plan.bwd_lookahead >= 0 ? sdp_graph_new_tag(g) : 0;
    {
        sdp_rt_tensor_t *gh = grad_of(g, g->head_group, r); /* NULL: frozen (LoRA), to the sink */
        TRY_GOTO(sdp_task_rmsnorm_bwd(&o, dres, 0, gh ? gh : g->lora_sink, gh ? g->norm_off : 0, dh,
                                      xs[L], compute_work(g, g->head_group, step, r), g->norm_off,
                                      rstdN, N, g->C));
    }
    done[L + 1] = o.tag;
    /* the LM head's gradient is final here too unless it is the embedding's (tied, group 0) */
    TRY_GOTO(sdp_graph_norms_if_final(g, step, mb, g->head_group));
    if (mb == g->c.n_micro - 1 && sdp_graph_early_embed(g))
        TRY_GOTO(sdp_graph_embed_early(g, step));

    /* backward through the layers, recomputing each layer's activations from its saved input */
    for (l = L; l >= 1; l--) {
        /* with a bounded window the forward let these weights go (after the step's last
         * micro-batch: this fetch follows that in submission order) */
        if (last && !g->rwork && !(chunked_fetch(g, l) && l > L - g->plan.window))
            TRY_GOTO(sdp_graph_fetch(g, step, l,
                                     sdp_graph_recomputed(g, l) ? SDP_PH_RECOMPUTE : SDP_PH_BWD,
                                     sdp_graph_bwd_gate(g, done, l), r));
        if (sdp_graph_recomputed(g, l)) /* kept[l] holds the mid residual, if any, and fills up */
            TRY_GOTO(sdp_graph_layer_fwd(g, step, mb, l, SDP_PH_RECOMPUTE, xs[l - 1], &kept[l],
                                         &kept[l], NULL, sdp_graph_bwd_gate(g, done, l)));
        TRY_GOTO(sdp_graph_zero_grad(g, step, mb, l, sdp_graph_bwd_gate(g, done, l)));
        TRY_GOTO(sdp_graph_layer_bwd(g, step, mb, l, xs[l - 1], &kept[l], dres,
                                     g->plan.bwd_lookahead >= 0 ? &done[l] : NULL));
        TRY_GOTO(sdp_graph_norms_if_final(g, step, mb, l));
        if (last)
            sdp_graph_window_release(g, step, l, r);
        /* the replica's (or compute copy's) last use this step: nothing of it is written back */
        if ((g->rwork || chunked_fetch(g, l)) && (mb + 1) % g->nm_rank == 0)
            sdp_rt_tensor_discard(compute_work(g, l, step, r));
        sdp_graph_release_acts(&kept[l]);
        sdp_rt_tensor_release(xs[l]);
        xs[l] = NULL;
    }
    if (g->lm_group != 0)
        TRY_GOTO(sdp_graph_zero_grad(g, step, mb, 0, sdp_graph_bwd_gate(g, done, 0)));
    o = opts(g, step, 0, mb, SDP_PH_BWD);
    if (!st->groups[0].frozen)
        TRY_GOTO(sdp_task_embedding_bwd(&o, grad_of(g, 0, r), sdp_state_off(st, 0, SDP_PT_EMBED),
                                        dres, ids, N, g->C));
    TRY_GOTO(sdp_graph_norms_if_final(g, step, mb, 0));
    for (int gi = 0; (mb + 1) % g->nm_rank == 0 && gi < st->ngroups; gi += g->head_group)
        if (g->rwork || chunked_fetch(g, gi))
            sdp_rt_tensor_discard(compute_work(g, gi, step, r));
    if (last) /* not the embedding updated early: its chunks are being written on the host */
        for (int gi = sdp_graph_early_embed(g) ? g->head_group : 0; gi < st->ngroups;
             gi += g->head_group)
            sdp_graph_window_release(g, step, gi, r);
fail:
    if (g->x0) /* the graph's own buffer, written again by the next step's lookup */
        xs[0] = NULL;
    for (l = 0; l <= L; l++) {
        sdp_graph_release_acts(&kept[l]);
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

int sdp_graph_step(sdp_graph_t *g, int step, const int32_t *ids, const int32_t *targets, double lr,
                   int update, struct sdp_step_result *res)
{
    return sdp_graph_step_docs(g, step, ids, targets, NULL, lr, update, res);
}

int sdp_graph_step_docs(sdp_graph_t *g, int step, const int32_t *ids, const int32_t *targets,
                        const int32_t *segs, double lr, int update, struct sdp_step_result *res)
{
    int B = g->c.micro_batch, T = g->c.seq_len, nm = g->c.n_micro;
    size_t per_mb = (size_t)B * T, total = per_mb * nm;
    long long valid = 0;
    double loss_sum = 0.0;
    int set = step & 1, rc;

    /* this node's micro-batches (from position total * node), then the count of every node's */
    for (size_t i = 0; i < total; i++) {
        if (ids[i] < 0 || ids[i] >= g->V)
            return sdp_err(-EINVAL,
                           "step %d: token id %d at position %zu is outside the vocabulary (V=%d)",
                           step + 1, ids[i], i + total * g->node, g->V);
        if (targets[i] >= g->V)
            return sdp_err(-EINVAL,
                           "step %d: target id %d at position %zu is outside the vocabulary (V=%d)",
                           step + 1, targets[i], i + total * g->node, g->V);
        valid += targets[i] >= 0;
    }
    if (g->P > 1 && (rc = sdp_graph_nodes_valid(g, &valid)) != 0)
        return rc;
    if (valid == 0)
        return sdp_err(-EINVAL, "step %d: every target is ignored; nothing to learn from",
                       step + 1);
    if (g->segs && (rc = sdp_graph_docs_check(g, step, segs)) != 0)
        return rc;

    /* the tags of a step that failed part-way may belong to tasks never submitted: leave them */
    g->ntags = 0;
    g->updating = update;
    g->lr = lr;
    /* lookups the previous step submitted (lookup_ahead) on other ids than these are redone */
    if (g->looked_up == step && memcmp(ids, g->looked_ids, total * sizeof(*ids)) != 0)
        g->looked_up = -1;
    if (sdp_graph_early_embed(g)) { /* the embedding rows the step's tokens select */
        memset(g->row_mark, 0, (size_t)g->V);
        for (size_t i = 0; i < total; i++)
            g->row_mark[ids[i]] = 1;
    }
    g->defer = sdp_graph_defer_rows(g, update);
    g->ndeferred += g->defer;
    g->next_told = 0;
    if (g->defer) { /* the rows the next step's lookup reads */
        memset(g->next_mark, 0, (size_t)g->V);
        for (size_t i = 0; i < total; i++)
            g->next_mark[g->next_ids[i]] = 1;
    }
    rc = sdp_graph_refresh_work(g, step);
    if (!rc)
        rc = sdp_graph_refresh_work2(g, step);
    /* every step accumulates from zero: each rank clears a group's gradient where and when its
     * backward first writes it (no upload of zeros; see zero_grad) */
    for (int mb = 0; mb < nm && !rc; mb++) {
        sdp_rt_tensor_t *ti = g->ids[set * nm + mb], *tt = g->targets[set * nm + mb];
        if (g->looked_up != step) /* else lookup_ahead filled them with these ids */
            rc = sdp_graph_fill_i32(ti, ids + mb * per_mb, per_mb);
        if (!rc)
            rc = sdp_graph_fill_i32(tt, targets + mb * per_mb, per_mb);
        g->seg_mb = g->segs ? g->segs[set * nm + mb] : NULL; /* read by the layers' attention */
        g->seg_host = g->segs ? segs + mb * per_mb : NULL;
        if (!rc && g->seg_mb)
            rc = sdp_graph_fill_i32(g->seg_mb, segs + mb * per_mb, per_mb);
        /* the gradient of the step's mean loss: every micro-batch scales by the step's valid count
         */
        if (!rc)
            rc = micro_batch(g, step, mb, ti, tt, (float)(1.0 / (double)valid));
    }
    g->seg_mb = NULL, g->seg_host = NULL;
    if (!rc)
        rc = sdp_graph_optimizer(g, step, update);
    if (rc)
        return rc;
    if (update)
        g->last_update = step;

    for (int mb = 0; mb < nm; mb++) {
        rc = sdp_rt_tensor_acquire(g->loss[mb], 0);
        if (rc)
            return rc;
        g->mb_loss[mb] = ((const double *)sdp_rt_tensor_data(g->loss[mb]))[0];
        loss_sum += g->mb_loss[mb];
        sdp_rt_tensor_release_acquire(g->loss[mb]);
    }
    if (g->P > 1 && (rc = sdp_graph_nodes_loss(g, g->mb_loss, &loss_sum)) != 0)
        return rc;
    rc = sdp_rt_tensor_acquire(g->clip, 0);
    if (rc)
        return rc;
    res->grad_norm = ((const double *)sdp_rt_tensor_data(g->clip))[0];
    sdp_rt_tensor_release_acquire(g->clip);
    /* the norm read every gradient, so every tagged task of the step has ended */
    sdp_graph_forget_tags(g);
    res->bad_group = -1;
    if (!isfinite(res->grad_norm)) {
        /* name the first group whose chunk norms are not finite (for the error message) */
        int k = 0;
        for (int gi = 0; gi < g->st->ngroups && res->bad_group < 0; gi++)
            for (int c = 0;
                 c < (g->plan.lora.rank > 0
                          ? (g->st->groups[gi].lora ? g->st->groups[gi].lora->nchunks : 0)
                          : g->st->groups[gi].nchunks);
                 c++, k++) {
                double v;
                if (sdp_rt_tensor_acquire(g->sumsq[k], 0))
                    return -EIO;
                v = *(const double *)sdp_rt_tensor_data(g->sumsq[k]);
                sdp_rt_tensor_release_acquire(g->sumsq[k]);
                if (!isfinite(v) && res->bad_group < 0)
                    res->bad_group = gi;
            }
    }
    /* the loss and, into the state (checkpoints), the experts' step counts */
    if ((rc = sdp_graph_moe_loss(g, &res->aux_loss)) != 0 || (rc = sdp_graph_moe_sync(g, res)) != 0)
        return rc;
    res->loss = loss_sum / (double)valid + res->aux_loss;
    res->tokens = (long long)(total * g->P);
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
    rc = sdp_graph_refresh_work(g, -1);
    if (!rc)
        rc = sdp_rt_tensor_create(&tid, SDP_I32, (size_t)N, "logits.ids");
    if (!rc)
        rc = sdp_rt_tensor_create(&out, g->act_dt, (size_t)N * g->V, "logits");
    if (rc)
        goto done;
    memcpy(sdp_rt_tensor_data(tid), ids, (size_t)N * sizeof(int32_t));
    TRY_GOTO(temp(&x, g->res_dt, (size_t)N * g->C, "x", 0, 0));
    TRY_GOTO(sdp_task_embedding_fwd(&o, x, tid, work_of(g, 0, -1),
                                    sdp_state_off(st, 0, SDP_PT_EMBED), N, g->C));
    for (l = 1; l <= g->L; l++) {
        TRY_GOTO(temp(&y, g->res_dt, (size_t)N * g->C, "x", 0, l));
        rc = sdp_graph_layer_fwd(g, -1, 0, l, SDP_PH_FWD, x, NULL, &a, y, 0);
        sdp_graph_release_acts(&a);
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

int sdp_graph_create(sdp_graph_t **out, struct sdp_state *st, const struct sdp_graph_conf *c)
{
    struct sdp_plan p;
    int rc = sdp_plan_init(&p, st, c);
    if (!rc)
        rc = sdp_graph_create_plan(out, st, c, &p);
    sdp_plan_free(&p);
    return rc;
}

int sdp_graph_create_plan(sdp_graph_t **out, struct sdp_state *st, const struct sdp_graph_conf *c,
                          const struct sdp_plan *p)
{
    const struct sdp_model_cfg *m = &st->cfg;
    sdp_graph_t *g;
    int rc = sdp_plan_check(p, st, c);
    char name[64];
    if (rc)
        return rc;
    if (p->lora.rank > 0 && p->param_delay)
        return sdp_err(-EINVAL, "graph: LoRA adapters update synchronously (param_delay 0)");
    if (!(g = calloc(1, sizeof(*g))))
        return sdp_err(-ENOMEM, "graph");
    g->st = st;
    g->c = *c;
    if ((rc = sdp_plan_copy(&g->plan, p)) != 0) {
        free(g);
        return rc;
    }
    g->R = p->nranks;
    g->nm_rank = c->n_micro / g->R;
    g->P = c->nodes > 1 ? c->nodes : 1;
    g->node = g->P > 1 ? c->node : 0;
    g->C = m->hidden_size;
    g->I = m->intermediate_size;
    g->NH = m->num_heads;
    g->NKV = m->num_kv_heads;
    g->HD = m->head_dim;
    g->QKV = (g->NH + 2 * g->NKV) * g->HD;
    g->V = m->vocab_size;
    g->L = m->num_layers;
    g->act_dt = st->work_dtype;
    g->res_dt = p->residual_f32 ? SDP_F32 : g->act_dt;
    g->head_group = g->L + 1;
    g->norm_off = sdp_state_off(st, g->head_group, SDP_PT_NORM);
    g->lm_group = m->tie_word_embeddings ? 0 : g->head_group;
    g->lm_off =
        sdp_state_off(st, g->lm_group, m->tie_word_embeddings ? SDP_PT_EMBED : SDP_PT_LM_HEAD);
    g->embed_off = sdp_state_off(st, 0, SDP_PT_EMBED);
    sdp_graph_rope_params(&g->rope, m);
    g->ids = calloc(2 * (size_t)c->n_micro, sizeof(*g->ids));
    g->targets = calloc(2 * (size_t)c->n_micro, sizeof(*g->targets));
    g->loss = calloc((size_t)c->n_micro, sizeof(*g->loss));
    g->mb_loss = calloc((size_t)c->n_micro, sizeof(*g->mb_loss));
    g->nsumsq = st->nchunks_total;
    g->chunk0 = calloc((size_t)st->ngroups, sizeof(*g->chunk0));
    if (g->chunk0 && p->lora.rank > 0)
        rc = sdp_graph_lora_create(g); /* the adapters' chunks, and the sink */
    else
        for (int gi = 1; g->chunk0 && gi < st->ngroups; gi++)
            g->chunk0[gi] = g->chunk0[gi - 1] + st->groups[gi - 1].nchunks;
    g->sumsq = calloc((size_t)(g->nsumsq > 0 ? g->nsumsq : 1), sizeof(*g->sumsq));
    if (!g->ids || !g->targets || !g->loss || !g->mb_loss || !g->sumsq || !g->chunk0 || rc) {
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
    if (!rc)
        rc = sdp_graph_docs_create(g);
    for (int i = 0; i < c->n_micro && !rc; i++) {
        snprintf(name, sizeof(name), "loss.mb%d", i);
        rc = sdp_rt_tensor_create(&g->loss[i], SDP_F64, 2, name);
    }
    for (int i = 0; i < g->nsumsq && !rc; i++) {
        snprintf(name, sizeof(name), "sumsq.%d", i);
        rc = sdp_rt_tensor_create(&g->sumsq[i], SDP_F64, 1, name);
    }
    if (!rc)
        rc = sdp_rt_tensor_create(&g->clip, SDP_F64, 2, "clip");
    if (!rc && g->lm_group == 0 && st->groups[0].grad_ret) { /* early_embed's bookkeeping */
        g->row_mark = calloc((size_t)g->V, 1);
        if (!g->row_mark)
            rc = sdp_err(-ENOMEM, "embedding rows");
        if (!rc && p->rows_pack &&
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
    if (!rc && p->lookup_host)
        rc = sdp_graph_lookup_host_create(g);
    g->last_update = -1;
    g->looked_up = -1;
    if (!rc && p->param_delay) {
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
    if (!rc)
        rc = sdp_graph_chunks_create(g);
    if (!rc)
        rc = sdp_graph_moe_create(g);
    if (!rc && g->R > 1 && p->param_route == SDP_ROUTE_SHARDED) {
        /* every rank's replica of every group, chunked like the working copy, homed on the rank's
         * GPU (gathered there after its chunks arrive, not through the host); under a window (or a
         * GPU memory cap: sdp_rt_tensor_create_on) homed on the host instead, so that StarPU may
         * evict them, gathering them through the host */
        int home_gpu = g->c.window == 0;
        g->rwork = calloc((size_t)g->R * st->ngroups, sizeof(*g->rwork));
        if (!g->rwork)
            rc = sdp_err(-ENOMEM, "replicas of %d ranks", g->R);
        for (int r = 0; r < g->R && !rc; r++)
            for (int gi = 0; gi < st->ngroups && !rc; gi++) {
                sdp_rt_tensor_t **t = &g->rwork[(size_t)r * st->ngroups + gi];
                snprintf(name, sizeof(name), "g%d.work.rank%d", gi, r);
                rc = sdp_rt_tensor_create_on(t, st->work_dtype, st->groups[gi].nelems, name,
                                             home_gpu ? sdp_tasks_rank_worker(r) : -1);
                if (!rc)
                    rc = sdp_rt_tensor_partition_like(*t, st->groups[gi].work);
            }
    }
    if (!rc && reduces(g) && st->grad_dtype != SDP_F32)
        rc = sdp_err(-EINVAL,
                     "graph: the bf16 gradient return is for one rank (%d ranks, %d nodes asked)",
                     g->R, g->P);
    if (!rc && g->R > 1) {
        /* ranks 1..R-1 accumulate into gradients of their own, chunked like rank 0's: of the
         * group's parameters, or under LoRA of its adapters (none for a frozen group without) */
        g->rgrad = calloc((size_t)(g->R - 1) * st->ngroups, sizeof(*g->rgrad));
        if (!g->rgrad)
            rc = sdp_err(-ENOMEM, "gradients of %d ranks", g->R);
        for (int r = 1; r < g->R && !rc; r++)
            for (int gi = 0; gi < st->ngroups && !rc; gi++) {
                sdp_rt_tensor_t **t = &g->rgrad[(size_t)(r - 1) * st->ngroups + gi];
                const sdp_rt_tensor_t *g0 = train_grad(g, gi, 0);
                if (!g0)
                    continue;
                snprintf(name, sizeof(name), "g%d.%sgrad.rank%d", gi,
                         st->groups[gi].frozen ? "lora." : "", r);
                rc = sdp_rt_tensor_create(t, SDP_F32, sdp_rt_tensor_nelems(g0), name);
                if (!rc)
                    rc = sdp_rt_tensor_partition_like(*t, g0);
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
    sdp_graph_docs_destroy(g);
    for (int i = 0; g->loss && i < g->c.n_micro; i++)
        sdp_rt_tensor_release(g->loss[i]);
    for (int i = 0; g->sumsq && i < g->nsumsq; i++)
        sdp_rt_tensor_release(g->sumsq[i]);
    sdp_rt_tensor_release(g->lora_sink);
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
    sdp_plan_free(&g->plan);
    for (int i = 0; g->rwork && i < g->R * g->st->ngroups; i++)
        sdp_rt_tensor_release(g->rwork[i]);
    free(g->rwork);
    sdp_graph_chunks_destroy(g);
    sdp_graph_moe_destroy(g);
    free(g->chunk0);
    free(g->ids);
    free(g->targets);
    free(g->loss);
    free(g->mb_loss);
    free(g->sumsq);
    free(g->tags); /* a failed step's tags stay with StarPU until it shuts down */
    free(g);
}
