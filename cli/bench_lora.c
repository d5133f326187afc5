/* SPDX-License-Identifier: MIT */
/* `slidedp bench --lora-rank R [--lora-alpha A] [--lora-targets ...]`: the adapters a bench run
 * trains on its frozen base, read from the options (cli/cli.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/recipe.h"
#include "models/sdp_lora.h"

int sdp_cli_bench_lora_options(const struct sdp_recipe *r, struct sdp_lora_cfg *lora)
{
    const char *p = r->bench_lora_targets;
    *lora = r->lora;
    if (lora->rank == 0) {
        if (lora->alpha > 0 || p) {
            sdp_err(-EINVAL, "--%s without --lora-rank", p ? "lora-targets" : "lora-alpha");
            return SDP_EXIT_USAGE;
        }
        return 0;
    }
    lora->alpha = lora->alpha > 0 ? lora->alpha : 8.0;
    lora->targets = 0;
    if (!p || !strcmp(p, "all-linear")) {
        for (int i = 0; i < SDP_LORA_NTARGETS; i++)
            lora->targets |= SDP_LORA_BIT(sdp_lora_kinds[i]);
        return 0;
    }
    for (;;) {
        size_t n = strcspn(p, ",");
        char name[32];
        enum sdp_ptensor k = SDP_PT_Q;
        snprintf(name, sizeof(name), "%.*s", (int)(n < sizeof(name) ? n : sizeof(name) - 1), p);
        int known = n > 0 && n < sizeof(name) && !sdp_lora_target_parse(name, &k);
        if (!known || (lora->targets & SDP_LORA_BIT(k))) {
            sdp_err(-EINVAL, "--lora-targets %s: '%.*s' %s", r->bench_lora_targets, (int)n, p,
                    known ? "is named twice" : "names no linear of a layer");
            sdp_hint("all-linear, or a comma-separated list of q_proj, k_proj, v_proj, o_proj, "
                     "gate_proj, up_proj, down_proj");
            return SDP_EXIT_USAGE;
        }
        lora->targets |= SDP_LORA_BIT(k);
        if (!p[n])
            break;
        p += n + 1;
    }
    return 0;
}
