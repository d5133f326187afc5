/* SPDX-License-Identifier: MIT */
/* What a graph configuration moves per step and the least GPU memory it needs (step.h). */
#include "config.h"

#include <string.h>

#include "graph/graph_internal.h"
#include "base/env.h"

/* Routed streaming (graph/moe.c): what sparse layer gi's copy brings a step, expected of a router
 * that spreads tokens evenly: the chunks fetched (those before the experts, and the one they start
 * in), the experts the step's tokens route to (each once), and with the window's second fetch
 * (twice) those chunks and the last micro-batch's experts again. */
static unsigned long long routed_bytes(const sdp_graph_t *g, int gi, int twice)
{
    const struct sdp_state *st = g->st;
    size_t es = sdp_dtype_size(st->work_dtype);
    double ex = (double)sdp_model_group_expert_elems(&st->cfg, gi) * es, tok, dense = 0;
    for (int c = 0, nc = fetched_chunks(g, gi); c < nc; c++)
        dense += (double)sdp_rt_tensor_nelems(sdp_rt_tensor_part(st->groups[gi].work, c)) * es;
    tok = (double)g->c.micro_batch * g->c.seq_len;
    double first = dense + ex * sdp_model_moe_routed_share(&st->cfg, tok * g->nm_rank);
    double again = dense + ex * sdp_model_moe_routed_share(&st->cfg, tok);
    return (unsigned long long)(first + (twice ? again : 0.0) + 0.5);
}

void sdp_graph_route_bytes(const sdp_graph_t *g, int rank, struct sdp_route_bytes *rb)
{
    const struct sdp_state *st = g->st;
    size_t es = sdp_dtype_size(st->work_dtype);
    memset(rb, 0, sizeof(*rb));
    for (int gi = 0; gi < st->ngroups; gi++) {
        unsigned long long n = st->groups[gi].nelems;
        int twice = g->c.window > 0 && g->c.recompute && gi >= 1 && gi <= g->L - g->c.window;
        if (st->groups[gi].frozen) { /* LoRA: the base goes up where a window drops it */
            const struct sdp_lora_state *ls = st->groups[gi].lora;
            rb->param_h2d += g->c.window > 0 && !g->rwork ? n * es * (twice ? 2u : 1u) : 0;
            /* sharded: the replicas, dropped after each step, get the others' chunks again */
            for (int c = 0; g->rwork && c < st->groups[gi].nchunks; c++) {
                unsigned long long nb =
                    sdp_rt_tensor_nelems(sdp_rt_tensor_part(st->groups[gi].work, c)) * es;
                if (sdp_graph_owner_of(g, gi, c) != rank)
                    rb->param_peer += nb;
                else
                    rb->param_out += nb * (unsigned long long)(g->R - 1);
            }
            if (!ls)
                continue;
            /* the adapters: their copy up, their fp32 gradient down (or to rank 0's GPU) */
            rb->param_h2d += ls->nelems * es;
            if (rank == 0 || !g->plan.group[gi].grad_gpu)
                rb->grad_d2h += ls->nelems * sizeof(float);
            else
                rb->grad_peer += ls->nelems * sizeof(float);
            continue;
        }
        if (g->rwork) { /* sharded: the owned chunks from the host, the others from their owners */
            for (int c = 0; c < st->groups[gi].nchunks; c++) {
                unsigned long long nb =
                    sdp_rt_tensor_nelems(sdp_rt_tensor_part(st->groups[gi].work, c)) * es;
                int own = sdp_graph_owner_of(g, gi, c) == rank;
                *(own ? &rb->param_h2d : &rb->param_peer) += nb;
                rb->param_out += own ? nb * (unsigned long long)(g->R - 1) : 0;
            }
        } else if (g->plan.group[gi].moe_routed) {
            rb->param_h2d += routed_bytes(g, gi, twice);
        } else {
            rb->param_h2d += n * es * (twice ? 2u : 1u);
        }
        unsigned long long gb = st->groups[gi].grad_ret ? 2u : sizeof(float); /* one rank */
        unsigned long long again = 0; /* the early update's second return (early_embed) */
        if (gi == 0 && sdp_graph_early_embed(g) &&
            g->rows_grad) { /* the rows of the latest step's tokens */
            for (int r = 0; r < g->V; r++)
                again += g->row_mark[r];
            again *= (unsigned long long)g->C;
        } else if (gi == 0 && sdp_graph_early_embed(g)) {
            again = n; /* packed twice */
        }
        if (g->plan.group[gi].grad_routed) /* the experts the step's tokens route to */
            n -= (unsigned long long)(sdp_model_group_expert_elems(&st->cfg, gi) *
                                          (1.0 - sdp_model_moe_routed_share(
                                                     &st->cfg, (double)g->c.micro_batch *
                                                                   g->c.seq_len * g->nm_rank)) +
                                      0.5);
        if (rank == 0 || !g->plan.group[gi].grad_gpu)
            rb->grad_d2h += (n + again) * gb;
        else
            rb->grad_peer += n * sizeof(float);
    }
}

