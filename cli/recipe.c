/* SPDX-License-Identifier: MIT */
/* Training recipes: a YAML file (libyaml document API, so every node keeps its line) mapped onto
 * struct sdp_recipe through one table of sections and keys.  Unknown or duplicate keys, wrong types
 * and impossible values are errors naming the file, line and key; nothing is guessed or silently
 * clamped.  Knows no StarPU and opens no model or data file (the runtime does that later).  Tests:
 * tests/cli/test_recipe.c. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "cli/recipe.h"
#include "base/sdp_log.h"

/* ---- the table of sections and keys ---- */

enum ktype {
    K_INT,    /* int, plain scalar, base 10 */
    K_U64,    /* unsigned long long, plain scalar, base 10 */
    K_DBL,    /* double, plain scalar, finite */
    K_BOOL,   /* int 0/1 from true/false/yes/no */
    K_STR,    /* char[size] */
    K_PATH,   /* char[size], resolved against the recipe's directory after parsing */
    K_CHOICE, /* one of names[], handed to set() */
    K_ARCH,   /* an architecture name of models/ */
};

enum kbase { B_RECIPE, B_SIZES }; /* field offset into struct sdp_recipe or into the model sizes */

struct ctx;

struct key {
    const char *name;
    enum ktype type;
    enum kbase base;
    size_t off, size;
    double lo, hi;            /* allowed range of numbers */
    int lo_open, hi_open;     /* 1: the bound itself is excluded */
    const char *const *names; /* K_CHOICE: NULL-terminated */
    void (*set)(struct ctx *c, int choice);
};

#define MAX_KEYS 32 /* keys of the largest section: checked below, at compile time */
enum { S_MODEL, S_DATA, S_BATCH, S_OPTIMIZER, S_SCHEDULE, S_TRAIN, S_OUTPUT, NSEC };

struct section {
    const char *name;
    const struct key *keys;
    int nkeys;
};

/* Parsing state: the recipe, the model sizes as given (applied after the architecture's defaults),
 * and the line of every key seen (0 = absent), which also detects duplicates. */
struct ctx {
    const char *file;
    struct sdp_recipe *r;
    struct sdp_model_cfg sizes;
    enum sdp_arch arch;
    int sec_line[NSEC];
    int line[NSEC][MAX_KEYS];
};

#define RF(f)                                                                                      \
    .base = B_RECIPE, .off = offsetof(struct sdp_recipe, f),                                       \
    .size = sizeof(((struct sdp_recipe *)0)->f)
#define MF(f)            .base = B_SIZES, .off = offsetof(struct sdp_model_cfg, f)
#define NOLIM            (double)INT_MAX
#define INT_GE(x)        .type = K_INT, .lo = (x), .hi = NOLIM                  /* integer >= x */
#define DBL_GE(x)        .type = K_DBL, .lo = (x), .hi = INFINITY               /* number >= x */
#define DBL_GT(x)        .type = K_DBL, .lo = (x), .hi = INFINITY, .lo_open = 1 /* number > x */
#define CHOICE(list, fn) .type = K_CHOICE, .names = list, .set = fn

static const char *const precision_names[] = { "fp32", "bf16", NULL };
static const char *const grad_dtype_names[] = { "auto", "fp32", "bf16", NULL };
static const char *const activation_names[] = { "recompute", "keep", "offload", "selective", NULL };
static const char *const on_nan_names[] = { "stop", "skip", NULL };
static const char *const grad_route_names[] = { "cpu", "gpu", NULL };
static const char *const param_route_names[] = { "replicated", "sharded", NULL };
static const char *const schedule_names[] = { "cosine", "linear", "constant", NULL };
static const char *const optimizer_names[] = { "adamw", NULL };
static const char *const collectives_names[] = { "starpu", "nccl", NULL };
static const char *const work_home_names[] = { "host", "gpu", NULL };
static const char *const embed_lookup_names[] = { "compute", "host", NULL };

static void set_work_home(struct ctx *c, int i)
{
    c->r->work_on_gpu = i;
}

static void set_embed_home(struct ctx *c, int i)
{
    c->r->embed_on_gpu = i;
}

static void set_embed_lookup(struct ctx *c, int i)
{
    c->r->embed_lookup_host = i;
}

static void set_precision(struct ctx *c, int i)
{
    c->r->precision = i == 0 ? SDP_PREC_FP32 : SDP_PREC_BF16;
}

static void set_grad_dtype(struct ctx *c, int i)
{
    c->r->grad_bf16 = i - 1; /* auto -1, fp32 0, bf16 1 */
}

static void set_collectives(struct ctx *c, int i)
{
    c->r->nccl = i == 1;
}

/* activation_names' settings: enum sdp_recompute, and whether the saved inputs are offloaded */
static const struct {
    int recompute, offload;
} activation_modes[] = { { SDP_RECOMPUTE_FULL, 0 },
                         { SDP_RECOMPUTE_NONE, 0 },
                         { SDP_RECOMPUTE_FULL, 1 },
                         { SDP_RECOMPUTE_SELECTIVE, 0 } };

static void set_activations(struct ctx *c, int i)
{
    c->r->recompute = activation_modes[i].recompute;
    c->r->act_offload = activation_modes[i].offload;
}

