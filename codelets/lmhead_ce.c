/* SPDX-License-Identifier: MIT */
/* lmhead_ce: the LM head fused with cross-entropy, forward and backward in one task, processed in
 * blocks (tokens; on CPUs also the vocabulary) so that (N, V) logits never exist whole.  Kernel:
 * codelets/cpu/lmhead_ce.c. Tests: tests/kernels/test_kernels_lmhead_ce.c, tests/e2e. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cl_common.h"
#include "base/env.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "models/sdp_models.h"
#ifdef SDP_HAVE_CUDA
#include <starpu_cublasLt.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_lmhead_ce_args {
    struct sdp_shape_key key; /* N, C, V, frozen (1: no gg buffer, no dw; 0 keeps the footprints
                                 of the runs before LoRA) */
    size_t w_off, g_off;
    float scale;
};

/* Threads of a CPU head task: SDP_LMHEAD_THREADS if set (>= 1), else as many as there are CPU
 * workers in a run without CUDA workers (1 with them: the GPUs run the head).  The head of one
 * micro-batch is the step's longest task and the next one waits on its gradient, so it takes the
 * cores that would otherwise idle; the result does not depend on the count.  Read once. */
static int cpu_threads(void)
{
    static int n; /* 0: not read yet */
    int t = __atomic_load_n(&n, __ATOMIC_RELAXED);
    if (!t) {
        long e = sdp_env_long("SDP_LMHEAD_THREADS", 0);
        t = e >= 1                               ? (int)(e < 64 ? e : 64)
            : starpu_cuda_worker_get_count() > 0 ? 1
                                                 : (int)starpu_cpu_worker_get_count();
        t = t < 1 ? 1 : t;
        __atomic_store_n(&n, t, __ATOMIC_RELAXED);
    }
    return t;
}

/* starpu_pause() and starpu_resume() of the head tasks, counted under a lock: starpu_pause's
 * increment of StarPU's pause depth is not atomic, and two heads (two ranks) may run at once.
 * The first head in pauses the workers, the last one out resumes them. */
static void pause_others(int on)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int heads;
    pthread_mutex_lock(&lock);
    if (on && heads++ == 0)
        starpu_pause();
    else if (!on && --heads == 0)
        starpu_resume();
    pthread_mutex_unlock(&lock);
}

/* buffers: loss (2) f64 W, dh (N, C) act W, [gg f32 RW], h (N, C) act R, wg R, targets (N) i32 R
 * (without gg, h is buffer 2) */
static void lmhead_ce_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_lmhead_ce_args *a = cl_arg;
    int N = a->key.d[0], C = a->key.d[1], V = a->key.d[2], g = !a->key.d[3], ih = g ? 3 : 2;
    float *dw = g ? SDP_VECF(buffers[2]) + a->g_off : NULL;
    struct sdp_lmhead_blocks b = sdp_cpu_lmhead_blocks(N, C, V, cpu_threads());
    double *loss = (double *)STARPU_VECTOR_GET_PTR(buffers[0]);
    const float *w = sdp_cl_f32_view(buffers[ih + 1], a->w_off, (size_t)V * C, 0);
    void *scratch = sdp_cl_scratch(1, sdp_cpu_lmhead_ce_scratch(C, &b));
    float *dh = sdp_cl_out(buffers[1], 2);
    int nvalid = 0;
    /* StarPU's idle workers poll without sleeping (non-blocking drivers): paused, they sleep once
     * their current task is done and leave their cores to the head's helper threads */
    if (b.threads > 1)
        pause_others(1);
    sdp_cpu_lmhead_ce(&loss[0], &nvalid, dh, dw, sdp_cl_in(buffers[ih], 3), w,
                      SDP_VEC(buffers[ih + 2]), N, C, V, a->scale, &b, scratch);
    if (b.threads > 1)
        pause_others(0);
    sdp_cl_out_done(buffers[1], dh);
    loss[1] = nvalid;
}

#ifdef SDP_HAVE_CUDA
/* GPU blocks: 1 GiB of logits per block keeps the GEMMs large at production vocabularies; a
 * quarter of that under a GPU memory limit below 20 GiB (STARPU_LIMIT_CUDA_MEM, in MiB, which
 * gpu_memory_gib sets): the block's logits live in a workspace that the limit counts but StarPU
 * cannot evict, and a large one stalls StarPU's reclaim at the loss, a smaller one slows the
 * GEMMs (bench/results/2026-12-01-h200-fetch-gate.md).  SDP_LMHEAD_BLOCK_MIB sets another size (at
 * least 1 MiB).  The size, the rows and the workspace come from models/workspace.c, which the
 * plan counts too (graph/cost.c).  Read once. */
