/* SPDX-License-Identifier: MIT */
/* The CUDA implementation of moe_fwd / moe_bwd / moe_aux (codelets/moe.c): the same buffers, the
 * same kept vector, the kernels of codelets/cuda/moe*.cu in the order of the CPU implementation.
 * The kernels compute in fp32: bf16 activations are widened into the workspace and the outputs
 * rounded back (as sdp_cl_in / sdp_cl_out do on the CPU); bf16 weights are widened per expert.
 * moe_fwd and moe_bwd wait once on their stream, for the experts' row counts (the GEMM sizes are
 * host arguments of cuBLAS).  Tests: tests/kernels/test_cuda_moe.c (the kernels),
 * tests/e2e/test_e2e_moe_gpu.sh (training on one GPU against CPU workers). */
#include "config.h"

#include <starpu.h>
#include <starpu_cublas_v2.h>

#include "codelets/cl_common.h"
#include "codelets/cuda/sdp_cuda_kernels.h"
#include "codelets/moe_internal.h"
#include "runtime/init.h"

static struct sdp_cuda_moe_routing dev_routing(const struct sdp_moe_routing *r)
{
    return (struct sdp_cuda_moe_routing){ r->N,       r->E,    r->K,     r->ids, r->counts,
                                          r->offsets, r->rows, r->where, r->wts };
}

/* Carves 64-byte aligned pieces of n floats out of a workspace (base NULL: only counts). */
struct carve {
    float *base;
    size_t at;
};

static float *take(struct carve *c, size_t n)
{
    float *p = c->base ? c->base + c->at : NULL;
    c->at += (n + 15) / 16 * 16;
    return p;
}

/* The task's fp32 operands: its activations (widened when stored in bf16) and weights. */
struct moe_io {
    const float *wr;       /* router (E, C) f32 */
    const void *wgu, *wdn; /* experts, in wdt */
    int wdt;               /* SDP_CUDA_F32 or SDP_CUDA_BF16 */
    float *wtmp;           /* one expert's weights in f32 (bf16 weights) */
    int32_t *off;          /* host (E + 1): the experts' first rows */
    struct sdp_cuda_moe_routing r;
};

/* An f32 view of activation buffer vec: itself, or widened into dst. */
static const float *f32_of(void *vec, float *dst, cudaStream_t st)
{
    if (SDP_CL_DT(vec) == SDP_CUDA_F32)
        return SDP_VECF(vec);
    sdp_cuda_cast_f32(dst, SDP_VEC(vec), SDP_CUDA_BF16, STARPU_VECTOR_GET_NX(vec), st);
    return dst;
}

/* Weights of buffer W, the router widened into c's workspace for bf16; wtmp carved there too. */
static void weights_of(struct moe_io *io, void *W, const struct sdp_moe_shape *s, struct carve *c,
                       cudaStream_t st)
{
    const size_t es = STARPU_VECTOR_GET_ELEMSIZE(W);
    const char *w = (const char *)SDP_VEC(W);
    io->wdt = SDP_CL_DT(W);
    io->wgu = w + s->off_gu * es;
    io->wdn = w + s->off_down * es;
    io->wr = (const float *)(const void *)(w + s->off_router * es);
    io->wtmp = NULL;
    if (io->wdt == SDP_CUDA_BF16) {
        float *wr = take(c, (size_t)s->E * s->C);
        io->wtmp = take(c, (size_t)3 * s->IM * s->C);
        if (wr)
            sdp_cuda_cast_f32(wr, w + s->off_router * es, SDP_CUDA_BF16, (size_t)s->E * s->C, st);
        io->wr = wr;
    }
}

/* Routed streaming (MOE_ROUTED): the experts with rows (off, on the host) from the host's working
 * copy Wh (main memory) into the compute copy W on this GPU, on stream st, but those an earlier
 * micro-batch of the step copied already (had, on the host; NULL: none), counted with the bus's
 * bytes (StarPU's counters do not see them). */
static void routed_copy(void *W, const void *Wh, const struct sdp_moe_shape *s, const int32_t *off,
                        const int32_t *had, cudaStream_t st)
{
    const size_t es = STARPU_VECTOR_GET_ELEMSIZE(W);
    unsigned long long bytes = 0;
    for (int e = 0; e < s->E; e++) {
        size_t at[2], n[2];
        if (off[e + 1] == off[e] || (had && had[e]))
            continue;
        sdp_cl_moe_expert_slices(s, e, at, n);
        for (int i = 0; i < 2; i++) {
            SDP_CUDA_CHECK(cudaMemcpyAsync((char *)SDP_VEC(W) + at[i] * es,
                                           (const char *)SDP_VEC(Wh) + at[i] * es, n[i] * es,
                                           cudaMemcpyHostToDevice, st));
            bytes += n[i] * es;
        }
    }
    sdp_rt_bus_count_task((int)starpu_worker_get_local_memory_node(), 1, bytes);
}