int sdp_recipe_activations(const char *name, int *recompute, int *offload)
{
    for (int i = 0; activation_names[i]; i++)
        if (!strcmp(name, activation_names[i])) {
            *recompute = activation_modes[i].recompute;
            *offload = activation_modes[i].offload;
            return 0;
        }
    return -EINVAL;
}

static void set_on_nan(struct ctx *c, int i)
{
    c->r->skip_nonfinite = i == 1;
}

static void set_grad_route(struct ctx *c, int i)
{
    c->r->grad_route_gpu = i == 1;
}

static void set_param_route(struct ctx *c, int i)
{
    c->r->param_sharded = i == 1;
}

static void set_schedule(struct ctx *c, int i)
{
    c->r->lr_schedule = i == 0 ? SDP_LR_COSINE : i == 1 ? SDP_LR_LINEAR : SDP_LR_CONSTANT;
}

static void set_optimizer(struct ctx *c, int i)
{
    (void)c; /* AdamW is the only optimizer */
    (void)i;
}

static const enum sdp_arch known_archs[] = { SDP_ARCH_QWEN3, SDP_ARCH_LLAMA };
#define NARCH (int)(sizeof(known_archs) / sizeof(known_archs[0]))

/* Presets named in models/sdp_models.h; errors list those that sdp_model_preset() accepts. */
static const char *const preset_names[] = { "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b",
                                            "qwen3-14b" };

/* Model keys other than path, preset and arch are sizes (they need arch). */
#define MODEL_FIRST_SIZE 3
static const struct key model_keys[] = {
    { .name = "path", .type = K_PATH, RF(model_path) },
    { .name = "preset", .type = K_STR, RF(model_preset) },
    { .name = "arch", .type = K_ARCH },
    { .name = "vocab_size", MF(vocab_size), INT_GE(1) },
    { .name = "hidden_size", MF(hidden_size), INT_GE(1) },
    { .name = "intermediate_size", MF(intermediate_size), INT_GE(1) },
    { .name = "num_layers", MF(num_layers), INT_GE(1) },
    { .name = "num_heads", MF(num_heads), INT_GE(1) },
    { .name = "num_kv_heads", MF(num_kv_heads), INT_GE(1) },
    { .name = "head_dim", MF(head_dim), INT_GE(1) },
    { .name = "rope_theta", MF(rope_theta), DBL_GT(0) },
    { .name = "rms_norm_eps", MF(rms_norm_eps), DBL_GT(0) },
    { .name = "tie_word_embeddings", .type = K_BOOL, MF(tie_word_embeddings) },
    { .name = "max_position_embeddings", MF(max_position_embeddings), INT_GE(1) },
    { .name = "initializer_range", MF(initializer_range), DBL_GE(0) },
};
static const struct key data_keys[] = {
    { .name = "train", .type = K_PATH, RF(data_train) },
    { .name = "seq_len", RF(seq_len), INT_GE(1) },
    { .name = "shuffle", .type = K_BOOL, RF(shuffle) },
};
static const struct key batch_keys[] = {
    { .name = "global", RF(global_batch), INT_GE(1) },
    { .name = "micro", RF(micro_batch), INT_GE(1) },
};
static const struct key optimizer_keys[] = {
    { .name = "name", CHOICE(optimizer_names, set_optimizer) },
    { .name = "lr", RF(lr), DBL_GT(0) },
    { .name = "beta1", RF(beta1), .type = K_DBL, .lo = 0, .hi = 1, .hi_open = 1 },
    { .name = "beta2", RF(beta2), .type = K_DBL, .lo = 0, .hi = 1, .hi_open = 1 },
    { .name = "eps", RF(eps), DBL_GT(0) },
    { .name = "weight_decay", RF(weight_decay), DBL_GE(0) },
    { .name = "max_grad_norm", RF(max_grad_norm), DBL_GE(0) },
};
static const struct key schedule_keys[] = {
    { .name = "name", CHOICE(schedule_names, set_schedule) },
    { .name = "warmup_steps", RF(warmup_steps), INT_GE(0) },
    { .name = "min_lr_ratio", RF(min_lr_ratio), .type = K_DBL, .lo = 0, .hi = 1 },
};
static const struct key train_keys[] = {
    { .name = "steps", RF(steps), INT_GE(1) },
    { .name = "seed", .type = K_U64, RF(seed) },
    { .name = "precision", CHOICE(precision_names, set_precision) },
    { .name = "chunk_mib", RF(chunk_mib), DBL_GT(0) },
    { .name = "activations", CHOICE(activation_names, set_activations) },
    { .name = "on_nan", CHOICE(on_nan_names, set_on_nan) },
    { .name = "sched", .type = K_STR, RF(sched) },
    { .name = "cpus", RF(cpus), INT_GE(0) },
    { .name = "host_memory_gib", RF(host_memory_gib), DBL_GE(0) },
    { .name = "gpus", RF(gpus), INT_GE(-1) },
    { .name = "gpu_memory_gib", RF(gpu_memory_gib), DBL_GE(0) },
    { .name = "ranks", RF(ranks), INT_GE(1) },
    { .name = "grad_route", CHOICE(grad_route_names, set_grad_route) },
    { .name = "param_route", CHOICE(param_route_names, set_param_route) },
    { .name = "grad_route_groups", .type = K_STR, RF(grad_route_groups) },
    { .name = "window", RF(window), INT_GE(0) },
    { .name = "bwd_lookahead", RF(bwd_lookahead), INT_GE(-1) },
    { .name = "keep_last", RF(keep_last), INT_GE(0) },
    { .name = "keep_mlp", RF(keep_mlp), INT_GE(0) },
    { .name = "gpu_update", RF(gpu_update), INT_GE(0) },
    { .name = "grad_dtype", CHOICE(grad_dtype_names, set_grad_dtype) },
    { .name = "work_home", CHOICE(work_home_names, set_work_home) },
    { .name = "embed_home", CHOICE(work_home_names, set_embed_home) },
    { .name = "embed_lookup", CHOICE(embed_lookup_names, set_embed_lookup) },
    { .name = "staging_depth", RF(staging_depth), INT_GE(1) },
    { .name = "prefetch_groups", RF(prefetch_groups), INT_GE(0) },
    { .name = "collectives", CHOICE(collectives_names, set_collectives) },
    { .name = "param_delay", RF(param_delay), .type = K_INT, .lo = 0, .hi = 1 },
};
static const struct key output_keys[] = {
    { .name = "dir", .type = K_PATH, RF(output_dir) },
    /* metrics is resolved against dir, see resolve_paths() */
    { .name = "metrics", .type = K_STR, RF(metrics) },
    { .name = "checkpoint_every", RF(checkpoint_every), INT_GE(0) },
    { .name = "keep_checkpoints", RF(keep_checkpoints), INT_GE(1) },
};

