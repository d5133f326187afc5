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

/* The tasks that only move a working copy (the policies treat them apart; SDP_MOVE_NONE, 0, for
 * every task that computes). */
enum sdp_move {
    SDP_MOVE_NONE,
    /* param_fetch: brings a group's weights where the compute runs, ahead of it */
    SDP_MOVE_FETCH,
    /* param_put: copies a stage into the working copy off the host and so empties the stage */
    SDP_MOVE_PUT
};

/* A task's part in the staging buffers (sdp-slidedp bounds the tasks that fill them). */
enum sdp_stage_role {
    /* by its phase (0, the default): a cast or an update fills a buffer (the working copy on the
     * host, written in place), a task of any other phase none */
    SDP_STAGE_BY_PHASE,
    /* fills none though its phase is one of those (the zeroing of a working copy off the host) */
    SDP_STAGE_NONE,
    /* writes a stage, a host buffer that lives until its param_put has run (the casts and
     * updates when the working copies are off the host, sdp_state.work_staged) */
    SDP_STAGE_FILL
};

struct sdp_hint {
    int step;  /* optimizer step */
    int group; /* parameter group (0 embedding, 1..L layers, L+1 head) or -1 */
    int chunk; /* chunk within the group, or -1 */
    int mb;    /* micro-batch, or -1 */
    enum sdp_phase phase;
    int rank;           /* data-parallel rank whose worker runs the task (0 with one rank) */
    enum sdp_move move; /* set by the submitters of param_fetch and param_put */
    enum sdp_stage_role stage_role; /* set by graph/ where the phase does not tell */
    /* > 0: the task writes no chunk of its group's gradient at or after this one (the backward
     * of a layer's attention half, after the early pack of its MLP chunks); 0: unknown, any */
    int grad_lim;
    /* 1: an update that the next step reads only at its head (the tied embedding's rows that its
     * lookup does not select, graph/step.c defer_rows): ordered after the next step's forward */
    int late;
    /* 1: the task reads the tied embedding's weights (group 0) besides its group's: the LM head
     * of a tied model, which the event log says ("tied") for tools/check_invariants.py */
    int tied;
    /* sdp-roundpipe: 1 + the stage the policy ran the task in (the event log's "stage"); 0: none */
    int stage1;
    /* sdp-roundpipe: 1 + the stage's round (stage / stage workers: the event log's "round") */
    int round1;
    /* the bytes a task of a transfer lane moves (the event log's "bytes"), else 0: sdp-roundpipe
     * orders a stage's fetches by them */
    long long bytes;
};

/** 1: every task carries its struct sdp_hint in starpu_task::sched_data, for the project's own
 * policies (which turn it on in their init and off in their deinit).  StarPU's policies own that
 * field, so it stays NULL for them (the default, 0). */
void sdp_hint_for_policy(int on);
/** The current setting. */
int sdp_hint_for_policy_on(void);

#endif
