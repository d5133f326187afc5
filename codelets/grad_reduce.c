/* SPDX-License-Identifier: MIT */
/* grad_reduce: out += in_1 + ... + in_{R-1}, element by element, in rank order.  The gradient
 * return of data-parallel ranks: out is rank 0's gradient chunk, in_r rank r's.  Placed on a CPU
 * worker it is the CPU-reduction route (each rank's chunk crosses PCIe and the host sums them);
 * pinned to rank 0's GPU it is the GPU-reduction route (StarPU brings the other ranks' chunks to
 * that GPU, peer to peer where the topology allows, and one reduced chunk returns).  Both give the
 * same bits: ((g0 + g1) + g2) + ... in fp32.
 * grad_pack: the bf16 gradient return (sdp_state_create_ex): a group's final fp32
 * gradient, read whole where it was made, gives each chunk's squared norm (sumsq's kernel, the same
 * bits) and its bf16 copy (nearest even, NaN kept), so half the bytes cross PCIe and AdamW reads
 * half from DRAM.  One task per group, on the whole vector: the fp32 accumulator is never split
 * into chunks, so discarding it afterwards gathers nothing to the host.
 * grad_sumsq: grad_pack's squared norms alone, for the fp32 return.  One task reads a group's
 * gradient whole where it was made; per-chunk sumsq tasks read its chunks, and StarPU splits a
 * vector into chunks on its home node (the host), so the whole gradient would go down to the host
 * and each chunk come back up to the GPU for its sum (bench/results/2026-11-30-h200-session4.md).
 * grad_chunk: the fp32 return chunk by chunk: chunk c's range of a group's final gradient, read
 * whole where it was made (the same reason), copied into a vector of its own on the host
 * (specific_nodes), which AdamW reads there: on a GPU the task's copy is the chunk's GPU-to-host
 * transfer, one chunk at a time while earlier chunks are updated, and its start and end bound
 * that transfer in the trace; the accumulator is then discarded, unsplit.  Of a sparse layer's
 * experts (routed, docs/moe.md) it copies only the experts that received a token in the step, the
 * gradient AdamW reads; the bf16 return's packed chunks come down the same way.
 * Tests: tests/e2e/test_e2e_ranks.sh, tests/e2e/test_e2e_grad_dtype.sh,
 * tests/e2e/test_e2e_chunks.sh. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "runtime/init.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_grad_reduce_args {
    struct sdp_shape_key key; /* n, number of inputs */
};

/* buffers: out (n) f32 RW, in_1 .. in_k (n) f32 R */
static void grad_reduce_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_reduce_args *a = cl_arg;
    size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
    float *out = SDP_VECF(buffers[0]);
    for (int r = 1; r <= a->key.d[1]; r++) {
        const float *in = SDP_VECF(buffers[r]);
        for (size_t i = 0; i < n; i++)
            out[i] += in[i];
    }
}

#ifdef SDP_HAVE_CUDA
static void grad_reduce_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_reduce_args *a = cl_arg;
    size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
    for (int r = 1; r <= a->key.d[1]; r++)
        sdp_cuda_add_f32(SDP_VECF(buffers[0]), SDP_VECF(buffers[r]), n,
                         starpu_cuda_get_local_stream());
}
#endif