#define NKEYS(a) (int)(sizeof(a) / sizeof((a)[0]))
static const struct section sections[NSEC] = {
    { "model", model_keys, NKEYS(model_keys) },
    { "data", data_keys, NKEYS(data_keys) },
    { "batch", batch_keys, NKEYS(batch_keys) },
    { "optimizer", optimizer_keys, NKEYS(optimizer_keys) },
    { "schedule", schedule_keys, NKEYS(schedule_keys) },
    { "train", train_keys, NKEYS(train_keys) },
    { "output", output_keys, NKEYS(output_keys) },
};
_Static_assert(NKEYS(model_keys) <= MAX_KEYS && NKEYS(data_keys) <= MAX_KEYS &&
                   NKEYS(batch_keys) <= MAX_KEYS && NKEYS(optimizer_keys) <= MAX_KEYS &&
                   NKEYS(schedule_keys) <= MAX_KEYS && NKEYS(train_keys) <= MAX_KEYS &&
                   NKEYS(output_keys) <= MAX_KEYS,
               "a recipe section has more keys than MAX_KEYS");

/* ---- errors ---- */

static int line_of(const yaml_node_t *n)
{
    return (int)n->start_mark.line + 1;
}

/* Report "recipe FILE line N: message" from the caller's function and line. */
#define fail_at(c, line, ...) fail_at_src((c), (line), __func__, __LINE__, __VA_ARGS__)

static int fail_at_src(const struct ctx *c, int line, const char *func, int src_line,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int fail_at_src(const struct ctx *c, int line, const char *func, int src_line,
                       const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return sdp_err_at(-EINVAL, func, __FILE__, src_line, "recipe %s line %d: %s", c->file, line,
                      msg);
}

/* "a, b, c" from a NULL-terminated list or from a section's keys. */
static void join_names(char *out, size_t len, const char *const *names, const struct section *sec)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; sec ? i < sec->nkeys : names[i] != NULL; i++) {
        const char *n = sec ? sec->keys[i].name : names[i];
        int w = snprintf(out + used, len - used, "%s%s", i ? ", " : "", n);
        if (w < 0 || (size_t)w >= len - used)
            break;
        used += (size_t)w;
    }
}

static const char *node_kind(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE    ? "a mapping"
           : n->type == YAML_SEQUENCE_NODE ? "a list"
                                           : "a value";
}

/* "lr = -1: must be > 0" style text for a range. */
static void range_text(char *out, size_t len, const struct key *k)
{
    if (isinf(k->hi) || k->hi == NOLIM)
        snprintf(out, len, "must be %s %g", k->lo_open ? ">" : ">=", k->lo);
    else
        snprintf(out, len, "must be in %c%g, %g%c", k->lo_open ? '(' : '[', k->lo, k->hi,
                 k->hi_open ? ')' : ']');
}

/* ---- values ---- */

static int is_plain(const yaml_node_t *v)
{
    return v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ||
           v->data.scalar.style == YAML_ANY_SCALAR_STYLE;
}

static int in_range(const struct key *k, double x)
{
    if (x < k->lo || (k->lo_open && x == k->lo))
        return 0;
    if (x > k->hi || (k->hi_open && x == k->hi))
        return 0;
    return 1;
}

