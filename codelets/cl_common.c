/* SPDX-License-Identifier: MIT */
/* Task submission, footprints, scratch memory and the codelet registry shared by all codelets.
 * SDP_SYNC=1 makes every task synchronous (for hunting dependency bugs).  While runtime/trace.c
 * records, each task gets an end callback that tags it (lane, parameter version) and records it;
 * the trace's test is tests/e2e/test_e2e_trace.sh. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "base/env.h"
#include "base/sdp_log.h"
#include "runtime/init.h"
#include "runtime/trace.h"

#define NSLOTS 8
static __thread void *scratch_ptr[NSLOTS];
static __thread size_t scratch_cap[NSLOTS];
static pthread_key_t scratch_key; /* its destructor frees a thread's scratch when the thread ends */
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *unused)
{
    (void)unused;
    for (int i = 0; i < NSLOTS; i++) {
        free(scratch_ptr[i]);
        scratch_ptr[i] = NULL;
        scratch_cap[i] = 0;
    }
}

static void scratch_key_init(void)
{
    SDP_ASSERT(pthread_key_create(&scratch_key, scratch_free) == 0, "no thread-specific key left");
}

static int sync_mode = -1;

/* Data-parallel ranks (sdp_tasks_set_ranks) and whether tasks carry hints for our policies. */
#define MAX_RANKS SDP_MAX_RANKS
static int rank_workers[MAX_RANKS];
static int nranks_pinned;

int sdp_tasks_set_ranks(int nranks, const int *workerids)
{
    if (nranks < 0 || nranks > MAX_RANKS)
        return sdp_err(-EINVAL, "%d ranks (at most %d)", nranks, MAX_RANKS);
    for (int r = 0; r < nranks; r++) {
        if (workerids[r] < 0 || (unsigned)workerids[r] >= starpu_worker_get_count())
            return sdp_err(-EINVAL, "rank %d on worker %d: StarPU has %u workers", r, workerids[r],
                           starpu_worker_get_count());
        rank_workers[r] = workerids[r];
    }
    nranks_pinned = nranks;
    return 0;
}

int sdp_tasks_rank_worker(int r)
{
    return r >= 0 && r < nranks_pinned ? rank_workers[r] : -1;
}

/* The memory node where rank r computes: its pinned worker's; unpinned (one rank), a CUDA
 * worker's where the compute runs on the GPUs, else the host's. */
int sdp_cl_rank_node(int r)
{
    int w = sdp_tasks_rank_worker(r);
    if (w < 0 && sdp_tasks_compute_on_gpu() && starpu_cuda_worker_get_count() > 0)
        w = starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0);
    return w < 0 ? STARPU_MAIN_RAM : (int)starpu_worker_get_memory_node((unsigned)w);
}

static int node_device(int node)
{
    if (node < 0 || starpu_node_get_kind((unsigned)node) != STARPU_CUDA_RAM)
        return -1;
    return starpu_memory_node_get_devid((unsigned)node);
}

struct sdp_cl_xfer_args *sdp_cl_xfer_args(int node, int to_node, size_t nbytes, size_t off_bytes)
{
    struct sdp_cl_xfer_args *a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = (int)(nbytes & 0x7fffffff);
    a->key.d[1] = (int)(nbytes >> 31);
    a->off_bytes = off_bytes;
    a->dev = node_device(node);
    if (a->dev >= 0)
        sdp_rt_bus_count_task(node, to_node, nbytes);
    return a;
}

struct starpu_codelet *sdp_cl_xfer_of(struct starpu_codelet *tmpl, struct starpu_codelet *copies,
                                      int r, int buf, int node)
{
    struct starpu_codelet *cl = r == 0 ? tmpl : &copies[r - 1];
    SDP_ASSERT(r >= 0 && r < MAX_RANKS, "%s for rank %d", tmpl->name, r);
    if (r > 0 && !cl->name) /* first use: a copy of the template, the nodes set below */
        *cl = *tmpl;
    if (r > 0 && cl->cpu_funcs[0] != tmpl->cpu_funcs[0]) /* sdp_cl_dry_run() swapped them */
        cl->cpu_funcs[0] = tmpl->cpu_funcs[0];
    if (cl->nodes[buf] != node) /* a new run's placement: no task of it is in flight */
        cl->nodes[buf] = node;
    return cl;
}

