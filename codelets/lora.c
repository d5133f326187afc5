/* SPDX-License-Identifier: MIT */
/* lora_fwd / lora_bwd: a LoRA adapter beside a frozen linear (PEFT's y = W x + s B (A drop(x)),
 * s = alpha / r, drop the dropout of base/splitmix.h's mask, whose key the graph derives from the
 * step, micro-batch, layer and target), one task per adapted linear and micro-batch.  The adapter's
 * output goes to a column slice [col0, col0 + out) of the linear's output (row stride ldy), so the
 * fused q/k/v and gate/up projections take one task per target; the backward adds into dx (after
 * the frozen linear's matmul_bwd_data wrote it) and accumulates dA and dB into the adapters' fp32
 * gradient. A and B are read from the adapters' working copy (offsets a_off, b_off).  Kernels:
 * codelets/cpu/lora.c, codelets/cuda/lora.cu.  Tests: tests/kernels/test_kernels_lora.c,
 * tests/kernels/test_cuda_lora.c. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#ifdef SDP_HAVE_CUDA
#include <starpu_cublasLt.h>

#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_lora_args {
    struct sdp_shape_key key; /* M, in, out, r, ldy */
    int col0;                 /* first column of the slice of y (dy) */
    size_t a_off, b_off;      /* A (r, in), B (out, r) in the adapters' working copy, and dA, dB
                                 at the same offsets in their gradient (lora_bwd) */
    float s;                  /* alpha / r */
    uint64_t drop_key;        /* the dropout of the adapter's input (sdp_lora_dims) */
    uint32_t drop_thr;
    float drop_scale;
};

#define ARGS_DIMS                                                                                  \
    int M = a->key.d[0], in = a->key.d[1], out = a->key.d[2], r = a->key.d[3], ldy = a->key.d[4]

/* a's dropout, its dropped input in scratch slot `slot` */
static struct sdp_cpu_dropout cpu_dropout(const struct sdp_lora_args *a, int M, int in, int slot)
{
    struct sdp_cpu_dropout dp = { a->drop_key, a->drop_thr, a->drop_scale, NULL };
    if (a->drop_thr)
        dp.xd = sdp_cl_scratch(slot, (size_t)M * in * sizeof(float));
    return dp;
}

/* buffers: y act RW, x act R, aw R */
static void lora_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_lora_args *a = cl_arg;
    ARGS_DIMS;
    float *y = sdp_cl_inout(buffers[0], 0);
    const float *x = sdp_cl_in(buffers[1], 1);
    const float *A = sdp_cl_f32_view(buffers[2], a->a_off, (size_t)r * in, 2);
    const float *B = sdp_cl_f32_view(buffers[2], a->b_off, (size_t)out * r, 3);
    float *u = sdp_cl_scratch(4, (size_t)M * r * sizeof(float));
    struct sdp_cpu_dropout dp = cpu_dropout(a, M, in, 5);
    sdp_cpu_lora_fwd(y + a->col0, ldy, x, A, B, M, in, out, r, a->s, u, &dp);
    sdp_cl_out_done(buffers[0], y);
}

/* buffers: dx act RW, dy act R, x act R, aw R, ag f32 RW */
static void lora_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_lora_args *a = cl_arg;
    ARGS_DIMS;
    float *dx = sdp_cl_inout(buffers[0], 0);
    const float *dy = sdp_cl_in(buffers[1], 1);
    const float *x = sdp_cl_in(buffers[2], 2);
    const float *A = sdp_cl_f32_view(buffers[3], a->a_off, (size_t)r * in, 3);
    const float *B = sdp_cl_f32_view(buffers[3], a->b_off, (size_t)out * r, 4);
    float *g = SDP_VECF(buffers[4]);
    float *u = sdp_cl_scratch(5, (size_t)M * r * sizeof(float));
    float *v = sdp_cl_scratch(6, (size_t)M * r * sizeof(float));
    struct sdp_cpu_dropout dp = cpu_dropout(a, M, in, 7);
    sdp_cpu_lora_bwd(dx, dy + a->col0, ldy, x, A, B, g + a->a_off, g + a->b_off, M, in, out, r,
                     a->s, u, v, &dp);
    sdp_cl_out_done(buffers[0], dx);
}

#ifdef SDP_HAVE_CUDA
static const void *at(void *vec, size_t off)
{
    return (const char *)SDP_VEC(vec) + off * STARPU_VECTOR_GET_ELEMSIZE(vec);
}

