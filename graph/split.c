/* SPDX-License-Identifier: MIT */
/* RoundPipe's stage split (split.h).  The dynamic program: best[s][j] is the least bottleneck of
 * the first j ops cut into s stages, from best[s - 1][i] and the stage i .. j - 1; a stage's cost
 * is summed from its last op down (the same order sdp_split_from_cuts sums in, so the chosen
 * split's reported bottleneck is the one the program compared). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "base/sdp_log.h"
#include "graph/split.h"

double sdp_split_step_s(const struct sdp_split_conf *c, int nstages, double bottleneck_s)
{
    int m = c->n_micro < c->ranks ? c->n_micro : c->ranks;
    int waves = (c->n_micro + c->ranks - 1) / c->ranks;
    return (double)waves * (nstages + m - 1) * bottleneck_s;
}

static int check(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c)
{
    if (n < 1 || c->ranks < 1 || c->n_micro < 1 || !(c->stage_s >= 0) || !isfinite(c->stage_s))
        return sdp_err(-EINVAL, "split: %d ops, %d ranks, %d micro-batches, stage cost %g s", n,
                       c->ranks, c->n_micro, c->stage_s);
    for (int i = 0; i < n; i++)
        if (!(ops[i].cost_s >= 0) || !isfinite(ops[i].cost_s))
            return sdp_err(-EINVAL, "split: op %d (group %d, %s) costs %g s", i, ops[i].group,
                           ops[i].bwd ? "backward" : "forward", ops[i].cost_s);
    return 0;
}

/* Whether a stage may end after op i - 1 (i = n: the last always does). */
static int cut_ok(int n, const struct sdp_split_op *ops, int i)
{
    return i == n || (i > 0 && !ops[i - 1].join);
}

int sdp_split_from_cuts(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c,
                        const int *first, int nstages, struct sdp_split *out)
{
    out->nstages = nstages, out->bottleneck_s = 0;
    out->first = malloc((size_t)(nstages + 1) * sizeof(*out->first));
    out->cost_s = malloc((size_t)nstages * sizeof(*out->cost_s));
    if (!out->first || !out->cost_s) {
        sdp_split_free(out);
        return sdp_err(-ENOMEM, "split of %d stages", nstages);
    }
    for (int s = 0; s <= nstages; s++)
        out->first[s] = first[s];
    for (int s = 0; s < nstages; s++) {
        double sum = 0;
        for (int i = first[s + 1] - 1; i >= first[s]; i--)
            sum += ops[i].cost_s;
        out->cost_s[s] = sum + c->stage_s;
        out->bottleneck_s = fmax(out->bottleneck_s, out->cost_s[s]);
    }
    out->step_s = sdp_split_step_s(c, nstages, out->bottleneck_s);
    (void)n;
    return 0;
}

/* One row of the program: best[s][j] for every j from row s - 1 (prev), arg[j] the start of the
 * last stage. */
static void dp_row(int n, const struct sdp_split_op *ops, double stage_s, int s, const double *prev,
                   double *row, int *arg)
{
    for (int j = 0; j <= n; j++) {
        row[j] = INFINITY, arg[j] = -1;
        if (j < s || !cut_ok(n, ops, j))
            continue;
        double sum = 0;
        for (int i = j - 1; i >= s - 1; i--) {
            sum += ops[i].cost_s;
            if (!(i == 0 ? s == 1 : s > 1 && cut_ok(n, ops, i)))
                continue;
            double b = fmax(s == 1 ? 0.0 : prev[i], sum + stage_s);
            if (b < row[j])
                row[j] = b, arg[j] = i;
        }
    }
}

int sdp_split_dp(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c,
                 struct sdp_split *out)
{
    int rc = check(n, ops, c);
    if (rc)
        return rc;
    size_t w = (size_t)n + 1;
    double *best = malloc(w * w * sizeof(*best));
    int *arg = malloc(w * w * sizeof(*arg)), *first = malloc(w * sizeof(*first));
    if (!best || !arg || !first) {
        rc = sdp_err(-ENOMEM, "split of %d ops", n);
        goto out;
    }
    int S = 0;
    double step = INFINITY;
    for (int s = 1; s <= n; s++) {
        dp_row(n, ops, c->stage_s, s, best + (s - 1) * w, best + s * w, arg + s * w);
        double t = sdp_split_step_s(c, s, best[s * w + n]);
        if (t < step)
            step = t, S = s;
    }
    first[S] = n;
    for (int s = S; s >= 1; s--)
        first[s - 1] = arg[(size_t)s * w + first[s]];
    rc = sdp_split_from_cuts(n, ops, c, first, S, out);
out:
    free(best), free(arg), free(first);
    return rc;
}

/* Pack the ops into stages of at most cap (a stage takes its first op whatever it costs, and the
 * op after a joined one); first[] receives the starts.  @return the stage count */
static int pack(int n, const struct sdp_split_op *ops, double cap, int *first)
{
    int S = 0;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        int open = i > 0 && (ops[i - 1].join || sum + ops[i].cost_s <= cap);
        if (!open)
            first[S++] = i, sum = 0;
        sum += ops[i].cost_s;
    }
    first[S] = n;
    return S;
}

int sdp_split_greedy(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c,
                     struct sdp_split *out)
{
    int rc = check(n, ops, c);
    if (rc)
        return rc;
    int *first = malloc((size_t)(n + 1) * sizeof(*first));
    if (!first)
        return sdp_err(-ENOMEM, "split of %d ops", n);
    double total = 0;
    for (int i = 0; i < n; i++)
        total += ops[i].cost_s;
    out->first = NULL, out->cost_s = NULL, out->step_s = INFINITY;
    for (int target = 1; target <= n && !rc; target++) {
        struct sdp_split cand;
        int S = pack(n, ops, total / target, first);
        if ((rc = sdp_split_from_cuts(n, ops, c, first, S, &cand)))
            break;
        if (cand.step_s < out->step_s)
            sdp_split_free(out), *out = cand;
        else
            sdp_split_free(&cand);
    }
    free(first);
    if (rc)
        sdp_split_free(out);
    return rc;
}

int sdp_split_best(int n, const struct sdp_split_op *ops, const struct sdp_split_conf *c,
                   struct sdp_split *best, struct sdp_split *dp, struct sdp_split *greedy)
{
    struct sdp_split d, g;
    int rc = sdp_split_dp(n, ops, c, &d);
    if (rc)
        return rc;
    if ((rc = sdp_split_greedy(n, ops, c, &g))) {
        sdp_split_free(&d);
        return rc;
    }
    const struct sdp_split *win = g.step_s < d.step_s ? &g : &d;
    rc = sdp_split_from_cuts(n, ops, c, win->first, win->nstages, best);
    if (dp && !rc)
        *dp = d;
    else
        sdp_split_free(&d);
    if (greedy && !rc)
        *greedy = g;
    else
        sdp_split_free(&g);
    return rc;
}

void sdp_split_free(struct sdp_split *s)
{
    free(s->first), free(s->cost_s);
    s->first = NULL, s->cost_s = NULL, s->nstages = 0;
}
