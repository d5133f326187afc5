/* SPDX-License-Identifier: MIT */
/* moe_fwd / moe_bwd / moe_aux: a sparse layer's MLP (Qwen3-MoE, transformers'
 * Qwen3MoeSparseMoeBlock) as tasks: the router, the permutation, the experts and the combine in
 * one task each way, around the kernels of codelets/cpu/moe.h; and the load-balancing loss of a
 * micro-batch from the statistics its sparse layers accumulate.  The forward keeps what the
 * backward reads (probabilities, routing, permuted rows, the experts' intermediates) in one f32
 * vector of sdp_task_moe_acts_elems() elements (the routing's int32 arrays stored in place).
 * The CUDA implementation (codelets/moe_cuda.c, kernels codelets/cuda/moe*.cu) keeps the same
 * vector.  Tests: tests/kernels/test_kernels_moe.c and tests/kernels/test_cuda_moe.c (the
 * kernels), tests/e2e/test_e2e_moe_train.sh (CPU workers against transformers) and
 * tests/e2e/test_e2e_moe_gpu.sh (one GPU against CPU workers). */
#include "config.h"

#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/moe.h"
#include "codelets/moe_internal.h"

size_t sdp_cl_moe_layout(struct sdp_moe_acts *a, float *base, const struct sdp_moe_shape *s)
{
    const size_t N = (size_t)s->N, E = (size_t)s->E, S = N * (size_t)s->K;
    size_t at = 0;
#define PIECE(field, type, n)                                                                      \
    do {                                                                                           \
        if (base)                                                                                  \
            field = (type *)(void *)(base + at);                                                   \
        at += (n + 15) / 16 * 16; /* 64-byte aligned pieces */                                     \
    } while (0)
    PIECE(a->probs, float, N *E);
    PIECE(a->r.ids, int32_t, S);
    PIECE(a->r.wts, float, S);
    PIECE(a->r.counts, int32_t, E);
    PIECE(a->r.offsets, int32_t, E + 1);
    PIECE(a->r.rows, int32_t, S);
    PIECE(a->r.where, int32_t, S);
    PIECE(a->xp, float, S *(size_t)s->C);
    PIECE(a->gu, float, S * 2 * (size_t)s->IM);
    PIECE(a->h, float, S *(size_t)s->IM);
    PIECE(a->y, float, S *(size_t)s->C);
#undef PIECE
    if (base) {
        a->r.N = s->N;
        a->r.E = s->E;
        a->r.K = s->K;
    }
    return at;
}

size_t sdp_task_moe_acts_elems(const struct sdp_moe_shape *s)
{
    struct sdp_moe_acts a;
    return sdp_cl_moe_layout(&a, NULL, s);
}

/* Routed streaming (MOE_ROUTED): the experts with rows (counts) from the host's working copy Wh
 * into the compute copy W, both in main memory here, but those an earlier micro-batch of the step
 * copied already (had: its marks; NULL: none). */
static void routed_copy_cpu(void *W, const void *Wh, const struct sdp_moe_shape *s,
                            const int32_t *counts, const int32_t *had)
{
    const size_t es = STARPU_VECTOR_GET_ELEMSIZE(W);
    for (int e = 0; e < s->E; e++) {
        size_t at[2], n[2];
        if (counts[e] == 0 || (had && had[e]))
            continue;
        sdp_cl_moe_expert_slices(s, e, at, n);
        for (int i = 0; i < 2; i++)
            memcpy((char *)SDP_VEC(W) + at[i] * es, (const char *)SDP_VEC(Wh) + at[i] * es,
                   n[i] * es);
    }
}

/* buffers: acts W, h2 (N, C) act R, W R (RW routed), [Wh R on the host: routed],
 * [out (N, C) act W, xmid (N, C) act R], [stats (2E) f64 RW, used (2E) i32 RW] */
