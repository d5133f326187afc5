/* SPDX-License-Identifier: MIT */
/* train.policy: auto, the selection (AutoPolicy's stages 1-3; cli/train_internal.h): the step-time
 * model prices every decoder layer's activation placement and the chooser keeps the least time
 * within the budget (stage 1, before StarPU: a budget nothing fits is refused there); a reduced
 * pipeline (the model's layer shapes, 2 and 6 layers, a few steps) measures what a layer of each
 * placement costs on this machine and corrects the model's per-layer times (stage 2); the chooser
 * runs again on the corrected times (stage 3).  The choice is a list of `plan:` rows, appended to
 * the recipe's, saved in the run directory (auto-plan.json, reused on resume) and in a cache keyed
 * by the model's shape, the batch, the budget and the machine (cli/autopolicy_cache.c).  Stage 4,
 * the validation against the recipe's own plan on the run's first steps, is cli/autopolicy_check.c.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/predict_cli.h"
#include "cli/train_internal.h"
#include "runtime/init.h"

#define REDUCED_SHALLOW 2 /* the reduced pipeline's two depths */
#define REDUCED_LAYERS  6
#define REDUCED_STEPS   3 /* its steps per placement: the first fills the pipeline */

/* The chooser's budget: the GPU's limit (the recipe's, else the share of the device StarPU
 * allocates from), or on CPU workers the host's (the recipe's, else what is available). */
static double budget_of(const struct sdp_recipe *r, const struct sdp_cli_machine *cm)
{
    if (cm->mc.ngpus > 0)
        return r->gpu_memory_gib > 0 ? r->gpu_memory_gib * 1073741824.0
                                     : (double)cm->mc.gpu_mem_bytes * SDP_RT_GPU_SHARE;
    return r->host_memory_gib > 0 ? r->host_memory_gib * 1073741824.0
                                  : (double)sdp_rt_host_mem_available();
}

void sdp_train_auto_print(const struct sdp_auto *a, const char *what)
{
    char line[1024];
    size_t o = 0;
    line[0] = '\0';
    for (int i = 0; i < a->nrows && o < sizeof(line); i++) {
        const struct sdp_auto_row *w = &a->rows[i];
        o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%d%s%.0d %s", i ? ", " : "", w->first,
                              w->last > w->first ? "-" : "", w->last > w->first ? w->last : 0,
                              sdp_auto_place_name[w->place]);
    }
    SDP_INFO("auto: %s: %s", what, a->nrows ? line : "the recipe's plan");
    if (a->gpu_update > 0 && strcmp(what, "layers")) /* choose() says it with the budget */
        SDP_INFO("auto: %s: layers 1-%d updated on the GPU", what, a->gpu_update);
}

/* The choice pick[] as rows into a->rows.  @return 0 or -ENOSPC (logged) */
static int keep_rows(struct sdp_auto *a, const int *pick, int L)
{
    int n = sdp_auto_rows(pick, L, a->rows, SDP_AUTO_MAX_ROWS);
    if (n < 0)
        return sdp_err(-ENOSPC, "auto: the choice needs more than %d plan rows", SDP_AUTO_MAX_ROWS);
    a->nrows = n;
    return 0;
}

/* Stages 1 and 3: the chooser on the model's times (+ a->adjust when measured).  Prints the
 * predicted gain over the recipe's plan.  @return 0, -ENOSPC (logged with the least budget) */
