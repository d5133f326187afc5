/* SPDX-License-Identifier: MIT */
/* sdp-slidedp: SlideDP's scheduling policy.  Ready tasks wait in heaps ordered by the critical-path
 * key of policies/slidedp_internal.h (the forward group by group, the backward from the head
 * down, the update of group 0 first, the next step's forward ahead of later groups' updates).
 * Backpressure: at most `depth` casts and AdamW chunk updates (the tasks that fill staging
 * buffers) run at once; the others are held back in their queue, each hold recorded as a trace
 * wait.  When the working copies are off the host, those tasks write stages, host buffers that
 * live until a param_put has copied them to the GPU: at most `stages` are alive at once (the puts
 * are never held back, and run ahead of their step's backward).  A CUDA worker prefetches the
 * inputs of its queued tasks only within `window` groups ahead of the group it computes (every
 * param_fetch's at once when it is queued, with SDP_FETCH_EAGER=1), and runs a param_fetch only
 * within window - 1 groups, so that its weights have arrived (or when it has been idle for
 * FETCH_IDLE_US, a fetch within `window` groups; after SDP_FETCH_IDLE_ANY_MS, 50 by default, any);
 * a CPU worker runs a transfer into a GPU's memory (param_chunk) within that GPU's `window`;
 * the end of a step's backward counts as the next step's start there (sdp_slidedp_cur_pos).  An
 * update that only a CUDA worker runs (train.gpu_update) gets its inputs prefetched when it is
 * queued, whatever the window; one that only CPU workers run gets its inputs (the gradient chunk)
 * prefetched to the host when it is queued, unless it fills a stage (SDP_HOST_PREFETCH=0: never).
 * A monolithic policy (StarPU's starpu_sched_policy, no components):
 *   push: a task that one worker only can run (or that a placement names) -> that worker's
 *         queue; any other -> the shared queue of its worker-type mask (CPU, CUDA, both, ...).
 *         Each queue: a heap of ordinary tasks and a heap of staged (bounded) tasks.
 *   pop:  the smallest key among the worker's queue and the shared queues of its type.
 * One mutex guards it all; idle workers are flagged and woken on push and when a slot frees.
 * Tests: tests/policies/test_policies_slidedp_key.c, tests/policies/test_policies_slidedp.sh. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>
#include <starpu_scheduler.h>

#include "policies/sdp_policies.h"
#include "policies/slidedp_heap.h"
#include "policies/slidedp_internal.h"
#include "policies/slidedp_methods.h"
#include "base/sdp_log.h"
#include "runtime/trace.h"

#define NMASKS        8 /* worker-type masks: CPU 1, CUDA 2, any other type 4 */
#define WAIT_STAGING  "staging full"
#define WAIT_STAGES   "stages full"
#define FETCH_IDLE_US SDP_SLIDEDP_FETCH_IDLE_US
#define SIM_POLL_S    20e-6 /* simulated workers' look-again period: a real worker polls faster */

struct queue {
    struct heap normal, staged;
};

struct sched {
    starpu_pthread_mutex_t lock;
    struct queue wq[STARPU_NMAXWORKERS]; /* tasks that one worker only can run */
    struct queue pool[NMASKS];           /* the others, by the mask of worker types that can */
    int workers[STARPU_NMAXWORKERS], nworkers;
    unsigned typebit[STARPU_NMAXWORKERS];
    int idle[STARPU_NMAXWORKERS]; /* found nothing: skips the lock until woken (atomic) */
    long cur_pos[STARPU_NMAXWORKERS];
    double last_start_us[STARPU_NMAXWORKERS]; /* when the worker last started a task */
    long nqueued;                             /* atomic reads outside the lock */
    long nstaged;                             /* staged tasks queued */
    int depth, window, inflight, ngroups;
    int stages, eager;          /* the bound on stages alive; prefetch every fetch when queued */
    double idle_any_us;         /* idle this long, a CUDA worker runs any fetch */
    int host_prefetch;          /* bring a queued host update's inputs to the host (see push) */
    long nalive;                /* stages alive: fills started minus puts ended */
    struct starpu_task **slots; /* the staged tasks in flight (depth of them at most) */
    uint64_t seq;
    struct entry *free_list;
    struct sdp_slidedp_hooks hooks; /* sdp-roundpipe's placement and admission, or none */
};

