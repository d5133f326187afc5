/* SPDX-License-Identifier: MIT */
/* rmsnorm_fwd / rmsnorm_bwd over rows of length D (input/post-attention/final norms).  The backward
 * adds into the residual gradient in place when asked, so one gradient buffer flows down the
 * layers. Kernels: codelets/cpu/rmsnorm_ref.c, codelets/cuda/rmsnorm.cu. Tests:
 * tests/kernels/test_kernels_rmsnorm.c, tests/kernels/test_cuda_rmsnorm.c, tests/e2e. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_rmsnorm_args {
    struct sdp_shape_key key; /* R, D, accumulate, 1 for an fp32 residual under bf16 (a
                                 footprint of its own; 0 leaves the others' unchanged) */
    size_t w_off, g_off;
    float eps;
};

/* buffers: out (R, D) act W, rstd (R) f32 W, x (R, D) act or f32 (residual_dtype fp32) R, wg R */
static void rmsnorm_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_rmsnorm_args *a = cl_arg;
    int R = a->key.d[0], D = a->key.d[1];
    const float *w = sdp_cl_f32_view(buffers[3], a->w_off, (size_t)D, 0);
    float *out = sdp_cl_out(buffers[0], 1);
    sdp_cpu_rmsnorm_fwd_ref(out, SDP_VECF(buffers[1]), sdp_cl_in(buffers[2], 2), w, R, D, a->eps);
    sdp_cl_out_done(buffers[0], out);
}

/* buffers: dx (R, D) act W|RW, gg f32 RW, dout (R, D) act R, x (R, D) act R, wg R, rstd (R) f32 R;
 * dx and x f32 under bf16 dout with residual_dtype fp32 */
static void rmsnorm_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_rmsnorm_args *a = cl_arg;
    int R = a->key.d[0], D = a->key.d[1], acc = a->key.d[2];
    float *dx = acc ? sdp_cl_inout(buffers[0], 1) : sdp_cl_out(buffers[0], 1);
    const float *w = sdp_cl_f32_view(buffers[4], a->w_off, (size_t)D, 0);
    sdp_cpu_rmsnorm_bwd_ref(dx, SDP_VECF(buffers[1]) + a->g_off, acc ? dx : NULL,
                            sdp_cl_in(buffers[2], 2), sdp_cl_in(buffers[3], 3), w,
                            SDP_VECF(buffers[5]), R, D);
    sdp_cl_out_done(buffers[0], dx);
}

#ifdef SDP_HAVE_CUDA
/* x (and in the backward dx) fp32 under bf16 out (dout): the residual stream in fp32
 * (train.residual_dtype fp32), rmsnorm_res.cu's kernels */
static int res_f32(void *x, void *act)
{
    return STARPU_VECTOR_GET_ELEMSIZE(x) == 4 && STARPU_VECTOR_GET_ELEMSIZE(act) == 2;
}

static void rmsnorm_fwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_rmsnorm_args *a = cl_arg;
    size_t es = STARPU_VECTOR_GET_ELEMSIZE(buffers[3]);
    if (res_f32(buffers[2], buffers[0])) {
        sdp_cuda_rmsnorm_fwd_res(SDP_VEC(buffers[0]), SDP_VECF(buffers[1]), SDP_VECF(buffers[2]),
                                 (const char *)SDP_VEC(buffers[3]) + a->w_off * es, a->key.d[0],
                                 a->key.d[1], a->eps, SDP_CL_DT(buffers[0]),
                                 starpu_cuda_get_local_stream());
        SDP_CUDA_CHECK(cudaGetLastError());
        return;
    }
    sdp_cuda_rmsnorm_fwd(SDP_VEC(buffers[0]), SDP_VECF(buffers[1]), SDP_VEC(buffers[2]),
                         (const char *)SDP_VEC(buffers[3]) + a->w_off * es, a->key.d[0],
                         a->key.d[1], a->eps, SDP_CL_DT(buffers[0]),
                         starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}

