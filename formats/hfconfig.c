/* SPDX-License-Identifier: MIT */
/* Hugging Face config.json <-> struct sdp_model_cfg for Qwen3ForCausalLM, LlamaForCausalLM and
 * Qwen3MoeForCausalLM (its MoE keys: formats/hfconfig_moe.c).  Absent keys take the defaults of
 * transformers' Qwen3Config / LlamaConfig / Qwen3MoeConfig, so the model built here is the one
 * transformers builds from the same file.  Every feature we do not implement (attention or MLP
 * bias, sliding window, rope scaling other than llama3, yarn, linear and dynamic, MoE families
 * other than Qwen3-MoE, quantization) is an error naming the key, never silently ignored.  Tests:
 * tests/formats/test_hfconfig.c, tests/formats/test_hfconfig_moe.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/sdp_models.h"
#include "base/fsutil.h"
#include "formats/hfconfig.h"
#include "formats/hfconfig_internal.h"
#include "base/sdp_log.h"

/* ---- reading ---- */
static int get_int(const char *path, json_t *root, const char *key, int required, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required)
            return sdp_err(-EINVAL, "config %s: required key \"%s\" is missing", path, key);
        return 1; /* absent: caller keeps its default */
    }
    if (!json_is_integer(v) || json_integer_value(v) < -2147483647 ||
        json_integer_value(v) > 2147483647)
        return sdp_err(-EINVAL, "config %s: \"%s\" must be an integer that fits 32 bits", path,
                       key);
    *out = (int)json_integer_value(v);
    return 0;
}

/* An optional dimension: absent or null keeps the default; given, it must be positive (0 would
 * silently read as "absent" further on). */
static int get_dim(const char *path, json_t *root, const char *key, int *out)
{
    int rc = get_int(path, root, key, 0, out);
    if (rc == 0 && *out <= 0)
        return sdp_err(-EINVAL, "config %s: \"%s\" = %d must be positive, or null for the default",
                       path, key, *out);
    return rc;
}

static int get_real(const char *path, json_t *obj, const char *where, const char *key, int required,
                    double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return sdp_err(-EINVAL, "config %s: required key \"%s%s\" is missing", path, where,
                           key);
        return 1;
    }
    if (!json_is_number(v))
        return sdp_err(-EINVAL, "config %s: \"%s%s\" must be a number", path, where, key);
    *out = json_number_value(v);
    return 0;
}

int sdp_hfconfig_get_bool(const char *path, json_t *root, const char *key, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return 1;
    if (!json_is_boolean(v))
        return sdp_err(-EINVAL, "config %s: \"%s\" must be true or false", path, key);
    *out = json_is_true(v);
    return 0;
}

