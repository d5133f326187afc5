/* SPDX-License-Identifier: MIT */
/* Checks formats/hfconfig.c on the published config.json of Qwen3-0.6B and Llama-3.2-1B (committed
 * under tests/formats/data/): every parsed field against the same file read here with plain
 * jansson, the Qwen3 shapes against the qwen3-0.6b preset of models/, and the parameter counts
 * against the counts the hub lists (0.6 B, 1.24 B).  Then write/read round trips, the variants
 * transformers accepts (eos lists, rope_parameters, architectures without model_type, absent
 * head_dim/num_key_value_heads), and bad configs (missing field, attention_bias, unknown rope type,
 * gpt2, MoE, ...) each rejected with -EINVAL. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/sdp_models.h"
#include "formats/hfconfig.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_files.h"

static const char *fixture(const char *name)
{
    static char buf[2][4200];
    static int k;
    const char *top = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    char *p = buf[k++ % 2];
    snprintf(p, 4200, "%s/tests/formats/data/%s", top, name);
    return p;
}

static long long jint(json_t *root, const char *key)
{
    return json_integer_value(json_object_get(root, key));
}

static double jnum(json_t *root, const char *key)
{
    return json_number_value(json_object_get(root, key));
}

/* Every field of cfg against the raw JSON. */
static void compare_with_json(const char *label, const struct sdp_model_cfg *c, json_t *j)
{
    json_t *rs = json_object_get(j, "rope_scaling");
    CHECK(c->vocab_size == jint(j, "vocab_size"), "%s vocab_size %d", label, c->vocab_size);
    CHECK(c->hidden_size == jint(j, "hidden_size"), "%s hidden_size %d", label, c->hidden_size);
    CHECK(c->intermediate_size == jint(j, "intermediate_size"), "%s intermediate_size", label);
    CHECK(c->num_layers == jint(j, "num_hidden_layers"), "%s num_hidden_layers", label);
    CHECK(c->num_heads == jint(j, "num_attention_heads"), "%s num_attention_heads", label);
    CHECK(c->num_kv_heads == jint(j, "num_key_value_heads"), "%s num_key_value_heads", label);
    CHECK(c->head_dim == jint(j, "head_dim"), "%s head_dim %d", label, c->head_dim);
    CHECK(c->max_position_embeddings == jint(j, "max_position_embeddings"), "%s max_pos", label);
    CHECK(c->rope_theta == jnum(j, "rope_theta"), "%s rope_theta %g", label, c->rope_theta);
    CHECK(c->rms_norm_eps == jnum(j, "rms_norm_eps"), "%s rms_norm_eps %g", label, c->rms_norm_eps);
    CHECK(c->initializer_range == jnum(j, "initializer_range"), "%s initializer_range", label);
    CHECK(c->tie_word_embeddings == json_is_true(json_object_get(j, "tie_word_embeddings")),
          "%s tie_word_embeddings", label);
    CHECK(c->bos_token_id == jint(j, "bos_token_id"), "%s bos %d", label, c->bos_token_id);
    CHECK(c->eos_token_id == jint(j, "eos_token_id"), "%s eos %d", label, c->eos_token_id);
    CHECK(c->qk_norm == !strcmp(json_string_value(json_object_get(j, "model_type")), "qwen3"),
          "%s qk_norm", label);
    if (json_is_object(rs)) {
        CHECK(c->rope_scaling_factor == jnum(rs, "factor") &&
                  c->rope_low_freq_factor == jnum(rs, "low_freq_factor") &&
                  c->rope_high_freq_factor == jnum(rs, "high_freq_factor") &&
                  c->rope_original_max_pos == jint(rs, "original_max_position_embeddings"),
              "%s rope_scaling fields", label);
    } else {
        CHECK(c->rope_scaling_factor == 0.0, "%s rope scaling set", label);
    }
}

static int same_cfg(const struct sdp_model_cfg *a, const struct sdp_model_cfg *b)
{
    return a->arch == b->arch && a->vocab_size == b->vocab_size &&
           a->hidden_size == b->hidden_size && a->intermediate_size == b->intermediate_size &&
           a->num_layers == b->num_layers && a->num_heads == b->num_heads &&
           a->num_kv_heads == b->num_kv_heads && a->head_dim == b->head_dim &&
           a->max_position_embeddings == b->max_position_embeddings &&
           a->rope_theta == b->rope_theta && a->rms_norm_eps == b->rms_norm_eps &&
           a->tie_word_embeddings == b->tie_word_embeddings && a->qk_norm == b->qk_norm &&
           a->rope_scaling_factor == b->rope_scaling_factor &&
           a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_max_pos == b->rope_original_max_pos && a->rope_type == b->rope_type &&
           a->rope_beta_fast == b->rope_beta_fast && a->rope_beta_slow == b->rope_beta_slow &&
           a->rope_attention_factor == b->rope_attention_factor &&
           a->rope_mscale == b->rope_mscale && a->rope_mscale_all_dim == b->rope_mscale_all_dim &&
           a->rope_no_truncate == b->rope_no_truncate && a->bos_token_id == b->bos_token_id &&
           a->eos_token_id == b->eos_token_id && a->initializer_range == b->initializer_range;
}