void sdp_cl_xfer_copy(void *dst, const void *src, size_t nbytes, int dev, int to_dev)
{
    if (dev < 0) {
        memcpy(dst, src, nbytes);
        return;
    }
#ifdef SDP_HAVE_CUDA
    /* the thread's own stream, synchronous with no other: the copy overlaps the GPU's kernels */
    SDP_CUDA_CHECK(cudaSetDevice(dev));
    SDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes,
                                   to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                   cudaStreamPerThread));
    SDP_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
#else
    (void)to_dev;
    SDP_ASSERT(0, "a copy to or from CUDA device %d in a build without CUDA", dev);
#endif
}

void sdp_cl_xfer_poison(void *dst, size_t nbytes, int dev)
{
    if (dev < 0) {
        memset(dst, 0xff, nbytes);
        return;
    }
#ifdef SDP_HAVE_CUDA
    SDP_CUDA_CHECK(cudaSetDevice(dev));
    SDP_CUDA_CHECK(cudaMemsetAsync(dst, 0xff, nbytes, cudaStreamPerThread));
    SDP_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
#else
    SDP_ASSERT(0, "a fill on CUDA device %d in a build without CUDA", dev);
#endif
}

/* The phases a rank runs on its own worker. */
static int rank_phase(enum sdp_phase ph)
{
    return ph == SDP_PH_FWD || ph == SDP_PH_RECOMPUTE || ph == SDP_PH_BWD || ph == SDP_PH_LOSS;
}

void *sdp_cl_args_alloc(size_t nbytes)
{
    void *p = calloc(1, nbytes);
    SDP_ASSERT(p != NULL, "out of memory for %zu bytes of task arguments", nbytes);
    return p;
}

/* ---- what a task carries to its end callback: the trace tag and the policy's hint ---- */
struct trace_arg {
    struct starpu_task *task;
    struct sdp_trace_tag tag;
    struct sdp_hint hint; /* starpu_task::sched_data points here for our policies */
    int traced;
    void (*prev_func)(void *);
    void *prev_arg;
};

static const char *phase_name(enum sdp_phase ph)
{
    switch (ph) {
    case SDP_PH_CAST:
        return "cast";
    case SDP_PH_FWD:
        return "fwd";
    case SDP_PH_RECOMPUTE:
        return "recompute";
    case SDP_PH_BWD:
        return "bwd";
    case SDP_PH_LOSS:
        return "loss";
    case SDP_PH_NORM:
        return "norm";
    case SDP_PH_UPDATE:
        return "update";
    }
    return "unknown";
}

static void trace_callback(void *p)
{
    struct trace_arg *a = p;
    if (a->traced) {
        a->tag.stage1 = a->hint.stage1; /* what the policy wrote in the hint */
        a->tag.round1 = a->hint.round1;
        sdp_trace_task_done(a->task, &a->tag);
    }
    if (a->prev_func)
        a->prev_func(a->prev_arg);
    free(a);
}

/* Attach the end callback to task (keeping any callback it has): it records the task while tracing
 * and frees the hint our policies read.  @return the argument, to free if the submission fails */
/* The bytes a task of a transfer lane moves (its smallest buffer: the chunk of a fetch or put
 * into a whole copy, the chunk a gradient's copy-out writes, the one buffer of a fetch); 0 on the
 * other lanes. */
static long long moved_bytes(enum sdp_trace_lane lane, const struct sdp_cl_buf *bufs, int nbufs)
{
    long long least = -1;
    if (lane != SDP_LANE_PARAM_H2D && lane != SDP_LANE_ACT_OFFLOAD && lane != SDP_LANE_GRAD_D2H)
        return 0;
    for (int i = 0; i < nbufs; i++) {
        long long n = (long long)(sdp_rt_tensor_nelems(bufs[i].t) *
                                  sdp_dtype_size(sdp_rt_tensor_dtype(bufs[i].t)));
        least = least < 0 || n < least ? n : least;
    }
    return least < 0 ? 0 : least;
}

