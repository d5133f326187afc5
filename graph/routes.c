/* SPDX-License-Identifier: MIT */
/* The routes between the host and the ranks: parameter dispatch and fetch (whole or chunk by
 * chunk), gradient zeroing, norms, the reduction of the ranks' gradients, what a bounded window
 * lets go, and the chunk pipeline's tensors. */
#include "config.h"

#include <stdlib.h>

#include "graph/graph_internal.h"
#include "base/sdp_log.h"

/* The rank that receives chunk c of group gi from the host on the sharded route: chunks are dealt
 * to the ranks in turn over the whole model, so every rank gets P/R within a chunk. */
int sdp_graph_owner_of(const sdp_graph_t *g, int gi, int c)
{
    return (g->chunk0[gi] + c) % g->R;
}

/* work_chunks: chunk c of group gi's working copy on the host into rank r's compute copy of the
 * group (param_chunk, a CPU worker's copy over PCIe), for every chunk, each as soon as its update
 * (or cast) has written it, so that chunk c crosses PCIe while chunk c + 1 is being written.  The
 * compute copy has no partition plan: a task on a chunk of it would make StarPU split it on the
 * host and gather it there again before the compute reads it whole (two more copies of the group
 * over PCIe); the copies write their ranges of the whole instead, their accesses commuting. */
static int fetch_chunks(sdp_graph_t *g, int step, int gi, enum sdp_phase ph,
                        unsigned long long after, int r)
{
    sdp_rt_tensor_t *src = work_of(g, gi, step), *dst = compute_work(g, gi, step, r);
    for (int c = 0, nc = fetched_chunks(g, gi); c < nc; c++) {
        struct sdp_task_opts o = gated(g, opts(g, step, gi, -1, ph), after);
        o.hint.chunk = c;
        o.hint.rank = r;
        TRY_RET(sdp_task_param_chunk(&o, dst, sdp_rt_tensor_part_offset(src, c),
                                     sdp_rt_tensor_part(src, c), c == 0));
    }
    return 0;
}

/* A param_fetch of group gi's working copy (rank r's chunks with work_chunks, fetch_chunks),
 * ordered just ahead of the group's first compute task of phase ph (micro-batch -1), where the
 * compute runs.  It is ready as soon as the copy is written, so the policy's prefetch window moves
 * the weights while earlier groups still compute; the backward's (after a bounded window let the
 * weights go) waits for `after` like the layer's recomputation. */
int sdp_graph_fetch(sdp_graph_t *g, int step, int gi, enum sdp_phase ph, unsigned long long after,
                    int r)
{
    struct sdp_task_opts o;
    if (chunked_fetch(g, gi))
        return fetch_chunks(g, step, gi, ph, after, r);
    o = gated(g, opts(g, step, gi, -1, ph), after);
    return sdp_task_param_fetch(&o, work_of(g, gi, step));
}

/* The forward's last use of group gi's weights this step, with a bounded window (the backward
 * fetches them again): a copy of the host's goes when StarPU needs the room; a compute copy
 * (work_chunks) is dropped, since the host still holds its chunks. */
void sdp_graph_window_let_go(sdp_graph_t *g, int step, int gi, int r)
{
    if (chunked_fetch(g, gi))
        sdp_rt_tensor_discard(compute_work(g, gi, step, r));
    else
        sdp_rt_tensor_wont_use(work_of(g, gi, step));
}

/* Sharded route: before the first forward of the step uses group gi (micro-batch 0), chunk c goes
 * from the host's working copy to its owner rank (owner_of: a transfer task, param_chunk, whose
 * window is the owner's), then from the owner to every other rank: one NCCL broadcast when NCCL is
 * set up for the ranks, else a copy on each receiving rank's worker, for which StarPU moves the
 * source. */