/* Load a modified copy of a fixture: json edited by the caller, written to tmp, parsed. */
static int load_json(json_t *j, struct sdp_model_cfg *c)
{
    const char *p = sdp_test_path("variant.json");
    if (json_dump_file(j, p, JSON_INDENT(1)) != 0) {
        printf("FAIL: cannot write %s\n", p);
        sdp_test_nfail++;
        return -999;
    }
    return sdp_hfconfig_load(p, c);
}

static void expect_bad(const char *what, const char *fix, const char *key, json_t *val)
{
    json_error_t jerr;
    json_t *j = json_load_file(fixture(fix), 0, &jerr);
    struct sdp_model_cfg c;
    if (!j) {
        printf("FAIL: cannot load %s\n", fixture(fix));
        sdp_test_nfail++;
        return;
    }
    if (val)
        json_object_set_new(j, key, val);
    else
        json_object_del(j, key);
    int rc = load_json(j, &c);
    printf("bad config: %-34s -> %d\n", what, rc);
    CHECK(rc == -EINVAL, "%s: rc %d, expected -EINVAL", what, rc);
    json_decref(j);
}

static void test_fixtures(void)
{
    const char *names[2] = { "qwen3-0.6b.config.json", "llama-3.2-1b.config.json" };
    /* parameter counts the hub lists for these models: 0.6 B and 1.24 B, to the digits shown */
    const double hub_billions[2] = { 0.6, 1.24 }, half_ulp[2] = { 0.05, 0.005 };
    for (int f = 0; f < 2; f++) {
        struct sdp_model_cfg c, back;
        json_error_t jerr;
        json_t *j = json_load_file(fixture(names[f]), 0, &jerr);
        CHECK(j != NULL, "cannot read %s (set top_srcdir?)", fixture(names[f]));
        if (!j)
            continue;
        int rc = sdp_hfconfig_load(fixture(names[f]), &c);
        CHECK(rc == 0, "%s: rc %d", names[f], rc);
        if (rc) {
            json_decref(j);
            continue;
        }
        compare_with_json(names[f], &c, j);
        double p = (double)sdp_model_num_params(&c) / 1e9;
        printf(
            "%s: arch %s, C %d, L %d, NH %d/%d, HD %d, theta %g, eps %g, tied %d, rope factor %g; "
            "%.4f B params (hub: %.2f B)\n",
            names[f], sdp_model_arch_name(c.arch), c.hidden_size, c.num_layers, c.num_heads,
            c.num_kv_heads, c.head_dim, c.rope_theta, c.rms_norm_eps, c.tie_word_embeddings,
            c.rope_scaling_factor, p, hub_billions[f]);
        CHECK(fabs(p - hub_billions[f]) <= half_ulp[f], "%s: %.4f B params", names[f], p);
        if (f == 0) {
            struct sdp_model_cfg pre;
            sdp_model_preset("qwen3-0.6b", &pre);
            CHECK(same_cfg(&c, &pre), "Qwen3-0.6B config.json differs from the qwen3-0.6b preset");
        }

        /* round trip through a written config.json, in a directory */
        char dir[64];
        snprintf(dir, sizeof(dir), "model%d", f);
        mkdir(sdp_test_path(dir), 0755);
        rc = sdp_hfconfig_write(sdp_test_path(dir), &c, "bfloat16");
        CHECK(rc == 0, "%s: write rc %d", names[f], rc);
        char cj[128];
        snprintf(cj, sizeof(cj), "%s/config.json", dir);
        CHECK(access(sdp_test_path(cj), F_OK) == 0, "no config.json written in %s", dir);
        rc = sdp_hfconfig_load(sdp_test_path(dir), &back);
        CHECK(rc == 0 && same_cfg(&c, &back), "%s: round trip differs (rc %d)", names[f], rc);
        json_t *w = json_load_file(sdp_test_path(cj), 0, &jerr);
        const char *arch =
            json_string_value(json_array_get(json_object_get(w, "architectures"), 0));
        CHECK(arch && !strcmp(arch, json_string_value(
                                        json_array_get(json_object_get(j, "architectures"), 0))),
              "written architectures %s", arch ? arch : "(none)");
        CHECK(!strcmp(json_string_value(json_object_get(w, "torch_dtype")), "bfloat16") &&
                  !strcmp(json_string_value(json_object_get(w, "dtype")), "bfloat16"),
              "written dtype");
        /* the written file holds the same values as the published one for every key they share */
        const char *key;
        json_t *v;
        int differ = 0, shared = 0;
        json_object_foreach (j, key, v) {
            json_t *wv = json_object_get(w, key);
            if (!wv || !strcmp(key, "transformers_version"))
                continue;
            shared++;
            int eq = json_equal(v, wv) || (json_is_number(v) && json_is_number(wv) &&
                                           json_number_value(v) == json_number_value(wv));
            if (json_is_object(v) && json_is_object(wv)) {
                const char *k2;
                json_t *v2;
                eq = json_object_size(v) == json_object_size(wv);
                json_object_foreach (v, k2, v2) {
                    json_t *w2 = json_object_get(wv, k2);
                    eq = eq && w2 &&
                         (json_equal(v2, w2) || (json_is_number(v2) && json_is_number(w2) &&
                                                 json_number_value(v2) == json_number_value(w2)));
                }
            }
            if (!eq) {
                printf("  written %s differs from the published file\n", key);
                differ++;
            }
        }
        printf("%s: written config.json shares %d keys with the published file, %d differ\n",
               names[f], shared, differ);
        CHECK(differ == 0 && shared >= 24, "written config.json differs");
        json_decref(w);
        json_decref(j);
    }
}

