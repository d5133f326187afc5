/* SPDX-License-Identifier: MIT */
/* node_send_nccl / node_recv_nccl: the GPU route's gradient between the nodes of a run
 * (graph/nodes.c) through NCCL, GPU to GPU (GPUDirect RDMA where the network has it), instead of
 * StarPU-MPI's requests through host memory (codelets/node_xfer.c).  One communicator spans the
 * nodes' rank-0 GPUs, NCCL rank = node; node 0 draws its unique id and the driver's broadcast
 * (runtime/nodes.h) gives it to the others.  Each transfer is a task on that GPU's CUDA worker:
 * ncclSend or ncclRecv of the vector's bytes on the worker's stream (STARPU_CUDA_ASYNC: StarPU
 * takes the data as ready once the stream has passed it).  NCCL matches a pair's sends and
 * receives in the order they are issued, so every such task also writes one small handle of
 * this process (`order`, W: never read, so never initialised): StarPU then runs them in the order
 * they were submitted, which is the graph's, the same on every node.  The bytes moved are those
 * of the StarPU-MPI path, so the bits are the same.
 * Tests: tests/e2e/test_e2e_nodes_nccl.sh (two GPUs), tests/e2e/test_e2e_nodes.sh (the fallback).
 */
#include "config.h"

#include "base/sdp_log.h"
#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"

#if defined(SDP_HAVE_CUDA) && defined(SDP_HAVE_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

static ncclComm_t comm;
static int comm_nodes; /* 0: not in use */
static int comm_dev;   /* the CUDA device of this node's rank 0 */
static sdp_rt_tensor_t *order;

struct sdp_node_nccl_args {
    struct sdp_shape_key key; /* bytes (low, high 31 bits), peer */
};

static size_t nbytes_of(void *buf)
{
    return (size_t)STARPU_VECTOR_GET_NX(buf) * STARPU_VECTOR_GET_ELEMSIZE(buf);
}

/* buffers: the vector (R), order (W) */
static void node_send_nccl_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_node_nccl_args *a = cl_arg;
    ncclResult_t r = ncclSend(SDP_VEC(buffers[0]), nbytes_of(buffers[0]), ncclChar, a->key.d[2],
                              comm, starpu_cuda_get_local_stream());
    SDP_ASSERT(r == ncclSuccess, "ncclSend of %zu bytes to node %d: %s", nbytes_of(buffers[0]),
               a->key.d[2], ncclGetErrorString(r));
}

/* buffers: the vector (W), order (W), and the tensor it waits for (R, not read) where given */
static void node_recv_nccl_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_node_nccl_args *a = cl_arg;
    ncclResult_t r = ncclRecv(SDP_VEC(buffers[0]), nbytes_of(buffers[0]), ncclChar, a->key.d[2],
                              comm, starpu_cuda_get_local_stream());
    SDP_ASSERT(r == ncclSuccess, "ncclRecv of %zu bytes from node %d: %s", nbytes_of(buffers[0]),
               a->key.d[2], ncclGetErrorString(r));
}

/* Only the worker of the communicator's GPU. */
static int on_comm_gpu(unsigned workerid, struct starpu_task *task, unsigned nimpl)
{
    (void)task;
    (void)nimpl;
    return starpu_worker_get_type((int)workerid) == STARPU_CUDA_WORKER &&
           starpu_worker_get_devid((int)workerid) == comm_dev;
}

static struct starpu_perfmodel sdp_pm_node_send_nccl = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_node_send_nccl_v1",
    .footprint = sdp_cl_footprint,
};

static struct starpu_perfmodel sdp_pm_node_recv_nccl = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_node_recv_nccl_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_node_send_nccl = {
    .name = "node_send_nccl",
    .where = STARPU_CUDA,
    .cuda_funcs = { node_send_nccl_cuda },
    .cuda_flags = { STARPU_CUDA_ASYNC },
    .can_execute = on_comm_gpu,
    .nbuffers = 2,
    .modes = { STARPU_R, STARPU_W },
    .model = &sdp_pm_node_send_nccl,
};

struct starpu_codelet sdp_cl_node_recv_nccl = {
    .name = "node_recv_nccl",
    .where = STARPU_CUDA,
    .cuda_funcs = { node_recv_nccl_cuda },
    .cuda_flags = { STARPU_CUDA_ASYNC },
    .can_execute = on_comm_gpu,
    .nbuffers = STARPU_VARIABLE_NBUFFERS, /* the modes with each task */
    .model = &sdp_pm_node_recv_nccl,
};

/* What node 0 gives the others: whether NCCL gave it an id, and the id. */
struct id_msg {
    int ok;
    ncclUniqueId id;
};

