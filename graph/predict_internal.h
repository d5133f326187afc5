/* SPDX-License-Identifier: MIT */
/* Between graph/predict.c, predict_sim.c and predict_mem.c: what one parameter group costs in a
 * step, the timeline, the memory peaks. */
#ifndef SDP_PREDICT_INTERNAL_H
#define SDP_PREDICT_INTERNAL_H

#include "graph/predict.h"

/* One group's share of a step on one rank, from predict.c's formulas. */
struct sdp_pgroup_cost {
    double fwd_s;      /* the GPU's forward of the group (the head: its whole task) */
    double bwd_s;      /* the GPU's backward with the recomputation */
    double bwd_in_s;   /* the backward's wait for what it brings back (a released copy) */
    double up_bytes;   /* the working copy's bytes uploaded after its update */
    double down_s;     /* the gradient's way down (its bytes over the D2H rate) */
    double update_s;   /* the host's AdamW of the group on one thread */
    double early_frac; /* of the update, what may run before the gradient (embed_early) */
    int nchunks;       /* the update's tasks */
    double acc_bytes;  /* on the GPU during its backward: the fp32 gradient accumulator */
    double held_bytes; /* on the GPU from its backward's end to its update's: the gradient the host
                          fetches (fp32, or its bf16 chunks) */
    int held_chunks;   /* held_bytes go chunk by chunk as their updates end (the bf16 chunks); 0:
                          whole after the last (the fp32 gradient) */
    int up_chunks;     /* the copy goes up chunk by chunk as each chunk's update ends (the chunk
                          pipeline); 0: whole after the last */
};

/* The host-to-GPU link of the timeline: bytes/s with the host's update threads idle, and while
 * they run (their DRAM traffic and the cores they hold slow the copies: a layer's upload took 13-16
 * ms at 15 busy threads against 3.6 idle, bench/results/2026-12-06-h100-predict.md).  h2d_bps 0:
 * no link (CPU workers); h2d_busy_bps 0: the idle rate throughout. */
struct sdp_sim_link {
    double h2d_bps, h2d_busy_bps;
};

/* What the timeline gives besides the period. */
struct sdp_sim_out {
    double gpu_wait_s; /* the GPU's wait for updated copies in the steady period */
    double grad_peak;  /* the most gradient bytes on the GPU at once (acc_bytes, held_bytes) */
};

/* The steady period of the step simulated over a few steps: the GPU runs each group's forward once
 * its updated copy is back (up_bytes over the link after its update), the head, the backward from
 * the top layer; each gradient goes down, and the host's `threads` take its chunks, the lowest
 * group (the next forward's first) before the others.  ngroups = L + 2 (0: embedding, L + 1: head).
 * @return the period, and in *out what else it measured */
double sdp_predict_sim(const struct sdp_pgroup_cost *g, int ngroups, int threads,
                       const struct sdp_sim_link *link, struct sdp_sim_out *out);

/* The link between the nodes of a run (graph/nodes.c): each gradient chunk's sum goes along a
 * chain in node order, then from the last node around the ring to every other (predict_nodes.c). */
struct sdp_node_cost {
    double bytes;       /* the busiest node's bytes each way a step */
    double demand_s;    /* bytes over the link's one-way rate */
    double tail_s;      /* the last chunk's trip: 2 (nodes - 1) hops and the chain's adds */
    double last_send_s; /* of tail_s, the busiest node's sends of the last chunk (in demand_s) */
};

/* The link's costs of run on mc (all 0 with one node). */
void sdp_predict_node_cost(const struct sdp_predict_run *run, const struct sdp_predict_machine *mc,
                           struct sdp_node_cost *nc);

/* The link's chain (several nodes; 0 with one): with synchronous weights the link idles from the
 * forward's start (every sum of the last step came back before its updates) for wait_s, until the
 * top layer's gradient is down; then it carries its demand, and after its last chunk the step's
 * boundary follows (boundary_s, the chunk's trip included), less that chunk's sends the demand
 * already holds.  Delayed weights: no wait, and the last chunk's trip alone. */
double sdp_predict_node_chain(const struct sdp_plan *p, double wait_s,
                              const struct sdp_node_cost *nc, double boundary_s);

/* Elements of group gi that train: the group's, or with LoRA its adapters' (0 without). */
double sdp_predict_trained_elems(const struct sdp_plan *p, const struct sdp_model_cfg *m, int gi);
/* One GPU's peak bytes; grad_peak: the timeline's gradient backlog, < 0 without one. */
unsigned long long sdp_predict_gpu_peak(const struct sdp_predict_run *run, double grad_peak);
/* The host's peak and its pinned part, into o. */
void sdp_predict_host_peak(const struct sdp_predict_run *run, const struct sdp_predict_machine *mc,
                           struct sdp_predict *o);

#endif
