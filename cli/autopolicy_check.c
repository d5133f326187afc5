/* SPDX-License-Identifier: MIT */
/* train.policy auto, the chosen plan in the run (cli/train_internal.h): its rows applied to the
 * recipe's plan, and stage 4, the validation: the run's first steps on the chosen plan, then as
 * many on the recipe's own, each after a step that fills the pipeline; the faster plan carries the
 * run on.  The steps are the run's own (every placement gives the same bits), so the validation
 * costs only the slower plan's extra time and two changes of graph, at step boundaries where the
 * state is whole (as at a resume). */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/train_internal.h"
#include "graph/choose.h"

int sdp_train_auto_budget(const struct sdp_train *t, struct sdp_plan *p)
{
    const struct sdp_auto *a = &t->autop;
    return a->gpu_update > 0 ? sdp_plan_set(p, &t->st, 1, a->gpu_update, "update", "gpu") : 0;
}

int sdp_train_auto_apply(const struct sdp_train *t, struct sdp_plan *p)
{
    const struct sdp_auto *a = &t->autop;
    int rc = 0;
    for (int i = 0; !rc && i < a->nrows; i++) {
        const struct sdp_auto_row *w = &a->rows[i];
        rc = sdp_plan_set(p, &t->st, w->first, w->last, "activations",
                          sdp_auto_place_plan[w->place]);
        if (!rc)
            rc = sdp_plan_set(p, &t->st, w->first, w->last, "offload",
                              sdp_auto_place_off[w->place] ? "on" : "off");
    }
    return rc;
}

/* The validation's steps: [v0, v0 + SDP_AUTO_VSTEPS] chosen, then [.., v0 + 2 SDP_AUTO_VSTEPS + 1]
 * the recipe's, each plan's first step filling its pipeline; v0 is the run's second step, since
 * the first two steps of a run on a GPU are slow whatever the plan
 * (bench/results/2026-12-07-h100-auto-host.md), and the first timed ones would count that
 * against the chosen plan.  -1000 when there is none (the plan came from a file, no step to
 * spare). */
static int v0_of(const struct sdp_train *t)
{
    const struct sdp_auto *a = &t->autop;
    return a->validate ? t->first + 1 : -1000;
}

int sdp_train_auto_hold_next(const struct sdp_train *t, int s)
{
    int v = v0_of(t);
    return s == v + SDP_AUTO_VSTEPS ||
           s == v + 2 * SDP_AUTO_VSTEPS + 1; /* the graph may change after s */
}

void sdp_train_auto_start(struct sdp_train *t)
{
    struct sdp_auto *a = &t->autop;
    const int need = 2 * (SDP_AUTO_VSTEPS + 1) + 2;
    if (!t->r->policy_auto || a->from != SDP_AUTO_SELECTED)
        return;
    a->validate = a->nrows > 0 && t->r->steps - t->first >= need;
    if (!a->validate) {
        snprintf(a->verdict, sizeof(a->verdict), "%s",
                 a->nrows ? "not validated: too few steps" : "the recipe's plan");
        if (a->nrows)
            SDP_INFO("auto: %d steps are too few to validate the choice (%d needed): the model's "
                     "choice stands",
                     t->r->steps - t->first, need);
        sdp_train_auto_save(t, 1);
    } else {
        sdp_train_auto_save(t, 0); /* the run's: a stop before the verdict resumes with it */
    }
}

/* The verdict after both plans' timed steps: the faster one carries on.  @return an exit status */
static int decide(struct sdp_train *t)
{
    struct sdp_auto *a = &t->autop;
    int keep = sdp_choose_keep(a->vchosen, SDP_AUTO_VSTEPS, a->vbase, SDP_AUTO_VSTEPS);
    double c = 0, d = 0;
    for (int i = 0; i < SDP_AUTO_VSTEPS; i++)
        c += a->vchosen[i] / SDP_AUTO_VSTEPS, d += a->vbase[i] / SDP_AUTO_VSTEPS;
    a->meas_s[0] = c, a->meas_s[1] = d;
    snprintf(a->verdict, sizeof(a->verdict), "%s", keep ? "chosen" : "the recipe's plan");
    SDP_INFO("auto: validation: the chosen plan %.3f s a step, the recipe's %.3f s: %+.1f%% "
             "measured (%+.1f%% predicted); %s",
             c, d, 100.0 * (d / c - 1.0), 100.0 * (a->pred_default_s / a->pred_chosen_s - 1.0),
             keep ? "the chosen plan carries on" : "the recipe's plan carries on");
    if (keep)
        SDP_INFO("auto: selection took %.1f s: it pays for itself after %.0f steps", a->select_s,
                 a->select_s / (d - c) + 0.5);
    else
        a->nrows = 0; /* the recipe's plan: what the files keep */
    a->validate = 0;
    sdp_train_auto_save(t, 1);
    return keep ? sdp_train_regraph(t, 1) : SDP_EXIT_OK;
}

int sdp_train_auto_after_step(struct sdp_train *t, int s, double step_s)
{
    struct sdp_auto *a = &t->autop;
    int v = v0_of(t);
    if (!a->validate || s < v)
        return SDP_EXIT_OK;
    if (s > v && s <= v + SDP_AUTO_VSTEPS)
        a->vchosen[s - v - 1] = step_s;
    if (s == v + SDP_AUTO_VSTEPS)
        return sdp_train_regraph(t, 0);
    if (s > v + SDP_AUTO_VSTEPS + 1 && s <= v + 2 * SDP_AUTO_VSTEPS + 1)
        a->vbase[s - v - SDP_AUTO_VSTEPS - 2] = step_s;
    if (s == v + 2 * SDP_AUTO_VSTEPS + 1)
        return decide(t);
    return SDP_EXIT_OK;
}
