/* SPDX-License-Identifier: MIT */
/* sdp-roundpipe's micro-batches in flight (roundpipe_flight.h): a ring of records in submission
 * order, the finished ones dropped from its front. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "policies/roundpipe_flight.h"

void sdp_rp_flight_init(struct sdp_rp_flight *f, int limit)
{
    memset(f, 0, sizeof(*f));
    f->limit = limit > 0 ? limit : 1;
}

void sdp_rp_flight_free(struct sdp_rp_flight *f)
{
    free(f->rec);
    memset(f, 0, sizeof(*f));
}

static struct sdp_rp_mb *at(const struct sdp_rp_flight *f, int i)
{
    return &f->rec[(f->head + i) % f->cap];
}

/* The index of (step, mb) among the records kept, newest first (where submissions go), or -1. */
static int find(const struct sdp_rp_flight *f, int step, int mb)
{
    for (int i = f->n - 1; i >= 0; i--)
        if (at(f, i)->step == step && at(f, i)->mb == mb)
            return i;
    return -1;
}

static int grow(struct sdp_rp_flight *f)
{
    int cap = f->cap ? 2 * f->cap : 16;
    struct sdp_rp_mb *rec = malloc((size_t)cap * sizeof(*rec));
    if (!rec)
        return -ENOMEM;
    for (int i = 0; i < f->n; i++)
        rec[i] = *at(f, i);
    free(f->rec);
    f->rec = rec, f->cap = cap, f->head = 0;
    return 0;
}

/* Drop the finished records at the front: sealed (a later one exists), every task ended.
 * @return 1 when one was */
static int drop(struct sdp_rp_flight *f)
{
    int dropped = 0;
    while (f->n > 1 && at(f, 0)->ended >= at(f, 0)->submitted) {
        f->head = (f->head + 1) % f->cap;
        f->n--, dropped = 1;
    }
    return dropped;
}

int sdp_rp_flight_submit(struct sdp_rp_flight *f, int step, int mb)
{
    int i = find(f, step, mb);
    if (i < 0) { /* a new record: the one before it is sealed, and may have finished */
        if (f->n == f->cap && grow(f))
            return -ENOMEM;
        i = f->n++;
        *at(f, i) = (struct sdp_rp_mb){ .step = step, .mb = mb };
    }
    at(f, i)->submitted++;
    return drop(f);
}

int sdp_rp_flight_admits(const struct sdp_rp_flight *f, int step, int mb)
{
    int i = find(f, step, mb);
    return i < 0 || i < f->limit; /* the front is the oldest unfinished record */
}

int sdp_rp_flight_end(struct sdp_rp_flight *f, int step, int mb)
{
    int i = find(f, step, mb);
    if (i < 0)
        return 0;
    at(f, i)->ended++;
    return drop(f);
}