static struct starpu_perfmodel sdp_pm_grad_reduce = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_grad_reduce_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_grad_reduce = {
    .name = "grad_reduce",
    .cpu_funcs = { grad_reduce_cpu },
    .cpu_funcs_name = { "grad_reduce_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(grad_reduce_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_grad_reduce,
};

int sdp_task_grad_reduce(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                         sdp_rt_tensor_t *const *in, int nin)
{
    struct sdp_cl_buf b[SDP_MAX_RANKS];
    struct sdp_grad_reduce_args *a;
    size_t n = sdp_rt_tensor_nelems(out);
    if (nin < 1 || nin >= SDP_MAX_RANKS)
        return sdp_err(-EINVAL, "grad_reduce of %d inputs (1..%d)", nin, SDP_MAX_RANKS - 1);
    b[0].t = out;
    b[0].mode = STARPU_RW;
    for (int r = 0; r < nin; r++) {
        if (sdp_rt_tensor_nelems(in[r]) != n || sdp_rt_tensor_dtype(in[r]) != SDP_F32 ||
            sdp_rt_tensor_dtype(out) != SDP_F32)
            return sdp_err(-EINVAL, "grad_reduce: input %d (%s) does not match %s", r + 1,
                           sdp_rt_tensor_name(in[r]), sdp_rt_tensor_name(out));
        b[r + 1].t = in[r];
        b[r + 1].mode = STARPU_R;
    }
    /* the GPU route, with NCCL set up for these ranks: one task drives them all (nccl.c) */
    if (o->on_rank && sdp_tasks_nccl_ranks() == nin + 1)
        return sdp_task_grad_reduce_nccl(o, out, in, nin);
    a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = (int)n;
    a->key.d[1] = nin;
    return sdp_cl_submit(&sdp_cl_grad_reduce, o, a, sizeof(*a), (double)n * nin, b, nin + 1);
}

/* ---- grad_pack ---- */
struct sdp_grad_pack_args {
    struct sdp_shape_key key; /* group elements (low, high 31 bits), chunks, pack */
    int nchunks, pack;        /* pack 0: grad_sumsq (no bf16 chunks) */
    size_t off[];             /* first element of each chunk, then the group's length */
};

/* buffers: grad (n) f32 R, the chunks of ret (bf16) W when packing, then one sumsq (1) f64 W per
 * chunk */
static void grad_pack_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_pack_args *a = cl_arg;
    const float *g = SDP_VECF(buffers[0]);
    for (int c = 0; c < a->nchunks; c++) {
        size_t n = a->off[c + 1] - a->off[c];
        *(double *)STARPU_VECTOR_GET_PTR(buffers[1 + a->pack * a->nchunks + c]) =
            sdp_cpu_sumsq(g + a->off[c], n);
        if (a->pack)
            sdp_cpu_cast_bf16(SDP_VEC(buffers[1 + c]), g + a->off[c], n);
    }
}

#ifdef SDP_HAVE_CUDA
static void grad_pack_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_pack_args *a = cl_arg;
    const int nc = a->nchunks;
    double **sumsq = malloc((size_t)nc * sizeof(*sumsq));
    uint16_t **dst = a->pack ? malloc((size_t)nc * sizeof(*dst)) : NULL;
    SDP_ASSERT(sumsq && (dst || !a->pack), "out of memory for the pointers of %d chunks", nc);
    for (int c = 0; c < nc; c++) {
        sumsq[c] = (double *)STARPU_VECTOR_GET_PTR(buffers[1 + a->pack * nc + c]);
        if (a->pack)
            dst[c] = (uint16_t *)SDP_VEC(buffers[1 + c]);
    }
    /* the same kernel and order as sumsq on each chunk: the same bits; and cast's bf16 bits.  All
     * chunks in one pass over g, two launches per 64 chunks (sumsq.cu) */
    sdp_cuda_sumsq_cast(sumsq, dst, SDP_VECF(buffers[0]), a->off, nc,
                        sdp_cl_cuda_ws(0, sdp_cuda_sumsq_cast_ws(a->off, nc)),
                        starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
    free(sumsq);
    free(dst);
}
#endif

/* grad_pack, grad_pack_early, grad_pack_mlp and grad_sumsq: one kernel pair, four names (and
 * perfmodels), so the trace and the checker tell them apart.  grad_pack_early is the pack of a
 * gradient final only outside some rows (the early update of the tied embedding, graph/step.c);
 * grad_pack_mlp the pack of a layer's last chunks, those of its MLP weights alone, final before the
 * rest of the layer's backward (the early MLP update, graph/step.c). */
