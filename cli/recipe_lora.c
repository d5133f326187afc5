/* SPDX-License-Identifier: MIT */
/* The recipe's `lora:` section: LoRA adapters on the decoder layers' linears, with PEFT's keys
 *     lora: {rank: 16, alpha: 32, dropout: 0, targets: [q_proj, v_proj], layers: all}
 * parsed into r->lora (models/sdp_lora.h).  targets is a list of PEFT target names or
 * all-linear (the seven projections); layers is N, N-M or all, in the plan's numbering (1..L).
 * Defaults are PEFT's LoraConfig's: rank 8, alpha 8, dropout 0, targets q_proj and v_proj (its
 * choice for Llama and Qwen3).  The checks against the model are sdp_recipe_lora_check, once the
 * model is known.  Tests: tests/cli/test_recipe.c, tests/e2e/test_e2e_lora_plan.sh. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sdp_log.h"
#include <yaml.h>

#include "cli/recipe.h"

static int bad(const char *file, const yaml_node_t *n, const char *key, const char *what)
{
    return sdp_err(-EINVAL, "recipe %s line %d: lora%s%s: %s", file, (int)n->start_mark.line + 1,
                   key ? "." : "", key ? key : "", what);
}

static int targets_parse(const char *file, struct sdp_recipe *r, yaml_document_t *doc,
                         const yaml_node_t *v)
{
    enum sdp_ptensor k;
    r->lora.targets = 0;
    if (v->type == YAML_SCALAR_NODE && !strcmp((const char *)v->data.scalar.value, "all-linear")) {
        for (int i = 0; i < SDP_LORA_NTARGETS; i++)
            r->lora.targets |= SDP_LORA_BIT(sdp_lora_kinds[i]);
        return 0;
    }
    if (v->type != YAML_SEQUENCE_NODE)
        return bad(file, v, "targets", "a list such as [q_proj, v_proj], or all-linear");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
        const yaml_node_t *n = yaml_document_get_node(doc, *it);
        if (!n || n->type != YAML_SCALAR_NODE)
            return bad(file, v, "targets", "each target is a name such as q_proj");
        if (sdp_lora_target_parse((const char *)n->data.scalar.value, &k)) {
            sdp_err(-EINVAL, "recipe %s line %d: lora.targets: '%s' names no linear of a layer",
                    file, (int)n->start_mark.line + 1, (const char *)n->data.scalar.value);
            sdp_hint("the targets are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and "
                     "down_proj (or all-linear for every one)");
            return -EINVAL;
        }
        if (r->lora.targets & SDP_LORA_BIT(k))
            return bad(file, n, "targets", "a target named twice");
        r->lora.targets |= SDP_LORA_BIT(k);
    }
    if (!r->lora.targets)
        return bad(file, v, "targets", "an empty list: name at least one linear");
    return 0;
}

/* "N", "N-M" or "all" into r->lora.first..last (0, 0: all) */
static int layers_parse(const char *file, struct sdp_recipe *r, const yaml_node_t *v)
{
    const char *s = (const char *)v->data.scalar.value;
    char *end;
    long a, b;
    if (!strcmp(s, "all")) {
        r->lora.first = r->lora.last = 0;
        return 0;
    }
    a = b = strtol(s, &end, 10);
    if (end != s && *end == '-') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t)
            end = (char *)t - 1;
    }
    if (end == s || *end || a < 1 || b < a || b > 1000000)
        return bad(file, v, "layers", "N, N-M or all (the decoder layers, 1..L)");
    r->lora.first = (int)a;
    r->lora.last = (int)b;
    return 0;
}

/* A number of key out of v.  @return 0 or -EINVAL (logged) */
static int number(const char *file, const yaml_node_t *v, const char *key, double *x)
{
    const char *s = (const char *)v->data.scalar.value;
    char *end;
    *x = strtod(s, &end);
    if (!*s || *end || !isfinite(*x))
        return bad(file, v, key, "a finite number");
    return 0;
}

static int pair(const char *file, struct sdp_recipe *r, yaml_document_t *doc, const char *ks,
                const yaml_node_t *v)
{
    double x;
    if (!strcmp(ks, "targets"))
        return targets_parse(file, r, doc, v);
    if (v->type != YAML_SCALAR_NODE)
        return bad(file, v, ks, "a single value");
    if (!strcmp(ks, "layers"))
        return layers_parse(file, r, v);
    if (!strcmp(ks, "init_from")) {
        if (snprintf(r->lora_init, sizeof(r->lora_init), "%s",
                     (const char *)v->data.scalar.value) >= (int)sizeof(r->lora_init))
            return bad(file, v, ks, "the path is too long");
        return 0;
    }
    if (number(file, v, ks, &x))
        return -EINVAL;
    if (!strcmp(ks, "rank")) {
        if (x != floor(x) || x < 1 || x > 65536)
            return bad(file, v, ks, "an integer in 1..65536");
        r->lora.rank = (int)x;
    } else if (!strcmp(ks, "alpha")) {
        if (!(x > 0))
            return bad(file, v, ks, "a number above 0 (the scaling is alpha / rank)");
        r->lora.alpha = x;
    } else {
        if (!(x >= 0 && x < 1))
            return bad(file, v, ks, "a probability in [0, 1)");
        r->lora.dropout = x;
    }
    return 0;
}

int sdp_recipe_lora_parse(const char *file, struct sdp_recipe *r, yaml_document_t *doc,
                          const yaml_node_t *map)
{
    static const char *const keys[] = {
        "rank", "alpha", "dropout", "targets", "layers", "init_from"
    };
    int seen[6] = { 0 };
    if (map->type != YAML_MAPPING_NODE)
        return bad(file, map, NULL, "the section is a mapping such as {rank: 16, alpha: 32}");
    r->lora.rank = 8; /* PEFT's LoraConfig defaults */
    r->lora.alpha = 8;
    r->lora.targets = SDP_LORA_BIT(SDP_PT_Q) | SDP_LORA_BIT(SDP_PT_V);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *k = yaml_document_get_node(doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(doc, p->value);
        int ki = 0, rc;
        if (!k || !v || k->type != YAML_SCALAR_NODE)
            return bad(file, map, NULL, "keys are names");
        while (ki < 6 && strcmp((const char *)k->data.scalar.value, keys[ki]))
            ki++;
        if (ki == 6) {
            sdp_err(-EINVAL, "recipe %s line %d: unknown key 'lora.%s'", file,
                    (int)k->start_mark.line + 1, (const char *)k->data.scalar.value);
            sdp_hint("the keys of lora: are rank, alpha, dropout, targets, layers, init_from");
            return -EINVAL;
        }
        if (seen[ki])
            return bad(file, k, keys[ki], "given twice");
        seen[ki] = 1;
        if ((rc = pair(file, r, doc, keys[ki], v)) != 0)
            return rc;
    }
    return 0;
}

int sdp_recipe_lora_check(const struct sdp_recipe *r)
{
    char why[256];
    if (r->lora.rank < 1)
        return 0;
    if (sdp_lora_validate(&r->lora, &r->model, why, sizeof(why)))
        return sdp_err(-EINVAL, "recipe %s: %s", r->file, why);
    if (r->work_on_gpu || r->embed_on_gpu || r->param_delay) {
        sdp_err(-EINVAL,
                "recipe %s: lora: keeps the frozen base's working copy on the host and "
                "updates synchronously",
                r->file);
        sdp_hint("drop train.work_home, train.embed_home and train.param_delay");
        return -EINVAL;
    }
    return 0;
}
