/* SPDX-License-Identifier: MIT */
/* matmul_fwd / matmul_bwd_data / matmul_bwd_weight: the linear layers, y = x . w^T with w (N, K) as
 * stored by Hugging Face (out_features, in_features).  Weights and activations f32 or bf16
 * (converted per task on CPU; tensor cores through cuBLASLt on GPU); fp32 accumulation; weight
 * gradients fp32. Kernels: codelets/cpu/matmul.c, codelets/cuda/matmul.cu. Tests:
 * tests/kernels/test_kernels_matmul.c, tests/kernels/test_cuda_matmul.c, tests/e2e. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#ifdef SDP_HAVE_CUDA
#include <starpu_cublasLt.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_matmul_args {
    struct sdp_shape_key key; /* M, K, N, has_resid, 1 for an fp32 output under bf16 x (a
                                 footprint of its own; 0 leaves the others' unchanged) */
    size_t off;               /* weight (or weight-gradient) offset in its group vector */
};

/* buffers: out (M, N) act W, [resid (M, N) act R], x (M, K) act R, wg R; out and resid f32 under
 * bf16 x with residual_dtype fp32 */
static void matmul_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    int M = a->key.d[0], K = a->key.d[1], N = a->key.d[2], has_resid = a->key.d[3];
    int i = 1;
    const float *resid = has_resid ? sdp_cl_in(buffers[i++], 1) : NULL;
    const float *x = sdp_cl_in(buffers[i++], 2);
    const float *w = sdp_cl_f32_view(buffers[i], a->off, (size_t)N * K, 0);
    float *out = sdp_cl_out(buffers[0], 3);
    sdp_cpu_matmul_fwd(out, resid, x, w, M, K, N);
    sdp_cl_out_done(buffers[0], out);
}

/* buffers: dx (M, K) act W, dout (M, N) act R, wg R */
static void matmul_bwd_data_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    int M = a->key.d[0], K = a->key.d[1], N = a->key.d[2];
    const float *w = sdp_cl_f32_view(buffers[2], a->off, (size_t)N * K, 0);
    float *dx = sdp_cl_out(buffers[0], 3);
    sdp_cpu_matmul_bwd_data(dx, sdp_cl_in(buffers[1], 1), w, M, K, N);
    sdp_cl_out_done(buffers[0], dx);
}

/* buffers: gg f32 RW, dout (M, N) act R, x (M, K) act R */
static void matmul_bwd_weight_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    int M = a->key.d[0], K = a->key.d[1], N = a->key.d[2];
    sdp_cpu_matmul_bwd_weight(SDP_VECF(buffers[0]) + a->off, sdp_cl_in(buffers[1], 1),
                              sdp_cl_in(buffers[2], 2), M, K, N);
}

#ifdef SDP_HAVE_CUDA
static const void *wptr(void *wg, size_t off)
{
    return (const char *)SDP_VEC(wg) + off * STARPU_VECTOR_GET_ELEMSIZE(wg);
}

static void matmul_fwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    int i = 1;
    size_t wsb;
    void *ws = sdp_cl_cublaslt_ws(&wsb);
    const void *resid = a->key.d[3] ? SDP_VEC(buffers[i++]) : NULL;
    const void *x = SDP_VEC(buffers[i++]);
    /* out and resid may be fp32 under bf16 x and w: the fp32 residual stream */
    SDP_ASSERT(!resid || SDP_CL_DT(buffers[1]) == SDP_CL_DT(buffers[0]),
               "matmul_fwd: the residual's dtype is not the output's");
    sdp_cuda_matmul_fwd_res(starpu_cublasLt_get_local_handle(), SDP_VEC(buffers[0]), resid, x,
                            wptr(buffers[i], a->off), a->key.d[0], a->key.d[1], a->key.d[2],
                            SDP_CL_DT(buffers[i - 1]), SDP_CL_DT(buffers[0]), ws, wsb,
                            starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}

static void matmul_bwd_data_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    size_t wsb;
    void *ws = sdp_cl_cublaslt_ws(&wsb);
    /* an fp32 residual gradient reaches the matmuls through cast_act (graph/layer.c) */
    SDP_ASSERT(SDP_CL_DT(buffers[1]) == SDP_CL_DT(buffers[0]),
               "matmul_bwd_data: dout's dtype is not dx's (hint: sdp_task_cast_act)");
    sdp_cuda_matmul_bwd_data(starpu_cublasLt_get_local_handle(), SDP_VEC(buffers[0]),
                             SDP_VEC(buffers[1]), wptr(buffers[2], a->off), a->key.d[0],
                             a->key.d[1], a->key.d[2], SDP_CL_DT(buffers[0]), ws, wsb,
                             starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}

