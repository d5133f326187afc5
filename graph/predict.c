/* SPDX-License-Identifier: MIT */
/* The step-time model (predict.h): service demands per resource, the GPU's dependency chain, the
 * memory peaks.  Every figure is per step; per-GPU figures are those of one rank (the ranks are
 * alike: the same micro-batches per rank, the same routes), per-node figures those of one node
 * (the nodes are alike; the link between them: predict_nodes.c). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/sdp_log.h"
#include "graph/predict.h"
#include "graph/predict_internal.h"
#include "models/sdp_lora.h"
#include "models/sdp_models.h"

/* Bytes of host DRAM one AdamW element moves: read fp32 p, m, v (12) and the gradient, write p, m,
 * v (12) and the working copy (BENCH.md: 28 with a bf16 gradient and a bf16 copy). */
static double adamw_bpp(int grad_bytes, int es)
{
    return 24.0 + grad_bytes + es;
}

void sdp_predict_machine_h200(struct sdp_predict_machine *mc)
{
    memset(mc, 0, sizeof(*mc));
    mc->ngpus = 1;
    /* BENCH.md per-op ceilings: the qwen3-4b/8b GEMMs reach 620-790 TFLOP/s, ~700 typical;
     * attention fwd+bwd 330-340 TFLOP/s (causal half counted) */
    mc->gpu_flops = 700e12; /* the kernels alone: element-wise work and task overheads apart */
    mc->gpu_attn_flops = 335e12;
    mc->gpu_mem_bps = 4.0e12; /* H200 HBM3e 4.8 TB/s nominal, ~4 sustained */
    /* short element-wise kernels reach less: SwiGLU, the norms and RoPE of an H100 step (3.35
     * TB/s HBM3) moved their bytes at ~1.9 TB/s (bench/results/2026-12-06-h100-predict.md),
     * scaled to the H200's memory */
    mc->elem_bps = 2.7e12;
    mc->h2d_bps = 55.5e9; /* BENCH.md pinned H2D / D2H */
    /* uploads while every host thread runs AdamW: a fourth of the idle rate on an H100 node
     * (bench/results/2026-12-06-h100-predict.md), but the reference node's measured steps agree
     * within 5% without a slowdown (tests/graph/test_predict.c): none here, calibrate measures it
     */
    mc->h2d_busy_bps = 0;
    mc->d2h_bps = 55.3e9;
    mc->h2d_all_bps = 55.5e9; /* one GPU: the same link */
    mc->d2h_all_bps = 55.3e9;
    mc->peer_bps = 0;
    /* the triad's 81 GB/s understates read-heavy streams: the host AdamW lane ran 86-88% busy at
     * qwen3-8b/16, 1.876 s a step (docs/performance.md): 8.19 G params x 28 B / 1.63 s = 140 GB/s
     * with 15 threads, so DRAM sustains at least that; the seed's AdamW saturates at 182 GB/s */
    mc->dram_bps = 180e9;
    mc->adamw_core_bps = 12e9; /* 140 GB/s over 15 threads is 9.4; saturation near 12 threads */
    mc->adamw_max_bps = 140e9;
    mc->cast_core_bps = 12e9;
    mc->cast_max_bps = 140e9;
    mc->cpu_cores = 16;
    mc->task_s = 20e-6; /* StarPU submission + scheduling + launch, tens of us a task */
    mc->host_base_bytes = 3ull << 30;
    mc->gpu_mem_bytes = 143771ull << 20; /* what the driver reports of the H200's 141 GB */
    mc->gpu_base_bytes = 530ull << 20;   /* an H100's before StarPU allocated: 0.518 GiB */
    mc->node_bps = SDP_PREDICT_NODE_GBS * 1e9;
    mc->node_latency_s = SDP_PREDICT_NODE_LATENCY_US * 1e-6;
}

void sdp_predict_machine_cpu2(struct sdp_predict_machine *mc)
{
    memset(mc, 0, sizeof(*mc));
    mc->ngpus = 0;
    mc->gpu_flops = 20e9; /* fp32 reference GEMMs on two cores */
    mc->gpu_attn_flops = 5e9;
    mc->elem_bps = 5e9; /* one core streaming fp32 element-wise ops */
    mc->dram_bps = 10e9;
    mc->adamw_core_bps = 2e9;
    mc->adamw_max_bps = 4e9;
    mc->cast_core_bps = 2e9;
    mc->cast_max_bps = 4e9;
    mc->cpu_cores = 2;
    mc->task_s = 50e-6;
    mc->host_base_bytes = 256ull << 20;
    mc->node_bps = SDP_PREDICT_NODE_GBS * 1e9;
    mc->node_latency_s = SDP_PREDICT_NODE_LATENCY_US * 1e-6;
}

