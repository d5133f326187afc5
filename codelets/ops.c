/* SPDX-License-Identifier: MIT */
/* The table of ops: one row per codelet, the only list of them in the tree.  From it come the
 * codelets sdp_tasks_init() checks, sdp_tasks_restrict() and sdp_cl_dry_run() act on, those
 * sdp_tasks_place_compute() and sdp_tasks_place_norms() place, the trace lane of each task (which
 * the events log carries for tools/lane_util.py and tools/check_invariants.py), and the traits of
 * each op, which tools/check_invariants.py reads from this file.
 *
 * Adding an op takes:
 *   1. codelets/<op>.c: `struct starpu_codelet sdp_cl_<op>` (its name is the op's name in the
 *      trace), its perfmodel and sdp_task_<op>() (declared in codelets/sdp_tasks.h), listed in
 *      codelets/local.mk;
 *   2. its kernels in codelets/cpu/ and codelets/cuda/, with tests in tests/kernels/;
 *   3. one row below: the codelet's variable and name, its lane, its placement, and its traits
 *      (none for a plain compute op). */
#include "config.h"

#include <string.h>

#include "codelets/codelets_internal.h"

/* X(codelet, name, lane, place, traits): the codelet's variable and its .name (the op's name in the
 * trace, checked by sdp_tasks_init), lane without SDP_LANE_, place without SDP_PLACE_, and the
 * traits of struct sdp_op (codelets_internal.h).  tools/check_invariants.py reads the names and
 * traits of these lines: keep one row per line, in this form. */
#define SDP_OPS(X)                                                                                 \
    X(sdp_cl_cast, "cast", PARAM_CAST, ANY, "stage_writer")                                        \
    X(sdp_cl_param_copy, "param_copy", PARAM_H2D, ANY, "")                                         \
    X(sdp_cl_param_fetch, "param_fetch", PARAM_H2D, COMPUTE, "unstaged")                           \
    X(sdp_cl_param_put, "param_put", PARAM_H2D, COMPUTE, "put unstaged")                           \
    X(sdp_cl_param_chunk, "param_chunk", PARAM_H2D, FIXED, "unstaged chunk_fetch")                 \
    X(sdp_cl_param_chunk0, "param_chunk", PARAM_H2D, FIXED, "unstaged chunk_fetch")                \
    X(sdp_cl_param_put_rows, "param_put_rows", PARAM_H2D, COMPUTE, "put unstaged")                 \
    X(sdp_cl_param_put_early, "param_put_early", PARAM_H2D, COMPUTE, "put unstaged early")         \
    X(sdp_cl_act_fetch, "act_fetch", ACT_OFFLOAD, COMPUTE, "no_params")                            \
    X(sdp_cl_embedding_fwd, "embedding_fwd", GPU_COMPUTE, COMPUTE, "lookup")                       \
    X(sdp_cl_embedding_fwd_host, "embedding_fwd", GPU_COMPUTE, ANY, "lookup")                      \
    X(sdp_cl_embedding_bwd, "embedding_bwd", GPU_COMPUTE, COMPUTE, "no_params rows_of_tokens")     \
    X(sdp_cl_cast_act, "cast_act", GPU_COMPUTE, COMPUTE, "no_params")                              \
    X(sdp_cl_matmul_fwd, "matmul_fwd", GPU_COMPUTE, COMPUTE, "")                                   \
    X(sdp_cl_matmul_bwd_data, "matmul_bwd_data", GPU_COMPUTE, COMPUTE, "")                         \
    X(sdp_cl_matmul_bwd_weight, "matmul_bwd_weight", GPU_COMPUTE, COMPUTE, "")                     \
    X(sdp_cl_lora_fwd, "lora_fwd", GPU_COMPUTE, COMPUTE, "")                                       \
    X(sdp_cl_lora_bwd, "lora_bwd", GPU_COMPUTE, COMPUTE, "")                                       \
    X(sdp_cl_rmsnorm_fwd, "rmsnorm_fwd", GPU_COMPUTE, COMPUTE, "")                                 \
    X(sdp_cl_rmsnorm_bwd, "rmsnorm_bwd", GPU_COMPUTE, COMPUTE, "")                                 \
    X(sdp_cl_qknorm_rope_fwd, "qknorm_rope_fwd", GPU_COMPUTE, COMPUTE, "")                         \
    X(sdp_cl_qknorm_rope_bwd, "qknorm_rope_bwd", GPU_COMPUTE, COMPUTE, "")                         \
    X(sdp_cl_attention_fwd, "attention_fwd", GPU_COMPUTE, COMPUTE, "")                             \
    X(sdp_cl_attention_bwd, "attention_bwd", GPU_COMPUTE, COMPUTE, "")                             \
    X(sdp_cl_swiglu_fwd, "swiglu_fwd", GPU_COMPUTE, COMPUTE, "")                                   \
    X(sdp_cl_swiglu_bwd, "swiglu_bwd", GPU_COMPUTE, COMPUTE, "")                                   \
    X(sdp_cl_moe_fwd, "moe_fwd", GPU_COMPUTE, COMPUTE, "")                                         \
    X(sdp_cl_moe_bwd, "moe_bwd", GPU_COMPUTE, COMPUTE, "")                                         \
    X(sdp_cl_moe_fwd_routed, "moe_fwd", GPU_COMPUTE, COMPUTE, "")                                  \
    X(sdp_cl_moe_bwd_routed, "moe_bwd", GPU_COMPUTE, COMPUTE, "")                                  \
    X(sdp_cl_moe_aux, "moe_aux", GPU_COMPUTE, COMPUTE, "no_params")                                \
    X(sdp_cl_lmhead_ce, "lmhead_ce", GPU_COMPUTE, COMPUTE, "")                                     \
    X(sdp_cl_zero, "zero", GPU_COMPUTE, COMPUTE, "unstaged no_params")                             \
    X(sdp_cl_sumsq, "sumsq", GRAD_REDUCE, NORMS, "")                                               \
    X(sdp_cl_grad_norm, "grad_norm", GRAD_REDUCE, ANY, "")                                         \
    X(sdp_cl_grad_reduce, "grad_reduce", GRAD_REDUCE, ANY, "")                                     \
    X(sdp_cl_grad_pack, "grad_pack", GRAD_REDUCE, NORMS, "")                                       \
    X(sdp_cl_grad_pack_early, "grad_pack_early", GRAD_REDUCE, NORMS, "early")                      \
    X(sdp_cl_grad_pack_mlp, "grad_pack_mlp", GRAD_REDUCE, NORMS, "")                               \
    X(sdp_cl_grad_pack_rows, "grad_pack_rows", GRAD_REDUCE, NORMS, "")                             \
    X(sdp_cl_grad_sumsq, "grad_sumsq", GRAD_REDUCE, NORMS_GPU, "")                                 \
    X(sdp_cl_grad_chunk, "grad_chunk", GRAD_D2H, FIXED, "")                                        \
    X(sdp_cl_grad_chunk_routed, "grad_chunk", GRAD_D2H, FIXED, "")                                 \
    X(sdp_cl_adamw, "adamw", CPU_ADAMW, ANY, "stage_writer")                                       \
    X(sdp_cl_adamw_early, "adamw_early", CPU_ADAMW, ANY, "stage_writer early")                     \
    X(sdp_cl_adamw_late, "adamw_late", CPU_ADAMW, ANY, "stage_writer late")                        \
    X(sdp_cl_stage_put, "stage_put", CPU_ADAMW, ANY, "put unstaged")

