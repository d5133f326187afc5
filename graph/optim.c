/* SPDX-License-Identifier: MIT */
/* The optimizer's tasks: gradient packs (bf16 return), AdamW per chunk on the host or the GPU,
 * the early MLP update, the puts into the working copies and their refresh from the masters. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "base/sdp_log.h"

/* Whether group gi's gradient returns in bf16 this step (it is packed only when the step
 * updates: a step without update leaves the fp32 accumulators in place). */
int sdp_graph_packs(const sdp_graph_t *g, int gi)
{
    return g->plan.group[gi].grad_bf16 && g->updating;
}

/* The chunks' copies of group gi's fp32 gradient this step (the plan's grad_chunks, when the step
 * updates), or NULL: AdamW reads them instead of the gradient's chunks. */
sdp_rt_tensor_t **sdp_graph_grad_out(const sdp_graph_t *g, int gi)
{
    return g->updating && g->gret && g->gret[gi] ? g->gret[gi] : NULL;
}

/* Chunk c of group gi's return: its copy out of src from element off (grad_chunk), less the
 * experts without token where the plan routes the group's gradient (grad_routed). */
static int grad_chunk(sdp_graph_t *g, int step, int gi, int c, sdp_rt_tensor_t *src, size_t off)
{
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_NORM);
    struct sdp_adamw_segment *segs = NULL;
    int nsegs = 0, rc;
    o.hint.chunk = c;
    o.on_host = reduces(g) && !g->plan.group[gi].grad_gpu; /* where the ranks' sum is */
    if (g->plan.group[gi].grad_routed && (nsegs = sdp_graph_chunk_segs(g, gi, c, 0, &segs)) < 0)
        return sdp_err(nsegs, "graph: the segments of chunk %d of group %d", c, gi);
    rc = sdp_task_grad_chunk(&o, g->gret[gi][c], src, off, segs, nsegs,
                             segs ? sdp_graph_moe_used(g, gi) : NULL);
    free(segs);
    return rc;
}

/* The fp32 return of group gi chunk by chunk (grad_chunks), once its norms are submitted: one
 * grad_chunk per chunk copies the chunk's range of the final gradient where it is (rank 0's GPU;
 * the host after the host route's sum) to the host, so that each chunk crosses PCIe on its own,
 * as a task of its own, while earlier chunks are updated, instead of the whole group before the
 * first update (a task on a chunk of the gradient would make StarPU split it on the host first);
 * the accumulator is then discarded, unsplit. */
int sdp_graph_grad_chunks(sdp_graph_t *g, int step, int gi)
{
    sdp_rt_tensor_t **out = sdp_graph_grad_out(g, gi);
    struct sdp_group_state *gs = &g->st->groups[gi];
    if (!out || host_return(g, gi)) /* the host route's came down before its sum */
        return 0;
    for (int c = 0; c < gs->nchunks; c++)
        TRY_RET(grad_chunk(g, step, gi, c, gs->grad, sdp_rt_tensor_part_offset(gs->grad, c)));
    sdp_rt_tensor_discard(gs->grad);
    return 0;
}

/* The early MLP update (the plan's mlp_early): the gradient of a layer's MLP weights (its last
 * tensors) is final once the MLP's backward of the step's last micro-batch has run, while the
 * attention's backward still adds to the chunks before them.  The chunks that hold only MLP
 * weights are then packed (grad_pack_mlp) and their AdamW may start; each writes a stage, whose
 * put into the working copy waits until the layer's backward has read that copy.  The layer's
 * other chunks are packed after its backward.  With the working copies on the host an update
 * writes its chunk in place, which StarPU allows only once every reader of the group's copy has
 * run, so the MLP chunks then take a stage and a stage_put each (early_stage); the plan applies it
 * there to layer 1 alone by default (bench/results/2026-12-03-h200-mlp-early.md).
 * Returns the first such chunk of group gi for micro-batch mb, or -1 where it does not apply. */