double sdp_predict_lane_bps(double per_core_bps, double max_bps, int threads)
{
    double r = (threads > 0 ? threads : 1) * per_core_bps;
    return r < max_bps ? r : max_bps;
}

const char *sdp_predict_res_name(enum sdp_predict_res r)
{
    static const char *const names[] = { "gpu",  "h2d",  "d2h", "link-h2d",  "link-d2h",
                                         "peer", "dram", "cpu", "node-link", "dependencies" };
    return r >= 0 && r <= SDP_PRES_DEPS ? names[r] : "?";
}

/* bytes / rate, 0 where there is no link (rate 0) */
static double xfer_s(double bytes, double bps)
{
    return bps > 0 ? bytes / bps : 0.0;
}

/* What one GPU's compute costs for one micro-batch of layer gi: forward, the recomputation its
 * placement asks, backward (twice the GEMMs, 2.5x the attention: BENCH.md counts fwd+bwd as 3.5x
 * forward). */
static double layer_compute_s(const struct sdp_model_cfg *m, int B, int T,
                              const struct sdp_predict_machine *mc, enum sdp_act_place act)
{
    double N = (double)B * T, C = m->hidden_size, I = m->intermediate_size;
    double attn = 2.0 * B * (double)m->num_heads * T * (double)T * m->head_dim;
    double gemm = sdp_model_layer_fwd_flops(m, B, T) - attn;
    double o = 2.0 * N * C * (double)m->num_heads * m->head_dim, gu = 2.0 * N * C * 2.0 * I;
    double rg = 0, ra = 0; /* recomputed GEMM and attention FLOPs */
    if (act == SDP_ACT_RECOMPUTE)
        rg = gemm, ra = attn;
    else if (act == SDP_ACT_SELECTIVE)
        rg = gemm - o, ra = attn;
    else if (act == SDP_ACT_KEEP_MLP)
        rg = gemm - o - gu, ra = attn;
    else if (act == SDP_ACT_KEEP_ATTN)
        rg = gemm;
    return (3.0 * gemm + rg) / mc->gpu_flops + (3.5 * attn + ra) / mc->gpu_attn_flops;
}

/* Bytes the element-wise kernels of one layer move for one micro-batch (es bytes an element):
 * forward the two RMSNorms (read and write C each), RoPE with the q/k norms (the QKV rows) and
 * SwiGLU (read 2I, write I); the backward the norms' (read x and dy, write dx), RoPE's and
 * SwiGLU's (read 3I, write 2I); a recomputation runs the forward's again. */
static double layer_elem_bytes(const struct sdp_model_cfg *m, int B, int T, int es,
                               enum sdp_act_place act)
{
    double C = m->hidden_size, I = m->intermediate_size;
    double qkv = (double)(m->num_heads + 2 * m->num_kv_heads) * m->head_dim;
    double fwd = 4 * C + 2 * qkv + 3 * I, bwd = 6 * C + 2 * qkv + 5 * I;
    return (double)B * T * es * (fwd * (act == SDP_ACT_KEEP ? 1 : 2) + bwd);
}

/* The forward alone of one micro-batch of a layer. */
static double layer_fwd_s(const struct sdp_model_cfg *m, int B, int T,
                          const struct sdp_predict_machine *mc)
{
    double attn = 2.0 * B * (double)m->num_heads * T * (double)T * m->head_dim;
    return (sdp_model_layer_fwd_flops(m, B, T) - attn) / mc->gpu_flops + attn / mc->gpu_attn_flops;
}

/* The GEMMs of one layer's forward for one micro-batch: what a frozen base's backward saves (no
 * weight gradient, LoRA). */
static double layer_gemm_fwd_s(const struct sdp_model_cfg *m, int B, int T,
                               const struct sdp_predict_machine *mc)
{
    double attn = 2.0 * B * (double)m->num_heads * T * (double)T * m->head_dim;
    return (sdp_model_layer_fwd_flops(m, B, T) - attn) / mc->gpu_flops;
}

/* Elements group gi trains: all of them, or under LoRA its adapters' (none for a frozen group). */
/* One GPU's compute for the LM head of one micro-batch: logits forward, both gradients. */
static double head_compute_s(const struct sdp_model_cfg *m, int B, int T,
                             const struct sdp_predict_machine *mc)
{
    return 3.0 * 2.0 * (double)B * T * m->hidden_size * m->vocab_size /
           (mc->head_flops > 0 ? mc->head_flops : mc->gpu_flops);
}

struct rates {
    double h2d, d2h;    /* one GPU's, with every rank transferring at once */
    double adamw, cast; /* the host's lanes with the cores not driving GPUs */
    int ranks, es;
};

