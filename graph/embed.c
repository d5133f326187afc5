/* SPDX-License-Identifier: MIT */
/* The tied embedding and LM head: the early update of the rows the step's tokens do not select,
 * the pack and put of those they do, the lookup on the host and the next step's lookups ahead. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "base/sdp_log.h"

static int packed_segs(const sdp_graph_t *g, int c, struct sdp_adamw_segment **out, size_t *first);

/* The tied embedding's final pack after its early update (early_embed): the norms of every chunk,
 * and the bf16 gradient of the rows of the step's tokens alone, packed, into rows_grad, which the
 * updates of those rows read; only they cross PCIe then (for V rows and n uniform random tokens,
 * about V (1 - e^(-n / V)) of them), instead of the whole group. */
int sdp_graph_pack_rows(sdp_graph_t *g, int step)
{
    struct sdp_group_state *gs = &g->st->groups[0];
    struct sdp_task_opts o = opts(g, step, 0, -1, SDP_PH_NORM);
    int nc = gs->nchunks, rc = 0;
    struct sdp_adamw_segment **segs = calloc((size_t)nc, sizeof(*segs));
    int *nsegs = calloc((size_t)nc, sizeof(*nsegs));
    if (!segs || !nsegs)
        rc = sdp_err(-ENOMEM, "segments of %d chunks", nc);
    for (int c = 0; c < nc && !rc; c++) {
        size_t covered = 0;
        char name[64];
        nsegs[c] = packed_segs(g, c, &segs[c], NULL);
        if (nsegs[c] < 0) {
            rc = sdp_err(nsegs[c], "AdamW segments of group 0, chunk %d", c);
            nsegs[c] = 0;
            break;
        }
        for (int k = 0; k < nsegs[c]; k++)
            covered += segs[c][k].nelems;
        snprintf(name, sizeof(name), "g0.rows_grad.%d", c);
        if (nsegs[c] > 0)
            rc = sdp_rt_tensor_temp(
                &g->rows_grad[c], SDP_BF16,
                sdp_graph_packed_len(covered,
                                     sdp_rt_tensor_nelems(sdp_rt_tensor_part(gs->master, c))),
                name);
    }
    if (!rc)
        rc = sdp_task_grad_pack_rows(&o, gs->grad, g->rows_grad, &g->sumsq[g->chunk0[0]], segs,
                                     nsegs);
    if (!rc)
        sdp_rt_tensor_discard(gs->grad);
    for (int c = 0; c < nc; c++) {
        if (rc && g->rows_grad[c]) {
            sdp_rt_tensor_release(g->rows_grad[c]);
            g->rows_grad[c] = NULL;
        }
        if (segs)
            free(segs[c]);
    }
    free(segs);
    free(nsegs);
    return rc;
}

/* The early update of the tied embedding (the plan's embed_early), in a step that updates: the
 * gradient of every embedding row that none of the step's tokens selects is final once the LM
 * head's backward of the last micro-batch has run (the embedding's backward adds only to the rows
 * of the step's tokens).  Those rows are packed (grad_pack_early) and updated (adamw_early) while
 * the backward goes on; the rows of the step's tokens and the group's other tensors are updated
 * after the embedding's backward, from the group's usual pack, so the next forward, which starts
 * with the embedding, waits for those alone.  With the embedding's working copy off the host
 * (train.embed_home gpu) each of the two updates of a chunk writes the rows it updates into a
 * packed stage, and a param_put_early or param_put_rows scatters them into the copy the GPU keeps.
 */
int sdp_graph_early_embed(const sdp_graph_t *g)
{
    return g->updating && g->plan.group[0].embed_early;
}

/* The segments of the tied embedding's chunk c that its final pack puts back to back (pack_rows):
 * the rows of the step's tokens (rows 2) or, when the step defers its late rows (defer_rows), the
 * rows the next step's tokens select too (rows 3), then the others (rows 4); *first: the elements
 * of rows 3 (where rows 4 starts in the packed chunk).  Returns the count or -ENOMEM. */
