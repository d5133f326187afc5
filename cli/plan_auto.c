/* SPDX-License-Identifier: MIT */
/* `slidedp plan --auto`: the activation placement of every decoder layer chosen by the step-time
 * model within the GPU budget (AutoPolicy's assignment stage on the model's costs): per layer and
 * placement (keep, keep-mlp, selective, keep-attn, recompute, recompute offloaded), the GPU time
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

const enum sdp_act_place sdp_auto_place_act[SDP_AUTO_NPLACE] = {
    SDP_ACT_KEEP,      SDP_ACT_KEEP_MLP,  SDP_ACT_SELECTIVE,
    SDP_ACT_KEEP_ATTN, SDP_ACT_RECOMPUTE, SDP_ACT_RECOMPUTE
};
const int sdp_auto_place_off[SDP_AUTO_NPLACE] = { 0, 0, 0, 0, 0, 1 };
const char *const sdp_auto_place_name[SDP_AUTO_NPLACE] = { "keep",      "keep-mlp",  "selective",
                                                           "keep-attn", "recompute", "offload" };
const char *const sdp_auto_place_plan[SDP_AUTO_NPLACE] = { "keep",      "keep-mlp",  "selective",
                                                           "keep-attn", "recompute", "recompute" };

void sdp_auto_set_all(struct sdp_plan *p, int k)
{
    for (int l = 1; l <= p->nlayers; l++)
        p->group[l].act = sdp_auto_place_act[k], p->group[l].offload = sdp_auto_place_off[k];
}

int sdp_auto_rows(const int *pick, int L, struct sdp_auto_row *rows, int max)
{
    int n = 0;
    for (int a = 0; a < L;) {
        int b = a;
        while (b + 1 < L && pick[b + 1] == pick[a])
            b++;
        if (n == max)
            return -ENOSPC;
        rows[n++] = (struct sdp_auto_row){ a + 1, b + 1, pick[a] };
        a = b + 1;
    }
    return n;
}

/* The recipe's `plan:` rows of the choice, runs of equal layers merged; layers 1..nu updated on
 * the GPU. */
static void print_rows(const int *pick, int L, int nu)
{
    printf("plan:\n");
    if (nu > 0)
        printf("  - {layers: 1-%d, update: gpu}\n", nu);
    for (int a = 0; a < L;) {
        int b = a;
        while (b + 1 < L && pick[b + 1] == pick[a])
            b++;
        if (a == b)
            printf("  - {layers: %d", a + 1);
        else
            printf("  - {layers: %d-%d", a + 1, b + 1);
        printf(", activations: %s%s}\n", sdp_auto_place_plan[pick[a]],
               sdp_auto_place_off[pick[a]] ? ", offload: on" : "");
        a = b + 1;
    }
}

/* Whether decoder layer gi's AdamW can run on the GPU in the predicted run (graph/plan.c's rule:
 * one rank on a GPU, the bf16 return and the working copies on the host, or LoRA; not a sparse
 * layer's full update, which skips the experts without token on the host). */
static int update_gpu_ok(const struct sdp_cli_run *cr, const struct sdp_plan *p, int gi)
{
    return sdp_plan_one_rank(p) &&
           (p->lora.rank > 0 || (p->group[gi].grad_bf16 && !cr->run.work_staged &&
                                 !sdp_model_layer_sparse(cr->run.m, gi - 1)));
}

/* Decoder layer n + 1's update moved to the GPU, if it can.  @return 0, -ENOSPC (it cannot) */
static int more_on_gpu(const struct sdp_cli_run *cr, struct sdp_plan *p, int *n)
{
    if (*n == p->nlayers || !update_gpu_ok(cr, p, *n + 1))
        return -ENOSPC;
    ++*n;
    return sdp_plan_set(p, NULL, *n, *n, "update", "gpu");
}