int sdp_tasks_use_node_nccl(int node, int nnodes, int workerid, int (*bcast)(void *buf, size_t n))
{
    struct id_msg m = { 0 };
    ncclResult_t r = ncclSuccess;
    int prev = 0;
    if (comm_nodes)
        return sdp_err(-EINVAL, "NCCL between the nodes is already set up (%d)", comm_nodes);
    if (workerid < 0 || starpu_worker_get_type(workerid) != STARPU_CUDA_WORKER)
        return sdp_err(-ENODEV, "NCCL between the nodes needs rank 0 on a GPU (worker %d)",
                       workerid);
    if (node == 0)
        m.ok = (r = ncclGetUniqueId(&m.id)) == ncclSuccess;
    if (bcast(&m, sizeof(m)))
        return -EIO;
    if (!m.ok)
        return node == 0 ? sdp_err(-EIO, "ncclGetUniqueId failed: %s", ncclGetErrorString(r))
                         : -EIO; /* reported on node 0 */
    comm_dev = starpu_worker_get_devid(workerid);
    SDP_CUDA_CHECK(cudaGetDevice(&prev)); /* this thread's device, as it was */
    SDP_CUDA_CHECK(cudaSetDevice(comm_dev));
    r = ncclCommInitRank(&comm, nnodes, m.id, node);
    SDP_CUDA_CHECK(cudaSetDevice(prev));
    if (r != ncclSuccess) {
        sdp_err(-EIO, "node %d: ncclCommInitRank over %d nodes (GPU %d) failed: %s", node, nnodes,
                comm_dev, ncclGetErrorString(r));
        sdp_hint("NCCL_DEBUG=INFO says why; train.grad_route: cpu sends the gradient through "
                 "StarPU-MPI instead");
        return -EIO;
    }
    if (sdp_rt_tensor_temp(&order, SDP_F32, 1, "node_nccl_order")) {
        ncclCommDestroy(comm);
        return -ENOMEM;
    }
    comm_nodes = nnodes;
    SDP_INFO("NCCL %d.%d.%d: the gradient between the %d nodes, GPU %d to GPU", NCCL_MAJOR,
             NCCL_MINOR, NCCL_PATCH, nnodes, comm_dev);
    return 0;
}

int sdp_tasks_node_nccl(void)
{
    return comm_nodes > 0;
}

static int submit(struct starpu_codelet *cl, const struct sdp_task_opts *o, sdp_rt_tensor_t *t,
                  int node, enum starpu_data_access_mode mode, sdp_rt_tensor_t *wait)
{
    struct sdp_cl_buf b[3] = { { t, mode }, { order, STARPU_W }, { wait, STARPU_R } };
    struct sdp_node_nccl_args *a;
    size_t nbytes = sdp_rt_tensor_nelems(t) * sdp_dtype_size(sdp_rt_tensor_dtype(t));
    if (!comm_nodes || node < 0 || node >= comm_nodes)
        return sdp_err(-EINVAL, "%s of %s with node %d: NCCL between the nodes is set up for %d",
                       cl->name, sdp_rt_tensor_name(t), node, comm_nodes);
    a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = (int)(nbytes & 0x7fffffff);
    a->key.d[1] = (int)(nbytes >> 31);
    a->key.d[2] = node;
    return sdp_cl_submit(cl, o, a, sizeof(*a), 0.0, b, wait ? 3 : 2);
}

int sdp_task_node_send_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *t, int node)
{
    return submit(&sdp_cl_node_send_nccl, o, t, node, STARPU_R, NULL);
}

int sdp_task_node_recv_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *t, int node,
                            sdp_rt_tensor_t *wait)
{
    /* a receive holds the GPU's stream until its message comes: posted once wait is written */
    return submit(&sdp_cl_node_recv_nccl, o, t, node, STARPU_W, wait);
}

void sdp_tasks_node_nccl_shutdown(void)
{
    if (!comm_nodes)
        return;
    starpu_task_wait_for_all(); /* the last transfers before their communicator goes */
    sdp_rt_tensor_release(order);
    order = NULL;
    ncclCommDestroy(comm);
    comm_nodes = 0;
}

#else /* no NCCL in this build: StarPU-MPI carries the GPU route too */

int sdp_tasks_use_node_nccl(int node, int nnodes, int workerid, int (*bcast)(void *buf, size_t n))
{
    (void)node;
    (void)nnodes;
    (void)workerid;
    (void)bcast;
    return -ENODEV; /* not logged: the caller falls back on StarPU-MPI and says so */
}

int sdp_tasks_node_nccl(void)
{
    return 0;
}

int sdp_task_node_send_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *t, int node)
{
    (void)o;
    return sdp_err(-ENODEV, "NCCL send of %s to node %d: this build has no NCCL",
                   sdp_rt_tensor_name(t), node);
}

int sdp_task_node_recv_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *t, int node,
                            sdp_rt_tensor_t *wait)
{
    (void)o;
    (void)wait;
    return sdp_err(-ENODEV, "NCCL receive of %s from node %d: this build has no NCCL",
                   sdp_rt_tensor_name(t), node);
}

void sdp_tasks_node_nccl_shutdown(void)
{
}

#endif