static int set_value(struct ctx *c, const char *sec, const struct key *k, const yaml_node_t *v)
{
    const char *s = (const char *)v->data.scalar.value;
    char *base = k->base == B_RECIPE ? (char *)c->r : (char *)&c->sizes;
    char why[160];
    int line = line_of(v);
    char *end;

    if (v->type != YAML_SCALAR_NODE)
        return fail_at(c, line, "%s.%s must be a single value, got %s", sec, k->name, node_kind(v));
    if (strlen(s) != v->data.scalar.length)
        return fail_at(c, line, "%s.%s contains a NUL byte", sec, k->name);

    switch (k->type) {
    case K_INT:
    case K_U64:
    case K_DBL:
        if (!is_plain(v)) {
            fail_at(c, line, "%s.%s must be a number, got the quoted string '%s'", sec, k->name, s);
            sdp_hint("remove the quotes");
            return -EINVAL;
        }
        break;
    case K_BOOL:
        if (!is_plain(v))
            return fail_at(c, line, "%s.%s must be true or false, got the quoted string '%s'", sec,
                           k->name, s);
        break;
    default:
        break;
    }

    switch (k->type) {
    case K_INT: {
        long long x;
        errno = 0;
        x = strtoll(s, &end, 10);
        if (*s == '\0' || *end != '\0') {
            strtod(s, &end);
            return fail_at(c, line, "%s.%s must be an integer, got '%s'%s", sec, k->name, s,
                           *s && *end == '\0' ? " (a fraction or exponent)" : "");
        }
        if (errno == ERANGE || x > k->hi)
            return fail_at(c, line, "%s.%s = %s is too large (at most %.0f)", sec, k->name, s,
                           k->hi);
        if (!in_range(k, (double)x)) {
            range_text(why, sizeof(why), k);
            return fail_at(c, line, "%s.%s = %s: %s", sec, k->name, s, why);
        }
        *(int *)(base + k->off) = (int)x;
        return 0;
    }
    case K_U64: {
        unsigned long long x;
        errno = 0;
        x = strtoull(s, &end, 10);
        if (*s < '0' || *s > '9' || *end != '\0' || errno == ERANGE)
            return fail_at(c, line, "%s.%s must be an integer in [0, %llu], got '%s'", sec, k->name,
                           ULLONG_MAX, s);
        *(unsigned long long *)(base + k->off) = x;
        return 0;
    }
    case K_DBL: {
        double x;
        errno = 0;
        x = strtod(s, &end);
        if (*s == '\0' || *end != '\0' || !isfinite(x))
            return fail_at(c, line, "%s.%s must be a finite number, got '%s'", sec, k->name, s);
        if (!in_range(k, x)) {
            range_text(why, sizeof(why), k);
            return fail_at(c, line, "%s.%s = %s: %s", sec, k->name, s, why);
        }
        *(double *)(base + k->off) = x;
        return 0;
    }
    case K_BOOL: {
        int x;
        if (!strcasecmp(s, "true") || !strcasecmp(s, "yes"))
            x = 1;
        else if (!strcasecmp(s, "false") || !strcasecmp(s, "no"))
            x = 0;
        else
            return fail_at(c, line, "%s.%s must be true/false/yes/no, got '%s'", sec, k->name, s);
        *(int *)(base + k->off) = x;
        return 0;
    }
    case K_STR:
    case K_PATH:
        if (is_plain(v) && (!strcmp(s, "~") || !strcmp(s, "null")))
            s = "";
        if (strlen(s) >= k->size)
            return fail_at(c, line, "%s.%s is %zu characters long, at most %zu are allowed", sec,
                           k->name, strlen(s), k->size - 1);
        memcpy(base + k->off, s, strlen(s) + 1);
        return 0;
    case K_CHOICE:
        for (int i = 0; k->names[i]; i++) {
            if (!strcmp(s, k->names[i])) {
                k->set(c, i);
                return 0;
            }
        }
        join_names(why, sizeof(why), k->names, NULL);
        return fail_at(c, line, "%s.%s = '%s': expected one of %s", sec, k->name, s, why);
    case K_ARCH: {
        size_t used = 0;
        for (int i = 0; i < NARCH; i++) {
            if (!strcmp(s, sdp_model_arch_name(known_archs[i]))) {
                c->arch = known_archs[i];
                return 0;
            }
        }
        why[0] = '\0';
        for (int i = 0; i < NARCH && used < sizeof(why); i++)
            used += (size_t)snprintf(why + used, sizeof(why) - used, "%s%s", i ? ", " : "",
                                     sdp_model_arch_name(known_archs[i]));
        return fail_at(c, line, "%s.%s = '%s': expected one of %s", sec, k->name, s, why);
    }
    }
    return fail_at(c, line, "%s.%s: internal error, unhandled key type", sec, k->name);
}

/* ---- structure: a mapping of sections, each a mapping of keys ---- */

