/* SPDX-License-Identifier: MIT */
/* param_copy: dst = src, two buffers of one dtype and size on the executing worker's node.  The
 * sharded parameter route: the owner rank of a chunk copies it from the host's working copy into
 * its replica (StarPU brings the source over PCIe: P/R bytes per rank), then every other rank
 * copies it from the owner's replica (StarPU brings it GPU to GPU): an all-gather built from
 * StarPU's own transfers.
 * param_fetch: reads one buffer and does nothing with it.  With one rank it is a group's
 * dispatch: it becomes ready as soon as the group's update has written the working copy, not
 * when the previous layer's output is ready like the group's first compute task, so the policy
 * prefetches the weights over PCIe while the GPU still computes earlier groups (without it, the
 * first task of every layer waits for its weights: bench/results/2026-11-30-h200-session4.md).
 * param_put: dst[off, off + n) = src (n), dst whole and read-write: the working copy off the host
 * (sdp_state.work_staged) takes each chunk AdamW wrote on the host where the compute keeps it,
 * without a partition plan (StarPU would gather the chunks on the vector's home, the host).  The
 * puts of one working copy commute (STARPU_COMMUTE): each writes its own range, so a put runs as
 * soon as its stage is written, whatever the order the stages were written in; sdp-slidedp's
 * bound on the stages alive relies on it (a put held behind an earlier chunk's unwritten stage
 * would keep its own stage alive, and a full bound would then wait for itself).
 * param_chunk: chunk c of a working copy on the host into its range of the compute copy, a vector
 * of the group's size without a partition plan (train.chunk_mib > 0): each chunk crosses PCIe as
 * soon as its update or cast has written it, while the next chunk is being written, and the
 * compute's first reader waits for every chunk's.  The chunk is read where it is, on the host
 * (specific_nodes): the task's CUDA side is the host-to-GPU copy itself, so its start and end
 * bound the transfer in the trace, and no GPU copy of the host chunk is made beside the compute
 * copy.
 * param_put_rows and param_put_early: param_put of a packed stage, the segments an AdamW wrote
 * back to back, scattered into their places (the tied embedding's rows, train.embed_home: gpu).
 * Tests: tests/e2e/test_e2e_ranks.sh, tests/e2e/test_e2e_lookahead.sh,
 * tests/e2e/test_e2e_work_home.sh, tests/e2e/test_e2e_embed_early.sh,
 * tests/kernels/test_cuda_scatter.c. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_param_copy_args {
    struct sdp_shape_key key; /* bytes (low 31 bits, high bits) */
};

static size_t nbytes_of(void *buf)
{
    return (size_t)STARPU_VECTOR_GET_NX(buf) * STARPU_VECTOR_GET_ELEMSIZE(buf);
}

/* buffers: dst (n) W, src (n) R */
static void param_copy_cpu(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    memcpy(SDP_VEC(buffers[0]), SDP_VEC(buffers[1]), nbytes_of(buffers[0]));
}

#ifdef SDP_HAVE_CUDA
static void param_copy_cuda(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    SDP_CUDA_CHECK(cudaMemcpyAsync(SDP_VEC(buffers[0]), SDP_VEC(buffers[1]), nbytes_of(buffers[0]),
                                   cudaMemcpyDeviceToDevice, starpu_cuda_get_local_stream()));
}
#endif

static struct starpu_perfmodel sdp_pm_param_copy = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_param_copy_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_param_copy = {
    .name = "param_copy",
    .cpu_funcs = { param_copy_cpu },
    .cpu_funcs_name = { "param_copy_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(param_copy_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = 2,
    .modes = { STARPU_W, STARPU_R },
    .model = &sdp_pm_param_copy,
};

struct sdp_param_put_args {
    struct sdp_shape_key key; /* bytes (low 31 bits, high bits) */
    size_t off_bytes;
};

/* buffers: dst RW, src (n) R */
static void param_put_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_param_put_args *a = cl_arg;
    memcpy((char *)SDP_VEC(buffers[0]) + a->off_bytes, SDP_VEC(buffers[1]), nbytes_of(buffers[1]));
}