/* bos/eos: an integer, a list (first element taken), or null/absent (keeps the default). */
static int get_token(const char *path, json_t *root, const char *key, int *out)
{
    json_t *v = json_object_get(root, key);
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) {
            *out = -1;
            return 0;
        }
        v = json_array_get(v, 0);
    }
    if (!v || json_is_null(v))
        return 1;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 2147483647)
        return sdp_err(-EINVAL,
                       "config %s: \"%s\" must be a non-negative integer or a list of them", path,
                       key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int detect_arch(const char *path, json_t *root, enum sdp_arch *arch, int *moe)
{
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    const char *an = json_string_value(json_array_get(json_object_get(root, "architectures"), 0));
    const char *name = mt ? mt : an;
    int rc;
    if (!name) {
        rc = sdp_err(-EINVAL, "config %s: neither \"model_type\" nor \"architectures\" is set",
                     path);
        sdp_hint("a Hugging Face config.json names its model_type, e.g. \"qwen3\" or \"llama\"");
        return rc;
    }
    *moe = 0;
    if (!strcmp(name, "qwen3") || (!mt && !strcmp(name, "Qwen3ForCausalLM"))) {
        *arch = SDP_ARCH_QWEN3;
        return 0;
    }
    if (!strcmp(name, "qwen3_moe") || (!mt && !strcmp(name, "Qwen3MoeForCausalLM"))) {
        *arch = SDP_ARCH_QWEN3;
        *moe = 1;
        return 0;
    }
    if (!strcmp(name, "llama") || (!mt && !strcmp(name, "LlamaForCausalLM"))) {
        *arch = SDP_ARCH_LLAMA;
        return 0;
    }
    if (strstr(name, "moe") || strstr(name, "Moe") || !strncmp(name, "mixtral", 7) ||
        !strncmp(name, "Mixtral", 7) || !strncmp(name, "deepseek", 8) ||
        !strncmp(name, "Deepseek", 8)) {
        rc = sdp_err(-EINVAL,
                     "config %s: %s \"%s\": this mixture-of-experts family is not supported", path,
                     mt ? "model_type" : "architectures", name);
        sdp_hint("supported MoE model type: qwen3_moe (Qwen3MoeForCausalLM)");
        return rc;
    }
    rc = sdp_err(-EINVAL, "config %s: %s \"%s\" is not supported", path,
                 mt ? "model_type" : "architectures", name);
    sdp_hint("supported model types: qwen3 (Qwen3ForCausalLM), llama (LlamaForCausalLM), "
             "qwen3_moe (Qwen3MoeForCausalLM)");
    return rc;
}

/* Keys whose presence means a feature we do not implement (MoE keys in a dense model_type). */
static int check_unsupported(const char *path, json_t *root, int moe)
{
    static const char *const moe_keys[] = { "num_experts", "num_local_experts", "n_routed_experts",
                                            "num_experts_per_tok", "moe_intermediate_size" };
    static const char *const off_keys[] = { "attention_bias", "mlp_bias", "use_sliding_window" };
    json_t *v;
    for (size_t i = 0; !moe && i < sizeof(moe_keys) / sizeof(moe_keys[0]); i++) {
        v = json_object_get(root, moe_keys[i]);
        if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0)) {
            int rc =
                sdp_err(-EINVAL, "config %s: key \"%s\" in a dense model_type", path, moe_keys[i]);
            sdp_hint("mixture-of-experts models are read as model_type qwen3_moe");
            return rc;
        }
    }
    for (size_t i = 0; i < sizeof(off_keys) / sizeof(off_keys[0]); i++) {
        v = json_object_get(root, off_keys[i]);
        if (v && !json_is_null(v) && !json_is_false(v))
            return sdp_err(-EINVAL, "config %s: \"%s\" is %s; only false is supported", path,
                           off_keys[i], json_is_true(v) ? "true" : "not a boolean");
    }
    v = json_object_get(root, "hidden_act");
    if (v && !json_is_null(v) && !(json_is_string(v) && !strcmp(json_string_value(v), "silu")))
        return sdp_err(-EINVAL, "config %s: \"hidden_act\" must be \"silu\"", path);
    v = json_object_get(root, "layer_types");
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach (v, i, e) {
            if (!json_is_string(e) || strcmp(json_string_value(e), "full_attention") != 0)
                return sdp_err(-EINVAL, "config %s: \"layer_types\"[%zu] is not \"full_attention\"",
                               path, i);
        }
    }
    v = json_object_get(root, "attention_dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0.0))
        return sdp_err(-EINVAL,
                       "config %s: \"attention_dropout\" must be 0 (dropout is not "
                       "implemented)",
                       path);
    v = json_object_get(root, "quantization_config");
    if (v && !json_is_null(v))
        return sdp_err(-EINVAL,
                       "config %s: \"quantization_config\": quantized checkpoints are not "
                       "supported",
                       path);
    return 0;
}

/* An optional positive integer of a rope_scaling object (0 when absent). */
static int get_pos_int(const char *path, json_t *rs, const char *where, const char *key, int *out)
{
    double x = 0;
    int rc = get_real(path, rs, where, key, 0, &x);
    if (rc < 0)
        return rc;
    if (rc == 0 && (x != floor(x) || x < 1 || x > 2147483647.0))
        return sdp_err(-EINVAL, "config %s: \"%s%s\" = %g must be a positive integer", path, where,
                       key, x);
    *out = rc == 0 ? (int)x : 0;
    return 0;
}

/* YaRN's keys (_compute_yarn_parameters): factor; original_max_position_embeddings (transformers
 * takes max_position_embeddings when absent, stored as 0); the optional rest kept as 0 when
 * absent, so that an export writes back what was read. */