/* Under the lock: whether worker w may run e now (the hooks' admission holds it back, as does a
 * CUDA worker a param_fetch that lies beyond its window unless it has idled long enough: idle_us,
 * sdp_slidedp_idle_may_fetch, and a CPU worker a transfer into a GPU's memory beyond that GPU's
 * window, unless the GPU has started nothing for idle_any_us), and, with check, whether e's
 * codelet can run on w; *gated is set when a window alone refused it.  A held task waits from the
 * first refusal. */
static int may_run(const struct sched *s, int w, struct entry *e, int check, double idle_us,
                   int *gated)
{
    if (s->hooks.admit && e->has_hint && !s->hooks.admit(&e->hint)) {
        if (e->held_since_us == 0.0)
            e->held_since_us = starpu_timing_now(), e->held_why = s->hooks.hold_why;
        return 0;
    }
    if (s->typebit[w] == 2 && e->has_hint &&
        !sdp_slidedp_gpu_may_run(&e->hint, e->pos, s->cur_pos[w], s->window) &&
        !sdp_slidedp_idle_may_fetch(e->pos, s->cur_pos[w], s->window, idle_us, FETCH_IDLE_US,
                                    s->idle_any_us)) {
        *gated = 1;
        return 0;
    }
    if (s->typebit[w] == 1 && e->gpu >= 0 && !s->eager &&
        !sdp_slidedp_xfer_may_run(e->pos, s->cur_pos[e->gpu], s->window)) {
        double gpu_start;
        __atomic_load(&s->last_start_us[e->gpu], &gpu_start, __ATOMIC_RELAXED);
        if (starpu_timing_now() - gpu_start < s->idle_any_us) {
            *gated = 1;
            return 0;
        }
    }
    return !check || starpu_worker_can_execute_task_first_impl((unsigned)w, e->task, NULL);
}

/* The first entry of h, in key order, that worker w may run: the top, or (when a codelet's
 * can_execute refuses w, or the top is a fetch beyond w's window) the best of a scan. */
static struct entry *best_for(const struct sched *s, struct heap *h, int w, int check,
                              double idle_us, int *gated)
{
    struct entry *best = NULL;
    if (h->n == 0)
        return NULL;
    if (may_run(s, w, h->a[0], check, idle_us, gated))
        return h->a[0];
    for (int i = 1; i < h->n; i++)
        if ((!best || before(h->a[i], best)) && may_run(s, w, h->a[i], check, idle_us, gated))
            best = h->a[i];
    return best;
}

/* ---- helpers ---- */

static unsigned type_bit(int w)
{
    switch (starpu_worker_get_type(w)) {
    case STARPU_CPU_WORKER:
        return 1;
    case STARPU_CUDA_WORKER:
        return 2;
    default:
        return 4;
    }
}

static struct entry *entry_new(struct sched *s)
{
    struct entry *e = s->free_list;
    if (e)
        s->free_list = e->next_free;
    else
        e = malloc(sizeof(*e));
    SDP_ASSERT(e != NULL, "sdp-slidedp: out of memory for a queue entry");
    memset(e, 0, sizeof(*e));
    return e;
}

static void entry_free(struct sched *s, struct entry *e)
{
    e->next_free = s->free_list;
    s->free_list = e;
}

/* Copy the task's hint (struct sdp_hint, runtime/hint.h), if it carries one.  Tasks
 * without a codelet or without a hint (StarPU's own, or submitted around codelets/) have none. */
