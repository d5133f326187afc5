/* SPDX-License-Identifier: MIT */
/* qknorm_rope_fwd / qknorm_rope_bwd: per-head RMSNorm of q and k (Qwen3; skipped for Llama)
 * followed by the rotary embedding, on the fused (N, QKV) projection output; v passes through.
 * With document starts (an optional last buffer) the positions restart at every document.
 * Kernels: codelets/cpu/qknorm_rope_ref.c.  Tests: tests/kernels/test_kernels_qknorm_rope.c,
 * tests/e2e. */
#include "config.h"

#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_qknorm_rope_args {
    struct sdp_shape_key key; /* N, T, NH, NKV, HD, has_norm + 2 has_seg */
    size_t qn_off, kn_off, gqn_off, gkn_off;
    struct sdp_rope_params rope;
    float eps;
};

/* inv_freq (HD/2) for rows of T tokens (dynamic scaling grows with T); *scale: the factor of cos
 * and sin (yarn's attention factor) */
static const float *inv_freq_of(const struct sdp_qknorm_rope_args *a, float *scale)
{
    int HD = a->key.d[4];
    float *f = sdp_cl_scratch(3, (size_t)(HD / 2) * sizeof(float));
    *scale = sdp_cpu_rope_freqs(f, &a->rope, HD, a->key.d[1]);
    return f;
}

/* The document starts (N) i32 whose positions restart, the last buffer i when present, else NULL.
 */
static const int32_t *seg_of(const struct sdp_qknorm_rope_args *a, void *buffers[], int i)
{
    return a->key.d[5] & 2 ? (const int32_t *)SDP_VEC(buffers[i]) : NULL;
}

/* buffers: out (N, QKV) act W, qkv (N, QKV) act R, wg R, [rstd (N, NH+NKV) f32 W], [seg (N) i32 R]
 */
static void qknorm_rope_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_qknorm_rope_args *a = cl_arg;
    int N = a->key.d[0], T = a->key.d[1], NH = a->key.d[2], NKV = a->key.d[3], HD = a->key.d[4];
    int has_norm = a->key.d[5] & 1;
    const float *qn = has_norm ? sdp_cl_f32_view(buffers[2], a->qn_off, (size_t)HD, 0) : NULL;
    const float *kn = has_norm ? sdp_cl_f32_view(buffers[2], a->kn_off, (size_t)HD, 1) : NULL;
    float *out = sdp_cl_out(buffers[0], 4), scale;
    const float *inv = inv_freq_of(a, &scale);
    sdp_cpu_qknorm_rope_fwd_ref(out, has_norm ? SDP_VECF(buffers[3]) : NULL,
                                sdp_cl_in(buffers[1], 5), qn, kn, inv, scale,
                                seg_of(a, buffers, has_norm ? 4 : 3), N, T, NH, NKV, HD, a->eps);
    sdp_cl_out_done(buffers[0], out);
}

/* buffers: dqkv (N, QKV) act W, dout (N, QKV) act R, qkv (N, QKV) act R, wg R, [gg f32 RW, rstd f32
 * R], [seg (N) i32 R] */
static void qknorm_rope_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_qknorm_rope_args *a = cl_arg;
    int N = a->key.d[0], T = a->key.d[1], NH = a->key.d[2], NKV = a->key.d[3], HD = a->key.d[4];
    int has_norm = a->key.d[5] & 1;
    const float *qn = has_norm ? sdp_cl_f32_view(buffers[3], a->qn_off, (size_t)HD, 0) : NULL;
    const float *kn = has_norm ? sdp_cl_f32_view(buffers[3], a->kn_off, (size_t)HD, 1) : NULL;
    float *gg = has_norm ? SDP_VECF(buffers[4]) : NULL;
    float *dqkv = sdp_cl_out(buffers[0], 4), scale;
    const float *inv = inv_freq_of(a, &scale);
    sdp_cpu_qknorm_rope_bwd_ref(dqkv, gg ? gg + a->gqn_off : NULL, gg ? gg + a->gkn_off : NULL,
                                sdp_cl_in(buffers[1], 5), sdp_cl_in(buffers[2], 6), qn, kn,
                                has_norm ? SDP_VECF(buffers[5]) : NULL, inv, scale,
                                seg_of(a, buffers, has_norm ? 6 : 4), N, T, NH, NKV, HD);
    sdp_cl_out_done(buffers[0], dqkv);
}

