/* SPDX-License-Identifier: MIT */
/* Between graph/predict.c and graph/predict_sim.c: what one parameter group costs in a step. */
#ifndef SDP_PREDICT_INTERNAL_H
#define SDP_PREDICT_INTERNAL_H

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
};

/* The host-to-GPU link of the timeline: bytes/s with the host's update threads idle, and while
 * they run (their DRAM traffic and the cores they hold slow the copies: a layer's upload took 13-16
 * ms at 15 busy threads against 3.6 idle, bench/results/2026-12-06-h100-predict.md).  h2d_bps 0:
 * no link (CPU workers); h2d_busy_bps 0: the idle rate throughout. */
struct sdp_sim_link {
    double h2d_bps, h2d_busy_bps;
};

/* The steady period of the step simulated over a few steps: the GPU runs each group's forward once
 * its updated copy is back (up_bytes over the link after its update), the head, the backward from
 * the top layer; each gradient goes down, and the host's `threads` take its chunks, the lowest
 * group (the next forward's first) before the others.  ngroups = L + 2 (0: embedding, L + 1: head).
 * @return the period, and in *gpu_wait_s the GPU's wait for updated copies in it */
double sdp_predict_sim(const struct sdp_pgroup_cost *g, int ngroups, int threads,
                       const struct sdp_sim_link *link, double *gpu_wait_s);

#endif
