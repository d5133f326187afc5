/* SPDX-License-Identifier: MIT */
/* The scheduling policies a run can name: StarPU's stock policies (the baselines) and the project's
 * own, listed in policies/registry.c, each exported as sdp_policy_<name> and named "sdp-<name>"
 * in StarPU's style.  Tests: tests/e2e/test_e2e_policies.sh (every policy gives bit-identical fp32
 * losses). */
#ifndef SDP_POLICIES_H
#define SDP_POLICIES_H

#include <stdio.h>

struct starpu_sched_policy;

/** Settings of sdp-slidedp (policies/slidedp.c: critical-path order of the lanes, bounded
 * staging of casts and updates, prefetch window) for the next StarPU start (call before
 * sdp_rt_init): staging_depth >= 1 casts and updates in flight, prefetch_groups >= 0 groups of
 * working copies a CUDA worker may prefetch ahead.  A value below that (0 or -1) keeps the
 * environment's (SDP_STAGING_DEPTH, SDP_WINDOW_DEPTH) or the default. */
void sdp_policy_slidedp_configure(int staging_depth, int prefetch_groups);

/** The stage split sdp-roundpipe runs at the next StarPU start (call before sdp_rt_init): width
 * stage workers (the first CUDA workers, else CPU workers), in_flight micro-batches in flight at
 * most (<= 0: width + 1), and for each of ngroups groups the stage of its forward and of its
 * backward, out of nstages (graph/split.h's split).
 * @return 0, -EINVAL or -ENOMEM (logged) */
int sdp_policy_roundpipe_configure(int width, int in_flight, int ngroups, const int *stage_fwd,
                                   const int *stage_bwd, int nstages);

/** Resolve a policy name.  *policy is set to our struct starpu_sched_policy for a project policy,
 * or to NULL for one of StarPU's stock policies (which StarPU then looks up by name).
 * @return 0, or -ENOENT for an unknown name (logged, with the list of known names) */
int sdp_policy_resolve(const char *name, void **policy);

/** Print every known policy name with its one-line description. */
void sdp_policy_list(FILE *f);

#endif