static void rates_of(const struct sdp_predict_machine *mc, int ranks, int es, struct rates *r)
{
    int threads = mc->cpu_cores - mc->ngpus;
    r->h2d = mc->h2d_bps, r->d2h = mc->d2h_bps;
    if (ranks > 1 && mc->h2d_all_bps > 0 && mc->h2d_all_bps / ranks < r->h2d)
        r->h2d = mc->h2d_all_bps / ranks;
    if (ranks > 1 && mc->d2h_all_bps > 0 && mc->d2h_all_bps / ranks < r->d2h)
        r->d2h = mc->d2h_all_bps / ranks;
    r->adamw = sdp_predict_lane_bps(mc->adamw_core_bps, mc->adamw_max_bps, threads);
    r->cast = sdp_predict_lane_bps(mc->cast_core_bps, mc->cast_max_bps, threads);
    r->ranks = ranks, r->es = es;
}

/* Bytes each step brings group gi from the host to one rank (its parameters; sharded: its share,
 * the rest from peers), and whether the backward brings them again: a bounded window releases the
 * recomputed layers below the top `window` after the forward (graph/cost.c). */
static void param_bytes(const struct sdp_plan *p, const struct sdp_model_cfg *m, int gi, int es,
                        double *host, double *peer, int *twice)
{
    double nb = (double)sdp_model_group_nelems(m, gi) * es;
    int R = p->nranks;
    *twice = p->window > 0 && gi >= 1 && gi <= p->nlayers - p->window &&
             p->group[gi].act != SDP_ACT_KEEP;
    *host = p->param_route == SDP_ROUTE_SHARDED && R > 1 ? nb / R : nb;
    *peer = nb - *host;
}

/* The per-step sums one group adds, and the GPU chain's share of it. */
struct acc {
    double compute_s, gpu_update_s, h2d, d2h, d2h_all, peer, adamw, reduce, chain_s;
    double top_s; /* the GPU's work from the top layer's forward to its gradient: layer L, head */
    double fwd_below_s; /* the forward of the layers below the top one */
    long long tasks, host_tasks;
    struct sdp_pgroup_cost *cost; /* per group, for the timeline (predict_sim.c); NULL: none */
};

