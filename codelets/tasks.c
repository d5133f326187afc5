/* SPDX-License-Identifier: MIT */
/* Setup of the codelet set: registers every codelet for sdp_tasks_restrict() and checks that each
 * can run on at least one worker of this StarPU instance. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "runtime/sdp_log.h"

int sdp_tasks_init(void)
{
    struct starpu_codelet *all[] = {
        &sdp_cl_cast,
        &sdp_cl_embedding_fwd,
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
        &sdp_cl_adamw,
    };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sdp_cl_register(all[i]);
        if (starpu_cpu_worker_get_count() == 0 && !all[i]->cuda_funcs[0])
            return sdp_err(-ENODEV,
                           "codelet %s has only CPU implementations and StarPU has no CPU worker",
                           all[i]->name);
    }
    return 0;
}
