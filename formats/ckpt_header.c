/* SPDX-License-Identifier: MIT */
/* The checkpoint header codec (format in ckpt_format.h): the model configuration as JSON, the
 * JSON header with its tensor table, the layout of the file and the fixed header.  Plain C, no
 * StarPU.  Tests: tests/runtime/test_ckpt.c, tests/fuzz/fuzz_ckpt.c. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "base/sdp_log.h"
#include "formats/ckpt_format.h"

#define FIXED_NBYTES SDP_CKPT_FIXED_NBYTES
#define ALIGN        SDP_CKPT_ALIGN
#define NKINDS       SDP_CKPT_NKINDS

static const char *const kind_names[NKINDS] = { "master", "m", "v" };

const char *sdp_ckpt_kind_name(int kind)
{
    return kind >= 0 && kind < NKINDS ? kind_names[kind] : "?";
}

void sdp_ckpt_header_free(struct sdp_ckpt_header *h)
{
    free(h->t);
    h->t = NULL;
    free(h->expert_steps);
    h->expert_steps = NULL;
}

/* ---- little-endian fields, layout ---- */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t align_up(uint64_t x)
{
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}

/* ---- model configuration <-> JSON ---- */

struct cfg_field {
    const char *name;
    int is_double;
    size_t off;
    int since_rope_kinds; /* absent from headers written before yarn, linear and dynamic (1), or
                             before Qwen3-MoE (2): 0 */
};

/* clang-format off */
#define CFG_INT(f) { #f, 0, offsetof(struct sdp_model_cfg, f), 0 }
#define CFG_DBL(f) { #f, 1, offsetof(struct sdp_model_cfg, f), 0 }
#define ROPE_INT(f) { #f, 0, offsetof(struct sdp_model_cfg, f), 1 }
#define ROPE_DBL(f) { #f, 1, offsetof(struct sdp_model_cfg, f), 1 }
#define MOE_INT(f) { #f, 0, offsetof(struct sdp_model_cfg, f), 2 }
#define MOE_DBL(f) { #f, 1, offsetof(struct sdp_model_cfg, f), 2 }
static const struct cfg_field cfg_fields[] = {
    CFG_INT(vocab_size), CFG_INT(hidden_size), CFG_INT(intermediate_size), CFG_INT(num_layers),
    CFG_INT(num_heads), CFG_INT(num_kv_heads), CFG_INT(head_dim),
    CFG_INT(max_position_embeddings), CFG_DBL(rope_theta), CFG_DBL(rms_norm_eps),
    CFG_INT(tie_word_embeddings), CFG_INT(qk_norm), CFG_DBL(rope_scaling_factor),
    CFG_DBL(rope_low_freq_factor), CFG_DBL(rope_high_freq_factor), CFG_INT(rope_original_max_pos),
    CFG_INT(bos_token_id), CFG_INT(eos_token_id),
    CFG_DBL(initializer_range),
    ROPE_INT(rope_type), ROPE_DBL(rope_beta_fast), ROPE_DBL(rope_beta_slow),
    ROPE_DBL(rope_attention_factor), ROPE_DBL(rope_mscale), ROPE_DBL(rope_mscale_all_dim),
    ROPE_INT(rope_no_truncate),
    MOE_INT(moe), MOE_INT(num_experts), MOE_INT(num_experts_per_tok),
    MOE_INT(moe_intermediate_size), MOE_INT(norm_topk_prob), MOE_INT(decoder_sparse_step),
    MOE_DBL(router_aux_loss_coef), MOE_INT(output_router_logits),
};
/* clang-format on */
#define NCFG_FIELDS (sizeof(cfg_fields) / sizeof(cfg_fields[0]))

static int *cfg_int(const struct sdp_model_cfg *cfg, const struct cfg_field *f)
{
    return (int *)((char *)cfg + f->off);
}

static double *cfg_dbl(const struct sdp_model_cfg *cfg, const struct cfg_field *f)
{
    return (double *)((char *)cfg + f->off);
}

