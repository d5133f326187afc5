/* SPDX-License-Identifier: MIT */
/* RoundPipe's stage split (graph/split.h): on random cost tables of up to 12 ops, some joined, for
 * 1..4 ranks and 1..6 micro-batches, the dynamic program's step time is the least over every cut
 * (all 2^(n-1) enumerated), bit for bit (a stage is summed in the same order on both sides, so no
 * tolerance is needed), its split is valid, and the greedy split never beats it; on a table whose
 * LM head costs as much as three layers (forward and backward) it beats the greedy split by more
 * than 10%. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/split.h"
#include "tests/lib/sdp_test.h"

#define MAXN 12

static unsigned long long seed = 0x5917;

static unsigned rnd(unsigned n)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(seed >> 33) % n;
}

/* The least step time over every split that honours the joins. */
static double brute(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c)
{
    double best = INFINITY;
    for (unsigned mask = 0; mask < 1u << (n - 1); mask++) {
        int first[MAXN + 1], S = 0, ok = 1;
        first[S++] = 0;
        for (int i = 1; i < n; i++)
            if (mask >> (i - 1) & 1) {
                ok &= !ops[i - 1].join;
                first[S++] = i;
            }
        first[S] = n;
        struct sdp_split s;
        if (!ok || sdp_split_from_cuts(n, ops, c, first, S, &s))
            continue;
        best = fmin(best, s.step_s);
        sdp_split_free(&s);
    }
    return best;
}

/* Stages cover 0..n in order, none empty, none ending on a joined op. */
static int valid(int n, const struct sdp_split_op *ops, const struct sdp_split *s)
{
    int ok = s->nstages >= 1 && s->first[0] == 0 && s->first[s->nstages] == n;
    for (int k = 0; ok && k < s->nstages; k++)
        ok = s->first[k] < s->first[k + 1] && (k == 0 || !ops[s->first[k] - 1].join);
    return ok;
}

static void random_tables(void)
{
    struct sdp_split_op ops[MAXN];
    int cases = 0, wins = 0;
    for (int trial = 0; trial < 600; trial++) {
        int n = 1 + (int)rnd(MAXN);
        struct sdp_split_conf c = { .ranks = 1 + (int)rnd(4),
                                    .n_micro = 1 + (int)rnd(6),
                                    .stage_s = rnd(3) ? 0.0 : rnd(100) / 1000.0 };
        for (int i = 0; i < n; i++)
            ops[i] = (struct sdp_split_op){ .cost_s = rnd(1000) / 100.0,
                                            .group = i,
                                            .join = i < n - 1 && rnd(6) == 0 };
        struct sdp_split best, dp, gr;
        int rc = sdp_split_best(n, ops, &c, &best, &dp, &gr);
        CHECK(rc == 0, "trial %d: rc %d", trial, rc);
        if (rc)
            continue;
        double want = brute(n, ops, &c);
        CHECK(dp.step_s == want, "trial %d (n %d, R %d, M %d): dp %.17g, brute force %.17g", trial,
              n, c.ranks, c.n_micro, dp.step_s, want);
        CHECK(valid(n, ops, &dp) && valid(n, ops, &gr), "trial %d: an invalid split", trial);
        CHECK(dp.step_s <= gr.step_s, "trial %d: greedy %.17g beats dp %.17g", trial, gr.step_s,
              dp.step_s);
        CHECK(best.step_s == dp.step_s, "trial %d: best %.17g, dp %.17g", trial, best.step_s,
              dp.step_s);
        cases++, wins += dp.step_s < gr.step_s;
        sdp_split_free(&best), sdp_split_free(&dp), sdp_split_free(&gr);
    }
    printf("random tables: %d cases, the program strictly better than greedy in %d\n", cases, wins);
    CHECK(wins > 0, "the program never beat greedy on 600 random tables");
}

/* Print a split: each stage's ops (f/b and the group) and cost. */
static void show(const char *name, const struct sdp_split_op *ops, const struct sdp_split *s)
{
    printf("%s: %d stages, bottleneck %.3f, step %.3f\n", name, s->nstages, s->bottleneck_s,
           s->step_s);
    for (int k = 0; k < s->nstages; k++) {
        printf("  %6.3f:", s->cost_s[k]);
        for (int i = s->first[k]; i < s->first[k + 1]; i++)
            printf(" %c%d", ops[i].bwd ? 'b' : 'f', ops[i].group);
        printf("\n");
    }
}

/* L = 12 layers (forward 1, backward 3: the seed's asymmetry), the embedding 0.1 each way, the LM
 * head 12 (4 forward, 8 backward, one task: joined; a small model's large vocabulary), R = 4 GPUs,
 * M = 4 micro-batches.  Greedy's stages of at most total / S (60.2 / S) leave the head's stage
 * with whatever fits beside it, and its best count gives step 117; the optimum (96.8, five stages
 * of at most 12.1: the head alone) is 17% shorter. */
static void head_heavy(void)
{
    enum { L = 12, N = 2 * (L + 2) };
    struct sdp_split_op ops[N];
    int n = 0;
    for (int g = 0; g <= L + 1; g++)
        ops[n++] = (struct sdp_split_op){ .cost_s = g == 0   ? 0.1
                                                    : g <= L ? 1.0
                                                             : 4.0,
                                          .group = g,
                                          .join = g == L + 1 };
    for (int g = L + 1; g >= 0; g--)
        ops[n++] = (struct sdp_split_op){ .cost_s = g == 0   ? 0.1
                                                    : g <= L ? 3.0
                                                             : 8.0,
                                          .group = g,
                                          .bwd = 1 };
    struct sdp_split_conf c = { .ranks = 4, .n_micro = 4 };
    struct sdp_split best, dp, gr;
    int rc = sdp_split_best(n, ops, &c, &best, &dp, &gr);
    CHECK(rc == 0, "head-heavy: rc %d", rc);
    if (rc)
        return;
    show("head-heavy, dynamic program", ops, &dp);
    show("head-heavy, greedy", ops, &gr);
    CHECK(dp.step_s < 0.9 * gr.step_s, "head-heavy: dp %.3f not 10%% under greedy %.3f", dp.step_s,
          gr.step_s);
    CHECK(best.step_s == dp.step_s, "head-heavy: best %.3f, dp %.3f", best.step_s, dp.step_s);
    sdp_split_free(&best), sdp_split_free(&dp), sdp_split_free(&gr);
}

/* Bad tables are refused, nothing allocated. */
static void refusals(void)
{
    struct sdp_split_op ops[2] = { { .cost_s = 1.0 }, { .cost_s = -1.0 } };
    struct sdp_split_conf c = { .ranks = 2, .n_micro = 2 };
    struct sdp_split s = { 0 };
    CHECK(sdp_split_dp(2, ops, &c, &s) == -EINVAL, "a negative cost accepted");
    ops[1].cost_s = NAN;
    CHECK(sdp_split_greedy(2, ops, &c, &s) == -EINVAL, "a NaN cost accepted");
    ops[1].cost_s = 1.0, c.ranks = 0;
    CHECK(sdp_split_best(2, ops, &c, &s, NULL, NULL) == -EINVAL, "0 ranks accepted");
    c.ranks = 1;
    CHECK(sdp_split_dp(0, ops, &c, &s) == -EINVAL, "no op accepted");
}

int main(void)
{
    random_tables();
    head_heavy();
    refusals();
    return sdp_test_finish(sdp_test_nfail);
}