static void matmul_bwd_weight_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    size_t wsb;
    void *ws = sdp_cl_cublaslt_ws(&wsb);
    SDP_ASSERT(SDP_CL_DT(buffers[1]) == SDP_CL_DT(buffers[2]),
               "matmul_bwd_weight: dout's dtype is not x's (hint: sdp_task_cast_act)");
    sdp_cuda_matmul_bwd_weight(starpu_cublasLt_get_local_handle(), SDP_VECF(buffers[0]) + a->off,
                               SDP_VEC(buffers[1]), SDP_VEC(buffers[2]), a->key.d[0], a->key.d[1],
                               a->key.d[2], SDP_CL_DT(buffers[1]), ws, wsb,
                               starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_matmul_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_matmul_fwd_v2",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_matmul_bwd_data = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_matmul_bwd_data_v2",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_matmul_bwd_weight = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_matmul_bwd_weight_v2",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_matmul_fwd = {
    .name = "matmul_fwd",
    .cpu_funcs = { matmul_fwd_cpu },
    .cpu_funcs_name = { "matmul_fwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(matmul_fwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_matmul_fwd,
};
struct starpu_codelet sdp_cl_matmul_bwd_data = {
    .name = "matmul_bwd_data",
    .cpu_funcs = { matmul_bwd_data_cpu },
    .cpu_funcs_name = { "matmul_bwd_data_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(matmul_bwd_data_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_matmul_bwd_data,
};
struct starpu_codelet sdp_cl_matmul_bwd_weight = {
    .name = "matmul_bwd_weight",
    .cpu_funcs = { matmul_bwd_weight_cpu },
    .cpu_funcs_name = { "matmul_bwd_weight_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(matmul_bwd_weight_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_matmul_bwd_weight,
};

static struct sdp_matmul_args *matmul_args(int M, int K, int N, int has_resid, size_t off)
{
    struct sdp_matmul_args *a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = M;
    a->key.d[1] = K;
    a->key.d[2] = N;
    a->key.d[3] = has_resid;
    a->off = off;
    return a;
}

int sdp_task_matmul_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *resid,
                        sdp_rt_tensor_t *x, sdp_rt_tensor_t *wg, size_t w_off, int M, int K, int N)
{
    struct sdp_cl_buf b[4];
    int n = 0;
    b[n++] = (struct sdp_cl_buf){ out, STARPU_W };
    if (resid)
        b[n++] = (struct sdp_cl_buf){ resid, STARPU_R };
    b[n++] = (struct sdp_cl_buf){ x, STARPU_R };
    b[n++] = (struct sdp_cl_buf){ wg, STARPU_R };
    struct sdp_matmul_args *a = matmul_args(M, K, N, resid != NULL, w_off);
    a->key.d[4] = sdp_rt_tensor_dtype(out) != sdp_rt_tensor_dtype(x);
    return sdp_cl_submit(&sdp_cl_matmul_fwd, o, a, sizeof(struct sdp_matmul_args), 2.0 * M * K * N,
                         b, n);
}

int sdp_task_matmul_bwd_data(const struct sdp_task_opts *o, sdp_rt_tensor_t *dx,
                             sdp_rt_tensor_t *dout, sdp_rt_tensor_t *wg, size_t w_off, int M, int K,
                             int N)
{
    struct sdp_cl_buf b[] = { { dx, STARPU_W }, { dout, STARPU_R }, { wg, STARPU_R } };
    return sdp_cl_submit(&sdp_cl_matmul_bwd_data, o, matmul_args(M, K, N, 0, w_off),
                         sizeof(struct sdp_matmul_args), 2.0 * M * K * N, b, 3);
}

int sdp_task_matmul_bwd_weight(const struct sdp_task_opts *o, sdp_rt_tensor_t *gg, size_t g_off,
                               sdp_rt_tensor_t *dout, sdp_rt_tensor_t *x, int M, int K, int N)
{
    struct sdp_cl_buf b[] = { { gg, STARPU_RW }, { dout, STARPU_R }, { x, STARPU_R } };
    return sdp_cl_submit(&sdp_cl_matmul_bwd_weight, o, matmul_args(M, K, N, 0, g_off),
                         sizeof(struct sdp_matmul_args), 2.0 * M * K * N, b, 3);
}