static json_t *cfg_to_json(const struct sdp_model_cfg *cfg)
{
    json_t *o = json_object(), *mlp_only = json_array();
    json_object_set_new(o, "arch", json_string(sdp_model_arch_name(cfg->arch)));
    for (int i = 0; i < cfg->num_mlp_only; i++)
        json_array_append_new(mlp_only, json_integer(cfg->mlp_only_layers[i]));
    json_object_set_new(o, "mlp_only_layers", mlp_only);
    for (size_t i = 0; i < NCFG_FIELDS; i++) {
        const struct cfg_field *f = &cfg_fields[i];
        json_object_set_new(o, f->name,
                            f->is_double ? json_real(*cfg_dbl(cfg, f))
                                         : json_integer(*cfg_int(cfg, f)));
    }
    return o;
}

int sdp_ckpt_cfg_compare(const char *path, const struct sdp_model_cfg *a,
                         const struct sdp_model_cfg *b)
{
    if (a->arch != b->arch)
        return sdp_err(-EINVAL, "checkpoint %s was written for arch %s, the recipe has %s", path,
                       sdp_model_arch_name(a->arch), sdp_model_arch_name(b->arch));
    for (size_t i = 0; i < NCFG_FIELDS; i++) {
        const struct cfg_field *f = &cfg_fields[i];
        if (f->is_double && *cfg_dbl(a, f) != *cfg_dbl(b, f))
            return sdp_err(-EINVAL, "checkpoint %s was written for %s %.17g, the recipe has %.17g",
                           path, f->name, *cfg_dbl(a, f), *cfg_dbl(b, f));
        if (!f->is_double && *cfg_int(a, f) != *cfg_int(b, f))
            return sdp_err(-EINVAL, "checkpoint %s was written for %s %d, the recipe has %d", path,
                           f->name, *cfg_int(a, f), *cfg_int(b, f));
    }
    for (int i = 0; i < a->num_mlp_only || i < b->num_mlp_only; i++)
        if (a->num_mlp_only != b->num_mlp_only || a->mlp_only_layers[i] != b->mlp_only_layers[i])
            return sdp_err(-EINVAL, "checkpoint %s was written for other mlp_only_layers", path);
    return 0;
}

/* ---- JSON header, writing ---- */

char *sdp_ckpt_header_json(const struct sdp_ckpt_header *h)
{
    json_t *root = json_object(), *data = json_object(), *rng = json_array(),
           *tensors = json_array();
    char num[32], *text;
    json_object_set_new(root, "format", json_string("slidedp-checkpoint"));
    json_object_set_new(root, "version", json_integer(SDP_CKPT_VERSION));
    json_object_set_new(root, "model", cfg_to_json(&h->cfg));
    json_object_set_new(root, "step", json_integer(h->step));
    json_object_set_new(data, "epoch", json_integer((json_int_t)h->data_epoch));
    json_object_set_new(data, "index", json_integer((json_int_t)h->data_index));
    json_object_set_new(root, "data", data);
    snprintf(num, sizeof(num), "%" PRIu64, h->seed);
    json_object_set_new(root, "seed", json_string(num));
    for (int i = 0; i < h->rng_nwords; i++) {
        snprintf(num, sizeof(num), "%" PRIu64, h->rng[i]);
        json_array_append_new(rng, json_string(num));
    }
    json_object_set_new(root, "rng", rng);
    json_object_set_new(root, "fingerprint", json_string(h->fingerprint));
    json_object_set_new(root, "last_loss",
                        isfinite(h->last_loss) ? json_real(h->last_loss) : json_null());
    json_object_set_new(root, "work_dtype", json_string(h->work_dtype));
    json_object_set_new(root, "chunk_elems", json_integer((json_int_t)h->chunk_elems));
    json_object_set_new(root, "num_groups", json_integer(h->ngroups));
    if (h->expert_steps) { /* every sparse layer's experts' step counts */
        json_t *es = json_object();
        for (int g = 1; g <= h->cfg.num_layers; g++) {
            json_t *a = json_array();
            if (!sdp_model_layer_sparse(&h->cfg, g - 1)) {
                json_decref(a);
                continue;
            }
            for (int e = 0; e < h->cfg.num_experts; e++)
                json_array_append_new(
                    a, json_integer(h->expert_steps[(size_t)g * h->cfg.num_experts + e]));
            snprintf(num, sizeof(num), "%d", g);
            json_object_set_new(es, num, a);
        }
        json_object_set_new(root, "expert_steps", es);
    }
    if (h->lora.rank > 0)
        json_object_set_new(root, "lora",
                            json_pack("{s:i, s:f, s:i, s:i, s:i}", "rank", h->lora.rank, "alpha",
                                      h->lora.alpha, "targets", (int)h->lora.targets, "first",
                                      h->lora.first, "last", h->lora.last));
    for (int i = 0; i < h->ntensors; i++) {
        json_t *t = json_object();
        snprintf(num, sizeof(num), "%08" PRIx32, h->t[i].crc);
        json_object_set_new(t, "group", json_integer(h->t[i].group));
        json_object_set_new(t, "kind", json_string(kind_names[h->t[i].kind]));
        json_object_set_new(t, "nelems", json_integer((json_int_t)h->t[i].nelems));
        json_object_set_new(t, "offset", json_integer((json_int_t)h->t[i].offset));
        json_object_set_new(t, "crc32c", json_string(num));
        json_array_append_new(tensors, t);
    }
    json_object_set_new(root, "tensors", tensors);
    text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return text;
}

