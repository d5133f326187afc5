/* SPDX-License-Identifier: MIT */
/* sdp-roundpipe: the RoundPipe seed's schedule.  The step's forward and backward of every group
 * form one sequence of stages (graph/split.h, the split sdp_policy_roundpipe_configure is given),
 * and stage k runs on stage worker k mod R: the first R CUDA workers, or the first R CPU workers
 * standing in for GPUs.  Every micro-batch of a stage goes to that worker, so the GPUs are
 * stateless: a stage's weights come from the host where its worker runs it, and its activations
 * move to the next stage's worker.  The rest of a step (casts, norms, AdamW, transfers that move
 * no stage's data) and the order, bounds and prefetch window are sdp-slidedp's
 * (policies/slidedp_methods.h).  The weights' versions are sdp-slidedp's (synchronous; with
 * train.param_delay 1, RoundPipe's delayed ones). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>
#include <starpu_scheduler.h>

#include "base/sdp_log.h"
#include "policies/sdp_policies.h"
#include "policies/slidedp_methods.h"

#define MAX_STAGE_WORKERS 64

/* The configuration of the next start, and the stage workers of the running one. */
static struct {
    int width, ngroups, nstages;
    int *fwd, *bwd; /* [ngroups]: the stage of each group's forward and backward */
    int workers[MAX_STAGE_WORKERS], nworkers;
} rp;

int sdp_policy_roundpipe_configure(int width, int ngroups, const int *stage_fwd,
                                   const int *stage_bwd, int nstages)
{
    if (width < 1 || width > MAX_STAGE_WORKERS || ngroups < 1 || nstages < 1)
        return sdp_err(-EINVAL, "sdp-roundpipe: %d stage workers (1..%d), %d groups, %d stages",
                       width, MAX_STAGE_WORKERS, ngroups, nstages);
    free(rp.fwd), free(rp.bwd);
    rp.fwd = malloc((size_t)ngroups * sizeof(int));
    rp.bwd = malloc((size_t)ngroups * sizeof(int));
    if (!rp.fwd || !rp.bwd)
        return sdp_err(-ENOMEM, "sdp-roundpipe: the stages of %d groups", ngroups);
    memcpy(rp.fwd, stage_fwd, (size_t)ngroups * sizeof(int));
    memcpy(rp.bwd, stage_bwd, (size_t)ngroups * sizeof(int));
    rp.width = width, rp.ngroups = ngroups, rp.nstages = nstages;
    return 0;
}

/* The stage worker of a hinted task: the compute of a group's forward (and the loss) or backward
 * (its recomputation, its gradient's zeroing), and the fetch of its weights for it; -1 else. */
static int place(struct sdp_hint *h)
{
    int stage;
    if (rp.nworkers == 0 || h->group < 0 || h->group >= rp.ngroups ||
        (h->move != SDP_MOVE_NONE && h->move != SDP_MOVE_FETCH))
        return -1;
    switch (h->phase) {
    case SDP_PH_FWD:
    case SDP_PH_LOSS:
        stage = rp.fwd[h->group];
        break;
    case SDP_PH_RECOMPUTE:
    case SDP_PH_BWD:
        stage = rp.bwd[h->group];
        break;
    default:
        return -1;
    }
    h->stage1 = stage + 1; /* the task's own hint: its event log line says the stage */
    return rp.workers[stage % rp.nworkers];
}

static void init_sched(unsigned ctx)
{
    int ids[STARPU_NMAXWORKERS], n;
    int cuda = starpu_worker_get_count_by_type(STARPU_CUDA_WORKER) > 0;
    n = starpu_worker_get_ids_by_type(cuda ? STARPU_CUDA_WORKER : STARPU_CPU_WORKER, ids,
                                      STARPU_NMAXWORKERS);
    rp.nworkers = 0;
    for (int i = 0; i < n && i < rp.width; i++)
        rp.workers[rp.nworkers++] = ids[i];
    if (rp.nworkers < rp.width)
        SDP_WARN("sdp-roundpipe: %d stage workers asked for, %d %s workers started", rp.width,
                 rp.nworkers, cuda ? "CUDA" : "CPU");
    if (!rp.fwd)
        SDP_WARN("sdp-roundpipe: no stage split configured: sdp-slidedp's placement");
    sdp_slidedp_init_placed(ctx, rp.fwd ? place : NULL);
    SDP_INFO("sdp-roundpipe: %d stages round-robin over %d %s worker%s", rp.nstages, rp.nworkers,
             cuda ? "CUDA" : "CPU", rp.nworkers > 1 ? "s" : "");
}

struct starpu_sched_policy sdp_policy_roundpipe = {
    .init_sched = init_sched,
    .deinit_sched = sdp_slidedp_deinit,
    .push_task = sdp_slidedp_push,
    .pop_task = sdp_slidedp_pop,
    .pre_exec_hook = sdp_slidedp_pre_exec,
    .post_exec_hook = sdp_slidedp_post_exec,
    .add_workers = sdp_slidedp_add_workers,
    .remove_workers = sdp_slidedp_remove_workers,
    .prefetches = 1,
    .policy_name = "sdp-roundpipe",
    .policy_description = "RoundPipe: the step's stages round-robin over the GPUs (or CPU ranks), "
                          "on sdp-slidedp's queues",
    .worker_type = STARPU_WORKER_LIST,
};