static int parse_section(struct ctx *c, yaml_document_t *doc, int si, const yaml_node_t *map)
{
    const struct section *sec = &sections[si];
    char known[512];

    if (map->type != YAML_MAPPING_NODE)
        return fail_at(c, line_of(map), "section '%s' must be a mapping of keys, got %s", sec->name,
                       node_kind(map));
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *kn = yaml_document_get_node(doc, p->key);
        const yaml_node_t *vn = yaml_document_get_node(doc, p->value);
        const char *name;
        int ki, rc;

        if (!kn || !vn)
            return fail_at(c, line_of(map), "malformed mapping in section '%s'", sec->name);
        if (kn->type != YAML_SCALAR_NODE)
            return fail_at(c, line_of(kn), "keys of section '%s' must be names, got %s", sec->name,
                           node_kind(kn));
        name = (const char *)kn->data.scalar.value;
        for (ki = 0; ki < sec->nkeys; ki++)
            if (!strcmp(name, sec->keys[ki].name))
                break;
        if (ki == sec->nkeys) {
            join_names(known, sizeof(known), NULL, sec);
            return fail_at(c, line_of(kn), "unknown key '%s.%s' (known: %s)", sec->name, name,
                           known);
        }
        if (c->line[si][ki])
            return fail_at(c, line_of(kn), "duplicate key '%s.%s' (first given on line %d)",
                           sec->name, name, c->line[si][ki]);
        c->line[si][ki] = line_of(kn);
        rc = set_value(c, sec->name, &sec->keys[ki], vn);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int parse_root(struct ctx *c, yaml_document_t *doc, const yaml_node_t *root)
{
    char known[256];
    const char *names[NSEC + 1];

    for (int i = 0; i < NSEC; i++)
        names[i] = sections[i].name;
    names[NSEC] = NULL;
    join_names(known, sizeof(known), names, NULL);

    if (root->type != YAML_MAPPING_NODE)
        return fail_at(c, line_of(root), "the recipe must be a mapping of sections (%s), got %s",
                       known, node_kind(root));
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        const yaml_node_t *kn = yaml_document_get_node(doc, p->key);
        const yaml_node_t *vn = yaml_document_get_node(doc, p->value);
        int si, rc;

        if (!kn || !vn)
            return fail_at(c, line_of(root), "malformed top-level mapping");
        if (kn->type != YAML_SCALAR_NODE)
            return fail_at(c, line_of(kn), "section names must be names, got %s", node_kind(kn));
        for (si = 0; si < NSEC; si++)
            if (!strcmp((const char *)kn->data.scalar.value, sections[si].name))
                break;
        if (si == NSEC)
            return fail_at(c, line_of(kn), "unknown section '%s' (known: %s)",
                           (const char *)kn->data.scalar.value, known);
        if (c->sec_line[si])
            return fail_at(c, line_of(kn), "duplicate section '%s' (first given on line %d)",
                           sections[si].name, c->sec_line[si]);
        c->sec_line[si] = line_of(kn);
        rc = parse_section(c, doc, si, vn);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- after parsing: model, cross-key checks, paths ---- */

static int key_index(int si, const char *name)
{
    for (int i = 0; i < sections[si].nkeys; i++)
        if (!strcmp(sections[si].keys[i].name, name))
            return i;
    return -1;
}

/* Line of a key, or 0 when absent. */
static int key_line(const struct ctx *c, int si, const char *name)
{
    int i = key_index(si, name);
    return i < 0 ? 0 : c->line[si][i];
}

static int resolve_model(struct ctx *c)
{
    struct sdp_recipe *r = c->r;
    const struct section *sec = &sections[S_MODEL];
    int path_line = key_line(c, S_MODEL, "path"), preset_line = key_line(c, S_MODEL, "preset");
    int arch_line = key_line(c, S_MODEL, "arch");
    int size_line = 0, size_key = -1;
    char why[256];

    for (int i = MODEL_FIRST_SIZE; i < sec->nkeys; i++) {
        if (c->line[S_MODEL][i] && (!size_line || c->line[S_MODEL][i] < size_line)) {
            size_line = c->line[S_MODEL][i];
            size_key = i;
        }
    }
    if (path_line && (preset_line || arch_line || size_line)) {
        const char *other = preset_line ? "preset" : arch_line ? "arch" : sec->keys[size_key].name;
        int line = preset_line ? preset_line : arch_line ? arch_line : size_line;
        fail_at(c, line, "model.path and model.%s are both given", other);
        sdp_hint("a model directory carries its own config.json: drop model.%s, or drop model.path "
                 "to start from random weights",
                 other);
        return -EINVAL;
    }
    if (preset_line && (arch_line || size_line)) {
        const char *other = arch_line ? "arch" : sec->keys[size_key].name;
        fail_at(c, arch_line ? arch_line : size_line, "model.preset and model.%s are both given",
                other);
        sdp_hint("use either a preset or arch with sizes");
        return -EINVAL;
    }
    if (size_line && !arch_line) {
        fail_at(c, size_line, "model.%s is given without model.arch", sec->keys[size_key].name);
        sdp_hint("add 'arch: %s' (or another architecture) to the model section",
                 sdp_model_arch_name(known_archs[0]));
        return -EINVAL;
    }
    if (preset_line) {
        if (sdp_model_preset(r->model_preset, &r->model) != 0) {
            size_t used = 0;
            struct sdp_model_cfg probe;
            why[0] = '\0';
            for (size_t i = 0; i < sizeof(preset_names) / sizeof(preset_names[0]); i++) {
                if (sdp_model_preset(preset_names[i], &probe) == 0 && used < sizeof(why))
                    used += (size_t)snprintf(why + used, sizeof(why) - used, "%s%s",
                                             used ? ", " : "", preset_names[i]);
            }
            return fail_at(c, preset_line, "unknown model.preset '%s' (known: %s)", r->model_preset,
                           why);
        }
        return 0;
    }
    if (!arch_line)
        return 0; /* model.path, or no model at all (sdp_recipe_validate reports that) */

    sdp_model_defaults(&r->model, c->arch);
    for (int i = MODEL_FIRST_SIZE; i < sec->nkeys; i++) {
        const struct key *k = &sec->keys[i];
        size_t n = k->type == K_DBL ? sizeof(double) : sizeof(int);
        if (c->line[S_MODEL][i])
            memcpy((char *)&r->model + k->off, (char *)&c->sizes + k->off, n);
    }
    /* Hugging Face conventions for keys a config may leave out. */
    if (!key_line(c, S_MODEL, "num_kv_heads"))
        r->model.num_kv_heads = r->model.num_heads;
    if (!key_line(c, S_MODEL, "head_dim") && r->model.head_dim <= 0 && r->model.num_heads > 0)
        r->model.head_dim = r->model.hidden_size / r->model.num_heads;
    if (sdp_model_validate(&r->model, why, sizeof(why)) != 0)
        return fail_at(c, arch_line, "model (%s) is not valid: %s", sdp_model_arch_name(c->arch),
                       why);
    return 0;
}

/* Join rel onto dir unless rel is absolute, empty, or dir is empty (then rel stays relative to the
 * working directory, which is where the recipe lives). */
static int join_path(const struct ctx *c, int line, const char *key, char *p, const char *dir)
{
    char out[SDP_PATH_MAX];
    if (p[0] == '\0' || p[0] == '/' || dir[0] == '\0')
        return 0;
    if ((size_t)snprintf(out, sizeof(out), "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
                         p) >= sizeof(out))
        return fail_at(c, line, "%s: the path %s/%s is too long", key, dir, p);
    memcpy(p, out, strlen(out) + 1);
    return 0;
}

static int resolve_paths(struct ctx *c)
{
    struct sdp_recipe *r = c->r;
    char dir[SDP_PATH_MAX];
    const char *slash = strrchr(r->file, '/');
    int rc;

    if (!slash)
        dir[0] = '\0';
    else if (slash == r->file)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - r->file), r->file);

    rc = join_path(c, key_line(c, S_MODEL, "path"), "model.path", r->model_path, dir);
    if (rc == 0)
        rc = join_path(c, key_line(c, S_DATA, "train"), "data.train", r->data_train, dir);
    if (rc == 0)
        rc = join_path(c, key_line(c, S_OUTPUT, "dir"), "output.dir", r->output_dir, dir);
    /* metrics: relative to output.dir when set, else to the recipe's directory */
    if (rc == 0)
        rc = join_path(c, key_line(c, S_OUTPUT, "metrics"), "output.metrics", r->metrics,
                       r->output_dir[0] ? r->output_dir : dir);
    return rc;
}