static void rmsnorm_bwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_rmsnorm_args *a = cl_arg;
    int R = a->key.d[0], D = a->key.d[1];
    size_t es = STARPU_VECTOR_GET_ELEMSIZE(buffers[4]);
    void *dx = SDP_VEC(buffers[0]);
    if (res_f32(buffers[0], buffers[2])) {
        sdp_cuda_rmsnorm_bwd_res(
            dx, SDP_VECF(buffers[1]) + a->g_off, a->key.d[2] ? dx : NULL, SDP_VEC(buffers[2]),
            SDP_VECF(buffers[3]), (const char *)SDP_VEC(buffers[4]) + a->w_off * es,
            SDP_VECF(buffers[5]), R, D, SDP_CL_DT(buffers[2]),
            sdp_cl_cuda_ws(0, sdp_cuda_rmsnorm_bwd_res_ws(R, D)), starpu_cuda_get_local_stream());
        SDP_CUDA_CHECK(cudaGetLastError());
        return;
    }
    sdp_cuda_rmsnorm_bwd(dx, SDP_VECF(buffers[1]) + a->g_off, a->key.d[2] ? dx : NULL,
                         SDP_VEC(buffers[2]), SDP_VEC(buffers[3]),
                         (const char *)SDP_VEC(buffers[4]) + a->w_off * es, SDP_VECF(buffers[5]), R,
                         D, SDP_CL_DT(buffers[0]), sdp_cl_cuda_ws(0, sdp_cuda_rmsnorm_bwd_ws(R, D)),
                         starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_rmsnorm_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_rmsnorm_fwd_v2",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_rmsnorm_bwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_rmsnorm_bwd_v2",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_rmsnorm_fwd = {
    .name = "rmsnorm_fwd",
    .cpu_funcs = { rmsnorm_fwd_cpu },
    .cpu_funcs_name = { "rmsnorm_fwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(rmsnorm_fwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_rmsnorm_fwd,
};
struct starpu_codelet sdp_cl_rmsnorm_bwd = {
    .name = "rmsnorm_bwd",
    .cpu_funcs = { rmsnorm_bwd_cpu },
    .cpu_funcs_name = { "rmsnorm_bwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(rmsnorm_bwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_rmsnorm_bwd,
};

int sdp_task_rmsnorm_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *rstd,
                         sdp_rt_tensor_t *x, sdp_rt_tensor_t *wg, size_t w_off, int R, int D,
                         float eps)
{
    struct sdp_rmsnorm_args *a = sdp_cl_args_alloc(sizeof(*a));
    struct sdp_cl_buf b[] = {
        { out, STARPU_W }, { rstd, STARPU_W }, { x, STARPU_R }, { wg, STARPU_R }
    };
    a->key.d[0] = R;
    a->key.d[1] = D;
    a->key.d[3] = sdp_rt_tensor_dtype(x) != sdp_rt_tensor_dtype(out);
    a->w_off = w_off;
    a->eps = eps;
    return sdp_cl_submit(&sdp_cl_rmsnorm_fwd, o, a, sizeof(*a), 4.0 * R * D, b, 4);
}

int sdp_task_rmsnorm_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dx, int accumulate,
                         sdp_rt_tensor_t *gg, size_t g_off, sdp_rt_tensor_t *dout,
                         sdp_rt_tensor_t *x, sdp_rt_tensor_t *wg, size_t w_off,
                         sdp_rt_tensor_t *rstd, int R, int D)
{
    struct sdp_rmsnorm_args *a = sdp_cl_args_alloc(sizeof(*a));
    struct sdp_cl_buf b[] = { { dx, accumulate ? STARPU_RW : STARPU_W },
                              { gg, STARPU_RW },
                              { dout, STARPU_R },
                              { x, STARPU_R },
                              { wg, STARPU_R },
                              { rstd, STARPU_R } };
    a->key.d[0] = R;
    a->key.d[1] = D;
    a->key.d[2] = accumulate;
    a->key.d[3] = sdp_rt_tensor_dtype(x) != sdp_rt_tensor_dtype(dout);
    a->w_off = w_off;
    a->g_off = g_off;
    return sdp_cl_submit(&sdp_cl_rmsnorm_bwd, o, a, sizeof(*a), 8.0 * R * D, b, 6);
}
