/* SPDX-License-Identifier: MIT */
/* node_send / node_recv: a tensor between two processes of a run over several nodes
 * (runtime/nodes.h), as StarPU-MPI's detached requests on its handle.  They take their place in
 * the task graph as accesses to the handle: a send reads it once every earlier writer has run, a
 * receive writes it, ordered with the tasks before and after.  Messages are matched by
 * (process, tag); the graph makes every tag unique within a step (graph/nodes.c).
 * Test: tests/e2e/test_e2e_nodes.sh. */
#include "config.h"

#include "base/sdp_log.h"
#include "codelets/cl_common.h"
#ifdef SDP_HAVE_MPI
#include <starpu_mpi.h>
#endif

int sdp_task_node_send(sdp_rt_tensor_t *t, int node, int64_t tag)
{
#ifdef SDP_HAVE_MPI
    int rc = starpu_mpi_isend_detached(sdp_rt_tensor_handle(t), node, (starpu_mpi_tag_t)tag,
                                       MPI_COMM_WORLD, NULL, NULL);
    return rc ? sdp_err(-EIO, "send of %s to node %d (tag %lld) failed (%d)", sdp_rt_tensor_name(t),
                        node, (long long)tag, rc)
              : 0;
#else
    (void)t;
    (void)tag;
    return sdp_err(-ENOTSUP, "a send to node %d: built without StarPU-MPI", node);
#endif
}

int sdp_task_node_recv(sdp_rt_tensor_t *t, int node, int64_t tag)
{
#ifdef SDP_HAVE_MPI
    int rc = starpu_mpi_irecv_detached(sdp_rt_tensor_handle(t), node, (starpu_mpi_tag_t)tag,
                                       MPI_COMM_WORLD, NULL, NULL);
    return rc ? sdp_err(-EIO, "receive of %s from node %d (tag %lld) failed (%d)",
                        sdp_rt_tensor_name(t), node, (long long)tag, rc)
              : 0;
#else
    (void)t;
    (void)tag;
    return sdp_err(-ENOTSUP, "a receive from node %d: built without StarPU-MPI", node);
#endif
}
