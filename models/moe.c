/* SPDX-License-Identifier: MIT */
/* Mixture-of-experts fields of a model configuration (Qwen3-MoE): their checks and which decoder
 * layers are sparse, by the rule of transformers' Qwen3MoeDecoderLayer.  Parsing config.json lives
 * in formats/hfconfig_moe.c; the routing and expert kernels in codelets/cpu/moe.c.  Tests:
 * tests/formats/test_hfconfig_moe.c. */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "models/sdp_models.h"

#define MAX_EXPERTS 65536
#define MAX_DIM     (1 << 24)

static int bad(char *why, size_t whylen, const char *key, int v, const char *what)
{
    if (why && whylen > 0)
        snprintf(why, whylen, "\"%s\" = %d %s", key, v, what);
    return -1;
}

int sdp_model_moe_check(const struct sdp_model_cfg *c, char *why, size_t whylen)
{
    if (c->arch != SDP_ARCH_QWEN3) {
        if (why && whylen > 0)
            snprintf(why, whylen,
                     "mixture-of-experts fields on a %s model: only qwen3_moe has them",
                     sdp_model_arch_name(c->arch));
        return -1;
    }
    if (c->num_experts < 0 || c->num_experts > MAX_EXPERTS)
        return bad(why, whylen, "num_experts", c->num_experts, "must be in [0, 65536]");
    if (c->num_experts > 0 &&
        (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts))
        return bad(why, whylen, "num_experts_per_tok", c->num_experts_per_tok,
                   "must be in [1, num_experts]");
    if (c->moe_intermediate_size < 1 || c->moe_intermediate_size > MAX_DIM)
        return bad(why, whylen, "moe_intermediate_size", c->moe_intermediate_size,
                   "must be in [1, 2^24]");
    if (c->decoder_sparse_step < 1) /* transformers would divide by it */
        return bad(why, whylen, "decoder_sparse_step", c->decoder_sparse_step, "must be >= 1");
    if (c->num_mlp_only < 0 || c->num_mlp_only > SDP_MOE_MAX_MLP_ONLY)
        return bad(why, whylen, "mlp_only_layers", c->num_mlp_only,
                   "entries: at most 256 are supported");
    for (int i = 0; i < c->num_mlp_only; i++)
        if (c->mlp_only_layers[i] < 0 || c->mlp_only_layers[i] >= c->num_layers)
            return bad(why, whylen, "mlp_only_layers", c->mlp_only_layers[i],
                       "is not a layer index in [0, num_hidden_layers)");
    if (!(c->router_aux_loss_coef >= 0.0 && isfinite(c->router_aux_loss_coef))) {
        if (why && whylen > 0)
            snprintf(why, whylen, "\"router_aux_loss_coef\" = %g must be finite and >= 0",
                     c->router_aux_loss_coef);
        return -1;
    }
    return 0;
}

int sdp_model_layer_sparse(const struct sdp_model_cfg *cfg, int l)
{
    if (!cfg->moe || cfg->num_experts <= 0 || cfg->decoder_sparse_step < 1 || l < 0 ||
        l >= cfg->num_layers)
        return 0;
    for (int i = 0; i < cfg->num_mlp_only; i++)
        if (cfg->mlp_only_layers[i] == l)
            return 0;
    return (l + 1) % cfg->decoder_sparse_step == 0;
}

int sdp_model_num_sparse_layers(const struct sdp_model_cfg *cfg)
{
    int n = 0;
    for (int l = 0; l < cfg->num_layers; l++)
        n += sdp_model_layer_sparse(cfg, l);
    return n;
}
