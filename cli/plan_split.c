/* SPDX-License-Identifier: MIT */
/* `slidedp plan --sched sdp-roundpipe`: RoundPipe's stage split of the recipe's step
 * (graph/split.h) on the step-time model's per-op costs (graph/predict_ops.h) for the plan's ranks
 * and micro-batches, a stage costing the machine's task overhead besides its ops; the dynamic
 * program's and the greedy split's step, and the chosen split stage by stage.  Only the split: the
 * policy that would run it is not built yet.  Test: tests/e2e/test_e2e_plan_split.sh. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/sdp_log.h"
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

int sdp_cli_plan_split(const struct sdp_cli_run *cr, const struct sdp_cli_machine *cm)
{
    const struct sdp_plan *p = &cr->plan;
    int n = 2 * p->ngroups, rc;
    struct sdp_split_op *ops = calloc((size_t)n, sizeof(*ops));
    struct sdp_split best, dp, gr;
    struct sdp_split_conf c = { .ranks = p->nranks,
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
    printf("\nRoundPipe stage split (sdp-roundpipe: the split only, the policy is not built yet): "
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