int sdp_graph_mlp_early(const sdp_graph_t *g, int gi, int mb)
{
    if (mb != g->c.n_micro - 1 || !g->updating)
        return -1;
    return g->plan.group[gi].mlp_early;
}

/* The update of a layer on the GPU (the plan's update_gpu, train.gpu_update): AdamW runs on the
 * GPU (codelets/cuda/adamw.cu, the host's bits) from the packed gradient, which then does not
 * cross PCIe; the fp32 master and moments stay where StarPU keeps them while it has the memory.
 * Each updated chunk goes into a stage on the GPU and a param_put copies it into the working copy
 * there, so the next forward's fetch finds it on the GPU.  Off by default: it has not made a step
 * faster yet (bench/results/2026-12-03-h200-gpu-update.md). */
static int gpu_updates(const sdp_graph_t *g, int gi)
{
    return g->updating && g->plan.group[gi].update_gpu;
}

/* The length of a packed buffer of `covered` elements of a chunk of n (update_chunk, pack_rows):
 * rounded up to 256 K elements while that stays below n, so that the packed gradients and stages
 * of every step come in a few sizes that StarPU's cache of freed buffers hands out again, instead
 * of a new allocation each step, which left the CPU workers idle at the step boundary
 * (bench/results/2026-12-03-h200-embed-rows.md). */
size_t sdp_graph_packed_len(size_t covered, size_t n)
{
    size_t q = (size_t)1 << 18, len = (covered + q - 1) / q * q;
    return len < n ? len : covered;
}

/* The bf16 gradient return of group gi (one rank): one task reads the final fp32 gradient whole
 * where it was made and writes each chunk's squared norm and bf16 copy; the accumulator is then
 * discarded, unsplit, so nothing of it comes back to the host and the next step's zeroing waits
 * for the pack through the accumulator's own dependencies.  A routed group's chunks then come
 * down by grad_chunk, less the experts without token (AdamW reads those copies). */
static int pack(sdp_graph_t *g, int step, int mb, int gi)
{
    struct sdp_group_state *gs = &g->st->groups[gi];
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_NORM);
    int c1 = sdp_graph_mlp_early(g, gi, mb); /* the chunks from c1 on were packed already */
    if (gi == 0 && g->rows_grad && sdp_graph_early_embed(g))
        return sdp_graph_pack_rows(g, step);
    TRY_RET(c1 > 0
                ? sdp_task_grad_pack_head(&o, gs->grad, gs->grad_ret, &g->sumsq[g->chunk0[gi]], c1)
                : sdp_task_grad_pack(&o, gs->grad, gs->grad_ret, &g->sumsq[g->chunk0[gi]]));
    sdp_rt_tensor_discard(gs->grad);
    for (int c = 0; g->plan.group[gi].grad_routed && c < gs->nchunks; c++) {
        TRY_RET(grad_chunk(g, step, gi, c, gs->grad_ret[c], 0)); /* less the idle experts */
        sdp_rt_tensor_discard(gs->grad_ret[c]);
    }
    return 0;
}

/* sdp_graph_norms() (or pack(), which computes them too) of group gi if micro-batch mb was the last
 * of the step and there is one rank. */
int sdp_graph_norms_if_final(sdp_graph_t *g, int step, int mb, int gi)
{
    if (reduces(g) || mb != g->c.n_micro - 1)
        return 0;
    if (sdp_graph_packs(g, gi))
        return pack(g, step, mb, gi);
    TRY_RET(sdp_graph_norms(g, step, gi));
    return sdp_graph_grad_chunks(g, step, gi);
}

static void add_seg(struct sdp_adamw_segment *segs, int *n, size_t off, size_t len, int decay,
                    int expert1)
{
    if (*n > 0 && segs[*n - 1].decay == decay && segs[*n - 1].expert1 == expert1 &&
        segs[*n - 1].offset + segs[*n - 1].nelems == off) {
        segs[*n - 1].nelems += len;
        return;
    }
    segs[*n].offset = off;
    segs[*n].nelems = len;
    segs[*n].decay = decay;
    segs[*n].expert1 = expert1;
    (*n)++;
}