static int parse_yarn(const char *path, json_t *rs, const char *where, struct sdp_model_cfg *cfg)
{
    json_t *t = json_object_get(rs, "truncate");
    int rc;
    if ((rc = get_pos_int(path, rs, where, "original_max_position_embeddings",
                          &cfg->rope_original_max_pos)) < 0 ||
        (rc = get_real(path, rs, where, "attention_factor", 0, &cfg->rope_attention_factor)) < 0 ||
        (rc = get_real(path, rs, where, "beta_fast", 0, &cfg->rope_beta_fast)) < 0 ||
        (rc = get_real(path, rs, where, "beta_slow", 0, &cfg->rope_beta_slow)) < 0 ||
        (rc = get_real(path, rs, where, "mscale", 0, &cfg->rope_mscale)) < 0 ||
        (rc = get_real(path, rs, where, "mscale_all_dim", 0, &cfg->rope_mscale_all_dim)) < 0)
        return rc;
    if (t && !json_is_null(t) && !json_is_boolean(t))
        return sdp_err(-EINVAL, "config %s: \"%struncate\" must be true or false", path, where);
    cfg->rope_no_truncate = json_is_false(t);
    return 0;
}

/* The kind named by rope_type and its keys. */
static int parse_rope_kind(const char *path, json_t *rs, const char *where, const char *type,
                           struct sdp_model_cfg *cfg)
{
    double omp = 0;
    int rc, kind = -1;
    for (int k = 0; k < SDP_ROPE_NTYPES; k++)
        if (!strcmp(type, sdp_model_rope_name(k)))
            kind = k;
    if (kind < 0) {
        rc = sdp_err(-EINVAL, "config %s: \"%srope_type\" = \"%s\" is not supported", path, where,
                     type);
        sdp_hint("supported rope scaling: none (\"default\"), \"llama3\", \"yarn\", \"linear\", "
                 "\"dynamic\"");
        return rc;
    }
    cfg->rope_type = kind;
    if ((rc = get_real(path, rs, where, "factor", 1, &cfg->rope_scaling_factor)) != 0)
        return rc;
    if (!(cfg->rope_scaling_factor > 0.0)) /* 0 would read "none" */
        return sdp_err(-EINVAL, "config %s: \"%sfactor\" = %g must be positive", path, where,
                       cfg->rope_scaling_factor);
    if (kind == SDP_ROPE_YARN)
        return parse_yarn(path, rs, where, cfg);
    if (kind != SDP_ROPE_LLAMA3)
        return 0;
    if ((rc = get_real(path, rs, where, "low_freq_factor", 1, &cfg->rope_low_freq_factor)) != 0 ||
        (rc = get_real(path, rs, where, "high_freq_factor", 1, &cfg->rope_high_freq_factor)) != 0 ||
        (rc = get_real(path, rs, where, "original_max_position_embeddings", 1, &omp)) != 0)
        return rc;
    if (omp != floor(omp) || omp < 1 || omp > 2147483647.0)
        return sdp_err(-EINVAL, "config %s: \"%soriginal_max_position_embeddings\" = %g", path,
                       where, omp);
    cfg->rope_original_max_pos = (int)omp;
    return 0;
}

/* rope_scaling (transformers 4.x) or rope_parameters (5.x): none/"default", or a kind of
 * enum sdp_rope_type. */
static int parse_rope(const char *path, json_t *root, struct sdp_model_cfg *cfg)
{
    json_t *params = json_object_get(root, "rope_parameters");
    json_t *rs = json_object_get(root, "rope_scaling");
    const char *where = "rope_scaling.";
    const char *type;
    int rc;

    if (params && !json_is_null(params) && !json_is_object(params))
        return sdp_err(-EINVAL, "config %s: \"rope_parameters\" must be an object", path);
    rc = get_real(path, root, "", "rope_theta", 0, &cfg->rope_theta);
    if (rc == 1 && params)
        rc = get_real(path, params, "rope_parameters.", "rope_theta", 0, &cfg->rope_theta);
    if (rc < 0)
        return rc;
    if (!rs || json_is_null(rs)) {
        rs = params;
        where = "rope_parameters.";
    }
    if (!rs || json_is_null(rs))
        return 0;
    if (!json_is_object(rs))
        return sdp_err(-EINVAL, "config %s: \"rope_scaling\" must be null or an object", path);
    type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type)
        type = json_string_value(json_object_get(rs, "type"));
    if (!type || !strcmp(type, "default")) {
        if (type || !json_object_get(rs, "factor"))
            return 0;
        return sdp_err(-EINVAL, "config %s: \"%srope_type\" is missing", path, where);
    }
    return parse_rope_kind(path, rs, where, type, cfg);
}