static int read_hint(const struct starpu_task *task, struct sdp_hint *h)
{
    if (!task->cl || !task->sched_data)
        return 0;
    memcpy(h, task->sched_data, sizeof(*h));
    return 1;
}

/* Under the lock: prefetch the inputs of e for CUDA worker w when it lies in w's window. */
static void maybe_prefetch(struct sched *s, int w, struct entry *e)
{
    if (e->prefetched || e->task->prefetched || s->typebit[w] != 2)
        return;
    /* an update the GPU runs (train.gpu_update) is ready, and ahead of the next forward: its
     * master and moments come now, whatever the window */
    if (!sdp_slidedp_in_window(e->pos, s->cur_pos[w], s->window) &&
        !(s->eager && e->has_hint && e->hint.move == SDP_MOVE_FETCH) &&
        !(e->has_hint && e->hint.phase == SDP_PH_UPDATE && e->hint.move == SDP_MOVE_NONE))
        return;
    e->prefetched = 1;
    starpu_prefetch_task_input_for(e->task, (unsigned)w);
}

static void lock_relaxed(struct sched *s)
{
    starpu_worker_relax_on();
    starpu_pthread_mutex_lock(&s->lock);
    starpu_worker_relax_off();
}

/* Under the lock: clear the idle flag of the workers in ws[0..n) that have it, keeping them in
 * wake[] (to wake after unlocking); in a simulation, where drivers block instead of polling,
 * every worker of ws.  @return how many */
static int take_idle(struct sched *s, const int *ws, int n, int *wake)
{
    int k = 0;
    for (int i = 0; i < n; i++)
#ifdef STARPU_SIMGRID /* blocking drivers: a worker that found nothing sleeps, flagged or not */
        if (1) {
#else
        if (__atomic_load_n(&s->idle[ws[i]], __ATOMIC_RELAXED)) {
#endif
            __atomic_store_n(&s->idle[ws[i]], 0, __ATOMIC_RELEASE);
            wake[k++] = ws[i];
        }
    return k;
}

static void wake_all(const int *wake, int n)
{
    for (int i = 0; i < n; i++)
        starpu_wake_worker_relax_light(wake[i]);
}

/* ---- policy methods ---- */

void sdp_slidedp_init_hooks(unsigned ctx, const struct sdp_slidedp_hooks *hooks)
{
    struct sdp_slidedp_settings st;
    struct sched *s = calloc(1, sizeof(*s));
    SDP_ASSERT(s != NULL, "sdp-slidedp: out of memory for the policy state");
    if (hooks)
        s->hooks = *hooks;
    starpu_pthread_mutex_init(&s->lock, NULL);
    sdp_slidedp_settings_read(&st, starpu_worker_get_count_by_type(STARPU_CPU_WORKER));
    s->depth = st.depth;
    s->window = st.window;
    s->stages = st.stages;
    s->eager = st.eager;
    s->idle_any_us = st.idle_any_us;
    s->host_prefetch = st.host_prefetch;
    s->slots = calloc((size_t)s->depth, sizeof(*s->slots));
    SDP_ASSERT(s->slots != NULL, "sdp-slidedp: out of memory for %d staging slots", s->depth);
    for (int w = 0; w < STARPU_NMAXWORKERS; w++)
        s->cur_pos[w] = -1;
    starpu_sched_ctx_set_policy_data(ctx, s);
    /* the fallback order of unhinted tasks is their priority, any integer */
    if (!starpu_sched_ctx_min_priority_is_set(ctx))
        starpu_sched_ctx_set_min_priority(ctx, INT_MIN);
    if (!starpu_sched_ctx_max_priority_is_set(ctx))
        starpu_sched_ctx_set_max_priority(ctx, INT_MAX);
    sdp_hint_for_policy(1);
    SDP_INFO("sdp-slidedp: staging depth %d (%s), at most %d stages alive (SDP_STAGE_BUFFERS), "
             "prefetch window %d groups (%s), any fetch after %.0f ms idle%s",
             s->depth, st.depth_from, s->stages, s->window, st.window_from, s->idle_any_us / 1e3,
             s->eager ? ", fetches prefetched when queued (SDP_FETCH_EAGER)" : "");
}

static void init_sched(unsigned ctx)
{
    sdp_slidedp_init_hooks(ctx, NULL);
}

static void free_heap(struct sched *s, struct heap *h)
{
    for (int i = 0; i < h->n; i++)
        entry_free(s, h->a[i]);
    free(h->a);
}

void sdp_slidedp_deinit(unsigned ctx)
{
    struct sched *s = starpu_sched_ctx_get_policy_data(ctx);
    struct entry *e;
    sdp_hint_for_policy(0);
    if (s->nqueued)
        SDP_WARN("sdp-slidedp: %ld tasks still queued at shutdown", s->nqueued);
    for (int w = 0; w < STARPU_NMAXWORKERS; w++) {
        free_heap(s, &s->wq[w].normal);
        free_heap(s, &s->wq[w].staged);
    }
    for (int m = 0; m < NMASKS; m++) {
        free_heap(s, &s->pool[m].normal);
        free_heap(s, &s->pool[m].staged);
    }
    while ((e = s->free_list)) {
        s->free_list = e->next_free;
        free(e);
    }
    free(s->slots);
    starpu_pthread_mutex_destroy(&s->lock);
    free(s);
}

void sdp_slidedp_add_workers(unsigned ctx, int *ids, unsigned n)
{
    struct sched *s = starpu_sched_ctx_get_policy_data(ctx);
    starpu_pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < n; i++) {
        int w = ids[i], known = 0;
        if (w < 0 || w >= STARPU_NMAXWORKERS)
            continue;
        for (int j = 0; j < s->nworkers; j++)
            known |= s->workers[j] == w;
        if (!known)
            s->workers[s->nworkers++] = w;
        s->typebit[w] = type_bit(w);
    }
    starpu_pthread_mutex_unlock(&s->lock);
    /* every worker draws from the shared queues */
    for (unsigned i = 0; i < n; i++)
        starpu_sched_ctx_worker_shares_tasks_lists(ids[i], (int)ctx);
}