static void add_group(const struct sdp_predict_run *run, const struct sdp_predict_machine *mc,
                      const struct rates *r, int gi, struct acc *a)
{
    const struct sdp_plan *p = run->plan;
    const struct sdp_plan_group *pg = &p->group[gi];
    const struct sdp_model_cfg *m = run->m;
    int B = run->micro_batch, T = run->seq_len, nr = run->n_micro / p->nranks, twice;
    int layer = gi >= 1 && gi <= p->nlayers, frozen = p->lora.rank > 0;
    int gb = frozen ? 4 : pg->grad_bf16 ? 2 : 4; /* the adapters' gradients return in fp32 */
    double nt = sdp_predict_trained_elems(p, m, gi), host, peer, act = 0, cf = 0, ct = 0;
    param_bytes(p, m, gi, r->es, &host, &peer, &twice);
    /* a frozen copy never changes: on the GPU it stays, unless the window drops it; the sharded
     * route's replicas, dropped after each step, get the other ranks' chunks again (peer); routed
     * streaming copies a frozen layer's routed experts each step as a trained layer's */
    if (frozen && !pg->moe_routed)
        host *= twice ? 2 : 0, twice = 0;
    if (layer && pg->offload && pg->act != SDP_ACT_KEEP) /* out after the forward, back later */
        act = (double)sdp_model_layer_act_bytes_res(m, B, T, r->es, p->residual_f32 ? 4 : r->es,
                                                    sdp_act_saved(pg->act));
    if (layer) {
        cf = nr * layer_fwd_s(m, B, T, mc);
        ct = nr *
             (layer_compute_s(m, B, T, mc, pg->act) - (frozen ? layer_gemm_fwd_s(m, B, T, mc) : 0));
    } else if (gi == SDP_PLAN_HEAD(p)) {
        cf = ct = nr * head_compute_s(m, B, T, mc) * (frozen ? 2.0 / 3.0 : 1.0);
    }
    if (layer && mc->elem_bps > 0)
        ct += nr * layer_elem_bytes(m, B, T, r->es, pg->act) / mc->elem_bps;
    if (mc->elem_bps > 0) /* the gradient zeroed (fp32), and packed to bf16 for the return */
        ct += nt * (4.0 + (gb == 2 ? 6.0 : 0.0)) / mc->elem_bps;
    a->compute_s += ct;
    if (gi >= p->nlayers)
        a->top_s += ct;
    else
        a->fwd_below_s += cf;
    double again = host; /* what the backward brings again where the window let the copy go */
    if (pg->moe_routed && mc->ngpus > 0) { /* routed streaming: the experts the tokens route to */
        double ex = (double)sdp_model_group_expert_elems(m, gi) * r->es;
        host -= ex * (1.0 - sdp_model_moe_routed_share(m, (double)B * T * nr));
        again -= ex * (1.0 - sdp_model_moe_routed_share(m, (double)B * T));
    }
    /* the routed return: the gradient of the experts without token neither returns nor updates */
    double up = nt; /* the elements whose gradient returns and whose AdamW runs */
    if (pg->grad_routed && mc->ngpus > 0)
        up -= (double)sdp_model_group_expert_elems(m, gi) *
              (1.0 - sdp_model_moe_routed_share(m, (double)B * T * nr));
    a->h2d += host + twice * again + nr * act;
    a->peer += peer * (1 + twice);
    a->d2h += up * gb + nr * act; /* rank 0's */
    a->d2h_all += p->nranks * nr * act + up * gb * (pg->grad_gpu ? 1 : p->nranks);
    if (p->nranks > 1 && pg->grad_gpu) /* rank 0 receives the others' fp32 gradients */
        a->peer += (p->nranks - 1) * nt * 4.0;
    else if (p->nranks > 1) /* the host sums R gradients into one */
        a->reduce += (p->nranks + 1) * nt * gb;
    if (p->nodes > 1) /* and the sum of the nodes before (graph/nodes.c): one more fp32 read, or
                         with one rank a sum of two: read both, write one */
        a->reduce += nt * 4.0 * (p->nranks > 1 ? 1 : 3);
    if (pg->update_gpu)
        a->gpu_update_s += nt * adamw_bpp(gb, r->es) / mc->gpu_mem_bps;
    else
        a->adamw += up * adamw_bpp(gb, r->es);
    /* a layer's GPU tasks: forward 9 (two norms, four matmuls, RoPE, attention, SwiGLU), as many
     * again recomputed (selective: the output projection not; keep-mlp: the gate/up not either;
     * keep-attn: the attention not),
     * backward 13 (eight matmuls, two norms, RoPE, attention, SwiGLU); the gradient's zeroing
     * and packing */
    a->tasks += layer ? nr * (9 + 13 +
                              (pg->act == SDP_ACT_RECOMPUTE   ? 9
                               : pg->act == SDP_ACT_SELECTIVE ? 8
                               : pg->act == SDP_ACT_KEEP_MLP  ? 6
                               : pg->act == SDP_ACT_KEEP_ATTN ? 8
                                                              : 0)) +
                            2
                      : 2 * nr + 2;
    if (layer && frozen) /* no weight gradients (4 matmuls); an adapter's task each way */
        a->tasks += nr * (-4 + 2 * __builtin_popcount(pg->lora_targets));
    /* a chunk's pack or norm, and its update (LoRA: the adapters', one chunk) */
    a->host_tasks += frozen ? (nt > 0 ? 2 : 0) : 2ll * pg->nchunks;
    /* the chain: forward, then backward with the recomputation; a transfer longer than the compute
     * it feeds shows; without a window every copy may prefetch, and transfers hide.  With no
     * lookahead a layer's backward waits for its own parameters (no overlap) */
    double fwd_x = xfer_s(host, r->h2d), bwd_in = xfer_s(host * twice + nr * act, r->h2d);
    double bwd_out = xfer_s(up * gb + nr * act, r->d2h), cb = ct - cf;
    if (p->window <= 0) {
        a->chain_s += ct;
    } else {
        a->chain_s += cf > fwd_x ? cf : fwd_x;
        if (p->bwd_lookahead == 0)
            cb += bwd_in, bwd_in = 0;
        cb = cb > bwd_in ? cb : bwd_in;
        a->chain_s += cb > bwd_out ? cb : bwd_out;
    }
    if (a->cost) {
        struct sdp_pgroup_cost *c = &a->cost[gi];
        int threads = mc->cpu_cores - mc->ngpus > 0 ? mc->cpu_cores - mc->ngpus : 1;
        c->fwd_s = gi == SDP_PLAN_HEAD(p) ? ct : cf;
        c->bwd_s = gi == SDP_PLAN_HEAD(p) ? 0 : p->window > 0 && cb < bwd_in ? bwd_in : cb;
        c->up_bytes = host;
        c->down_s = bwd_out;
        c->update_s = pg->update_gpu ? 0 : up * adamw_bpp(gb, r->es) / (r->adamw / threads);
        c->nchunks = frozen ? 1 : pg->nchunks;
        c->acc_bytes = nt * 4.0;
        c->held_bytes = nt * gb; /* the host copies are whole, routed or not */
        /* the bf16 chunks, or the fp32 chunks' copies, go as their updates end */
        c->held_chunks = gb == 2 || (pg->grad_chunks && mc->ngpus > 0);
        c->up_chunks = pg->work_chunks && mc->ngpus > 0;
        if (gi == 0 && pg->embed_early) { /* the rows the step's tokens do not select: early */
            double V = m->vocab_size, N = (double)B * T * nr;
            c->early_frac = exp(-N / V);
        }
    }
}