static int packed_segs(const sdp_graph_t *g, int c, struct sdp_adamw_segment **out, size_t *first)
{
    struct sdp_adamw_segment *a = NULL, *b = NULL, *ab;
    int na, nb;
    if (first)
        *first = 0;
    if (!g->defer)
        return sdp_graph_chunk_segs(g, 0, c, 2, out);
    na = sdp_graph_chunk_segs(g, 0, c, 3, &a);
    nb = na < 0 ? na : sdp_graph_chunk_segs(g, 0, c, 4, &b);
    if (nb < 0 || !(ab = realloc(a, ((size_t)na + (size_t)nb + 1) * sizeof(*ab)))) {
        free(a);
        free(b);
        return -ENOMEM;
    }
    size_t na_el = 0, nb_el = 0;
    for (int k = 0; k < na; k++)
        na_el += ab[k].nelems;
    for (int k = 0; k < nb; k++)
        nb_el += b[k].nelems;
    if (na_el + nb_el == sdp_rt_tensor_nelems(sdp_rt_tensor_part(g->st->groups[0].master, c))) {
        /* the step's rows fill the chunk: its packed gradient is as long as the chunk, which
         * AdamW reads in place, so in the chunk's order, and rows 3 takes it all (defer_segs) */
        free(ab);
        free(b);
        if (first)
            *first = na_el + nb_el;
        return sdp_graph_chunk_segs(g, 0, c, 2, out);
    }
    if (first)
        *first = na_el;
    if (nb > 0)
        memcpy(ab + na, b, (size_t)nb * sizeof(*b));
    free(b);
    *out = ab;
    return na + nb;
}

/* The segments of the tied embedding's chunk c that update `rows` takes when the step defers its
 * late rows (rows 3: those the next step's tokens select too, before its lookup; rows 4: the
 * others, after it), and *gbase, where they start in the chunk's packed gradient (packed_segs'
 * order).  Returns the count or -ENOMEM; *out is malloc'd. */
int sdp_graph_defer_segs(const sdp_graph_t *g, int c, int rows, struct sdp_adamw_segment **out,
                         size_t *gbase)
{
    struct sdp_adamw_segment *all;
    size_t first;
    int n = packed_segs(g, c, &all, &first), k = 0;
    if (n < 0)
        return n;
    size_t run = 0;
    while (k < n && run < first) /* rows 3 come first, whole segments */
        run += all[k++].nelems;
    *gbase = rows == 3 ? 0 : first;
    if (rows == 4) {
        memmove(all, all + k, (size_t)(n - k) * sizeof(*all));
        n -= k;
    } else {
        n = k;
    }
    *out = all;
    return n;
}

/* The put of the embedding's rows of the step's tokens (update_chunk's rows 2 with the group
 * staged): one task takes every chunk's packed stage, so StarPU brings them all over PCIe at once.
 * A put per chunk ran one at a time (the puts of one copy commute: StarPU hands them out one by
 * one), each waiting for its stage behind the next forward's weight fetches, and the step grew
 * (bench/results/2026-12-03-h200-embed-rows.md).  Its stages are not counted against the bound on
 * stages alive (their updates do not fill a stage for the policy, and the put drains none): the
 * bound would hold back the very updates this put waits for. */
int sdp_graph_put_rows(sdp_graph_t *g, int step)
{
    struct rows_put *rp = &g->rput;
    struct sdp_task_opts o = opts(g, step, 0, -1, SDP_PH_UPDATE);
    o.hint.stage_role = SDP_STAGE_NONE; /* it drains no counted stage */
    int rc = rp->n > 0 ? sdp_task_param_put_segs(&o, work_of(g, 0, step), rp->n, rp->off, rp->stage,
                                                 rp->segs, rp->nsegs, 0)
                       : 0;
    for (int k = 0; k < rp->n; k++) {
        sdp_rt_tensor_release(rp->stage[k]);
        free(rp->segs[k]);
    }
    rp->n = 0;
    return rc;
}

/* The pack and the early update of the tied embedding (early_embed), after the LM head's
 * backward of the step's last micro-batch: the accumulator stays for the embedding's backward. */
int sdp_graph_embed_early(sdp_graph_t *g, int step)
{
    struct sdp_group_state *gs = &g->st->groups[0];
    struct sdp_task_opts o = opts(g, step, 0, -1, SDP_PH_NORM);
    /* its sums are not the norms: the group's pack after the embedding's backward rewrites them */
    TRY_RET(sdp_task_grad_pack_early(&o, gs->grad, gs->grad_ret, &g->sumsq[g->chunk0[0]]));
    for (int c = 0; c < gs->nchunks; c++)
        TRY_RET(sdp_graph_update_chunk(g, step, 0, c, 1));
    return 0;
}

/* The forward's lookup on the host (lookup_host_create) of micro-batch mb of `step`: its part
 * tasks, each of whole sequences, on the CPU workers from the working copy. */
int sdp_graph_lookup_host(sdp_graph_t *g, int step, int mb, sdp_rt_tensor_t *ids)
{
    struct sdp_task_opts o = opts(g, step, 0, mb, SDP_PH_FWD);
    sdp_rt_tensor_t *x0 = g->x0[mb];
    for (int k = 0; k < sdp_rt_tensor_nparts(x0); k++) { /* part k: its rows' ids */
        sdp_rt_tensor_t *part = sdp_rt_tensor_part(x0, k);
        TRY_RET(sdp_task_embedding_fwd_host(
            &o, part, ids, sdp_rt_tensor_part_offset(x0, k) / (size_t)g->C, work_of(g, 0, step),
            sdp_state_off(g->st, 0, SDP_PT_EMBED), (int)(sdp_rt_tensor_nelems(part) / (size_t)g->C),
            g->C));
    }
    return 0;
}