/* Absolute offsets of the tensors for data starting at data_off; returns the file size. */
static uint64_t layout(struct sdp_ckpt_header *h, uint64_t data_off)
{
    uint64_t off = data_off;
    for (int i = 0; i < h->ntensors; i++) {
        h->t[i].offset = off;
        off += align_up(h->t[i].nelems * sizeof(float));
    }
    return off;
}

int sdp_ckpt_header_layout(struct sdp_ckpt_header *h, char **json_out)
{
    char *json = NULL;
    /* The JSON holds absolute offsets, which depend on its own length: iterate until the data
     * start covers it (the length only grows with the offsets, so this ends in a few rounds). */
    do {
        h->data_off = align_up(FIXED_NBYTES + (json ? strlen(json) : 0));
        h->file_nbytes = layout(h, h->data_off);
        free(json);
        json = sdp_ckpt_header_json(h);
        if (!json)
            return sdp_err(-ENOMEM, "checkpoint header of %d tensors", h->ntensors);
    } while (FIXED_NBYTES + strlen(json) > h->data_off);
    *json_out = json;
    return 0;
}

void sdp_ckpt_header_pack(unsigned char *head, const struct sdp_ckpt_header *h, const char *json)
{
    size_t json_nbytes = strlen(json);
    memset(head, 0, (size_t)h->data_off);
    memcpy(head, SDP_CKPT_MAGIC, 8);
    put_u32(head + 8, SDP_CKPT_VERSION);
    put_u32(head + 12, 0);
    put_u64(head + 16, json_nbytes);
    put_u64(head + 24, h->data_off);
    put_u64(head + 32, h->file_nbytes);
    memcpy(head + FIXED_NBYTES, json, json_nbytes);
    put_u32(head + 60, sdp_crc32c(sdp_crc32c(0, head, 60), json, json_nbytes));
}

/* ---- JSON header, reading ---- */

static int bad(const char *path, const char *key, const char *why)
{
    return sdp_err(-EINVAL, "checkpoint %s: header key \"%s\" %s", path, key, why);
}

static int get_int(const char *path, json_t *o, const char *key, json_int_t lo, json_int_t hi,
                   json_int_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return bad(path, key, "is missing or not an integer");
    *out = json_integer_value(v);
    if (*out < lo || *out > hi)
        return bad(path, key, "is out of range");
    return 0;
}