/* The host's budget on a GPU, a first bound: the fewest layers updated there (*n) for the host's
 * peak with every layer recomputed on the GPU (no activation on the host) to fit host bytes.
 * @return 0; -ENOSPC with *least the host's peak with every layer that can updated there */
static int host_fit(struct sdp_cli_run *cr, const struct sdp_cli_machine *cm, struct sdp_plan *p,
                    double host, int *n, double *least)
{
    struct sdp_predict f;
    int rc;
    sdp_auto_set_all(p, SDP_AUTO_NPLACE - 2);
    rc = sdp_predict_step(&cr->run, &cm->mc, &f);
    while (!rc && (double)f.host_bytes > host) {
        if ((rc = more_on_gpu(cr, p, n)) == -ENOSPC)
            *least = (double)f.host_bytes;
        else if (!rc)
            rc = sdp_predict_step(&cr->run, &cm->mc, &f);
    }
    return rc;
}

/* Every layer's time and GPU bytes at each placement into cost[l * SDP_AUTO_NPLACE + k] */
static void costs(const struct sdp_cli_run *cr, const struct sdp_cli_machine *cm,
                  const double *adjust, struct sdp_choice *cost)
{
    const struct sdp_predict_run *run = &cr->run;
    int nr = run->n_micro / cr->plan.nranks;
    for (int l = 0; l < cr->plan.nlayers; l++)
        for (int k = 0; k < SDP_AUTO_NPLACE; k++) {
            struct sdp_choice *c = &cost[l * SDP_AUTO_NPLACE + k];
            c->time_s = nr * sdp_predict_layer_s(run->m, run->micro_batch, run->seq_len,
                                                 run->work_dtype, &cm->mc, sdp_auto_place_act[k]) +
                        (adjust ? adjust[k] : 0.0);
            c->bytes = sdp_plan_layer_bytes(run->m, run->work_dtype, run->micro_batch, run->seq_len,
                                            sdp_auto_place_act[k], sdp_auto_place_off[k],
                                            run->plan->residual_f32);
        }
}

/* The placements of trial (cr->run's plan) chosen within limit beside what the rest of the run
 * holds: the peak with every layer recomputed and offloaded (on CPU workers the activations are
 * host memory: the host's peak).  @return 0, -ENOSPC (*least: the least any choice needs) */
static int assign(struct sdp_cli_run *cr, const struct sdp_cli_machine *cm, struct sdp_plan *trial,
                  const struct sdp_choice *cost, double limit, int *pick,
                  struct sdp_predict *chosen, double *least)
{
    struct sdp_predict floor;
    struct sdp_choose_result res = { 0 };
    int L = trial->nlayers, rc;
    sdp_auto_set_all(trial, SDP_AUTO_NPLACE - 1);
    rc = sdp_predict_step(&cr->run, &cm->mc, &floor);
    double held = cm->mc.ngpus > 0 ? (double)floor.gpu_need_bytes : (double)floor.host_bytes;
    if (!rc && held > limit)
        rc = -ENOSPC;
    if (!rc)
        rc = sdp_choose(L, SDP_AUTO_NPLACE, cost, (unsigned long long)(limit - held), 16ull << 20,
                        pick, &res);
    *least = held + (double)res.min_bytes;
    for (int l = 0; !rc && l < L; l++)
        trial->group[l + 1].act = sdp_auto_place_act[pick[l]],
                         trial->group[l + 1].offload = sdp_auto_place_off[pick[l]];
    return rc ? rc : sdp_predict_step(&cr->run, &cm->mc, chosen);
}

