/* SPDX-License-Identifier: MIT */
/* The settings of sdp-slidedp for one StarPU start: the recipe's (train.staging_depth,
 * train.prefetch_groups, through sdp_policy_slidedp_configure), else the environment's, else the
 * defaults; out-of-range values are reported and replaced by the default. */
#include "config.h"

#include "policies/sdp_policies.h"
#include "policies/slidedp_internal.h"
#include "base/env.h"
#include "base/sdp_log.h"

#define DEFAULT_DEPTH           4
#define DEFAULT_WINDOW          2
#define DEFAULT_STAGES_PER_SLOT 4  /* stages alive per staging slot */
#define DEFAULT_IDLE_ANY_MS     50 /* idle this long, a CUDA worker runs any fetch */

/* Set by sdp_policy_slidedp_configure() before StarPU starts (read at the policy's start only). */
static int conf_depth = 0, conf_window = -1;

void sdp_policy_slidedp_configure(int staging_depth, int prefetch_groups)
{
    conf_depth = staging_depth;
    conf_window = prefetch_groups;
}

/* The staging depth: by default one staged chunk per CPU worker, so the bound never idles a core
 * that could update (a smaller depth trades update throughput for staging memory). */
static void read_depth(struct sdp_slidedp_settings *st, int ncpu)
{
    int def_depth = ncpu > DEFAULT_DEPTH ? ncpu : DEFAULT_DEPTH;
    st->depth_from = "SDP_STAGING_DEPTH";
    st->depth = sdp_env_long("SDP_STAGING_DEPTH", def_depth);
    if (st->depth < 1) {
        SDP_WARN("sdp-slidedp: SDP_STAGING_DEPTH=%d must be at least 1; using %d", st->depth,
                 def_depth);
        st->depth = def_depth;
    }
    if (conf_depth >= 1) {
        st->depth = conf_depth;
        st->depth_from = "train.staging_depth";
    }
}

static void read_window(struct sdp_slidedp_settings *st)
{
    st->window_from = "SDP_WINDOW_DEPTH";
    st->window = sdp_env_long("SDP_WINDOW_DEPTH", DEFAULT_WINDOW);
    if (st->window < 0) {
        SDP_WARN("sdp-slidedp: SDP_WINDOW_DEPTH=%d must be at least 0; using %d", st->window,
                 DEFAULT_WINDOW);
        st->window = DEFAULT_WINDOW;
    }
    if (conf_window >= 0) {
        st->window = conf_window;
        st->window_from = "train.prefetch_groups";
    }
}

void sdp_slidedp_settings_read(struct sdp_slidedp_settings *st, int ncpu)
{
    read_depth(st, ncpu);
    read_window(st);
    /* each slot's task writes a stage every few ms and the GPU empties it when it next looks */
    st->stages = sdp_env_long("SDP_STAGE_BUFFERS", DEFAULT_STAGES_PER_SLOT * st->depth);
    if (st->stages < 1) {
        SDP_WARN("sdp-slidedp: SDP_STAGE_BUFFERS=%d must be at least 1; using %d", st->stages,
                 DEFAULT_STAGES_PER_SLOT * st->depth);
        st->stages = DEFAULT_STAGES_PER_SLOT * st->depth;
    }
    st->eager = sdp_env_long("SDP_FETCH_EAGER", 0) > 0;
    st->idle_any_us = 1e3 * sdp_env_long("SDP_FETCH_IDLE_ANY_MS", DEFAULT_IDLE_ANY_MS);
    if (st->idle_any_us < SDP_SLIDEDP_FETCH_IDLE_US)
        st->idle_any_us = SDP_SLIDEDP_FETCH_IDLE_US;
    st->host_prefetch = sdp_env_long("SDP_HOST_PREFETCH", 1) > 0;
}
