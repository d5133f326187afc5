/* SPDX-License-Identifier: MIT */
/* The placement chooser: one option per item (a decoder layer's activation placement: keep,
 * keep-mlp, selective, recompute, offload), each with a time and a GPU byte cost, chosen so that
 * the total time is least and the total bytes fit a budget: a multiple-choice knapsack, solved
 * exactly by dynamic programming over the bytes counted in units (each option's bytes rounded up
 * to a unit, so a choice never exceeds the budget).  Pure C, no StarPU.
 *
 * Use (AutoPolicy's assignment stage, costs from the step-time model or from measurements):
 *     struct sdp_choice cost[L * K];   // cost[l * K + k]: item l, option k; bytes SDP_CHOICE_NO
 *                                      // where the option does not apply
 *     int pick[L];
 *     sdp_choose(L, K, cost, budget, 16ull << 20, pick, &res);
 * Test: tests/graph/test_choose.c (the optimum of small random tables against brute force). */
#ifndef SDP_CHOOSE_H
#define SDP_CHOOSE_H

#define SDP_CHOICE_NO (~0ull) /* bytes of an option that does not apply */

struct sdp_choice {
    double time_s;            /* what the option costs the step (or saves: any sign) */
    unsigned long long bytes; /* GPU bytes it keeps; SDP_CHOICE_NO: not an option */
};

struct sdp_choose_result {
    double time_s;                /* the chosen options' total time */
    unsigned long long bytes;     /* their total bytes (exact, not rounded) */
    unsigned long long min_bytes; /* the least any choice needs (each item's smallest option) */
};

/** Choose pick[l] in 0..nopts-1 for each of nitems items, the least total time with the total
 * bytes (each rounded up to `unit`) within budget; ties go to the fewer bytes, then the lower
 * option.  @return 0; -ENOSPC when no choice fits (res->min_bytes says what would: logged by the
 * caller, who knows the budget's name); -EINVAL (no item, no option, unit 0, an item without an
 * option that applies); -ENOMEM */
int sdp_choose(int nitems, int nopts, const struct sdp_choice *cost, unsigned long long budget,
               unsigned long long unit, int *pick, struct sdp_choose_result *res);

/** AutoPolicy's validation: whether the chosen plan carries the run on, from the steps timed on
 * it (chosen_s[0..n)) and on the base plan (base_s[0..m)): only when its mean step is shorter
 * (a tie, or no step timed, keeps the base: a choice must earn its change). */
int sdp_choose_keep(const double *chosen_s, int n, const double *base_s, int m);

#endif
