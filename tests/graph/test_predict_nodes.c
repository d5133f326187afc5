/* SPDX-License-Identifier: MIT */
/* The step-time model's link between nodes (graph/predict_nodes.c) on hand-computed cases: a toy
 * machine where the link alone is slow (the step is its demand plus the last chunk's trip back),
 * more nodes with the same work per node (each adds two hops of the last chunk, the link's demand
 * hidden behind the backward), a faster or nearer link (never slower, twice the rate about half
 * a network-bound step), and the runs the model refuses.  Relative tolerance 1e-9 where the model
 * and the hand formulas add the same doubles in other orders (a few dozen terms, each rounding
 * <= 2^-53). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/predict.h"
#include "models/sdp_models.h"
#include "tests/lib/sdp_test.h"

#define RTOL       1e-9
#define NEAR(a, b) (fabs((a) - (b)) <= RTOL * fabs(b))

static struct sdp_model_cfg model;

/* the trained elements of every group */
static double elems(void)
{
    double n = 0;
    for (int g = 0; g <= model.num_layers + 1; g++)
        n += (double)sdp_model_group_nelems(&model, g);
    return n;
}

/* the chunk that crosses last: the embedding's, smaller than a 16 MiB chunk here */
static double last_chunk_bytes(void)
{
    double n = (double)sdp_model_group_nelems(&model, 0), ce = (16u << 20) / 4.0;
    return (n < ce ? n : ce) * 4.0;
}

/* A plan of the default knobs over `nodes` nodes of `nranks` ranks, one micro-batch per rank. */
static void plan_of(struct sdp_plan *p, int nodes, int nranks)
{
    struct sdp_graph_conf c = { .micro_batch = 4,
                                .seq_len = 256,
                                .n_micro = nranks,
                                .nranks = nranks,
                                .nodes = nodes,
                                .recompute = SDP_RECOMPUTE_FULL,
                                .keep_last = 1,
                                .window = 2,
                                .bwd_lookahead = 1 };
    if (sdp_predict_plan_from_conf(p, &model, &c, 16u << 20, 0))
        exit(1);
}

/* n_micro: the run's, over every node */
static int predict(const struct sdp_plan *p, const struct sdp_predict_machine *mc, int n_micro,
                   struct sdp_predict *o)
{
    struct sdp_predict_run run = { .m = &model,
                                   .plan = p,
                                   .micro_batch = 4,
                                   .seq_len = 256,
                                   .n_micro = n_micro,
                                   .work_dtype = SDP_BF16 };
    return sdp_predict_step(&run, mc, o);
}

static struct sdp_predict step_of(int nodes, int nranks, const struct sdp_predict_machine *mc)
{
    struct sdp_plan p;
    struct sdp_predict o;
    plan_of(&p, nodes, nranks);
    if (predict(&p, mc, nodes * nranks, &o))
        exit(1);
    sdp_plan_free(&p);
    return o;
}

/* everything but the link fast: 1e18 a second */
static void machine_fast(struct sdp_predict_machine *mc)
{
    memset(mc, 0, sizeof(*mc));
    mc->ngpus = 1, mc->cpu_cores = 3;
    mc->gpu_flops = mc->gpu_attn_flops = mc->gpu_mem_bps = 1e18;
    mc->h2d_bps = mc->d2h_bps = mc->h2d_all_bps = mc->d2h_all_bps = mc->peer_bps = 1e18;
    mc->dram_bps = 1e18;
    mc->adamw_core_bps = mc->adamw_max_bps = mc->cast_core_bps = mc->cast_max_bps = 1e18;
    mc->node_bps = 1e9, mc->node_latency_s = 0;
}

/* The link at 1 GB/s, the rest free.  Two nodes: each sends the fp32 gradient G once and
 * receives it once (the chain one way, the ring back), so the link's demand is G / bw; the step
 * waits for it and then for the last chunk c's way back (its two hops, less its send already in
 * the demand): (G + c) / bw.  Four nodes: the middle ones send G twice (chain and ring), 2 G / bw,
 * and the last chunk's six hops less its two sends: (2 G + 4 c) / bw.  A latency of 1 ms adds one a
 * hop.  The forward and the top layer's backward the link waits for are less than the GPU's whole
 * demand; the free machine's other terms stay below 1e-9 s. */
