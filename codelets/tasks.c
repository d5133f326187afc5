/* SPDX-License-Identifier: MIT */
/* Setup of the codelet set, from the table of ops (codelets/ops.c): checks that each can run on
 * at least one worker of this StarPU instance, and places the compute and norm ops. */
#include "config.h"

#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "models/sdp_models.h"
#include "base/sdp_log.h"

#ifdef SDP_HAVE_CUDA
#include <starpu_cublas.h>
#include <starpu_cublasLt.h>

static int cublaslt_started; /* cuBLASLt (the dense GEMMs) and cuBLAS (the MoE experts') */
#endif

/* The codelet of the table's first op placed as `place` (the placement's witness). */
static const struct starpu_codelet *first_placed(enum sdp_op_place place)
{
    for (int i = 0; i < sdp_nops; i++)
        if (sdp_ops[i].place == place)
            return sdp_ops[i].cl;
    return NULL;
}

int sdp_tasks_init(void)
{
    sdp_cl_registry_init();
#ifdef SDP_SIMGRID
    sdp_cl_sim_models();
#endif
    for (int i = 0; i < sdp_nops; i++) {
        const struct starpu_codelet *cl = sdp_ops[i].cl;
        SDP_ASSERT(!strcmp(cl->name, sdp_ops[i].name), "codelet %s listed as op %s", cl->name,
                   sdp_ops[i].name);
        if (sdp_ops[i].place != SDP_PLACE_FIXED && starpu_cpu_worker_get_count() == 0 &&
            !cl->cuda_funcs[0])
            return sdp_err(-ENODEV,
                           "codelet %s has only CPU implementations and StarPU has no CPU worker",
                           cl->name);
    }
#ifdef SDP_HAVE_CUDA
    if (starpu_cuda_worker_get_count() > 0) {
        starpu_cublasLt_init();
        starpu_cublas_init();
        cublaslt_started = 1;
    }
#endif
    return 0;
}

/* Where a codelet can run among this run's workers: what "anywhere" means.  Spelled out rather
 * than 0, which StarPU resolves only at a codelet's first submission: a graph built again after
 * a placement would find 0 there, and no worker. */
static uint32_t anywhere(const struct starpu_codelet *cl)
{
    return (cl->cpu_funcs[0] ? STARPU_CPU : 0) |
           (cl->cuda_funcs[0] && starpu_cuda_worker_get_count() > 0 ? STARPU_CUDA : 0);
}

int sdp_tasks_place_compute(int on_gpu)
{
    if (on_gpu && starpu_cuda_worker_get_count() == 0)
        return sdp_err(-ENODEV, "compute placed on GPUs but StarPU has no CUDA worker");
    for (int i = 0; i < sdp_nops; i++) {
        struct starpu_codelet *cl = sdp_ops[i].cl;
        if (sdp_ops[i].place != SDP_PLACE_COMPUTE)
            continue;
        if (on_gpu && !cl->cuda_funcs[0])
            return sdp_err(-ENODEV, "codelet %s has no CUDA implementation in this build",
                           cl->name);
        cl->where = on_gpu ? STARPU_CUDA : anywhere(cl);
    }
    return 0;
}

int sdp_tasks_compute_on_gpu(void)
{
    const struct starpu_codelet *cl = first_placed(SDP_PLACE_COMPUTE);
    return cl && cl->where == STARPU_CUDA;
}

void sdp_tasks_place_norms(enum sdp_norm_place where)
{
    uint32_t norms = where == SDP_NORMS_HOST                                        ? STARPU_CPU
                     : where == SDP_NORMS_GPU && starpu_cuda_worker_get_count() > 0 ? STARPU_CUDA
                                                                                    : 0;
    for (int i = 0; i < sdp_nops; i++) {
        if (sdp_ops[i].place == SDP_PLACE_NORMS)
            sdp_ops[i].cl->where = norms ? norms : anywhere(sdp_ops[i].cl);
        else if (sdp_ops[i].place == SDP_PLACE_NORMS_GPU)
            sdp_ops[i].cl->where = where == SDP_NORMS_GPU ? norms : 0;
    }
}

int sdp_tasks_norms_on_gpu(void)
{
    const struct starpu_codelet *cl = first_placed(SDP_PLACE_NORMS);
    return cl && cl->where == STARPU_CUDA;
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
    sdp_tasks_node_nccl_shutdown();
    sdp_tasks_nccl_shutdown();
#ifdef SDP_HAVE_CUDA
    if (cublaslt_started) {
        starpu_cublas_shutdown();
        starpu_cublasLt_shutdown();
    }
    cublaslt_started = 0;
#endif
}
