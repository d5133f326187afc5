/* SPDX-License-Identifier: MIT */
/* The step's timeline (predict_internal.h): a small discrete simulation of one rank over a few
 * steps.  The closed forms of predict.c price each resource's demand; what they miss is the next
 * forward chasing the previous step's updates and uploads, layer by layer, when the host's AdamW
 * trails the backward (bench/results/2026-12-06-h100-predict.md: 112 ms a step of GPU idle at
 * qwen3-4b/16, against 45 for layer 1 alone).  Pure C, deterministic. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "graph/predict_internal.h"

#define SIM_STEPS   4
#define MAX_THREADS 1024

static double maxd(double a, double b)
{
    return a > b ? a : b;
}

/* The host's lane over one step's chunks: each group's chunks become ready at ready[g] (its
 * early part at early_at), `threads` threads take them lowest group first; first[g] = when the
 * group's first chunk starts, done[g] = when its last ends.  free_at[] holds each thread's next
 * free time, carried across steps. */
static void host_lane(const struct sdp_pgroup_cost *g, int ng, const double *ready, double early_at,
                      double *free_at, int threads, double *first, double *done)
{
    int *left = calloc((size_t)ng, sizeof(*left)), total = 0;
    if (!left)
        return;
    for (int i = 0; i < ng; i++)
        left[i] = g[i].update_s > 0 ? (g[i].nchunks > 0 ? g[i].nchunks : 1) : 0, total += left[i],
        done[i] = first[i] = ready[i];
    while (total > 0) {
        int t = 0, pick = -1;
        for (int k = 1; k < threads; k++) /* the thread free first */
            t = free_at[k] < free_at[t] ? k : t;
        double now = free_at[t], soonest = 1e300;
        for (int i = 0; i < ng; i++) { /* the lowest group with a chunk ready by now */
            double at = g[i].early_frac > 0 && left[i] > (1 - g[i].early_frac) * g[i].nchunks
                            ? early_at
                            : ready[i];
            if (left[i] > 0 && at <= now && pick < 0)
                pick = i;
            if (left[i] > 0 && at < soonest)
                soonest = at;
        }
        if (pick < 0) { /* nothing ready: the thread waits for the next chunk */
            free_at[t] = soonest;
            continue;
        }
        if (left[pick] == (g[pick].nchunks > 0 ? g[pick].nchunks : 1))
            first[pick] = now;
        free_at[t] = now + g[pick].update_s / (g[pick].nchunks > 0 ? g[pick].nchunks : 1);
        if (--left[pick] == 0)
            done[pick] = free_at[t];
        total--;
    }
    free(left);
}

/* When `bytes` that start crossing the link at t arrive: at the busy rate until the host's
 * threads end their update (host_end), at the idle rate after. */
static double upload_end(const struct sdp_sim_link *l, double t, double bytes, double host_end)
{
    double busy = l->h2d_busy_bps > 0 ? l->h2d_busy_bps : l->h2d_bps;
    if (t < host_end) {
        double part = (host_end - t) * busy;
        if (bytes <= part)
            return t + bytes / busy;
        bytes -= part, t = host_end;
    }
    return t + bytes / l->h2d_bps;
}

/* Group i's gradient bytes on the GPU at t: its accumulator during its backward [bs, be), then
 * what the host fetches until the update lets it go: whole until the last chunk's update (done),
 * or chunk by chunk from the first's start (first) when held_chunks (without a window nothing
 * evicts it sooner). */
static double grad_at(const struct sdp_pgroup_cost *g, double t, double bs, double be, double first,
                      double done)
{
    if (t < bs || t >= done)
        return 0;
    if (t < be)
        return g->acc_bytes;
    if (!g->held_chunks || t < first || done <= first)
        return g->held_bytes;
    return g->held_bytes * (done - t) / (done - first);
}

/* The most gradient bytes on the GPU at once in one step: the sum only grows when a backward
 * starts. */
