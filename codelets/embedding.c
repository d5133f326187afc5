/* SPDX-License-Identifier: MIT */
/* embedding_fwd / embedding_bwd: token lookup in the (V, C) embedding and its scatter-add gradient.
 * Kernels: codelets/cpu/embedding_ref.c.  Tests: tests/kernels/test_kernels_embedding.c, tests/e2e.
 */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

struct sdp_embedding_args {
    struct sdp_shape_key key; /* N, C */
    size_t off;               /* embedding offset in the group vector */
};

/* buffers: out (N, C) f32 W, ids (N) i32 R, wg f32|bf16 R */
static void embedding_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_embedding_args *a = cl_arg;
    int N = a->key.d[0], C = a->key.d[1];
    const int32_t *ids = SDP_VEC(buffers[1]);
    void *wg = buffers[2];
    float *out = SDP_VECF(buffers[0]);
    if (STARPU_VECTOR_GET_ELEMSIZE(wg) == 2) {
        /* convert only the rows used, not the whole (V, C) table */
        const uint16_t *w = (const uint16_t *)STARPU_VECTOR_GET_PTR(wg) + a->off;
        for (int n = 0; n < N; n++)
            sdp_cpu_bf16_to_f32_ref(out + (size_t)n * C, w + (size_t)ids[n] * C, (size_t)C);
    } else {
        sdp_cpu_embedding_fwd_ref(out, ids, SDP_VECF(wg) + a->off, N, C);
    }
}

/* buffers: gg f32 RW, dout (N, C) f32 R, ids (N) i32 R */
static void embedding_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_embedding_args *a = cl_arg;
    sdp_cpu_embedding_bwd_ref(SDP_VECF(buffers[0]) + a->off, SDP_VECF(buffers[1]),
                              SDP_VEC(buffers[2]), a->key.d[0], a->key.d[1]);
}

static struct starpu_perfmodel sdp_pm_embedding_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_embedding_fwd_v1",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_embedding_bwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_embedding_bwd_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_embedding_fwd = {
    .name = "embedding_fwd",
    .cpu_funcs = { embedding_fwd_cpu },
    .cpu_funcs_name = { "embedding_fwd_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_embedding_fwd,
};
struct starpu_codelet sdp_cl_embedding_bwd = {
    .name = "embedding_bwd",
    .cpu_funcs = { embedding_bwd_cpu },
    .cpu_funcs_name = { "embedding_bwd_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_embedding_bwd,
};

int sdp_task_embedding_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *ids, sdp_rt_tensor_t *wg, size_t w_off, int N, int C)
{
    struct sdp_embedding_args *a = sdp_cl_args_alloc(sizeof(*a));
    struct sdp_cl_buf b[] = { { out, STARPU_W }, { ids, STARPU_R }, { wg, STARPU_R } };
    a->key.d[0] = N;
    a->key.d[1] = C;
    a->off = w_off;
    return sdp_cl_submit(&sdp_cl_embedding_fwd, o, a, sizeof(*a), 0.0, b, 3);
}

int sdp_task_embedding_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *gg, size_t g_off,
                           sdp_rt_tensor_t *dout, sdp_rt_tensor_t *ids, int N, int C)
{
    struct sdp_embedding_args *a = sdp_cl_args_alloc(sizeof(*a));
    struct sdp_cl_buf b[] = { { gg, STARPU_RW }, { dout, STARPU_R }, { ids, STARPU_R } };
    a->key.d[0] = N;
    a->key.d[1] = C;
    a->off = g_off;
    return sdp_cl_submit(&sdp_cl_embedding_bwd, o, a, sizeof(*a), (double)N * C, b, 3);
}