#ifdef SDP_HAVE_CUDA
static void param_put_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_param_put_args *a = cl_arg;
    SDP_CUDA_CHECK(cudaMemcpyAsync((char *)SDP_VEC(buffers[0]) + a->off_bytes, SDP_VEC(buffers[1]),
                                   nbytes_of(buffers[1]), cudaMemcpyDeviceToDevice,
                                   starpu_cuda_get_local_stream()));
}
#endif

static struct starpu_perfmodel sdp_pm_param_put = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_param_put_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_param_put = {
    .name = "param_put",
    .cpu_funcs = { param_put_cpu },
    .cpu_funcs_name = { "param_put_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(param_put_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = 2,
    .modes = { STARPU_RW | STARPU_COMMUTE, STARPU_R },
    .model = &sdp_pm_param_put,
};

/* param_chunk: a transfer task (cl_common.h), on a CPU worker: buffers dst (the compute copy, on
 * the node where the rank computes) and src (a chunk of the host's working copy, on the host);
 * dst[off, off + n) = src (n), over PCIe where dst is on a GPU. */
static void param_chunk_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_cl_xfer_args *a = cl_arg; /* dev: dst's */
    if (a->poison)
        sdp_cl_xfer_poison(SDP_VEC(buffers[0]), nbytes_of(buffers[0]), a->dev);
    sdp_cl_xfer_copy((char *)SDP_VEC(buffers[0]) + a->off_bytes, SDP_VEC(buffers[1]),
                     nbytes_of(buffers[1]), a->dev, 1);
}

static struct starpu_perfmodel sdp_pm_param_chunk = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_param_chunk_v2", /* v1 timed a GPU-to-GPU copy after StarPU's transfer */
    .footprint = sdp_cl_footprint,
};

/* The first chunk's task writes the compute copy (W): the copy was dropped after its last reader,
 * and StarPU refuses to read a dropped vector; the others' accesses commute after it.  dst's node
 * is the rank's (sdp_cl_xfer_of). */
#define CHUNK_CODELET(var, dst_mode)                                                               \
    struct starpu_codelet var = { .name = "param_chunk",                                           \
                                  .where = STARPU_CPU,                                             \
                                  .cpu_funcs = { param_chunk_cpu },                                \
                                  .cpu_funcs_name = { "param_chunk_cpu" },                         \
                                  .nbuffers = 2,                                                   \
                                  .modes = { dst_mode, STARPU_R },                                 \
                                  .specific_nodes = 1,                                             \
                                  .nodes = { STARPU_MAIN_RAM, STARPU_SPECIFIC_NODE_CPU },          \
                                  .model = &sdp_pm_param_chunk }
CHUNK_CODELET(sdp_cl_param_chunk, STARPU_RW | STARPU_COMMUTE);
CHUNK_CODELET(sdp_cl_param_chunk0, STARPU_W);
static struct starpu_codelet chunk_ranks[SDP_MAX_RANKS - 1], chunk0_ranks[SDP_MAX_RANKS - 1];

/* Whether src fits dst at off with dst's dtype (logged, naming the task, when not).
 * @return 0 or -EINVAL */
static int fits(const char *name, sdp_rt_tensor_t *dst, size_t off, sdp_rt_tensor_t *src)
{
    size_t n = sdp_rt_tensor_nelems(src);
    if (sdp_rt_tensor_dtype(src) != sdp_rt_tensor_dtype(dst) || off > sdp_rt_tensor_nelems(dst) ||
        n > sdp_rt_tensor_nelems(dst) - off)
        return sdp_err(-EINVAL, "%s: %s (%zu) does not fit %s (%zu) at %zu", name,
                       sdp_rt_tensor_name(src), n, sdp_rt_tensor_name(dst),
                       sdp_rt_tensor_nelems(dst), off);
    return 0;
}

/* param_put's submission: dst[off, off + n) = src (n); move goes in the hint. */
static int put_submit(struct starpu_codelet *cl, const struct sdp_task_opts *o,
                      sdp_rt_tensor_t *dst, size_t off, sdp_rt_tensor_t *src, enum sdp_move move)
{
    struct sdp_param_put_args *a;
    size_t n = sdp_rt_tensor_nelems(src), es = sdp_dtype_size(sdp_rt_tensor_dtype(dst));
    struct sdp_cl_buf b[] = { { dst, cl->modes[0] }, { src, STARPU_R } };
    struct sdp_task_opts op = *o;
    op.hint.move = move;
    if (fits(cl->name, dst, off, src))
        return -EINVAL;
    a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = (int)((n * es) & 0x7fffffff);
    a->key.d[1] = (int)((n * es) >> 31);
    a->off_bytes = off * es;
    return sdp_cl_submit(cl, &op, a, sizeof(*a), 0.0, b, 2);
}

