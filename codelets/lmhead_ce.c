/* SPDX-License-Identifier: MIT */
/* lmhead_ce: the LM head fused with cross-entropy, forward and backward in one task, processed in
 * blocks of tokens so that (N, V) logits never exist whole.  Kernel: codelets/cpu/lmhead_ce.c.
 * Tests: tests/kernels/test_kernels_lmhead_ce.c, tests/e2e. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

/* Rows per block: about 16 MiB of fp32 logits per block, at least one row. */
#define LMHEAD_BLOCK_FLOATS (4u << 20)

struct sdp_lmhead_ce_args {
    struct sdp_shape_key key; /* N, C, V */
    size_t w_off, g_off;
    float scale;
};

/* buffers: loss (2) f64 W, dh (N, C) W, gg RW, h (N, C) R, wg R, targets (N) i32 R */
static void lmhead_ce_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_lmhead_ce_args *a = cl_arg;
    int N = a->key.d[0], C = a->key.d[1], V = a->key.d[2];
    int rows = (int)(LMHEAD_BLOCK_FLOATS / (unsigned)V);
    double *loss = (double *)STARPU_VECTOR_GET_PTR(buffers[0]);
    const float *w = sdp_cl_f32_view(buffers[4], a->w_off, (size_t)V * C, 0);
    float *scratch;
    int nvalid = 0;
    if (rows < 1)
        rows = 1;
    if (rows > N)
        rows = N;
    scratch = sdp_cl_scratch(1, (size_t)rows * V * sizeof(float));
    sdp_cpu_lmhead_ce(&loss[0], &nvalid, SDP_VECF(buffers[1]), SDP_VECF(buffers[2]) + a->g_off,
                      SDP_VECF(buffers[3]), w, SDP_VEC(buffers[5]), N, C, V, a->scale, scratch,
                      rows);
    loss[1] = nvalid;
}

static struct starpu_perfmodel sdp_pm_lmhead_ce = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_lmhead_ce_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_lmhead_ce = {
    .name = "lmhead_ce",
    .cpu_funcs = { lmhead_ce_cpu },
    .cpu_funcs_name = { "lmhead_ce_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_lmhead_ce,
};

int sdp_task_lmhead_ce(const struct sdp_task_opts *o, sdp_rt_tensor_t *loss, sdp_rt_tensor_t *dh,
                       sdp_rt_tensor_t *gg, size_t g_off, sdp_rt_tensor_t *h, sdp_rt_tensor_t *wg,
                       size_t w_off, sdp_rt_tensor_t *targets, int N, int C, int V, float scale)
{
    struct sdp_lmhead_ce_args *a = sdp_cl_args_alloc(sizeof(*a));
    struct sdp_cl_buf b[] = { { loss, STARPU_W }, { dh, STARPU_W }, { gg, STARPU_RW },
                              { h, STARPU_R },    { wg, STARPU_R }, { targets, STARPU_R } };
    a->key.d[0] = N;
    a->key.d[1] = C;
    a->key.d[2] = V;
    a->w_off = w_off;
    a->g_off = g_off;
    a->scale = scale;
    return sdp_cl_submit(&sdp_cl_lmhead_ce, o, a, sizeof(*a), 6.0 * N * (double)C * V, b, 6);
}