unsigned long long sdp_graph_gpu_bytes_min(const struct sdp_model_cfg *m, enum sdp_dtype work_dtype,
                                           const struct sdp_graph_conf *c)
{
    size_t es = sdp_dtype_size(work_dtype), group_max = 0;
    /* the residual stream's element (train.residual_dtype fp32: 4 under bf16) */
    size_t rb = sdp_plan_residual_f32(c, work_dtype) ? 4 : es;
    unsigned long long n = (unsigned long long)c->micro_batch * c->seq_len, bytes, nfull;
    for (int g = 0; g < sdp_model_num_groups(m); g++) {
        size_t ne = sdp_model_group_nelems(m, g);
        group_max = ne > group_max ? ne : group_max;
    }
    bytes = 2ull * group_max * (es + 4); /* work + fp32 grad */
    /* d_x (with an fp32 residual, its bf16 cast too), h, d_h */
    bytes += n * (unsigned long long)m->hidden_size * (2 * es + rb + (rb != es ? es : 0));
    /* recomputing, what each layer saves (its input; selective, its mid residual too) for every
     * layer or, offloaded, the few around the layer at work */
    if (c->recompute)
        bytes += (c->offload_inputs ? 4ull : (unsigned long long)m->num_layers) *
                 sdp_model_layer_act_bytes_res(m, c->micro_batch, c->seq_len, (int)es, (int)rb,
                                               c->recompute);
    /* keep_mlp: each chosen layer's gate/up projection and, unless selective without offload
     * counted it above, its mid residual, kept on the GPU (at most the L - keep_last recomputed
     * layers) */
    if (c->recompute && c->keep_mlp > 0) {
        int nrec = m->num_layers - (c->keep_last > 0 ? c->keep_last : 0);
        unsigned long long k =
            (unsigned long long)(c->keep_mlp < nrec ? c->keep_mlp : (nrec > 0 ? nrec : 0));
        unsigned long long per;
        per = n * (2ull * (unsigned long long)m->intermediate_size * es +
                   (c->recompute == SDP_RECOMPUTE_SELECTIVE && !c->offload_inputs
                        ? 0ull
                        : (unsigned long long)m->hidden_size * rb));
        bytes += k * per;
    }
    /* every intermediate of the layers at work (two), of those that keep theirs from the forward
     * (keep_last; all of them without recomputation) */
    nfull = c->recompute ? 2u + (unsigned)c->keep_last : (unsigned)m->num_layers + 1u;
    bytes +=
        nfull * sdp_model_layer_act_bytes_res(m, c->micro_batch, c->seq_len, (int)es, (int)rb, 0);
    return bytes + sdp_graph_ws_bytes(m, work_dtype, c->micro_batch, c->seq_len, c->attn_row_tokens,
                                      c->gpu_limit_bytes, bytes, NULL);
}

/* The attention's budget without a known limit: cuDNN's backward of 32 sequences of 1024 tokens
 * at qwen3-4b's heads, in one call (larger calls are faster per layer,
 * bench/results/2026-12-02-h200-kernels.md). */
#define ATTN_DEFAULT_BUDGET (1ull << 30)

