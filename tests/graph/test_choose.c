/* SPDX-License-Identifier: MIT */
/* The placement chooser (graph/choose.h) against brute force: on random tables of up to 6 items
 * and 5 options whose bytes are whole units, the dynamic programme's time is the least of every
 * choice within the budget and its bytes fit; with bytes off the units it still fits and is
 * within one unit's rounding per item of the optimum's budget; options that do not apply are
 * never taken; a budget below every choice is refused with the least bytes that fit. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph/choose.h"
#include "tests/lib/sdp_test.h"

#define MAXN 6
#define MAXK 5

static unsigned long long seed = 0x5eed;

static unsigned rnd(unsigned n)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(seed >> 33) % n;
}

/* The least time of a choice within budget, by trying all k^n; INFINITY if none fits. */
static double brute(int n, int k, const struct sdp_choice *c, unsigned long long budget)
{
    int idx[MAXN] = { 0 };
    double best = INFINITY;
    for (;;) {
        double t = 0;
        unsigned long long b = 0;
        int ok = 1;
        for (int l = 0; l < n; l++) {
            const struct sdp_choice *x = &c[l * k + idx[l]];
            ok &= x->bytes != SDP_CHOICE_NO;
            t += x->time_s, b += ok ? x->bytes : 0;
        }
        if (ok && b <= budget && t < best)
            best = t;
        int l = 0;
        while (l < n && ++idx[l] == k)
            idx[l++] = 0;
        if (l == n)
            return best;
    }
}

static void random_tables(unsigned long long unit, int exact)
{
    struct sdp_choice c[MAXN * MAXK];
    int pick[MAXN], agree = 0, cases = 0;
    for (int trial = 0; trial < 400; trial++) {
        int n = 1 + (int)rnd(MAXN), k = 1 + (int)rnd(MAXK);
        for (int i = 0; i < n * k; i++) {
            c[i].time_s = rnd(1000) / 100.0 - 2.0; /* some options save time: negative */
            c[i].bytes = rnd(8) == 0 && i % k ? SDP_CHOICE_NO
                                              : rnd(20) * unit + (exact ? 0 : rnd((unsigned)unit));
        }
        unsigned long long budget = (unsigned long long)rnd(20 * (unsigned)n) * unit;
        struct sdp_choose_result res;
        double want = brute(n, k, c, budget);
        int rc = sdp_choose(n, k, c, budget, unit, pick, &res);
        cases++;
        if (rc == -ENOSPC) {
            CHECK(!exact || isinf(want), "trial %d: refused where a choice of %.2f fits", trial,
                  want);
            agree += isinf(want);
            continue;
        }
        CHECK(rc == 0, "trial %d: rc %d", trial, rc);
        double t = 0;
        unsigned long long b = 0;
        for (int l = 0; l < n; l++) {
            CHECK(pick[l] >= 0 && pick[l] < k && c[l * k + pick[l]].bytes != SDP_CHOICE_NO,
                  "trial %d: item %d took option %d", trial, l, pick[l]);
            t += c[l * k + pick[l]].time_s, b += c[l * k + pick[l]].bytes;
        }
        CHECK(b <= budget && b == res.bytes && fabs(t - res.time_s) < 1e-9,
              "trial %d: %llu bytes of %llu, time %.2f (result %.2f)", trial, b, budget, t,
              res.time_s);
        if (exact)
            CHECK(fabs(t - want) < 1e-9, "trial %d: %.2f s against the optimum %.2f", trial, t,
                  want);
        else /* rounding up each option: never better than the optimum */
            CHECK(t >= want - 1e-9, "trial %d: %.2f s beats the optimum %.2f", trial, t, want);
        agree += !exact || fabs(t - want) < 1e-9;
    }
    printf("%s bytes: %d of %d trials agree with brute force\n", exact ? "whole-unit" : "any",
           agree, cases);
}

int main(void)
{
    const unsigned long long MiB = 1ull << 20;
    random_tables(16 * MiB, 1);
    random_tables(16 * MiB, 0);
    /* refused: the least bytes that fit reported */
    struct sdp_choice c[2 * 2] = {
        { 1, 10 * MiB }, { 0, 30 * MiB }, { 1, 20 * MiB }, { 0, 40 * MiB }
    };
    struct sdp_choose_result res;
    int pick[2];
    CHECK(sdp_choose(2, 2, c, 29 * MiB, MiB, pick, &res) == -ENOSPC && res.min_bytes == 30 * MiB,
          "29 MiB: refused, 30 MiB would fit (%llu)", res.min_bytes);
    CHECK(sdp_choose(2, 2, c, 30 * MiB, MiB, pick, &res) == 0 && pick[0] == 0 && pick[1] == 0,
          "30 MiB: the small options");
    CHECK(sdp_choose(2, 2, c, 50 * MiB, MiB, pick, &res) == 0 && res.time_s == 1.0 &&
              res.bytes == 50 * MiB,
          "50 MiB: one of the fast options (%.1f s, %llu bytes)", res.time_s, res.bytes);
    CHECK(sdp_choose(2, 2, c, 70 * MiB, MiB, pick, &res) == 0 && res.time_s == 0.0,
          "70 MiB: both fast options");
    struct sdp_choice none[2] = { { 1, SDP_CHOICE_NO }, { 2, SDP_CHOICE_NO } };
    CHECK(sdp_choose(1, 2, none, 1ull << 40, MiB, pick, &res) == -EINVAL, "no option applies");
    CHECK(sdp_choose(2, 2, c, 70 * MiB, 0, pick, &res) == -EINVAL, "unit 0");
    /* the validation: the chosen plan carries on only when its steps were shorter */
    const double fast[2] = { 0.9, 1.0 }, slow[2] = { 1.1, 1.2 }, same[2] = { 0.95, 0.95 };
    CHECK(sdp_choose_keep(fast, 2, slow, 2), "a faster choice is kept");
    CHECK(!sdp_choose_keep(slow, 2, fast, 2), "a slower choice falls back to the base");
    CHECK(!sdp_choose_keep(fast, 2, same, 2), "a tie keeps the base (means 0.95 and 0.95)");
    CHECK(!sdp_choose_keep(fast, 0, slow, 2), "nothing timed keeps the base");
    return sdp_test_finish(sdp_test_nfail);
}