/* Exposed at the step boundary (synchronous weights): the last gradients of the backward are
 * layer 1's (and the embedding's, unless updated early), and the next forward starts with them.
 * One chunk's return, their updates, the host's sum of the ranks' gradients and one chunk's way
 * back do not overlap compute.  The host updates whole chunks, one a thread: the chunks of both
 * groups take ceil(chunks / threads) rounds, after half a chunk of those the workers are running
 * when the backward ends (bench/results: 64 MiB chunks left 24 embedding chunks for 15 cores, two
 * rounds of 45 ms plus the running ones; 16 MiB chunks cut that tail by ~100 ms).  With the early
 * embedding update, the rows the step's tokens select stay late: V (1 - exp(-N / V)) of them for
 * N uniform tokens. */
static double boundary_s(const struct sdp_predict_run *run, const struct sdp_predict_machine *mc,
                         const struct rates *r)
{
    const struct sdp_plan *p = run->plan;
    int threads = mc->cpu_cores - mc->ngpus > 0 ? mc->cpu_cores - mc->ngpus : 1, chunks = 0;
    double t = 0, host = 0, bpp = 0;
    if (p->param_delay || p->nlayers < 1)
        return 0;
    for (int gi = 0; gi <= 1; gi++) {
        const struct sdp_plan_group *pg = &p->group[gi];
        double n = sdp_predict_trained_elems(p, run->m, gi), gb = pg->grad_bf16 ? 2 : 4;
        if (n <= 0) /* LoRA: a frozen group without adapters */
            continue;
        double ce = pg->chunk_elems > 0 && (double)pg->chunk_elems < n ? pg->chunk_elems : n;
        if (gi == 0 && pg->embed_early) {
            double V = run->m->vocab_size,
                   N = (double)run->micro_batch * run->seq_len * (run->n_micro / p->nranks);
            n = V * (1.0 - exp(-N / V)) * run->m->hidden_size;
            ce = ce < n ? ce : n;
        }
        t += xfer_s(ce * gb, r->d2h) + xfer_s(ce * r->es, r->h2d);
        bpp = adamw_bpp((int)gb, r->es);
        if (pg->update_gpu) {
            t += n * bpp / mc->gpu_mem_bps;
        } else {
            host += n, chunks += (int)ceil(n / ce);
        }
        if (p->nranks > 1 && !pg->grad_gpu)
            t += (p->nranks + 1) * n * gb / r->cast;
    }
    if (chunks > 0) { /* rounds of k chunks at once, after half a chunk of those running */
        int k = chunks < threads ? chunks : threads;
        double lane1 = sdp_predict_lane_bps(mc->adamw_core_bps, mc->adamw_max_bps, k) / k;
        double ce = (double)p->group[1].chunk_elems, n1 = (double)sdp_model_group_nelems(run->m, 1);
        t += (double)((chunks + threads - 1) / threads) * (host / chunks) * bpp / lane1;
        t += 0.5 * (ce > 0 && ce < n1 ? ce : n1) * bpp / (r->adamw / threads);
    }
    return t;
}

/* The staging bound: with the working copies staged, a stage is reused once its chunk has been
 * written by one update thread and sent; S stages cap the parameter stream at S chunks per such
 * round trip. */
static void stage_cap(const struct sdp_predict_run *run, const struct sdp_predict_machine *mc,
                      struct rates *r)
{
    const struct sdp_plan_group *pg = &run->plan->group[1];
    if (!run->work_staged || run->stage_buffers <= 0 || r->h2d <= 0 || pg->chunk_elems == 0 ||
        mc->adamw_core_bps <= 0)
        return;
    double cw = (double)pg->chunk_elems * r->es;
    double round =
        (double)pg->chunk_elems * adamw_bpp(pg->grad_bf16 ? 2 : 4, r->es) / mc->adamw_core_bps +
        cw / r->h2d;
    double cap = run->stage_buffers * cw / round;
    r->h2d = cap < r->h2d ? cap : r->h2d;
}

static int check_run(const struct sdp_predict_run *run)
{
    const struct sdp_plan *p = run->plan;
    int P;
    if (!run->m || !p || !p->group)
        return sdp_err(-EINVAL, "predict: no model or no plan");
    if (p->nlayers != run->m->num_layers || p->ngroups != p->nlayers + 2)
        return sdp_err(-EINVAL, "predict: a plan of %d layers for a model of %d", p->nlayers,
                       run->m->num_layers);
    P = p->nodes > 1 ? p->nodes : 1;
    if (run->micro_batch < 1 || run->seq_len < 1 || run->n_micro < 1 || p->nranks < 1 ||
        run->n_micro % (p->nranks * P))
        return sdp_err(-EINVAL, "predict: B %d, T %d, %d micro-batches over %d node%s of %d ranks",
                       run->micro_batch, run->seq_len, run->n_micro, P, P > 1 ? "s" : "",
                       p->nranks);
    return 0;
}