void sdp_slidedp_remove_workers(unsigned ctx, int *ids, unsigned n)
{
    struct sched *s = starpu_sched_ctx_get_policy_data(ctx);
    starpu_pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < n; i++)
        for (int j = 0; j < s->nworkers; j++)
            if (s->workers[j] == ids[i]) {
                s->workers[j] = s->workers[--s->nworkers];
                break;
            }
    starpu_pthread_mutex_unlock(&s->lock);
}

/* Under the lock: the CUDA worker whose memory a fetch that CPU workers run fills (a transfer
 * task names its buffers' nodes: the first is the one it fills), or -1. */
static int fill_worker(const struct sched *s, const struct starpu_task *task)
{
    int node;
    if (!task->cl || !task->cl->specific_nodes || task->cl->where != STARPU_CPU)
        return -1;
    node = STARPU_CODELET_GET_NODE(task->cl, 0);
    for (int i = 0; node >= 0 && i < s->nworkers; i++)
        if (s->typebit[s->workers[i]] == 2 &&
            (int)starpu_worker_get_memory_node((unsigned)s->workers[i]) == node)
            return s->workers[i];
    return -1;
}

int sdp_slidedp_push(struct starpu_task *task)
{
    struct sched *s = starpu_sched_ctx_get_policy_data(task->sched_ctx);
    int eligible[STARPU_NMAXWORKERS], wake[STARPU_NMAXWORKERS], n = 0, nwake;
    unsigned mask = 0;
    struct entry *e;
    struct queue *q;

    lock_relaxed(s);
    e = entry_new(s);
    e->task = task;
    e->has_hint = read_hint(task, &e->hint);
    e->key = sdp_slidedp_key(e->has_hint ? &e->hint : NULL, task->priority);
    e->seq = s->seq++;
    e->staged = e->has_hint && sdp_slidedp_is_staged(&e->hint);
    e->fills = e->has_hint && sdp_slidedp_fills_stage(&e->hint);
    if (e->has_hint && e->hint.group + 1 > s->ngroups)
        __atomic_store_n(&s->ngroups, e->hint.group + 1, __ATOMIC_RELAXED);
    e->pos = sdp_slidedp_pass_pos(e->has_hint ? &e->hint : NULL, s->ngroups);
    e->gpu = e->has_hint && e->hint.move == SDP_MOVE_FETCH ? fill_worker(s, task) : -1;

    /* StarPU hands tasks pinned with execute_on_a_specific_worker to the worker's own queue
     * without calling push; one that comes here anyway goes to that worker */
    int pw = s->hooks.place && e->has_hint ? s->hooks.place(task, task->sched_data, &e->key) : -1;
    if (task->execute_on_a_specific_worker && task->workerid < starpu_worker_get_count()) {
        eligible[n++] = (int)task->workerid;
    } else if (pw >= 0 && starpu_worker_can_execute_task_first_impl((unsigned)pw, task, NULL)) {
        eligible[n++] = pw; /* the worker of the task's stage */
    } else {
        for (int i = 0; i < s->nworkers; i++)
            if (starpu_worker_can_execute_task_first_impl((unsigned)s->workers[i], task, NULL)) {
                eligible[n++] = s->workers[i];
                mask |= s->typebit[s->workers[i]];
            }
    }
    SDP_ASSERT(n > 0, "sdp-slidedp: no worker of the context can run task %s",
               task->name ? task->name : "(unnamed)");
    q = n == 1 ? &s->wq[eligible[0]] : &s->pool[mask];
    sdp_slidedp_heap_push(e->staged ? &q->staged : &q->normal, e);
    __atomic_store_n(&s->nqueued, s->nqueued + 1, __ATOMIC_RELEASE);
    s->nstaged += e->staged;
    if (n == 1)
        maybe_prefetch(s, eligible[0], e);
    /* an update that only CPU workers run, queued: its gradient chunk starts down from the GPU
     * now, beside the others queued, rather than when a worker pops the task and waits for it
     * alone (bench/results/2026-12-03-h200-embed-rows.md).  Not one that fills a stage: the staging
     * bound may hold it back, and its input would wait on the host with it.  SDP_HOST_PREFETCH=0
     * turns it off. */
    else if (s->host_prefetch && e->has_hint && e->hint.phase == SDP_PH_UPDATE &&
             e->hint.move == SDP_MOVE_NONE && !e->fills && mask == 1 && !task->prefetched) {
        e->prefetched = 1;
        starpu_prefetch_task_input_on_node(task, STARPU_MAIN_RAM);
    }
    starpu_push_task_end(task);
    nwake = take_idle(s, eligible, n, wake);
    starpu_pthread_mutex_unlock(&s->lock);
    wake_all(wake, nwake);
    return 0;
}

