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

/* One op: its codelet and the codelet's name, the trace lane of its tasks, its placement, and its
 * traits, by which tools/check_invariants.py knows what the op does (space-separated words, ""
 * for none):
 *   stage_writer   writes a stage when the working copy is off the host (cast, updates)
 *   put            copies a stage into the working copy off the host
 *   unstaged       never held by the staging bound (a put, a fetch, a zeroing)
 *   no_params      reads no parameters
 *   rows_of_tokens writes only the embedding's rows of the step's tokens
 *   early, late    belongs to the tied embedding's early or late update
 *   lookup         the embedding lookup, which reads only its tokens' rows */
struct sdp_op {
    struct starpu_codelet *cl;
    const char *name; /* cl->name */
    enum sdp_trace_lane lane;
    enum sdp_op_place place;
    const char *traits;
};

extern const struct sdp_op sdp_ops[];
extern const int sdp_nops;

/* Simulation builds (codelets/sim.c): every op's perfmodel becomes the simulation's cost model. */
void sdp_cl_sim_models(void);

/** The row of a codelet, or NULL for one not in the table. */
const struct sdp_op *sdp_op_of(const struct starpu_codelet *cl);

/* codelets/nccl.c: communicators and streams of sdp_tasks_use_nccl(), released; the same of
 * sdp_tasks_use_node_nccl() (codelets/node_nccl.c) */
void sdp_tasks_nccl_shutdown(void);
void sdp_tasks_node_nccl_shutdown(void);
/* The NCCL reduction itself (sdp_task_grad_reduce() calls it when NCCL is set up). */
int sdp_task_grad_reduce_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                              sdp_rt_tensor_t *const *in, int nin);

#endif