static int get_u64s(const char *path, json_t *v, const char *key, uint64_t *out)
{
    const char *s = json_string_value(v);
    char *end;
    if (!s || !*s || *s < '0' || *s > '9')
        return bad(path, key, "is missing or not a decimal string");
    errno = 0;
    *out = strtoull(s, &end, 10);
    if (*end || errno)
        return bad(path, key, "is not a 64-bit unsigned decimal");
    return 0;
}

static int parse_cfg(const char *path, json_t *o, struct sdp_model_cfg *cfg)
{
    const char *arch = json_string_value(json_object_get(o, "arch"));
    char why[256];
    memset(cfg, 0, sizeof(*cfg));
    if (!json_is_object(o))
        return bad(path, "model", "is missing or not an object");
    if (arch && !strcmp(arch, sdp_model_arch_name(SDP_ARCH_QWEN3)))
        cfg->arch = SDP_ARCH_QWEN3;
    else if (arch && !strcmp(arch, sdp_model_arch_name(SDP_ARCH_LLAMA)))
        cfg->arch = SDP_ARCH_LLAMA;
    else
        return bad(path, "model.arch", "is not a known architecture");
    for (size_t i = 0; i < NCFG_FIELDS; i++) {
        const struct cfg_field *f = &cfg_fields[i];
        json_t *v = json_object_get(o, f->name);
        if (!v && f->since_rope_kinds)
            continue; /* an older header: llama3 or none, dense, as it was written */
        if (f->is_double) {
            if (!json_is_number(v))
                return bad(path, f->name, "is missing or not a number");
            *cfg_dbl(cfg, f) = json_number_value(v);
        } else {
            json_int_t x;
            int rc = get_int(path, o, f->name, INT32_MIN, INT32_MAX, &x);
            if (rc)
                return rc;
            *cfg_int(cfg, f) = (int)x;
        }
    }
    json_t *mo = json_object_get(o, "mlp_only_layers"), *e;
    size_t i;
    if (mo && (!json_is_array(mo) || json_array_size(mo) > SDP_MOE_MAX_MLP_ONLY))
        return bad(path, "model.mlp_only_layers", "is not a list of at most 256 layer indices");
    json_array_foreach (mo, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) >= cfg->num_layers)
            return bad(path, "model.mlp_only_layers", "holds an entry that is not a layer index");
        cfg->mlp_only_layers[i] = (int)json_integer_value(e);
    }
    cfg->num_mlp_only = mo ? (int)json_array_size(mo) : 0;
    if (sdp_model_validate(cfg, why, sizeof(why)) != 0)
        return sdp_err(-EINVAL, "checkpoint %s: invalid model: %s", path, why);
    return 0;
}

/* The scalars of the JSON header, in the order of the format. */
static int parse_scalars(const char *path, json_t *root, struct sdp_ckpt_header *h)
{
    json_t *v, *arr;
    json_int_t x, y;
    const char *s;
    int rc;
    if ((rc = get_int(path, root, "version", 0, INT32_MAX, &x)))
        return rc;
    if (x != SDP_CKPT_VERSION)
        return bad(path, "version", "differs from the fixed header");
    if ((rc = parse_cfg(path, json_object_get(root, "model"), &h->cfg)))
        return rc;
    if ((rc = get_int(path, root, "step", 0, INT32_MAX, &x)))
        return rc;
    h->step = (int)x;
    v = json_object_get(root, "data");
    if ((rc = get_int(path, v, "epoch", 0, INT64_MAX, &x)) ||
        (rc = get_int(path, v, "index", 0, INT64_MAX, &y)))
        return rc;
    h->data_epoch = (uint64_t)x;
    h->data_index = (uint64_t)y;
    if ((rc = get_u64s(path, json_object_get(root, "seed"), "seed", &h->seed)))
        return rc;
    arr = json_object_get(root, "rng");
    if (!json_is_array(arr) || json_array_size(arr) > SDP_CKPT_RNG_WORDS)
        return bad(path, "rng", "is not an array of at most 4 strings");
    h->rng_nwords = (int)json_array_size(arr);
    for (int i = 0; i < h->rng_nwords; i++)
        if ((rc = get_u64s(path, json_array_get(arr, (size_t)i), "rng", &h->rng[i])))
            return rc;
    s = json_string_value(json_object_get(root, "fingerprint"));
    if (!s || strlen(s) >= sizeof(h->fingerprint))
        return bad(path, "fingerprint", "is missing or longer than 127 bytes");
    strcpy(h->fingerprint, s);
    /* optional: the loss of the last step done (null or absent when unknown) */
    h->last_loss = json_is_number(json_object_get(root, "last_loss"))
                       ? json_number_value(json_object_get(root, "last_loss"))
                       : NAN;
    s = json_string_value(json_object_get(root, "work_dtype"));
    if (!s || (strcmp(s, "f32") && strcmp(s, "bf16")))
        return bad(path, "work_dtype", "is not f32 or bf16");
    strcpy(h->work_dtype, s);
    if ((rc = get_int(path, root, "chunk_elems", 1, INT64_MAX, &x)))
        return rc;
    h->chunk_elems = (size_t)x;
    return 0;
}