int sdp_graph_dispatch(sdp_graph_t *g, int step, int mb, int gi)
{
    sdp_rt_tensor_t *src = work_of(g, gi, step);
    int nchunks = g->st->groups[gi].nchunks;
    if (chunked_fetch(g, gi)) /* each rank's compute copy, before the rank's first micro-batch */
        return mb % g->nm_rank == 0 ? fetch_chunks(g, step, gi, SDP_PH_FWD, 0, rank_of(g, mb)) : 0;
    if (mb != 0)
        return 0;
    if (!g->rwork) /* replicated: the compute reads the working copy itself; bring it early */
        return sdp_graph_fetch(g, step, gi, SDP_PH_FWD, 0, 0);
    for (int c = 0; c < nchunks; c++) {
        int owner = sdp_graph_owner_of(g, gi, c);
        sdp_rt_tensor_t *own = sdp_rt_tensor_part(compute_work(g, gi, step, owner), c);
        struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
        o.hint.chunk = c;
        o.hint.rank = owner;
        o.on_rank = 1;
        /* the owner's from the host: a transfer task (param_chunk), no GPU copy of the host chunk
         */
        TRY_RET(sdp_task_param_chunk(&o, own, 0, sdp_rt_tensor_part(src, c), 1));
        if (sdp_tasks_nccl_ranks() == g->R) { /* one NCCL broadcast from the owner */
            sdp_rt_tensor_t *reps[SDP_MAX_RANKS];
            for (int r = 0; r < g->R; r++)
                reps[r] = sdp_rt_tensor_part(compute_work(g, gi, step, r), c);
            o.hint.rank = owner;
            TRY_RET(sdp_task_param_bcast_nccl(&o, reps, g->R, owner));
            continue;
        }
        for (int r = 0; r < g->R; r++) {
            if (r == owner)
                continue;
            o.hint.rank = r;
            TRY_RET(
                sdp_task_param_copy(&o, sdp_rt_tensor_part(compute_work(g, gi, step, r), c), own));
        }
    }
    return 0;
}

/* Clear group gi's gradient accumulator of rank r just before its first writer of the step (the
 * rank's first micro-batch), so a GPU holds a layer's gradient only from that layer's backward to
 * its return, instead of every group's from the start of the step. */
int sdp_graph_zero_grad(sdp_graph_t *g, int step, int mb, int gi, unsigned long long after)
{
    struct sdp_task_opts o;
    if (g->st->groups[gi].frozen) /* LoRA: the group's adapters, if any */
        return sdp_graph_lora_zero(g, step, mb, gi, after);
    if (mb % g->nm_rank != 0)
        return 0;
    o = opts(g, step, gi, mb, SDP_PH_BWD);
    o.hint.mb = -1;
    o = gated(g, o, after);
    return sdp_task_zero(&o, grad_of(g, gi, rank_of(g, mb)));
}

/* The squared norms of group gi's gradient chunks, into sumsq[chunk0[gi] + c].  With one rank they
 * are submitted as soon as the group's gradient is final (after its backward in the last
 * micro-batch), before the window lets the gradient go; with more ranks they follow the reduction
 * (sdp_graph_optimizer()).  Where the gradient is on a GPU (one rank with the norms there, or the
 * GPU route's sum on rank 0), one task reads the whole gradient where it is: a chunk's own task
 * would make StarPU split the vector on the host first, then bring each chunk back up.  On the
 * host, one task per chunk reads the chunks AdamW reads, in parallel. */
int sdp_graph_norms(sdp_graph_t *g, int step, int gi)
{
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_NORM);
    if (g->st->groups[gi].frozen) /* LoRA: the group's adapters, if any */
        return sdp_graph_lora_norms(g, step, gi);
    if (g->plan.group[gi].norms_gpu) {
        o.on_rank = reduces(g); /* rank 0's worker, where the route summed */
        return sdp_task_grad_sumsq(&o, g->st->groups[gi].grad, &g->sumsq[g->chunk0[gi]]);
    }
    for (int c = 0; c < g->st->groups[gi].nchunks; c++) {
        o.hint.chunk = c;
        TRY_RET(sdp_task_sumsq(&o, g->sumsq[g->chunk0[gi] + c],
                               host_return(g, gi) ? g->gret[gi][c]
                                                  : sdp_rt_tensor_part(g->st->groups[gi].grad, c)));
    }
    return 0;
}

/* The host route's sum of group gi, chunk by chunk: each rank's gradient comes down whole (the
 * chunks' partition is planned on the host, their home), then one task per chunk sums the ranks'
 * chunks, so the host's CPU workers share a group's sum instead of one taking it all.  Each
 * element is summed in the same order as by one task: the same bits. */
