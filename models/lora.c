/* SPDX-License-Identifier: MIT */
/* LoRA's definitions (sdp_lora.h): target names, shapes, scaling and checks. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "models/sdp_lora.h"

/* the MLP's linears, which a sparse layer has not */
#define MLP_TARGETS                                                                                \
    (SDP_LORA_BIT(SDP_PT_GATE) | SDP_LORA_BIT(SDP_PT_UP) | SDP_LORA_BIT(SDP_PT_DOWN))

const enum sdp_ptensor sdp_lora_kinds[SDP_LORA_NTARGETS] = { SDP_PT_Q,   SDP_PT_K,    SDP_PT_V,
                                                             SDP_PT_O,   SDP_PT_GATE, SDP_PT_UP,
                                                             SDP_PT_DOWN };
static const char *const target_names[SDP_LORA_NTARGETS] = { "q_proj",   "k_proj",    "v_proj",
                                                             "o_proj",   "gate_proj", "up_proj",
                                                             "down_proj" };

const char *sdp_lora_target_name(enum sdp_ptensor k)
{
    for (int i = 0; i < SDP_LORA_NTARGETS; i++)
        if (sdp_lora_kinds[i] == k)
            return target_names[i];
    return NULL;
}

int sdp_lora_target_parse(const char *name, enum sdp_ptensor *k)
{
    for (int i = 0; i < SDP_LORA_NTARGETS; i++)
        if (!strcmp(name, target_names[i])) {
            *k = sdp_lora_kinds[i];
            return 0;
        }
    return -1;
}

void sdp_lora_dims(const struct sdp_model_cfg *m, enum sdp_ptensor k, int *in, int *out)
{
    int C = m->hidden_size, I = m->intermediate_size, HD = m->head_dim;
    switch (k) {
    case SDP_PT_Q:
        *in = C, *out = m->num_heads * HD;
        break;
    case SDP_PT_K:
    case SDP_PT_V:
        *in = C, *out = m->num_kv_heads * HD;
        break;
    case SDP_PT_O:
        *in = m->num_heads * HD, *out = C;
        break;
    case SDP_PT_GATE:
    case SDP_PT_UP:
        *in = C, *out = I;
        break;
    case SDP_PT_DOWN:
        *in = I, *out = C;
        break;
    default:
        *in = *out = 0;
        break;
    }
}

int sdp_lora_layer_on(const struct sdp_lora_cfg *c, int gi)
{
    if (c->rank < 1 || gi < 1)
        return 0;
    return c->first == 0 || (gi >= c->first && gi <= c->last);
}

unsigned sdp_lora_layer_targets(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m, int gi)
{
    if (!sdp_lora_layer_on(c, gi) || gi > m->num_layers)
        return 0;
    return sdp_model_layer_sparse(m, gi - 1) ? c->targets & ~MLP_TARGETS : c->targets;
}

double sdp_lora_scale(const struct sdp_lora_cfg *c)
{
    return c->rank > 0 ? c->alpha / c->rank : 0.0;
}

int sdp_lora_validate(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m, char *why,
                      size_t whylen)
{
    if (c->rank < 1)
        return snprintf(why, whylen, "lora.rank = %d: must be at least 1", c->rank), -1;
    if (!(c->alpha > 0))
        return snprintf(why, whylen, "lora.alpha = %g: must be above 0", c->alpha), -1;
    if (!(c->dropout >= 0 && c->dropout < 1))
        return snprintf(why, whylen, "lora.dropout = %g: must be in [0, 1)", c->dropout), -1;
    if (!c->targets)
        return snprintf(why, whylen, "lora.targets: no linear to adapt"), -1;
    if (c->first != 0 && (c->first < 1 || c->last > m->num_layers || c->first > c->last))
        return snprintf(why, whylen, "lora.layers %d-%d: outside the model's layers 1-%d", c->first,
                        c->last, m->num_layers),
               -1;
    for (int g = 1; g <= m->num_layers; g++)
        if (sdp_lora_layer_on(c, g) && sdp_model_layer_sparse(m, g - 1) &&
            (c->targets & MLP_TARGETS))
            return snprintf(why, whylen,
                            "lora.targets: gate_proj, up_proj and down_proj of layer %d, a sparse "
                            "(MoE) layer, are its stacked experts, which take no adapter here "
                            "(PEFT adapts them as target_parameters); name q_proj, k_proj, v_proj "
                            "and o_proj, or set lora.layers to dense layers",
                            g),
                   -1;
    for (int i = 0; i < SDP_LORA_NTARGETS; i++) {
        int in, out, lim;
        if (!(c->targets & SDP_LORA_BIT(sdp_lora_kinds[i])))
            continue;
        sdp_lora_dims(m, sdp_lora_kinds[i], &in, &out);
        lim = in < out ? in : out;
        if (c->rank > lim)
            return snprintf(why, whylen, "lora.rank = %d is above %s's size (%d x %d: at most %d)",
                            c->rank, target_names[i], out, in, lim),
                   -1;
    }
    return 0;
}

double sdp_lora_train_flops_per_token(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m,
                                      int T)
{
    double adapters = (double)sdp_lora_elems(c, m);
    return 4.0 * (double)sdp_model_matmul_params(m) +
           6.0 * (double)m->num_layers * m->num_heads * m->head_dim * (double)T + 6.0 * adapters;
}

size_t sdp_lora_layer_elems(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m, int gi)
{
    const unsigned targets = sdp_lora_layer_targets(c, m, gi);
    size_t n = 0;
    for (int i = 0; i < SDP_LORA_NTARGETS; i++) {
        int in, out;
        if (!(targets & SDP_LORA_BIT(sdp_lora_kinds[i])))
            continue;
        sdp_lora_dims(m, sdp_lora_kinds[i], &in, &out);
        n += (size_t)c->rank * ((size_t)in + (size_t)out);
    }
    return n;
}

size_t sdp_lora_elems(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m)
{
    size_t n = 0;
    for (int g = 1; g <= m->num_layers; g++)
        n += sdp_lora_layer_elems(c, m, g);
    return n;
}