/* The segments of [s0, s1) of a sparse layer's stacked expert tensor d (chunk from c0), one per
 * expert, so that AdamW skips the experts without token (sdp_task_adamw_experts). */
static void add_expert_segs(const sdp_graph_t *g, const struct sdp_param_desc *d,
                            struct sdp_adamw_segment *segs, int *n, size_t c0, size_t s0, size_t s1)
{
    const int E = g->st->cfg.num_experts;
    const size_t per = (size_t)d->rows / (size_t)E * (size_t)d->cols;
    for (size_t e = (s0 - d->offset) / per; e < (size_t)E && d->offset + e * per < s1; e++) {
        size_t e0 = d->offset + e * per, e1 = e0 + per;
        e0 = e0 > s0 ? e0 : s0;
        e1 = e1 < s1 ? e1 : s1;
        add_seg(segs, n, e0 - c0, e1 - e0, d->decay, (int)e + 1);
    }
}

/* How many segments sdp_graph_chunk_segs may make of chunk [c0, c1) of group gi. */
static size_t segs_cap(const sdp_graph_t *g, const struct sdp_group_state *gs, size_t c0, size_t c1,
                       int rows)
{
    size_t cap = (size_t)gs->ntensors + (rows ? (c1 - c0) / (size_t)g->C + 2 : 0);
    return cap + (g->st->cfg.moe ? 2 * (size_t)g->st->cfg.num_experts : 0);
}

/* AdamW's segments of chunk c of group gi (offsets in the chunk), one per run of elements with
 * one decay setting: all of the chunk (rows 0); or, of the tied embedding, only the rows that the
 * step's tokens do not select, with every other tensor of the chunk (rows 1, the early update);
 * or only the rows they select (rows 2, the rest); of those, the rows the next step's tokens
 * select too (rows 3, defer_rows) or do not (rows 4, the late update).  Returns the count (0:
 * nothing of the kind in the chunk) or -ENOMEM; *out is malloc'd. */
int sdp_graph_chunk_segs(const sdp_graph_t *g, int gi, int c, int rows,
                         struct sdp_adamw_segment **out)
{
    const struct sdp_group_state *gs = &g->st->groups[gi];
    size_t c0 = sdp_rt_tensor_part_offset(gs->master, c);
    size_t c1 = c0 + sdp_rt_tensor_nelems(sdp_rt_tensor_part(gs->master, c));
    struct sdp_adamw_segment *segs = malloc(segs_cap(g, gs, c0, c1, rows) * sizeof(*segs));
    int n = 0;
    if (!segs)
        return -ENOMEM;
    for (int i = 0; i < gs->ntensors; i++) {
        const struct sdp_param_desc *d = &gs->tensors[i];
        size_t t0 = d->offset, t1 = d->offset + (size_t)d->rows * d->cols;
        size_t s0 = t0 > c0 ? t0 : c0, s1 = t1 < c1 ? t1 : c1;
        if (s0 >= s1)
            continue;
        if (d->kind == SDP_PT_EXP_GU || d->kind == SDP_PT_EXP_DOWN) {
            add_expert_segs(g, d, segs, &n, c0, s0, s1);
            continue;
        }
        if (!rows || gi != 0 || d->offset != g->embed_off) {
            if (rows < 2)
                add_seg(segs, &n, s0 - c0, s1 - s0, d->decay, 0);
            continue;
        }
        for (size_t r = (s0 - t0) / d->cols; t0 + r * d->cols < s1; r++) {
            size_t r0 = t0 + r * d->cols, r1 = r0 + d->cols;
            r0 = r0 > s0 ? r0 : s0;
            r1 = r1 < s1 ? r1 : s1;
            int mine = rows == 1   ? !g->row_mark[r]
                       : rows == 2 ? g->row_mark[r]
                                   : g->row_mark[r] && !g->next_mark[r] == (rows == 4);
            if (mine)
                add_seg(segs, &n, r0 - c0, r1 - r0, d->decay, 0);
        }
    }
    *out = segs;
    return n;
}