static int choose(struct sdp_train *t, const char *stage)
{
    struct sdp_recipe *r = t->r;
    struct sdp_auto *a = &t->autop;
    struct sdp_cli_machine cm;
    struct sdp_cli_run cr;
    struct sdp_predict base, chosen;
    int ngpus = sdp_cli_run_gpus(r, r->machine), rc, *pick, short_host = 0;
    double least = 0;
    struct sdp_auto_budget b;
    sdp_cli_machine_get(r->machine, ngpus, 0, &cm);
    if ((rc = sdp_cli_run_make(r, ngpus, &cr)) != 0)
        return rc;
    b.limit = budget_of(r, &cm);
    b.host = cm.mc.ngpus > 0 && r->host_memory_gib > 0 ? r->host_memory_gib * 1073741824.0 : 0;
    pick = calloc((size_t)cr.plan.nlayers, sizeof(*pick));
    rc = pick ? sdp_predict_step(&cr.run, &cm.mc, &base) : -ENOMEM;
    if (!rc)
        rc = sdp_cli_auto_choose(&cr, &cm, &b, a->measured ? a->adjust : NULL, pick, &a->gpu_update,
                                 &chosen, &least, &short_host);
    if (rc == -ENOSPC && short_host) {
        SDP_ERROR("%s: train.policy auto: the host's peak is %.2f GiB with every layer that can "
                  "updated on the GPU, above train.host_memory_gib %.2f",
                  r->file[0] ? r->file : "train", least / 1073741824.0, b.host / 1073741824.0);
        sdp_hint("raise train.host_memory_gib to %.2f or more", least / 1073741824.0 + 0.01);
    } else if (rc == -ENOSPC) {
        SDP_ERROR("%s: train.policy auto: no activation placement fits the %s of %.2f GiB; the "
                  "least needs %.2f GiB",
                  r->file[0] ? r->file : "train", ngpus > 0 ? "GPU budget" : "host budget",
                  b.limit / 1073741824.0, least / 1073741824.0);
        sdp_hint("raise train.%s to %.2f or more, or lower batch.micro",
                 ngpus > 0 ? "gpu_memory_gib" : "host_memory_gib", least / 1073741824.0 + 0.01);
    }
    if (!rc && (rc = keep_rows(a, pick, cr.plan.nlayers)) == 0) {
        a->pred_default_s = base.step_s, a->pred_chosen_s = chosen.step_s;
        SDP_INFO("auto: %s: predicted %.3f s a step against %.3f s for the recipe's plan (%+.1f%%)",
                 stage, chosen.step_s, base.step_s, 100.0 * (base.step_s / chosen.step_s - 1.0));
        sdp_train_auto_print(a, "layers");
        if (b.host > 0)
            SDP_INFO("auto: %s: layers 1-%d updated on the GPU, the host's peak %.2f GiB "
                     "predicted within its %.2f GiB",
                     stage, a->gpu_update, chosen.host_bytes / 1073741824.0, b.host / 1073741824.0);
    }
    free(pick);
    sdp_cli_run_free(&cr);
    return rc;
}

/* One placement on the reduced pipeline: its state st with every layer at placement k, `steps`
 * steps of random tokens; @return the mean of the steps after the first in *step_s. */
static int run_reduced(struct sdp_train *t, struct sdp_state *st, int k, int32_t *ids,
                       double *step_s)
{
    const struct sdp_recipe *r = t->r;
    struct sdp_graph_conf gc = { 0 };
    struct sdp_plan p;
    sdp_graph_t *g = NULL;
    struct sdp_step_result res;
    int rc, L = st->cfg.num_layers;
    double t0 = 0;
    sdp_recipe_graph_conf(r, &gc);
    gc.grad_route_gpu = NULL;
    sdp_cli_place_norms(1, gc.window);
    rc = sdp_plan_init(&p, st, &gc);
    if (!rc)
        rc = sdp_plan_set(&p, st, 1, L, "activations", sdp_auto_place_plan[k]);
    if (!rc)
        rc = sdp_plan_set(&p, st, 1, L, "offload", sdp_auto_place_off[k] ? "on" : "off");
    if (!rc && !(rc = sdp_plan_check(&p, st, &gc)))
        rc = sdp_graph_create_plan(&g, st, &gc, &p);
    if (p.group)
        sdp_plan_free(&p);
    for (int s = 0; !rc && s < REDUCED_STEPS; s++) {
        if (s == 1)
            t0 = sdp_cli_now_s();
        rc = sdp_graph_step(g, s, ids, ids, 1e-6, 1, &res);
    }
    if (!rc)
        rc = sdp_rt_wait_all();
    *step_s = (sdp_cli_now_s() - t0) / (REDUCED_STEPS - 1);
    sdp_graph_destroy(g);
    return rc;
}

/* The reduced pipeline at one depth: every placement's step, measured (got) and priced (pred),
 * after an untimed run with warm_up.  @return 0 or an error (logged) */
static int depth_pass(struct sdp_train *t, int depth, int warm_up, const int32_t *ids, double *got,
                      double *pred)
{
    const struct sdp_recipe *r = t->r;
    struct sdp_model_cfg m = r->model;
    struct sdp_state st;
    struct sdp_cli_machine cm;
    struct sdp_cli_run cr;
    int rc, ngpus = sdp_rt_ncuda() > 0 ? 1 : 0;
    m.num_layers = depth;
    rc = sdp_state_create_ex(&st, &m, t->work_dt, sdp_cli_chunk_bytes(r->chunk_mib, &m), t->grad_dt,
                             (ngpus > 0 ? SDP_STATE_ON_GPU : 0) |
                                 (r->work_on_gpu ? SDP_STATE_WORK_STAGED : 0) |
                                 (r->embed_on_gpu ? SDP_STATE_EMBED_STAGED : 0));
    if (rc)
        return rc;
    sdp_state_init_random(&st, r->seed);
    struct sdp_recipe rr = *r; /* the recipe of the reduced model: no rows of the full one */
    rr.model = m, rr.nplan = 0;
    sdp_cli_machine_get(r->machine, ngpus, 0, &cm);
    rc = sdp_cli_run_make(&rr, ngpus, &cr);
    double warm;
    if (!rc && warm_up) /* untimed: the workers, the kernels and the allocator warm up */
        rc = run_reduced(t, &st, SDP_AUTO_NPLACE - 2, (int32_t *)ids, &warm);
    for (int k = 0; !rc && k < SDP_AUTO_NPLACE; k++) {
        struct sdp_predict o;
        sdp_auto_set_all(&cr.plan, k);
        if ((rc = sdp_predict_step(&cr.run, &cm.mc, &o)) != 0 ||
            (rc = run_reduced(t, &st, k, (int32_t *)ids, &got[k])) != 0)
            break;
        pred[k] = o.step_s;
        SDP_INFO("auto: stage 2: %d layers, every one %s: %.3f s a step measured, %.3f predicted",
                 depth, sdp_auto_place_name[k], got[k], pred[k]);
    }
    if (cr.plan.group)
        sdp_cli_run_free(&cr);
    sdp_state_destroy(&st);
    return rc;
}

