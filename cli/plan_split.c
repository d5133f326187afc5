/* SPDX-License-Identifier: MIT */
/* RoundPipe's stage split of the recipe's step (graph/split.h) on the step-time model's per-op
 * costs (graph/predict_ops.h) for the plan's ranks and micro-batches, a stage costing the
 * machine's task overhead besides its ops: printed by `slidedp plan --sched sdp-roundpipe` (the
 * dynamic program's and the greedy split's step, the chosen split stage by stage), and given to
 * the sdp-roundpipe policy by `slidedp train`.  Tests: tests/e2e/test_e2e_plan_split.sh,
 * tests/e2e/test_e2e_roundpipe.sh. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/sdp_log.h"
#include "policies/sdp_policies.h"
#include "cli/predict_cli.h"
#include "graph/predict_ops.h"

/* A stage's ops as runs of one direction: "fwd 0-12 bwd 13-9". */
static void print_ops(const struct sdp_split_op *ops, int a, int b)
{
    for (int i = a; i < b;) {
        int j = i;
        while (j + 1 < b && ops[j + 1].bwd == ops[i].bwd)
            j++;
        printf(" %s %d", ops[i].bwd ? "bwd" : "fwd", ops[i].group);
        if (j > i)
            printf("-%d", ops[j].group);
        i = j + 1;
    }
}

static void print_split(const char *name, const struct sdp_split *s)
{
    printf("  %-16s %3d stages, bottleneck %8.3f ms, step %9.3f ms\n", name, s->nstages,
           1e3 * s->bottleneck_s, 1e3 * s->step_s);
}

int sdp_cli_plan_split(const struct sdp_cli_run *cr, const struct sdp_cli_machine *cm, int width)
{
    const struct sdp_plan *p = &cr->plan;
    int n = 2 * p->ngroups, rc;
    struct sdp_split_op *ops = calloc((size_t)n, sizeof(*ops));
    struct sdp_split best, dp, gr;
    struct sdp_split_conf c = { .ranks = width,
                                .n_micro = cr->run.n_micro,
                                .stage_s = cm->mc.task_s };
    if (!ops)
        return sdp_err(-ENOMEM, "split of %d ops", n);
    n = sdp_predict_split_ops(p, cr->run.m, cr->run.micro_batch, cr->run.seq_len,
                              cr->run.work_dtype, &cm->mc, ops);
    if ((rc = sdp_split_best(n, ops, &c, &best, &dp, &gr))) {
        free(ops);
        return rc;
    }
    printf("\nRoundPipe stage split (sdp-roundpipe): "
           "%d ops over %d rank%s, %d micro-batch%s a step, %.3f ms a stage besides its ops\n",
           n, c.ranks, c.ranks > 1 ? "s" : "", c.n_micro, c.n_micro > 1 ? "es" : "",
           1e3 * c.stage_s);
    print_split("dynamic program", &dp);
    print_split("greedy", &gr);
    printf("  chosen: %s (groups: 0 embedding, 1-%d layers, %d head)\n",
           gr.step_s < dp.step_s ? "greedy" : "dynamic program", p->nlayers, p->nlayers + 1);
    printf("  %5s %10s  ops\n", "stage", "ms");
    for (int k = 0; k < best.nstages; k++) {
        printf("  %5d %10.3f ", k, 1e3 * best.cost_s[k]);
        print_ops(ops, best.first[k], best.first[k + 1]);
        printf("\n");
    }
    sdp_split_free(&best), sdp_split_free(&dp), sdp_split_free(&gr);
    free(ops);
    return 0;
}

int sdp_cli_roundpipe_configure(const struct sdp_recipe *r, int width)
{
    struct sdp_cli_machine cm;
    struct sdp_cli_run cr;
    struct sdp_split best;
    int ngpus = sdp_cli_run_gpus(r, r->machine), rc, n, *fwd = NULL, *bwd = NULL;
    struct sdp_split_op *ops = NULL;
    sdp_cli_machine_get(r->machine, ngpus, 0, &cm);
    if ((rc = sdp_cli_run_make(r, ngpus, &cr)) != 0)
        return rc;
    struct sdp_split_conf c = { .ranks = width,
                                .n_micro = cr.run.n_micro,
                                .stage_s = cm.mc.task_s };
    n = 2 * cr.plan.ngroups;
    ops = calloc((size_t)n, sizeof(*ops));
    fwd = calloc((size_t)cr.plan.ngroups, sizeof(int));
    bwd = calloc((size_t)cr.plan.ngroups, sizeof(int));
    rc = !ops || !fwd || !bwd ? sdp_err(-ENOMEM, "the stages of %d ops", n) : 0;
    if (!rc)
        n = sdp_predict_split_ops(&cr.plan, cr.run.m, cr.run.micro_batch, cr.run.seq_len,
                                  cr.run.work_dtype, &cm.mc, ops);
    if (!rc && !(rc = sdp_split_best(n, ops, &c, &best, NULL, NULL))) {
        for (int k = 0; k < best.nstages; k++)
            for (int i = best.first[k]; i < best.first[k + 1]; i++)
                (ops[i].bwd ? bwd : fwd)[ops[i].group] = k;
        SDP_INFO("sdp-roundpipe: %d stages over %d rank%s (predicted bottleneck %.3f ms, step "
                 "%.3f ms; `slidedp plan --sched sdp-roundpipe` prints the split)",
                 best.nstages, width, width > 1 ? "s" : "", 1e3 * best.bottleneck_s,
                 1e3 * best.step_s);
        rc = sdp_policy_roundpipe_configure(width, r->in_flight, cr.plan.ngroups, fwd, bwd,
                                            best.nstages);
        sdp_split_free(&best);
    }
    free(ops), free(fwd), free(bwd);
    sdp_cli_run_free(&cr);
    return rc;
}