/* The step: the longest chain or the largest demand; the bound: the resource whose demand it is,
 * the node link where its chain is the longest (its demand, beyond the backward it overlaps), or
 * a lane busy 85% of a chain-bound step (the traces' reading, tools/predict_table.py:
 * qwen3-4b/32's GPU lane at 91% bounds it); below that, the waits between the lanes
 * (SDP_PRES_DEPS). */
static void step_and_bound(struct sdp_predict *o)
{
    const double *d = o->demand_s;
    int top = 0;
    o->step_s = o->chain_s > o->host_chain_s ? o->chain_s : o->host_chain_s;
    o->bound = SDP_PRES_DEPS;
    if (o->node_chain_s > o->step_s)
        o->step_s = o->node_chain_s, o->bound = SDP_PRES_NODE;
    for (int i = 0; i < SDP_PRES_COUNT; i++) {
        if (d[i] > o->step_s)
            o->step_s = d[i], o->bound = (enum sdp_predict_res)i;
        top = d[i] > d[top] ? i : top;
    }
    if (o->bound == SDP_PRES_DEPS && d[top] >= 0.85 * o->step_s)
        o->bound = (enum sdp_predict_res)top;
    for (int i = 0; i < SDP_PRES_COUNT; i++)
        o->busy[i] = d[i] / o->step_s;
}

int sdp_predict_machine_check(const struct sdp_predict_machine *mc)
{
    if (!(mc->gpu_flops > 0 && mc->gpu_attn_flops > 0 && mc->dram_bps > 0 &&
          mc->adamw_core_bps > 0 && mc->adamw_max_bps > 0 && mc->cast_core_bps > 0 &&
          mc->cast_max_bps > 0 && mc->cpu_cores >= 1 && mc->ngpus >= 0 && mc->task_s >= 0 &&
          mc->h2d_bps >= 0 && mc->d2h_bps >= 0 && mc->h2d_all_bps >= 0 && mc->d2h_all_bps >= 0 &&
          mc->peer_bps >= 0 && mc->head_flops >= 0 && mc->elem_bps >= 0 && mc->node_bps >= 0 &&
          mc->node_latency_s >= 0 && (mc->ngpus == 0 || mc->gpu_mem_bps > 0)))
        return sdp_err(-EINVAL,
                       "predict: a machine with a rate <= 0 (gpu %g FLOP/s, attention %g, DRAM %g "
                       "B/s, AdamW %g/%g, cast %g/%g, %d cores, node link %g B/s, %g s)\nhint: "
                       "recalibrate, or take the defaults (sdp_predict_machine_h200, _cpu2)",
                       mc->gpu_flops, mc->gpu_attn_flops, mc->dram_bps, mc->adamw_core_bps,
                       mc->adamw_max_bps, mc->cast_core_bps, mc->cast_max_bps, mc->cpu_cores,
                       mc->node_bps, mc->node_latency_s);
    return 0;
}

