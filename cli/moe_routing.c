/* SPDX-License-Identifier: MIT */
/* A Qwen3-MoE run's measured routing (models/sdp_models.h, struct sdp_moe_profile): `slidedp
 * train` writes RUN/moe-routing.json when it ends or stops, from the state's per-expert step
 * counts (the steps in which each expert received a token, which AdamW counts and checkpoints
 * keep); `slidedp plan --moe-routing FILE` reads it back, so that routed streaming's bytes are
 * priced from the run's router instead of an even one (docs/moe.md). */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/train_internal.h"

#define FORMAT "slidedp-moe-routing"

int sdp_train_moe_routing_save(const struct sdp_train *t, int steps)
{
    const struct sdp_recipe *r = t->r;
    const struct sdp_model_cfg *m = &r->model;
    char path[SDP_PATH_MAX + 32], *s = NULL;
    json_t *layers = json_array(), *o = NULL;
    int rc = 0;
    if (!m->moe || m->num_experts <= 0 || !r->output_dir[0] || steps <= 0) {
        json_decref(layers);
        return 0;
    }
    for (int l = 1; layers && l <= m->num_layers; l++) {
        const int32_t *hits = t->st.groups[l].expert_steps;
        json_t *h = hits ? json_array() : NULL;
        for (int e = 0; h && e < m->num_experts; e++)
            json_array_append_new(h, json_integer(hits[e]));
        if (h)
            json_array_append_new(layers, json_pack("{s:i, s:o}", "layer", l, "steps_routed", h));
    }
    o = layers ? json_pack("{s:s, s:i, s:f, s:i, s:i, s:o}", "format", FORMAT, "version", 1,
                           "tokens_per_step", (double)r->global_batch * r->seq_len, "steps", steps,
                           "experts", m->num_experts, "layers", layers)
               : NULL;
    s = o ? json_dumps(o, JSON_COMPACT) : NULL; /* 6,144 counts for Qwen3-30B-A3B */
    json_decref(o);
    snprintf(path, sizeof(path), "%s/moe-routing.json", r->output_dir);
    if (!s || sdp_write_file_atomic(path, s, strlen(s)))
        rc = sdp_err(-EIO, "%s: cannot write the run's routing", path);
    free(s);
    return rc;
}

/* Layer entry i of the file into hits[n * E ..]: a sparse layer, E counts within 0..steps. */
static int load_layer(json_t *w, const struct sdp_model_cfg *m, int steps, int n, int *hits)
{
    json_t *h = NULL;
    int l = 0, E = m->num_experts;
    if (json_unpack(w, "{s:i, s:o}", "layer", &l, "steps_routed", &h) || l < 1 ||
        l > m->num_layers || !sdp_model_layer_sparse(m, l - 1) || !json_is_array(h) ||
        (int)json_array_size(h) != E)
        return -EINVAL;
    for (int e = 0; e < E; e++) {
        json_t *v = json_array_get(h, (size_t)e);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > steps)
            return -EINVAL;
        hits[n * E + e] = (int)json_integer_value(v);
    }
    return 0;
}

int sdp_cli_moe_routing_load(const char *path, struct sdp_model_cfg *m, struct sdp_moe_profile *out,
                             int **hits)
{
    json_error_t jerr;
    json_t *o = json_load_file(path, 0, &jerr), *layers = NULL;
    const char *fmt = "";
    int n = sdp_model_num_sparse_layers(m), rc = 0;
    memset(out, 0, sizeof(*out));
    *hits = NULL;
    if (!o)
        rc = sdp_err(-EINVAL, "%s: line %d: %s", path, jerr.line, jerr.text);
    else if (json_unpack(o, "{s:s, s:F, s:i, s:i, s:o}", "format", &fmt, "tokens_per_step",
                         &out->tokens, "steps", &out->steps, "experts", &out->experts, "layers",
                         &layers) ||
             strcmp(fmt, FORMAT) || out->tokens <= 0 || out->steps <= 0 || !json_is_array(layers))
        rc = sdp_err(-EINVAL,
                     "%s: not a routing file (format %s, tokens_per_step, steps, "
                     "experts, layers)",
                     path, FORMAT);
    else if (!m->moe || out->experts != m->num_experts || (int)json_array_size(layers) != n)
        rc = sdp_err(-EINVAL,
                     "%s: the routing of %d experts in %d sparse layers, the model has "
                     "%d in %d",
                     path, out->experts, (int)json_array_size(layers), m->moe ? m->num_experts : 0,
                     n);
    else if (!(*hits = calloc((size_t)n * out->experts, sizeof(int))))
        rc = sdp_err(-ENOMEM, "%s: %d layers of %d experts", path, n, out->experts);
    for (int i = 0; !rc && i < n; i++)
        if (load_layer(json_array_get(layers, (size_t)i), m, out->steps, i, *hits))
            rc = sdp_err(-EINVAL, "%s: layer entry %d: not a sparse layer's %d counts within 0..%d",
                         path, i, out->experts, out->steps);
    json_decref(o);
    if (rc) {
        sdp_hint(
            "give the moe-routing.json a `slidedp train --output DIR` run of this model wrote");
        free(*hits);
        *hits = NULL;
        return rc;
    }
    out->nlayers = n, out->hits = *hits;
    m->routing = out;
    return 0;
}
