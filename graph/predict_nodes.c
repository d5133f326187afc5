/* SPDX-License-Identifier: MIT */
/* The step-time model's link between nodes (predict_internal.h): what the gradient's chain and
 * ring of graph/nodes.c cost each step.  Node n receives, chunk by chunk, the sum of the nodes
 * before it, adds its ranks' chunks and sends the sum on; the last node's sum goes to node 0, then
 * 1, ..., up to the node before the last.  Every fp32 gradient chunk crosses each link of the chain
 * once and each link of the ring once, so the busiest node sends it twice and receives it twice
 * (once each way with two nodes, whose ring is the chain's way back).  Chunk by chunk the chain and
 * the ring overlap: the busiest node's link carries its bytes at the link's rate, and the last
 * chunk pays its whole trip, 2 (nodes - 1) hops, before its updates can start. */
#include "config.h"

#include <string.h>

#include "graph/predict_internal.h"

/* Elements of the chunk that crosses last: the embedding's gradient is the backward's last (layer
 * 1's under LoRA, where the embedding has no adapter); a chunk, or the whole group when it is not
 * chunked (graph/nodes.c sends a group whole then). */
static double last_chunk_elems(const struct sdp_predict_run *run)
{
    const struct sdp_plan *p = run->plan;
    for (int gi = 0; gi <= 1 && gi < p->ngroups; gi++) {
        double n = sdp_predict_trained_elems(p, run->m, gi), ce = (double)p->group[gi].chunk_elems;
        if (n > 0)
            return ce > 0 && ce < n ? ce : n;
    }
    return 0;
}

void sdp_predict_node_cost(const struct sdp_predict_run *run, const struct sdp_predict_machine *mc,
                           struct sdp_node_cost *nc)
{
    const struct sdp_plan *p = run->plan;
    int P = p->nodes, R = p->nranks;
    double grad = 0, bps = mc->node_bps;
    memset(nc, 0, sizeof(*nc));
    if (P <= 1)
        return;
    for (int gi = 0; gi < p->ngroups; gi++) /* the sums cross in fp32 (graph/nodes.c) */
        grad += sdp_predict_trained_elems(p, run->m, gi) * 4.0;
    int k = P > 2 ? 2 : 1; /* the busiest node's sends (and receipts) of each chunk */
    double chunk = last_chunk_elems(run) * 4.0, send = bps > 0 ? chunk / bps : 0.0;
    nc->bytes = k * grad;
    nc->demand_s = bps > 0 ? nc->bytes / bps : 0.0;
    /* a hop: the message's latency and its bytes; a chain hop then the receiver's add of the
     * chunk on one thread (it reads the sum received and its R ranks' chunks, and writes) */
    double add = mc->cast_core_bps > 0 ? (R + 2) * chunk / mc->cast_core_bps : 0.0;
    nc->tail_s = 2.0 * (P - 1) * (mc->node_latency_s + send) + (P - 1) * add;
    nc->last_send_s = k * send;
}

double sdp_predict_node_chain(const struct sdp_plan *p, double wait_s,
                              const struct sdp_node_cost *nc, double boundary_s)
{
    if (p->nodes <= 1)
        return 0;
    double after = (p->param_delay ? nc->tail_s : boundary_s) - nc->last_send_s;
    return (p->param_delay ? 0 : wait_s) + nc->demand_s + (after > 0 ? after : 0);
}