int sdp_predict_step(const struct sdp_predict_run *whole, const struct sdp_predict_machine *mc,
                     struct sdp_predict *o)
{
    const struct sdp_plan *p = whole->plan;
    struct sdp_predict_run node = *whole, *run = &node; /* one node's share of the run */
    struct rates r;
    struct acc a = { 0 };
    struct sdp_node_cost nc;
    struct sdp_sim_out sim_out = { 0.0, -1.0 };
    int rc = check_run(whole), R;
    if (!rc)
        rc = sdp_predict_machine_check(mc);
    if (rc)
        return rc;
    memset(o, 0, sizeof(*o));
    node.n_micro = whole->n_micro / (p->nodes > 1 ? p->nodes : 1);
    R = p->nranks;
    rates_of(mc, R, run->work_dtype == SDP_F32 ? 4 : 2, &r);
    stage_cap(run, mc, &r);
    int sim = sdp_plan_one_rank(p) && !p->param_delay && mc->ngpus > 0 && !run->work_staged;
    for (int gi = 0; sim && gi < p->ngroups; gi++)
        sim = !p->group[gi].update_gpu;
    if (sim && !(a.cost = calloc((size_t)p->ngroups, sizeof(*a.cost))))
        return sdp_err(-ENOMEM, "predict: the timeline of %d groups", p->ngroups);
    for (int gi = 0; gi < p->ngroups; gi++)
        add_group(run, mc, &r, gi, &a);
    double *d = o->demand_s, host_h2d = a.h2d * R, host_d2h = a.d2h_all;
    sdp_predict_node_cost(run, mc, &nc);
    o->boundary_s = boundary_s(run, mc, &r) + (p->param_delay ? 0 : nc.tail_s);
    o->chain_s = a.chain_s + a.tasks * mc->task_s + a.gpu_update_s + o->boundary_s;
    if (a.cost) { /* one rank on a GPU: the timeline, the next forward chasing the updates */
        int threads = mc->cpu_cores - mc->ngpus > 0 ? mc->cpu_cores - mc->ngpus : 1;
        const struct sdp_sim_link link = { r.h2d, mc->h2d_busy_bps };
        o->chain_s =
            sdp_predict_sim(a.cost, p->ngroups, threads, &link, &sim_out) + a.tasks * mc->task_s;
        o->wait_s = sim_out.gpu_wait_s;
        free(a.cost);
    }
    d[SDP_PRES_GPU] = a.compute_s + a.tasks * mc->task_s + a.gpu_update_s;
    d[SDP_PRES_H2D] = xfer_s(a.h2d, mc->h2d_bps);
    d[SDP_PRES_D2H] = xfer_s(a.d2h, mc->d2h_bps);
    d[SDP_PRES_LINK_H2D] = xfer_s(host_h2d, mc->h2d_all_bps);
    d[SDP_PRES_LINK_D2H] = xfer_s(host_d2h, mc->d2h_all_bps);
    d[SDP_PRES_PEER] = xfer_s(a.peer, mc->peer_bps);
    /* DMA reads and writes host memory beside the host's lanes; their own traffic is in their
     * measured rates (AdamW's and the cast's tables), so DRAM counts the DMA alone: a step
     * bound by DRAM is one whose transfers outrun the memory the lanes leave; the NIC's DMA
     * reads what goes to the other nodes and writes what comes from them */
    o->dram_bytes = (mc->h2d_bps > 0 ? host_h2d + host_d2h : 0) + 2 * nc.bytes;
    d[SDP_PRES_DRAM] = o->dram_bytes / mc->dram_bps;
    d[SDP_PRES_CPU] =
        a.adamw / r.adamw + a.reduce / r.cast +
        a.host_tasks * mc->task_s / (mc->cpu_cores > mc->ngpus ? mc->cpu_cores - mc->ngpus : 1);
    if (mc->ngpus == 0) /* CPU workers: the compute takes the same cores */
        d[SDP_PRES_CPU] += d[SDP_PRES_GPU];
    d[SDP_PRES_NODE] = nc.demand_s;
    o->node_bytes = nc.bytes, o->node_tail_s = nc.tail_s;
    o->node_chain_s = sdp_predict_node_chain(p, a.fwd_below_s + a.top_s, &nc, o->boundary_s);
    /* the host's chain: synchronous weights hold its first gradient of a step until the forward
     * has reached the top layer, so a host-bound step adds the top layer and the head (its
     * updates done, the host waits for them); CPU workers compute them on those cores */
    o->host_chain_s = d[SDP_PRES_CPU] + (p->param_delay || mc->ngpus == 0 || sim ? 0 : a.top_s);
    step_and_bound(o);
    o->tokens_per_s = (double)whole->micro_batch * whole->seq_len * whole->n_micro / o->step_s;
    o->h2d_bytes = a.h2d, o->d2h_bytes = a.d2h, o->peer_bytes = a.peer;
    o->adamw_bytes = a.adamw, o->reduce_bytes = a.reduce, o->tasks = a.tasks;
    o->host_tasks = a.host_tasks;
    /* model FLOPs of one GPU (BENCH.md's count: recomputation not counted) */
    o->gpu_flops = sdp_model_train_flops_per_token(run->m, run->seq_len) * run->micro_batch *
                   run->seq_len * (run->n_micro / R);
    o->gpu_bytes = o->gpu_need_bytes = sdp_predict_gpu_peak(run, sim_out.grad_peak);
    /* under a cap StarPU keeps evicted copies cached until the cap: it fills it, and the CUDA
     * context and the libraries' workspaces lie outside it (the H100's peaks under 15 and 23 GiB
     * caps sat 0.58-0.60 GiB over them, bench/results/2026-12-06-h100-predict.md) */
    if (run->gpu_limit_bytes > 0 && mc->ngpus > 0) {
        double full = run->gpu_limit_bytes + mc->gpu_base_bytes + (64ull << 20);
        o->gpu_bytes = full > o->gpu_bytes ? (unsigned long long)full : o->gpu_bytes;
    }
    sdp_predict_host_peak(run, mc, o);
    return 0;
}

double sdp_predict_layer_s(const struct sdp_model_cfg *m, int B, int T, enum sdp_dtype work,
                           const struct sdp_predict_machine *mc, enum sdp_act_place act)
{
    double t = layer_compute_s(m, B, T, mc, act);
    if (mc->elem_bps > 0)
        t += layer_elem_bytes(m, B, T, work == SDP_F32 ? 4 : 2, act) / mc->elem_bps;
    return t;
}