static void moe_fwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_moe_args *a = cl_arg;
    const struct sdp_moe_shape *s = &a->s;
    const int N = s->N, C = s->C, E = s->E, IM = s->IM, fl = a->key.d[5];
    struct sdp_moe_acts k;
    sdp_cl_moe_layout(&k, SDP_VECF(buffers[0]), s);
    const float *x = sdp_cl_in(buffers[1], 0);
    const float *wr = sdp_cl_f32_view(buffers[2], s->off_router, (size_t)E * C, 1);
    float *logits = sdp_cl_scratch(4, (size_t)N * E * sizeof(float));
    int b = fl & MOE_ROUTED ? 4 : 3;
    sdp_cpu_moe_router_fwd(logits, k.probs, &k.r, x, wr, C, s->norm_topk);
    sdp_cpu_moe_permute(&k.r);
    if (fl & MOE_ROUTED) {
        const int ih = sdp_cl_moe_had_buf(b, fl);
        routed_copy_cpu(buffers[2], buffers[3], s, k.r.counts,
                        ih < 0 ? NULL : (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[ih]));
    }
    const float *wgu = sdp_cl_f32_view(buffers[2], s->off_gu, (size_t)E * 2 * IM * C, 2);
    const float *wdn = sdp_cl_f32_view(buffers[2], s->off_down, (size_t)E * C * IM, 3);
    sdp_cpu_moe_gather(k.xp, x, &k.r, C);
    sdp_cpu_moe_experts_fwd(k.y, k.gu, k.h, k.xp, wgu, wdn, &k.r, C, IM);
    if (fl & MOE_OUT) { /* out = xmid + the block's output, as the decoder layer adds them */
        float *out = sdp_cl_out(buffers[b], 5), *moe = sdp_cl_scratch(6, (size_t)N * C * 4);
        const float *xmid = sdp_cl_in(buffers[b + 1], 7);
        memset(moe, 0, (size_t)N * C * sizeof(float));
        sdp_cpu_moe_combine(moe, k.y, &k.r, C);
        for (size_t i = 0; i < (size_t)N * C; i++)
            out[i] = xmid[i] + moe[i];
        sdp_cl_out_done(buffers[b], out);
        b += 2;
    }
    if (fl & MOE_TRACK) {
        double *st = (double *)STARPU_VECTOR_GET_PTR(buffers[b]);
        int32_t *used = (int32_t *)STARPU_VECTOR_GET_PTR(buffers[b + 1]);
        if (fl & MOE_FIRST_L)
            memset(st, 0, 2 * (size_t)E * sizeof(*st));
        sdp_cpu_moe_aux_stats(st, st + E, k.probs, &k.r);
        for (int e = 0; e < E; e++) {
            used[e] = (fl & MOE_FIRST_M ? 0 : used[e]) | (k.r.counts[e] > 0);
            used[E + e] += fl & MOE_LAST_M ? used[e] : 0;
        }
    }
}

/* buffers: dh2 (N, C) act W, dres (N, C) act R, h2 (N, C) act R, W R (RW routed), [Wh R on the
 * host: routed], acts R, [G f32 RW], [stats (2E) f64 R] */
static void moe_bwd_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_moe_args *a = cl_arg;
    const struct sdp_moe_shape *s = &a->s;
    const int N = s->N, C = s->C, E = s->E, K = s->K, IM = s->IM, fl = a->key.d[5];
    const size_t S = (size_t)N * K;
    const int ia = fl & MOE_ROUTED ? 5 : 4; /* acts, then [G], [stats] */
    struct sdp_moe_acts k;
    sdp_cl_moe_layout(&k, SDP_VECF(buffers[ia]), s);
    if (fl & MOE_ROUTED)
        routed_copy_cpu(buffers[3], buffers[4], s, k.r.counts, NULL);
    float *dx = sdp_cl_out(buffers[0], 0);
    const float *dout = sdp_cl_in(buffers[1], 1), *x = sdp_cl_in(buffers[2], 2);
    const float *wr = sdp_cl_f32_view(buffers[3], s->off_router, (size_t)E * C, 3);
    const float *wgu = sdp_cl_f32_view(buffers[3], s->off_gu, (size_t)E * 2 * IM * C, 4);
    const float *wdn = sdp_cl_f32_view(buffers[3], s->off_down, (size_t)E * C * IM, 5);
    float *G = fl & MOE_GRAD ? SDP_VECF(buffers[ia + 1]) : NULL;
    /* scratch: dy and dxp (S, C), dgu (S, 2IM), dh (S, IM), dwts (S), dprobs and dlogits (N, E) */
    size_t n6 = 2 * S * C + S * 3 * IM + S + 2 * (size_t)N * E;
    float *dy = sdp_cl_scratch(6, n6 * sizeof(float)), *dxp = dy + S * C, *dgu = dxp + S * C;
    float *dh = dgu + S * 2 * IM, *dwts = dh + S * IM, *dprobs = dwts + S;
    float *dlogits = dprobs + (size_t)N * E;
    /* a frozen base (LoRA) has no weight gradient */
    float *gr = G ? G + s->off_router : NULL, *ggu = G ? G + s->off_gu : NULL;
    float *gdn = G ? G + s->off_down : NULL;
    sdp_cpu_moe_combine_bwd(dy, dwts, dout, k.y, &k.r, C);
    sdp_cpu_moe_experts_bwd(dxp, ggu, gdn, dgu, dh, dy, k.xp, k.gu, k.h, wgu, wdn, &k.r, C, IM);
    memset(dx, 0, (size_t)N * C * sizeof(float));
    sdp_cpu_moe_scatter_bwd(dx, dxp, &k.r, C);
    sdp_cpu_moe_topk_bwd(dprobs, dwts, k.probs, &k.r, s->norm_topk);
    if (fl & MOE_AUX) {
        const double *st = (const double *)STARPU_VECTOR_GET_PTR(buffers[G ? ia + 2 : ia + 1]);
        sdp_cpu_moe_aux_bwd(dprobs, st, a->rows, N, E, a->aux_scale);
    }
    sdp_cpu_moe_softmax_bwd(dlogits, dprobs, k.probs, N, E);
    sdp_cpu_moe_router_bwd(dx, gr, dlogits, x, wr, N, C, E);
    sdp_cl_out_done(buffers[0], dx);
}