static void test_variants(void)
{
    json_error_t jerr;
    struct sdp_model_cfg ref, c;
    json_t *j;
    int rc;

    /* Llama: eos as a list (Instruct models) and the rope_parameters form of newer transformers */
    sdp_hfconfig_load(fixture("llama-3.2-1b.config.json"), &ref);
    j = json_load_file(fixture("llama-3.2-1b.config.json"), 0, &jerr);
    json_object_set_new(j, "eos_token_id", json_pack("[i,i,i]", 128001, 128008, 128009));
    json_t *rp = json_deep_copy(json_object_get(j, "rope_scaling"));
    json_object_set_new(rp, "rope_theta", json_real(500000.0));
    json_object_set_new(j, "rope_parameters", rp);
    json_object_del(j, "rope_scaling");
    json_object_del(j, "rope_theta");
    rc = load_json(j, &c);
    CHECK(rc == 0 && same_cfg(&c, &ref), "eos list + rope_parameters: rc %d", rc);
    /* "type" instead of "rope_type" (older files) */
    json_object_del(rp, "rope_type");
    json_object_set_new(rp, "type", json_string("llama3"));
    rc = load_json(j, &c);
    CHECK(rc == 0 && same_cfg(&c, &ref), "rope_parameters with \"type\": rc %d", rc);
    json_decref(j);

    /* Qwen3: architectures without model_type; theta inside rope_parameters with rope_type default
     */
    sdp_hfconfig_load(fixture("qwen3-0.6b.config.json"), &ref);
    j = json_load_file(fixture("qwen3-0.6b.config.json"), 0, &jerr);
    json_object_del(j, "model_type");
    json_object_del(j, "rope_theta");
    json_object_del(j, "rope_scaling");
    json_object_set_new(j, "rope_parameters",
                        json_pack("{s:s,s:f}", "rope_type", "default", "rope_theta", 1000000.0));
    rc = load_json(j, &c);
    CHECK(rc == 0 && same_cfg(&c, &ref), "architectures only + rope_parameters: rc %d", rc);
    /* absent head_dim / num_key_value_heads: Qwen3Config's class defaults (128, 32) on an 8B shape
     */
    json_object_set_new(j, "hidden_size", json_integer(4096));
    json_object_set_new(j, "num_attention_heads", json_integer(32));
    json_object_del(j, "head_dim");
    json_object_del(j, "num_key_value_heads");
    rc = load_json(j, &c);
    CHECK(rc == 0 && c.head_dim == 128 && c.num_kv_heads == 32, "qwen3 defaults: HD %d NKV %d",
          c.head_dim, c.num_kv_heads);
    json_decref(j);
    /* Llama: head_dim = C/NH and NKV = NH when absent, bos/eos 1/2 (LlamaConfig) */
    j = json_load_file(fixture("llama-3.2-1b.config.json"), 0, &jerr);
    json_object_del(j, "head_dim");
    json_object_del(j, "num_key_value_heads");
    json_object_del(j, "bos_token_id");
    json_object_del(j, "eos_token_id");
    json_object_set_new(j, "rope_scaling", json_null());
    rc = load_json(j, &c);
    CHECK(rc == 0 && c.head_dim == 2048 / 32 && c.num_kv_heads == 32 && c.bos_token_id == 1 &&
              c.eos_token_id == 2 && c.rope_scaling_factor == 0.0,
          "llama defaults: rc %d HD %d NKV %d bos %d eos %d", rc, c.head_dim, c.num_kv_heads,
          c.bos_token_id, c.eos_token_id);
    json_decref(j);
    printf("variants (eos list, rope_parameters, architectures only, class defaults): checked\n");
}