/* buffers: acts W, h2 (N, C) act R, W R (RW routed), [Wh R in main memory: routed],
 * [out (N, C) act W, xmid (N, C) act R], [stats (2E) f64 RW, used (2E) i32 RW] */
void sdp_cl_moe_fwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_moe_args *a = cl_arg;
    const struct sdp_moe_shape *s = &a->s;
    const int N = s->N, C = s->C, E = s->E, IM = s->IM, fl = a->key.d[5];
    const size_t NC = (size_t)N * C;
    cudaStream_t st = starpu_cuda_get_local_stream();
    cublasHandle_t h = starpu_cublas_get_local_handle();
    struct sdp_moe_acts k;
    struct moe_io io;
    struct carve c = { NULL, 0 };
    float *logits, *xw, *outw, *xmidw;
    int b = fl & MOE_ROUTED ? 4 : 3;
    sdp_cl_moe_layout(&k, SDP_VECF(buffers[0]), s);
    io.r = dev_routing(&k.r);
    for (int pass = 0; pass < 2; pass++) { /* sizes, then pointers into the workspace */
        logits = take(&c, (size_t)N * E);
        xw = take(&c, NC);
        outw = take(&c, NC);
        xmidw = take(&c, NC);
        weights_of(&io, buffers[2], s, &c, st);
        if (pass == 0)
            c = (struct carve){ sdp_cl_cuda_ws(0, c.at * sizeof(float)), 0 };
    }
    io.off = sdp_cl_scratch(0, ((size_t)E + 1) * sizeof(int32_t));
    int32_t *had = NULL; /* a later micro-batch: the experts the step's earlier ones copied */
    const int ih = sdp_cl_moe_had_buf(b, fl);
    if (ih >= 0) {
        had = sdp_cl_scratch(1, (size_t)E * sizeof(int32_t));
        const void *used = (const void *)STARPU_VECTOR_GET_PTR(buffers[ih]);
        SDP_CUDA_CHECK(
            cudaMemcpyAsync(had, used, (size_t)E * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
    }
    const float *x = f32_of(buffers[1], xw, st);
    sdp_cuda_moe_router_fwd(h, logits, k.probs, &io.r, x, io.wr, C, s->norm_topk, st);
    sdp_cuda_moe_permute(&io.r, st);
    sdp_cuda_moe_offsets_host(io.off, &io.r, st); /* waits for the stream: had is in too */
    if (fl & MOE_ROUTED)
        routed_copy(buffers[2], buffers[3], s, io.off, had, st);
    sdp_cuda_moe_gather(k.xp, x, &io.r, C, st);
    sdp_cuda_moe_experts_fwd(h, k.y, k.gu, k.h, k.xp, io.wgu, io.wdn, io.wdt, io.wtmp, io.off, E, C,
                             IM, st);
    if (fl & MOE_OUT) { /* out = xmid + the block's output, as the decoder layer adds them */
        void *out = buffers[b];
        float *o = SDP_CL_DT(out) == SDP_CUDA_F32 ? SDP_VECF(out) : outw;
        sdp_cuda_moe_combine(o, f32_of(buffers[b + 1], xmidw, st), k.y, &io.r, C, st);
        if (o == outw)
            sdp_cuda_cast(SDP_VEC(out), SDP_CUDA_BF16, o, NC, st);
        b += 2;
    }
    if (fl & MOE_TRACK) {
        double *stats = (double *)STARPU_VECTOR_GET_PTR(buffers[b]);
        int32_t *used = (int32_t *)STARPU_VECTOR_GET_PTR(buffers[b + 1]);
        if (fl & MOE_FIRST_L)
            SDP_CUDA_CHECK(cudaMemsetAsync(stats, 0, 2 * (size_t)E * sizeof(*stats), st));
        sdp_cuda_moe_aux_stats(stats, stats + E, used, !!(fl & MOE_FIRST_M), !!(fl & MOE_LAST_M),
                               k.probs, &io.r, st);
    }
    SDP_CUDA_CHECK(cudaGetLastError());
    SDP_CUDA_CHECK(cudaStreamSynchronize(st)); /* not STARPU_CUDA_ASYNC: done when it returns */
}

/* The backward's fp32 scratch: dy and dxp (S, C), dgu (S, 2IM), dh (S, IM), dwts (S), dprobs
 * and dlogits (N, E), and the f32 copies of bf16 activations. */
struct moe_bwd_ws {
    float *dy, *dxp, *dgu, *dh, *dwts, *dprobs, *dlogits, *dxw, *doutw, *xw;
};

static void bwd_carve(struct moe_bwd_ws *w, struct carve *c, const struct sdp_moe_shape *s)
{
    const size_t S = (size_t)s->N * s->K, NC = (size_t)s->N * s->C, NE = (size_t)s->N * s->E;
    w->dy = take(c, S * s->C);
    w->dxp = take(c, S * s->C);
    w->dgu = take(c, S * 2 * s->IM);
    w->dh = take(c, S * s->IM);
    w->dwts = take(c, S);
    w->dprobs = take(c, NE);
    w->dlogits = take(c, NE);
    w->dxw = take(c, NC);
    w->doutw = take(c, NC);
    w->xw = take(c, NC);
}

/* buffers: dh2 (N, C) act W, dres (N, C) act R, h2 (N, C) act R, W R (RW routed), [Wh R in
 * main memory: routed], acts R, [G f32 RW], [stats (2E) f64 R] */
void sdp_cl_moe_bwd_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_moe_args *a = cl_arg;
    const struct sdp_moe_shape *s = &a->s;
    const int N = s->N, C = s->C, E = s->E, IM = s->IM, fl = a->key.d[5];
    const size_t NC = (size_t)N * C;
    cudaStream_t st = starpu_cuda_get_local_stream();
    cublasHandle_t h = starpu_cublas_get_local_handle();
    struct sdp_moe_acts k;
    struct moe_bwd_ws w;
    struct moe_io io;
    struct carve c = { NULL, 0 };
    const int ia = fl & MOE_ROUTED ? 5 : 4; /* acts, then [G], [stats] */
    float *G = fl & MOE_GRAD ? SDP_VECF(buffers[ia + 1]) : NULL;
    sdp_cl_moe_layout(&k, SDP_VECF(buffers[ia]), s);
    io.r = dev_routing(&k.r);
    for (int pass = 0; pass < 2; pass++) {
        bwd_carve(&w, &c, s);
        weights_of(&io, buffers[3], s, &c, st);
        if (pass == 0)
            c = (struct carve){ sdp_cl_cuda_ws(0, c.at * sizeof(float)), 0 };
    }
    io.off = sdp_cl_scratch(0, ((size_t)E + 1) * sizeof(int32_t));
    sdp_cuda_moe_offsets_host(io.off, &io.r, st); /* first: the stream holds little yet */
    if (fl & MOE_ROUTED)
        routed_copy(buffers[3], buffers[4], s, io.off, NULL, st);
    void *dh2 = buffers[0];
    float *dx = SDP_CL_DT(dh2) == SDP_CUDA_F32 ? SDP_VECF(dh2) : w.dxw;
    const float *dout = f32_of(buffers[1], w.doutw, st), *x = f32_of(buffers[2], w.xw, st);
    sdp_cuda_moe_combine_bwd(w.dy, w.dwts, dout, k.y, &io.r, C, st);
    sdp_cuda_moe_experts_bwd(h, w.dxp, G ? G + s->off_gu : NULL, G ? G + s->off_down : NULL, w.dgu,
                             w.dh, w.dy, k.xp, k.gu, k.h, io.wgu, io.wdn, io.wdt, io.wtmp, io.off,
                             E, C, IM, st);
    SDP_CUDA_CHECK(cudaMemsetAsync(dx, 0, NC * sizeof(float), st));
    sdp_cuda_moe_scatter_bwd(dx, w.dxp, &io.r, C, st);
    sdp_cuda_moe_topk_bwd(w.dprobs, w.dwts, k.probs, &io.r, s->norm_topk, st);
    if (fl & MOE_AUX) {
        const double *stats = (const double *)STARPU_VECTOR_GET_PTR(buffers[G ? ia + 2 : ia + 1]);
        sdp_cuda_moe_aux_bwd(w.dprobs, stats, a->rows, N, E, a->aux_scale, st);
    }
    sdp_cuda_moe_softmax_bwd(w.dlogits, w.dprobs, k.probs, N, E, st);
    sdp_cuda_moe_router_bwd(h, dx, G ? G + s->off_router : NULL, w.dlogits, x, io.wr, N, C, E, st);
    if (dx == w.dxw)
        sdp_cuda_cast(SDP_VEC(dh2), SDP_CUDA_BF16, dx, NC, st);
    SDP_CUDA_CHECK(cudaGetLastError());
    SDP_CUDA_CHECK(cudaStreamSynchronize(st)); /* not STARPU_CUDA_ASYNC: done when it returns */
}

/* buffers: aux (1) f64 W, stats (2E) f64 R */
void sdp_cl_moe_aux_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_moe_args *a = cl_arg;
    const double *stats = (const double *)STARPU_VECTOR_GET_PTR(buffers[1]);
    sdp_cuda_moe_aux_loss((double *)STARPU_VECTOR_GET_PTR(buffers[0]), stats, stats + a->s.E,
                          a->rows, a->s.E, starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