/* buffers: aux (1) f64 W, stats (2E) f64 R */
static void moe_aux_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_moe_args *a = cl_arg;
    const double *st = (const double *)STARPU_VECTOR_GET_PTR(buffers[1]);
    *(double *)STARPU_VECTOR_GET_PTR(buffers[0]) =
        sdp_cpu_moe_aux_loss(st, st + a->s.E, a->rows, a->s.E);
}

#ifdef SDP_CUDA_CODELETS /* fwd and bwd wait on their stream for the experts' row counts: not      \
                            async */
#define MOE_CUDA(f)       .cuda_funcs = { SDP_CUDA(f) },
#define MOE_CUDA_ASYNC(f) .cuda_funcs = { SDP_CUDA(f) }, .cuda_flags = { STARPU_CUDA_ASYNC },
#else
#define MOE_CUDA(f)
#define MOE_CUDA_ASYNC(f)
#endif
SDP_NAMED_CODELET(sdp_cl_moe_fwd, "moe_fwd", moe_fwd_cpu, MOE_CUDA(sdp_cl_moe_fwd_cuda));
SDP_NAMED_CODELET(sdp_cl_moe_bwd, "moe_bwd", moe_bwd_cpu, MOE_CUDA(sdp_cl_moe_bwd_cuda));
SDP_NAMED_CODELET(sdp_cl_moe_aux, "moe_aux", moe_aux_cpu, MOE_CUDA_ASYNC(sdp_cl_moe_aux_cuda));

/* Routed streaming's variants: buffer Wh, the host's working copy, is read where it lives (main
 * memory), never moved: the task copies only the routed experts out of it. */