/* rope_scaling of one kind: read (the fields set), written back (the same keys), read again. */
static void rope_round_trip(const char *label, json_t *rs, int type)
{
    json_error_t jerr;
    struct sdp_model_cfg c, back;
    json_t *j = json_load_file(fixture("qwen3-0.6b.config.json"), 0, &jerr), *w;
    const char *out = sdp_test_path("rope.json");
    int rc;
    json_object_set(j, "rope_scaling", rs);
    rc = load_json(j, &c);
    CHECK(rc == 0 && c.rope_type == type && c.rope_scaling_factor == jnum(rs, "factor"),
          "%s: rc %d type %d factor %g", label, rc, c.rope_type, c.rope_scaling_factor);
    rc = rc ? rc : sdp_hfconfig_write(out, &c, "bfloat16");
    rc = rc ? rc : sdp_hfconfig_load(out, &back);
    CHECK(rc == 0 && same_cfg(&c, &back), "%s: written and read back: rc %d", label, rc);
    w = json_load_file(out, 0, &jerr);
    CHECK(w && json_equal(json_object_get(w, "rope_scaling"), rs), "%s: rope_scaling written",
          label);
    printf("rope_scaling %-8s read, written and read back: %s\n", label,
           w && json_equal(json_object_get(w, "rope_scaling"), rs) ? "ok" : "FAIL");
    json_decref(w);
    json_decref(j);
    json_decref(rs);
}

static void test_rope_kinds(void)
{
    struct sdp_model_cfg c;
    json_t *j;
    json_error_t jerr;
    rope_round_trip("yarn",
                    json_pack("{s:f,s:i,s:s}", "factor", 4.0, "original_max_position_embeddings",
                              32768, "rope_type", "yarn"),
                    SDP_ROPE_YARN);
    rope_round_trip("yarn all",
                    json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:i,s:s,s:b}", "attention_factor", 1.5,
                              "beta_fast", 16.0, "beta_slow", 2.0, "factor", 8.0, "mscale", 1.0,
                              "mscale_all_dim", 0.5, "original_max_position_embeddings", 4096,
                              "rope_type", "yarn", "truncate", 0),
                    SDP_ROPE_YARN);
    rope_round_trip("linear", json_pack("{s:f,s:s}", "factor", 2.0, "rope_type", "linear"),
                    SDP_ROPE_LINEAR);
    rope_round_trip("dynamic", json_pack("{s:f,s:s}", "factor", 2.0, "rope_type", "dynamic"),
                    SDP_ROPE_DYNAMIC);
    /* yarn's optional keys read as given; without original_max_position_embeddings: 0 (the
     * kernels take max_position_embeddings then, as transformers does) */
    j = json_load_file(fixture("qwen3-0.6b.config.json"), 0, &jerr);
    json_object_set_new(j, "rope_scaling",
                        json_pack("{s:s,s:f,s:f,s:b}", "rope_type", "yarn", "factor", 2.0, "mscale",
                                  0.707, "truncate", 0));
    CHECK(load_json(j, &c) == 0 && c.rope_original_max_pos == 0 && c.rope_mscale == 0.707 &&
              c.rope_no_truncate == 1 && c.rope_beta_fast == 0.0,
          "yarn optional keys");
    CHECK(sdp_model_max_seq(&c) > c.max_position_embeddings, "scaled model capped at its context");
    json_decref(j);
}

