/* SPDX-License-Identifier: MIT */
/* NCCL collectives (sdp_tasks_use_nccl): the GPU-reduction route's reduce and the sharded
 * parameter route's broadcast of each chunk from its owner.  StarPU has no NCCL integration, and
 * an NCCL collective blocks until every rank has joined it, so R sibling tasks on R CUDA workers
 * could deadlock when one rank's worker is busy with other work.  Instead ONE task drives every
 * rank: its codelet runs on a CPU worker, its buffers live on the ranks' GPUs (specific_nodes:
 * buffer r on rank r's memory node), and it issues ncclReduce for every rank inside one
 * ncclGroupStart/End on streams of its own, then waits for them, so StarPU sees the reduced chunk
 * when the task ends.  Rank 0's chunk is reduced in place (sum in NCCL's order: with two ranks
 * g0 + g1, the same bits as grad_reduce; with more, the order may differ).  Ranks talk over
 * NVLink or PCIe peer to peer where the machine has them, never through host memory.
 * Several CPU workers run such tasks at once, and a communicator takes calls from one thread at
 * a time, in the same order on every rank: one lock spans each group's calls (without it two
 * workers interleave their calls and NCCL fails: bench/results/2026-11-30-h200-session4.md).
 * Tests: tests/e2e/test_e2e_nccl.sh (two GPUs or more), tests/e2e/test_e2e_bad_input.sh (the
 * error without CUDA ranks). */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"

#if defined(SDP_HAVE_CUDA) && defined(SDP_HAVE_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

static int nccl_ranks; /* 0: not in use */
static ncclComm_t comms[SDP_MAX_RANKS];
static cudaStream_t streams[SDP_MAX_RANKS];
static int devs[SDP_MAX_RANKS];
static int *nodes; /* the codelet's dyn_nodes: rank r's memory node */
static pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER; /* one group's calls at a time */

#define NCCL_CHECK(expr)                                                                           \
    do {                                                                                           \
        ncclResult_t r_ = (expr);                                                                  \
        SDP_ASSERT(r_ == ncclSuccess, "NCCL error %s", ncclGetErrorString(r_));                    \
    } while (0)

/* Wait for the collectives of ranks 0..R-1 on our streams: StarPU takes the data as ready when the
 * task returns. */
static void wait_streams(int R)
{
    for (int r = 0; r < R; r++) {
        SDP_CUDA_CHECK(cudaSetDevice(devs[r]));
        SDP_CUDA_CHECK(cudaStreamSynchronize(streams[r]));
    }
}

struct sdp_reduce_nccl_args {
    struct sdp_shape_key key; /* n, ranks */
};

/* buffers: rank r's chunk (n) f32 on rank r's GPU; rank 0's RW (the sum), the others R.  The
 * broadcast below works the same way, from the chunk's owner to every other rank's replica. */
static void reduce_nccl_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_reduce_nccl_args *a = cl_arg;
    size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
    int R = a->key.d[1];
    pthread_mutex_lock(&nccl_lock);
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < R; r++) {
        float *send = SDP_VECF(buffers[r]);
        /* recvbuff is read on the root only, where it is sendbuff: in place */
        NCCL_CHECK(ncclReduce(send, send, n, ncclFloat, ncclSum, 0, comms[r], streams[r]));
    }
    NCCL_CHECK(ncclGroupEnd());
    pthread_mutex_unlock(&nccl_lock);
    wait_streams(R);
}

static struct starpu_perfmodel sdp_pm_reduce_nccl = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_grad_reduce_nccl_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_grad_reduce_nccl = {
    .name = "grad_reduce_nccl",
    .where = STARPU_CPU,
    .cpu_funcs = { reduce_nccl_cpu },
    .cpu_funcs_name = { "reduce_nccl_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .specific_nodes = 1,
    .model = &sdp_pm_reduce_nccl,
};

struct sdp_bcast_nccl_args {
    struct sdp_shape_key key; /* bytes (low, high 31 bits), ranks, root */
};

/* buffers: rank r's replica chunk on rank r's GPU; the root's (owner's) R, the others W */
static void bcast_nccl_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_bcast_nccl_args *a = cl_arg;
    size_t nbytes =
        (size_t)STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    int R = a->key.d[2], root = a->key.d[3];
    const void *src = SDP_VEC(buffers[root]);
    pthread_mutex_lock(&nccl_lock);
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < R; r++) { /* sendbuff is read on the root only, where it is recvbuff */
        void *dst = SDP_VEC(buffers[r]);
        NCCL_CHECK(ncclBroadcast(r == root ? src : dst, dst, nbytes, ncclChar, root, comms[r],
                                 streams[r]));
    }
    NCCL_CHECK(ncclGroupEnd());
    pthread_mutex_unlock(&nccl_lock);
    wait_streams(R);
}