#ifdef SDP_CUDA_CODELETS
#define PACK_CUDA .cuda_funcs = { SDP_CUDA(grad_pack_cuda) }, .cuda_flags = { STARPU_CUDA_ASYNC },
#else
#define PACK_CUDA
#endif
SDP_NAMED_CODELET(sdp_cl_grad_pack, "grad_pack", grad_pack_cpu, PACK_CUDA);
SDP_NAMED_CODELET(sdp_cl_grad_pack_early, "grad_pack_early", grad_pack_cpu, PACK_CUDA);
SDP_NAMED_CODELET(sdp_cl_grad_pack_mlp, "grad_pack_mlp", grad_pack_cpu, PACK_CUDA);
SDP_NAMED_CODELET(sdp_cl_grad_sumsq, "grad_sumsq", grad_pack_cpu, PACK_CUDA);

/* grad_pack (ret given) or grad_sumsq (ret NULL) of chunks [c0, c1) of the chunked f32 gradient
 * grad (ret and sumsq indexed by chunk) */
static int pack_submit(struct starpu_codelet *cl, const struct sdp_task_opts *o,
                       sdp_rt_tensor_t *grad, sdp_rt_tensor_t *const *ret,
                       sdp_rt_tensor_t *const *sumsq, int c0, int c1)
{
    const char *what = cl->name;
    int nc, pack = ret != NULL, nb, rc;
    size_t n = sdp_rt_tensor_nelems(grad), argsize;
    struct sdp_grad_pack_args *a;
    struct sdp_cl_buf *b;
    if (sdp_rt_tensor_nparts(grad) < 1 || sdp_rt_tensor_dtype(grad) != SDP_F32)
        return sdp_err(-EINVAL, "%s: %s is not a chunked f32 gradient", what,
                       sdp_rt_tensor_name(grad));
    if (c1 < 0)
        c1 = sdp_rt_tensor_nparts(grad);
    if (c0 < 0 || c0 >= c1 || c1 > sdp_rt_tensor_nparts(grad))
        return sdp_err(-EINVAL, "%s: chunks [%d, %d) of %s, which has %d", what, c0, c1,
                       sdp_rt_tensor_name(grad), sdp_rt_tensor_nparts(grad));
    nc = c1 - c0;
    for (int c = c0; pack && c < c1; c++)
        if (sdp_rt_tensor_dtype(ret[c]) != SDP_BF16 ||
            sdp_rt_tensor_nelems(ret[c]) != sdp_rt_tensor_nelems(sdp_rt_tensor_part(grad, c)))
            return sdp_err(-EINVAL, "%s: %s (bf16) does not match chunk %d of %s", what,
                           sdp_rt_tensor_name(ret[c]), c, sdp_rt_tensor_name(grad));
    nb = 1 + (1 + pack) * nc;
    b = calloc((size_t)nb, sizeof(*b));
    if (!b)
        return sdp_err(-ENOMEM, "%s of %d chunks", what, nc);
    argsize = sizeof(*a) + (size_t)(nc + 1) * sizeof(size_t);
    a = sdp_cl_args_alloc(argsize);
    a->off[nc] = c1 < sdp_rt_tensor_nparts(grad) ? sdp_rt_tensor_part_offset(grad, c1) : n;
    n = a->off[nc] - sdp_rt_tensor_part_offset(grad, c0); /* the elements packed */
    a->key.d[0] = (int)(n & 0x7fffffff);
    a->key.d[1] = (int)(n >> 31);
    a->key.d[2] = nc;
    a->key.d[3] = pack;
    a->nchunks = nc;
    a->pack = pack;
    b[0] = (struct sdp_cl_buf){ grad, STARPU_R };
    for (int i = 0; i < nc; i++) {
        a->off[i] = sdp_rt_tensor_part_offset(grad, c0 + i);
        if (pack)
            b[1 + i] = (struct sdp_cl_buf){ ret[c0 + i], STARPU_W };
        b[1 + pack * nc + i] = (struct sdp_cl_buf){ sumsq[c0 + i], STARPU_W };
    }
    rc = sdp_cl_submit(cl, o, a, argsize, (2.0 + pack) * n, b, nb);
    free(b);
    return rc;
}

int sdp_task_grad_pack(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                       sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq)
{
    return pack_submit(&sdp_cl_grad_pack, o, grad, ret, sumsq, 0, -1);
}