/* Whether the step being submitted defers its late rows (the plan's defer_rows: the lookup on
 * the host, the embedding's early update and its rows pack), when the next step's ids were told
 * (sdp_graph_set_next).  After the embedding's backward only the rows of the step's tokens are
 * left to update (rows 2), and of those the next step's lookup reads only the ones its own tokens
 * select too (rows 3): their updates come first, then the next step's lookups (lookup_ahead), then
 * the others (rows 4, adamw_late), which only the next step's LM head reads, at the end of its
 * forward.  For V rows and n uniform random tokens a step, rows 3 holds about V (1 - e^(-n / V))^2
 * rows of the V (1 - e^(-n / V)) of rows 2.  Every read still sees every row's update of the step
 * before (invariant 3, row by row): StarPU orders the lookups after rows 3's updates, and the late
 * updates after the lookups and before the head's reads, through the working copy's chunks. */
int sdp_graph_defer_rows(const sdp_graph_t *g, int update)
{
    return update && g->next_told && g->plan.defer_rows;
}

/* The lookups of `step` (the next one), submitted by the step before it (defer_rows) with the
 * ids sdp_graph_set_next told: into the ids of its set, which the step before that one has done
 * with (its embedding's backward ended before this step was submitted). */
int sdp_graph_lookup_ahead(sdp_graph_t *g, int step)
{
    int nm = g->c.n_micro, set = step & 1;
    size_t per_mb = (size_t)g->c.micro_batch * g->c.seq_len;
    for (int mb = 0; mb < nm; mb++) {
        sdp_rt_tensor_t *ti = g->ids[set * nm + mb];
        struct sdp_task_opts o = opts(g, step, 0, mb, SDP_PH_FWD);
        TRY_RET(sdp_graph_fill_i32(ti, g->next_ids + mb * per_mb, per_mb));
        TRY_RET(sdp_graph_lookup_host(g, step, mb, ti));
        /* the embeddings go to the GPU once looked up, before layer 1's update has ended: else
         * they would cross PCIe with its weights, once its first task is ready */
        TRY_RET(sdp_task_act_fetch(&o, g->x0[mb]));
    }
    int32_t *looked = g->next_ids; /* the next sdp_graph_set_next writes the other buffer */
    g->next_ids = g->looked_ids;
    g->looked_ids = looked;
    g->looked_up = step;
    return 0;
}

/* The forward's embedding lookup on the host (embed_lookup_host): where it applies (one rank, the
 * embedding's working copy on the host), a pinned buffer per micro-batch for its embeddings, in
 * parts of whole sequences (at most 16: about one per CPU worker), which the CPU workers fill from
 * the updated working copy as soon as the embedding's update has written it; the next forward
 * then waits for 2 x B x T x C bytes over PCIe instead of the whole table (the plan's lookup_host).
 */
int sdp_graph_lookup_host_create(sdp_graph_t *g)
{
    const struct sdp_graph_conf *c = &g->c;
    int B = c->micro_batch, T = c->seq_len, rc = 0, nparts, per;
    size_t *parts;
    char name[64];
    per = (B + 15) / 16; /* sequences a part (the last may hold fewer) */
    nparts = (B + per - 1) / per;
    g->x0 = calloc((size_t)c->n_micro, sizeof(*g->x0));
    parts = calloc((size_t)nparts, sizeof(*parts));
    if (!g->x0 || !parts) {
        free(parts);
        return sdp_err(-ENOMEM, "embedding buffers of %d micro-batches", c->n_micro);
    }
    for (int k = 0; k < nparts; k++)
        parts[k] = (size_t)(B - k * per < per ? B - k * per : per) * T * g->C;
    g->next_ids = calloc((size_t)c->n_micro * B * T, sizeof(*g->next_ids));
    g->looked_ids = calloc((size_t)c->n_micro * B * T, sizeof(*g->looked_ids));
    g->next_mark = calloc((size_t)g->V, 1);
    if (!g->next_ids || !g->looked_ids || !g->next_mark)
        rc = sdp_err(-ENOMEM, "the next step's ids (%d x %d tokens)", c->n_micro, B * T);
    for (int i = 0; i < c->n_micro && !rc; i++) {
        snprintf(name, sizeof(name), "x0.mb%d", i);
        rc = sdp_rt_tensor_create(&g->x0[i], g->res_dt, (size_t)B * T * g->C, name);
        if (!rc)
            rc = sdp_rt_tensor_partition(g->x0[i], nparts, parts);
    }
    free(parts);
    return rc;
}