/* Stage 2: the reduced pipeline at two depths, every placement at each; the difference between
 * the depths is what a layer of that placement costs (the embedding's and the head's work
 * cancel), against the model's price of the same difference: their gap corrects the placement's
 * time per layer.  A model of REDUCED_SHALLOW layers or fewer runs one depth, its whole step's
 * gap spread over its layers.  @return 0 or an error (logged) */
static int measure(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    struct sdp_auto *a = &t->autop;
    size_t n = (size_t)r->global_batch * r->seq_len;
    int32_t *ids = malloc(n * sizeof(*ids)), L = r->model.num_layers, rc;
    int d1 = L < REDUCED_SHALLOW ? L : REDUCED_SHALLOW,
        d2 = L < REDUCED_LAYERS ? L : REDUCED_LAYERS;
    double g1[SDP_AUTO_NPLACE], p1[SDP_AUTO_NPLACE], g2[SDP_AUTO_NPLACE], p2[SDP_AUTO_NPLACE];
    if (!ids)
        return sdp_err(-ENOMEM, "auto: the reduced pipeline's tokens");
    for (size_t i = 0; i < n; i++) /* any ids: the work does not depend on them */
        ids[i] = (int32_t)((i * 2654435761u) % (size_t)r->model.vocab_size);
    rc = depth_pass(t, d1, 1, ids, g1, p1);
    if (!rc && d2 > d1)
        rc = depth_pass(t, d2, 0, ids, g2, p2);
    for (int k = 0; !rc && k < SDP_AUTO_NPLACE; k++)
        a->adjust[k] =
            d2 > d1 ? ((g2[k] - g1[k]) - (p2[k] - p1[k])) / (d2 - d1) : (g1[k] - p1[k]) / d1;
    free(ids);
    a->measured = rc == 0;
    return rc;
}

int sdp_train_auto_plan(struct sdp_train *t)
{
    struct sdp_auto *a = &t->autop;
    if (!t->r->policy_auto || t->r->print_plan)
        return 0;
    a->t0 = sdp_cli_now_s();
    if (t->r->lora.rank > 0) {
        SDP_ERROR("%s: train.policy auto chooses the placements of full fine-tuning, not yet of "
                  "a LoRA run",
                  t->r->file[0] ? t->r->file : "train");
        sdp_hint("drop train.policy, or set it to fixed");
        return SDP_EXIT_USAGE;
    }
    sdp_train_auto_key(t);
    if (t->resuming && sdp_train_auto_load_run(t) == 0) {
        a->from = SDP_AUTO_FROM_RUN;
        sdp_train_auto_print(a, "the run's plan");
        return 0;
    }
    if (sdp_train_auto_load_cache(t) == 0) {
        a->from = SDP_AUTO_FROM_CACHE;
        sdp_train_auto_print(a, "the cached plan");
        return 0;
    }
    a->from = SDP_AUTO_SELECTED;
    return choose(t, "stage 1 (the model)") ? SDP_EXIT_USAGE : 0;
}

int sdp_train_auto_measure(struct sdp_train *t)
{
    struct sdp_auto *a = &t->autop;
    if (!t->r->policy_auto || t->r->print_plan || a->from != SDP_AUTO_SELECTED)
        return 0;
    if (t->r->ranks > 1) /* the reduced pipeline runs one rank */
        SDP_INFO("auto: stage 2 measures one rank; with %d the model's choice stands", t->r->ranks);
    else if (measure(t) || choose(t, "stage 3 (the model, corrected by stage 2)"))
        return -1;
    a->select_s = sdp_cli_now_s() - a->t0;
    SDP_INFO("auto: selection took %.1f s", a->select_s);
    return 0;
}