/* Chunk c of group gi's working copy into the copy the compute reads, where it keeps it, when the
 * working copies are off the host (sdp_state.work_staged): the stage AdamW or the cast wrote is
 * copied in (StarPU brings it over PCIe) and dropped, so the host holds only the stages in
 * flight.  Nothing to do otherwise: the chunk was written in place. */
static int put_chunk(sdp_graph_t *g, int step, int gi, int c, enum sdp_phase ph)
{
    struct sdp_group_state *gs = &g->st->groups[gi];
    struct sdp_task_opts o = opts(g, step, gi, -1, ph);
    if (!gs->staged)
        return 0;
    o.hint.chunk = c;
    TRY_RET(sdp_task_param_put(&o, work_of(g, gi, step), sdp_rt_tensor_part_offset(gs->master, c),
                               gs->work_stage[c]));
    sdp_rt_tensor_discard(gs->work_stage[c]);
    return 0;
}

/* Where AdamW or the cast writes chunk c of group gi's next working copy: the chunk itself, or its
 * stage when the working copies are off the host. */
static sdp_rt_tensor_t *work_chunk(const sdp_graph_t *g, int gi, int c, int step)
{
    const struct sdp_group_state *gs = &g->st->groups[gi];
    return gs->staged ? gs->work_stage[c] : sdp_rt_tensor_part(work_of(g, gi, step), c);
}

/* Whether the update of chunk c of group gi goes through a stage of its own because of the early
 * MLP update (mlp_early) with the working copies on the host. */
static int early_stage(const sdp_graph_t *g, int gi, int c)
{
    int c0 = sdp_graph_mlp_early(g, gi, g->c.n_micro - 1);
    return !g->st->groups[gi].staged && c0 > 0 && c >= c0;
}

/* AdamW on chunk c of group gi on the GPU (gpu_updates): from the chunk's packed gradient into a
 * stage there, then a param_put into the working copy.  Neither task fills a stage the policy
 * counts (they hold no host buffer). */
static int update_chunk_gpu(sdp_graph_t *g, int step, int gi, int c)
{
    struct sdp_group_state *gs = &g->st->groups[gi];
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_UPDATE);
    sdp_rt_tensor_t *p = sdp_rt_tensor_part(gs->master, c), *stage = NULL;
    struct sdp_adamw_segment *segs;
    int nsegs = sdp_graph_chunk_segs(g, gi, c, 0, &segs), rc;
    char name[64];
    if (nsegs < 0)
        return sdp_err(nsegs, "AdamW segments of group %d, chunk %d", gi, c);
    o.hint.chunk = c;
    o.hint.stage_role = SDP_STAGE_NONE;
    snprintf(name, sizeof(name), "g%d.gpu_stage.%d", gi, c);
    rc = nsegs > 0 ? sdp_rt_tensor_temp(&stage, sdp_rt_tensor_dtype(gs->work),
                                        sdp_rt_tensor_nelems(p), name)
                   : 0;
    if (!rc && stage)
        rc = sdp_task_adamw_gpu(&o, p, gs->grad_ret[c], sdp_rt_tensor_part(gs->m, c),
                                sdp_rt_tensor_part(gs->v, c), stage,
                                g->c.max_grad_norm > 0 || g->c.skip_nonfinite ? g->clip : NULL,
                                g->c.skip_nonfinite, g->lr, g->c.beta1, g->c.beta2, g->c.eps,
                                g->c.weight_decay, step + 1, segs, nsegs);
    free(segs);
    if (!rc) /* its memory goes back to StarPU for the next chunk */
        sdp_rt_tensor_discard(gs->grad_ret[c]);
    if (!rc && stage)
        rc = sdp_task_param_put(&o, work_of(g, gi, step), sdp_rt_tensor_part_offset(gs->master, c),
                                stage);
    if (!rc && stage && g->plan.gpu_writeback) {
        /* SDP_GPU_UPDATE_WRITEBACK=1: StarPU writes the chunk's state back to the host when the
         * bus is idle, so that evicting it later costs no transfer */
        sdp_rt_tensor_wont_use(p);
        sdp_rt_tensor_wont_use(sdp_rt_tensor_part(gs->m, c));
        sdp_rt_tensor_wont_use(sdp_rt_tensor_part(gs->v, c));
    }
    if (stage)
        sdp_rt_tensor_release(stage);
    return rc;
}

