/* SPDX-License-Identifier: MIT */
/* The pure parts of the sdp-slidedp policy (policies/slidedp.c): the critical-path ordering key of
 * a task, its position along the pass (for the prefetch window) and the staged-task test, all
 * functions of the task's hint alone.  StarPU-free, so that
 * tests/policies/test_policies_slidedp_key.c checks them without a runtime. */
#ifndef SDP_SLIDEDP_INTERNAL_H
#define SDP_SLIDEDP_INTERNAL_H

#include <stdint.h>

#include "runtime/hint.h"

/* The settings of one start of the policy (policies/slidedp_settings.c). */
struct sdp_slidedp_settings {
    int depth;          /* staged tasks (casts, AdamW chunk updates) in flight at most */
    int window;         /* prefetch window, in groups */
    int stages;         /* stages alive at most */
    int eager;          /* prefetch every fetch's input when it is queued */
    int host_prefetch;  /* bring a queued host update's inputs to the host */
    double idle_any_us; /* idle this long, a CUDA worker runs any fetch */
    const char *depth_from, *window_from; /* where depth and window came from, for the log */
};

/** Read the settings: the recipe's (sdp_policy_slidedp_configure), else the environment's, else
 * the defaults (the staging depth's from ncpu, the CPU workers). */
void sdp_slidedp_settings_read(struct sdp_slidedp_settings *st, int ncpu);

/* A CUDA worker with nothing else to run for this long runs a fetch within its prefetch window
 * that the window rule holds back (and any fetch after idle_any_us). */
#define SDP_SLIDEDP_FETCH_IDLE_US 5000.0

/* Field widths of the key, most significant first (64 bits in all). */
#define SDP_SLIDEDP_SLOT_BITS  24
#define SDP_SLIDEDP_STAGE_BITS 2
#define SDP_SLIDEDP_GPOS_BITS  14
#define SDP_SLIDEDP_TIE_BITS   2
#define SDP_SLIDEDP_MB_BITS    10
#define SDP_SLIDEDP_CHUNK_BITS 12
/* The largest group position: backward positions count down from it. */
#define SDP_SLIDEDP_MAXG ((1 << SDP_SLIDEDP_GPOS_BITS) - 1)

static inline uint64_t sdp_slidedp_clamp(long v, int bits)
{
    long max = (1L << bits) - 1;
    return (uint64_t)(v < 0 ? 0 : v > max ? max : v);
}

/* 1 for the tasks that fill staging buffers and fall under the backpressure bound: the casts and
 * the AdamW chunk updates (which also write the next working copy).  Not a task of those phases
 * that fills none (SDP_STAGE_NONE, the zeroing of a working copy off the host) or only moves data
 * (a param_put empties a stage: held back behind the casts or updates that fill the others, the
 * puts would keep every stage alive on the host: bench/results/2026-12-01-h200-stages.md). */
static inline int sdp_slidedp_is_staged(const struct sdp_hint *h)
{
    return h && h->move == SDP_MOVE_NONE && h->stage_role != SDP_STAGE_NONE &&
           (h->phase == SDP_PH_CAST || h->phase == SDP_PH_UPDATE);
}

/* 1 for a task that writes a stage (SDP_STAGE_FILL): the policy counts it alive from its start
 * to the end of the put that empties it, and starts no new one while `stages` are alive. */
static inline int sdp_slidedp_fills_stage(const struct sdp_hint *h)
{
    return h && h->stage_role == SDP_STAGE_FILL && sdp_slidedp_is_staged(h);
}

/* 1 for the put that empties a stage (not one whose stage role is none: it empties stages the
 * policy did not count). */
static inline int sdp_slidedp_drains_stage(const struct sdp_hint *h)
{
    return h && h->move == SDP_MOVE_PUT && h->stage_role != SDP_STAGE_NONE;
}

/* 1 for the tasks that only move data (param_fetch, param_put): a CUDA worker running one does
 * not move the position it computes at, which its prefetch window counts from. */
static inline int sdp_slidedp_moves_only(const struct sdp_hint *h)
{
    return h && h->move != SDP_MOVE_NONE;
}

