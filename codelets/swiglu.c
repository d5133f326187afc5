/* SPDX-License-Identifier: MIT */
/* swiglu_fwd / swiglu_bwd: silu(gate) * up on the fused (N, 2I) gate|up projection.
 * Kernels: codelets/cpu/swiglu_ref.c.  Tests: tests/kernels/test_kernels_swiglu.c, tests/e2e. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

struct sdp_swiglu_args {
    struct sdp_shape_key key; /* N, I */
};

/* buffers: out (N, I) W, gu (N, 2I) R */
static void swiglu_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_swiglu_args *a = cl_arg;
    sdp_cpu_swiglu_fwd_ref(SDP_VECF(buffers[0]), SDP_VECF(buffers[1]), a->key.d[0], a->key.d[1]);
}

/* buffers: dgu (N, 2I) W, dout (N, I) R, gu (N, 2I) R */
static void swiglu_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_swiglu_args *a = cl_arg;
    sdp_cpu_swiglu_bwd_ref(SDP_VECF(buffers[0]), SDP_VECF(buffers[1]), SDP_VECF(buffers[2]),
                           a->key.d[0], a->key.d[1]);
}

static struct starpu_perfmodel sdp_pm_swiglu_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_swiglu_fwd_v1",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_swiglu_bwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_swiglu_bwd_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_swiglu_fwd = {
    .name = "swiglu_fwd",
    .cpu_funcs = { swiglu_fwd_cpu },
    .cpu_funcs_name = { "swiglu_fwd_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_swiglu_fwd,
};
struct starpu_codelet sdp_cl_swiglu_bwd = {
    .name = "swiglu_bwd",
    .cpu_funcs = { swiglu_bwd_cpu },
    .cpu_funcs_name = { "swiglu_bwd_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_swiglu_bwd,
};

static struct sdp_swiglu_args *sw_args(int N, int I)
{
    struct sdp_swiglu_args *a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = N;
    a->key.d[1] = I;
    return a;
}

int sdp_task_swiglu_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *gu,
                        int N, int I)
{
    struct sdp_cl_buf b[] = { { out, STARPU_W }, { gu, STARPU_R } };
    return sdp_cl_submit(&sdp_cl_swiglu_fwd, o, sw_args(N, I), sizeof(struct sdp_swiglu_args),
                         5.0 * N * I, b, 2);
}

int sdp_task_swiglu_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dgu, sdp_rt_tensor_t *dout,
                        sdp_rt_tensor_t *gu, int N, int I)
{
    struct sdp_cl_buf b[] = { { dgu, STARPU_W }, { dout, STARPU_R }, { gu, STARPU_R } };
    return sdp_cl_submit(&sdp_cl_swiglu_bwd, o, sw_args(N, I), sizeof(struct sdp_swiglu_args),
                         10.0 * N * I, b, 3);
}