static void test_bad(void)
{
    struct sdp_model_cfg c;
    const char *q = "qwen3-0.6b.config.json", *l = "llama-3.2-1b.config.json";
    expect_bad("missing hidden_size", q, "hidden_size", NULL);
    expect_bad("missing vocab_size", l, "vocab_size", NULL);
    expect_bad("attention_bias true", q, "attention_bias", json_true());
    expect_bad("mlp_bias true", l, "mlp_bias", json_true());
    expect_bad("use_sliding_window true", q, "use_sliding_window", json_true());
    expect_bad("rope type longrope", l, "rope_scaling",
               json_pack("{s:s,s:f,s:i}", "rope_type", "longrope", "factor", 4.0,
                         "original_max_position_embeddings", 32768));
    expect_bad("rope type ntk (\"type\")", q, "rope_scaling",
               json_pack("{s:s,s:f}", "type", "ntk", "factor", 2.0));
    expect_bad(
        "yarn rope without factor", q, "rope_scaling",
        json_pack("{s:s,s:i}", "rope_type", "yarn", "original_max_position_embeddings", 32768));
    expect_bad("yarn truncate \"no\"", q, "rope_scaling",
               json_pack("{s:s,s:f,s:s}", "rope_type", "yarn", "factor", 4.0, "truncate", "no"));
    expect_bad("linear rope factor 0", q, "rope_scaling",
               json_pack("{s:s,s:f}", "rope_type", "linear", "factor", 0.0));
    expect_bad("dynamic rope factor \"2\"", q, "rope_scaling",
               json_pack("{s:s,s:s}", "rope_type", "dynamic", "factor", "2"));
    expect_bad("llama3 rope without factor", l, "rope_scaling",
               json_pack("{s:s,s:f,s:f,s:i}", "rope_type", "llama3", "low_freq_factor", 1.0,
                         "high_freq_factor", 4.0, "original_max_position_embeddings", 8192));
    expect_bad("model_type gpt2", q, "model_type", json_string("gpt2"));
    expect_bad("model_type qwen2_moe", q, "model_type", json_string("qwen2_moe"));
    expect_bad("num_experts 128", q, "num_experts", json_integer(128));
    expect_bad("hidden_act gelu", q, "hidden_act", json_string("gelu"));
    expect_bad("hidden_size as a string", q, "hidden_size", json_string("1024"));
    expect_bad("heads 12 not a multiple of kv 8", q, "num_attention_heads", json_integer(12));
    expect_bad("tie_word_embeddings 1 (not bool)", q, "tie_word_embeddings", json_integer(1));
    expect_bad("sliding layer_types", q, "layer_types",
               json_pack("[s,s]", "full_attention", "sliding_attention"));
    expect_bad("attention_dropout 0.1", q, "attention_dropout", json_real(0.1));

    FILE *f = fopen(sdp_test_path("broken.json"), "w");
    fputs("{\"model_type\": \"qwen3\", ", f);
    fclose(f);
    int rc = sdp_hfconfig_load(sdp_test_path("broken.json"), &c);
    printf("bad config: %-34s -> %d\n", "not JSON", rc);
    CHECK(rc == -EINVAL, "not JSON: rc %d", rc);
    f = fopen(sdp_test_path("array.json"), "w");
    fputs("[1, 2]", f);
    fclose(f);
    rc = sdp_hfconfig_load(sdp_test_path("array.json"), &c);
    CHECK(rc == -EINVAL, "JSON array: rc %d", rc);
    rc = sdp_hfconfig_load(sdp_test_path("missing.json"), &c);
    CHECK(rc == -ENOENT, "missing file: rc %d", rc);
    mkdir(sdp_test_path("empty"), 0755);
    rc = sdp_hfconfig_load(sdp_test_path("empty"), &c);
    CHECK(rc == -ENOENT, "directory without config.json: rc %d", rc);

    /* writer */
    sdp_model_preset("qwen3-0.6b", &c);
    CHECK(sdp_hfconfig_write(sdp_test_path("w.json"), &c, "float16") == -EINVAL,
          "torch_dtype float16");
    c.num_kv_heads = 5;
    CHECK(sdp_hfconfig_write(sdp_test_path("w.json"), &c, "float32") == -EINVAL,
          "invalid cfg written");
    sdp_model_preset("qwen3-0.6b", &c);
    CHECK(sdp_hfconfig_write(sdp_test_path("no/such/dir/config.json"), &c, "float32") == -EIO,
          "write into a missing directory");
    CHECK(access(sdp_test_path("w.json"), F_OK) != 0, "rejected write left a file");
}

int main(void)
{
    if (!sdp_test_mkdtemp("sdp-test-hfconfig"))
        return sdp_test_finish(1);
    test_fixtures();
    test_variants();
    test_rope_kinds();
    test_bad();

    sdp_test_rm_tree(sdp_test_dir());
    return sdp_test_finish(sdp_test_nfail);
}
