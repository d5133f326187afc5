/* SPDX-License-Identifier: MIT */
/* `slidedp plan --auto`: the activation placement of every decoder layer chosen by the step-time
 * model within the GPU budget (AutoPolicy's assignment stage on the model's costs): per layer and
 * placement (keep, keep-mlp, selective, recompute, recompute offloaded), the GPU time
 * (sdp_predict_layer_s) and bytes (sdp_plan_layer_bytes); the least time within what the budget
 * leaves beside the rest of the run (graph/choose.h); the choice priced whole against the recipe's
 * plan and printed with the recipe rows that give it.  Test: tests/e2e/test_e2e_plan_predict.sh. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sdp_log.h"
#include "cli/predict_cli.h"
#include "graph/choose.h"

#define NPLACE 5
static const enum sdp_act_place place_act[NPLACE] = { SDP_ACT_KEEP, SDP_ACT_KEEP_MLP,
                                                      SDP_ACT_SELECTIVE, SDP_ACT_RECOMPUTE,
                                                      SDP_ACT_RECOMPUTE };
static const int place_off[NPLACE] = { 0, 0, 0, 0, 1 };
static const char *const place_name[NPLACE] = { "keep", "keep-mlp", "selective", "recompute",
                                                "offload" };

/* The plan with every layer at placement k. */
static void set_all(struct sdp_plan *p, int k)
{
    for (int l = 1; l <= p->nlayers; l++)
        p->group[l].act = place_act[k], p->group[l].offload = place_off[k];
}

/* The recipe's `plan:` rows of the choice, runs of equal layers merged. */
static void print_rows(const int *pick, int L)
{
    printf("plan:\n");
    for (int a = 0; a < L;) {
        int b = a;
        while (b + 1 < L && pick[b + 1] == pick[a])
            b++;
        if (a == b)
            printf("  - {layers: %d", a + 1);
        else
            printf("  - {layers: %d-%d", a + 1, b + 1);
        if (place_off[pick[a]])
            printf(", activations: recompute, offload: on}\n");
        else
            printf(", activations: %s}\n", place_name[pick[a]]);
        a = b + 1;
    }
}

int sdp_cli_plan_auto(struct sdp_cli_run *cr, const struct sdp_cli_machine *cm, double gpu_limit,
                      const struct sdp_predict *base)
{
    const struct sdp_predict_run *run = &cr->run;
    int L = cr->plan.nlayers, nr = run->n_micro / cr->plan.nranks, rc;
    struct sdp_choice *cost = calloc((size_t)L * NPLACE, sizeof(*cost));
    int *pick = calloc((size_t)L, sizeof(*pick));
    struct sdp_plan trial;
    struct sdp_predict floor, chosen;
    struct sdp_choose_result res;
    if (!cost || !pick || sdp_plan_copy(&trial, &cr->plan)) {
        free(cost), free(pick);
        return sdp_err(-ENOMEM, "plan --auto: the cost table of %d layers", L);
    }
    for (int l = 0; l < L; l++)
        for (int k = 0; k < NPLACE; k++) {
            cost[l * NPLACE + k].time_s =
                nr * sdp_predict_layer_s(run->m, run->micro_batch, run->seq_len, run->work_dtype,
                                         &cm->mc, place_act[k]);
            cost[l * NPLACE + k].bytes =
                sdp_plan_layer_bytes(run->m, run->work_dtype, run->micro_batch, run->seq_len,
                                     place_act[k], place_off[k]);
        }
    /* what the rest of the run holds: the peak with every layer recomputed and offloaded */
    set_all(&trial, NPLACE - 1);
    cr->run.plan = &trial;
    rc = sdp_predict_step(&cr->run, &cm->mc, &floor);
    if (!rc && floor.gpu_need_bytes > gpu_limit)
        rc = -ENOSPC, res.min_bytes = 0;
    if (!rc)
        rc = sdp_choose(L, NPLACE, cost, (unsigned long long)(gpu_limit - floor.gpu_need_bytes),
                        16ull << 20, pick, &res);
    if (rc == -ENOSPC) {
        SDP_ERROR("plan --auto: no placement fits %.2f GiB a GPU: the least needs %.2f GiB",
                  gpu_limit / 1073741824.0, (floor.gpu_need_bytes + res.min_bytes) / 1073741824.0);
        sdp_hint("raise train.gpu_memory_gib, or lower batch.micro");
    }
    for (int l = 0; !rc && l < L; l++)
        trial.group[l + 1].act = place_act[pick[l]],
                        trial.group[l + 1].offload = place_off[pick[l]];
    if (!rc)
        rc = sdp_predict_step(&cr->run, &cm->mc, &chosen);
    if (!rc) {
        printf("\nauto: per-layer activation placements chosen within %.2f GiB a GPU:\n",
               gpu_limit / 1073741824.0);
        sdp_plan_print(&trial, stdout);
        printf("auto: predicted step %.3f s (%.0f tokens/s, bound by %s), %+.1f%% against the "
               "recipe's plan; GPU %.2f GiB\n",
               chosen.step_s, chosen.tokens_per_s, sdp_predict_res_name(chosen.bound),
               100.0 * (base->step_s / chosen.step_s - 1.0), chosen.gpu_need_bytes / 1073741824.0);
        print_rows(pick, L);
    }
    cr->run.plan = &cr->plan;
    sdp_plan_free(&trial);
    free(cost), free(pick);
    return rc;
}
