/* SPDX-License-Identifier: MIT */
/* Small helpers the subcommands share (see cli.h). */
#include "config.h"

#include <stdlib.h>
#include <time.h>
#ifdef SDP_SIMGRID
#include <starpu.h>
#endif

#include "codelets/sdp_tasks.h"
#include "cli/cli.h"
#include "base/sdp_log.h"
#include "models/sdp_lora.h"
#include "models/sdp_models.h"
#include "runtime/init.h"

double sdp_cli_now_s(void)
{
#ifdef SDP_SIMGRID /* the simulated clock */
    return starpu_timing_now() * 1e-6;
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sdp_cli_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int sdp_cli_may_use_gpu(int gpus)
{
#if defined(SDP_HAVE_CUDA) || defined(SDP_SIMGRID) /* simulated GPUs count */
    return gpus != 0;
#else
    (void)gpus;
    return 0;
#endif
}

size_t sdp_cli_chunk_bytes(double mib, const struct sdp_model_cfg *m)
{
    size_t most = 0;
    if (mib > 0)
        return (size_t)(mib * 1048576.0);
    for (int g = 0; g < sdp_model_num_groups(m); g++)
        most = sdp_model_group_nelems(m, g) > most ? sdp_model_group_nelems(m, g) : most;
    return most * sizeof(float);
}

const char *sdp_cli_place_norms(int ranks, int window)
{
    if (sdp_rt_ncuda() > 0 && ranks <= 1) {
        sdp_tasks_place_norms(SDP_NORMS_GPU);
        return "gpu";
    }
    /* several GPU ranks: the reduced gradient goes to the host for AdamW, split into its chunks
     * there; a norm on a GPU would bring its chunk back up */
    if (window > 0 || sdp_rt_ncuda() > 0) {
        sdp_tasks_place_norms(SDP_NORMS_HOST);
        return "host";
    }
    sdp_tasks_place_norms(SDP_NORMS_ANY);
    return "any";
}

int sdp_cli_gpu_update(int requested, const struct sdp_lora_cfg *lora,
                       const struct sdp_model_cfg *m, int ranks, unsigned long long need,
                       unsigned long long limit)
{
    const double gib = 1073741824.0;
    unsigned long long bytes = 0;
    if (requested >= 0)
        return requested;
    if (lora->rank <= 0 || ranks != 1 || sdp_rt_ncuda() == 0 || !sdp_tasks_compute_on_gpu())
        return 0;
    bytes = sdp_lora_elems(lora, m) * 16ull;
    if (limit > 0 && need + bytes > limit) {
        SDP_INFO("LoRA: the adapters' AdamW on the host: their %.2f GiB of state do not fit beside "
                 "the run's %.2f GiB within %.2f GiB of GPU memory",
                 bytes / gib, need / gib, limit / gib);
        return 0;
    }
    SDP_INFO("LoRA: the adapters' AdamW on the GPU (%.2f GiB of masters, moments and gradients "
             "there; train.gpu_update: 0 keeps it on the host)",
             bytes / gib);
    return m->num_layers;
}
