/* SPDX-License-Identifier: MIT */
/* sdp-slidedp's queues (slidedp_heap.h): a binary min-heap of queued tasks. */
#include "config.h"

#include <stdlib.h>

#include "base/sdp_log.h"
#include "policies/slidedp_heap.h"

static void heap_set(struct heap *h, int i, struct entry *e)
{
    h->a[i] = e;
    e->idx = i;
}

static void sift_up(struct heap *h, int i)
{
    struct entry *e = h->a[i];
    while (i > 0 && before(e, h->a[(i - 1) / 2])) {
        heap_set(h, i, h->a[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(h, i, e);
}

static void sift_down(struct heap *h, int i)
{
    struct entry *e = h->a[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(h->a[c + 1], h->a[c]))
            c++;
        if (!before(h->a[c], e))
            break;
        heap_set(h, i, h->a[c]);
        i = c;
    }
    heap_set(h, i, e);
}

void sdp_slidedp_heap_push(struct heap *h, struct entry *e)
{
    if (h->n == h->cap) {
        int ncap = h->cap ? 2 * h->cap : 64;
        struct entry **a = realloc(h->a, (size_t)ncap * sizeof(*a));
        SDP_ASSERT(a != NULL, "sdp-slidedp: out of memory for a queue of %d tasks", ncap);
        h->a = a;
        h->cap = ncap;
    }
    e->heap = h;
    heap_set(h, h->n++, e);
    sift_up(h, e->idx);
}

void sdp_slidedp_heap_remove(struct entry *e)
{
    struct heap *h = e->heap;
    int i = e->idx;
    struct entry *last = h->a[--h->n];
    if (i < h->n) {
        heap_set(h, i, last);
        sift_down(h, i);
        sift_up(h, last->idx);
    }
    e->heap = NULL;
}
