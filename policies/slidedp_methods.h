/* SPDX-License-Identifier: MIT */
/* sdp-slidedp's queues and bounds as methods another policy may run on (policies/roundpipe.c):
 * the same critical-path order, staging bounds and prefetch window, with a placement of its own. */
#ifndef SDP_SLIDEDP_METHODS_H
#define SDP_SLIDEDP_METHODS_H

#include <stdint.h>

#include <starpu.h>

#include "runtime/hint.h"

/* What another policy changes of sdp-slidedp's; NULL members: sdp-slidedp's own. */
struct sdp_slidedp_hooks {
    /* the one worker that runs a hinted task, or -1 for sdp-slidedp's choice (every worker that
     * can run it); may write the hint's stage1 and round1 for the event log (the task's own
     * hint), the task's ordering key (*key, sdp_slidedp_key's) and its priority */
    int (*place)(struct starpu_task *task, struct sdp_hint *h, uint64_t *key);
    /* 0: hold the hinted task back for now, its wait logged as `hold_why`; the other policy
     * calls sdp_slidedp_wake when a held task may run */
    int (*admit)(const struct sdp_hint *h);
    const char *hold_why;
};

/** init_sched with hooks (NULL: sdp-slidedp itself). */
void sdp_slidedp_init_hooks(unsigned ctx, const struct sdp_slidedp_hooks *hooks);
/** Wake the workers that found nothing to run: what the hooks admit has changed. */
void sdp_slidedp_wake(unsigned ctx);
void sdp_slidedp_deinit(unsigned ctx);
int sdp_slidedp_push(struct starpu_task *task);
struct starpu_task *sdp_slidedp_pop(unsigned ctx);
void sdp_slidedp_pre_exec(struct starpu_task *task, unsigned ctx);
void sdp_slidedp_post_exec(struct starpu_task *task, unsigned ctx);
void sdp_slidedp_add_workers(unsigned ctx, int *ids, unsigned n);
void sdp_slidedp_remove_workers(unsigned ctx, int *ids, unsigned n);

#endif
