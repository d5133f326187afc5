/* SPDX-License-Identifier: MIT */
/* The recipe's `plan:` section: rows that set fields of the per-layer plan (graph/plan.h) for a
 * range of layers, kept as text with their line, so that a value the plan refuses is reported
 * against the recipe (cli/train.c applies them), and the names of the activation placements.
 * Tests: tests/e2e/test_e2e_plan.sh. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sdp_log.h"
#include <yaml.h>

#include "cli/recipe.h"

/* activation names' settings: enum sdp_recompute, and whether the saved inputs are offloaded */
static const struct {
    const char *name;
    int recompute, offload;
} activation_modes[] = { { "recompute", SDP_RECOMPUTE_FULL, 0 },
                         { "keep", SDP_RECOMPUTE_NONE, 0 },
                         { "offload", SDP_RECOMPUTE_FULL, 1 },
                         { "selective", SDP_RECOMPUTE_SELECTIVE, 0 },
                         { "keep-attn", SDP_RECOMPUTE_ATTN, 0 } };

int sdp_recipe_activations(const char *name, int *recompute, int *offload)
{
    for (size_t i = 0; i < sizeof(activation_modes) / sizeof(activation_modes[0]); i++)
        if (!strcmp(name, activation_modes[i].name)) {
            *recompute = activation_modes[i].recompute;
            *offload = activation_modes[i].offload;
            return 0;
        }
    return -EINVAL;
}

const char *sdp_recipe_activations_name(int recompute, int offload)
{
    for (size_t i = 0; i < sizeof(activation_modes) / sizeof(activation_modes[0]); i++)
        if (recompute == activation_modes[i].recompute && offload == activation_modes[i].offload)
            return activation_modes[i].name;
    return "recompute";
}

/* `layers:` as first..last; -1..-1 for "all" (the decoder layers, resolved at make time) */
static int parse_layers(const char *s, int *first, int *last)
{
    char *end;
    long a, b;
    if (!strcmp(s, "all")) {
        *first = *last = -1;
        return 0;
    }
    a = strtol(s, &end, 10);
    if (end == s || a < 0 || a > 1000000)
        return -EINVAL;
    b = a;
    if (*end == '-') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t || b < a || b > 1000000)
            return -EINVAL;
    }
    if (*end)
        return -EINVAL;
    *first = (int)a;
    *last = (int)b;
    return 0;
}

static int bad(const char *file, const yaml_node_t *n, const char *what)
{
    return sdp_err(-EINVAL, "recipe %s line %d: plan: %s", file, (int)n->start_mark.line + 1, what);
}

static int too_many(const char *file, const yaml_node_t *n)
{
    return sdp_err(-EINVAL, "recipe %s line %d: plan: more than %d settings", file,
                   (int)n->start_mark.line + 1, SDP_RECIPE_PLAN_ROWS);
}

/* one item of the list: layers + key/value pairs, each a row */
static int parse_item(const char *file, struct sdp_recipe *r, yaml_document_t *doc,
                      const yaml_node_t *item)
{
    int first = 0, last = 0, have_layers = 0, n0 = r->nplan;
    if (item->type != YAML_MAPPING_NODE)
        return bad(file, item, "each item is a mapping such as {layers: 1-8, activations: keep}");
    for (yaml_node_pair_t *p = item->data.mapping.pairs.start; p < item->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE)
            return bad(file, item, "keys and values are plain words");
        const char *ks = (const char *)k->data.scalar.value;
        const char *vs = (const char *)v->data.scalar.value;
        if (!strcmp(ks, "layers")) {
            if (parse_layers(vs, &first, &last))
                return bad(file, v, "layers is N, N-M or all (0: the embedding, L + 1: the head)");
            have_layers = 1;
            continue;
        }
        if (r->nplan == SDP_RECIPE_PLAN_ROWS)
            return too_many(file, k);
        struct sdp_recipe_plan_row *row = &r->plan[r->nplan++];
        if (snprintf(row->key, sizeof(row->key), "%s", ks) >= (int)sizeof(row->key) ||
            snprintf(row->value, sizeof(row->value), "%s", vs) >= (int)sizeof(row->value))
            return bad(file, k, "a key or value is too long");
        row->line = (int)k->start_mark.line + 1;
    }
    if (!have_layers)
        return bad(file, item, "an item without `layers:` (N, N-M or all)");
    if (r->nplan == n0)
        return bad(file, item, "an item that sets nothing besides `layers:`");
    for (int i = n0; i < r->nplan; i++) {
        r->plan[i].first = first;
        r->plan[i].last = last;
    }
    return 0;
}

int sdp_recipe_plan_parse(const char *file, struct sdp_recipe *r, yaml_document_t *doc,
                          const yaml_node_t *list)
{
    if (list->type != YAML_SEQUENCE_NODE)
        return bad(file, list, "the section is a list of items such as - {layers: 1-8, ...}");
    for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top;
         it++) {
        const yaml_node_t *item = yaml_document_get_node(doc, *it);
        int rc = item ? parse_item(file, r, doc, item) : bad(file, list, "malformed list");
        if (rc)
            return rc;
    }
    return 0;
}