/* AdamW on chunk c of group gi (rows: chunk_segs), from the chunk's gradient (bf16 return: its
 * packed copy, given back to StarPU afterwards). */
int sdp_graph_update_chunk(sdp_graph_t *g, int step, int gi, int c, int rows)
{
    if (rows == 0 && gpu_updates(g, gi))
        return update_chunk_gpu(g, step, gi, c);
    struct sdp_group_state *gs = &g->st->groups[gi];
    struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_UPDATE);
    /* the packed rows of the step's tokens (pack_rows), or the chunk's gradient */
    sdp_rt_tensor_t *rows_grad = gi == 0 && rows >= 2 && g->rows_grad ? g->rows_grad[c] : NULL;
    sdp_rt_tensor_t **out = sdp_graph_grad_out(g, gi); /* the fp32 return's chunks */
    sdp_rt_tensor_t *grad = rows_grad      ? rows_grad
                            : out          ? out[c]
                            : gs->grad_ret ? gs->grad_ret[c]
                                           : sdp_rt_tensor_part(gs->grad, c);
    sdp_rt_tensor_t *p = sdp_rt_tensor_part(gs->master, c), *m = sdp_rt_tensor_part(gs->m, c),
                    *v = sdp_rt_tensor_part(gs->v, c), *w = work_chunk(g, gi, c, step);
    struct sdp_adamw_segment *segs;
    sdp_rt_tensor_t *stage = NULL;  /* the early MLP update's stage, working copies on the host */
    sdp_rt_tensor_t *packed = NULL; /* a staged group's rows: the segments back to back */
    size_t covered = 0, gbase = 0;  /* gbase: rows 4's start in the packed gradient */
    int nsegs = rows >= 3 ? sdp_graph_defer_segs(g, c, rows, &segs, &gbase)
                          : sdp_graph_chunk_segs(g, gi, c, rows, &segs),
        rc = 0;
    if (nsegs < 0)
        return sdp_err(nsegs, "AdamW segments of group %d, chunk %d", gi, c);
    for (int i = 0; i < nsegs; i++)
        covered += segs[i].nelems;
    o.hint.chunk = c;
    if (gs->staged) /* it writes the chunk's stage, alive until its put */
        o.hint.stage_role = rows == 2 ? SDP_STAGE_BY_PHASE : SDP_STAGE_FILL; /* 2: see put_rows */
    if (gs->staged && nsegs > 0 && rows != 0) {
        /* only the rows it updates cross PCIe (the rest of the copy there stays as it is) */
        char name[64];
        snprintf(name, sizeof(name), "g%d.rows_stage.%d.%d", gi, c, rows);
        rc = sdp_rt_tensor_temp(&packed, sdp_rt_tensor_dtype(w),
                                sdp_graph_packed_len(covered, sdp_rt_tensor_nelems(p)), name);
        if (rc) {
            free(segs);
            return rc;
        }
        w = packed; /* alive until its put below */
    }
    if (rows == 0 && nsegs > 0 && early_stage(g, gi, c)) {
        char name[64];
        snprintf(name, sizeof(name), "g%d.mlp_stage.%d", gi, c);
        rc = sdp_rt_tensor_temp(&stage, sdp_rt_tensor_dtype(w), sdp_rt_tensor_nelems(w), name);
        if (rc) {
            free(segs);
            return rc;
        }
        w = stage; /* alive until its stage_put below */
        o.hint.stage_role = SDP_STAGE_FILL;
    }
    if (nsegs > 0 && rows == 1) {
        rc = sdp_task_adamw_early(&o, p, grad, m, v, w, g->lr, g->c.beta1, g->c.beta2, g->c.eps,
                                  g->c.weight_decay, step + 1, segs, nsegs);
    } else if (nsegs > 0 && rows == 4) { /* read by the next step's head only: after the rest */
        o.hint.late = 1;
        rc = sdp_task_adamw_late(&o, p, grad, gbase, m, v, w, g->lr, g->c.beta1, g->c.beta2,
                                 g->c.eps, g->c.weight_decay, step + 1, segs, nsegs);
    } else if (nsegs > 0) /* a sparse layer's: the experts' segments skipped when idle */
        rc = sdp_task_adamw_experts(
            &o, p, grad, m, v, w, g->c.max_grad_norm > 0 || g->c.skip_nonfinite ? g->clip : NULL,
            g->c.skip_nonfinite, sdp_graph_moe_used(g, gi), g->lr, g->c.beta1, g->c.beta2, g->c.eps,
            g->c.weight_decay, step + 1, segs, nsegs);
    if (!rc && packed && rows == 1) {
        struct sdp_task_opts op = opts(g, step, gi, -1, SDP_PH_UPDATE);
        size_t off = sdp_rt_tensor_part_offset(gs->master, c);
        op.hint.chunk = c;
        rc = sdp_task_param_put_segs(&op, work_of(g, gi, step), 1, &off, &packed, &segs, &nsegs, 1);
    } else if (!rc && packed) { /* the rows of the step's tokens: one put for all (put_rows) */
        struct rows_put *rp = &g->rput;
        rp->stage[rp->n] = packed;
        rp->segs[rp->n] = segs;
        rp->nsegs[rp->n] = nsegs;
        rp->off[rp->n++] = sdp_rt_tensor_part_offset(gs->master, c);
        packed = NULL;
        segs = NULL;
    }
    free(segs);
    if (rows_grad) { /* dropped once its (last) update has read it */
        if (rows != 3) {
            sdp_rt_tensor_release(rows_grad);
            g->rows_grad[c] = NULL;
        }
    } else if (!rc && (gs->grad_ret || out)) /* its memory goes back to StarPU for the next chunk */
        sdp_rt_tensor_discard(grad);
    if (!rc && stage) {
        struct sdp_task_opts op = opts(g, step, gi, -1, SDP_PH_UPDATE);
        op.hint.chunk = c;
        rc = sdp_task_stage_put(&op, sdp_rt_tensor_part(work_of(g, gi, step), c), stage);
    }
    if (stage)
        sdp_rt_tensor_release(stage);
    if (packed)
        sdp_rt_tensor_release(packed);
    else if (!rc && nsegs > 0 && !(gs->staged && rows != 0))
        rc = put_chunk(g, step, gi, c, SDP_PH_UPDATE);
    return rc;
}

