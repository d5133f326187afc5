/* SPDX-License-Identifier: MIT */
/* adapter_config.json (peftconfig.h) with jansson. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "formats/peftconfig.h"

static int bad(const char *path, const char *field, const char *what)
{
    return sdp_err(-EINVAL, "adapter config %s: %s: %s", path, field, what);
}

/* a field that must be absent, null, false, empty or equal to `ok` (a string) */
static int unset(json_t *root, const char *key, const char *ok)
{
    json_t *v = json_object_get(root, key);
    return !v || json_is_null(v) || json_is_false(v) ||
           (json_is_object(v) && json_object_size(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0) ||
           (ok && json_is_string(v) && !strcmp(json_string_value(v), ok));
}

static int targets(const char *path, json_t *v, struct sdp_lora_cfg *c)
{
    enum sdp_ptensor k;
    size_t i;
    json_t *e;
    c->targets = 0;
    if (json_is_string(v) && !strcmp(json_string_value(v), "all-linear")) {
        for (int t = 0; t < SDP_LORA_NTARGETS; t++)
            c->targets |= SDP_LORA_BIT(sdp_lora_kinds[t]);
        return 0;
    }
    if (!json_is_array(v))
        return bad(path, "target_modules",
                   "a list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or "
                   "\"all-linear\" (a regular expression is not supported)");
    json_array_foreach (v, i, e) {
        if (!json_is_string(e) || sdp_lora_target_parse(json_string_value(e), &k)) {
            sdp_err(-EINVAL, "adapter config %s: target_modules: '%s' names no linear of a layer",
                    path, json_is_string(e) ? json_string_value(e) : "(not a string)");
            sdp_hint("the targets are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and "
                     "down_proj");
            return -EINVAL;
        }
        c->targets |= SDP_LORA_BIT(k);
    }
    return c->targets ? 0 : bad(path, "target_modules", "empty");
}

/* layers_to_transform: null, an index, or a list of indices making one range */
static int layers(const char *path, json_t *v, const struct sdp_model_cfg *m,
                  struct sdp_lora_cfg *c)
{
    long long lo = -1, hi = -1, n = 0;
    size_t i;
    json_t *e;
    c->first = c->last = 0;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v))
        lo = hi = json_integer_value(v), n = 1;
    else if (json_is_array(v))
        json_array_foreach (v, i, e) {
            long long x = json_is_integer(e) ? json_integer_value(e) : -1;
            if (x < 0)
                return bad(path, "layers_to_transform", "indices are integers from 0");
            lo = lo < 0 || x < lo ? x : lo;
            hi = x > hi ? x : hi;
            n++;
        }
    if (n == 0 || lo < 0)
        return bad(path, "layers_to_transform", "null, an index or a list of indices");
    if (hi - lo + 1 != n)
        return bad(path, "layers_to_transform", "only one contiguous range of layers is supported");
    if (hi >= m->num_layers)
        return bad(path, "layers_to_transform", "an index beyond the model's layers");
    c->first = (int)lo + 1;
    c->last = (int)hi + 1;
    return 0;
}