#ifdef SDP_HAVE_CUDA
/* the tables of the CUDA kernels; seg: the buffer index of the document starts if present */
static struct sdp_cuda_inv_freq inv_freq_struct(const struct sdp_qknorm_rope_args *a,
                                                void *buffers[], int seg)
{
    struct sdp_cuda_inv_freq f;
    int HD = a->key.d[4];
    f.seg = seg_of(a, buffers, seg);
    SDP_ASSERT(HD / 2 <= SDP_CUDA_MAX_HALF_HD, "head_dim %d above the CUDA kernels' limit %d", HD,
               2 * SDP_CUDA_MAX_HALF_HD);
    memcpy(f.f, inv_freq_of(a, &f.scale), (size_t)(HD / 2) * sizeof(float));
    return f;
}

static const void *wptr(void *wg, size_t off)
{
    return (const char *)SDP_VEC(wg) + off * STARPU_VECTOR_GET_ELEMSIZE(wg);
}

static void qknorm_rope_fwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_qknorm_rope_args *a = cl_arg;
    int has_norm = a->key.d[5] & 1;
    sdp_cuda_qknorm_rope_fwd(SDP_VEC(buffers[0]), has_norm ? SDP_VECF(buffers[3]) : NULL,
                             SDP_VEC(buffers[1]), has_norm ? wptr(buffers[2], a->qn_off) : NULL,
                             has_norm ? wptr(buffers[2], a->kn_off) : NULL,
                             inv_freq_struct(a, buffers, has_norm ? 4 : 3), a->key.d[0],
                             a->key.d[1], a->key.d[2], a->key.d[3], a->key.d[4], a->eps,
                             SDP_CL_DT(buffers[0]), starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}

static void qknorm_rope_bwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_qknorm_rope_args *a = cl_arg;
    int N = a->key.d[0], NH = a->key.d[2], NKV = a->key.d[3], HD = a->key.d[4];
    int has_norm = a->key.d[5] & 1;
    float *gg = has_norm ? SDP_VECF(buffers[4]) : NULL;
    sdp_cuda_qknorm_rope_bwd(
        SDP_VEC(buffers[0]), gg ? gg + a->gqn_off : NULL, gg ? gg + a->gkn_off : NULL,
        SDP_VEC(buffers[1]), SDP_VEC(buffers[2]), has_norm ? wptr(buffers[3], a->qn_off) : NULL,
        has_norm ? wptr(buffers[3], a->kn_off) : NULL, has_norm ? SDP_VECF(buffers[5]) : NULL,
        inv_freq_struct(a, buffers, has_norm ? 6 : 4), N, a->key.d[1], NH, NKV, HD,
        SDP_CL_DT(buffers[0]), sdp_cl_cuda_ws(0, sdp_cuda_qknorm_rope_bwd_ws(N, NH, NKV, HD)),
        starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_qknorm_rope_fwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_qknorm_rope_fwd_v2",
    .footprint = sdp_cl_footprint,
};
static struct starpu_perfmodel sdp_pm_qknorm_rope_bwd = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_qknorm_rope_bwd_v2",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_qknorm_rope_fwd = {
    .name = "qknorm_rope_fwd",
    .cpu_funcs = { qknorm_rope_fwd_cpu },
    .cpu_funcs_name = { "qknorm_rope_fwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(qknorm_rope_fwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_qknorm_rope_fwd,
};
struct starpu_codelet sdp_cl_qknorm_rope_bwd = {
    .name = "qknorm_rope_bwd",
    .cpu_funcs = { qknorm_rope_bwd_cpu },
    .cpu_funcs_name = { "qknorm_rope_bwd_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(qknorm_rope_bwd_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_qknorm_rope_bwd,
};

static struct sdp_qknorm_rope_args *qk_args(const struct sdp_rope_params *rope, int N, int T,
                                            int NH, int NKV, int HD, int has_norm, int has_seg)
{
    struct sdp_qknorm_rope_args *a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = N;
    a->key.d[1] = T;
    a->key.d[2] = NH;
    a->key.d[3] = NKV;
    a->key.d[4] = HD;
    a->key.d[5] = has_norm + 2 * has_seg;
    a->rope = *rope;
    return a;
}

int sdp_task_qknorm_rope_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                             sdp_rt_tensor_t *rstd, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *wg,
                             size_t qn_off, size_t kn_off, const struct sdp_rope_params *rope,
                             int N, int T, int NH, int NKV, int HD, float eps)
{
    return sdp_task_qknorm_rope_fwd_seg(o, out, rstd, qkv, wg, qn_off, kn_off, rope, NULL, N, T, NH,
                                        NKV, HD, eps);
}