int sdp_task_grad_pack_head(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                            sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq, int c1)
{
    return pack_submit(&sdp_cl_grad_pack, o, grad, ret, sumsq, 0, c1);
}

int sdp_task_grad_pack_mlp(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                           sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq, int c0)
{
    return pack_submit(&sdp_cl_grad_pack_mlp, o, grad, ret, sumsq, c0, -1);
}

int sdp_task_grad_pack_early(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                             sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq)
{
    return pack_submit(&sdp_cl_grad_pack_early, o, grad, ret, sumsq, 0, -1);
}

int sdp_task_grad_sumsq(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                        sdp_rt_tensor_t *const *sumsq)
{
    return pack_submit(&sdp_cl_grad_sumsq, o, grad, NULL, sumsq, 0, -1);
}

/* ---- grad_pack_rows ---- */
/* The final pack of the tied embedding after its early update (graph/step.c, early_embed): every
 * chunk's squared norm, as grad_pack, but only the rows of the step's tokens in bf16, packed back
 * to back: the gradient the update of those rows reads, which alone then crosses PCIe. */
struct sdp_grad_pack_rows_args {
    struct sdp_shape_key key; /* group elements (low, high 31 bits), chunks, packed elements */
    int nchunks, nret;
    size_t d[]; /* off[nchunks + 1], nseg[nchunks], then each chunk's (offset, nelems) pairs */
};

/* buffers: grad (n) f32 R, the packed chunks (bf16) W of the chunks with segments, then one sumsq
 * (1) f64 W per chunk */
static void grad_pack_rows_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_pack_rows_args *a = cl_arg;
    const int nc = a->nchunks;
    const size_t *off = a->d, *nseg = off + nc + 1, *seg = nseg + nc;
    const float *g = SDP_VECF(buffers[0]);
    for (int c = 0, r = 0; c < nc; c++) {
        *(double *)STARPU_VECTOR_GET_PTR(buffers[1 + a->nret + c]) =
            sdp_cpu_sumsq(g + off[c], off[c + 1] - off[c]);
        if (!nseg[c])
            continue;
        uint16_t *dst = SDP_VEC(buffers[1 + r++]);
        for (size_t k = 0, run = 0; k < nseg[c]; k++, seg += 2) {
            sdp_cpu_cast_bf16(dst + run, g + off[c] + seg[0], seg[1]);
            run += seg[1];
        }
    }
}

#ifdef SDP_HAVE_CUDA
static void grad_pack_rows_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_pack_rows_args *a = cl_arg;
    const int nc = a->nchunks;
    const size_t *off = a->d, *nseg = off + nc + 1, *seg = nseg + nc;
    const float *g = SDP_VECF(buffers[0]);
    cudaStream_t s = starpu_cuda_get_local_stream();
    double **sumsq = malloc((size_t)nc * sizeof(*sumsq));
    size_t most = 0;
    for (int c = 0; c < nc; c++)
        most = nseg[c] > most ? nseg[c] : most;
    size_t *tab = malloc((most ? most : 1) * 3 * sizeof(*tab));
    SDP_ASSERT(sumsq && tab, "out of memory for the pack of %d chunks", nc);
    for (int c = 0; c < nc; c++)
        sumsq[c] = (double *)STARPU_VECTOR_GET_PTR(buffers[1 + a->nret + c]);
    /* the norms as grad_pack computes them (the same bits), no full bf16 copy */
    sdp_cuda_sumsq_cast(sumsq, NULL, g, off, nc, sdp_cl_cuda_ws(0, sdp_cuda_sumsq_cast_ws(off, nc)),
                        s);
    for (int c = 0, r = 0; c < nc; c++) {
        if (!nseg[c])
            continue;
        for (size_t k = 0, run = 0; k < nseg[c]; k++, seg += 2) {
            tab[3 * k] = seg[0];
            tab[3 * k + 1] = run;
            tab[3 * k + 2] = seg[1];
            run += seg[1];
        }
        sdp_cuda_gather_cast((uint16_t *)SDP_VEC(buffers[1 + r++]), g + off[c], tab, (int)nseg[c],
                             s);
    }
    SDP_CUDA_CHECK(cudaGetLastError());
    free(sumsq);
    free(tab);
}
#define PACK_ROWS_CUDA .cuda_funcs = { grad_pack_rows_cuda }, .cuda_flags = { STARPU_CUDA_ASYNC },
#elif defined(SDP_SIMGRID)
#define PACK_ROWS_CUDA                                                                             \
    .cuda_funcs = { SDP_CUDA(grad_pack_rows_cuda) }, .cuda_flags = { STARPU_CUDA_ASYNC },
