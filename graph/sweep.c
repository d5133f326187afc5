/* SPDX-License-Identifier: MIT */
/* The task graphs of slidedp sweep (sweep.h). */
#include "config.h"

#include "codelets/sdp_tasks.h"
#include "graph/sweep.h"

static struct sdp_task_opts task_opts(int gi, enum sdp_phase ph, int chunk)
{
    struct sdp_task_opts o = { 0 };
    o.hint.step = 0;
    o.hint.group = gi;
    o.hint.chunk = chunk;
    o.hint.mb = -1;
    o.hint.phase = ph;
    return o;
}

int sdp_graph_sweep_cast_copy(struct sdp_state *st, int gi, sdp_rt_tensor_t *rep)
{
    struct sdp_group_state *gs = &st->groups[gi];
    int rc = 0;
    for (int c = 0; !rc && c < gs->nchunks; c++) {
        struct sdp_task_opts o = task_opts(gi, SDP_PH_CAST, c);
        rc = sdp_task_cast(&o, sdp_rt_tensor_part(gs->work, c), sdp_rt_tensor_part(gs->master, c));
        o.on_rank = 1; /* the copy runs on the GPU, which pulls the chunk over PCIe */
        if (!rc)
            rc = sdp_task_param_copy(&o, sdp_rt_tensor_part(rep, c),
                                     sdp_rt_tensor_part(gs->work, c));
    }
    return rc;
}

int sdp_graph_sweep_zero_grad(struct sdp_state *st, int gi)
{
    struct sdp_task_opts o = task_opts(gi, SDP_PH_BWD, -1);
    return sdp_task_zero(&o, st->groups[gi].grad);
}

int sdp_graph_sweep_update(struct sdp_state *st, int gi, int t)
{
    struct sdp_group_state *gs = &st->groups[gi];
    int rc = 0;
    for (int c = 0; !rc && c < gs->nchunks; c++) {
        struct sdp_task_opts o = task_opts(gi, SDP_PH_UPDATE, c);
        struct sdp_adamw_segment seg = { 0, sdp_rt_tensor_nelems(sdp_rt_tensor_part(gs->work, c)),
                                         1, 0 };
        rc = sdp_task_adamw(&o, sdp_rt_tensor_part(gs->master, c), sdp_rt_tensor_part(gs->grad, c),
                            sdp_rt_tensor_part(gs->m, c), sdp_rt_tensor_part(gs->v, c),
                            sdp_rt_tensor_part(gs->work, c), NULL, 1e-5, 0.9, 0.95, 1e-8, 0.1, t,
                            &seg, 1);
    }
    return rc;
}