static void network_bound(void)
{
    struct sdp_predict_machine mc;
    machine_fast(&mc);
    double G = elems() * 4.0, c = last_chunk_bytes(), bw = mc.node_bps;
    struct sdp_predict o2 = step_of(2, 1, &mc), o4 = step_of(4, 1, &mc);
    double want2 = (G + c) / bw, want4 = (2 * G + 4 * c) / bw;
    printf("network-bound: G %.0f B, c %.0f B; 2 nodes %.6f s (want %.6f), 4 nodes %.6f s (want "
           "%.6f), bound %s, %s\n",
           G, c, o2.step_s, want2, o4.step_s, want4, sdp_predict_res_name(o2.bound),
           sdp_predict_res_name(o4.bound));
    CHECK(NEAR(o2.node_bytes, G) && NEAR(o4.node_bytes, 2 * G),
          "the busiest node's bytes each way: the gradient once with 2 nodes, twice with 4");
    CHECK(NEAR(o2.demand_s[SDP_PRES_NODE], G / bw) && NEAR(o4.demand_s[SDP_PRES_NODE], 2 * G / bw),
          "the link's demand: those bytes at its rate");
    CHECK(o2.step_s >= want2 * (1 - RTOL) && o2.step_s <= want2 + o2.demand_s[SDP_PRES_GPU] + 1e-9,
          "2 nodes: the link's demand and the last chunk's way back");
    CHECK(o4.step_s >= want4 * (1 - RTOL) && o4.step_s <= want4 + o4.demand_s[SDP_PRES_GPU] + 1e-9,
          "4 nodes: twice the bytes and six hops of the last chunk");
    CHECK(o2.bound == SDP_PRES_NODE && o4.bound == SDP_PRES_NODE, "the node link bounds the step");
    /* each chain hop's add: one thread reads the sum received and the chunk, writes the chunk */
    double add = 3 * c / mc.cast_core_bps;
    CHECK(NEAR(o2.node_tail_s, 2 * c / bw + add) && NEAR(o4.node_tail_s, 6 * c / bw + 3 * add),
          "the last chunk's trip: 2 (nodes - 1) hops, and the chain's adds");
    mc.node_latency_s = 1e-3;
    struct sdp_predict l4 = step_of(4, 1, &mc);
    printf("network-bound, 1 ms a message: 4 nodes %.6f s\n", l4.step_s);
    CHECK(fabs(l4.step_s - o4.step_s - 6e-3) <= RTOL * l4.step_s, "a latency a hop, six hops");
    /* the host's sums: with one rank a node adds the sum received to its own (read 2, write 1) */
    CHECK(NEAR(o2.reduce_bytes, 3 * G), "one rank a node: 3 fp32 passes of the gradient");
    struct sdp_predict r4 = step_of(2, 4, &mc);
    CHECK(NEAR(r4.reduce_bytes, 6 * G), "4 ranks: read 4 and the sum received, write 1");
}

/* The GPU bounds the step (1 TFLOP/s), the link at 12.5 GB/s, 10 us: the same work per node on 2,
 * 4 and 8 nodes, so each node's GPU demand is the same; the link's demand hides behind the
 * backward and what more nodes add is the last chunk's trip, two hops of (latency + c / bw) each
 * node more: 4 hops from 2 to 4 nodes, 8 from 4 to 8. */
static void more_nodes(void)
{
    struct sdp_predict_machine mc;
    machine_fast(&mc);
    mc.gpu_flops = mc.gpu_attn_flops = 1e12;
    mc.node_bps = 12.5e9, mc.node_latency_s = 10e-6;
    struct sdp_predict o1 = step_of(1, 1, &mc), o2 = step_of(2, 1, &mc), o4 = step_of(4, 1, &mc),
                       o8 = step_of(8, 1, &mc);
    double hop = mc.node_latency_s + last_chunk_bytes() / mc.node_bps;
    printf("same work a node: 1, 2, 4, 8 nodes %.6f %.6f %.6f %.6f s (hop %.6f s), bound %s; "
           "tokens/s %.0f %.0f %.0f %.0f\n",
           o1.step_s, o2.step_s, o4.step_s, o8.step_s, hop, sdp_predict_res_name(o4.bound),
           o1.tokens_per_s, o2.tokens_per_s, o4.tokens_per_s, o8.tokens_per_s);
    CHECK(NEAR(o2.demand_s[SDP_PRES_GPU], o1.demand_s[SDP_PRES_GPU]) &&
              NEAR(o8.demand_s[SDP_PRES_GPU], o1.demand_s[SDP_PRES_GPU]),
          "each node computes its share: the same GPU demand");
    CHECK(o1.demand_s[SDP_PRES_NODE] == 0 && o1.node_tail_s == 0, "one node: no link");
    CHECK(o4.demand_s[SDP_PRES_NODE] < 0.2 * o4.step_s && o4.bound != SDP_PRES_NODE,
          "the link's demand hides behind the backward");
    CHECK(o2.step_s > o1.step_s, "a second node adds the link's time");
    CHECK(fabs(o4.step_s - o2.step_s - 4 * hop) <= RTOL * o4.step_s, "2 -> 4 nodes: 4 hops more");
    CHECK(fabs(o8.step_s - o4.step_s - 8 * hop) <= RTOL * o8.step_s, "4 -> 8 nodes: 8 hops more");
    CHECK(o4.tokens_per_s > 1.9 * o2.tokens_per_s, "twice the nodes, nearly twice the tokens");
}