static int check_batch(const struct ctx *c)
{
    const struct sdp_recipe *r = c->r;
    int line = key_line(c, S_BATCH, "global");
    if (!line)
        line = key_line(c, S_BATCH, "micro");
    if (r->global_batch % r->micro_batch != 0) {
        fail_at(c, line, "batch.global=%d is not a multiple of batch.micro=%d", r->global_batch,
                r->micro_batch);
        sdp_hint("gradient accumulation runs global/micro micro-batches per step; pick micro as a "
                 "divisor of global");
        return -EINVAL;
    }
    return 0;
}

/* ---- public API ---- */

void sdp_recipe_defaults(struct sdp_recipe *r)
{
    memset(r, 0, sizeof(*r));
    r->seq_len = 1024;
    r->shuffle = 1;
    r->global_batch = 8;
    r->micro_batch = 8;
    r->lr = 3e-4;
    r->beta1 = 0.9;
    r->beta2 = 0.95;
    r->eps = 1e-8;
    r->weight_decay = 0.1;
    r->max_grad_norm = 1.0;
    r->lr_schedule = SDP_LR_COSINE;
    r->warmup_steps = 0;
    r->min_lr_ratio = 0.1;
    r->steps = 100;
    r->seed = 1234;
    r->precision = SDP_PREC_BF16;
    r->chunk_mib = 16; /* qwen3-4b/16 on an H200: 8% faster than 64 (bench/results) */
    r->recompute = 1;
    r->cpus = 0;
    r->host_memory_gib = 0;
    r->gpus = -1;
    r->checkpoint_every = 0;
    r->keep_checkpoints = 3;
    r->gpu_memory_gib = 0;
    r->ranks = 1;
    r->window = -1;
    r->bwd_lookahead = 1;
    r->keep_last = 1;
    r->grad_bf16 = -1;
    r->prefetch_groups = -1;
}

