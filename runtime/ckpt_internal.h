/* SPDX-License-Identifier: MIT */
/* Shared between runtime/ckpt.c (restore, search) and runtime/ckpt_save.c (save, prune). */
#ifndef SDP_CKPT_INTERNAL_H
#define SDP_CKPT_INTERNAL_H

#include "runtime/state.h"
#include "runtime/tensor.h"

/** Steps of the checkpoint files (step-<digits>.sdpckpt) in dir, newest first.
 * @param[out] steps_out  the steps (caller frees; NULL when there are none)
 * @param[out] n_out  their number
 * @return 0, -ENOENT (dir cannot be opened; not logged), -ENOMEM (logged) */
int sdp_ckpt_list_steps(const char *dir, long **steps_out, int *n_out);

/** The host tensor of group g of kind 0 (master), 1 (m) or 2 (v). */
sdp_rt_tensor_t *sdp_ckpt_state_tensor(struct sdp_state *st, int g, int kind);

#endif
