/* SPDX-License-Identifier: MIT */
/* The task graphs slidedp sweep times on one parameter group of a state (cli/sweep.c): the
 * chunked cast of the masters into the working copy with its copy into a GPU replica, and the
 * chunked AdamW from a gradient left on the GPU.  Each call submits its tasks and returns; the
 * caller waits (sdp_rt_wait_all).  Test: tests/e2e/test_e2e_sweep.sh. */
#ifndef SDP_GRAPH_SWEEP_H
#define SDP_GRAPH_SWEEP_H

#include "runtime/state.h"

/** Per chunk of group gi: cast the fp32 master into the working copy on a CPU worker, then copy
 * the chunk into rep (a replica partitioned like the working copy) on the GPU, which pulls it over
 * PCIe as soon as its cast is done.  @return 0 or a task error */
int sdp_graph_sweep_cast_copy(struct sdp_state *st, int gi, sdp_rt_tensor_t *rep);

/** Clear group gi's gradient where the compute runs (the GPU when there is one).
 * @return 0 or a task error */
int sdp_graph_sweep_zero_grad(struct sdp_state *st, int gi);

/** Per chunk of group gi: AdamW (step t, fixed hyperparameters) on a CPU worker from the
 * gradient, writing the masters, moments and the next working copy.  @return 0 or a task error */
int sdp_graph_sweep_update(struct sdp_state *st, int gi, int t);

#endif
