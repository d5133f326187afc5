/* SPDX-License-Identifier: MIT */
/* The ordering key of sdp-slidedp (policies/slidedp_internal.h) against the critical-path order of
 * a training step, written out by hand: every task list below is the order in which the policy
 * must run tasks that are ready together, and the keys must increase along it.  Also the pass
 * positions of the prefetch window, the staged-task test and the fallback to task priorities.
 * No StarPU. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "policies/slidedp_internal.h"

static int fails, checks;

static struct sdp_hint H(int step, int group, int chunk, int mb, int phase) {
    struct sdp_hint h = { .step = step,
                          .group = group,
                          .chunk = chunk,
                          .mb = mb,
                          .phase = phase,
                          .move = SDP_MOVE_NONE,
                          .stage_role = SDP_STAGE_BY_PHASE };
    return h;
}

static const char *const phase_names[] = { "cast", "fwd",  "recompute", "bwd",
                                           "loss", "norm", "update" };

static void show(const struct sdp_hint *h, char *buf, size_t n)
{
    snprintf(buf, n, "%s(step %d, group %d, chunk %d, mb %d)", phase_names[h->phase], h->step,
             h->group, h->chunk, h->mb);
}

/* a runs before b */
static void expect_before(struct sdp_hint a, struct sdp_hint b, const char *why)
{
    uint64_t ka = sdp_slidedp_key(&a, 0), kb = sdp_slidedp_key(&b, 0);
    checks++;
    if (ka >= kb) {
        char sa[96], sb[96];
        show(&a, sa, sizeof(sa));
        show(&b, sb, sizeof(sb));
        printf("FAIL %s: key %s = %#llx is not below key %s = %#llx\n", why, sa,
               (unsigned long long)ka, sb, (unsigned long long)kb);
        fails++;
    }
}

static void expect(int cond, const char *what)
{
    checks++;
    if (!cond) {
        printf("FAIL %s\n", what);
        fails++;
    }
}

/* The order of two steps of a model with L = 2 layers (groups 0..3, the head 3), 2 micro-batches,
 * 2 chunks per group, the first step starting with the casts: the critical path when everything
 * is ready at once.  The updates of step 0 interleave with the forward of step 1. */
#define MAXSEQ 256
static struct sdp_hint seq[MAXSEQ];
static int nseq;

static void add(struct sdp_hint h)
{
    if (nseq < MAXSEQ)
        seq[nseq++] = h;
}

static void build_two_steps(void)
{
    const int G = 4, NM = 2, NC = 2;
    for (int s = 0; s < 2; s++) {
        /* forward pass: the weights of group g (casts at step 0, the previous step's updates
         * after), then its forward for every micro-batch */
        for (int g = 0; g < G - 1; g++) {
            for (int c = 0; c < NC; c++)
                add(s == 0 ? H(0, g, c, -1, SDP_PH_CAST) : H(s - 1, g, c, -1, SDP_PH_UPDATE));
            for (int mb = 0; mb < NM; mb++)
                add(H(s, g, -1, mb, SDP_PH_FWD));
        }
        for (int c = 0; c < NC; c++)
            add(s == 0 ? H(0, G - 1, c, -1, SDP_PH_CAST) : H(s - 1, G - 1, c, -1, SDP_PH_UPDATE));
        for (int mb = 0; mb < NM; mb++)
            add(H(s, G - 1, -1, mb, SDP_PH_LOSS));
        /* the head's sums of squares (its gradient is final after the loss), then the backward
         * from the last layer down: the gradient clear, per micro-batch the recomputation and
         * the backward, then the group's sums of squares */
        for (int c = 0; c < NC; c++)
            add(H(s, G - 1, c, -1, SDP_PH_NORM));
        for (int g = G - 2; g >= 0; g--) {
            add(H(s, g, -1, -1, SDP_PH_BWD)); /* zero */
            for (int mb = 0; mb < NM; mb++) {
                add(H(s, g, -1, mb, SDP_PH_RECOMPUTE));
                add(H(s, g, -1, mb, SDP_PH_BWD));
            }
            for (int c = 0; c < NC; c++)
                add(H(s, g, c, -1, SDP_PH_NORM));
        }
        add(H(s, -1, -1, -1, SDP_PH_NORM)); /* grad_norm */
    }
    /* the last step's updates, before a third step that is not in the list */
    for (int g = 0; g < G; g++)
        for (int c = 0; c < NC; c++)
            add(H(1, g, c, -1, SDP_PH_UPDATE));
}

