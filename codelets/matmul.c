/* SPDX-License-Identifier: MIT */
/* matmul_fwd / matmul_bwd_data / matmul_bwd_weight: the linear layers, y = x . w^T with w (N, K) as
 * stored by Hugging Face (out_features, in_features).  Weights f32 or bf16 (converted per task on
 * CPU); fp32 accumulation.  Kernels: codelets/cpu/matmul.c.  Tests:
 * tests/kernels/test_kernels_matmul.c, tests/e2e. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

struct sdp_matmul_args {
    struct sdp_shape_key key; /* M, K, N, has_resid */
    size_t off;               /* weight (or weight-gradient) offset in its group vector */
};

/* buffers: out (M, N) W, [resid (M, N) R], x (M, K) R, wg R */
static void matmul_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    int M = a->key.d[0], K = a->key.d[1], N = a->key.d[2], has_resid = a->key.d[3];
    int i = 1;
    const float *resid = has_resid ? SDP_VECF(buffers[i++]) : NULL;
    const float *x = SDP_VECF(buffers[i++]);
    const float *w = sdp_cl_f32_view(buffers[i], a->off, (size_t)N * K, 0);
    sdp_cpu_matmul_fwd(SDP_VECF(buffers[0]), resid, x, w, M, K, N);
}

/* buffers: dx (M, K) W, dout (M, N) R, wg R */
static void matmul_bwd_data_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    int M = a->key.d[0], K = a->key.d[1], N = a->key.d[2];
    const float *w = sdp_cl_f32_view(buffers[2], a->off, (size_t)N * K, 0);
    sdp_cpu_matmul_bwd_data(SDP_VECF(buffers[0]), SDP_VECF(buffers[1]), w, M, K, N);
}

/* buffers: gg f32 RW, dout (M, N) R, x (M, K) R */
static void matmul_bwd_weight_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_matmul_args *a = cl_arg;
    int M = a->key.d[0], K = a->key.d[1], N = a->key.d[2];
    sdp_cpu_matmul_bwd_weight(SDP_VECF(buffers[0]) + a->off, SDP_VECF(buffers[1]),
                              SDP_VECF(buffers[2]), M, K, N);
}

static struct starpu_perfmodel sdp_pm_matmul_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_matmul_fwd_v1",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_matmul_bwd_data = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_matmul_bwd_data_v1",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_matmul_bwd_weight = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_matmul_bwd_weight_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_matmul_fwd = {
    .name = "matmul_fwd",
    .cpu_funcs = { matmul_fwd_cpu },
    .cpu_funcs_name = { "matmul_fwd_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_matmul_fwd,
};
struct starpu_codelet sdp_cl_matmul_bwd_data = {
    .name = "matmul_bwd_data",
    .cpu_funcs = { matmul_bwd_data_cpu },
    .cpu_funcs_name = { "matmul_bwd_data_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_matmul_bwd_data,
};
struct starpu_codelet sdp_cl_matmul_bwd_weight = {
    .name = "matmul_bwd_weight",
    .cpu_funcs = { matmul_bwd_weight_cpu },
    .cpu_funcs_name = { "matmul_bwd_weight_cpu" },
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
    return sdp_cl_submit(&sdp_cl_matmul_fwd, o, matmul_args(M, K, N, resid != NULL, w_off),
                         sizeof(struct sdp_matmul_args), 2.0 * M * K * N, b, n);
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
