/* SPDX-License-Identifier: MIT */
/* `slidedp policies`: the names --sched and recipes' train.sched accept. */
#include "config.h"

#include <stdio.h>

#include "policies/sdp_policies.h"
#include "cli/cli.h"

int sdp_cli_policies(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: slidedp policies\n");
        return SDP_EXIT_USAGE;
    }
    sdp_policy_list(stdout);
    return SDP_EXIT_OK;
}