/* The best candidate for worker w in one heap kind (staged or not) among w's queues. */
static struct entry *candidate(struct sched *s, int w, int staged, double idle_us, int *gated)
{
    struct entry *best = NULL, *e;
    struct queue *own = &s->wq[w];
    e = best_for(s, staged ? &own->staged : &own->normal, w, 0, idle_us, gated);
    if (e)
        best = e;
    for (unsigned m = 1; m < NMASKS; m++) {
        if (!(m & s->typebit[w]))
            continue;
        e = best_for(s, staged ? &s->pool[m].staged : &s->pool[m].normal, w, 1, idle_us, gated);
        if (e && (!best || before(e, best)))
            best = e;
    }
    return best;
}

/* The lane of a held task's wait: a cast's, an update's, else the compute lane of worker type
 * typebit. */
static enum sdp_trace_lane wait_lane(const struct sdp_hint *h, unsigned typebit)
{
    if (h->phase == SDP_PH_CAST || h->phase == SDP_PH_UPDATE)
        return h->phase == SDP_PH_CAST ? SDP_LANE_PARAM_CAST : SDP_LANE_CPU_ADAMW;
    return typebit == 2 ? SDP_LANE_GPU_COMPUTE : SDP_LANE_CPU_COMPUTE;
}

struct starpu_task *sdp_slidedp_pop(unsigned ctx)
{
    struct sched *s = starpu_sched_ctx_get_policy_data(ctx);
    int w = starpu_worker_get_id_check();
    struct entry *normal, *staged, *chosen = NULL;
    struct starpu_task *task = NULL;
    struct sdp_hint wait_hint = { 0 };
    double held_since = 0.0, now = 0.0;
    const char *why = WAIT_STAGING;
    int gated = 0;