static struct trace_arg *trace_attach(struct starpu_task *task, const struct sdp_task_opts *o,
                                      int traced)
{
    struct trace_arg *a = sdp_cl_args_alloc(sizeof(*a));
    const struct sdp_op *op;
    a->task = task;
    a->traced = traced;
    if (o) {
        a->hint = o->hint;
    } else {
        a->hint.step = a->hint.group = a->hint.chunk = a->hint.mb = -1;
        a->hint.phase = SDP_PH_FWD;
    }
    if (sdp_hint_for_policy_on())
        task->sched_data = &a->hint;
    a->tag.name = task->cl->name;
    op = sdp_op_of(task->cl); /* the op decides the lane, not the phase */
    a->tag.lane = op ? op->lane : SDP_LANE_GPU_COMPUTE;
    if (o) {
        a->tag.phase = phase_name(o->hint.phase);
        a->tag.step = o->hint.step;
        a->tag.group = o->hint.group;
        a->tag.chunk = o->hint.chunk;
        a->tag.mb = o->hint.mb;
        a->tag.rank = o->hint.rank;
        /* set by the graph: the adamw of step s writes version s + 1; the rest of step s reads
         * version s (s - 1 with the asynchronous optimizer) */
        a->tag.version = o->version;
        a->tag.grad_lim = o->hint.grad_lim;
        a->tag.tied = o->hint.tied;
    } else {
        a->tag.phase = "unknown";
        a->tag.step = a->tag.group = a->tag.chunk = a->tag.mb = a->tag.version = -1;
        a->tag.rank = 0;
    }
    a->prev_func = task->callback_func;
    a->prev_arg = task->callback_arg;
    task->callback_func = trace_callback;
    task->callback_arg = a;
    return a;
}

int sdp_cl_submit(struct starpu_codelet *cl, const struct sdp_task_opts *o, void *args,
                  size_t argsize, double flops, const struct sdp_cl_buf *bufs, int nbufs)
{
    struct starpu_task *task = starpu_task_create();
    struct trace_arg *targ = NULL;
    int i, rc;
    if (sync_mode < 0) {
        sync_mode = sdp_env_long("SDP_SYNC", 0) > 0;
    }
    task->cl = cl;
    task->cl_arg = args;
    task->cl_arg_size = argsize;
    task->cl_arg_free = 1;
    task->name = cl->name;
    task->nbuffers = nbufs;
    task->flops = flops;
    task->synchronous = (unsigned)sync_mode;
    if (o) {
        task->priority = o->priority;
        /* on_host wins: a rank's transfer task runs on a CPU worker, the rank's own computes */
        if (nranks_pinned > 0 && !o->on_host && (rank_phase(o->hint.phase) || o->on_rank)) {
            SDP_ASSERT(o->hint.rank >= 0 && o->hint.rank < nranks_pinned,
                       "task %s of rank %d with %d ranks", cl->name, o->hint.rank, nranks_pinned);
            task->execute_on_a_specific_worker = 1;
            task->workerid = (unsigned)rank_workers[o->hint.rank];
        }
        if (o->on_host && !task->execute_on_a_specific_worker)
            task->where = STARPU_CPU;
    }
    if (o && o->tag) {
        task->use_tag = 1;
        task->tag_id = (starpu_tag_t)o->tag;
        if (o->after)
            starpu_tag_declare_deps((starpu_tag_t)o->tag, 1, (starpu_tag_t)o->after);
    }
    SDP_ASSERT(!o || !o->after || o->tag, "task %s waits on a tag but has none", cl->name);
    if (nbufs > STARPU_NMAXBUFS) {
        task->dyn_handles = malloc((size_t)nbufs * sizeof(*task->dyn_handles));
        task->dyn_modes = malloc((size_t)nbufs * sizeof(*task->dyn_modes));
        SDP_ASSERT(task->dyn_handles && task->dyn_modes, "out of memory for %d task buffers",
                   nbufs);
    }
    for (i = 0; i < nbufs; i++) {
        STARPU_TASK_SET_HANDLE(task, sdp_rt_tensor_handle(bufs[i].t), i);
        STARPU_TASK_SET_MODE(task, bufs[i].mode, i);
    }
    if (sdp_trace_enabled() || sdp_hint_for_policy_on())
        targ = trace_attach(task, o, sdp_trace_enabled());
    if (targ) /* the policy reads them too (the hint): before the submission */
        targ->hint.bytes = targ->tag.bytes = moved_bytes(targ->tag.lane, bufs, nbufs);
    rc = starpu_task_submit(task);
    if (rc) {
        free(targ);
        task->destroy = 0;
        starpu_task_destroy(task);
        return sdp_err(rc < 0 ? rc : -EIO, "cannot submit task %s", cl->name);
    }
    return 0;
}

