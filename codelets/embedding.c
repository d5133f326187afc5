/* SPDX-License-Identifier: MIT */
/* embedding_fwd / embedding_bwd: token lookup in the (V, C) embedding and its scatter-add gradient.
 * Kernels: codelets/cpu/embedding_ref.c, codelets/cuda/embedding.cu.
 * Tests: tests/kernels/test_kernels_embedding.c, tests/kernels/test_cuda_embedding.c, tests/e2e. */
#include "config.h"

#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_embedding_args {
    struct sdp_shape_key key; /* N, C */
    size_t off;               /* embedding offset in the group vector */
    size_t ids_off;           /* embedding_fwd: the first of the N ids in the ids vector */
};

/* buffers: out (N, C) act W, ids (ids_off + N) i32 R, wg f32|bf16 R */
static void embedding_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_embedding_args *a = cl_arg;
    int N = a->key.d[0], C = a->key.d[1];
    const int32_t *ids = (const int32_t *)SDP_VEC(buffers[1]) + a->ids_off;
    void *wg = buffers[2];
    if (STARPU_VECTOR_GET_ELEMSIZE(wg) == 2) {
        /* bf16 table and bf16 activations: gather the rows' bits */
        const uint16_t *w = (const uint16_t *)STARPU_VECTOR_GET_PTR(wg) + a->off;
        if (STARPU_VECTOR_GET_ELEMSIZE(buffers[0]) == 4) { /* fp32 residual stream: widened */
            float *out = SDP_VECF(buffers[0]);
            for (int n = 0; n < N; n++)
                sdp_cpu_bf16_to_f32_ref(out + (size_t)n * C, w + (size_t)ids[n] * C, (size_t)C);
            return;
        }
        uint16_t *out = SDP_VEC(buffers[0]);
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * C, w + (size_t)ids[n] * C, (size_t)C * sizeof(*w));
    } else {
        float *out = sdp_cl_out(buffers[0], 0);
        sdp_cpu_embedding_fwd_ref(out, ids, SDP_VECF(wg) + a->off, N, C);
        sdp_cl_out_done(buffers[0], out);
    }
}

/* buffers: gg f32 RW, dout (N, C) act R, ids (N) i32 R */
static void embedding_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_embedding_args *a = cl_arg;
    sdp_cpu_embedding_bwd_ref(SDP_VECF(buffers[0]) + a->off, sdp_cl_in(buffers[1], 0),
                              SDP_VEC(buffers[2]), a->key.d[0], a->key.d[1]);
}

#ifdef SDP_HAVE_CUDA
static void embedding_fwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_embedding_args *a = cl_arg;
    size_t es = STARPU_VECTOR_GET_ELEMSIZE(buffers[2]);
    if (es == 2 && STARPU_VECTOR_GET_ELEMSIZE(buffers[0]) == 4) { /* the fp32 residual stream */
        sdp_cuda_embedding_fwd_f32(SDP_VECF(buffers[0]),
                                   (const int32_t *)SDP_VEC(buffers[1]) + a->ids_off,
                                   (const uint16_t *)SDP_VEC(buffers[2]) + a->off, a->key.d[0],
                                   a->key.d[1], starpu_cuda_get_local_stream());
        SDP_CUDA_CHECK(cudaGetLastError());
        return;
    }
    sdp_cuda_embedding_fwd(SDP_VEC(buffers[0]), (const int32_t *)SDP_VEC(buffers[1]) + a->ids_off,
                           (const char *)SDP_VEC(buffers[2]) + a->off * es, a->key.d[0],
                           a->key.d[1], SDP_CL_DT(buffers[2]), starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}

static void embedding_bwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_embedding_args *a = cl_arg;
    sdp_cuda_embedding_bwd(SDP_VECF(buffers[0]) + a->off, SDP_VEC(buffers[1]), SDP_VEC(buffers[2]),
                           a->key.d[0], a->key.d[1], SDP_CL_DT(buffers[1]),
                           starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_embedding_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_embedding_fwd_v1",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_embedding_fwd_host = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_embedding_fwd_host_v1",
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
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(embedding_fwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_embedding_fwd,
};
/* The lookup on the host alone (train.embed_lookup: host): the same CPU kernel, under the same
 * name in the trace. */
struct starpu_codelet sdp_cl_embedding_fwd_host = {
    .name = "embedding_fwd",
    .cpu_funcs = { embedding_fwd_cpu },
    .cpu_funcs_name = { "embedding_fwd_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_embedding_fwd_host,
};
struct starpu_codelet sdp_cl_embedding_bwd = {
    .name = "embedding_bwd",
    .cpu_funcs = { embedding_bwd_cpu },
    .cpu_funcs_name = { "embedding_bwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(embedding_bwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_embedding_bwd,
};

/* Both lookups: N rows of C into out, for the ids from ids_off, with codelet cl. */
static int submit_fwd(struct starpu_codelet *cl, const struct sdp_task_opts *o,
                      sdp_rt_tensor_t *out, sdp_rt_tensor_t *ids, size_t ids_off,
                      sdp_rt_tensor_t *wg, size_t w_off, int N, int C)
{
    struct sdp_embedding_args *a;
    struct sdp_cl_buf b[] = { { out, STARPU_W }, { ids, STARPU_R }, { wg, STARPU_R } };
    if (ids_off + (size_t)N > sdp_rt_tensor_nelems(ids) ||
        sdp_rt_tensor_nelems(out) != (size_t)N * (size_t)C)
        return sdp_err(-EINVAL, "%s: ids %zu..%zu of %zu, output %zu of %d x %d", cl->name, ids_off,
                       ids_off + (size_t)N, sdp_rt_tensor_nelems(ids), sdp_rt_tensor_nelems(out), N,
                       C);
    a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = N;
    a->key.d[1] = C;
    a->off = w_off;
    a->ids_off = ids_off;
    return sdp_cl_submit(cl, o, a, sizeof(*a), 0.0, b, 3);
}

int sdp_task_embedding_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *ids, sdp_rt_tensor_t *wg, size_t w_off, int N, int C)
{
    return submit_fwd(&sdp_cl_embedding_fwd, o, out, ids, 0, wg, w_off, N, C);
}

int sdp_task_embedding_fwd_host(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                                sdp_rt_tensor_t *ids, size_t ids_off, sdp_rt_tensor_t *wg,
                                size_t w_off, int N, int C)
{
    return submit_fwd(&sdp_cl_embedding_fwd_host, o, out, ids, ids_off, wg, w_off, N, C);
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