unsigned long long sdp_graph_ws_bytes(const struct sdp_model_cfg *m, enum sdp_dtype work_dtype,
                                      int B, int T, long long attn_T, unsigned long long gpu_limit,
                                      unsigned long long rest, unsigned long long *budget)
{
    const int N = B * T, V = m->vocab_size;
    const long mib = sdp_env_long("SDP_LMHEAD_BLOCK_MIB", 0),
               ws_mib = sdp_env_long("SDP_ATTENTION_WS_MIB", 0);
    const char *lg = sdp_env("SDP_LMHEAD_LOGITS");
    const int es = work_dtype == SDP_BF16 && !(lg && !strcmp(lg, "f32")) ? 2 : 4;
    const unsigned long long blk =
        sdp_model_lmhead_block_bytes(gpu_limit, mib >= 1 ? (unsigned long long)mib << 20 : 0);
    unsigned long long ws =
        (64ull << 20) + /* cuBLASLt's and the kernels' own */
        sdp_model_lmhead_ws_bytes(N, V, sdp_model_lmhead_block_rows(N, V, blk, es), es);
    unsigned long long b = ATTN_DEFAULT_BUDGET;
    if (ws_mib > 0)
        b = (unsigned long long)ws_mib << 20;
    else if (gpu_limit > 0)
        b = gpu_limit > rest + ws ? gpu_limit - rest - ws : 0;
    if (budget)
        *budget = b;
    if (work_dtype != SDP_BF16 || sdp_env_is("SDP_ATTENTION", "own")) /* not through cuDNN */
        return ws + sdp_model_attention_own_ws_bytes(B, T, m->num_heads, m->head_dim);
    /* a masked row's slots (attn_T tokens), as one long row; never fewer than T (int: at most
     * 2^30 tokens, D slots of at most T) */
    const int at = attn_T > T ? (int)(attn_T < (1ll << 30) ? attn_T : 1ll << 30) : T;
    return ws + sdp_model_attention_ws_bytes(
                    1, sdp_model_attention_batch(1, B, at, m->num_heads, m->head_dim, b), at,
                    m->num_heads, m->head_dim);
}

unsigned long long sdp_plan_layer_bytes(const struct sdp_model_cfg *m, enum sdp_dtype work_dtype,
                                        int micro_batch, int seq_len, enum sdp_act_place act,
                                        int offload, int residual_f32)
{
    const unsigned long long es = sdp_dtype_size(work_dtype), rb = residual_f32 ? 4 : es,
                             n = (unsigned long long)micro_batch * (unsigned long long)seq_len;
    int kind = sdp_act_saved(act);
    unsigned long long b = 0;
    if (act == SDP_ACT_KEEP)
        return sdp_model_layer_act_bytes_res(m, micro_batch, seq_len, (int)es, (int)rb, 0);
    if (!offload) /* offloaded: on the host but for the few around the layer at work */
        b += sdp_model_layer_act_bytes_res(m, micro_batch, seq_len, (int)es, (int)rb, kind);
    if (act == SDP_ACT_KEEP_MLP) /* the mid residual and the gate/up projection */
        b += n * (2ull * (unsigned long long)m->intermediate_size * es +
                  (unsigned long long)m->hidden_size * rb);
    return b;
}

unsigned long long sdp_plan_gpu_bytes_min(const struct sdp_plan *p, const struct sdp_model_cfg *m,
                                          enum sdp_dtype work_dtype, int micro_batch, int seq_len,
                                          unsigned long long gpu_limit, unsigned long long *budget)
{
    const unsigned long long es = sdp_dtype_size(work_dtype), rb = p->residual_f32 ? 4 : es,
                             n = (unsigned long long)micro_batch * (unsigned long long)seq_len;
    const unsigned long long full =
        sdp_model_layer_act_bytes_res(m, micro_batch, seq_len, (int)es, (int)rb, 0);
    unsigned long long bytes, group_max = 0, pool = 0;
    int nrec = 0;
    for (int g = 0; g < sdp_model_num_groups(m); g++) {
        unsigned long long ne = sdp_model_group_nelems(m, g);
        group_max = ne > group_max ? ne : group_max;
    }
    bytes = 2ull * group_max * (es + 4) +
            n * (unsigned long long)m->hidden_size * (2 * es + rb + (rb != es ? es : 0));
    for (int l = 1; l <= p->nlayers; l++) {
        const struct sdp_plan_group *pg = &p->group[l];
        int kind = sdp_act_saved(pg->act);
        bytes += sdp_plan_layer_bytes(m, work_dtype, micro_batch, seq_len, pg->act,
                                      pg->offload && pg->act != SDP_ACT_KEEP, p->residual_f32);
        nrec += pg->act != SDP_ACT_KEEP;
        if (pg->offload && pg->act != SDP_ACT_KEEP) {
            unsigned long long saved =
                sdp_model_layer_act_bytes_res(m, micro_batch, seq_len, (int)es, (int)rb, kind);
            pool = saved > pool ? saved : pool;
        }
    }
    bytes += 4 * pool;
    bytes += (nrec ? 2ull : 1ull) * full; /* the layers at work */
    return bytes + sdp_graph_ws_bytes(m, work_dtype, micro_batch, seq_len, p->attn_row_tokens,
                                      gpu_limit, bytes, budget);
}