/* Tags live above 2^40, out of the way of any small numbers StarPU or a test might use. */
static unsigned long long next_tag = 1ull << 40;

unsigned long long sdp_task_tag_new(void)
{
    return __atomic_fetch_add(&next_tag, 1, __ATOMIC_RELAXED);
}

void sdp_task_tag_forget(unsigned long long tag)
{
    if (!tag)
        return;
    /* StarPU releases a task's data before it marks the task's tag done: a task that read the
     * data may finish first, so wait for the tag itself before freeing it */
    starpu_tag_wait((starpu_tag_t)tag);
    starpu_tag_remove((starpu_tag_t)tag);
}

uint32_t sdp_cl_footprint(struct starpu_task *task)
{
    return starpu_hash_crc32c_be_n(task->cl_arg, sizeof(struct sdp_shape_key), 0);
}

void *sdp_cl_scratch(int slot, size_t nbytes)
{
    SDP_ASSERT(slot >= 0 && slot < NSLOTS, "scratch slot %d out of range", slot);
    if (scratch_cap[slot] < nbytes) {
        pthread_once(&scratch_once, scratch_key_init);
        pthread_setspecific(scratch_key, scratch_ptr); /* non-NULL: the destructor runs */
        free(scratch_ptr[slot]);
        scratch_ptr[slot] = NULL;
        if (posix_memalign(&scratch_ptr[slot], 64, nbytes) != 0)
            scratch_ptr[slot] = NULL;
        SDP_ASSERT(scratch_ptr[slot] != NULL, "out of memory for %zu bytes of scratch", nbytes);
        scratch_cap[slot] = nbytes;
    }
    return scratch_ptr[slot];
}

const float *sdp_cl_f32_view(void *vec, size_t off, size_t n, int slot)
{
    size_t es = STARPU_VECTOR_GET_ELEMSIZE(vec);
    if (es == sizeof(float))
        return (const float *)STARPU_VECTOR_GET_PTR(vec) + off;
    SDP_ASSERT(es == 2, "weight buffer with element size %zu", es);
    float *dst = sdp_cl_scratch(slot, n * sizeof(float));
    sdp_cpu_bf16_to_f32_ref(dst, (const uint16_t *)STARPU_VECTOR_GET_PTR(vec) + off, n);
    return dst;
}

const float *sdp_cl_in(void *vec, int slot)
{
    return sdp_cl_f32_view(vec, 0, STARPU_VECTOR_GET_NX(vec), slot);
}

float *sdp_cl_out(void *vec, int slot)
{
    if (STARPU_VECTOR_GET_ELEMSIZE(vec) == sizeof(float))
        return (float *)STARPU_VECTOR_GET_PTR(vec);
    return sdp_cl_scratch(slot, STARPU_VECTOR_GET_NX(vec) * sizeof(float));
}

float *sdp_cl_inout(void *vec, int slot)
{
    return (float *)sdp_cl_in(vec, slot);
}

void sdp_cl_out_done(void *vec, const float *p)
{
    if (STARPU_VECTOR_GET_ELEMSIZE(vec) == 2)
        sdp_cpu_cast_bf16_ref((uint16_t *)STARPU_VECTOR_GET_PTR(vec), p, STARPU_VECTOR_GET_NX(vec));
}

#ifdef SDP_HAVE_CUDA
#define NCUDA_SLOTS 5
#define WS_FLAGS    (STARPU_MALLOC_COUNT | STARPU_MALLOC_NORECLAIM | STARPU_MEMORY_OVERFLOW)
static __thread void *cuda_ws[NCUDA_SLOTS];
static __thread size_t cuda_ws_cap[NCUDA_SLOTS];