int sdp_recipe_load(const char *path, struct sdp_recipe *r)
{
    struct ctx c;
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_node_t *root;
    FILE *f;
    int rc;

    sdp_recipe_defaults(r);
    if (strlen(path) >= sizeof(r->file))
        return sdp_err(-ENAMETOOLONG, "recipe path is %zu characters long", strlen(path));
    memcpy(r->file, path, strlen(path) + 1);
    memset(&c, 0, sizeof(c));
    c.file = r->file;
    c.r = r;

    f = fopen(path, "rb");
    if (!f)
        return sdp_err(-errno, "recipe %s: cannot open", path);
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return sdp_err(-ENOMEM, "recipe %s: cannot initialise the YAML parser", path);
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = fail_at(&c, (int)parser.problem_mark.line + 1, "YAML syntax error: %s%s%s",
                     parser.problem ? parser.problem : "unknown", parser.context ? " " : "",
                     parser.context ? parser.context : "");
        goto out_parser;
    }
    root = yaml_document_get_root_node(&doc);
    if (!root) {
        rc = sdp_err(-EINVAL, "recipe %s: the file holds no YAML document", path);
        sdp_hint("a recipe needs at least the model and data sections");
        goto out_doc;
    }
    rc = parse_root(&c, &doc, root);
    if (rc == 0) {
        /* A second document would be ignored silently: refuse it. */
        yaml_document_t next;
        if (!yaml_parser_load(&parser, &next)) {
            rc = fail_at(&c, (int)parser.problem_mark.line + 1, "YAML syntax error: %s",
                         parser.problem ? parser.problem : "unknown");
        } else {
            yaml_node_t *nroot = yaml_document_get_root_node(&next);
            if (nroot)
                rc = fail_at(&c, line_of(nroot), "a second YAML document; a recipe is one");
            yaml_document_delete(&next);
        }
    }
    if (rc == 0)
        rc = resolve_model(&c);
    if (rc == 0)
        rc = check_batch(&c);
    if (rc == 0)
        rc = resolve_paths(&c);
out_doc:
    yaml_document_delete(&doc);
out_parser:
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

int sdp_recipe_validate(const struct sdp_recipe *r)
{
    char why[256];

    if (r->data_train[0] == '\0') {
        sdp_err(-EINVAL, "recipe %s: data.train is not set", r->file);
        sdp_hint("add 'data: {train: FILE.tok}' (token shards come from tools/make_token_data.py)");
        return -EINVAL;
    }
    if (r->model_path[0] == '\0' && r->model.hidden_size <= 0) {
        sdp_err(-EINVAL,
                "recipe %s: no model: set model.path, model.preset or model.arch with sizes",
                r->file);
        return -EINVAL;
    }
    if (r->model.hidden_size > 0 && sdp_model_validate(&r->model, why, sizeof(why)) != 0)
        return sdp_err(-EINVAL, "recipe %s: model is not valid: %s", r->file, why);
    if (r->seq_len < 1 || r->steps < 1 || r->global_batch < 1 || r->micro_batch < 1)
        return sdp_err(-EINVAL,
                       "recipe %s: data.seq_len=%d, train.steps=%d, batch.global=%d and "
                       "batch.micro=%d must all be >= 1",
                       r->file, r->seq_len, r->steps, r->global_batch, r->micro_batch);
    if (r->global_batch % r->micro_batch != 0)
        return sdp_err(-EINVAL, "recipe %s: batch.global=%d is not a multiple of batch.micro=%d",
                       r->file, r->global_batch, r->micro_batch);
    if (r->ranks < 1 || r->ranks > 64 || r->global_batch % r->ranks != 0) {
        sdp_err(-EINVAL, "recipe %s: batch.global=%d cannot be shared by train.ranks=%d", r->file,
                r->global_batch, r->ranks);
        sdp_hint("every rank takes batch.global / ranks sequences: pick ranks (1..64) dividing "
                 "batch.global");
        return -EINVAL;
    }
    if (r->nccl && r->gpus == 0) {
        sdp_err(-EINVAL,
                "recipe %s: train.collectives nccl needs the ranks on GPUs, train.gpus is 0",
                r->file);
        sdp_hint("set train.collectives: starpu for CPU ranks");
        return -EINVAL;
    }
    if (r->grad_bf16 > 0 && r->ranks > 1) {
        sdp_err(-EINVAL, "recipe %s: train.grad_dtype bf16 is for one rank, train.ranks is %d",
                r->file, r->ranks);
        sdp_hint("set train.grad_dtype: fp32 for a multi-rank run (each rank's fp32 gradient is "
                 "reduced), or train.ranks: 1");
        return -EINVAL;
    }
    if (r->work_on_gpu &&
        (r->param_delay || r->param_sharded || r->gpu_memory_gib > 0 || r->window > 0)) {
        sdp_err(-EINVAL,
                "recipe %s: train.work_home gpu keeps every working copy on the GPUs; it does not "
                "go with param_delay 1, param_route sharded, gpu_memory_gib or window",
                r->file);
        sdp_hint("drop those keys, or set train.work_home: host");
        return -EINVAL;
    }
    if (r->embed_on_gpu && (r->param_delay || r->param_sharded)) {
        sdp_err(-EINVAL,
                "recipe %s: train.embed_home gpu keeps the embedding's working copy on the GPUs; "
                "it does not go with param_delay 1 or param_route sharded",
                r->file);
        sdp_hint("drop those keys, or set train.embed_home: host");
        return -EINVAL;
    }
    if (r->model.num_layers > 0 && r->gpu_update > r->model.num_layers) {
        sdp_err(-EINVAL,
                "recipe %s: train.gpu_update (or --gpu-update) %d exceeds the model's %d layers",
                r->file, r->gpu_update, r->model.num_layers);
        sdp_hint("lower train.gpu_update or --gpu-update (0: every update on the host)");
        return -EINVAL;
    }
    if (r->model.num_layers > 0 && r->keep_last > r->model.num_layers) {
        sdp_err(-EINVAL, "recipe %s: train.keep_last=%d exceeds the model's %d layers", r->file,
                r->keep_last, r->model.num_layers);
        sdp_hint("lower train.keep_last (0: every layer recomputed)");
        return -EINVAL;
    }
    if (r->model.num_layers > 0 && r->keep_mlp > r->model.num_layers) {
        sdp_err(-EINVAL, "recipe %s: train.keep_mlp=%d exceeds the model's %d layers", r->file,
                r->keep_mlp, r->model.num_layers);
        sdp_hint("lower train.keep_mlp (0: every recomputed layer recomputes its MLP)");
        return -EINVAL;
    }
    if (!(r->chunk_mib > 0) || !(r->lr > 0))
        return sdp_err(-EINVAL, "recipe %s: train.chunk_mib=%g and optimizer.lr=%g must be > 0",
                       r->file, r->chunk_mib, r->lr);
    if (r->model.max_position_embeddings > 0 && r->seq_len > r->model.max_position_embeddings) {
        sdp_err(-EINVAL,
                "recipe %s: data.seq_len=%d exceeds the model's max_position_embeddings=%d",
                r->file, r->seq_len, r->model.max_position_embeddings);
        sdp_hint("lower data.seq_len");
        return -EINVAL;
    }
    return 0;
}