int sdp_task_qknorm_rope_fwd_seg(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                                 sdp_rt_tensor_t *rstd, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *wg,
                                 size_t qn_off, size_t kn_off, const struct sdp_rope_params *rope,
                                 sdp_rt_tensor_t *seg, int N, int T, int NH, int NKV, int HD,
                                 float eps)
{
    int has_norm = rstd != NULL;
    struct sdp_qknorm_rope_args *a = qk_args(rope, N, T, NH, NKV, HD, has_norm, seg != NULL);
    struct sdp_cl_buf b[] = { { out, STARPU_W },
                              { qkv, STARPU_R },
                              { wg, STARPU_R },
                              { has_norm ? rstd : seg, has_norm ? STARPU_W : STARPU_R },
                              { seg, STARPU_R } };
    a->qn_off = qn_off;
    a->kn_off = kn_off;
    a->eps = eps;
    return sdp_cl_submit(&sdp_cl_qknorm_rope_fwd, o, a, sizeof(*a), 10.0 * N * (NH + NKV) * HD, b,
                         3 + has_norm + (seg != NULL));
}

int sdp_task_qknorm_rope_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                             sdp_rt_tensor_t *gg, size_t gqn_off, size_t gkn_off,
                             sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *wg,
                             size_t qn_off, size_t kn_off, sdp_rt_tensor_t *rstd,
                             const struct sdp_rope_params *rope, int N, int T, int NH, int NKV,
                             int HD)
{
    return sdp_task_qknorm_rope_bwd_seg(o, dqkv, gg, gqn_off, gkn_off, dout, qkv, wg, qn_off,
                                        kn_off, rstd, rope, NULL, N, T, NH, NKV, HD);
}

int sdp_task_qknorm_rope_bwd_seg(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                                 sdp_rt_tensor_t *gg, size_t gqn_off, size_t gkn_off,
                                 sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *wg,
                                 size_t qn_off, size_t kn_off, sdp_rt_tensor_t *rstd,
                                 const struct sdp_rope_params *rope, sdp_rt_tensor_t *seg, int N,
                                 int T, int NH, int NKV, int HD)
{
    int has_norm = rstd != NULL;
    struct sdp_qknorm_rope_args *a = qk_args(rope, N, T, NH, NKV, HD, has_norm, seg != NULL);
    struct sdp_cl_buf b[] = { { dqkv, STARPU_W }, { dout, STARPU_R }, { qkv, STARPU_R },
                              { wg, STARPU_R },   { gg, STARPU_RW },  { rstd, STARPU_R },
                              { seg, STARPU_R } };
    if (!has_norm) /* the starts follow wg */
        b[4] = (struct sdp_cl_buf){ seg, STARPU_R };
    a->qn_off = qn_off;
    a->kn_off = kn_off;
    a->gqn_off = gqn_off;
    a->gkn_off = gkn_off;
    return sdp_cl_submit(&sdp_cl_qknorm_rope_bwd, o, a, sizeof(*a), 20.0 * N * (NH + NKV) * HD, b,
                         (has_norm ? 6 : 4) + (seg != NULL));
}
