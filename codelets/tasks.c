/* SPDX-License-Identifier: MIT */
/* Setup of the codelet set: registers every codelet for sdp_tasks_restrict() and checks that each
 * can run on at least one worker of this StarPU instance. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "models/sdp_models.h"
#include "base/sdp_log.h"

#ifdef SDP_HAVE_CUDA
#include <starpu_cublasLt.h>

static int cublaslt_started;
#endif

int sdp_tasks_init(void)
{
    struct starpu_codelet *all[] = {
        &sdp_cl_cast,
        &sdp_cl_embedding_fwd,
        &sdp_cl_embedding_fwd_host,
        &sdp_cl_embedding_bwd,
        &sdp_cl_matmul_fwd,
        &sdp_cl_matmul_bwd_data,
        &sdp_cl_matmul_bwd_weight,
        &sdp_cl_rmsnorm_fwd,
        &sdp_cl_rmsnorm_bwd,
        &sdp_cl_qknorm_rope_fwd,
        &sdp_cl_qknorm_rope_bwd,
        &sdp_cl_attention_fwd,
        &sdp_cl_attention_bwd,
        &sdp_cl_swiglu_fwd,
        &sdp_cl_swiglu_bwd,
        &sdp_cl_lmhead_ce,
        &sdp_cl_sumsq,
        &sdp_cl_grad_norm,
        &sdp_cl_zero,
        &sdp_cl_adamw,
        &sdp_cl_adamw_early,
        &sdp_cl_adamw_late,
        &sdp_cl_grad_reduce,
        &sdp_cl_grad_pack,
        &sdp_cl_grad_pack_early,
        &sdp_cl_grad_pack_mlp,
        &sdp_cl_grad_pack_rows,
        &sdp_cl_grad_sumsq,
        &sdp_cl_param_copy,
        &sdp_cl_param_fetch,
        &sdp_cl_act_fetch,
        &sdp_cl_param_put,
        &sdp_cl_stage_put,
        &sdp_cl_param_put_rows,
        &sdp_cl_param_put_early,
#ifdef SDP_HAVE_CUDA
        &sdp_cl_adamw_gpu,
#endif
    };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sdp_cl_register(all[i]);
        if (starpu_cpu_worker_get_count() == 0 && !all[i]->cuda_funcs[0])
            return sdp_err(-ENODEV,
                           "codelet %s has only CPU implementations and StarPU has no CPU worker",
                           all[i]->name);
    }
#ifdef SDP_HAVE_CUDA
    if (starpu_cuda_worker_get_count() > 0) {
        starpu_cublasLt_init();
        cublaslt_started = 1;
    }
#endif
    return 0;
}

int sdp_tasks_place_compute(int on_gpu)
{
    struct starpu_codelet *compute[] = {
        &sdp_cl_embedding_fwd,   &sdp_cl_embedding_bwd,     &sdp_cl_matmul_fwd,
        &sdp_cl_matmul_bwd_data, &sdp_cl_matmul_bwd_weight, &sdp_cl_rmsnorm_fwd,
        &sdp_cl_rmsnorm_bwd,     &sdp_cl_qknorm_rope_fwd,   &sdp_cl_qknorm_rope_bwd,
        &sdp_cl_attention_fwd,   &sdp_cl_attention_bwd,     &sdp_cl_swiglu_fwd,
        &sdp_cl_swiglu_bwd,      &sdp_cl_lmhead_ce,         &sdp_cl_zero,
        &sdp_cl_param_fetch,     &sdp_cl_param_put,         &sdp_cl_param_put_rows,
        &sdp_cl_param_put_early, &sdp_cl_act_fetch,
    };
    if (on_gpu && starpu_cuda_worker_get_count() == 0)
        return sdp_err(-ENODEV, "compute placed on GPUs but StarPU has no CUDA worker");
    for (size_t i = 0; i < sizeof(compute) / sizeof(compute[0]); i++) {
        if (on_gpu && !compute[i]->cuda_funcs[0])
            return sdp_err(-ENODEV, "codelet %s has no CUDA implementation in this build",
                           compute[i]->name);
        compute[i]->where = on_gpu ? STARPU_CUDA : 0;
    }
    return 0;
}

int sdp_tasks_compute_on_gpu(void)
{
    return sdp_cl_matmul_fwd.where == STARPU_CUDA;
}

void sdp_tasks_place_norms(enum sdp_norm_place where)
{
    sdp_cl_sumsq.where = where == SDP_NORMS_HOST ? STARPU_CPU
                         : where == SDP_NORMS_GPU && starpu_cuda_worker_get_count() > 0
                             ? STARPU_CUDA
                             : 0;
    sdp_cl_grad_pack.where = sdp_cl_sumsq.where; /* the bf16 return packs where the norms read */
    sdp_cl_grad_pack_early.where = sdp_cl_sumsq.where;
    sdp_cl_grad_pack_mlp.where = sdp_cl_sumsq.where;
    sdp_cl_grad_pack_rows.where = sdp_cl_sumsq.where;
    /* on the GPUs with one rank; with several, the graph pins it to rank 0's worker */
    sdp_cl_grad_sumsq.where = where == SDP_NORMS_GPU ? sdp_cl_sumsq.where : 0;
}

int sdp_tasks_norms_on_gpu(void)
{
    return sdp_cl_sumsq.where == STARPU_CUDA;
}

int sdp_tasks_check_gpu_model(const struct sdp_model_cfg *m)
{
    int hd = m->head_dim;
    if (hd != 16 && hd != 32 && hd != 64 && hd != 128)
        return sdp_err(-EINVAL,
                       "head_dim %d: the CUDA attention kernels support 16, 32, 64 and 128", hd);
    if (m->num_heads % m->num_kv_heads != 0)
        return sdp_err(-EINVAL, "num_heads %d is not a multiple of num_kv_heads %d", m->num_heads,
                       m->num_kv_heads);
    return 0;
}

void sdp_tasks_shutdown(void)
{
    sdp_tasks_nccl_shutdown();
#ifdef SDP_HAVE_CUDA
    if (cublaslt_started)
        starpu_cublasLt_shutdown();
    cublaslt_started = 0;
#endif
}