static double grad_peak(const struct sdp_pgroup_cost *g, int ng, const double *bs, const double *be,
                        const double *first, const double *done)
{
    double peak = 0;
    for (int j = 0; j < ng; j++) {
        double sum = 0;
        for (int i = 0; i < ng; i++)
            sum += grad_at(&g[i], bs[j], bs[i], be[i], first[i], done[i]);
        peak = maxd(peak, sum);
    }
    return peak;
}

/* When group g's updated copy is all back up, the link free from `link` on: whole after its last
 * chunk's update (done), or chunk by chunk (up_chunks): from the end of its first chunk's update
 * on, at the link's rate, and its last chunk after its own update. */
static double upload(const struct sdp_sim_link *l, const struct sdp_pgroup_cost *g, double link,
                     double first, double done, double host_end)
{
    int n = g->nchunks > 0 ? g->nchunks : 1;
    if (!g->up_chunks || n == 1)
        return upload_end(l, maxd(link, done), g->up_bytes, host_end);
    double all = upload_end(l, maxd(link, first + g->update_s / n), g->up_bytes, host_end);
    return maxd(all, upload_end(l, done, g->up_bytes / n, host_end));
}

double sdp_predict_sim(const struct sdp_pgroup_cost *g, int ng, int threads,
                       const struct sdp_sim_link *l, struct sdp_sim_out *out)
{
    double *param = calloc((size_t)ng, sizeof(double)), *ready = calloc((size_t)ng, sizeof(double));
    double *done = calloc((size_t)ng, sizeof(double)), free_at[MAX_THREADS];
    double *bs = calloc((size_t)ng, sizeof(double)), *be = calloc((size_t)ng, sizeof(double));
    double *first = calloc((size_t)ng, sizeof(double));
    double gpu = 0, link = 0, start[SIM_STEPS], wait[SIM_STEPS], period = 0;
    int L = ng - 2;
    threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    memset(free_at, 0, sizeof(free_at));
    out->gpu_wait_s = out->grad_peak = 0;
    if (!param || !ready || !done || !bs || !be || !first || L < 0) {
        free(param), free(ready), free(done), free(bs), free(be), free(first);
        return 0;
    }
    for (int s = 0; s < SIM_STEPS; s++) {
        double w = 0, early_at, down = 0;
        start[s] = maxd(gpu, param[0]);
        for (int i = 0; i <= L + 1; i++) { /* the forward, each group once its copy is back */
            double at = maxd(gpu, param[i]);
            w += at - gpu;
            gpu = at + g[i].fwd_s;
            bs[i] = at, be[i] = gpu; /* the head's gradient is made in its one task */
        }
        ready[L + 1] = down = gpu + g[L + 1].down_s; /* the head's gradient */
        early_at = gpu;
        for (int i = L; i >= 0; i--) { /* the backward, top down; each gradient goes down */
            bs[i] = gpu;
            gpu = maxd(gpu + g[i].bwd_in_s, gpu) + g[i].bwd_s;
            be[i] = gpu;
            down = maxd(down, gpu) + g[i].down_s;
            ready[i] = down;
        }
        host_lane(g, ng, ready, early_at, free_at, threads, first, done);
        out->grad_peak = maxd(out->grad_peak, grad_peak(g, ng, bs, be, first, done));
        double host_end = 0;
        for (int i = 0; i < ng; i++)
            host_end = maxd(host_end, done[i]);
        for (int i = 0; i < ng; i++) { /* the updated copies go back up, lowest first */
            if (l->h2d_bps > 0)
                link = upload(l, &g[i], link, first[i], done[i], host_end);
            param[i] = l->h2d_bps > 0 ? link : done[i]; /* no link: the compute reads the host's */
        }
        wait[s] = w;
        if (s > 0)
            period = start[s] - start[s - 1];
    }
    /* the last period, steady by then, and the GPU's wait in it */
    out->gpu_wait_s = wait[SIM_STEPS - 2];
    free(param), free(ready), free(done), free(bs), free(be), free(first);
    return period;
}
