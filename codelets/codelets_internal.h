/* SPDX-License-Identifier: MIT */
/* The codelet tables of every op, for sdp_tasks_init() and tests that restrict or inspect them. */
#ifndef SDP_CODELETS_INTERNAL_H
#define SDP_CODELETS_INTERNAL_H

#include <starpu.h>

extern struct starpu_codelet sdp_cl_cast;
extern struct starpu_codelet sdp_cl_embedding_fwd, sdp_cl_embedding_fwd_host, sdp_cl_embedding_bwd;
extern struct starpu_codelet sdp_cl_matmul_fwd, sdp_cl_matmul_bwd_data, sdp_cl_matmul_bwd_weight;
extern struct starpu_codelet sdp_cl_rmsnorm_fwd, sdp_cl_rmsnorm_bwd;
extern struct starpu_codelet sdp_cl_qknorm_rope_fwd, sdp_cl_qknorm_rope_bwd;
extern struct starpu_codelet sdp_cl_attention_fwd, sdp_cl_attention_bwd;
extern struct starpu_codelet sdp_cl_swiglu_fwd, sdp_cl_swiglu_bwd;
extern struct starpu_codelet sdp_cl_lmhead_ce;
extern struct starpu_codelet sdp_cl_sumsq, sdp_cl_grad_norm, sdp_cl_adamw, sdp_cl_adamw_early,
    sdp_cl_adamw_late;
#ifdef SDP_HAVE_CUDA
extern struct starpu_codelet sdp_cl_adamw_gpu; /* CUDA only */
#endif
extern struct starpu_codelet sdp_cl_zero;
extern struct starpu_codelet sdp_cl_grad_reduce, sdp_cl_grad_pack, sdp_cl_grad_pack_early,
    sdp_cl_grad_pack_mlp, sdp_cl_grad_sumsq, sdp_cl_param_copy, sdp_cl_param_fetch,
    sdp_cl_param_put, sdp_cl_stage_put, sdp_cl_param_put_rows, sdp_cl_param_put_early,
    sdp_cl_grad_pack_rows, sdp_cl_act_fetch;
/* codelets/nccl.c: communicators and streams of sdp_tasks_use_nccl(), released */
void sdp_tasks_nccl_shutdown(void);
/* The NCCL reduction itself (sdp_task_grad_reduce() calls it when NCCL is set up). */
int sdp_task_grad_reduce_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                              sdp_rt_tensor_t *const *in, int nin);

#endif