int sdp_task_param_put(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, size_t off,
                       sdp_rt_tensor_t *src)
{
    return put_submit(&sdp_cl_param_put, o, dst, off, src, SDP_MOVE_PUT); /* it empties a stage */
}

int sdp_task_param_chunk(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, size_t off,
                         sdp_rt_tensor_t *src, int first)
{
    int node = sdp_cl_rank_node(o->hint.rank);
    struct starpu_codelet *cl =
        first ? sdp_cl_xfer_of(&sdp_cl_param_chunk0, chunk0_ranks, o->hint.rank, 0, node)
              : sdp_cl_xfer_of(&sdp_cl_param_chunk, chunk_ranks, o->hint.rank, 0, node);
    size_t es = sdp_dtype_size(sdp_rt_tensor_dtype(dst));
    struct sdp_cl_buf b[] = { { dst, cl->modes[0] }, { src, STARPU_R } };
    struct sdp_task_opts op = *o;
    /* it brings weights where the compute runs, ahead of it: the policy's window gates it; a CPU
     * worker's, whatever the rank (the rank's own worker computes meanwhile) */
    op.hint.move = SDP_MOVE_FETCH;
    op.on_rank = 0;
    op.on_host = 1;
    if (fits("param_chunk", dst, off, src))
        return -EINVAL;
    struct sdp_cl_xfer_args *a =
        sdp_cl_xfer_args(node, 1, sdp_rt_tensor_nelems(src) * es, off * es);
    /* a test's aid: a range of the compute copy that no fetch or copy wrote reads as NaN */
    a->poison = first && sdp_env_long("SDP_POISON_COMPUTE_COPY", 0) > 0;
    return sdp_cl_submit(cl, &op, a, sizeof(*a), 0.0, b, 2);
}

/* param_put_rows / param_put_early: the puts of packed stages (sdp_task_param_put_segs), the
 * updates of the tied embedding's rows when its working copy is off the host: only the elements an
 * update wrote cross PCIe. */
struct sdp_param_put_segs_args {
    struct sdp_shape_key key; /* bytes (low 31 bits, high bits), stages, segments */
    int nsrc;
    size_t d[]; /* off[nsrc] (dst element of each chunk's first), nseg[nsrc], then each stage's
                   (offset, nelems) pairs */
};

/* buffers: dst RW, then each stage (its segments back to back) R */
static void param_put_segs_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_param_put_segs_args *a = cl_arg;
    const size_t *off = a->d, *nseg = off + a->nsrc, *seg = nseg + a->nsrc;
    size_t es = STARPU_VECTOR_GET_ELEMSIZE(buffers[0]);
    for (int k = 0; k < a->nsrc; k++) {
        char *dst = (char *)SDP_VEC(buffers[0]) + off[k] * es;
        const char *src = SDP_VEC(buffers[1 + k]);
        for (size_t i = 0, run = 0; i < nseg[k]; i++, seg += 2) {
            memcpy(dst + seg[0] * es, src + run * es, seg[1] * es);
            run += seg[1];
        }
    }
}

#ifdef SDP_HAVE_CUDA
static void param_put_segs_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_param_put_segs_args *a = cl_arg;
    const size_t *off = a->d, *nseg = off + a->nsrc, *seg = nseg + a->nsrc;
    size_t units = STARPU_VECTOR_GET_ELEMSIZE(buffers[0]) / 2, most = 1;
    for (int k = 0; k < a->nsrc; k++)
        most = nseg[k] > most ? nseg[k] : most;
    size_t *tab = malloc(most * 3 * sizeof(*tab));
    SDP_ASSERT(tab != NULL, "out of memory for %zu segments", most);
    for (int k = 0; k < a->nsrc; k++) {
        for (size_t i = 0, run = 0; i < nseg[k]; i++, seg += 2) { /* in 2-byte units */
            tab[3 * i] = seg[0] * units;
            tab[3 * i + 1] = run * units;
            tab[3 * i + 2] = seg[1] * units;
            run += seg[1];
        }
        sdp_cuda_scatter16((uint16_t *)SDP_VEC(buffers[0]) + off[k] * units,
                           (const uint16_t *)SDP_VEC(buffers[1 + k]), tab, (int)nseg[k],
                           starpu_cuda_get_local_stream());
    }
    SDP_CUDA_CHECK(cudaGetLastError());
    free(tab);
}
#define PUT_SEGS_CUDA .cuda_funcs = { param_put_segs_cuda }, .cuda_flags = { STARPU_CUDA_ASYNC },
#elif defined(SDP_SIMGRID)
#define PUT_SEGS_CUDA                                                                              \
    .cuda_funcs = { SDP_CUDA(param_put_segs_cuda) }, .cuda_flags = { STARPU_CUDA_ASYNC },