#else
#define PACK_ROWS_CUDA
#endif

SDP_NAMED_CODELET(sdp_cl_grad_pack_rows, "grad_pack_rows", grad_pack_rows_cpu, PACK_ROWS_CUDA);

int sdp_task_grad_pack_rows(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                            sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq,
                            struct sdp_adamw_segment *const *segs, const int *nsegs)
{
    int nc = sdp_rt_tensor_nparts(grad), nret = 0, nb, rc;
    size_t n = sdp_rt_tensor_nelems(grad), total = 0, npairs = 0, argsize;
    struct sdp_grad_pack_rows_args *a;
    struct sdp_cl_buf *b;
    if (nc < 1 || sdp_rt_tensor_dtype(grad) != SDP_F32)
        return sdp_err(-EINVAL, "grad_pack_rows: %s is not a chunked f32 gradient",
                       sdp_rt_tensor_name(grad));
    for (int c = 0; c < nc; c++) {
        size_t covered = 0, cn = sdp_rt_tensor_nelems(sdp_rt_tensor_part(grad, c));
        for (int k = 0; k < nsegs[c]; k++) {
            if (segs[c][k].offset + segs[c][k].nelems > cn)
                return sdp_err(-EINVAL, "grad_pack_rows: segment %d of chunk %d ends past it", k,
                               c);
            covered += segs[c][k].nelems;
        }
        if ((nsegs[c] > 0) != (ret[c] != NULL) ||
            (ret[c] &&
             (sdp_rt_tensor_dtype(ret[c]) != SDP_BF16 || sdp_rt_tensor_nelems(ret[c]) < covered)))
            return sdp_err(-EINVAL, "grad_pack_rows: chunk %d: %d segments of %zu elements, %s", c,
                           nsegs[c], covered,
                           ret[c] ? sdp_rt_tensor_name(ret[c]) : "no packed chunk");
        nret += ret[c] != NULL;
        npairs += (size_t)nsegs[c];
        total += covered;
    }
    nb = 1 + nret + nc;
    b = calloc((size_t)nb, sizeof(*b));
    if (!b)
        return sdp_err(-ENOMEM, "grad_pack_rows of %d chunks", nc);
    argsize = sizeof(*a) + ((size_t)2 * nc + 1 + 2 * npairs) * sizeof(size_t);
    a = sdp_cl_args_alloc(argsize);
    a->key.d[0] = (int)(n & 0x7fffffff);
    a->key.d[1] = (int)(n >> 31);
    a->key.d[2] = nc;
    a->key.d[3] = (int)(total & 0x7fffffff);
    a->nchunks = nc;
    a->nret = nret;
    size_t *off = a->d, *nseg = off + nc + 1, *seg = nseg + nc;
    b[0] = (struct sdp_cl_buf){ grad, STARPU_R };
    for (int c = 0, r = 0; c < nc; c++) {
        off[c] = sdp_rt_tensor_part_offset(grad, c);
        nseg[c] = (size_t)nsegs[c];
        for (int k = 0; k < nsegs[c]; k++, seg += 2) {
            seg[0] = segs[c][k].offset;
            seg[1] = segs[c][k].nelems;
        }
        if (ret[c])
            b[1 + r++] = (struct sdp_cl_buf){ ret[c], STARPU_W };
        b[1 + nret + c] = (struct sdp_cl_buf){ sumsq[c], STARPU_W };
    }
    off[nc] = n;
    rc = sdp_cl_submit(&sdp_cl_grad_pack_rows, o, a, argsize, 2.0 * n + total, b, nb);
    free(b);
    return rc;
}

