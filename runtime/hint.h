/* SPDX-License-Identifier: MIT */
/* What a scheduling policy may know about a task: its place in the training step.  graph/ fills
 * one per task (through codelets/sdp_tasks.h); the project's policies read it from
 * starpu_task::sched_data while sdp_hint_for_policy() is on.  StarPU-free. */
#ifndef SDP_HINT_H
#define SDP_HINT_H

/* Phases of a training step, for hints, traces and priorities. */
enum sdp_phase {
    SDP_PH_CAST,
    SDP_PH_FWD,
    SDP_PH_RECOMPUTE,
    SDP_PH_BWD,
    SDP_PH_LOSS,
    SDP_PH_NORM,
    SDP_PH_UPDATE
};

struct sdp_hint {
    int step;  /* optimizer step */
    int group; /* parameter group (0 embedding, 1..L layers, L+1 head) or -1 */
    int chunk; /* chunk within the group, or -1 */
    int mb;    /* micro-batch, or -1 */
    enum sdp_phase phase;
    int rank; /* data-parallel rank whose worker runs the task (0 with one rank) */
};

/** 1: every task carries its struct sdp_hint in starpu_task::sched_data, for the project's own
 * policies (which turn it on in their init and off in their deinit).  StarPU's policies own that
 * field, so it stays NULL for them (the default, 0). */
void sdp_hint_for_policy(int on);
/** The current setting. */
int sdp_hint_for_policy_on(void);

#endif