static int parse_config(const char *path, json_t *root, struct sdp_model_cfg *cfg)
{
    struct sdp_model_cfg c = { 0 };
    enum sdp_arch arch;
    char why[256];
    int rc, moe;

    if (!json_is_object(root))
        return sdp_err(-EINVAL, "config %s: not a JSON object", path);
    if ((rc = detect_arch(path, root, &arch, &moe)) != 0 ||
        (rc = check_unsupported(path, root, moe)) != 0)
        return rc;
    if ((rc = get_int(path, root, "vocab_size", 1, &c.vocab_size)) < 0 ||
        (rc = get_int(path, root, "hidden_size", 1, &c.hidden_size)) < 0 ||
        (rc = get_int(path, root, "intermediate_size", 1, &c.intermediate_size)) < 0 ||
        (rc = get_int(path, root, "num_hidden_layers", 1, &c.num_layers)) < 0 ||
        (rc = get_int(path, root, "num_attention_heads", 1, &c.num_heads)) < 0)
        return rc;
    /* absent: the class default (Qwen3Config: 32 KV heads, head_dim 128); null: NH and C/NH */
    if (arch == SDP_ARCH_QWEN3 && !json_object_get(root, "num_key_value_heads"))
        c.num_kv_heads = moe ? 4 : 32; /* Qwen3MoeConfig: 4; its head_dim: C/NH */
    if (arch == SDP_ARCH_QWEN3 && !moe && !json_object_get(root, "head_dim"))
        c.head_dim = 128;
    if ((rc = get_dim(path, root, "num_key_value_heads", &c.num_kv_heads)) < 0 ||
        (rc = get_dim(path, root, "head_dim", &c.head_dim)) < 0)
        return rc;
    if (c.num_heads <= 0)
        return sdp_err(-EINVAL, "config %s: \"num_attention_heads\" = %d", path, c.num_heads);
    sdp_model_defaults(&c, arch); /* NKV = NH and HD = C/NH where still unset */
    if (arch == SDP_ARCH_LLAMA) {
        c.bos_token_id = 1; /* LlamaConfig defaults */
        c.eos_token_id = 2;
    }
    if ((rc = get_int(path, root, "max_position_embeddings", 0, &c.max_position_embeddings)) < 0 ||
        (rc = get_real(path, root, "", "rms_norm_eps", 0, &c.rms_norm_eps)) < 0 ||
        (rc = get_real(path, root, "", "initializer_range", 0, &c.initializer_range)) < 0 ||
        (rc = sdp_hfconfig_get_bool(path, root, "tie_word_embeddings", &c.tie_word_embeddings)) <
            0 ||
        (rc = get_token(path, root, "bos_token_id", &c.bos_token_id)) < 0 ||
        (rc = get_token(path, root, "eos_token_id", &c.eos_token_id)) < 0 ||
        (rc = parse_rope(path, root, &c)) < 0 ||
        (moe && (rc = sdp_hfconfig_moe_read(path, root, &c)) < 0))
        return rc;
    if (json_is_null(json_object_get(root, "bos_token_id")))
        c.bos_token_id = -1;
    if (json_is_null(json_object_get(root, "eos_token_id")))
        c.eos_token_id = -1;
    if (sdp_model_validate(&c, why, sizeof(why)) != 0)
        return sdp_err(-EINVAL, "config %s: %s", path, why);
    if (c.bos_token_id >= c.vocab_size)
        SDP_WARN("config %s: bos_token_id %d is outside the vocabulary of %d", path, c.bos_token_id,
                 c.vocab_size);
    if (c.eos_token_id >= c.vocab_size) /* accepted, as transformers does */
        SDP_WARN("config %s: eos_token_id %d is outside the vocabulary of %d: generation will not "
                 "stop at it",
                 path, c.eos_token_id, c.vocab_size);
    *cfg = c;
    return 0;
}