static struct starpu_perfmodel sdp_pm_bcast_nccl = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_param_bcast_nccl_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_param_bcast_nccl = {
    .name = "param_bcast_nccl",
    .where = STARPU_CPU,
    .cpu_funcs = { bcast_nccl_cpu },
    .cpu_funcs_name = { "bcast_nccl_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .specific_nodes = 1,
    .model = &sdp_pm_bcast_nccl,
};

int sdp_tasks_use_nccl(int nranks, const int *workerids)
{
    if (nccl_ranks)
        return sdp_err(-EINVAL, "NCCL is already set up for %d ranks", nccl_ranks);
    if (nranks < 2 || nranks > SDP_MAX_RANKS)
        return sdp_err(-EINVAL, "NCCL reduction for %d ranks (2..%d)", nranks, SDP_MAX_RANKS);
    if (starpu_cpu_worker_get_count() == 0)
        return sdp_err(-ENODEV, "the NCCL reduction runs from a CPU worker, and StarPU has none");
    nodes = calloc((size_t)nranks, sizeof(*nodes));
    if (!nodes)
        return sdp_err(-ENOMEM, "NCCL setup of %d ranks", nranks);
    for (int r = 0; r < nranks; r++) {
        if (starpu_worker_get_type(workerids[r]) != STARPU_CUDA_WORKER) {
            free(nodes);
            nodes = NULL;
            sdp_err(-ENODEV,
                    "NCCL collectives need every rank on a GPU; rank %d is on a CPU worker", r);
            sdp_hint("use the StarPU collectives (train.collectives: starpu) for CPU ranks");
            return -ENODEV;
        }
        devs[r] = starpu_worker_get_devid(workerids[r]);
        nodes[r] = (int)starpu_worker_get_memory_node(workerids[r]);
    }
    ncclResult_t nr = ncclCommInitAll(comms, nranks, devs);
    if (nr != ncclSuccess) {
        free(nodes);
        nodes = NULL;
        return sdp_err(-EIO, "ncclCommInitAll over %d GPUs failed: %s", nranks,
                       ncclGetErrorString(nr));
    }
    for (int r = 0; r < nranks; r++) {
        SDP_CUDA_CHECK(cudaSetDevice(devs[r]));
        SDP_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    }
    sdp_cl_grad_reduce_nccl.dyn_nodes = nodes;
    sdp_cl_param_bcast_nccl.dyn_nodes = nodes;
    nccl_ranks = nranks;
    SDP_INFO("NCCL %d.%d.%d: gradient reduction and sharded dispatch over %d GPUs", NCCL_MAJOR,
             NCCL_MINOR, NCCL_PATCH, nranks);
    return 0;
}

int sdp_tasks_nccl_ranks(void)
{
    return nccl_ranks;
}

int sdp_task_grad_reduce_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                              sdp_rt_tensor_t *const *in, int nin)
{
    struct sdp_cl_buf b[SDP_MAX_RANKS];
    struct sdp_reduce_nccl_args *a;
    struct sdp_task_opts oc = *o;
    if (nin + 1 != nccl_ranks)
        return sdp_err(-EINVAL, "NCCL reduction of %d ranks, set up for %d", nin + 1, nccl_ranks);
    b[0] = (struct sdp_cl_buf){ out, STARPU_RW };
    for (int r = 0; r < nin; r++)
        b[r + 1] = (struct sdp_cl_buf){ in[r], STARPU_R };
    oc.on_rank = 0; /* a CPU worker drives every rank */
    a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = (int)sdp_rt_tensor_nelems(out);
    a->key.d[1] = nin + 1;
    return sdp_cl_submit(&sdp_cl_grad_reduce_nccl, &oc, a, sizeof(*a),
                         (double)sdp_rt_tensor_nelems(out) * nin, b, nin + 1);
}

int sdp_task_param_bcast_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *const *replicas,
                              int nranks, int root)
{
    struct sdp_cl_buf b[SDP_MAX_RANKS];
    struct sdp_bcast_nccl_args *a;
    struct sdp_task_opts oc = *o;
    size_t nbytes =
        sdp_rt_tensor_nelems(replicas[0]) * sdp_dtype_size(sdp_rt_tensor_dtype(replicas[0]));
    if (nranks != nccl_ranks || root < 0 || root >= nranks)
        return sdp_err(-EINVAL, "NCCL broadcast over %d ranks from %d, set up for %d", nranks, root,
                       nccl_ranks);
    for (int r = 0; r < nranks; r++)
        b[r] = (struct sdp_cl_buf){ replicas[r], r == root ? STARPU_R : STARPU_W };
    oc.on_rank = 0;
    a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = (int)(nbytes & 0x7fffffff);
    a->key.d[1] = (int)(nbytes >> 31);
    a->key.d[2] = nranks;
    a->key.d[3] = root;
    return sdp_cl_submit(&sdp_cl_param_bcast_nccl, &oc, a, sizeof(*a),
                         (double)nbytes * (nranks - 1), b, nranks);
}

void sdp_tasks_nccl_shutdown(void)
{
    for (int r = 0; r < nccl_ranks; r++) {
        ncclCommDestroy(comms[r]);
        cudaSetDevice(devs[r]);
        cudaStreamDestroy(streams[r]);
    }
    nccl_ranks = 0;
    sdp_cl_grad_reduce_nccl.dyn_nodes = NULL;
    sdp_cl_param_bcast_nccl.dyn_nodes = NULL;
    free(nodes);
    nodes = NULL;
}

#else /* no NCCL in this build */

int sdp_tasks_use_nccl(int nranks, const int *workerids)
{
    (void)nranks;
    (void)workerids;
    sdp_err(-ENODEV, "this build has no NCCL (configure found no CUDA toolkit with nccl.h)");
    sdp_hint("use the StarPU collectives (train.collectives: starpu), or rebuild with NCCL");
    return -ENODEV;
}

int sdp_tasks_nccl_ranks(void)
{
    return 0;
}

int sdp_task_grad_reduce_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                              sdp_rt_tensor_t *const *in, int nin)
{
    (void)o;
    (void)out;
    (void)in;
    return sdp_err(-ENODEV, "NCCL reduction of %d ranks: this build has no NCCL", nin + 1);
}

int sdp_task_param_bcast_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *const *replicas,
                              int nranks, int root)
{
    (void)o;
    (void)replicas;
    (void)root;
    return sdp_err(-ENODEV, "NCCL broadcast over %d ranks: this build has no NCCL", nranks);
}

void sdp_tasks_nccl_shutdown(void)
{
}

#endif
