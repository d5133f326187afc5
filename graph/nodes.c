/* SPDX-License-Identifier: MIT */
/* The gradient across nodes (step.h's nodes): a chain in node order, then around the ring.  Node
 * n > 0 receives, chunk by chunk, the sum of the ranks of the nodes before it, adds its own ranks'
 * chunks in rank order and passes the sum on, so that the last node holds
 * ((g0 + g1) + g2) + ... over every rank of the run, the bits of one node with as many ranks
 * (graph/routes.c); that sum then goes from the last node to node 0, from node 0 to node 1, and so
 * on, into every node's rank-0 gradient, where each node's norms and updates read it.  Chunk by
 * chunk, a chunk's sum travels while the next one is added; every link carries the gradient once
 * each way.  The adds run where the route puts them: the host route on the node's CPU workers,
 * chunk by chunk; the GPU route on its rank 0's GPU, group by group, the vectors crossing GPU to
 * GPU through NCCL where it is set up (sdp_tasks_use_node_nccl), else through host memory, as
 * StarPU-MPI moves them. */
#include "config.h"

#include <stdlib.h>

#include "graph/graph_internal.h"
#include "base/sdp_log.h"

/* A message's tag: unique for (step, group, chunk or -1: whole, leg); nsumsq bounds a group's
 * chunks. */
static int64_t tag_of(const sdp_graph_t *g, int step, int gi, int c, int leg)
{
    int64_t chunks = (int64_t)g->nsumsq + 1;
    return (((int64_t)step * g->st->ngroups + gi) * chunks + c + 1) * 2 + leg;
}

/* Chunk c (or the whole vector, c < 0) of rank r's gradient of group gi. */
static sdp_rt_tensor_t *piece(const sdp_graph_t *g, int gi, int r, int c)
{
    sdp_rt_tensor_t *t = train_grad(g, gi, r);
    return c < 0 ? t : sdp_rt_tensor_part(t, c);
}

/* One transfer of the exchange (recv: into t, else from t): on the GPU route through NCCL where
 * it is set up (codelets/node_nccl.c: rank 0's GPU to the other node's, in the order submitted,
 * which the graph keeps the same on every node; a receive posted once `wait`, this node's part,
 * is written), else as StarPU-MPI's requests. */
static int xfer(const struct sdp_task_opts *o, sdp_rt_tensor_t *t, int node, int64_t tag, int recv,
                sdp_rt_tensor_t *wait)
{
    if (o->on_rank && sdp_tasks_node_nccl())
        return recv ? sdp_task_node_recv_nccl(o, t, node, wait)
                    : sdp_task_node_send_nccl(o, t, node);
    return recv ? sdp_task_node_recv(t, node, tag) : sdp_task_node_send(t, node, tag);
}

/* One chunk's chain and ring (see above). */
static int chain(sdp_graph_t *g, struct sdp_task_opts o, int step, int gi, int c)
{
    int n = g->node, last = g->P - 1, k = 0, rc = 0;
    sdp_rt_tensor_t *in[SDP_MAX_RANKS + 1], *dst = piece(g, gi, 0, c), *before = NULL;
    if (n > 0) { /* the sum of the ranks before this node's */
        char name[64];
        snprintf(name, sizeof(name), "g%d.grad_from_node%d.%d", gi, n - 1, c);
        TRY_RET(sdp_rt_tensor_temp(&before, SDP_F32, sdp_rt_tensor_nelems(dst), name));
        rc = xfer(&o, before, n - 1, tag_of(g, step, gi, c, 0), 1, dst);
        in[k++] = before;
    }
    for (int r = 1; r < g->R && !rc; r++)
        in[k++] = piece(g, gi, r, c);
    /* dst + before = before + dst exactly: the chain's order is the ranks' */
    if (!rc && k > 0)
        rc = sdp_task_grad_reduce(&o, dst, in, k);
    sdp_rt_tensor_release(before);
    if (rc)
        return rc;
    if (n < last)
        TRY_RET(xfer(&o, dst, n + 1, tag_of(g, step, gi, c, 0), 0, NULL));
    /* the run's sum around the ring: last -> 0 -> 1 -> ... -> last - 1 */
    if (n == last)
        return xfer(&o, dst, 0, tag_of(g, step, gi, c, 1), 0, NULL);
    TRY_RET(xfer(&o, dst, n == 0 ? last : n - 1, tag_of(g, step, gi, c, 1), 1, NULL));
    if (n + 1 < last)
        TRY_RET(xfer(&o, dst, n + 1, tag_of(g, step, gi, c, 1), 0, NULL));
    return 0;
}

int sdp_graph_reduce_nodes(sdp_graph_t *g, int step, int gi, struct sdp_task_opts o)
{
    sdp_rt_tensor_t *t = train_grad(g, gi, 0);
    /* the GPU route adds on rank 0's GPU, whole vectors (a chunk's task would make StarPU split
     * every rank's gradient on the host first: graph/routes.c) */
    int nparts = o.on_rank ? 0 : sdp_rt_tensor_nparts(t);
    for (int r = 1; r < g->R; r++) /* chunk by chunk only where every rank's is chunked alike */
        if (sdp_rt_tensor_nparts(train_grad(g, gi, r)) != nparts)
            nparts = 0;
    if (nparts <= 1)
        return chain(g, o, step, gi, -1);
    for (int c = 0; c < nparts; c++) {
        o.hint.chunk = c;
        TRY_RET(chain(g, o, step, gi, c));
    }
    return 0;
}

/* The step's count of targets over every node's micro-batches: each node's, gathered as doubles
 * (exact: a count below 2^53) and added. */
int sdp_graph_nodes_valid(sdp_graph_t *g, long long *valid)
{
    double mine = (double)*valid, *all = malloc((size_t)g->P * sizeof(*all));
    if (!all)
        return sdp_err(-ENOMEM, "target counts of %d nodes", g->P);
    if (!g->c.allgather || g->c.allgather(&mine, all, 1) != 0) {
        free(all);
        return g->c.allgather ? -EIO : sdp_err(-EINVAL, "graph: %d nodes but no exchange", g->P);
    }
    *valid = 0;
    for (int n = 0; n < g->P; n++)
        *valid += (long long)all[n];
    free(all);
    return 0;
}

/* The step's mean loss over every node's micro-batches: each node's per-micro-batch sums,
 * gathered and added in the run's micro-batch order (the bits of one node). */
int sdp_graph_nodes_loss(sdp_graph_t *g, const double *mine, double *sum)
{
    int nm = g->c.n_micro, P = g->P;
    double *all = malloc((size_t)nm * P * sizeof(*all));
    if (!all)
        return sdp_err(-ENOMEM, "losses of %d micro-batches", nm * P);
    if (!g->c.allgather || g->c.allgather(mine, all, (size_t)nm) != 0) {
        free(all);
        return g->c.allgather ? -EIO : sdp_err(-EINVAL, "graph: %d nodes but no exchange", P);
    }
    *sum = 0.0;
    for (int i = 0; i < nm * P; i++)
        *sum += all[i];
    free(all);
    return 0;
}
