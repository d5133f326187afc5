/* SPDX-License-Identifier: MIT */
/* sdp-roundpipe: the RoundPipe seed's schedule.  The step's forward and backward of every group
 * form one sequence of stages (graph/split.h, the split sdp_policy_roundpipe_configure is given),
 * and stage k runs on stage worker k mod R: the first R CUDA workers, or the first R CPU workers
 * standing in for GPUs.  Every micro-batch of a stage goes to that worker, so the GPUs are
 * stateless: a stage's weights come from the host where its worker runs it, and its activations
 * move to the next stage's worker.  The rest of a step (casts, norms, AdamW, transfers that move
 * no stage's data) and the order, bounds and prefetch window are sdp-slidedp's
 * (policies/slidedp_methods.h).  The weights' versions are sdp-slidedp's (synchronous; with
 * train.param_delay 1, RoundPipe's delayed ones).  Micro-batches in flight (train.in_flight, by
 * default R + 1): the tasks of a micro-batch wait until it is among the `in_flight` oldest
 * unfinished ones (policies/roundpipe_flight.h), each wait logged ("micro-batches in flight").
 * With SDP_LPT_FETCH=1 a stage's fetches run longest first (policies/roundpipe_lpt.h; else in the
 * sdp-slidedp order, group by group). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>
#include <starpu_scheduler.h>

#include "base/env.h"
#include "base/sdp_log.h"
#include "policies/roundpipe_flight.h"
#include "policies/roundpipe_lpt.h"
#include "policies/sdp_policies.h"
#include "policies/slidedp_methods.h"

#define MAX_STAGE_WORKERS 64
#define WAIT_FLIGHT       "micro-batches in flight"

/* The configuration of the next start, and the stage workers of the running one. */
static struct {
    int width, ngroups, nstages, in_flight;
    int lpt;        /* the stage's fetches longest first (roundpipe_lpt.h; SDP_LPT_FETCH=1) */
    int *fwd, *bwd; /* [ngroups]: the stage of each group's forward and backward */
    int workers[MAX_STAGE_WORKERS], nworkers;
    unsigned ctx;
    starpu_pthread_mutex_t lock; /* guards flight (StarPU's mutex: SimGrid's in a simulation): the
                                    submitting thread and the workers change it */
    struct sdp_rp_flight flight;
} rp = { .lock = STARPU_PTHREAD_MUTEX_INITIALIZER };

int sdp_policy_roundpipe_configure(int width, int in_flight, int ngroups, const int *stage_fwd,
                                   const int *stage_bwd, int nstages)
{
    if (width < 1 || width > MAX_STAGE_WORKERS || ngroups < 1 || nstages < 1)
        return sdp_err(-EINVAL, "sdp-roundpipe: %d stage workers (1..%d), %d groups, %d stages",
                       width, MAX_STAGE_WORKERS, ngroups, nstages);
    rp.in_flight = in_flight > 0 ? in_flight : width + 1;
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

/* A fetch of stage's weights, longest first: its key with the stage's first op (its first
 * group's forward, else its highest group's backward), and its transfers' priority. */
static void lpt_order(struct starpu_task *task, const struct sdp_hint *h, int stage, uint64_t *key)
{
    int first = -1, bwd = 0;
    for (int g = 0; g < rp.ngroups && first < 0; g++)
        first = rp.fwd[g] == stage ? g : -1;
    for (int g = rp.ngroups - 1; g >= 0 && first < 0; g--)
        first = rp.bwd[g] == stage ? g : -1, bwd = 1;
    if (first < 0)
        return;
    *key = sdp_rp_lpt_key(h, first, bwd);
    task->priority = sdp_rp_lpt_prio(stage, h->bytes);
}

/* The stage worker of a hinted task: the compute of a group's forward (and the loss) or backward
 * (its recomputation, its gradient's zeroing), and the fetch of its weights for it; -1 else. */
static int place(struct starpu_task *task, struct sdp_hint *h, uint64_t *key)
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
    /* the task's own hint: its event log line says the stage and its round-robin round */
    h->stage1 = stage + 1;
    h->round1 = stage / rp.nworkers + 1;
    if (rp.lpt && h->move == SDP_MOVE_FETCH)
        lpt_order(task, h, stage, key);
    return rp.workers[stage % rp.nworkers];
}

