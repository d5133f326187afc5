/* SPDX-License-Identifier: MIT */
/* sdp-roundpipe's longest-processing-time-first uploads: the fetches of a stage's weights
 * (param_fetch, param_chunk: SDP_MOVE_FETCH) are ordered by the stage's priority (the stage needed
 * soonest first) and then by their bytes, the biggest first, so that the longest transfers start
 * first and the short ones fill in behind them.  Two orders carry it:
 *   - the queue's key: a fetch of stage k takes the key of the stage's first op (its first group's
 *     forward, or for a stage of backward only its highest group's backward) with tie 0, before
 *     the stage's compute, and in the 22 bits of micro-batch and chunk the bytes, biggest first
 *     (4 KiB units, up to 16 GiB);
 *   - the task's priority, which StarPU gives the transfers of its inputs (the prefetches the
 *     policy requests, then the fetch itself): (stage needed soonest) << 16 | bytes in 64 KiB.
 * StarPU-free; tests/policies/test_policies_lpt.c. */
#ifndef SDP_ROUNDPIPE_LPT_H
#define SDP_ROUNDPIPE_LPT_H

#include <stdint.h>

#include "policies/slidedp_internal.h"

#define SDP_RP_LPT_RANK_BITS (SDP_SLIDEDP_MB_BITS + SDP_SLIDEDP_CHUNK_BITS)
#define SDP_RP_LPT_LOW_BITS  (SDP_SLIDEDP_TIE_BITS + SDP_RP_LPT_RANK_BITS)
#define SDP_RP_LPT_MAX_STAGE 0x3fff

/* The key of a fetch h of a stage whose first op is group first_group's forward (first_bwd 0) or
 * backward (1). */
static inline uint64_t sdp_rp_lpt_key(const struct sdp_hint *h, int first_group, int first_bwd)
{
    struct sdp_hint f = *h;
    uint64_t units = (uint64_t)(h->bytes > 0 ? h->bytes : 0) >> 12;
    uint64_t max = (1ULL << SDP_RP_LPT_RANK_BITS) - 1;
    f.group = first_group;
    f.phase = first_bwd ? SDP_PH_BWD : SDP_PH_FWD;
    f.late = 0;
    return (sdp_slidedp_key(&f, 0) >> SDP_RP_LPT_LOW_BITS << SDP_RP_LPT_LOW_BITS) |
           (max - (units < max ? units : max));
}

/* The priority of a fetch of `bytes` for stage `stage`: the higher runs first. */
static inline int sdp_rp_lpt_prio(int stage, long long bytes)
{
    long long units = bytes > 0 ? bytes >> 16 : 0;
    int s = stage < 0 ? 0 : stage < SDP_RP_LPT_MAX_STAGE ? stage : SDP_RP_LPT_MAX_STAGE;
    return (SDP_RP_LPT_MAX_STAGE - s) << 16 | (int)(units < 0xffff ? units : 0xffff);
}

#endif
