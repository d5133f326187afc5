/* SPDX-License-Identifier: MIT */
/* attention_fwd / attention_bwd: causal grouped-query softmax attention on the fused qkv
 * activation; the forward keeps only the output and the per-row log-sum-exp, never a (T, T) score
 * matrix. Kernels: codelets/cpu/attention_ref.c.  Tests: tests/kernels/test_kernels_attention.c,
 * tests/e2e. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

struct sdp_attention_args {
    struct sdp_shape_key key; /* B, T, NH, NKV, HD */
};

/* buffers: out (B*T, NH*HD) W, lse (B, NH, T) W, qkv (B*T, QKV) R */
static void attention_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_attention_args *a = cl_arg;
    sdp_cpu_attention_fwd_ref(SDP_VECF(buffers[0]), SDP_VECF(buffers[1]), SDP_VECF(buffers[2]),
                              a->key.d[0], a->key.d[1], a->key.d[2], a->key.d[3], a->key.d[4]);
}

/* buffers: dqkv W, dout R, qkv R, out R, lse R */
static void attention_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_attention_args *a = cl_arg;
    sdp_cpu_attention_bwd_ref(SDP_VECF(buffers[0]), SDP_VECF(buffers[1]), SDP_VECF(buffers[2]),
                              SDP_VECF(buffers[3]), SDP_VECF(buffers[4]), a->key.d[0], a->key.d[1],
                              a->key.d[2], a->key.d[3], a->key.d[4]);
}

static struct starpu_perfmodel sdp_pm_attention_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_attention_fwd_v1",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_attention_bwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_attention_bwd_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_attention_fwd = {
    .name = "attention_fwd",
    .cpu_funcs = { attention_fwd_cpu },
    .cpu_funcs_name = { "attention_fwd_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_attention_fwd,
};
struct starpu_codelet sdp_cl_attention_bwd = {
    .name = "attention_bwd",
    .cpu_funcs = { attention_bwd_cpu },
    .cpu_funcs_name = { "attention_bwd_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_attention_bwd,
};

static struct sdp_attention_args *att_args(int B, int T, int NH, int NKV, int HD)
{
    struct sdp_attention_args *a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = B;
    a->key.d[1] = T;
    a->key.d[2] = NH;
    a->key.d[3] = NKV;
    a->key.d[4] = HD;
    return a;
}

/* Causal attention FLOPs: QK^T and PV over the lower triangle, 2 * 2 * B * NH * HD * T(T+1)/2. */
static double att_flops(int B, int T, int NH, int HD)
{
    return 2.0 * B * NH * HD * (double)T * (T + 1);
}

int sdp_task_attention_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *lse, sdp_rt_tensor_t *qkv, int B, int T, int NH,
                           int NKV, int HD)
{
    struct sdp_cl_buf b[] = { { out, STARPU_W }, { lse, STARPU_W }, { qkv, STARPU_R } };
    return sdp_cl_submit(&sdp_cl_attention_fwd, o, att_args(B, T, NH, NKV, HD),
                         sizeof(struct sdp_attention_args), att_flops(B, T, NH, HD), b, 3);
}

int sdp_task_attention_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                           sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *lse, int B, int T, int NH, int NKV, int HD)
{
    struct sdp_cl_buf b[] = { { dqkv, STARPU_W },
                              { dout, STARPU_R },
                              { qkv, STARPU_R },
                              { out, STARPU_R },
                              { lse, STARPU_R } };
    return sdp_cl_submit(&sdp_cl_attention_bwd, o, att_args(B, T, NH, NKV, HD),
                         sizeof(struct sdp_attention_args), 2.5 * att_flops(B, T, NH, HD), b, 5);
}