/* Squared norms per chunk (already submitted with one rank, see sdp_graph_norms()), the global
 * norm, then AdamW per chunk. */
int sdp_graph_optimizer(sdp_graph_t *g, int step, int update)
{
    struct sdp_state *st = g->st;
    int rc;
    if (reduces(g)) {
        TRY_RET(sdp_graph_reduce_ranks(g, step));
        for (int gi = 0; gi < st->ngroups; gi++) {
            TRY_RET(sdp_graph_norms(g, step, gi));
            TRY_RET(sdp_graph_grad_chunks(g, step, gi));
        }
    }
    struct sdp_task_opts on = opts(g, step, -1, -1, SDP_PH_NORM);
    rc = sdp_task_grad_norm(&on, g->clip, g->sumsq, g->nsumsq, g->c.max_grad_norm);
    if (rc || !update)
        return rc;
    if (g->plan.lora.rank > 0) /* LoRA: the adapters alone; the base is frozen */
        return sdp_graph_lora_update(g, step);
    for (int gi = 0; gi < st->ngroups; gi++) {
        for (int c = 0; c < st->groups[gi].nchunks; c++)
            TRY_RET(sdp_graph_update_chunk(
                g, step, gi, c, gi == 0 && sdp_graph_early_embed(g) ? (g->defer ? 3 : 2) : 0));
        if (gi == 0 && g->defer) { /* the next step's lookups, then the late rows */
            TRY_RET(sdp_graph_lookup_ahead(g, step + 1));
            for (int c = 0; c < st->groups[gi].nchunks; c++)
                TRY_RET(sdp_graph_update_chunk(g, step, gi, c, 4));
        }
        if (gi == 0)
            TRY_RET(sdp_graph_put_rows(g, step));
        /* an fp32 gradient read chunk by chunk is dead once its updates have read it (the next
         * step zeroes it): without a window nothing would evict its GPU copy, and StarPU kept
         * every layer's there */
        if (!reduces(g) && !st->groups[gi].grad_ret && !(gi == 0 && g->rows_grad))
            sdp_rt_tensor_discard(st->groups[gi].grad);
    }
    return 0;
}