int sdp_grad_bf16_choice(int grad_dtype, int ranks, int on_gpu)
{
    return grad_dtype > 0 || (grad_dtype < 0 && ranks == 1 && on_gpu);
}

int sdp_recipe_grad_bf16(const struct sdp_recipe *r, int on_gpu)
{
    return sdp_grad_bf16_choice(r->grad_bf16, r->ranks, on_gpu);
}

int sdp_recipe_grad_routes(const struct sdp_recipe *r, int ngroups, unsigned char *gpu)
{
    const char *p = r->grad_route_groups;
    for (int i = 0; i < ngroups; i++)
        gpu[i] = (unsigned char)r->grad_route_gpu;
    while (*p) {
        int route, a, b, n = 0;
        if (!strncmp(p, "gpu:", 4))
            route = 1;
        else if (!strncmp(p, "cpu:", 4))
            route = 0;
        else
            goto bad;
        p += 4;
        if (sscanf(p, "%d%n", &a, &n) != 1)
            goto bad;
        p += n;
        b = a;
        if (*p == '-') {
            if (sscanf(p + 1, "%d%n", &b, &n) != 1)
                goto bad;
            p += 1 + n;
        }
        if (a < 0 || b < a || b >= ngroups) {
            sdp_err(-EINVAL, "recipe %s: train.grad_route_groups: groups %d-%d outside 0-%d",
                    r->file, a, b, ngroups - 1);
            sdp_hint("groups are 0 (embedding), 1..L (layers) and L+1 (final norm, LM head)");
            return -EINVAL;
        }
        for (int i = a; i <= b; i++)
            gpu[i] = (unsigned char)route;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return 0;
bad:
    sdp_err(-EINVAL, "recipe %s: train.grad_route_groups '%s' is malformed near '%s'", r->file,
            r->grad_route_groups, p);
    sdp_hint("write ROUTE:FIRST-LAST entries separated by commas, e.g. \"gpu:1-18,cpu:19-36\"");
    return -EINVAL;
}

/* Warmup: lr * (s+1) / warmup for s < warmup.  Then, with progress
 * p = (s - warmup) / (steps - warmup) clamped to [0, 1] and lr_min = lr * min_lr_ratio:
 *   cosine    lr_min + 0.5 (lr - lr_min) (1 + cos(pi p))   (Loshchilov & Hutter, SGDR, 2017)
 *   linear    lr_min + (lr - lr_min) (1 - p)
 *   constant  lr */
double sdp_recipe_lr_at(const struct sdp_recipe *r, int s)
{
    double lr = r->lr, lr_min = r->lr * r->min_lr_ratio, p;
    int span = r->steps - r->warmup_steps;

    if (s < r->warmup_steps)
        return lr * (double)(s + 1) / (double)r->warmup_steps;
    if (r->lr_schedule == SDP_LR_CONSTANT)
        return lr;
    p = span > 0 ? (double)(s - r->warmup_steps) / (double)span : 1.0;
    if (p > 1)
        p = 1;
    if (p < 0)
        p = 0;
    if (r->lr_schedule == SDP_LR_LINEAR)
        return lr_min + (lr - lr_min) * (1 - p);
    return lr_min + 0.5 * (lr - lr_min) * (1 + cos(M_PI * p));
}