/* ---- grad_chunk ---- */
/* A transfer task (cl_common.h), on a CPU worker: buffers out (n) W on the host, grad (N) R where
 * it was made, both f32 or both bf16; out = grad[off, off + n), over PCIe where grad is on a GPU.
 */
static void grad_chunk_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_cl_xfer_args *a = cl_arg; /* dev: grad's */
    size_t nbytes =
        (size_t)STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    sdp_cl_xfer_copy(SDP_VEC(buffers[0]), (const char *)SDP_VEC(buffers[1]) + a->off_bytes, nbytes,
                     a->dev, 0);
}

static struct starpu_perfmodel sdp_pm_grad_chunk = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_grad_chunk_v2", /* v1 timed a GPU-to-GPU copy before StarPU's transfer */
    .footprint = sdp_cl_footprint,
};

/* grad's node is the rank's (sdp_cl_xfer_of) */
struct starpu_codelet sdp_cl_grad_chunk = {
    .name = "grad_chunk",
    .where = STARPU_CPU,
    .cpu_funcs = { grad_chunk_cpu },
    .cpu_funcs_name = { "grad_chunk_cpu" },
    .nbuffers = 2,
    .modes = { STARPU_W, STARPU_R },
    .specific_nodes = 1,
    .nodes = { STARPU_SPECIFIC_NODE_CPU, STARPU_MAIN_RAM },
    .model = &sdp_pm_grad_chunk,
};
static struct starpu_codelet grad_chunk_ranks[SDP_MAX_RANKS - 1];

/* ---- grad_chunk, routed (a sparse layer's experts, docs/moe.md) ---- */
struct sdp_grad_chunk_args {
    struct sdp_cl_xfer_args x; /* key: the whole chunk's bytes */
    int node, nsegs, poison;   /* the gradient's node (bus counter); poison: idle ranges 0xff */
    struct sdp_adamw_segment segs[];
};

/* Whether segment s holds an expert that received no token this step (used: sdp_task_adamw's). */
static int idle(const struct sdp_adamw_segment *s, const int32_t *used)
{
    return s->expert1 > 0 && !used[s->expert1 - 1];
}

/* buffers: out (n) W on the host, grad (N) R where it was made, used (2E) i32 R on the host: the
 * segments of out whose expert received a token, copied in runs of adjacent segments; the others
 * are left as they are (AdamW skips them), or filled with 0xff (NaN) under poison. */
static void grad_chunk_routed_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_chunk_args *a = cl_arg;
    const size_t es = STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    const int32_t *used = (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[2]);
    char *dst = SDP_VEC(buffers[0]);
    const char *src = (const char *)SDP_VEC(buffers[1]) + a->x.off_bytes;
    unsigned long long bytes = 0;
    for (int s = 0; s < a->nsegs;) {
        size_t o0 = a->segs[s].offset, o1 = o0 + a->segs[s].nelems;
        if (idle(&a->segs[s++], used)) {
            if (a->poison)
                memset(dst + o0 * es, 0xff, (o1 - o0) * es);
            continue;
        }
        for (; s < a->nsegs && a->segs[s].offset == o1 && !idle(&a->segs[s], used); s++)
            o1 += a->segs[s].nelems;
        sdp_cl_xfer_copy(dst + o0 * es, src + o0 * es, (o1 - o0) * es, a->x.dev, 0);
        bytes += (o1 - o0) * es;
    }
    if (a->x.dev >= 0)
        sdp_rt_bus_count_task(a->node, 0, bytes);
}