int sdp_hfconfig_read(const char *path, struct sdp_model_cfg *cfg)
{
    struct stat sb;
    char *file = NULL;
    json_error_t jerr;
    json_t *root;
    int rc;

    if (stat(path, &sb) != 0) {
        if (errno == ENOENT)
            return sdp_err(-ENOENT, "config %s: cannot open", path); /* + errno's text */
        return sdp_err(-EIO, "config %s: %s", path, strerror(errno));
    }
    if (S_ISDIR(sb.st_mode)) {
        file = malloc(strlen(path) + sizeof("/config.json"));
        if (!file)
            return sdp_err(-ENOMEM, "config %s: out of memory", path);
        sprintf(file, "%s/config.json", path);
        if (access(file, F_OK) != 0) {
            rc = sdp_err(-ENOENT, "directory %s has no config.json", path);
            sdp_hint("point to a Hugging Face model directory or to its config.json");
            free(file);
            return rc;
        }
        path = file;
    }
    root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = sdp_err(-EINVAL, "config %s: not valid JSON (line %d column %d: %s)", path, jerr.line,
                     jerr.column, jerr.text);
    } else {
        rc = parse_config(path, root, cfg);
        json_decref(root);
    }
    free(file);
    return rc;
}

int sdp_hfconfig_load(const char *path, struct sdp_model_cfg *cfg)
{
    return sdp_hfconfig_read(path, cfg);
}

