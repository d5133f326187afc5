/* SPDX-License-Identifier: MIT */
/* sdp-roundpipe's micro-batches in flight: which micro-batches may run now.  The graph submits a
 * step's micro-batches one after the other; each (step, micro-batch) the submissions name is a
 * record, numbered in submission order.  A record is sealed once a later one is submitted (the
 * graph submits a micro-batch's tasks together, so none of its tasks comes after that) and
 * finished once sealed with every submitted task ended.  A task of record n may run while
 * n < (the oldest unfinished record) + limit: at most `limit` micro-batches have started and not
 * finished, and one enters when the oldest leaves (RoundPipe's micro-batches in flight).  A task
 * only waits on tasks submitted before it, so the oldest record's tasks never wait on a held one.
 * StarPU-free, not locked (policies/roundpipe.c locks it); tests/policies/test_policies_flight.c.
 */
#ifndef SDP_ROUNDPIPE_FLIGHT_H
#define SDP_ROUNDPIPE_FLIGHT_H

struct sdp_rp_mb {
    int step, mb;
    long submitted, ended;
};

struct sdp_rp_flight {
    int limit;             /* micro-batches in flight at most, >= 1 */
    struct sdp_rp_mb *rec; /* a ring of the records not yet finished and dropped */
    int head, n, cap;      /* rec[head] is the oldest record kept, n of them */
};

/** An empty tracker letting `limit` (>= 1) micro-batches run at once. */
void sdp_rp_flight_init(struct sdp_rp_flight *f, int limit);
void sdp_rp_flight_free(struct sdp_rp_flight *f);

/** A task of (step, mb) is submitted (mb >= 0).  @return 1 when the oldest record finished
 * (sealed by this one: held tasks may run now), 0, or -ENOMEM */
int sdp_rp_flight_submit(struct sdp_rp_flight *f, int step, int mb);

/** Whether a task of (step, mb) may run now: 1 but for a record beyond the bound. */
int sdp_rp_flight_admits(const struct sdp_rp_flight *f, int step, int mb);

/** A task of (step, mb) ended.  @return 1 when the oldest record finished (held tasks may run
 * now), else 0 */
int sdp_rp_flight_end(struct sdp_rp_flight *f, int step, int mb);

#endif