/* The critical-path key of a task; the smaller key runs first (ties: the earlier push).
 *
 *   key = slot:24 | stage:2 | gpos:14 | tie:2 | mb:10 | chunk:12          (hinted tasks)
 *   key = 2^31 - 1 - priority, in [0, 2^32)                             (no hint)
 *
 *   slot  = step + 2; step + 3 for an update: the update of step s writes the weights that the
 *           forward of step s + 1 reads, so it is ordered with that step's forward pass; but
 *           step + 2 for a put (SDP_MOVE_PUT) of any phase, which so comes before the rest of
 *           its step's backward: it takes microseconds of the GPU, and while it waits its stage
 *           stays on the host
 *           (step -1, evaluation outside training, gets slot 1; hinted keys are >= 2^40, so
 *           StarPU's own and other unhinted tasks, ordered by their priority, come first)
 *   stage = 0 forward pass (cast, update, fwd, loss), 1 backward pass (recompute, bwd, and a
 *           group's norms: its chunks' sums of squares or its bf16 pack), 2 the global norm
 *   gpos  = group in stage 0; MAXG - group in stage 1 (the backward runs from the head down);
 *           MAXG for group -1 (the global norm, after every chunk's sum of squares) and for a
 *           late update (h->late: read by the next step's head only, so after every group's
 *           update and the forward's tasks)
 *   tie   = 0 cast and update (group g's weights before its forward), 1 fwd, recompute, bwd,
 *           2 loss and a group's norms (right after the group's backward, before the next
 *           group's: they read the final gradient on the GPU that made it, before the window
 *           lets it go and before the group's updates wait on the pack)
 *   mb, chunk = micro-batch and chunk + 1 (-1 becomes 0), clamped to their widths
 *
 * Consequences (each checked by the test): an earlier step's compute and norms run before later
 * work; the forward runs group by group in ascending order (every micro-batch of group g while
 * its weights are resident, then g + 1) and the backward in descending order, each group's norms
 * right after its backward; the global norm comes before the updates; updates run from group 0
 * up; and the forward of group g of step s + 1 is ahead of the step-s updates of every later
 * group, so those never starve it. */
static inline uint64_t sdp_slidedp_key(const struct sdp_hint *h, int priority)
{
    long slot, stage, gpos, tie;
    if (!h)
        return (uint64_t)(2147483647L - (long)priority);
    slot = (long)h->step + (h->phase == SDP_PH_UPDATE && h->move != SDP_MOVE_PUT ? 3 : 2);
    switch (h->phase) {
    case SDP_PH_RECOMPUTE:
    case SDP_PH_BWD:
        stage = 1;
        tie = 1;
        break;
    case SDP_PH_NORM:
        stage = h->group < 0 ? 2 : 1;
        tie = h->group < 0 ? 1 : 2;
        break;
    case SDP_PH_CAST:
    case SDP_PH_UPDATE:
        stage = 0;
        tie = 0;
        break;
    case SDP_PH_LOSS:
        stage = 0;
        tie = 2;
        break;
    default: /* forward */
        stage = 0;
        tie = 1;
        break;
    }
    if (h->group < 0 || h->late)
        gpos = SDP_SLIDEDP_MAXG;
    else if (stage == 1)
        gpos = SDP_SLIDEDP_MAXG - (h->group < SDP_SLIDEDP_MAXG ? h->group : SDP_SLIDEDP_MAXG);
    else
        gpos = h->group;
    return sdp_slidedp_clamp(slot, SDP_SLIDEDP_SLOT_BITS) << (64 - SDP_SLIDEDP_SLOT_BITS) |
           sdp_slidedp_clamp(stage, SDP_SLIDEDP_STAGE_BITS)
               << (64 - SDP_SLIDEDP_SLOT_BITS - SDP_SLIDEDP_STAGE_BITS) |
           sdp_slidedp_clamp(gpos, SDP_SLIDEDP_GPOS_BITS)
               << (SDP_SLIDEDP_TIE_BITS + SDP_SLIDEDP_MB_BITS + SDP_SLIDEDP_CHUNK_BITS) |
           sdp_slidedp_clamp(tie, SDP_SLIDEDP_TIE_BITS)
               << (SDP_SLIDEDP_MB_BITS + SDP_SLIDEDP_CHUNK_BITS) |
           sdp_slidedp_clamp((long)h->mb + 1, SDP_SLIDEDP_MB_BITS) << SDP_SLIDEDP_CHUNK_BITS |
           sdp_slidedp_clamp((long)h->chunk + 1, SDP_SLIDEDP_CHUNK_BITS);
}

/* A task's position along the passes, counted in groups, for the prefetch window: with G groups
 * (0 .. G-1, the head last) a step walks the forward 0, 1, ..., G-1 (the loss at G-1), the
 * backward G-2, ..., 0 at positions G .. 2G-2 (a group's norms with its backward), and the
 * global norm at 2G-1; each step adds 2G.  An
 * update belongs to the next step's forward, like in the key.  -1 without a hint. */
