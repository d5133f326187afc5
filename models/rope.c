/* SPDX-License-Identifier: MIT */
/* RoPE scaling of a model configuration: the names of Hugging Face's rope_type values, their
 * checks, and the longest sequence a configuration admits.  The frequencies themselves are the
 * RoPE kernels' (codelets/cpu/rope_freq.c).  Tests: tests/models/test_model_layout.c,
 * tests/formats/test_hfconfig.c. */
#include "config.h"

#include <limits.h>
#include <stdio.h>

#include "models/sdp_models.h"

const char *sdp_model_rope_name(int rope_type)
{
    static const char *const names[SDP_ROPE_NTYPES] = { "llama3", "yarn", "linear", "dynamic" };
    return rope_type >= 0 && rope_type < SDP_ROPE_NTYPES ? names[rope_type] : NULL;
}

int sdp_model_max_seq(const struct sdp_model_cfg *cfg)
{
    return cfg->rope_scaling_factor != 0.0 ? INT_MAX : cfg->max_position_embeddings;
}

/* Llama-3's band limits and original length. */
static int check_llama3(const struct sdp_model_cfg *cfg, char *why, size_t whylen)
{
    if (!(cfg->rope_low_freq_factor > 0.0) ||
        !(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor)) {
        snprintf(why, whylen, "rope_scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g)",
                 cfg->rope_low_freq_factor, cfg->rope_high_freq_factor);
        return -1;
    }
    if (cfg->rope_original_max_pos <= 0) {
        snprintf(why, whylen, "rope_scaling original_max_position_embeddings = %d must be positive",
                 cfg->rope_original_max_pos);
        return -1;
    }
    return 0;
}

/* YaRN's optional values: 0 stands for absent, anything else must be usable. */
static int check_yarn(const struct sdp_model_cfg *cfg, char *why, size_t whylen)
{
    const double bf = cfg->rope_beta_fast != 0.0 ? cfg->rope_beta_fast : 32.0;
    const double bs = cfg->rope_beta_slow != 0.0 ? cfg->rope_beta_slow : 1.0;
    if (cfg->rope_original_max_pos < 0 || !(bf > 0.0) || !(bs > 0.0) ||
        !(cfg->rope_attention_factor >= 0.0) || !(cfg->rope_mscale >= 0.0) ||
        !(cfg->rope_mscale_all_dim >= 0.0)) {
        snprintf(why, whylen,
                 "rope_scaling (yarn): original_max_position_embeddings %d, beta_fast %g, "
                 "beta_slow %g, attention_factor %g, mscale %g and mscale_all_dim %g must not "
                 "be negative (0: absent)",
                 cfg->rope_original_max_pos, cfg->rope_beta_fast, cfg->rope_beta_slow,
                 cfg->rope_attention_factor, cfg->rope_mscale, cfg->rope_mscale_all_dim);
        return -1;
    }
    return 0;
}

/* Called by sdp_model_validate; why is non-NULL. */
int sdp_model_rope_check(const struct sdp_model_cfg *cfg, char *why, size_t whylen)
{
    if (cfg->rope_scaling_factor == 0.0)
        return 0;
    if (!sdp_model_rope_name(cfg->rope_type)) {
        snprintf(why, whylen, "rope_type %d is not a known kind", cfg->rope_type);
        return -1;
    }
    if (!(cfg->rope_scaling_factor > 0.0)) {
        snprintf(why, whylen, "rope_scaling factor = %g must be positive",
                 cfg->rope_scaling_factor);
        return -1;
    }
    if (cfg->rope_type == SDP_ROPE_LLAMA3)
        return check_llama3(cfg, why, whylen);
    if (cfg->rope_type == SDP_ROPE_YARN)
        return check_yarn(cfg, why, whylen);
    return 0;
}