void *sdp_cl_cuda_ws(int slot, size_t nbytes)
{
    SDP_ASSERT(slot >= 0 && slot < NCUDA_SLOTS, "CUDA workspace slot %d out of range", slot);
    if (nbytes == 0)
        nbytes = 256;
    if (cuda_ws_cap[slot] < nbytes) {
        unsigned node = starpu_worker_get_memory_node(starpu_worker_get_id_check());
        if (cuda_ws[slot]) {
            /* kernels queued earlier may still read the old buffer */
            SDP_CUDA_CHECK(cudaStreamSynchronize(starpu_cuda_get_local_stream()));
            starpu_free_on_node_flags(node, (uintptr_t)cuda_ws[slot], cuda_ws_cap[slot], WS_FLAGS);
        }
        nbytes = (nbytes + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
        /* counted in StarPU's memory limit, but allowed to overflow it (STARPU_MEMORY_OVERFLOW)
         * rather than fail while the limit is taken by data and StarPU's cache of freed buffers:
         * StarPU's next allocation reclaims those (a workspace cannot be evicted) */
        cuda_ws[slot] = (void *)starpu_malloc_on_node_flags(node, nbytes, WS_FLAGS);
        SDP_ASSERT(cuda_ws[slot] != NULL,
                   "cannot allocate a %.1f MiB GPU workspace: lower the micro-batch",
                   nbytes / 1048576.0);
        cuda_ws_cap[slot] = nbytes;
    }
    return cuda_ws[slot];
}

void *sdp_cl_cublaslt_ws(size_t *nbytes)
{
    *nbytes = (size_t)32 << 20;
    return sdp_cl_cuda_ws(NCUDA_SLOTS - 1, *nbytes);
}
#endif

/* ---- registry, for sdp_tasks_restrict and sdp_cl_dry_run: the table of ops as set up ---- */
struct reg_entry {
    uint32_t where; /* as defined, for sdp_tasks_restrict("any") */
    /* the real implementations and perfmodel, while the dry run has swapped them out */
    starpu_cpu_func_t cpu_funcs[STARPU_MAXIMPLEMENTATIONS];
    starpu_cuda_func_t cuda_funcs[STARPU_MAXIMPLEMENTATIONS];
    struct starpu_perfmodel *model;
};
#define MAX_OPS 64
static struct reg_entry registry[MAX_OPS]; /* one per row of sdp_ops[] */
static int registered, dry_run;

/* The dry run's implementation, in every slot that has a real one (CPU and CUDA alike): the
 * task's buffers are still fetched in their modes and its callbacks run, nothing is computed. */
static void nop_func(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
}

/* Swap a codelet's implementations for the no-op (on) or back. The perfmodel goes too while dry:
 * no-op timings must not enter the history of the real kernels. */
static void dry_swap(struct starpu_codelet *cl, const struct reg_entry *e, int on)
{
    for (int i = 0; i < STARPU_MAXIMPLEMENTATIONS; i++) {
        if (e->cpu_funcs[i])
            cl->cpu_funcs[i] = on ? nop_func : e->cpu_funcs[i];
        if (e->cuda_funcs[i])
            cl->cuda_funcs[i] = on ? nop_func : e->cuda_funcs[i];
    }
    cl->model = on ? NULL : e->model;
}

void sdp_cl_registry_init(void)
{
    if (registered)
        return;
    SDP_ASSERT(sdp_nops <= MAX_OPS, "%d ops: raise MAX_OPS", sdp_nops);
    registered = 1;
    for (int i = 0; i < sdp_nops; i++) {
        const struct starpu_codelet *cl = sdp_ops[i].cl;
        struct reg_entry *e = &registry[i];
        e->where = cl->where;
        memcpy(e->cpu_funcs, cl->cpu_funcs, sizeof(e->cpu_funcs));
        memcpy(e->cuda_funcs, cl->cuda_funcs, sizeof(e->cuda_funcs));
        e->model = cl->model;
    }
}

void sdp_cl_dry_run(int on)
{
    on = on != 0;
    if (on == dry_run)
        return;
    sdp_cl_registry_init();
    dry_run = on;
    for (int i = 0; i < sdp_nops; i++)
        dry_swap(sdp_ops[i].cl, &registry[i], on);
}

int sdp_tasks_restrict(const char *where)
{
    uint32_t w;
    int i;
    if (!strcmp(where, "cpu"))
        w = STARPU_CPU;
    else if (!strcmp(where, "cuda"))
        w = STARPU_CUDA;
    else if (!strcmp(where, "any"))
        w = 0;
    else
        return sdp_err(-EINVAL, "unknown worker kind '%s' (cpu, cuda, any)", where);
    sdp_cl_registry_init();
    for (i = 0; i < sdp_nops; i++)
        if (sdp_ops[i].place != SDP_PLACE_FIXED)
            sdp_ops[i].cl->where = w ? w : registry[i].where;
    return 0;
}