/* The optional "lora" object: a LoRA run's adapters, checked against the model. */
static int parse_lora(const char *path, json_t *root, struct sdp_ckpt_header *h)
{
    json_t *o = json_object_get(root, "lora"), *a;
    json_int_t r, t, f, l;
    char why[256];
    int rc;
    memset(&h->lora, 0, sizeof(h->lora));
    if (!o)
        return 0;
    a = json_object_get(o, "alpha");
    if ((rc = get_int(path, o, "rank", 1, 65536, &r)) ||
        (rc = get_int(path, o, "targets", 1, 1 << 20, &t)) ||
        (rc = get_int(path, o, "first", 0, 1 << 20, &f)) ||
        (rc = get_int(path, o, "last", 0, 1 << 20, &l)))
        return rc;
    if (!json_is_number(a))
        return bad(path, "lora", "has no number alpha");
    h->lora = (struct sdp_lora_cfg){ .rank = (int)r,
                                     .alpha = json_number_value(a),
                                     .targets = (unsigned)t,
                                     .first = (int)f,
                                     .last = (int)l };
    if (sdp_lora_validate(&h->lora, &h->cfg, why, sizeof(why)))
        return sdp_err(-EINVAL, "checkpoint %s: lora: %s", path, why);
    return 0;
}

/* "expert_steps" of a model with sparse layers (ignored otherwise): each sparse group's E counts,
 * each in [0, step]. */
static int parse_experts(const char *path, json_t *root, struct sdp_ckpt_header *h)
{
    json_t *o = json_object_get(root, "expert_steps"), *a, *e;
    const int E = h->cfg.num_experts;
    char key[16];
    size_t i;
    h->expert_steps = NULL;
    if (sdp_model_num_sparse_layers(&h->cfg) == 0)
        return 0;
    if (!json_is_object(o))
        return bad(path, "expert_steps", "is missing or not an object (a Qwen3-MoE model)");
    if (!(h->expert_steps = calloc((size_t)h->ngroups * (size_t)E, sizeof(*h->expert_steps))))
        return sdp_err(-ENOMEM, "checkpoint %s: expert steps", path);
    for (int g = 1; g <= h->cfg.num_layers; g++) {
        if (!sdp_model_layer_sparse(&h->cfg, g - 1))
            continue;
        snprintf(key, sizeof(key), "%d", g);
        a = json_object_get(o, key);
        if (!json_is_array(a) || json_array_size(a) != (size_t)E)
            return bad(path, "expert_steps", "lacks a sparse layer's group or has not E entries");
        json_array_foreach (a, i, e) {
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > h->step)
                return bad(path, "expert_steps", "holds a count outside [0, step]");
            h->expert_steps[(size_t)g * E + i] = (int32_t)json_integer_value(e);
        }
    }
    return 0;
}