/* The dropout of a's adapter input, its dropped copy in workspace slot `slot` */
static struct sdp_cuda_dropout dropout_of(const struct sdp_lora_args *a, void *x, int slot)
{
    struct sdp_cuda_dropout dp = { a->drop_key, a->drop_thr, a->drop_scale, NULL };
    if (a->drop_thr)
        dp.xd = sdp_cl_cuda_ws(slot, STARPU_VECTOR_GET_NX(x) * STARPU_VECTOR_GET_ELEMSIZE(x));
    return dp;
}

static void lora_fwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_lora_args *a = cl_arg;
    ARGS_DIMS;
    size_t wsb;
    void *ws = sdp_cl_cublaslt_ws(&wsb);
    int dt = SDP_CL_DT(buffers[0]);
    struct sdp_cuda_dropout dp = dropout_of(a, buffers[1], 3);
    sdp_cuda_lora_fwd(starpu_cublasLt_get_local_handle(), (void *)at(buffers[0], a->col0), ldy,
                      SDP_VEC(buffers[1]), at(buffers[2], a->a_off), at(buffers[2], a->b_off), M,
                      in, out, r, a->s, dt, sdp_cl_cuda_ws(0, (size_t)M * r * 4),
                      sdp_cl_cuda_ws(1, (size_t)M * r * 4), sdp_cl_cuda_ws(2, (size_t)M * out * 4),
                      ws, wsb, starpu_cuda_get_local_stream(), &dp);
    SDP_CUDA_CHECK(cudaGetLastError());
}

static void lora_bwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_lora_args *a = cl_arg;
    ARGS_DIMS;
    size_t wsb;
    void *ws = sdp_cl_cublaslt_ws(&wsb);
    float *g = SDP_VECF(buffers[4]);
    struct sdp_cuda_dropout dp = dropout_of(a, buffers[2], 4);
    sdp_cuda_lora_bwd(
        starpu_cublasLt_get_local_handle(), SDP_VEC(buffers[0]), at(buffers[1], a->col0), ldy,
        SDP_VEC(buffers[2]), at(buffers[3], a->a_off), at(buffers[3], a->b_off), g + a->a_off,
        g + a->b_off, M, in, out, r, a->s, SDP_CL_DT(buffers[0]),
        sdp_cl_cuda_ws(0, (size_t)M * r * 4), sdp_cl_cuda_ws(1, (size_t)M * r * 4),
        sdp_cl_cuda_ws(2, (size_t)M * (r > in ? r : in) * 4), sdp_cl_cuda_ws(3, (size_t)M * r * 4),
        ws, wsb, starpu_cuda_get_local_stream(), &dp);
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_lora_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_lora_fwd",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_lora_bwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_lora_bwd",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_lora_fwd = {
    .name = "lora_fwd",
    .cpu_funcs = { lora_fwd_cpu },
    .cpu_funcs_name = { "lora_fwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(lora_fwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_lora_fwd,
};
struct starpu_codelet sdp_cl_lora_bwd = {
    .name = "lora_bwd",
    .cpu_funcs = { lora_bwd_cpu },
    .cpu_funcs_name = { "lora_bwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(lora_bwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_lora_bwd,
};

static struct sdp_lora_args *lora_args(const struct sdp_lora_dims *d)
{
    struct sdp_lora_args *a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = d->M;
    a->key.d[1] = d->in;
    a->key.d[2] = d->out;
    a->key.d[3] = d->r;
    a->key.d[4] = d->ldy;
    a->col0 = d->col0;
    a->a_off = d->a_off;
    a->b_off = d->b_off;
    a->s = d->s;
    a->drop_key = d->drop_key;
    a->drop_thr = d->drop_thr;
    a->drop_scale = d->drop_scale;
    return a;
}

int sdp_task_lora_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *y, sdp_rt_tensor_t *x,
                      sdp_rt_tensor_t *aw, const struct sdp_lora_dims *d)
{
    struct sdp_cl_buf b[] = { { y, STARPU_RW }, { x, STARPU_R }, { aw, STARPU_R } };
    return sdp_cl_submit(&sdp_cl_lora_fwd, o, lora_args(d), sizeof(struct sdp_lora_args),
                         2.0 * d->M * d->r * (d->in + d->out), b, 3);
}

int sdp_task_lora_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dx, sdp_rt_tensor_t *dy,
                      sdp_rt_tensor_t *x, sdp_rt_tensor_t *aw, sdp_rt_tensor_t *ag,
                      const struct sdp_lora_dims *d)
{
    struct sdp_cl_buf b[] = {
        { dx, STARPU_RW }, { dy, STARPU_R }, { x, STARPU_R }, { aw, STARPU_R }, { ag, STARPU_RW }
    };
    return sdp_cl_submit(&sdp_cl_lora_bwd, o, lora_args(d), sizeof(struct sdp_lora_args),
                         2.0 * d->M * d->r * (2.0 * d->in + 3.0 * d->out), b, 5);
}