#else
#define PUT_SEGS_CUDA
#endif

SDP_NAMED_CODELET(sdp_cl_param_put_rows, "param_put_rows", param_put_segs_cpu, PUT_SEGS_CUDA);
SDP_NAMED_CODELET(sdp_cl_param_put_early, "param_put_early", param_put_segs_cpu, PUT_SEGS_CUDA);

int sdp_task_param_put_segs(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, int nsrc,
                            const size_t *off, sdp_rt_tensor_t *const *src,
                            struct sdp_adamw_segment *const *segs, const int *nsegs, int early)
{
    struct sdp_param_put_segs_args *a;
    struct starpu_codelet *cl = early ? &sdp_cl_param_put_early : &sdp_cl_param_put_rows;
    size_t es = sdp_dtype_size(sdp_rt_tensor_dtype(dst)), bytes = 0, npairs = 0, argsize;
    struct sdp_cl_buf *b;
    struct sdp_task_opts op = *o;
    int rc;
    op.hint.move = SDP_MOVE_PUT; /* it empties stages */
    if (nsrc < 1)
        return sdp_err(-EINVAL, "%s: no stage", cl->name);
    for (int k = 0; k < nsrc; k++) {
        size_t total = 0, end = 0;
        for (int i = 0; i < nsegs[k]; i++) {
            if (segs[k][i].offset < end)
                return sdp_err(-EINVAL, "%s: segment %d of %s starts at %zu, before %zu", cl->name,
                               i, sdp_rt_tensor_name(src[k]), segs[k][i].offset, end);
            end = segs[k][i].offset + segs[k][i].nelems;
            total += segs[k][i].nelems;
        }
        if (nsegs[k] < 1 || total > sdp_rt_tensor_nelems(src[k]) ||
            sdp_rt_tensor_dtype(src[k]) != sdp_rt_tensor_dtype(dst) ||
            off[k] > sdp_rt_tensor_nelems(dst) || end > sdp_rt_tensor_nelems(dst) - off[k])
            return sdp_err(
                -EINVAL, "%s: %s (%zu) in %d segments up to %zu does not fit %s (%zu) at %zu",
                cl->name, sdp_rt_tensor_name(src[k]), sdp_rt_tensor_nelems(src[k]), nsegs[k], end,
                sdp_rt_tensor_name(dst), sdp_rt_tensor_nelems(dst), off[k]);
        npairs += (size_t)nsegs[k];
        bytes += total * es;
    }
    b = calloc((size_t)nsrc + 1, sizeof(*b));
    if (!b)
        return sdp_err(-ENOMEM, "%s of %d stages", cl->name, nsrc);
    argsize = sizeof(*a) + (2 * (size_t)nsrc + 2 * npairs) * sizeof(size_t);
    a = sdp_cl_args_alloc(argsize);
    a->key.d[0] = (int)(bytes & 0x7fffffff);
    a->key.d[1] = (int)(bytes >> 31);
    a->key.d[2] = nsrc;
    a->nsrc = nsrc;
    size_t *doff = a->d, *nseg = doff + nsrc, *seg = nseg + nsrc;
    b[0] = (struct sdp_cl_buf){ dst, STARPU_RW | STARPU_COMMUTE };
    for (int k = 0; k < nsrc; k++) {
        doff[k] = off[k];
        nseg[k] = (size_t)nsegs[k];
        for (int i = 0; i < nsegs[k]; i++, seg += 2) {
            seg[0] = segs[k][i].offset;
            seg[1] = segs[k][i].nelems;
        }
        b[1 + k] = (struct sdp_cl_buf){ src[k], STARPU_R };
    }
    rc = sdp_cl_submit(cl, &op, a, argsize, 0.0, b, nsrc + 1);
    free(b);
    return rc;
}