/* The elements of group g's tensors: the group's, or with LoRA its adapters' (0 without). */
static uint64_t group_nelems(const struct sdp_ckpt_header *h, int g)
{
    if (h->lora.rank < 1)
        return sdp_model_group_nelems(&h->cfg, g);
    return g >= 1 && g <= h->cfg.num_layers ? sdp_lora_layer_elems(&h->lora, &h->cfg, g) : 0;
}

/* num_groups and the tensor table, checked against the model and the fixed header. */
static int parse_table(const char *path, json_t *root, struct sdp_ckpt_header *h)
{
    json_t *arr;
    json_int_t x, y;
    uint64_t expect;
    const char *s;
    int rc;
    if ((rc = get_int(path, root, "num_groups", 1, 1 << 20, &x)))
        return rc;
    h->ngroups = (int)x;
    if (h->ngroups != sdp_model_num_groups(&h->cfg))
        return bad(path, "num_groups", "does not match the model");
    if ((rc = parse_lora(path, root, h)))
        return rc;
    arr = json_object_get(root, "tensors");
    h->ntensors = NKINDS * h->ngroups;
    if (!json_is_array(arr) || json_array_size(arr) != (size_t)h->ntensors)
        return bad(path, "tensors", "is not an array of 3 entries per group");
    h->t = calloc((size_t)h->ntensors, sizeof(*h->t));
    if (!h->t)
        return sdp_err(-ENOMEM, "checkpoint %s: %d tensors", path, h->ntensors);
    /* The layout is fully determined by the model: tensors in table order, back to back. */
    expect = h->data_off;
    for (int i = 0; i < h->ntensors; i++) {
        struct sdp_ckpt_tensor *t = &h->t[i];
        json_t *e = json_array_get(arr, (size_t)i);
        char *end;
        if ((rc = get_int(path, e, "group", 0, h->ngroups - 1, &x)))
            return rc;
        t->group = (int)x;
        s = json_string_value(json_object_get(e, "kind"));
        t->kind = i % NKINDS;
        if (t->group != i / NKINDS || !s || strcmp(s, kind_names[t->kind]))
            return sdp_err(-EINVAL, "checkpoint %s: tensor table entry %d is not group %d, %s",
                           path, i, i / NKINDS, kind_names[i % NKINDS]);
        if ((rc = get_int(path, e, "nelems", h->lora.rank > 0 ? 0 : 1, INT64_MAX, &x)) ||
            (rc = get_int(path, e, "offset", 0, INT64_MAX, &y)))
            return rc;
        t->nelems = (uint64_t)x;
        t->offset = (uint64_t)y;
        if (t->nelems != group_nelems(h, t->group) || t->offset != expect)
            return sdp_err(
                -EINVAL,
                "checkpoint %s: tensor %d (group %d, %s): %" PRIu64 " elements at offset %" PRIu64
                ", the model implies %" PRIu64 " at %" PRIu64,
                path, i, t->group, s, t->nelems, t->offset, group_nelems(h, t->group), expect);
        expect += align_up(t->nelems * sizeof(float));
        s = json_string_value(json_object_get(e, "crc32c"));
        if (!s || strlen(s) != 8 || (t->crc = (uint32_t)strtoul(s, &end, 16), *end))
            return bad(path, "crc32c", "is not 8 hex digits");
    }
    if (expect != h->file_nbytes)
        return sdp_err(-EINVAL,
                       "checkpoint %s: the tensors end at byte %" PRIu64 ", the header says the "
                       "file has %" PRIu64,
                       path, expect, h->file_nbytes);
    return 0;
}

int sdp_ckpt_header_parse(const char *path, const char *text, size_t len, struct sdp_ckpt_header *h)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc;
    if (!root)
        return sdp_err(-EINVAL, "checkpoint %s: JSON header: %s (line %d)", path, jerr.text,
                       jerr.line);
    if (!json_is_object(root))
        rc = bad(path, "(root)", "is not an object");
    else if ((rc = parse_scalars(path, root, h)) == 0 && (rc = parse_table(path, root, h)) == 0)
        rc = parse_experts(path, root, h);
    json_decref(root);
    if (rc)
        sdp_ckpt_header_free(h);
    return rc;
}
