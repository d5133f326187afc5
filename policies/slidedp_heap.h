/* SPDX-License-Identifier: MIT */
/* sdp-slidedp's queues (policies/slidedp.c): a queued task and the binary min-heap of them on
 * (key, seq). */
#ifndef SDP_SLIDEDP_HEAP_H
#define SDP_SLIDEDP_HEAP_H

#include <stdint.h>

#include "runtime/hint.h"

struct starpu_task;
struct heap;

/* One queued task. */
struct entry {
    struct starpu_task *task;
    uint64_t key, seq;
    long pos;             /* pass position, for the prefetch window */
    double held_since_us; /* first refusal by the staging bound (starpu_timing_now), or 0 */
    const char *held_why; /* which bound refused it first: WAIT_STAGING or WAIT_STAGES */
    int staged, fills, prefetched, idx;
    int gpu; /* a fetch that CPU workers run into a GPU's memory: that GPU's worker, else -1 */
    struct sdp_hint hint; /* valid when has_hint */
    int has_hint;
    struct heap *heap;
    struct entry *next_free;
};

/* A binary min-heap on (key, seq). */
struct heap {
    struct entry **a;
    int n, cap;
};

/* x runs before y: the smaller key, or the earlier push */
static inline int before(const struct entry *x, const struct entry *y)
{
    return x->key < y->key || (x->key == y->key && x->seq < y->seq);
}

/** Insert e into h (growing h; out of memory is fatal). */
void sdp_slidedp_heap_push(struct heap *h, struct entry *e);
/** Take e out of its heap. */
void sdp_slidedp_heap_remove(struct entry *e);

#endif
