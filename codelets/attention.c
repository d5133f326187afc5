/* SPDX-License-Identifier: MIT */
/* attention_fwd / attention_bwd: causal grouped-query softmax attention on the fused qkv
 * activation; the forward keeps only the output and the per-row log-sum-exp, never a (T, T) score
 * matrix.  With segment starts (document masking of packed rows) a query sees only its own
 * document's keys. Kernels: codelets/cpu/attention_blas.c (CPU workers), attention_ref.c (the
 * reference). Tests: tests/kernels/test_kernels_attention.c, tests/e2e. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codelets/cl_common.h"
#include "base/env.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "models/sdp_models.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_attention_args {
    struct sdp_shape_key key;     /* B, T, NH, NKV, HD, has_seg */
    unsigned long long ws_budget; /* bytes a cuDNN call may take (0: its default) */
    int ndocs;                    /* with seg: the documents of the B rows, */
    int32_t first[];              /* their first tokens (b*T + t), in order: seg's starts */
};

/* The segment starts (B*T) i32 of document masking, the last buffer when present, else NULL. */
static const int32_t *seg_of(const struct sdp_attention_args *a, void *buffers[], int i)
{
    return a->key.d[5] ? (const int32_t *)SDP_VEC(buffers[i]) : NULL;
}

/* buffers: out (B*T, NH*HD) act W, lse (B, NH, T) f32 W, qkv (B*T, QKV) act R, [seg (B*T) i32 R] */
static void attention_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_attention_args *a = cl_arg;
    float *out = sdp_cl_out(buffers[0], 0);
    float *ws = sdp_cl_scratch(4, sdp_cpu_attention_ws_floats(a->key.d[1]) * sizeof(float));
    sdp_cpu_attention_fwd(out, SDP_VECF(buffers[1]), sdp_cl_in(buffers[2], 1),
                          seg_of(a, buffers, 3), a->key.d[0], a->key.d[1], a->key.d[2], a->key.d[3],
                          a->key.d[4], ws);
    sdp_cl_out_done(buffers[0], out);
}

/* buffers: dqkv act W, dout act R, qkv act R, out act R, lse f32 R, [seg i32 R] */
static void attention_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_attention_args *a = cl_arg;
    float *dqkv = sdp_cl_out(buffers[0], 0);
    float *ws = sdp_cl_scratch(4, sdp_cpu_attention_ws_floats(a->key.d[1]) * sizeof(float));
    sdp_cpu_attention_bwd(dqkv, sdp_cl_in(buffers[1], 1), sdp_cl_in(buffers[2], 2),
                          sdp_cl_in(buffers[3], 3), SDP_VECF(buffers[4]), seg_of(a, buffers, 5),
                          a->key.d[0], a->key.d[1], a->key.d[2], a->key.d[3], a->key.d[4], ws);
    sdp_cl_out_done(buffers[0], dqkv);
}

#ifdef SDP_HAVE_CUDA
#ifdef SDP_HAVE_CUDNN_FRONTEND
/* The starts (B*T) rebuilt on the host from the task's documents, for cuDNN's variable-length
 * calls (the same values as seg on the device, so no copy back and no wait). */
static const int32_t *host_starts(const struct sdp_attention_args *a)
{
    const int T = a->key.d[1];
    const size_t n = (size_t)a->key.d[0] * T;
    int32_t *s = sdp_cl_scratch(0, n * sizeof(int32_t));
    for (int k = 0; k < a->ndocs; k++) {
        const size_t end = k + 1 < a->ndocs ? (size_t)a->first[k + 1] : n;
        for (size_t i = (size_t)a->first[k]; i < end; i++)
            s[i] = a->first[k] % T;
    }
    return s;
}

/* bf16 attention goes through cuDNN's fused graphs unless SDP_ATTENTION=own, document masking
 * (segment starts) too, each document a sequence of its own; a shape cuDNN cannot run falls back
 * to the kernels of codelets/cuda/attention_{fwd,bwd}.cu, with one warning per direction and
 * kind (whole rows, documents). */