static inline long sdp_slidedp_pass_pos(const struct sdp_hint *h, int ngroups)
{
    long G = ngroups > 0 ? ngroups : 1, g, slot, within;
    if (!h)
        return -1;
    g = h->group < 0 ? G - 1 : h->group < G ? h->group : G - 1;
    slot = (long)h->step + (h->phase == SDP_PH_UPDATE ? 2 : 1);
    if (slot < 0)
        slot = 0;
    switch (h->phase) {
    case SDP_PH_NORM:
    case SDP_PH_RECOMPUTE:
    case SDP_PH_BWD:
        /* a group's norms sit with its backward; the global norm (group -1) after it */
        within = h->phase == SDP_PH_NORM && h->group < 0 ? 2 * G - 1 : 2 * G - 2 - g;
        if (within < G)
            within = G;
        break;
    default:
        within = g;
        break;
    }
    return slot * 2 * G + within;
}

/* The position a CUDA worker computes at once it runs a task with hint h: the task's own, but the
 * end of a step's backward (group 0's backward and norms, the global norm) counts as the next
 * step's start, its forward of group 0: what the worker runs next is that forward, and without a
 * forward task of group 0 on the GPU (the lookup on the host) its window would otherwise stay two
 * groups short, holding back layer 1's fetch at the step's boundary until the worker had idled
 * FETCH_IDLE_US (bench/results/2026-12-04-h200-embed-lookup.md).  -1 without a hint. */
static inline long sdp_slidedp_cur_pos(const struct sdp_hint *h, int ngroups)
{
    long pos = sdp_slidedp_pass_pos(h, ngroups), G = ngroups > 0 ? ngroups : 1;
    if (pos >= 0 && h->group <= 0 && (h->phase == SDP_PH_BWD || h->phase == SDP_PH_NORM))
        pos = (pos / (2 * G) + 1) * 2 * G;
    return pos;
}

/* 1 when a task at pass position pos lies within window groups ahead of the position cur that
 * the worker computes (tasks behind it are in; an unhinted task, pos < 0, is in).  cur < 0
 * (the worker computed nothing yet): 0, the worker fetches its first task's inputs itself. */
static inline int sdp_slidedp_in_window(long pos, long cur, int window)
{
    if (pos < 0)
        return 1;
    return cur >= 0 && pos - cur <= (long)window;
}

/* 1 when a CUDA worker computing at position cur may run a task at pos with hint h now: any task
 * but a fetch (SDP_MOVE_FETCH), which must lie within window - 1 groups ahead (at least the
 * worker's own group), or the worker must not have computed yet (cur < 0).  The policy prefetches
 * a fetch's input once it lies within `window` groups, so the task, run a group later, finds its
 * weights there; run earlier, it would hold the worker while they cross PCIe, between the
 * forward's first kernels (bench/results/2026-12-01-h200-fetch-gate.md). */
static inline int sdp_slidedp_gpu_may_run(const struct sdp_hint *h, long pos, long cur, int window)
{
    if (!h || h->move != SDP_MOVE_FETCH || cur < 0 || pos < 0)
        return 1;
    return pos - cur <= (long)(window > 1 ? window - 1 : 0);
}

/* 1 when a CPU worker may run a transfer task at pos (a fetch whose copy is the transfer,
 * param_chunk) into the memory of a GPU computing at cur: within `window` groups ahead, where the
 * window prefetches a param_fetch's input, or the GPU has computed nothing yet (cur < 0). */
static inline int sdp_slidedp_xfer_may_run(long pos, long cur, int window)
{
    return cur < 0 || pos < 0 || pos - cur <= (long)window;
}

/* Whether a CUDA worker that has started no task for idle_us may run a fetch that
 * sdp_slidedp_gpu_may_run holds back: after idle_fetch_us one whose inputs its window prefetches
 * (within `window` groups), whose weights are coming anyway; after idle_any_us any, so that a
 * worker whose position is stale still goes on.  Any fetch after idle_fetch_us would let a worker
 * waiting at a step's boundary for layer 1's update fetch layers 3, 4, ... one after the other,
 * each holding the worker and PCIe while layer 1's weights wait
 * (bench/results/2026-12-04-h200-embed-lookup.md). */
static inline int sdp_slidedp_idle_may_fetch(long pos, long cur, int window, double idle_us,
                                             double idle_fetch_us, double idle_any_us)
{
    if (idle_us >= idle_any_us)
        return 1;
    return idle_us >= idle_fetch_us && (cur < 0 || pos < 0 || pos - cur <= (long)window);
}

#endif
