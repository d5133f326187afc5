/* SPDX-License-Identifier: MIT */
/* The placement chooser (choose.h): a multiple-choice knapsack by dynamic programming.  best[u]
 * after item l is the least time of a choice for items 0..l using exactly u units; a table of the
 * option taken at each (item, units) lets the choice be read back from the best final cell. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/choose.h"

static unsigned long long units_of(unsigned long long bytes, unsigned long long unit)
{
    return bytes / unit + (bytes % unit != 0);
}

/* Each item's smallest option in bytes, summed; -1 when an item has none. */
static int least(int n, int k, const struct sdp_choice *c, unsigned long long *sum)
{
    *sum = 0;
    for (int l = 0; l < n; l++) {
        unsigned long long m = SDP_CHOICE_NO;
        for (int o = 0; o < k; o++)
            m = c[l * k + o].bytes < m ? c[l * k + o].bytes : m;
        if (m == SDP_CHOICE_NO)
            return -1;
        *sum += m;
    }
    return 0;
}

int sdp_choose(int n, int k, const struct sdp_choice *c, unsigned long long budget,
               unsigned long long unit, int *pick, struct sdp_choose_result *res)
{
    memset(res, 0, sizeof(*res));
    if (n < 1 || k < 1 || unit == 0 || least(n, k, c, &res->min_bytes))
        return -EINVAL;
    if (res->min_bytes > budget)
        return -ENOSPC;
    size_t U = (size_t)(budget / unit) + 1; /* cells 0..budget/unit units */
    double *best = malloc(U * sizeof(double)), *next = malloc(U * sizeof(double));
    signed char *took = malloc((size_t)n * U);
    int rc = -ENOMEM;
    if (!best || !next || !took || k > 127)
        goto out;
    for (size_t u = 0; u < U; u++)
        best[u] = u == 0 ? 0 : INFINITY;
    for (int l = 0; l < n; l++) {
        for (size_t u = 0; u < U; u++)
            next[u] = INFINITY, took[(size_t)l * U + u] = -1;
        for (int o = 0; o < k; o++) {
            const struct sdp_choice *x = &c[l * k + o];
            if (x->bytes == SDP_CHOICE_NO)
                continue;
            unsigned long long w = units_of(x->bytes, unit);
            for (size_t u = (size_t)w; w < U && u < U; u++)
                if (best[u - w] + x->time_s < next[u]) {
                    next[u] = best[u - w] + x->time_s;
                    took[(size_t)l * U + u] = (signed char)o;
                }
        }
        double *t = best;
        best = next, next = t;
    }
    size_t at = 0; /* the least time; among equal times, the fewer units */
    for (size_t u = 1; u < U; u++)
        if (best[u] < best[at])
            at = u;
    rc = -ENOSPC; /* rounding to units can leave nothing that fits where the bytes would */
    if (isinf(best[at]))
        goto out;
    for (int l = n - 1; l >= 0; l--) {
        int o = took[(size_t)l * U + at];
        pick[l] = o;
        res->time_s += c[l * k + o].time_s;
        res->bytes += c[l * k + o].bytes;
        at -= (size_t)units_of(c[l * k + o].bytes, unit);
    }
    rc = 0;
out:
    free(best), free(next), free(took);
    return rc;
}

int sdp_choose_keep(const double *chosen_s, int n, const double *base_s, int m)
{
    double c = 0, b = 0;
    if (n <= 0 || m <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        c += chosen_s[i];
    for (int i = 0; i < m; i++)
        b += base_s[i];
    return c / n < b / m;
}