static size_t cuda_block_bytes(void)
{
    static size_t bytes; /* one value, whichever GPU's worker reads the variable first */
    size_t b = __atomic_load_n(&bytes, __ATOMIC_RELAXED);
    if (!b) {
        long mib = sdp_env_long("SDP_LMHEAD_BLOCK_MIB", 0);
        long limit_mib = sdp_env_long("STARPU_LIMIT_CUDA_MEM", 0);
        b = (size_t)sdp_model_lmhead_block_bytes(limit_mib > 0 ? (unsigned long long)limit_mib << 20
                                                               : 0,
                                                 mib >= 1 ? (unsigned long long)mib << 20 : 0);
        __atomic_store_n(&bytes, b, __ATOMIC_RELAXED);
    }
    return b;
}

/* The logits' dtype for weights of dtype dt: bf16 for bf16 weights (as a bf16 model's logits
 * are) unless SDP_LMHEAD_LOGITS=f32; always f32 for f32 weights.  Read once. */
static int cuda_logits_dt(int dt)
{
    static int asked; /* 0: not read yet, then SDP_CUDA_F32 or SDP_CUDA_BF16 + 1 */
    int v = __atomic_load_n(&asked, __ATOMIC_RELAXED);
    if (!v) {
        const char *e = sdp_env("SDP_LMHEAD_LOGITS");
        if (e && *e && strcmp(e, "f32") && strcmp(e, "bf16"))
            SDP_WARN("SDP_LMHEAD_LOGITS=%s is neither bf16 nor f32; using bf16", e);
        v = 1 + (e && !strcmp(e, "f32") ? SDP_CUDA_F32 : SDP_CUDA_BF16);
        __atomic_store_n(&asked, v, __ATOMIC_RELAXED);
    }
    return dt == SDP_CUDA_BF16 ? v - 1 : SDP_CUDA_F32;
}

static void lmhead_ce_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_lmhead_ce_args *a = cl_arg;
    int N = a->key.d[0], C = a->key.d[1], V = a->key.d[2], dt = SDP_CL_DT(buffers[1]);
    int g = !a->key.d[3], ih = g ? 3 : 2; /* without gg (a frozen head), h is buffer 2 */
    int zdt = cuda_logits_dt(dt);
    int zes = zdt == SDP_CUDA_BF16 ? 2 : 4;
    int rows = sdp_model_lmhead_block_rows(N, V, cuda_block_bytes(), zes);
    size_t es = STARPU_VECTOR_GET_ELEMSIZE(buffers[ih + 1]), ltb,
           wsb = (size_t)sdp_model_lmhead_ws_bytes(N, V, rows, zes);
    void *lt_ws = sdp_cl_cublaslt_ws(&ltb);
    sdp_cuda_lmhead_ce(starpu_cublasLt_get_local_handle(),
                       (double *)STARPU_VECTOR_GET_PTR(buffers[0]), SDP_VEC(buffers[1]),
                       g ? SDP_VECF(buffers[2]) + a->g_off : NULL, SDP_VEC(buffers[ih]),
                       (const char *)SDP_VEC(buffers[ih + 1]) + a->w_off * es,
                       SDP_VEC(buffers[ih + 2]), N, C, V, a->scale, rows, dt, zdt,
                       sdp_cl_cuda_ws(0, wsb), wsb, lt_ws, ltb, starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_lmhead_ce = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_lmhead_ce_v2",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_lmhead_ce = {
    .name = "lmhead_ce",
    .cpu_funcs = { lmhead_ce_cpu },
    .cpu_funcs_name = { "lmhead_ce_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(lmhead_ce_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_lmhead_ce,
};

int sdp_task_lmhead_ce(const struct sdp_task_opts *o, sdp_rt_tensor_t *loss, sdp_rt_tensor_t *dh,
                       sdp_rt_tensor_t *gg, size_t g_off, sdp_rt_tensor_t *h, sdp_rt_tensor_t *wg,
                       size_t w_off, sdp_rt_tensor_t *targets, int N, int C, int V, float scale)
{
    struct sdp_lmhead_ce_args *a = sdp_cl_args_alloc(sizeof(*a));
    struct sdp_cl_buf b[6] = { { loss, STARPU_W }, { dh, STARPU_W } };
    int n = 2;
    if (gg)
        b[n++] = (struct sdp_cl_buf){ gg, STARPU_RW };
    b[n++] = (struct sdp_cl_buf){ h, STARPU_R };
    b[n++] = (struct sdp_cl_buf){ wg, STARPU_R };
    b[n++] = (struct sdp_cl_buf){ targets, STARPU_R };
    a->key.d[0] = N;
    a->key.d[1] = C;
    a->key.d[2] = V;
    a->key.d[3] = gg == NULL;
    a->w_off = w_off;
    a->g_off = g_off;
    a->scale = scale;
    return sdp_cl_submit(&sdp_cl_lmhead_ce, o, a, sizeof(*a), (gg ? 6.0 : 4.0) * N * (double)C * V,
                         b, n);
}
