/* SPDX-License-Identifier: MIT */
/* The mixture-of-experts keys of a Qwen3-MoE config.json (transformers' Qwen3MoeConfig), read with
 * that class's defaults and written back.  Keys of MoE features the runtime does not run are
 * errors naming the key: shared experts (Qwen2-MoE's shared_expert_intermediate_size, DeepSeek's
 * n_shared_experts), routers other than softmax + greedy top-k (scoring_func, topk_method,
 * grouped top-k, routed scaling, router jitter).  Tests: tests/formats/test_hfconfig_moe.c. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "base/sdp_log.h"
#include "formats/hfconfig_internal.h"
#include "models/sdp_models.h"

static int get_int(const char *path, json_t *root, const char *key, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 1; /* absent: the default stays */
    if (!json_is_integer(v) || json_integer_value(v) < -2147483647 ||
        json_integer_value(v) > 2147483647)
        return sdp_err(-EINVAL, "config %s: \"%s\" must be an integer that fits 32 bits", path,
                       key);
    *out = (int)json_integer_value(v);
    return 0;
}

/* Keys of features that Qwen3-MoE does not have, each with the value that means "off". */
static int check_foreign(const char *path, json_t *root)
{
    static const char *const zero_keys[] = { "shared_expert_intermediate_size",
                                             "n_shared_experts",
                                             "num_shared_experts",
                                             "router_jitter_noise",
                                             "n_group",
                                             "topk_group",
                                             "first_k_dense_replace" };
    static const char *const str_keys[][2] = { { "scoring_func", "softmax" },
                                               { "topk_method", "greedy" } };
    json_t *v;
    for (size_t i = 0; i < sizeof(zero_keys) / sizeof(zero_keys[0]); i++) {
        v = json_object_get(root, zero_keys[i]);
        if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0.0)) {
            int rc = sdp_err(-EINVAL, "config %s: \"%s\" is not supported (only 0 or absent)", path,
                             zero_keys[i]);
            sdp_hint("Qwen3-MoE routes every token to its top-k experts alone: no shared expert, "
                     "no grouped or noisy routing");
            return rc;
        }
    }
    for (size_t i = 0; i < sizeof(str_keys) / sizeof(str_keys[0]); i++) {
        v = json_object_get(root, str_keys[i][0]);
        if (v && !json_is_null(v) &&
            !(json_is_string(v) && !strcmp(json_string_value(v), str_keys[i][1])))
            return sdp_err(-EINVAL, "config %s: \"%s\" is not supported (only \"%s\")", path,
                           str_keys[i][0], str_keys[i][1]);
    }
    v = json_object_get(root, "routed_scaling_factor");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 1.0))
        return sdp_err(-EINVAL, "config %s: \"routed_scaling_factor\" is not supported (only 1)",
                       path);
    return 0;
}

/* num_experts, or num_local_experts as transformers 5 writes it (attribute_map); both: equal. */
static int get_experts(const char *path, json_t *root, int *out)
{
    int a = 0, b = 0, ra, rb;
    if ((ra = get_int(path, root, "num_experts", &a)) < 0 ||
        (rb = get_int(path, root, "num_local_experts", &b)) < 0)
        return ra < 0 ? ra : rb;
    if (ra == 0 && rb == 0 && a != b)
        return sdp_err(-EINVAL,
                       "config %s: \"num_experts\" = %d and \"num_local_experts\" = %d disagree",
                       path, a, b);
    if (ra == 0 || rb == 0)
        *out = ra == 0 ? a : b;
    return 0;
}

static int get_mlp_only(const char *path, json_t *root, struct sdp_model_cfg *c)
{
    json_t *v = json_object_get(root, "mlp_only_layers"), *e;
    size_t i;
    c->num_mlp_only = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return sdp_err(-EINVAL, "config %s: \"mlp_only_layers\" must be a list of layer indices",
                       path);
    if (json_array_size(v) > SDP_MOE_MAX_MLP_ONLY)
        return sdp_err(-EINVAL, "config %s: \"mlp_only_layers\" has %zu entries, more than %d",
                       path, json_array_size(v), SDP_MOE_MAX_MLP_ONLY);
    json_array_foreach (v, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 2147483647)
            return sdp_err(-EINVAL, "config %s: \"mlp_only_layers\"[%zu] must be a layer index",
                           path, i);
        c->mlp_only_layers[c->num_mlp_only++] = (int)json_integer_value(e);
    }
    return 0;
}

int sdp_hfconfig_moe_read(const char *path, json_t *root, struct sdp_model_cfg *c)
{
    json_t *v = json_object_get(root, "router_aux_loss_coef");
    int rc;
    /* Qwen3MoeConfig's defaults */
    c->moe = 1;
    c->num_experts = 128;
    c->num_experts_per_tok = 8;
    c->moe_intermediate_size = 768;
    c->norm_topk_prob = 0;
    c->decoder_sparse_step = 1;
    c->router_aux_loss_coef = 0.001;
    c->output_router_logits = 0;
    if ((rc = check_foreign(path, root)) != 0 || (rc = get_experts(path, root, &c->num_experts)) ||
        (rc = get_int(path, root, "num_experts_per_tok", &c->num_experts_per_tok)) < 0 ||
        (rc = get_int(path, root, "moe_intermediate_size", &c->moe_intermediate_size)) < 0 ||
        (rc = get_int(path, root, "decoder_sparse_step", &c->decoder_sparse_step)) < 0 ||
        (rc = sdp_hfconfig_get_bool(path, root, "norm_topk_prob", &c->norm_topk_prob)) < 0 ||
        (rc = sdp_hfconfig_get_bool(path, root, "output_router_logits", &c->output_router_logits)) <
            0 ||
        (rc = get_mlp_only(path, root, c)) < 0)
        return rc;
    if (v && !json_is_null(v)) {
        if (!json_is_number(v))
            return sdp_err(-EINVAL, "config %s: \"router_aux_loss_coef\" must be a number", path);
        c->router_aux_loss_coef = json_number_value(v);
    }
    return 0;
}

static int set(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

int sdp_hfconfig_moe_write(json_t *root, const struct sdp_model_cfg *c)
{
    json_t *list = json_array();
    int bad = !list;
    for (int i = 0; !bad && i < c->num_mlp_only; i++)
        bad = json_array_append_new(list, json_integer(c->mlp_only_layers[i])) != 0;
    bad = bad || set(root, "decoder_sparse_step", json_integer(c->decoder_sparse_step));
    bad = bad || json_object_set(root, "mlp_only_layers", list) != 0;
    bad = bad || set(root, "moe_intermediate_size", json_integer(c->moe_intermediate_size));
    bad = bad || set(root, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    bad = bad || set(root, "num_experts", json_integer(c->num_experts));
    bad = bad || set(root, "num_experts_per_tok", json_integer(c->num_experts_per_tok));
    bad = bad || set(root, "output_router_logits", json_boolean(c->output_router_logits));
    bad = bad || set(root, "router_aux_loss_coef", json_real(c->router_aux_loss_coef));
    json_decref(list);
    return bad ? -1 : 0;
}
