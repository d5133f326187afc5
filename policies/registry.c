/* SPDX-License-Identifier: MIT */
/* Name -> policy table.  StarPU's stock policies come from starpu_sched_get_predefined_policies();
 * the project's own are the lines of SDP_POLICIES below, the single list of them: `slidedp
 * policies`, --sched and train.sched all read it.  Adding a policy takes its file,
 * policies/<name>.c (listed in policies/local.mk), which defines `struct starpu_sched_policy
 * sdp_policy_<name>` named "sdp-<name>", and one line here. */
#include "config.h"

#include <string.h>

#include <starpu.h>
#include <starpu_scheduler.h>

#include "policies/sdp_policies.h"
#include "base/sdp_log.h"

#define SDP_POLICIES(X) X(slidedp) /* policies/slidedp.c */

#define POLICY_EXTERN(name) extern struct starpu_sched_policy sdp_policy_##name;
#define POLICY_ROW(name)    &sdp_policy_##name,
SDP_POLICIES(POLICY_EXTERN)

/* The project's own policies; NULL-terminated. */
static struct starpu_sched_policy *ours[] = { SDP_POLICIES(POLICY_ROW) NULL };

int sdp_policy_resolve(const char *name, void **policy)
{
    struct starpu_sched_policy **stock = starpu_sched_get_predefined_policies();
    *policy = NULL;
    for (int i = 0; ours[i]; i++)
        if (!strcmp(ours[i]->policy_name, name)) {
            *policy = ours[i];
            return 0;
        }
    for (int i = 0; stock[i]; i++)
        if (!strcmp(stock[i]->policy_name, name))
            return 0;
    sdp_err(-ENOENT, "unknown scheduling policy '%s'", name);
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
