/* SPDX-License-Identifier: MIT */
/* The codelets in a simulation build (StarPU built with SimGrid; docs/simulation.md): StarPU runs
 * the task graph and the policy as in a real run but executes no codelet and moves no byte; it
 * advances simulated time by each task's expected length and each transfer's time over the
 * described buses.  Here the expected length: one cost function for every codelet of sdp_ops[]
 * (STARPU_PER_ARCH), from the rates of a calibrated machine (struct sdp_sim_rates, the step-time
 * model's figures): the matmuls, attention and the LM head by their FLOPs (task->flops, as
 * sdp_cl_submit sets it) at the compute rates, the other compute ops by the bytes of their
 * buffers at the element-wise rate, AdamW and the cast by their bytes at one host thread's rate,
 * the fetches as bare tasks (their transfers are StarPU's, simulated on the buses), the transfer
 * tasks (param_chunk, grad_chunk: a CPU worker's copy between the host and a GPU, no transfer of
 * StarPU's) by their chunk's bytes at the PCIe rates, plus a launch or task overhead.  The CUDA
 * implementations are sdp_cl_sim_cuda, which StarPU never calls. */
#include "config.h"

#include <string.h>

#include "base/sdp_log.h"
#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/sdp_tasks.h"

enum sim_class {
    SIM_GEMM,
    SIM_ATTN,
    SIM_HEAD,
    SIM_ELEM,
    SIM_HOST_ADAMW,
    SIM_HOST_CAST,
    SIM_BARE,
    SIM_H2D, /* param_chunk: a host chunk into the compute copy */
    SIM_D2H  /* grad_chunk: a range of the gradient into a host chunk */
};

static struct sdp_sim_rates rates;

void sdp_cl_sim_cuda(void *buffers[], void *cl_arg)
{
    (void)buffers, (void)cl_arg;
    SDP_ASSERT(0, "a simulated CUDA implementation ran: StarPU executes no codelet in simulation");
}

static enum sim_class class_of(const char *name)
{
    static const char *const gemm[] = { "matmul_fwd", "matmul_bwd_data", "matmul_bwd_weight",
                                        "lora_fwd", "lora_bwd" };
    static const char *const bare[] = { "param_fetch", "act_fetch" };
    for (size_t i = 0; i < sizeof(gemm) / sizeof(gemm[0]); i++)
        if (!strcmp(name, gemm[i]))
            return SIM_GEMM;
    for (size_t i = 0; i < sizeof(bare) / sizeof(bare[0]); i++)
        if (!strcmp(name, bare[i]))
            return SIM_BARE;
    if (!strcmp(name, "param_chunk"))
        return SIM_H2D;
    if (!strcmp(name, "grad_chunk"))
        return SIM_D2H;
    if (!strncmp(name, "attention_", 10))
        return SIM_ATTN;
    if (!strcmp(name, "lmhead_ce"))
        return SIM_HEAD;
    if (!strncmp(name, "adamw", 5))
        return SIM_HOST_ADAMW;
    if (!strcmp(name, "cast"))
        return SIM_HOST_CAST;
    return SIM_ELEM;
}

static double task_bytes(struct starpu_task *task)
{
    double b = 0.0;
    for (unsigned i = 0; i < STARPU_TASK_GET_NBUFFERS(task); i++)
        b += (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
    return b;
}

/* the bytes a chunk copy moves: its smaller buffer (the chunk; the other is the whole vector) */
static double chunk_bytes(struct starpu_task *task)
{
    double b0 = (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, 0));
    double b1 = (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, 1));
    return b0 < b1 ? b0 : b1;
}

/* whether the codelet puts buffer i of task on a GPU (the transfer tasks name their nodes) */
static int on_gpu(struct starpu_task *task, int i)
{
    int node = task->cl->specific_nodes ? STARPU_CODELET_GET_NODE(task->cl, i) : -1;
    return node >= 0 && starpu_node_get_kind((unsigned)node) == STARPU_CUDA_RAM;
}

static double over(double work, double rate)
{
    return rate > 0.0 ? work / rate : 0.0;
}

/* microseconds of task on a worker of arch */
static double sim_cost(struct starpu_task *task, struct starpu_perfmodel_arch *arch, unsigned nimpl)
{
    const int gpu = arch->devices[0].type == STARPU_CUDA_WORKER;
    const struct sdp_sim_device *d = gpu ? &rates.gpu : &rates.cpu;
    double s;
    (void)nimpl;
    switch (class_of(task->cl->name)) {
    case SIM_GEMM:
        s = over(task->flops, d->gemm_flops);
        break;
    case SIM_ATTN:
        s = over(task->flops, d->attn_flops);
        break;
    case SIM_HEAD:
        s = over(task->flops, d->head_flops > 0.0 ? d->head_flops : d->gemm_flops);
        break;
    case SIM_HOST_ADAMW:
        s = over(task_bytes(task), gpu ? d->elem_bps : rates.adamw_core_bps);
        break;
    case SIM_HOST_CAST:
        s = over(task_bytes(task), gpu ? d->elem_bps : rates.cast_core_bps);
        break;
    case SIM_BARE:
        s = 0.0;
        break;
    case SIM_H2D: /* a CPU worker's copy into the compute copy, on a GPU or the host */
        s = over(chunk_bytes(task), on_gpu(task, 0) ? rates.h2d_bps : d->elem_bps);
        break;
    case SIM_D2H: /* a CPU worker's copy out of the gradient, on a GPU or the host */
        s = over(chunk_bytes(task), on_gpu(task, 1) ? rates.d2h_bps : d->elem_bps);
        break;
    default:
        s = over(task_bytes(task), d->elem_bps);
        break;
    }
    return 1e6 * (s + d->launch_s);
}

void sdp_tasks_sim_rates(const struct sdp_sim_rates *r)
{
    rates = *r;
}

/* the model of the codelets that have none in a real run (the fetches) */
static struct starpu_perfmodel bare_model = {
    .type = STARPU_PER_ARCH,
    .symbol = "sdp_sim_bare",
    .arch_cost_function = sim_cost,
};

void sdp_cl_sim_models(void)
{
    for (int i = 0; i < sdp_nops; i++) {
        struct starpu_codelet *cl = (struct starpu_codelet *)sdp_ops[i].cl; /* ours, writable */
        if (!cl->model) {
            cl->model = &bare_model;
            continue;
        }
        cl->model->type = STARPU_PER_ARCH;
        cl->model->arch_cost_function = sim_cost;
    }
}
