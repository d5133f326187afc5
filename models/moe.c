/* SPDX-License-Identifier: MIT */
/* Mixture-of-experts fields of a model configuration (Qwen3-MoE): their checks and which decoder
 * layers are sparse, by the rule of transformers' Qwen3MoeDecoderLayer.  Parsing config.json lives
 * in formats/hfconfig_moe.c; the routing and expert kernels in codelets/cpu/moe.c.  Tests:
 * tests/formats/test_hfconfig_moe.c. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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

size_t sdp_model_group_expert_elems(const struct sdp_model_cfg *cfg, int g)
{
    if (!sdp_model_layer_sparse(cfg, g - 1))
        return 0;
    return (size_t)cfg->num_experts * 3 * cfg->moe_intermediate_size * cfg->hidden_size;
}

double sdp_model_moe_routed_share(const struct sdp_model_cfg *cfg, double tokens)
{
    const struct sdp_moe_profile *r = cfg->routing;
    double idle = 0.0;
    if (!cfg->moe || cfg->num_experts <= 0 || tokens <= 0)
        return 0.0;
    if (!r || r->steps <= 0 || r->tokens <= 0 || r->nlayers <= 0 || r->experts <= 0)
        return 1.0 - pow(1.0 - (double)cfg->num_experts_per_tok / cfg->num_experts, tokens);
    for (int i = 0; i < r->nlayers * r->experts; i++)
        idle += pow(1.0 - (double)r->hits[i] / r->steps, tokens / r->tokens);
    return 1.0 - idle / (r->nlayers * r->experts);
}

/* Qwen3-30B-A3B's config.json (Qwen/Qwen3-30B-A3B): 48 layers, every one sparse, 128 experts of
 * which 8 per token, renormalised.  The reduced-depth variant keeps its first 12 layers: full
 * fine-tuning holds 14 bytes a parameter on the host (fp32 master, Adam m and v, the bf16 working
 * copy; the bf16 gradient return leaves the fp32 gradient no host pages), and 12 layers of 623 M
 * parameters plus the untied 311 M embedding and LM head make 8.10 G parameters, 106 GiB, which
 * leaves 19 GiB of a 125 GiB host to the activations, StarPU's buffers and the system; 13 layers
 * (115 GiB) would leave 10. */
int sdp_model_moe_preset(const char *name, struct sdp_model_cfg *cfg)
{
    int L;
    if (!strcmp(name, "qwen3-30b-a3b"))
        L = 48;
    else if (!strcmp(name, "qwen3-30b-a3b-l12"))
        L = 12;
    else
        return -ENOENT;
    struct sdp_model_cfg c;
    sdp_model_qwen3_shape(&c, 2048, 6144, L, 32, 4, 0);
    c.moe = 1;
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 768;
    c.norm_topk_prob = 1;
    c.decoder_sparse_step = 1;
    c.router_aux_loss_coef = 0.001;
    *cfg = c;
    return 0;
}

int sdp_model_expert_slices(const struct sdp_model_cfg *cfg, const struct sdp_param_desc *d, int e,
                            struct sdp_param_desc *out)
{
    const int C = cfg->hidden_size, IM = cfg->moe_intermediate_size;
    static const char *const part[] = { "gate_proj", "up_proj", "down_proj" };
    int n = d->kind == SDP_PT_EXP_GU ? 2 : d->kind == SDP_PT_EXP_DOWN ? 1 : 0;
    for (int i = 0; i < n; i++) {
        struct sdp_param_desc *s = &out[i];
        *s = *d;
        s->rows = n == 2 ? IM : C;
        s->cols = n == 2 ? C : IM;
        s->offset = d->offset + (size_t)e * (size_t)C * IM * n + (size_t)i * IM * C;
        snprintf(s->hf_name, sizeof(s->hf_name), "model.layers.%d.mlp.experts.%d.%s.weight",
                 d->layer, e, part[n == 2 ? i : 2]);
    }
    return n;
}