/* A faster link moves the step the right way: on the network-bound machine twice the rate halves
 * the step but for the GPU's free work (within 1e-6 of it); a nearer link (less latency) and a
 * faster one on the GPU-bound machine never slow it. */
static void faster_link(void)
{
    struct sdp_predict_machine mc;
    machine_fast(&mc);
    double prev = 0;
    for (int i = 0; i < 3; i++) {
        mc.node_bps = 12.5e9 * (1 << i), mc.node_latency_s = 0;
        struct sdp_predict o = step_of(4, 1, &mc);
        printf("4 nodes, link %.1f GB/s: %.6f s, bound %s\n", mc.node_bps / 1e9, o.step_s,
               sdp_predict_res_name(o.bound));
        /* step = T / rate + x, 0 <= x <= the GPU's demand: prev - 2 step = x' - 2 x */
        CHECK(i == 0 || fabs(prev - 2 * o.step_s) <= 2 * o.demand_s[SDP_PRES_GPU] + 1e-9,
              "twice the rate, half the step");
        prev = o.step_s;
    }
    mc.gpu_flops = mc.gpu_attn_flops = 1e12;
    struct sdp_predict_machine near = mc, fast = mc, slow = mc;
    mc.node_latency_s = 20e-6, near.node_latency_s = 2e-6, fast.node_latency_s = 20e-6;
    fast.node_bps = 4 * mc.node_bps, slow.node_bps = 1e9, slow.node_latency_s = 20e-6;
    double base = step_of(4, 1, &mc).step_s;
    CHECK(step_of(4, 1, &near).step_s < base && step_of(4, 1, &fast).step_s < base,
          "less latency or more rate: a shorter step");
    struct sdp_predict os = step_of(4, 1, &slow);
    printf("GPU-bound at 1 GB/s: %.6f s (%.6f at 50 GB/s), bound %s\n", os.step_s, base,
           sdp_predict_res_name(os.bound));
    CHECK(os.step_s > base && os.bound == SDP_PRES_NODE, "a slow enough link bounds it");
}

static void refused(void)
{
    struct sdp_predict_machine mc;
    struct sdp_plan p;
    struct sdp_predict o;
    machine_fast(&mc);
    plan_of(&p, 2, 2);
    CHECK(predict(&p, &mc, 2, &o) == -EINVAL, "2 micro-batches over 2 nodes of 2 ranks: refused");
    CHECK(predict(&p, &mc, 4, &o) == 0, "4 of them: one a rank");
    mc.node_bps = -1;
    CHECK(predict(&p, &mc, 4, &o) == -EINVAL, "a negative link rate: refused");
    sdp_plan_free(&p);
}

int main(void)
{
    /* a toy Qwen3: 8 layers, C 256, I 768, 4 heads of 64, 2 KV heads, V 1000 (test_predict.c's) */
    sdp_model_defaults(&model, SDP_ARCH_QWEN3);
    model.vocab_size = 1000, model.hidden_size = 256, model.intermediate_size = 768;
    model.num_layers = 8, model.num_heads = 4, model.num_kv_heads = 2, model.head_dim = 64;
    model.tie_word_embeddings = 1, model.max_position_embeddings = 4096;
    network_bound();
    more_nodes();
    faster_link();
    refused();
    return sdp_test_finish(sdp_test_nfail);
}