/* grad_chunk with the experts' marks: its own codelet (three buffers), the same name and model */
struct starpu_codelet sdp_cl_grad_chunk_routed = {
    .name = "grad_chunk",
    .where = STARPU_CPU,
    .cpu_funcs = { grad_chunk_routed_cpu },
    .cpu_funcs_name = { "grad_chunk_routed_cpu" },
    .nbuffers = 3,
    .modes = { STARPU_W, STARPU_R, STARPU_R },
    .specific_nodes = 1,
    .nodes = { STARPU_SPECIFIC_NODE_CPU, STARPU_MAIN_RAM, STARPU_SPECIFIC_NODE_CPU },
    .model = &sdp_pm_grad_chunk,
};
static struct starpu_codelet grad_chunk_routed_ranks[SDP_MAX_RANKS - 1];

/* The routed task: segs (offsets in out) say which expert each range is of; only the ranges of
 * the experts used marks are copied and counted on the bus when they run. */
static int grad_chunk_routed(struct sdp_task_opts *op, struct sdp_cl_buf *b, int node, size_t off,
                             const struct sdp_adamw_segment *segs, int nsegs)
{
    struct starpu_codelet *cl =
        sdp_cl_xfer_of(&sdp_cl_grad_chunk_routed, grad_chunk_routed_ranks, op->hint.rank, 1, node);
    size_t n = sdp_rt_tensor_nelems(b[0].t), es = sdp_dtype_size(sdp_rt_tensor_dtype(b[0].t));
    size_t argsize = sizeof(struct sdp_grad_chunk_args) + (size_t)nsegs * sizeof(*segs);
    for (int s = 0; s < nsegs; s++)
        if (segs[s].offset + segs[s].nelems > n)
            return sdp_err(-EINVAL, "grad_chunk: segment %d ends past %s (%zu)", s,
                           sdp_rt_tensor_name(b[0].t), n);
    struct sdp_grad_chunk_args *a = sdp_cl_args_alloc(argsize);
    struct sdp_cl_xfer_args *x = sdp_cl_xfer_args(node, 0, 0, off * es); /* counted when run */
    a->x = *x;
    free(x);
    a->x.key.d[0] = (int)((n * es) & 0x7fffffff);
    a->x.key.d[1] = (int)((n * es) >> 31);
    a->node = node;
    a->nsegs = nsegs;
    a->poison = sdp_env_long("SDP_POISON_COMPUTE_COPY", 0) > 0;
    memcpy(a->segs, segs, (size_t)nsegs * sizeof(*segs));
    return sdp_cl_submit(cl, op, a, argsize, 0.0, b, 3);
}

int sdp_task_grad_chunk(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *grad,
                        size_t off, const struct sdp_adamw_segment *segs, int nsegs,
                        sdp_rt_tensor_t *used)
{
    size_t n = sdp_rt_tensor_nelems(out);
    enum sdp_dtype dt = sdp_rt_tensor_dtype(out);
    struct sdp_cl_buf b[] = { { out, STARPU_W }, { grad, STARPU_R }, { used, STARPU_R } };
    struct sdp_task_opts op = *o;
    int r = o->hint.rank, node = o->on_host ? STARPU_MAIN_RAM : sdp_cl_rank_node(r);
    if ((dt != SDP_F32 && dt != SDP_BF16) || sdp_rt_tensor_dtype(grad) != dt ||
        off > sdp_rt_tensor_nelems(grad) || n > sdp_rt_tensor_nelems(grad) - off)
        return sdp_err(-EINVAL, "grad_chunk: %s (%zu) is not a range of %s (%zu) at %zu",
                       sdp_rt_tensor_name(out), n, sdp_rt_tensor_name(grad),
                       sdp_rt_tensor_nelems(grad), off);
    op.on_rank = 0; /* a CPU worker's: the rank's own goes on computing */
    op.on_host = 1;
    if (used)
        return grad_chunk_routed(&op, b, node, off, segs, nsegs);
    struct starpu_codelet *cl = sdp_cl_xfer_of(&sdp_cl_grad_chunk, grad_chunk_ranks, r, 1, node);
    struct sdp_cl_xfer_args *a =
        sdp_cl_xfer_args(node, 0, n * sdp_dtype_size(dt), off * sdp_dtype_size(dt));
    return sdp_cl_submit(cl, &op, a, sizeof(*a), 0.0, b, 2);
}