/* The working copy of group gi's adapters from their masters, chunk by chunk. */
static int lora_cast(sdp_graph_t *g, int step, int gi)
{
    struct sdp_lora_state *ls = g->st->groups[gi].lora;
    for (int c = 0; c < ls->nchunks; c++) {
        struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
        o.hint.chunk = c;
        o.priority = 1;
        TRY_RET(
            sdp_task_cast(&o, sdp_rt_tensor_part(ls->work, c), sdp_rt_tensor_part(ls->master, c)));
    }
    return 0;
}

int sdp_graph_refresh_work(sdp_graph_t *g, int step)
{
    struct sdp_state *st = g->st;
    if (st->work_valid)
        return 0;
    for (int gi = 0; gi < st->ngroups; gi++) {
        struct sdp_group_state *gs = &st->groups[gi];
        if (gs->staged) { /* the copy off the host gets a first value where it is computed */
            struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
            /* a GPU memset: no staging slot, so the group's puts need not wait for the casts */
            o.hint.stage_role = SDP_STAGE_NONE;
            TRY_RET(sdp_task_zero(&o, gs->work));
        }
        if (gs->lora) /* LoRA: the adapters' copies from their masters; the base is frozen */
            TRY_RET(lora_cast(g, step, gi));
        for (int c = 0; c < gs->nchunks && !gs->frozen; c++) {
            struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
            o.hint.chunk = c;
            o.priority = 1;
            if (gs->staged)
                o.hint.stage_role = SDP_STAGE_FILL;
            TRY_RET(
                sdp_task_cast(&o, work_chunk(g, gi, c, step), sdp_rt_tensor_part(gs->master, c)));
            TRY_RET(put_chunk(g, step, gi, c, SDP_PH_CAST));
        }
    }
    st->work_valid = 1;
    g->work2_valid = 0;
    return 0;
}

/* param_delay 1: the second working copies start from the masters too. */
int sdp_graph_refresh_work2(sdp_graph_t *g, int step)
{
    struct sdp_state *st = g->st;
    if (!g->plan.param_delay || g->work2_valid)
        return 0;
    for (int gi = 0; gi < st->ngroups; gi++)
        for (int c = 0; c < st->groups[gi].nchunks; c++) {
            struct sdp_task_opts o = opts(g, step, gi, -1, SDP_PH_CAST);
            o.hint.chunk = c;
            o.priority = 1;
            TRY_RET(sdp_task_cast(&o, sdp_rt_tensor_part(g->work2[gi], c),
                                  sdp_rt_tensor_part(st->groups[gi].master, c)));
        }
    g->work2_valid = 1;
    return 0;
}