int sdp_cli_auto_choose(struct sdp_cli_run *cr, const struct sdp_cli_machine *cm,
                        const struct sdp_auto_budget *b, const double *adjust, int *pick,
                        int *gpu_update, struct sdp_predict *chosen, double *least, int *host_short)
{
    int L = cr->plan.nlayers, host = cm->mc.ngpus > 0 && b->host > 0, rc;
    struct sdp_choice *cost = calloc((size_t)L * SDP_AUTO_NPLACE, sizeof(*cost));
    struct sdp_plan trial;
    if (!cost || sdp_plan_copy(&trial, &cr->plan)) {
        free(cost);
        return sdp_err(-ENOMEM, "auto: the cost table of %d layers", L);
    }
    costs(cr, cm, adjust, cost);
    cr->run.plan = &trial;
    *gpu_update = 0, *host_short = 0;
    rc = host ? host_fit(cr, cm, &trial, b->host, gpu_update, least) : 0;
    *host_short = rc == -ENOSPC;
    /* the choice may offload activations to the host: one more layer's update on the GPU, and
     * choose again, until the host's peak fits (the GPU's budget shrinks each time) */
    while (!rc && !(rc = assign(cr, cm, &trial, cost, b->limit, pick, chosen, least)) && host &&
           (double)chosen->host_bytes > b->host)
        if ((rc = more_on_gpu(cr, &trial, gpu_update)) == -ENOSPC)
            *least = (double)chosen->host_bytes, *host_short = 1;
    cr->run.plan = &cr->plan;
    sdp_plan_free(&trial);
    free(cost);
    return rc;
}

int sdp_cli_plan_auto(struct sdp_cli_run *cr, const struct sdp_cli_machine *cm,
                      const struct sdp_auto_budget *b, const struct sdp_predict *base)
{
    int L = cr->plan.nlayers, *pick = calloc((size_t)L, sizeof(int)), rc, nu = 0, short_host = 0;
    struct sdp_predict chosen;
    struct sdp_plan shown;
    double least = 0;
    if (!pick)
        return sdp_err(-ENOMEM, "plan --auto: %d layers", L);
    rc = sdp_cli_auto_choose(cr, cm, b, NULL, pick, &nu, &chosen, &least, &short_host);
    if (rc == -ENOSPC && short_host) {
        SDP_ERROR("plan --auto: the host's peak is %.2f GiB with every layer that can updated on "
                  "the GPU, above the budget of %.2f GiB",
                  least / 1073741824.0, b->host / 1073741824.0);
        sdp_hint("raise train.host_memory_gib to %.2f or more", least / 1073741824.0 + 0.01);
    } else if (rc == -ENOSPC) {
        SDP_ERROR("plan --auto: no placement fits %.2f GiB a GPU: the least needs %.2f GiB",
                  b->limit / 1073741824.0, least / 1073741824.0);
        sdp_hint("raise train.gpu_memory_gib, or lower batch.micro");
    }
    if (!rc && !(rc = sdp_plan_copy(&shown, &cr->plan))) {
        for (int l = 0; l < L; l++)
            shown.group[l + 1].act = sdp_auto_place_act[pick[l]],
                            shown.group[l + 1].offload = sdp_auto_place_off[pick[l]];
        if (nu > 0)
            rc = sdp_plan_set(&shown, NULL, 1, nu, "update", "gpu");
        printf("\nauto: per-layer activation placements chosen within %.2f GiB a GPU",
               b->limit / 1073741824.0);
        if (b->host > 0)
            printf(" and %.2f GiB of host (%d layer%s updated on the GPU)", b->host / 1073741824.0,
                   nu, nu == 1 ? "" : "s");
        printf(":\n");
        sdp_plan_print(&shown, stdout);
        printf("auto: predicted step %.3f s (%.0f tokens/s, bound by %s), %+.1f%% against the "
               "recipe's plan; GPU %.2f GiB, host %.2f GiB\n",
               chosen.step_s, chosen.tokens_per_s, sdp_predict_res_name(chosen.bound),
               100.0 * (base->step_s / chosen.step_s - 1.0), chosen.gpu_need_bytes / 1073741824.0,
               chosen.host_bytes / 1073741824.0);
        print_rows(pick, L, nu);
        sdp_plan_free(&shown);
    }
    free(pick);
    return rc;
}
