/* SPDX-License-Identifier: MIT */
/* The table of ops: one row per codelet, the only list of them in the tree.  From it come the
 * codelets sdp_tasks_init() checks, sdp_tasks_restrict() and sdp_cl_dry_run() act on, those
 * sdp_tasks_place_compute() and sdp_tasks_place_norms() place, and the trace lane of each task
 * (which the events log carries, and tools/lane_util.py and tools/check_invariants.py read).
 *
 * Adding an op takes:
 *   1. codelets/<op>.c: `struct starpu_codelet sdp_cl_<op>` (its name is the op's name in the
 *      trace), its perfmodel and sdp_task_<op>() (declared in codelets/sdp_tasks.h), listed in
 *      codelets/local.mk;
 *   2. its kernels in codelets/cpu/ and codelets/cuda/, with tests in tests/kernels/;
 *   3. one row below: the codelet's variable (without sdp_cl_), its lane, its placement. */
#include "config.h"

#include "codelets/codelets_internal.h"

/* X(var, lane, place): lane without SDP_LANE_, place without SDP_PLACE_ (codelets_internal.h). */
#define SDP_OPS(X)                                                                                 \
    X(cast, PARAM_H2D, ANY)                                                                        \
    X(param_copy, PARAM_H2D, ANY)                                                                  \
    X(param_fetch, PARAM_H2D, COMPUTE)                                                             \
    X(param_put, PARAM_H2D, COMPUTE)                                                               \
    X(param_put_rows, PARAM_H2D, COMPUTE)                                                          \
    X(param_put_early, PARAM_H2D, COMPUTE)                                                         \
    X(act_fetch, ACT_OFFLOAD, COMPUTE)                                                             \
    X(embedding_fwd, GPU_COMPUTE, COMPUTE)                                                         \
    X(embedding_fwd_host, GPU_COMPUTE, ANY)                                                        \
    X(embedding_bwd, GPU_COMPUTE, COMPUTE)                                                         \
    X(matmul_fwd, GPU_COMPUTE, COMPUTE)                                                            \
    X(matmul_bwd_data, GPU_COMPUTE, COMPUTE)                                                       \
    X(matmul_bwd_weight, GPU_COMPUTE, COMPUTE)                                                     \
    X(rmsnorm_fwd, GPU_COMPUTE, COMPUTE)                                                           \
    X(rmsnorm_bwd, GPU_COMPUTE, COMPUTE)                                                           \
    X(qknorm_rope_fwd, GPU_COMPUTE, COMPUTE)                                                       \
    X(qknorm_rope_bwd, GPU_COMPUTE, COMPUTE)                                                       \
    X(attention_fwd, GPU_COMPUTE, COMPUTE)                                                         \
    X(attention_bwd, GPU_COMPUTE, COMPUTE)                                                         \
    X(swiglu_fwd, GPU_COMPUTE, COMPUTE)                                                            \
    X(swiglu_bwd, GPU_COMPUTE, COMPUTE)                                                            \
    X(lmhead_ce, GPU_COMPUTE, COMPUTE)                                                             \
    X(zero, GPU_COMPUTE, COMPUTE)                                                                  \
    X(sumsq, GRAD_REDUCE, NORMS)                                                                   \
    X(grad_norm, GRAD_REDUCE, ANY)                                                                 \
    X(grad_reduce, GRAD_REDUCE, ANY)                                                               \
    X(grad_pack, GRAD_REDUCE, NORMS)                                                               \
    X(grad_pack_early, GRAD_REDUCE, NORMS)                                                         \
    X(grad_pack_mlp, GRAD_REDUCE, NORMS)                                                           \
    X(grad_pack_rows, GRAD_REDUCE, NORMS)                                                          \
    X(grad_sumsq, GRAD_REDUCE, NORMS_GPU)                                                          \
    X(adamw, CPU_ADAMW, ANY)                                                                       \
    X(adamw_early, CPU_ADAMW, ANY)                                                                 \
    X(adamw_late, CPU_ADAMW, ANY)                                                                  \
    X(stage_put, CPU_ADAMW, ANY)

/* CUDA-only ops: the update of a chunk on the GPU (named adamw: the trace moves it to the GPU's
 * compute lane), and the NCCL collectives, driven from a CPU worker (never restricted). */
#ifdef SDP_HAVE_CUDA
#define SDP_OPS_CUDA(X) X(adamw_gpu, CPU_ADAMW, ANY)
#else
#define SDP_OPS_CUDA(X)
#endif
#if defined(SDP_HAVE_CUDA) && defined(SDP_HAVE_NCCL)
#define SDP_OPS_NCCL(X)                                                                            \
    X(grad_reduce_nccl, GRAD_REDUCE, FIXED)                                                        \
    X(param_bcast_nccl, PARAM_H2D, FIXED)
#else
#define SDP_OPS_NCCL(X)
#endif

#define OP_EXTERN(var, lane, place) extern struct starpu_codelet sdp_cl_##var;
#define OP_ROW(var, lane, place)    { &sdp_cl_##var, SDP_LANE_##lane, SDP_PLACE_##place },

SDP_OPS(OP_EXTERN)
SDP_OPS_CUDA(OP_EXTERN)
SDP_OPS_NCCL(OP_EXTERN)

const struct sdp_op sdp_ops[] = { SDP_OPS(OP_ROW) SDP_OPS_CUDA(OP_ROW) SDP_OPS_NCCL(OP_ROW) };
const int sdp_nops = (int)(sizeof(sdp_ops) / sizeof(sdp_ops[0]));

enum sdp_trace_lane sdp_op_lane(const struct starpu_codelet *cl)
{
    for (int i = 0; i < sdp_nops; i++)
        if (sdp_ops[i].cl == cl)
            return sdp_ops[i].lane;
    return SDP_LANE_GPU_COMPUTE;
}