static int use_cudnn(int dt)
{
    static int choice = -1; /* -1 unread, 0 own kernels, 1 cuDNN (sdp_rt_init checked the value) */
    int c = __atomic_load_n(&choice, __ATOMIC_RELAXED);
    if (c < 0) {
        c = !sdp_env_is("SDP_ATTENTION", "own");
        __atomic_store_n(&choice, c, __ATOMIC_RELAXED);
    }
    return c && dt == SDP_CUDA_BF16;
}

/* once per direction: how cuDNN runs the first shape it gets; and once, a backward workspace
 * larger than the plan counts for the call (models/workspace.c: a cuDNN the model misses; the
 * forward shares the backward's, the larger) */
static void cudnn_report(int bwd, int B, int T, int NH, int NKV, int HD, size_t budget, size_t ws)
{
    static int said[2], warned;
    const int bs = sdp_cudnn_attention_batch(bwd, B, T, NH, NKV, HD, budget);
    const unsigned long long model = sdp_model_attention_ws_bytes(bwd, bs, T, NH, HD);
    if (!__atomic_exchange_n(&said[bwd], 1, __ATOMIC_RELAXED))
        SDP_INFO("attention %s through cuDNN: %d sequences in calls of %d, workspace %.1f MiB "
                 "(budget %.1f MiB)",
                 bwd ? "backward" : "forward", B, bs, ws / 1048576.0, budget / 1048576.0);
    if (bwd && ws > model + SDP_CUDNN_WS_SLACK &&
        !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        SDP_WARN("attention backward through cuDNN: a call of %d sequences of %d tokens takes "
                 "%.1f MiB of workspace, the plan counts %.1f MiB (sdp_model_attention_ws_bytes)",
                 bs, T, ws / 1048576.0, model / 1048576.0);
}

static void cudnn_docs_report(int bwd, int B, const struct sdp_cudnn_docs_call *c)
{
    static int said[2];
    if (!__atomic_exchange_n(&said[bwd], 1, __ATOMIC_RELAXED))
        SDP_INFO("attention %s with document masking through cuDNN: %d rows in calls of %d, %d "
                 "document slots a row (longest document %d tokens), workspace %.1f MiB",
                 bwd ? "backward" : "forward", B, c->bs, c->docs, c->longest, c->ws / 1048576.0);
}

static void cudnn_fell_back(int bwd, int docs)
{
    static int warned[2][2];
    if (!__atomic_exchange_n(&warned[docs][bwd], 1, __ATOMIC_RELAXED))
        SDP_WARN("attention %s%s: cuDNN cannot run this shape (%s); using the own kernels",
                 bwd ? "backward" : "forward", docs ? " with document masking" : "",
                 sdp_cudnn_attention_error());
}

static void *cuda_ws0(size_t nbytes)
{
    return sdp_cl_cuda_ws(0, nbytes);
}

/* 1 when cuDNN ran the forward (into out, lse), 0 when the own kernels must */
static int cudnn_fwd(void *buffers[], const struct sdp_attention_args *a)
{
    const int B = a->key.d[0], T = a->key.d[1], NH = a->key.d[2], NKV = a->key.d[3],
              HD = a->key.d[4], docs = a->key.d[5];
    const size_t bud = (size_t)a->ws_budget;
    const cudaStream_t s = starpu_cuda_get_local_stream();
    struct sdp_cudnn_docs_call c = { 0 };
    size_t ws = 0;
    if (!use_cudnn(SDP_CL_DT(buffers[0])))
        return 0;
    if (docs ? sdp_cudnn_attention_docs_fwd(SDP_VEC(buffers[0]), SDP_VECF(buffers[1]),
                                            SDP_VEC(buffers[2]), host_starts(a), B, T, NH, NKV, HD,
                                            bud, cuda_ws0, s, &c) == 0
             : sdp_cudnn_attention_ws(&ws, 0, B, T, NH, NKV, HD, bud) == 0 &&
                   sdp_cudnn_attention_fwd(SDP_VEC(buffers[0]), SDP_VECF(buffers[1]),
                                           SDP_VEC(buffers[2]), B, T, NH, NKV, HD, bud,
                                           sdp_cl_cuda_ws(0, ws), s) == 0) {
        SDP_CUDA_CHECK(cudaGetLastError());
        if (docs)
            cudnn_docs_report(0, B, &c);
        else
            cudnn_report(0, B, T, NH, NKV, HD, bud, ws);
        return 1;
    }
    cudnn_fell_back(0, docs);
    return 0;
}

/* 1 when cuDNN ran the backward (into dqkv), 0 when the own kernels must */
static int cudnn_bwd(void *buffers[], const struct sdp_attention_args *a)
{
    const int B = a->key.d[0], T = a->key.d[1], NH = a->key.d[2], NKV = a->key.d[3],
              HD = a->key.d[4], docs = a->key.d[5];
    const size_t bud = (size_t)a->ws_budget;
    const cudaStream_t s = starpu_cuda_get_local_stream();
    struct sdp_cudnn_docs_call c = { 0 };
    size_t ws = 0;
    if (!use_cudnn(SDP_CL_DT(buffers[0])))
        return 0;
    if (docs ? sdp_cudnn_attention_docs_bwd(SDP_VEC(buffers[0]), SDP_VEC(buffers[1]),
                                            SDP_VEC(buffers[2]), SDP_VEC(buffers[3]),
                                            SDP_VECF(buffers[4]), host_starts(a), B, T, NH, NKV, HD,
                                            bud, cuda_ws0, s, &c) == 0
             : sdp_cudnn_attention_ws(&ws, 1, B, T, NH, NKV, HD, bud) == 0 &&
                   sdp_cudnn_attention_bwd(SDP_VEC(buffers[0]), SDP_VEC(buffers[1]),
                                           SDP_VEC(buffers[2]), SDP_VEC(buffers[3]),
                                           SDP_VECF(buffers[4]), B, T, NH, NKV, HD, bud,
                                           sdp_cl_cuda_ws(0, ws), s) == 0) {
        SDP_CUDA_CHECK(cudaGetLastError());
        if (docs)
            cudnn_docs_report(1, B, &c);
        else
            cudnn_report(1, B, T, NH, NKV, HD, bud, ws);
        return 1;
    }
    cudnn_fell_back(1, docs);
    return 0;
}
#endif

static void attention_fwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_attention_args *a = cl_arg;
    int B = a->key.d[0], T = a->key.d[1], NH = a->key.d[2], NKV = a->key.d[3], HD = a->key.d[4];
    const int32_t *seg = seg_of(a, buffers, 3);
#ifdef SDP_HAVE_CUDNN_FRONTEND
    if (cudnn_fwd(buffers, a))
        return;
#endif
    sdp_cuda_attention_fwd(SDP_VEC(buffers[0]), SDP_VECF(buffers[1]), SDP_VEC(buffers[2]), seg, B,
                           T, NH, NKV, HD, SDP_CL_DT(buffers[0]), starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}

static void attention_bwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_attention_args *a = cl_arg;
    int B = a->key.d[0], T = a->key.d[1], NH = a->key.d[2], NKV = a->key.d[3], HD = a->key.d[4];
    const int32_t *seg = seg_of(a, buffers, 5);
#ifdef SDP_HAVE_CUDNN_FRONTEND
    if (cudnn_bwd(buffers, a))
        return;
#endif
    sdp_cuda_attention_bwd(SDP_VEC(buffers[0]), SDP_VEC(buffers[1]), SDP_VEC(buffers[2]),
                           SDP_VEC(buffers[3]), SDP_VECF(buffers[4]), seg, B, T, NH, NKV, HD,
                           SDP_CL_DT(buffers[0]),
                           sdp_cl_cuda_ws(0, sdp_model_attention_own_ws_bytes(B, T, NH, HD)),
                           starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_attention_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_attention_fwd_v3",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_attention_bwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_attention_bwd_v3",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_attention_fwd = {
    .name = "attention_fwd",
    .cpu_funcs = { attention_fwd_cpu },
    .cpu_funcs_name = { "attention_fwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(attention_fwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_attention_fwd,
};
struct starpu_codelet sdp_cl_attention_bwd = {
    .name = "attention_bwd",
    .cpu_funcs = { attention_bwd_cpu },
    .cpu_funcs_name = { "attention_bwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(attention_bwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_attention_bwd,
};

/* The documents of starts (B*T on the host): each row's first tokens, counted from row 0's */
static int count_docs(const int32_t *starts, size_t n, int T, int32_t *first)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        if (starts[i] == (int32_t)(i % (size_t)T)) {
            if (first)
                first[k] = (int32_t)i;
            k++;
        }
    return k;
}

/* The arguments and their size: with seg, the documents of the host's starts (h->starts) */
static struct sdp_attention_args *att_args(int B, int T, int NH, int NKV, int HD, int has_seg,
                                           const struct sdp_attention_host *h, size_t *size)
{
    const size_t n = (size_t)B * T;
    int nd = 0;
    struct sdp_attention_args *a;
    SDP_ASSERT(!has_seg || (h && h->starts),
               "attention with document masking needs the starts on the host: pass "
               "struct sdp_attention_host's starts with seg");
    SDP_ASSERT(n <= INT32_MAX, "attention over %zu tokens: int32 token indices", n);
    if (has_seg)
        nd = count_docs(h->starts, n, T, NULL);
    *size = sizeof(*a) + (size_t)nd * sizeof(int32_t);
    a = sdp_cl_args_alloc(*size);
    a->key.d[0] = B;
    a->key.d[1] = T;
    a->key.d[2] = NH;
    a->key.d[3] = NKV;
    a->key.d[4] = HD;
    a->key.d[5] = has_seg;
    a->ws_budget = h ? h->ws_budget : 0;
    a->ndocs = nd;
    if (has_seg)
        count_docs(h->starts, n, T, a->first);
    return a;
}

/* Causal attention FLOPs: QK^T and PV over the lower triangle, 2 * 2 * B * NH * HD * T(T+1)/2. */
static double att_flops(int B, int T, int NH, int HD)
{
    return 2.0 * B * NH * HD * (double)T * (T + 1);
}

int sdp_task_attention_fwd_seg(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                               sdp_rt_tensor_t *lse, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *seg,
                               const struct sdp_attention_host *h, int B, int T, int NH, int NKV,
                               int HD)
{
    struct sdp_cl_buf b[] = {
        { out, STARPU_W }, { lse, STARPU_W }, { qkv, STARPU_R }, { seg, STARPU_R }
    };
    size_t size;
    struct sdp_attention_args *a = att_args(B, T, NH, NKV, HD, seg != NULL, h, &size);
    return sdp_cl_submit(&sdp_cl_attention_fwd, o, a, size, att_flops(B, T, NH, HD), b,
                         seg ? 4 : 3);
}

int sdp_task_attention_bwd_seg(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                               sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *out,
                               sdp_rt_tensor_t *lse, sdp_rt_tensor_t *seg,
                               const struct sdp_attention_host *h, int B, int T, int NH, int NKV,
                               int HD)
{
    struct sdp_cl_buf b[] = { { dqkv, STARPU_W }, { dout, STARPU_R }, { qkv, STARPU_R },
                              { out, STARPU_R },  { lse, STARPU_R },  { seg, STARPU_R } };
    size_t size;
    struct sdp_attention_args *a = att_args(B, T, NH, NKV, HD, seg != NULL, h, &size);
    return sdp_cl_submit(&sdp_cl_attention_bwd, o, a, size, 2.5 * att_flops(B, T, NH, HD), b,
                         seg ? 6 : 5);
}

int sdp_task_attention_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *lse, sdp_rt_tensor_t *qkv, int B, int T, int NH,
                           int NKV, int HD)
{
    return sdp_task_attention_fwd_seg(o, out, lse, qkv, NULL, NULL, B, T, NH, NKV, HD);
}

int sdp_task_attention_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                           sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *lse, int B, int T, int NH, int NKV, int HD)
{
    return sdp_task_attention_bwd_seg(o, dqkv, dout, qkv, out, lse, NULL, NULL, B, T, NH, NKV, HD);
}