    /* nothing queued, or nothing for us since we last looked (a push or a free slot wakes us) */
    if (__atomic_load_n(&s->nqueued, __ATOMIC_ACQUIRE) == 0 ||
        __atomic_load_n(&s->idle[w], __ATOMIC_ACQUIRE))
        return NULL;

    lock_relaxed(s);
    normal = candidate(s, w, 0, 0.0, &gated);
    staged = candidate(s, w, 1, 0.0, &gated);
    if (!normal && !staged && gated) { /* nothing to hold up: a fetch, once idle long enough */
        double idle_us = starpu_timing_now() - s->last_start_us[w];
        if (idle_us >= FETCH_IDLE_US)
            normal = candidate(s, w, 0, idle_us, &gated);
    }
    if (staged && (!normal || before(staged, normal))) {
        if (s->inflight < s->depth && (!staged->fills || s->nalive < s->stages)) {
            chosen = staged;
        } else if (staged->held_since_us == 0.0) {
            /* a bound refuses the task this worker would run next: it waits from now */
            staged->held_since_us = starpu_timing_now();
            staged->held_why = s->inflight < s->depth ? WAIT_STAGES : WAIT_STAGING;
        }
    }
    if (!chosen)
        chosen = normal;
    if (chosen) {
        sdp_slidedp_heap_remove(chosen);
        task = chosen->task;
        __atomic_store_n(&s->nqueued, s->nqueued - 1, __ATOMIC_RELEASE);
        if (chosen->staged) {
            s->nstaged--;
            for (int i = 0; i < s->depth; i++)
                if (!s->slots[i]) {
                    s->slots[i] = task;
                    break;
                }
            __atomic_store_n(&s->inflight, s->inflight + 1, __ATOMIC_RELEASE);
            if (chosen->fills)
                s->nalive++;
        }
        if (chosen->held_since_us > 0.0) {
            why = chosen->held_why;
            held_since = chosen->held_since_us;
            wait_hint = chosen->hint;
            now = starpu_timing_now();
        }
        entry_free(s, chosen);
    } else if (!gated) {
        /* a worker that holds back a fetch beyond its window keeps looking: its computing
         * moves the window, and after FETCH_IDLE_US idle it runs the fetch */
        __atomic_store_n(&s->idle[w], 1, __ATOMIC_RELEASE);
    }
    starpu_pthread_mutex_unlock(&s->lock);
#ifdef STARPU_SIMGRID
    /* StarPU's simulated drivers block where real ones poll: a worker that keeps looking lets
     * simulated time pass, then comes back */
    if (!chosen && gated) {
        starpu_sleep(SIM_POLL_S);
        starpu_wake_worker_relax_light(w);
    }
#endif
    if (held_since > 0.0)
        sdp_trace_wait(wait_lane(&wait_hint, s->typebit[w]), wait_hint.rank, wait_hint.step,
                       wait_hint.group, wait_hint.chunk, held_since, now, why);
    return task;
}

/* A CUDA worker starts a task: when it moves to another group, the tasks queued for it that now
 * lie in its window get their inputs prefetched.  A task that only moves data (a fetch, a put)
 * computes nothing, so it leaves the position where it is. */