/* CUDA-only ops: the update of a chunk on the GPU (named adamw: the trace moves it to the GPU's
 * compute lane), and the NCCL collectives, driven from a CPU worker (never restricted). */
#ifdef SDP_HAVE_CUDA
#define SDP_OPS_CUDA(X) X(sdp_cl_adamw_gpu, "adamw", CPU_ADAMW, ANY, "stage_writer")
#else
#define SDP_OPS_CUDA(X)
#endif
#if defined(SDP_HAVE_CUDA) && defined(SDP_HAVE_NCCL)
#define SDP_OPS_NCCL(X)                                                                            \
    X(sdp_cl_grad_reduce_nccl, "grad_reduce_nccl", GRAD_REDUCE, FIXED, "")                         \
    X(sdp_cl_param_bcast_nccl, "param_bcast_nccl", PARAM_H2D, FIXED, "")                           \
    X(sdp_cl_node_send_nccl, "node_send_nccl", GRAD_REDUCE, FIXED, "")                             \
    X(sdp_cl_node_recv_nccl, "node_recv_nccl", GRAD_REDUCE, FIXED, "")
#else
#define SDP_OPS_NCCL(X)
#endif

#define OP_EXTERN(var, name, lane, place, traits) extern struct starpu_codelet var;
#define OP_ROW(var, name, lane, place, traits)                                                     \
    { &var, name, SDP_LANE_##lane, SDP_PLACE_##place, traits },

SDP_OPS(OP_EXTERN)
SDP_OPS_CUDA(OP_EXTERN)
SDP_OPS_NCCL(OP_EXTERN)

const struct sdp_op sdp_ops[] = { SDP_OPS(OP_ROW) SDP_OPS_CUDA(OP_ROW) SDP_OPS_NCCL(OP_ROW) };
const int sdp_nops = (int)(sizeof(sdp_ops) / sizeof(sdp_ops[0]));

const struct sdp_op *sdp_op_of(const struct starpu_codelet *cl)
{
    for (int i = 0; i < sdp_nops; i++)
        if (sdp_ops[i].cl == cl)
            return &sdp_ops[i];
    for (int i = 0; cl && cl->name && i < sdp_nops; i++) /* a rank's copy (sdp_cl_xfer_of) */
        if (!strcmp(sdp_ops[i].name, cl->name))
            return &sdp_ops[i];
    return NULL;
}