/* stage_put: a chunk of the working copy on the host = the stage an early AdamW wrote (the
 * early MLP update, graph/step.c), on a CPU worker: param_copy's copy under its own name, since
 * it empties a stage like param_put does. */
static struct starpu_perfmodel sdp_pm_stage_put = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_stage_put_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_stage_put = {
    .name = "stage_put",
    .where = STARPU_CPU,
    .cpu_funcs = { param_copy_cpu },
    .cpu_funcs_name = { "param_copy_cpu" },
    .nbuffers = 2,
    .modes = { STARPU_W, STARPU_R },
    .model = &sdp_pm_stage_put,
};

/* buffers: the tensor (n) R, already where the task runs: nothing left to do */
static void param_fetch_func(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
}

/* A fetch under a name: param_fetch for weights, act_fetch for activations (the checker's events
 * then read no parameters). */
#ifdef SDP_CUDA_CODELETS
#define FETCH_CUDA                                                                                 \
    .cuda_funcs = { SDP_CUDA(param_fetch_func) }, .cuda_flags = { STARPU_CUDA_ASYNC },
#else
#define FETCH_CUDA
#endif
#define FETCH_CODELET(var, nm)                                                                     \
    struct starpu_codelet var = { .name = nm,                                                      \
                                  .cpu_funcs = { param_fetch_func },                               \
                                  .cpu_funcs_name = { "param_fetch_func" },                        \
                                  FETCH_CUDA.nbuffers = 1,                                         \
                                  .modes = { STARPU_R } }
FETCH_CODELET(sdp_cl_param_fetch, "param_fetch");
FETCH_CODELET(sdp_cl_act_fetch, "act_fetch");

static int fetch_submit(struct starpu_codelet *cl, const struct sdp_task_opts *o,
                        sdp_rt_tensor_t *t)
{
    struct sdp_cl_buf b[] = { { t, STARPU_R } };
    struct sdp_task_opts of = *o;
    of.hint.move = SDP_MOVE_FETCH;
    return sdp_cl_submit(cl, &of, NULL, 0, 0.0, b, 1);
}

int sdp_task_param_fetch(const struct sdp_task_opts *o, sdp_rt_tensor_t *t)
{
    return fetch_submit(&sdp_cl_param_fetch, o, t);
}

int sdp_task_act_fetch(const struct sdp_task_opts *o, sdp_rt_tensor_t *t)
{
    return fetch_submit(&sdp_cl_act_fetch, o, t);
}

/* param_copy's and stage_put's submission: dst (n) W = src (n) R, same dtype; move goes in the hint
 */
static int copy_submit(struct starpu_codelet *cl, const struct sdp_task_opts *o,
                       sdp_rt_tensor_t *dst, sdp_rt_tensor_t *src, enum sdp_move move)
{
    struct sdp_param_copy_args *a;
    size_t n = sdp_rt_tensor_nelems(dst), nbytes;
    struct sdp_cl_buf b[] = { { dst, STARPU_W }, { src, STARPU_R } };
    struct sdp_task_opts op = *o;
    op.hint.move = move;
    if (sdp_rt_tensor_nelems(src) != n || sdp_rt_tensor_dtype(src) != sdp_rt_tensor_dtype(dst))
        return sdp_err(-EINVAL, "%s: %s and %s differ in size or dtype", cl->name,
                       sdp_rt_tensor_name(dst), sdp_rt_tensor_name(src));
    nbytes = n * sdp_dtype_size(sdp_rt_tensor_dtype(dst));
    a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = (int)(nbytes & 0x7fffffff);
    a->key.d[1] = (int)(nbytes >> 31);
    return sdp_cl_submit(cl, &op, a, sizeof(*a), 0.0, b, 2);
}

int sdp_task_param_copy(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, sdp_rt_tensor_t *src)
{
    return copy_submit(&sdp_cl_param_copy, o, dst, src, o->hint.move);
}

int sdp_task_stage_put(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, sdp_rt_tensor_t *src)
{
    return copy_submit(&sdp_cl_stage_put, o, dst, src, SDP_MOVE_PUT); /* it empties a stage */
}