void sdp_slidedp_pre_exec(struct starpu_task *task, unsigned ctx)
{
    struct sched *s = starpu_sched_ctx_get_policy_data(ctx);
    int w = starpu_worker_get_id();
    struct sdp_hint h;
    struct queue *q;
    long pos;
    if (w < 0 || s->typebit[w] != 2)
        return;
    double now = starpu_timing_now();
    /* worker w's own, read by its pops and by CPU workers' gating of transfers (may_run) */
    __atomic_store(&s->last_start_us[w], &now, __ATOMIC_RELAXED);
    if (!read_hint(task, &h) || sdp_slidedp_moves_only(&h))
        return;
    /* cur_pos[w] is written by worker w only: no lock to read it here */
    pos = sdp_slidedp_cur_pos(&h, __atomic_load_n(&s->ngroups, __ATOMIC_RELAXED));
    if (pos == s->cur_pos[w])
        return;
    lock_relaxed(s);
    q = &s->wq[w];
    s->cur_pos[w] = pos;
    for (int i = 0; i < q->normal.n; i++)
        maybe_prefetch(s, w, q->normal.a[i]);
    for (int i = 0; i < q->staged.n; i++)
        maybe_prefetch(s, w, q->staged.a[i]);
    starpu_pthread_mutex_unlock(&s->lock);
}

void sdp_slidedp_wake(unsigned ctx)
{
    struct sched *s = starpu_sched_ctx_get_policy_data(ctx);
    int wake[STARPU_NMAXWORKERS], nwake;
    lock_relaxed(s);
    nwake = take_idle(s, s->workers, s->nworkers, wake);
    starpu_pthread_mutex_unlock(&s->lock);
    wake_all(wake, nwake);
}

/* A task ended: a staged one frees its slot, a put frees its stage, and the workers that stopped
 * looking get woken when staged tasks are held back. */
void sdp_slidedp_post_exec(struct starpu_task *task, unsigned ctx)
{
    struct sched *s = starpu_sched_ctx_get_policy_data(ctx);
    int wake[STARPU_NMAXWORKERS], nwake = 0;
    struct sdp_hint h;
    if (read_hint(task, &h) && sdp_slidedp_drains_stage(&h)) {
        lock_relaxed(s);
        if (s->nalive > 0)
            s->nalive--;
        if (s->nstaged > 0)
            nwake = take_idle(s, s->workers, s->nworkers, wake);
        starpu_pthread_mutex_unlock(&s->lock);
        wake_all(wake, nwake);
        return;
    }
    if (__atomic_load_n(&s->inflight, __ATOMIC_ACQUIRE) == 0)
        return;
    lock_relaxed(s);
    for (int i = 0; i < s->depth; i++)
        if (s->slots[i] == task) {
            s->slots[i] = NULL;
            __atomic_store_n(&s->inflight, s->inflight - 1, __ATOMIC_RELEASE);
            if (s->nstaged > 0)
                nwake = take_idle(s, s->workers, s->nworkers, wake);
            break;
        }
    starpu_pthread_mutex_unlock(&s->lock);
    wake_all(wake, nwake);
}

struct starpu_sched_policy sdp_policy_slidedp = {
    .init_sched = init_sched,
    .deinit_sched = sdp_slidedp_deinit,
    .push_task = sdp_slidedp_push,
    .pop_task = sdp_slidedp_pop,
    .pre_exec_hook = sdp_slidedp_pre_exec,
    .post_exec_hook = sdp_slidedp_post_exec,
    .add_workers = sdp_slidedp_add_workers,
    .remove_workers = sdp_slidedp_remove_workers,
    .prefetches = 1,
    .policy_name = "sdp-slidedp",
    .policy_description = "SlideDP: critical-path order, bounded staging (SDP_STAGING_DEPTH) "
                          "and stages (SDP_STAGE_BUFFERS), prefetch window (SDP_WINDOW_DEPTH)",
    .worker_type = STARPU_WORKER_LIST,
};