#define NL STARPU_SPECIFIC_NODE_LOCAL
#define NH STARPU_SPECIFIC_NODE_CPU
#define MOE_ROUTED_CODELET(var, cl_name, cpu_fn, cuda, ...)                                        \
    static struct starpu_perfmodel var##_pm = {                                                    \
        .type = STARPU_HISTORY_BASED,                                                              \
        .symbol = "sdp_" cl_name "_routed_v1",                                                     \
        .footprint = sdp_cl_footprint,                                                             \
    };                                                                                             \
    struct starpu_codelet var = { .name = cl_name,                                                 \
                                  .cpu_funcs = { cpu_fn },                                         \
                                  .cpu_funcs_name = { #cpu_fn },                                   \
                                  cuda.nbuffers = STARPU_VARIABLE_NBUFFERS,                        \
                                  .specific_nodes = 1,                                             \
                                  .nodes = { __VA_ARGS__ },                                        \
                                  .model = &var##_pm }
MOE_ROUTED_CODELET(sdp_cl_moe_fwd_routed, "moe_fwd", moe_fwd_cpu, MOE_CUDA(sdp_cl_moe_fwd_cuda), NL,
                   NL, NL, NH, NL, NL, NL, NL);
MOE_ROUTED_CODELET(sdp_cl_moe_bwd_routed, "moe_bwd", moe_bwd_cpu, MOE_CUDA(sdp_cl_moe_bwd_cuda), NL,
                   NL, NL, NL, NH, NL, NL, NL);

static struct sdp_moe_args *moe_args(const struct sdp_moe_shape *s, int flags)
{
    struct sdp_moe_args *a = sdp_cl_args_alloc(sizeof(*a));
    a->s = *s;
    a->key.d[0] = s->N;
    a->key.d[1] = s->C;
    a->key.d[2] = s->E;
    a->key.d[3] = s->K;
    a->key.d[4] = s->IM;
    a->key.d[5] = flags;
    return a;
}

/* GEMM flops of the experts' rows and the router, one way */
static double moe_flops(const struct sdp_moe_shape *s)
{
    return 2.0 * s->N * s->C * (s->E + 3.0 * s->K * s->IM);
}

int sdp_task_moe_fwd(const struct sdp_task_opts *o, const struct sdp_moe_shape *s,
                     sdp_rt_tensor_t *acts, sdp_rt_tensor_t *h2, sdp_rt_tensor_t *W,
                     sdp_rt_tensor_t *Wh, sdp_rt_tensor_t *out, sdp_rt_tensor_t *xmid,
                     sdp_rt_tensor_t *stats, sdp_rt_tensor_t *used, int first_layer, int first_mb,
                     int last_mb)
{
    struct sdp_cl_buf b[8] = { { acts, STARPU_W }, { h2, STARPU_R }, { W, STARPU_R } };
    int n = 3, fl = 0;
    if (Wh) { /* it writes the routed experts into W */
        b[2].mode = STARPU_RW;
        b[n++] = (struct sdp_cl_buf){ Wh, STARPU_R };
        fl |= MOE_ROUTED;
    }
    if (out) {
        b[n++] = (struct sdp_cl_buf){ out, STARPU_W };
        b[n++] = (struct sdp_cl_buf){ xmid, STARPU_R };
        fl |= MOE_OUT;
    }
    if (stats) {
        b[n++] = (struct sdp_cl_buf){ stats, first_layer ? STARPU_W : STARPU_RW };
        b[n++] = (struct sdp_cl_buf){ used, STARPU_RW };
        fl |= MOE_TRACK | (first_layer ? MOE_FIRST_L : 0) | (first_mb ? MOE_FIRST_M : 0) |
              (last_mb ? MOE_LAST_M : 0);
    }
    return sdp_cl_submit(Wh ? &sdp_cl_moe_fwd_routed : &sdp_cl_moe_fwd, o, moe_args(s, fl),
                         sizeof(struct sdp_moe_args), moe_flops(s), b, n);
}

int sdp_task_moe_bwd(const struct sdp_task_opts *o, const struct sdp_moe_shape *s,
                     sdp_rt_tensor_t *dh2, sdp_rt_tensor_t *dres, sdp_rt_tensor_t *h2,
                     sdp_rt_tensor_t *W, sdp_rt_tensor_t *Wh, sdp_rt_tensor_t *acts,
                     sdp_rt_tensor_t *G, sdp_rt_tensor_t *stats, float aux_scale, double rows)
{
    struct sdp_cl_buf b[8] = {
        { dh2, STARPU_W }, { dres, STARPU_R }, { h2, STARPU_R }, { W, STARPU_R }
    };
    int n = 4, fl = 0;
    struct sdp_moe_args *a;
    if (Wh) { /* it writes the routed experts into W */
        b[3].mode = STARPU_RW;
        b[n++] = (struct sdp_cl_buf){ Wh, STARPU_R };
        fl |= MOE_ROUTED;
    }
    b[n++] = (struct sdp_cl_buf){ acts, STARPU_R };
    if (G) {
        b[n++] = (struct sdp_cl_buf){ G, STARPU_RW };
        fl |= MOE_GRAD;
    }
    if (stats) {
        b[n++] = (struct sdp_cl_buf){ stats, STARPU_R };
        fl |= MOE_AUX;
    }
    a = moe_args(s, fl);
    a->aux_scale = aux_scale;
    a->rows = rows;
    return sdp_cl_submit(Wh ? &sdp_cl_moe_bwd_routed : &sdp_cl_moe_bwd, o, a, sizeof(*a),
                         2.0 * moe_flops(s), b, n);
}

int sdp_task_moe_aux(const struct sdp_task_opts *o, sdp_rt_tensor_t *aux, sdp_rt_tensor_t *stats,
                     int E, double rows)
{
    struct sdp_moe_shape s = { .E = E };
    struct sdp_cl_buf b[] = { { aux, STARPU_W }, { stats, STARPU_R } };
    struct sdp_moe_args *a = moe_args(&s, 0);
    a->rows = rows;
    return sdp_cl_submit(&sdp_cl_moe_aux, o, a, sizeof(*a), 4.0 * E, b, 2);
}
