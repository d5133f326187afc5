/* SPDX-License-Identifier: MIT */
/* Name -> policy table.  StarPU's stock policies come from starpu_sched_get_predefined_policies();
 * the project's own are the lines of SDP_POLICIES below, the single list of them: `slidedp
 * policies`, --sched and train.sched all read it.  Adding a policy takes its file,
 * policies/<name>.c (listed in policies/local.mk), which defines `struct starpu_sched_policy
 * sdp_policy_<name>` named "sdp-<name>", and one line here. */
#include "config.h"

#include <ctype.h>
#include <string.h>

#include <starpu.h>
#include <starpu_scheduler.h>

#include "policies/sdp_policies.h"
#include "base/sdp_log.h"

#define SDP_POLICIES(X)                                                                            \
    X(slidedp)   /* policies/slidedp.c */                                                          \
    X(roundpipe) /* policies/roundpipe.c */

#define POLICY_EXTERN(name) extern struct starpu_sched_policy sdp_policy_##name;
#define POLICY_ROW(name)    &sdp_policy_##name,
SDP_POLICIES(POLICY_EXTERN)

/* The project's own policies; NULL-terminated. */
static struct starpu_sched_policy *ours[] = { SDP_POLICIES(POLICY_ROW) NULL };

/* Edit distance of a and b, ignoring case, capped at 9 (names are short). */
static int distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b), row[64];
    if (la > 63 || lb > 63)
        return 9;
    for (int j = 0; j <= lb; j++)
        row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            int up = row[j], best = diag + !same;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb] < 9 ? row[lb] : 9;
}

/* The policy name nearest to a misspelt one (at most 2 edits, case aside), or NULL. */
static const char *nearest(const char *name, struct starpu_sched_policy **stock)
{
    const char *best = NULL;
    int bd = 3;
    for (int k = 0; k < 2; k++)
        for (struct starpu_sched_policy **p = k ? stock : ours; *p; p++) {
            int d = distance(name, (*p)->policy_name);
            if (d < bd) {
                bd = d;
                best = (*p)->policy_name;
            }
        }
    return best;
}

int sdp_policy_resolve(const char *name, void **policy)
{
    struct starpu_sched_policy **stock = starpu_sched_get_predefined_policies();
    const char *near;
    *policy = NULL;
    for (int i = 0; ours[i]; i++)
        if (!strcmp(ours[i]->policy_name, name)) {
            *policy = ours[i];
            return 0;
        }
    for (int i = 0; stock[i]; i++)
        if (!strcmp(stock[i]->policy_name, name))
            return 0;
    errno = 0; /* -ENOENT is not a file's: no errno text after the message */
    sdp_err(-ENOENT, "unknown scheduling policy '%s'", name);
    if ((near = nearest(name, stock)))
        sdp_hint("did you mean '%s'? `slidedp policies` lists them all", near);
    else
        sdp_hint("run `slidedp policies` for the list (e.g. eager, lws, dmda)");
    return -ENOENT;
}

void sdp_policy_list(FILE *f)
{
    struct starpu_sched_policy **stock = starpu_sched_get_predefined_policies();
    for (int i = 0; ours[i]; i++)
        fprintf(f, "%-20s %s\n", ours[i]->policy_name, ours[i]->policy_description);
    for (int i = 0; stock[i]; i++)
        fprintf(f, "%-20s %s (StarPU)\n", stock[i]->policy_name, stock[i]->policy_description);
}
