/* SPDX-License-Identifier: MIT */
/* swiglu_fwd / swiglu_bwd: silu(gate) * up on the fused (N, 2I) gate|up projection.
 * Kernels: codelets/cpu/swiglu_ref.c, codelets/cuda/swiglu.cu.
 * Tests: tests/kernels/test_kernels_swiglu.c, tests/kernels/test_cuda_swiglu.c, tests/e2e. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_swiglu_args {
    struct sdp_shape_key key; /* N, I */
};

/* buffers: out (N, I) act W, gu (N, 2I) act R */
static void swiglu_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_swiglu_args *a = cl_arg;
    float *out = sdp_cl_out(buffers[0], 0);
    sdp_cpu_swiglu_fwd_ref(out, sdp_cl_in(buffers[1], 1), a->key.d[0], a->key.d[1]);
    sdp_cl_out_done(buffers[0], out);
}

/* buffers: dgu (N, 2I) act W, dout (N, I) act R, gu (N, 2I) act R */
static void swiglu_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_swiglu_args *a = cl_arg;
    float *dgu = sdp_cl_out(buffers[0], 0);
    sdp_cpu_swiglu_bwd_ref(dgu, sdp_cl_in(buffers[1], 1), sdp_cl_in(buffers[2], 2), a->key.d[0],
                           a->key.d[1]);
    sdp_cl_out_done(buffers[0], dgu);
}

#ifdef SDP_HAVE_CUDA
static void swiglu_fwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_swiglu_args *a = cl_arg;
    sdp_cuda_swiglu_fwd(SDP_VEC(buffers[0]), SDP_VEC(buffers[1]), a->key.d[0], a->key.d[1],
                        SDP_CL_DT(buffers[0]), starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}

static void swiglu_bwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_swiglu_args *a = cl_arg;
    sdp_cuda_swiglu_bwd(SDP_VEC(buffers[0]), SDP_VEC(buffers[1]), SDP_VEC(buffers[2]), a->key.d[0],
                        a->key.d[1], SDP_CL_DT(buffers[0]), starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_swiglu_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_swiglu_fwd_v2",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_swiglu_bwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_swiglu_bwd_v2",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_swiglu_fwd = {
    .name = "swiglu_fwd",
    .cpu_funcs = { swiglu_fwd_cpu },
    .cpu_funcs_name = { "swiglu_fwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(swiglu_fwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_swiglu_fwd,
};
struct starpu_codelet sdp_cl_swiglu_bwd = {
    .name = "swiglu_bwd",
    .cpu_funcs = { swiglu_bwd_cpu },
    .cpu_funcs_name = { "swiglu_bwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(swiglu_bwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
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