/* Whether the micro-batch of a hinted task may run now (a task of no micro-batch may). */
static int admit(const struct sdp_hint *h)
{
    int ok;
    if (h->mb < 0)
        return 1;
    starpu_pthread_mutex_lock(&rp.lock);
    ok = sdp_rp_flight_admits(&rp.flight, h->step, h->mb);
    starpu_pthread_mutex_unlock(&rp.lock);
    return ok;
}

/* A hinted task of a micro-batch counts from its submission (the graph submits a micro-batch's
 * tasks together) to its end. */
static void submit_hook(struct starpu_task *task)
{
    const struct sdp_hint *h = task->cl ? task->sched_data : NULL;
    int rc;
    if (!h || h->mb < 0)
        return;
    starpu_pthread_mutex_lock(&rp.lock);
    rc = sdp_rp_flight_submit(&rp.flight, h->step, h->mb);
    starpu_pthread_mutex_unlock(&rp.lock);
    SDP_ASSERT(rc >= 0, "sdp-roundpipe: out of memory for the micro-batches in flight");
    if (rc > 0)
        sdp_slidedp_wake(rp.ctx);
}

static void post_exec(struct starpu_task *task, unsigned ctx)
{
    const struct sdp_hint *h = task->cl ? task->sched_data : NULL;
    int freed = 0;
    sdp_slidedp_post_exec(task, ctx);
    if (!h || h->mb < 0)
        return;
    starpu_pthread_mutex_lock(&rp.lock);
    freed = sdp_rp_flight_end(&rp.flight, h->step, h->mb);
    starpu_pthread_mutex_unlock(&rp.lock);
    if (freed)
        sdp_slidedp_wake(ctx);
}

static void init_sched(unsigned ctx)
{
    struct sdp_slidedp_hooks hooks = { .place = place, .admit = admit, .hold_why = WAIT_FLIGHT };
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
    rp.ctx = ctx;
    rp.lpt = sdp_env_long("SDP_LPT_FETCH", 0) > 0;
    sdp_rp_flight_init(&rp.flight, rp.fwd ? rp.in_flight : 1 << 30);
    sdp_slidedp_init_hooks(ctx, rp.fwd ? &hooks : NULL);
    SDP_INFO("sdp-roundpipe: %d stages round-robin over %d %s worker%s, %d micro-batches in "
             "flight, a stage's fetches %s",
             rp.nstages, rp.nworkers, cuda ? "CUDA" : "CPU", rp.nworkers > 1 ? "s" : "",
             rp.flight.limit, rp.lpt ? "longest first (SDP_LPT_FETCH=1)" : "group by group");
}

static void deinit_sched(unsigned ctx)
{
    sdp_slidedp_deinit(ctx);
    sdp_rp_flight_free(&rp.flight);
}

struct starpu_sched_policy sdp_policy_roundpipe = {
    .init_sched = init_sched,
    .deinit_sched = deinit_sched,
    .push_task = sdp_slidedp_push,
    .pop_task = sdp_slidedp_pop,
    .pre_exec_hook = sdp_slidedp_pre_exec,
    .post_exec_hook = post_exec,
    .submit_hook = submit_hook,
    .add_workers = sdp_slidedp_add_workers,
    .remove_workers = sdp_slidedp_remove_workers,
    .prefetches = 1,
    .policy_name = "sdp-roundpipe",
    .policy_description = "RoundPipe: the step's stages round-robin over the GPUs (or CPU ranks), "
                          "on sdp-slidedp's queues",
    .worker_type = STARPU_WORKER_LIST,
};
