/* SPDX-License-Identifier: MIT */
/* The table of ops (codelets/ops.c), for the setup of codelets/tasks.c and the registry of
 * codelets/cl_common.c; and the NCCL plumbing of codelets/nccl.c. */
#ifndef SDP_CODELETS_INTERNAL_H
#define SDP_CODELETS_INTERNAL_H

#include <starpu.h>

#include "codelets/sdp_tasks.h"
#include "runtime/trace.h"

/* Where the setup places an op's tasks. */
enum sdp_op_place {
    SDP_PLACE_ANY,       /* as the codelet is defined (the optimizer ops stay on the CPUs) */
    SDP_PLACE_COMPUTE,   /* on the GPUs with sdp_tasks_place_compute(1), else anywhere */
    SDP_PLACE_NORMS,     /* where sdp_tasks_place_norms() puts the norms (the bf16 return packs
                            where the norms read) */
    SDP_PLACE_NORMS_GPU, /* there with SDP_NORMS_GPU, else anywhere (with several ranks the
                            graph pins it to rank 0's worker) */
    SDP_PLACE_FIXED      /* always where it is defined: sdp_tasks_restrict() leaves it alone */
};

/* One op: its codelet, the trace lane of its tasks, its placement. */
struct sdp_op {
    struct starpu_codelet *cl;
    enum sdp_trace_lane lane;
    enum sdp_op_place place;
};

extern const struct sdp_op sdp_ops[];
extern const int sdp_nops;

/** The lane of a codelet's tasks (SDP_LANE_GPU_COMPUTE for one not in the table). */
enum sdp_trace_lane sdp_op_lane(const struct starpu_codelet *cl);

/* codelets/nccl.c: communicators and streams of sdp_tasks_use_nccl(), released */
void sdp_tasks_nccl_shutdown(void);
/* The NCCL reduction itself (sdp_task_grad_reduce() calls it when NCCL is set up). */
int sdp_task_grad_reduce_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                              sdp_rt_tensor_t *const *in, int nin);

#endif