static int parse(const char *path, json_t *root, const struct sdp_model_cfg *m,
                 struct sdp_lora_cfg *c)
{
    /* PEFT's variants and extras this runtime does not implement: each must be unset */
    static const char *const off[] = {
        "use_rslora",      "use_dora",          "fan_in_fan_out",          "modules_to_save",
        "rank_pattern",    "alpha_pattern",     "layers_pattern",          "lora_bias",
        "exclude_modules", "layer_replication", "trainable_token_indices", "target_parameters",
        "use_qalora",      "use_bdlora",        "alora_invocation_tokens"
    };
    json_t *r = json_object_get(root, "r"), *a = json_object_get(root, "lora_alpha");
    json_t *d = json_object_get(root, "lora_dropout"), *t = json_object_get(root, "target_modules");
    char why[256];
    int rc;
    if (!unset(root, "peft_type", "LORA") || !json_object_get(root, "peft_type"))
        return bad(path, "peft_type", "only LORA adapters are supported");
    for (size_t i = 0; i < sizeof(off) / sizeof(off[0]); i++)
        if (!unset(root, off[i], NULL))
            return bad(path, off[i], "set, which is not supported (false, null or empty only)");
    if (!unset(root, "bias", "none"))
        return bad(path, "bias", "only \"none\" is supported");
    if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 65536)
        return bad(path, "r", "an integer in 1..65536");
    if (!json_is_number(a) || !(json_number_value(a) > 0))
        return bad(path, "lora_alpha", "a number above 0");
    if (d && !json_is_null(d) && !json_is_number(d))
        return bad(path, "lora_dropout", "a number");
    c->rank = (int)json_integer_value(r);
    c->alpha = json_number_value(a);
    c->dropout = d && json_is_number(d) ? json_number_value(d) : 0;
    if ((rc = targets(path, t, c)) ||
        (rc = layers(path, json_object_get(root, "layers_to_transform"), m, c)))
        return rc;
    if (sdp_lora_validate(c, m, why, sizeof(why)))
        return sdp_err(-EINVAL, "adapter config %s: for this model, %s", path, why);
    return 0;
}

int sdp_peftconfig_load(const char *path, const struct sdp_model_cfg *m, struct sdp_lora_cfg *c)
{
    json_error_t jerr;
    json_t *root;
    int rc;
    FILE *f = fopen(path, "rb");
    if (!f)
        return sdp_err(-ENOENT, "adapter config %s: cannot open", path);
    root = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!root)
        return sdp_err(-EINVAL, "adapter config %s: not valid JSON (line %d: %s)", path, jerr.line,
                       jerr.text);
    memset(c, 0, sizeof(*c));
    rc = json_is_object(root) ? parse(path, root, m, c) : bad(path, "(top)", "not an object");
    json_decref(root);
    return rc;
}

int sdp_peftconfig_write(const char *path, const struct sdp_lora_cfg *c, const char *base)
{
    json_t *root = json_object(), *tm = json_array(), *layers = json_null();
    char *text = NULL;
    int rc = -ENOMEM, bad_ = !root || !tm;
    for (int i = 0; !bad_ && i < SDP_LORA_NTARGETS; i++)
        if (c->targets & SDP_LORA_BIT(sdp_lora_kinds[i]))
            bad_ = json_array_append_new(tm, json_string(sdp_lora_target_name(sdp_lora_kinds[i])));
    if (!bad_ && c->first > 0) {
        json_decref(layers);
        layers = json_array();
        for (int l = c->first; layers && l <= c->last; l++)
            json_array_append_new(layers, json_integer(l - 1));
    }
    bad_ = bad_ || !layers ||
           json_object_set_new(root, "lora_alpha",
                               c->alpha == floor(c->alpha) && c->alpha < 1e9
                                   ? json_integer((json_int_t)c->alpha)
                                   : json_real(c->alpha)) ||
           json_object_set_new(root, "base_model_name_or_path",
                               base ? json_string(base) : json_null()) ||
           json_object_set_new(root, "bias", json_string("none")) ||
           json_object_set_new(root, "fan_in_fan_out", json_false()) ||
           json_object_set_new(root, "inference_mode", json_true()) ||
           json_object_set_new(root, "init_lora_weights", json_true()) ||
           json_object_set_new(root, "layers_to_transform", layers) ||
           json_object_set_new(root, "lora_dropout", json_real(c->dropout)) ||
           json_object_set_new(root, "modules_to_save", json_null()) ||
           json_object_set_new(root, "peft_type", json_string("LORA")) ||
           json_object_set_new(root, "r", json_integer(c->rank)) ||
           json_object_set_new(root, "target_modules", tm) ||
           json_object_set_new(root, "task_type", json_string("CAUSAL_LM")) ||
           json_object_set_new(root, "use_dora", json_false()) ||
           json_object_set_new(root, "use_rslora", json_false());
    if (!bad_)
        text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (!text)
        return sdp_err(-ENOMEM, "adapter config %s: building the JSON", path);
    rc = sdp_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}
