/* SPDX-License-Identifier: MIT */
/* sdp-roundpipe's longest-processing-time-first uploads (policies/roundpipe_lpt.h) against the
 * order written out by hand: for a split of 6 groups (0 embedding, 1-4 layers, 5 head) into
 * stage 0 = fwd 0-2, stage 1 = fwd 3-5 and bwd 5-4, stage 2 = bwd 3-0, the keys of ready tasks
 * must increase along each list below, and the priorities of the fetches' transfers decrease.
 * No StarPU. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>

#include "policies/roundpipe_lpt.h"

static int fails, checks;

struct task {
    const char *what;
    struct sdp_hint h;
    int stage; /* a fetch's stage, -1 for a compute task */
};

/* The first op of each stage of the split: its group and whether it is a backward. */
static const int first_group[] = { 0, 3, 3 }, first_bwd[] = { 0, 0, 1 };

static struct task fetch(int step, int group, int phase, int stage, long long bytes)
{
    struct task t = { "fetch", { .step = step, .group = group, .chunk = -1, .mb = -1 }, stage };
    t.h.phase = phase, t.h.move = SDP_MOVE_FETCH, t.h.bytes = bytes;
    return t;
}

static struct task compute(int step, int group, int phase, int mb)
{
    struct task t = { "compute", { .step = step, .group = group, .chunk = -1, .mb = mb }, -1 };
    t.h.phase = phase;
    return t;
}

static uint64_t key(const struct task *t)
{
    if (t->stage < 0)
        return sdp_slidedp_key(&t->h, 0);
    return sdp_rp_lpt_key(&t->h, first_group[t->stage], first_bwd[t->stage]);
}

/* the keys increase along ts[0..n) */
static void expect_order(const struct task *ts, int n, const char *list)
{
    for (int i = 0; i + 1 < n; i++) {
        checks++;
        if (key(&ts[i]) >= key(&ts[i + 1])) {
            fprintf(stderr,
                    "FAIL %s: %s (group %d, %lld bytes) not before %s (group %d, %lld "
                    "bytes)\n",
                    list, ts[i].what, ts[i].h.group, ts[i].h.bytes, ts[i + 1].what,
                    ts[i + 1].h.group, ts[i + 1].h.bytes);
            fails++;
        }
    }
}

int main(void)
{
    const long long MiB = 1 << 20;
    /* one stage: the biggest fetch first, whatever its group, all before the stage's compute;
     * within 4 KiB the earlier push (equal keys) */
    struct task s0[] = {
        fetch(3, 2, SDP_PH_FWD, 0, 300 * MiB), fetch(3, 0, SDP_PH_FWD, 0, 20 * MiB),
        fetch(3, 1, SDP_PH_FWD, 0, 5 * MiB),   fetch(3, 1, SDP_PH_FWD, 0, 4096 + 1),
        compute(3, 0, SDP_PH_FWD, 0),          compute(3, 0, SDP_PH_FWD, 3),
        compute(3, 1, SDP_PH_FWD, 0)
    };
    /* the stages in the order they are needed: stage 0's compute before stage 1's fetches (the
     * layer's before the bigger head's), stage 1's before stage 2's (a backward stage, whose
     * first op is group 3's backward), and a step's before the next step's */
    struct task stages[] = {
        compute(3, 2, SDP_PH_FWD, 3),          fetch(3, 5, SDP_PH_LOSS, 1, 600 * MiB),
        fetch(3, 3, SDP_PH_FWD, 1, 300 * MiB), compute(3, 3, SDP_PH_FWD, 0),
        compute(3, 5, SDP_PH_LOSS, 0),         compute(3, 4, SDP_PH_BWD, 3),
        fetch(3, 0, SDP_PH_BWD, 2, 20 * MiB),  fetch(3, 3, SDP_PH_RECOMPUTE, 2, 1 * MiB),
        compute(3, 3, SDP_PH_RECOMPUTE, 0),    compute(3, 0, SDP_PH_BWD, 3),
        fetch(4, 2, SDP_PH_FWD, 0, 300 * MiB), compute(4, 0, SDP_PH_FWD, 0)
    };
    struct task huge[] = { fetch(3, 4, SDP_PH_FWD, 1, 1LL << 40), fetch(3, 3, SDP_PH_FWD, 1, 0),
                           compute(3, 3, SDP_PH_FWD, 0) };
    expect_order(s0, 4, "one stage");
    expect_order(s0 + 3, 4, "one stage's fetches before its compute");
    expect_order(stages, (int)(sizeof(stages) / sizeof(stages[0])), "the stages");
    expect_order(huge, 3, "sizes beyond the field");
    struct task same = fetch(3, 1, SDP_PH_FWD, 0, 8191);
    checks++;
    if (key(&s0[3]) != key(&same)) {
        fprintf(stderr, "FAIL: 4097 and 8191 bytes are one 4 KiB unit: equal keys\n");
        fails++;
    }
    /* the transfers' priorities: the sooner stage first, then the bigger */
    int prios[] = { sdp_rp_lpt_prio(0, 20 * MiB),
                    sdp_rp_lpt_prio(0, 5 * MiB),
                    sdp_rp_lpt_prio(0, 0),
                    sdp_rp_lpt_prio(1, 1LL << 40),
                    sdp_rp_lpt_prio(1, 64 << 10),
                    sdp_rp_lpt_prio(2, 600 * MiB),
                    sdp_rp_lpt_prio(1 << 20, 600 * MiB) };
    for (int i = 0; i + 1 < (int)(sizeof(prios) / sizeof(prios[0])); i++) {
        checks++;
        if (prios[i] <= prios[i + 1]) {
            fprintf(stderr, "FAIL priority %d: %d not above %d\n", i, prios[i], prios[i + 1]);
            fails++;
        }
    }
    printf("%d checks, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