static int reduce_chunks(sdp_graph_t *g, struct sdp_task_opts o, int gi)
{
    sdp_rt_tensor_t *in[SDP_MAX_RANKS];
    for (int c = 0; c < sdp_rt_tensor_nparts(train_grad(g, gi, 0)); c++) {
        o.hint.chunk = c;
        for (int r = 1; r < g->R; r++)
            in[r - 1] = sdp_rt_tensor_part(train_grad(g, gi, r), c);
        TRY_RET(
            sdp_task_grad_reduce(&o, sdp_rt_tensor_part(train_grad(g, gi, 0), c), in, g->R - 1));
    }
    return 0;
}

/* The host route's sum of group gi with the fp32 return chunk by chunk (host_return): for each
 * chunk, every rank's range of its gradient comes down on its own (grad_chunk, a transfer task
 * from the rank's GPU) into a host vector, and one task adds ranks 1..R-1's into rank 0's, which
 * the norms and AdamW read: the order of reduce_chunks, the same bits, without any rank's whole
 * gradient on the host.  Each rank's accumulator is then discarded, unsplit. */
static int return_chunks(sdp_graph_t *g, struct sdp_task_opts o, int gi)
{
    sdp_rt_tensor_t **out = g->gret[gi], *in[SDP_MAX_RANKS];
    int n = g->st->groups[gi].nchunks;
    for (int c = 0; c < n; c++) {
        for (int r = 0; r < g->R; r++) {
            struct sdp_task_opts oc = o;
            sdp_rt_tensor_t *grad = train_grad(g, gi, r);
            oc.hint.chunk = c;
            oc.hint.rank = r; /* where the rank's gradient is */
            oc.on_host = 0;
            TRY_RET(sdp_task_grad_chunk(&oc, out[r * n + c], grad,
                                        sdp_rt_tensor_part_offset(grad, c), NULL, 0, NULL));
            if (r > 0)
                in[r - 1] = out[r * n + c];
        }
        o.hint.chunk = c;
        TRY_RET(sdp_task_grad_reduce(&o, out[c], in, g->R - 1));
    }
    for (int r = 0; r < g->R; r++)
        sdp_rt_tensor_discard(train_grad(g, gi, r));
    return 0;
}

/* Whether every rank's gradient of group gi is chunked alike (full fine-tuning's are; LoRA's
 * adapter gradients are whole vectors). */
static int chunked_alike(sdp_graph_t *g, int gi)
{
    int n = sdp_rt_tensor_nparts(train_grad(g, gi, 0));
    for (int r = 1; r < g->R; r++)
        if (sdp_rt_tensor_nparts(train_grad(g, gi, r)) != n)
            return 0;
    return n > 1;
}

/* The gradient return of ranks 1..R-1 into rank 0's gradient (the route decides where the sum
 * runs); under LoRA, of the groups' adapters.  On the GPU route one task per group on the whole
 * vectors, pinned to rank 0's worker: chunk by chunk, StarPU would split every rank's gradient on
 * the host first.  On the host route, chunk by chunk on the CPU workers (reduce_chunks). */
int sdp_graph_reduce_ranks(sdp_graph_t *g, int step)
{
    struct sdp_state *st = g->st;
    sdp_rt_tensor_t *in[SDP_MAX_RANKS];
    for (int gi = 0; gi < st->ngroups; gi++) {
        struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_NORM);
        if (!train_grad(g, gi, 0)) /* LoRA: a frozen group without adapters */
            continue;
        o.on_rank = g->plan.group[gi].grad_gpu;
        o.on_host = !o.on_rank; /* the host route: never an idle GPU's */
        if (g->P > 1) {         /* across the nodes (graph/nodes.c) */
            TRY_RET(sdp_graph_reduce_nodes(g, step, gi, o));
            continue;
        }
        if (host_return(g, gi)) {
            TRY_RET(return_chunks(g, o, gi));
            continue;
        }
        if (o.on_host && chunked_alike(g, gi)) {
            TRY_RET(reduce_chunks(g, o, gi));
            continue;
        }
        for (int r = 1; r < g->R; r++)
            in[r - 1] = train_grad(g, gi, r);
        TRY_RET(sdp_task_grad_reduce(&o, train_grad(g, gi, 0), in, g->R - 1));
    }
    return 0;
}

