/* SPDX-License-Identifier: MIT */
/* sdp-slidedp's queues and bounds as methods another policy may run on (policies/roundpipe.c):
 * the same critical-path order, staging bounds and prefetch window, with a placement of its own. */
#ifndef SDP_SLIDEDP_METHODS_H
#define SDP_SLIDEDP_METHODS_H

#include <starpu.h>

#include "runtime/hint.h"

/** init_sched with a placement: place(hint) names the one worker that runs a hinted task, or -1
 * for sdp-slidedp's own choice (every worker that can run it), and may write the hint's stage1 for
 * the event log (the task's own hint); NULL: sdp-slidedp itself. */
void sdp_slidedp_init_placed(unsigned ctx, int (*place)(struct sdp_hint *h));
void sdp_slidedp_deinit(unsigned ctx);
int sdp_slidedp_push(struct starpu_task *task);
struct starpu_task *sdp_slidedp_pop(unsigned ctx);
void sdp_slidedp_pre_exec(struct starpu_task *task, unsigned ctx);
void sdp_slidedp_post_exec(struct starpu_task *task, unsigned ctx);
void sdp_slidedp_add_workers(unsigned ctx, int *ids, unsigned n);
void sdp_slidedp_remove_workers(unsigned ctx, int *ids, unsigned n);

#endif