int sdp_predict_plan_from_conf(struct sdp_plan *p, const struct sdp_model_cfg *m,
                               const struct sdp_graph_conf *c, size_t chunk_bytes, int grad_bf16)
{
    int L = m->num_layers, pipe = sdp_plan_chunk_pipeline(1) > 0; /* priced on a GPU */
    memset(p, 0, sizeof(*p));
    if (c->keep_last < 0 || c->keep_last > L || c->keep_mlp < 0 || c->keep_mlp > L ||
        chunk_bytes < 4)
        return sdp_err(-EINVAL, "predict: keep_last %d, keep_mlp %d (0..%d), chunk %zu bytes",
                       c->keep_last, c->keep_mlp, L, chunk_bytes);
    p->nlayers = L, p->ngroups = L + 2;
    if (!(p->group = calloc((size_t)p->ngroups, sizeof(*p->group))))
        return sdp_err(-ENOMEM, "plan of %d groups", p->ngroups);
    p->nranks = c->nranks > 1 ? c->nranks : 1;
    p->nodes = c->nodes > 1 ? c->nodes : 1;
    p->param_route = c->param_route, p->window = c->window, p->bwd_lookahead = c->bwd_lookahead;
    p->param_delay = c->param_delay, p->clip = c->max_grad_norm > 0 || c->skip_nonfinite;
    p->lora = c->lora;
    p->residual_f32 = sdp_plan_residual_f32(c, SDP_BF16); /* fp32 copies: 4 bytes either way */
    p->attn_row_tokens = c->doc_mask ? c->attn_row_tokens : 0;
    for (int gi = 0; gi < p->ngroups; gi++) {
        struct sdp_plan_group *pg = &p->group[gi];
        pg->lora_targets = c->lora.rank > 0 ? sdp_lora_layer_targets(&c->lora, m, gi) : 0;
        pg->lora_rank = pg->lora_targets ? c->lora.rank : 0; /* as plan.c */
        size_t n = sdp_model_group_nelems(m, gi);
        enum sdp_act_place act = SDP_ACT_KEEP; /* as plan.c's act_of */
        if (gi >= 1 && gi <= L && c->recompute && gi <= L - c->keep_last)
            act = gi > L - c->keep_last - c->keep_mlp       ? SDP_ACT_KEEP_MLP
                  : c->recompute == SDP_RECOMPUTE_SELECTIVE ? SDP_ACT_SELECTIVE
                  : c->recompute == SDP_RECOMPUTE_ATTN      ? SDP_ACT_KEEP_ATTN
                                                            : SDP_ACT_RECOMPUTE;
        pg->act = act;
        pg->offload = act != SDP_ACT_KEEP && c->offload_inputs;
        pg->grad_gpu =
            c->grad_route_gpu ? c->grad_route_gpu[gi] : c->grad_route == SDP_ROUTE_GPU_REDUCE;
        pg->grad_bf16 = grad_bf16;
        pg->chunk_elems = chunk_bytes / 4;
        pg->nchunks = (int)((n + pg->chunk_elems - 1) / pg->chunk_elems);
        pg->mlp_early = -1;
        pg->embed_early = gi == 0 && m->tie_word_embeddings && grad_bf16 && sdp_plan_one_rank(p) &&
                          c->embed_early >= 0 && !p->clip; /* as plan.c, the host's copies */
        /* the chunk pipeline where plan.c would take it on a GPU (sdp_predict_step applies it
         * only there); the host lookup's embedding and GPU updates aside */
        pg->work_chunks = pipe && pg->nchunks > 1 && !p->param_delay && c->lora.rank <= 0 &&
                          (p->nranks == 1 || p->param_route != SDP_ROUTE_SHARDED) &&
                          !(gi == 0 && c->embed_lookup_host);
        /* routed streaming where plan.c takes it on a GPU (priced only there: add_group) */
        pg->moe_routed = gi >= 1 && gi <= p->nlayers && sdp_model_layer_sparse(m, gi - 1) &&
                         pg->nchunks > 1 && !p->param_delay &&
                         (c->lora.rank <= 0 || c->window > 0) && p->nranks == 1 &&
                         !sdp_env_is("SDP_MOE_ROUTED", "off");
        pg->work_chunks = pg->work_chunks || pg->moe_routed;
        /* the routed return (plan.c's grad_routed: chunk by chunk in fp32) */
        pg->grad_routed = gi >= 1 && gi <= p->nlayers && sdp_model_layer_sparse(m, gi - 1) &&
                          c->lora.rank <= 0 && p->nranks == 1 &&
                          !sdp_env_is("SDP_MOE_ROUTED", "off");
        pg->grad_chunks = (pipe || pg->grad_routed) && pg->nchunks > 1 && !grad_bf16 &&
                          c->lora.rank <= 0 && (sdp_plan_one_rank(p) || pg->grad_gpu);
    }
    return 0;
}