int main(void)
{
    char sa[96], sb[96];

    /* ---- the whole order of two steps ---- */
    build_two_steps();
    for (int i = 1; i < nseq; i++) {
        uint64_t ka = sdp_slidedp_key(&seq[i - 1], 0), kb = sdp_slidedp_key(&seq[i], 0);
        checks++;
        /* equal keys are allowed only for a recomputation and its backward (data-dependent) */
        if (ka > kb ||
            (ka == kb && !(seq[i - 1].phase == SDP_PH_RECOMPUTE && seq[i].phase == SDP_PH_BWD))) {
            show(&seq[i - 1], sa, sizeof(sa));
            show(&seq[i], sb, sizeof(sb));
            printf("FAIL two-step order, position %d: %s (key %#llx) before %s (key %#llx)\n", i,
                   sa, (unsigned long long)ka, sb, (unsigned long long)kb);
            fails++;
        }
    }

    /* ---- the rules one by one ---- */
    expect_before(H(3, 0, -1, 1, SDP_PH_FWD), H(3, 1, -1, 0, SDP_PH_FWD),
                  "forward in ascending group order, every micro-batch of a group first");
    expect_before(H(3, 40, -1, 0, SDP_PH_FWD), H(3, 41, -1, 0, SDP_PH_LOSS),
                  "forward before the loss");
    expect_before(H(3, 41, -1, 1, SDP_PH_LOSS), H(3, 40, -1, 0, SDP_PH_BWD),
                  "the loss before the backward");
    expect_before(H(3, 40, -1, 1, SDP_PH_BWD), H(3, 39, -1, 0, SDP_PH_RECOMPUTE),
                  "backward in descending group order");
    expect_before(H(3, 1, -1, 0, SDP_PH_BWD), H(3, 0, -1, 0, SDP_PH_BWD),
                  "the embedding's backward last");
    expect_before(H(3, 5, -1, 1, SDP_PH_BWD), H(3, 5, 0, -1, SDP_PH_NORM),
                  "a group's backward (every micro-batch) before its sums of squares");
    expect_before(H(3, 5, 6, -1, SDP_PH_NORM), H(3, 4, -1, 0, SDP_PH_RECOMPUTE),
                  "a group's sums of squares (or pack) before the next group's backward");
    expect_before(H(3, 0, -1, 1, SDP_PH_BWD), H(3, -1, -1, -1, SDP_PH_NORM),
                  "every backward before the global norm");
    expect_before(H(3, 41, 7, -1, SDP_PH_NORM), H(3, -1, -1, -1, SDP_PH_NORM),
                  "the sums of squares before the global norm");
    expect_before(H(3, -1, -1, -1, SDP_PH_NORM), H(3, 0, 0, -1, SDP_PH_UPDATE),
                  "the gradient norm before the updates");
    expect_before(H(3, 0, 0, -1, SDP_PH_BWD), H(3, 41, 0, -1, SDP_PH_UPDATE),
                  "a step's backward before its first ready update (the head's)");
    expect_before(H(3, 0, 9, -1, SDP_PH_UPDATE), H(3, 1, 0, -1, SDP_PH_UPDATE),
                  "the update of group 0 before group 1");
    expect_before(H(3, 1, 0, -1, SDP_PH_UPDATE), H(3, 1, 1, -1, SDP_PH_UPDATE),
                  "updates of a group in chunk order");
    expect_before(H(3, 0, 0, -1, SDP_PH_UPDATE), H(4, 0, -1, 0, SDP_PH_FWD),
                  "the update of group g before the next step's forward of g");
    expect_before(H(4, 2, -1, 3, SDP_PH_FWD), H(3, 3, 0, -1, SDP_PH_UPDATE),
                  "the next step's forward of group g before the updates of later groups");
    expect_before(H(4, 2, -1, 0, SDP_PH_FWD), H(3, 41, 0, -1, SDP_PH_UPDATE),
                  "the next step's forward of group g before the head's update");
    expect_before(H(3, 41, 0, -1, SDP_PH_UPDATE), H(4, 41, -1, 0, SDP_PH_LOSS),
                  "every update of step s before the loss of step s + 1");
    expect_before(H(3, 0, -1, 0, SDP_PH_BWD), H(4, 0, -1, 0, SDP_PH_FWD),
                  "an earlier step's compute first");
    expect_before(H(3, 1, 0, -1, SDP_PH_CAST), H(3, 1, -1, 0, SDP_PH_FWD),
                  "the cast of group g before its forward");
    expect_before(H(3, 0, 5, -1, SDP_PH_CAST), H(3, 1, 0, -1, SDP_PH_CAST),
                  "casts in ascending group order");
    expect_before(H(-1, 5, -1, 0, SDP_PH_FWD), H(0, 0, 0, -1, SDP_PH_CAST),
                  "evaluation (step -1) before training step 0");
    expect_before(H(100000, 7, -1, 0, SDP_PH_BWD), H(100001, 0, 0, -1, SDP_PH_CAST),
                  "large steps keep their order");
    /* fields past their width clamp instead of spilling into the next field */
    expect_before(H(3, 0, 100000, -1, SDP_PH_UPDATE), H(3, 1, 0, -1, SDP_PH_UPDATE),
                  "a huge chunk number stays within its group");
    expect_before(H(3, 0, -1, 5000, SDP_PH_FWD), H(3, 1, -1, 0, SDP_PH_FWD),
                  "a huge micro-batch number stays within its group");

    /* ---- tasks without a hint: by priority, ahead of every hinted task ---- */
    {
        struct sdp_hint first = H(-1, 0, -1, -1, SDP_PH_CAST);
        uint64_t hinted = sdp_slidedp_key(&first, 0);
        expect(sdp_slidedp_key(NULL, 5) < sdp_slidedp_key(NULL, 1),
               "unhinted: the higher priority first");
        expect(sdp_slidedp_key(NULL, -2147483647 - 1) < hinted &&
                   sdp_slidedp_key(NULL, 2147483647) < hinted,
               "unhinted tasks (any priority) before hinted ones");
    }

    /* ---- staged tasks: casts and updates only ---- */
    for (int ph = SDP_PH_CAST; ph <= SDP_PH_UPDATE; ph++) {
        struct sdp_hint h = H(0, 1, 0, -1, ph);
        snprintf(sa, sizeof(sa), "phase %s staged = %d", phase_names[ph],
                 ph == SDP_PH_CAST || ph == SDP_PH_UPDATE);
        expect(sdp_slidedp_is_staged(&h) == (ph == SDP_PH_CAST || ph == SDP_PH_UPDATE), sa);
    }
    expect(!sdp_slidedp_is_staged(NULL), "an unhinted task is not staged");
    {
        struct sdp_hint put = H(0, 1, 0, -1, SDP_PH_UPDATE), zero = H(0, 1, -1, -1, SDP_PH_CAST),
                        fill = H(0, 1, 0, -1, SDP_PH_UPDATE), cast = H(0, 1, 0, -1, SDP_PH_CAST),
                        fetch = H(1, 1, -1, -1, SDP_PH_FWD);
        put.move = SDP_MOVE_PUT;
        zero.stage_role = SDP_STAGE_NONE;
        fill.stage_role = SDP_STAGE_FILL;
        fetch.move = SDP_MOVE_FETCH;
        expect(!sdp_slidedp_is_staged(&put) && sdp_slidedp_drains_stage(&put) &&
                   !sdp_slidedp_fills_stage(&put),
               "a put empties a stage and is never held back");
        expect(!sdp_slidedp_is_staged(&zero) && !sdp_slidedp_fills_stage(&zero),
               "the zeroing of a working copy off the host takes no slot");
        expect(sdp_slidedp_is_staged(&fill) && sdp_slidedp_fills_stage(&fill) &&
                   !sdp_slidedp_drains_stage(&fill),
               "an update that writes a stage takes a slot and a stage");
        expect(sdp_slidedp_is_staged(&cast) && !sdp_slidedp_fills_stage(&cast),
               "a cast in place takes a slot, no stage");
        expect(sdp_slidedp_moves_only(&put) && sdp_slidedp_moves_only(&fetch) &&
                   !sdp_slidedp_moves_only(&fill),
               "puts and fetches only move data");
        expect_before(put, H(0, 0, -1, 0, SDP_PH_BWD),
                      "a step's put before the rest of its backward");
        expect_before(H(0, 1, -1, 0, SDP_PH_BWD), fill,
                      "but the update that fills the stage after the backward of its step");
        /* the fetch gate: window 2 runs a fetch one group ahead, not two */
        {
            const int G = 4;
            long f = sdp_slidedp_pass_pos(&fetch, G);
            struct sdp_hint comp = fetch;
            comp.move = SDP_MOVE_NONE;
            expect(sdp_slidedp_gpu_may_run(&fetch, f, f - 1, 2) &&
                       !sdp_slidedp_gpu_may_run(&fetch, f, f - 2, 2),
                   "window 2: a fetch runs from one group ahead of the worker");
            expect(sdp_slidedp_gpu_may_run(&fetch, f, f, 0) &&
                       !sdp_slidedp_gpu_may_run(&fetch, f, f - 1, 0),
                   "window 0: a fetch runs at its own group");
            expect(sdp_slidedp_gpu_may_run(&fetch, f, -1, 2),
                   "nothing computed yet: a fetch may run");
            expect(sdp_slidedp_gpu_may_run(&comp, f, f - 10, 2),
                   "a compute task is never held by the window");
            expect(sdp_slidedp_gpu_may_run(&fetch, f, f + 5, 2), "a fetch behind the worker runs");
        }
    }

    /* ---- pass positions and the window (G = 4 groups: 0, 1, 2 = L, 3 = head) ---- */
    {
        const int G = 4;
        struct sdp_hint f0 = H(0, 0, -1, 0, SDP_PH_FWD), f2 = H(0, 2, -1, 1, SDP_PH_FWD),
                        loss = H(0, 3, -1, 0, SDP_PH_LOSS), b2 = H(0, 2, -1, 0, SDP_PH_BWD),
                        r2 = H(0, 2, -1, 0, SDP_PH_RECOMPUTE), b0 = H(0, 0, -1, 0, SDP_PH_BWD),
                        n0 = H(0, -1, -1, -1, SDP_PH_NORM), u0 = H(0, 0, 0, -1, SDP_PH_UPDATE),
                        s2 = H(0, 2, 1, -1, SDP_PH_NORM), g0 = H(1, 0, -1, 0, SDP_PH_FWD);
        long p0 = sdp_slidedp_pass_pos(&f0, G);
        expect(sdp_slidedp_pass_pos(&f2, G) == p0 + 2, "forward of group 2 is 2 groups ahead");
        expect(sdp_slidedp_pass_pos(&loss, G) == p0 + 3, "the loss at the head's position");
        expect(sdp_slidedp_pass_pos(&b2, G) == p0 + 4 && sdp_slidedp_pass_pos(&r2, G) == p0 + 4,
               "the backward of layer L (and its recomputation) right after the loss");
        expect(sdp_slidedp_pass_pos(&b0, G) == p0 + 6, "the embedding's backward last");
        expect(sdp_slidedp_pass_pos(&s2, G) == p0 + 4, "a group's norms with its backward");
        expect(sdp_slidedp_pass_pos(&n0, G) == p0 + 7, "the global norm after the backward");
        expect(sdp_slidedp_pass_pos(&g0, G) == p0 + 8, "the next step starts 2G later");
        expect(sdp_slidedp_pass_pos(&u0, G) == sdp_slidedp_pass_pos(&g0, G),
               "an update sits at the next step's forward of its group");
        expect(sdp_slidedp_pass_pos(NULL, G) < 0, "no hint, no position");
        expect(sdp_slidedp_in_window(p0 + 2, p0, 2) && !sdp_slidedp_in_window(p0 + 3, p0, 2),
               "window 2: two groups ahead are in, three are out");
        expect(sdp_slidedp_in_window(p0, p0 + 5, 2), "tasks behind the worker are in");
        expect(!sdp_slidedp_in_window(p0, -1, 2), "nothing computed yet: no prefetch");
        expect(sdp_slidedp_in_window(-1, p0, 0), "an unhinted task is in");
        /* the worker's position: the step's end counts as the next step's start */
        {
            struct sdp_hint g1 = H(1, 1, -1, 0, SDP_PH_FWD), g2 = H(1, 2, -1, 0, SDP_PH_FWD),
                            g3 = H(1, 3, -1, 0, SDP_PH_FWD), fetch1 = g1;
            long c0 = sdp_slidedp_cur_pos(&b0, G), p1 = sdp_slidedp_pass_pos(&g1, G);
            fetch1.move = SDP_MOVE_FETCH;
            expect(c0 == sdp_slidedp_pass_pos(&g0, G) && sdp_slidedp_cur_pos(&n0, G) == c0,
                   "after the embedding's backward or the global norm the worker is at the next "
                   "step's forward of group 0");
            expect(sdp_slidedp_gpu_may_run(&fetch1, p1, c0, 2) &&
                       sdp_slidedp_in_window(sdp_slidedp_pass_pos(&g2, G), c0, 2) &&
                       !sdp_slidedp_in_window(sdp_slidedp_pass_pos(&g3, G), c0, 2),
                   "window 2 at the step's end: layer 1's fetch runs, layer 2's inputs come, "
                   "not layer 3's");
            expect(sdp_slidedp_cur_pos(&b2, G) == sdp_slidedp_pass_pos(&b2, G) &&
                       sdp_slidedp_cur_pos(&f2, G) == sdp_slidedp_pass_pos(&f2, G) &&
                       sdp_slidedp_cur_pos(&s2, G) == sdp_slidedp_pass_pos(&s2, G),
                   "elsewhere the worker is at its task's position");
            expect(sdp_slidedp_cur_pos(NULL, G) < 0, "no hint, no position");
        }
        /* a CPU worker's transfer into a GPU's memory: within the GPU's window, or before it
         * computed anything */
        expect(sdp_slidedp_xfer_may_run(p0 + 2, p0, 2) && !sdp_slidedp_xfer_may_run(p0 + 3, p0, 2),
               "a transfer runs two groups ahead of its GPU (window 2), not three");
        expect(sdp_slidedp_xfer_may_run(p0 + 9, -1, 2) && sdp_slidedp_xfer_may_run(p0, p0 + 4, 2),
               "a transfer runs before its GPU computes, and behind it");
        /* an idle worker's fetches: within the window after 5 ms, any after 50 */
        expect(!sdp_slidedp_idle_may_fetch(p0 + 2, p0, 2, 4999.0, 5000.0, 50000.0) &&
                   sdp_slidedp_idle_may_fetch(p0 + 2, p0, 2, 5000.0, 5000.0, 50000.0),
               "idle 5 ms: a fetch two groups ahead runs (window 2), not before");
        expect(!sdp_slidedp_idle_may_fetch(p0 + 3, p0, 2, 49999.0, 5000.0, 50000.0) &&
                   sdp_slidedp_idle_may_fetch(p0 + 3, p0, 2, 50000.0, 5000.0, 50000.0),
               "a fetch three groups ahead waits for 50 ms of idle");
        expect(sdp_slidedp_idle_may_fetch(p0 + 9, -1, 2, 5000.0, 5000.0, 50000.0),
               "a worker that computed nothing yet: any fetch after 5 ms");
    }

    /* ---- a late update (the embedding's rows the next lookup does not read) ---- */
    {
        struct sdp_hint late = H(3, 0, 2, -1, SDP_PH_UPDATE);
        late.late = 1;
        expect_before(H(3, 41, 0, -1, SDP_PH_UPDATE), late,
                      "a late update after every group's update of its step");
        expect_before(H(4, 41, -1, 0, SDP_PH_FWD), late,
                      "a late update after the next step's forward tasks");
        expect_before(late, H(4, 41, -1, 0, SDP_PH_BWD), "a late update before the next backward");
        expect(sdp_slidedp_is_staged(&late), "a late update takes a staging slot");
    }

    printf("%d checks, %d failed\n%s\n", checks, fails, fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