/* ---- writing ---- */
static int set(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

static json_t *token_json(int id)
{
    return id >= 0 ? json_integer(id) : json_null();
}

/* Shortest %.{p}g precision (from 7, so that 500000.0 is not printed 5e5) at which every real of
 * the document reads back exactly. */
static char *dump_exact(json_t *root, size_t order)
{
    for (int p = 7; p <= 17; p++) {
        char *s = json_dumps(root, JSON_INDENT(2) | order | JSON_REAL_PRECISION(p));
        json_t *back = s ? json_loads(s, 0, NULL) : NULL;
        int exact = back && json_equal(root, back);
        json_decref(back);
        if (exact || p == 17)
            return s;
        free(s);
    }
    return NULL;
}

/* The shared atomic writer (base/fsutil.c) logs the cause; this file's contract reports any
 * failure but a full disk or missing memory as -EIO. */
static int write_atomic(const char *path, const char *text)
{
    int rc = sdp_write_file_atomic(path, text, strlen(text));
    return rc == 0 || rc == -ENOSPC || rc == -ENOMEM ? rc : -EIO;
}

/* rope_scaling as read (parse_rope): null, or the kind's keys in alphabetical order. */
static json_t *rope_json(const struct sdp_model_cfg *cfg)
{
    const int t = cfg->rope_type;
    json_t *rs;
    int bad;
    if (cfg->rope_scaling_factor == 0.0)
        return json_null();
    rs = json_object();
    bad = !rs;
    if (t == SDP_ROPE_YARN && cfg->rope_attention_factor != 0.0)
        bad = bad || set(rs, "attention_factor", json_real(cfg->rope_attention_factor));
    if (t == SDP_ROPE_YARN && cfg->rope_beta_fast != 0.0)
        bad = bad || set(rs, "beta_fast", json_real(cfg->rope_beta_fast));
    if (t == SDP_ROPE_YARN && cfg->rope_beta_slow != 0.0)
        bad = bad || set(rs, "beta_slow", json_real(cfg->rope_beta_slow));
    bad = bad || set(rs, "factor", json_real(cfg->rope_scaling_factor));
    if (t == SDP_ROPE_LLAMA3) {
        bad = bad || set(rs, "high_freq_factor", json_real(cfg->rope_high_freq_factor));
        bad = bad || set(rs, "low_freq_factor", json_real(cfg->rope_low_freq_factor));
    }
    if (t == SDP_ROPE_YARN && cfg->rope_mscale != 0.0)
        bad = bad || set(rs, "mscale", json_real(cfg->rope_mscale));
    if (t == SDP_ROPE_YARN && cfg->rope_mscale_all_dim != 0.0)
        bad = bad || set(rs, "mscale_all_dim", json_real(cfg->rope_mscale_all_dim));
    if ((t == SDP_ROPE_LLAMA3 || t == SDP_ROPE_YARN) && cfg->rope_original_max_pos > 0)
        bad = bad ||
              set(rs, "original_max_position_embeddings", json_integer(cfg->rope_original_max_pos));
    bad = bad || set(rs, "rope_type", json_string(sdp_model_rope_name(t)));
    if (t == SDP_ROPE_YARN && cfg->rope_no_truncate)
        bad = bad || set(rs, "truncate", json_false());
    if (bad) {
        json_decref(rs);
        return NULL;
    }
    return rs;
}

int sdp_hfconfig_write(const char *path, const struct sdp_model_cfg *cfg, const char *torch_dtype)
{
    const int qwen = cfg->arch == SDP_ARCH_QWEN3, moe = cfg->moe;
    const char *arch_name = moe    ? "Qwen3MoeForCausalLM"
                            : qwen ? "Qwen3ForCausalLM"
                                   : "LlamaForCausalLM";
    char why[256], *text = NULL, *file = NULL;
    struct stat sb;
    json_t *root, *rs;
    int bad, rc;

    if (sdp_model_validate(cfg, why, sizeof(why)) != 0)
        return sdp_err(-EINVAL, "config %s: cannot write an invalid configuration: %s", path, why);
    if (!torch_dtype ||
        (strcmp(torch_dtype, "float32") != 0 && strcmp(torch_dtype, "bfloat16") != 0))
        return sdp_err(-EINVAL, "config %s: torch_dtype \"%s\" must be \"float32\" or \"bfloat16\"",
                       path, torch_dtype ? torch_dtype : "(null)");
    rs = rope_json(cfg);
    /* keys in alphabetical order, as transformers' save_pretrained writes them */
    root = json_object();
    bad = !root || !rs;
    bad = bad || set(root, "architectures", json_pack("[s]", arch_name));
    bad = bad || set(root, "attention_bias", json_false());
    bad = bad || set(root, "attention_dropout", json_real(0.0));
    bad = bad || set(root, "bos_token_id", token_json(cfg->bos_token_id));
    bad = bad || set(root, "dtype", json_string(torch_dtype));
    bad = bad || set(root, "eos_token_id", token_json(cfg->eos_token_id));
    bad = bad || set(root, "head_dim", json_integer(cfg->head_dim));
    bad = bad || set(root, "hidden_act", json_string("silu"));
    bad = bad || set(root, "hidden_size", json_integer(cfg->hidden_size));
    bad = bad || set(root, "initializer_range", json_real(cfg->initializer_range));
    bad = bad || set(root, "intermediate_size", json_integer(cfg->intermediate_size));
    bad = bad || set(root, "max_position_embeddings", json_integer(cfg->max_position_embeddings));
    if (qwen && !moe)
        bad = bad || set(root, "max_window_layers", json_integer(cfg->num_layers));
    else
        bad = bad || set(root, "mlp_bias", json_false());
    bad = bad ||
          set(root, "model_type", json_string(moe ? "qwen3_moe" : sdp_model_arch_name(cfg->arch)));
    bad = bad || set(root, "num_attention_heads", json_integer(cfg->num_heads));
    bad = bad || set(root, "num_hidden_layers", json_integer(cfg->num_layers));
    bad = bad || set(root, "num_key_value_heads", json_integer(cfg->num_kv_heads));
    if (!qwen)
        bad = bad || set(root, "pretraining_tp", json_integer(1));
    bad = bad || set(root, "rms_norm_eps", json_real(cfg->rms_norm_eps));
    bad = bad || json_object_set(root, "rope_scaling", rs) != 0;
    bad = bad || set(root, "rope_theta", json_real(cfg->rope_theta));
    if (qwen)
        bad = bad || set(root, "sliding_window", json_null());
    bad = bad || set(root, "tie_word_embeddings", json_boolean(cfg->tie_word_embeddings));
    bad = bad || set(root, "torch_dtype", json_string(torch_dtype));
    bad = bad || set(root, "use_cache", json_true());
    if (qwen)
        bad = bad || set(root, "use_sliding_window", json_false());
    bad = bad || set(root, "vocab_size", json_integer(cfg->vocab_size));
    bad = bad || (moe && sdp_hfconfig_moe_write(root, cfg) != 0);
    if (!bad) /* dense keys are set in order; the MoE keys join them sorted */
        text = dump_exact(root, moe ? JSON_SORT_KEYS : JSON_PRESERVE_ORDER);
    json_decref(rs);
    json_decref(root);
    if (!text)
        return sdp_err(-ENOMEM, "config %s: building the JSON", path);
    size_t n = strlen(text);
    char *full = realloc(text, n + 2);
    if (!full) {
        free(text);
        return sdp_err(-ENOMEM, "config %s: out of memory", path);
    }
    full[n] = '\n';
    full[n + 1] = '\0';
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        file = malloc(strlen(path) + sizeof("/config.json"));
        if (!file) {
            free(full);
            return sdp_err(-ENOMEM, "config %s: out of memory", path);
        }
        sprintf(file, "%s/config.json", path);
    }
    rc = write_atomic(file ? file : path, full);
    free(file);
    free(full);
    return rc;
}