/* What a bounded window lets go of after rank r's last backward of group gi: the working copy
 * (a compute copy is discarded in graph/step.c), and the fp32 gradient unless it was packed or
 * copied out in chunks (then it is discarded already, and the bf16 chunks wait on the GPU for
 * their updates to fetch them, so the host holds only the chunks being updated). */
void sdp_graph_window_release(sdp_graph_t *g, int step, int gi, int r)
{
    /* a staged copy has nowhere else to go; a chunked one's GPU copy is dropped already (and a
     * hint on the host's whole copy would gather its chunks there) */
    if (!g->st->groups[gi].staged && !chunked_fetch(g, gi))
        sdp_rt_tensor_wont_use(work_of(g, gi, step));
    if (!(!reduces(g) && (sdp_graph_packs(g, gi) || sdp_graph_grad_out(g, gi))) &&
        !g->st->groups[gi].frozen)
        sdp_rt_tensor_wont_use(grad_of(g, gi, r));
}

/* The chunk pipeline's tensors of the plan's groups: each grad_chunks group's chunk copies of its
 * fp32 gradient (temporaries; with host_return, each rank's), a grad_routed group's of its bf16
 * packs where it packs, and each rank's compute copy of each
 * work_chunks group (device memory only, written chunk by chunk).  @return 0 or -ENOMEM */
int sdp_graph_chunks_create(sdp_graph_t *g)
{
    struct sdp_state *st = g->st;
    char name[64];
    int rc = 0;
    for (int gi = 0; gi < st->ngroups && !rc; gi++) {
        const struct sdp_plan_group *pg = &g->plan.group[gi];
        if (!pg->grad_chunks && !pg->grad_routed)
            continue;
        if (!g->gret && !(g->gret = calloc((size_t)st->ngroups, sizeof(*g->gret))))
            return sdp_err(-ENOMEM, "gradient chunks of %d groups", st->ngroups);
        int nc = st->groups[gi].nchunks, nr = host_return(g, gi) ? g->R : 1;
        if (!(g->gret[gi] = calloc((size_t)nr * nc + 1, sizeof(**g->gret)))) /* NULL-ended */
            return sdp_err(-ENOMEM, "gradient chunks of group %d", gi);
        for (int i = 0; i < nr * nc && !rc; i++) {
            snprintf(name, sizeof(name), "g%d.grad_out.%d.r%d", gi, i % nc, i / nc);
            rc = sdp_rt_tensor_temp(
                &g->gret[gi][i], pg->grad_bf16 ? SDP_BF16 : SDP_F32,
                sdp_rt_tensor_nelems(sdp_rt_tensor_part(st->groups[gi].grad, i % nc)), name);
        }
    }
    for (int gi = 0; gi < st->ngroups && !rc; gi++) {
        if (!g->plan.group[gi].work_chunks)
            continue;
        if (!g->cwork && !(g->cwork = calloc((size_t)g->R * st->ngroups, sizeof(*g->cwork))))
            return sdp_err(-ENOMEM, "compute copies of %d groups", st->ngroups);
        for (int r = 0; r < g->R && !rc; r++) {
            snprintf(name, sizeof(name), "g%d.work.compute%d", gi, r);
            rc = sdp_rt_tensor_create_device(&g->cwork[(size_t)r * st->ngroups + gi],
                                             st->work_dtype, st->groups[gi].nelems, name);
        }
    }
    return rc;
}

void sdp_graph_chunks_destroy(sdp_graph_t *g)
{
    for (int gi = 0; g->gret && gi < g->st->ngroups; gi++) {
        for (int i = 0; g->gret[gi] && g->gret[gi][i]; i++) /* the plan is gone already */
            sdp_rt_tensor_release(g->gret[gi][i]);
        free(g->gret[gi]);
    }
    free(g->gret);
    for (int i = 0; g->cwork && i < g->R * g->st->ngroups; i++)
        sdp_rt_tensor_release(g->cwork[i]);
    free(g->cwork);
}
