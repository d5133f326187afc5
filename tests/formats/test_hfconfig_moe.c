/* SPDX-License-Identifier: MIT */
/* Checks the Qwen3-MoE side of formats/hfconfig.c and models/moe.c: a config of Qwen3-30B-A3B's
 * shape read field by field (sdp_hfconfig_read, sdp_hfconfig_load) and the presets of its shape;
 * transformers' Qwen3MoeConfig defaults; the sparse-layer rule of
 * Qwen3MoeDecoderLayer on cases worked out by hand; write/read round trips; and the refusals, each
 * -EINVAL with a message naming the key (captured from stderr). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/hfconfig.h"
#include "models/sdp_models.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_files.h"

/* Qwen3-30B-A3B's config.json shape (48 layers, 128 experts, top-8, IM 768). */
static json_t *a3b_json(void)
{
    return json_pack(
        "{s:[s],s:b,s:f,s:i,s:i,s:i,s:i,s:s,s:i,s:f,s:i,s:i,s:i,s:[],s:s,s:i,s:b,s:i,s:i,s:i,"
        "s:i,s:i,s:b,s:f,s:n,s:f,s:f,s:n,s:b,s:s,s:b,s:b,s:i}",
        "architectures", "Qwen3MoeForCausalLM", "attention_bias", 0, "attention_dropout", 0.0,
        "bos_token_id", 151643, "decoder_sparse_step", 1, "eos_token_id", 151645, "head_dim", 128,
        "hidden_act", "silu", "hidden_size", 2048, "initializer_range", 0.02, "intermediate_size",
        6144, "max_position_embeddings", 40960, "max_window_layers", 48, "mlp_only_layers",
        "model_type", "qwen3_moe", "moe_intermediate_size", 768, "norm_topk_prob", 1,
        "num_attention_heads", 32, "num_experts", 128, "num_experts_per_tok", 8,
        "num_hidden_layers", 48, "num_key_value_heads", 4, "output_router_logits", 0,
        "rms_norm_eps", 1e-6, "rope_scaling", "rope_theta", 1000000.0, "router_aux_loss_coef",
        0.001, "sliding_window", "tie_word_embeddings", 0, "torch_dtype", "bfloat16", "use_cache",
        1, "use_sliding_window", 0, "vocab_size", 151936);
}

/* Parse j (written to a file) with read (sdp_hfconfig_read) or load; the log into log. */
static int parse(json_t *j, int read, struct sdp_model_cfg *c, char *log, size_t loglen)
{
    const char *p = sdp_test_path("moe.json"), *lp = sdp_test_path("moe.log");
    int rc, fd = open(lp, O_CREAT | O_TRUNC | O_WRONLY, 0644), saved = dup(2);
    FILE *f;
    size_t n;
    json_dump_file(j, p, JSON_INDENT(1));
    fflush(stderr);
    dup2(fd, 2);
    rc = read ? sdp_hfconfig_read(p, c) : sdp_hfconfig_load(p, c);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    f = fopen(lp, "r");
    n = f ? fread(log, 1, loglen - 1, f) : 0;
    log[n] = '\0';
    if (f)
        fclose(f);
    return rc;
}

/* The presets qwen3-30b-a3b (every field config.json sets, as read) and its first 12 layers, whose
 * full fine-tuning (14 bytes a parameter on the host: fp32 master, m, v and the bf16 working copy)
 * fits in 110 GiB of a 125 GiB host. */
static void check_presets(const struct sdp_model_cfg *hf)
{
    struct sdp_model_cfg p, q;
    CHECK(sdp_model_preset("qwen3-30b-a3b", &p) == 0 &&
              sdp_model_preset("qwen3-30b-a3b-l12", &q) == 0,
          "MoE presets");
    CHECK(p.vocab_size == hf->vocab_size && p.hidden_size == hf->hidden_size &&
              p.intermediate_size == hf->intermediate_size && p.num_layers == hf->num_layers &&
              p.num_heads == hf->num_heads && p.num_kv_heads == hf->num_kv_heads &&
              p.head_dim == hf->head_dim && p.rope_theta == hf->rope_theta &&
              p.rms_norm_eps == hf->rms_norm_eps &&
              p.max_position_embeddings == hf->max_position_embeddings &&
              p.tie_word_embeddings == hf->tie_word_embeddings &&
              p.bos_token_id == hf->bos_token_id && p.eos_token_id == hf->eos_token_id,
          "qwen3-30b-a3b's shape is its config.json's");
    CHECK(p.moe == 1 && p.num_experts == hf->num_experts &&
              p.num_experts_per_tok == hf->num_experts_per_tok &&
              p.moe_intermediate_size == hf->moe_intermediate_size &&
              p.norm_topk_prob == hf->norm_topk_prob &&
              p.decoder_sparse_step == hf->decoder_sparse_step && p.num_mlp_only == 0 &&
              p.router_aux_loss_coef == hf->router_aux_loss_coef &&
              p.output_router_logits == hf->output_router_logits,
          "qwen3-30b-a3b's experts are its config.json's");
    CHECK(sdp_model_validate(&p, NULL, 0) == 0 && sdp_model_validate(&q, NULL, 0) == 0,
          "MoE presets valid");
    double n = (double)sdp_model_num_params(&p), n12 = (double)sdp_model_num_params(&q);
    CHECK(n > 30.4e9 && n < 30.6e9, "qwen3-30b-a3b: %.4g parameters (30.5 G)", n);
    CHECK(q.num_layers == 12 && n12 * 14 < 110.0 * (1 << 30) && n12 * 14 > 100.0 * (1 << 30),
          "qwen3-30b-a3b-l12: %.4g parameters, %.1f GiB at 14 bytes each", n12,
          n12 * 14 / (1 << 30));
}

static void test_a3b(void)
{
    struct sdp_model_cfg c;
    char log[4096];
    json_t *j = a3b_json();
    CHECK(parse(j, 1, &c, log, sizeof(log)) == 0, "A3B config read: %s", log);
    CHECK(c.moe == 1 && c.arch == SDP_ARCH_QWEN3 && c.qk_norm == 1, "A3B is qwen3 + moe");
    CHECK(c.num_experts == 128 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 768,
          "A3B E %d K %d IM %d", c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size);
    CHECK(c.norm_topk_prob == 1 && c.decoder_sparse_step == 1 && c.num_mlp_only == 0 &&
              c.output_router_logits == 0 && c.router_aux_loss_coef == 0.001,
          "A3B routing fields");
    CHECK(c.num_kv_heads == 4 && c.head_dim == 128 && c.num_layers == 48 &&
              c.intermediate_size == 6144,
          "A3B attention fields");
    CHECK(sdp_model_num_sparse_layers(&c) == 48, "A3B: every layer sparse");
    CHECK(parse(j, 0, &c, log, sizeof(log)) == 0, "load (train, plan, bench, export): %s", log);
    check_presets(&c);
    /* Qwen3MoeConfig's defaults for the absent keys; num_local_experts as transformers 5 writes */
    json_object_del(j, "num_experts");
    json_object_del(j, "num_experts_per_tok");
    json_object_del(j, "norm_topk_prob");
    json_object_del(j, "moe_intermediate_size");
    json_object_del(j, "router_aux_loss_coef");
    json_object_del(j, "num_key_value_heads");
    json_object_del(j, "head_dim");
    CHECK(parse(j, 1, &c, log, sizeof(log)) == 0 && c.num_experts == 128 &&
              c.num_experts_per_tok == 8 && c.norm_topk_prob == 0 &&
              c.moe_intermediate_size == 768 && c.router_aux_loss_coef == 0.001 &&
              c.num_kv_heads == 4 && c.head_dim == 2048 / 32,
          "Qwen3MoeConfig defaults: %s", log);
    json_object_set_new(j, "num_local_experts", json_integer(16));
    CHECK(parse(j, 1, &c, log, sizeof(log)) == 0 && c.num_experts == 16, "num_local_experts");
    json_decref(j);
}

/* Layers 0..L-1 sparse by Qwen3MoeDecoderLayer's rule, expected strings worked out by hand. */
static void test_sparse_rule(void)
{
    static const struct {
        int L, E, step, nonly, only[3];
        const char *want; /* 'S' sparse, 'd' dense, per layer */
    } cases[] = {
        { 6, 8, 1, 0, { 0 }, "SSSSSS" }, { 6, 8, 2, 0, { 0 }, "dSdSdS" },
        { 6, 8, 2, 1, { 1 }, "dddSdS" }, { 6, 8, 3, 2, { 0, 5 }, "ddSddd" },
        { 4, 0, 1, 0, { 0 }, "dddd" },   { 4, 8, 1, 3, { 3, 0, 3 }, "dSSd" },
        { 3, 8, 5, 0, { 0 }, "ddd" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sdp_model_cfg c = { .moe = 1, .num_layers = cases[i].L };
        char got[8] = { 0 };
        int n = 0;
        c.num_experts = cases[i].E;
        c.decoder_sparse_step = cases[i].step;
        c.num_mlp_only = cases[i].nonly;
        memcpy(c.mlp_only_layers, cases[i].only, sizeof(cases[i].only));
        for (int l = 0; l < c.num_layers; l++) {
            got[l] = sdp_model_layer_sparse(&c, l) ? 'S' : 'd';
            n += got[l] == 'S';
        }
        CHECK(!strcmp(got, cases[i].want), "sparse rule case %zu: %s, want %s", i, got,
              cases[i].want);
        CHECK(sdp_model_num_sparse_layers(&c) == n, "case %zu: count", i);
        c.moe = 0;
        CHECK(sdp_model_num_sparse_layers(&c) == 0, "case %zu: dense model", i);
    }
}

static void test_round_trip(void)
{
    struct sdp_model_cfg c, back;
    char log[4096], *text;
    json_t *j = a3b_json(), *w;
    json_object_set_new(j, "num_hidden_layers", json_integer(6));
    json_object_set_new(j, "mlp_only_layers", json_pack("[i,i]", 4, 0));
    json_object_set_new(j, "decoder_sparse_step", json_integer(2));
    json_object_set_new(j, "norm_topk_prob", json_false());
    json_object_set_new(j, "output_router_logits", json_true());
    json_object_set_new(j, "router_aux_loss_coef", json_real(0.01));
    CHECK(parse(j, 1, &c, log, sizeof(log)) == 0, "round trip source: %s", log);
    CHECK(sdp_hfconfig_write(sdp_test_path("out.json"), &c, "float32") == 0, "MoE config written");
    w = json_load_file(sdp_test_path("out.json"), 0, NULL);
    CHECK(w && !strcmp(json_string_value(json_object_get(w, "model_type")), "qwen3_moe") &&
              !strcmp(json_string_value(json_array_get(json_object_get(w, "architectures"), 0)),
                      "Qwen3MoeForCausalLM") &&
              json_integer_value(json_object_get(w, "num_experts")) == 128 &&
              json_array_size(json_object_get(w, "mlp_only_layers")) == 2,
          "written keys");
    CHECK(parse(w, 1, &back, log, sizeof(log)) == 0, "written config read back: %s", log);
    CHECK(back.moe && back.num_experts == c.num_experts &&
              back.num_experts_per_tok == c.num_experts_per_tok &&
              back.moe_intermediate_size == c.moe_intermediate_size && back.norm_topk_prob == 0 &&
              back.decoder_sparse_step == 2 && back.num_mlp_only == 2 &&
              back.mlp_only_layers[0] == 4 && back.mlp_only_layers[1] == 0 &&
              back.output_router_logits == 1 && back.router_aux_loss_coef == 0.01 &&
              back.num_layers == 6 && back.num_kv_heads == 4 && back.rope_theta == 1e6,
          "round trip fields");
    text = (char *)sdp_test_read_file(sdp_test_path("out.json"), &(size_t){ 0 });
    CHECK(text && strstr(text, "\"architectures\"") < strstr(text, "\"vocab_size\""),
          "keys sorted");
    free(text);
    json_decref(w);
    json_decref(j);
}

/* Set key to val (NULL: delete) in the A3B config; read must fail naming name. */
static void expect_bad(const char *key, json_t *val, const char *name)
{
    struct sdp_model_cfg c;
    char log[4096];
    json_t *j = a3b_json();
    int rc;
    if (val)
        json_object_set_new(j, key, val);
    rc = parse(j, 1, &c, log, sizeof(log));
    CHECK(rc == -EINVAL && strstr(log, name), "%s refused naming \"%s\": rc %d, log %s", key, name,
          rc, log);
    json_decref(j);
}

static void test_bad(void)
{
    expect_bad("shared_expert_intermediate_size", json_integer(5632),
               "shared_expert_intermediate_size");
    expect_bad("n_shared_experts", json_integer(2), "n_shared_experts");
    expect_bad("scoring_func", json_string("sigmoid"), "scoring_func");
    expect_bad("topk_method", json_string("noaux_tc"), "topk_method");
    expect_bad("n_group", json_integer(8), "n_group");
    expect_bad("router_jitter_noise", json_real(0.01), "router_jitter_noise");
    expect_bad("routed_scaling_factor", json_real(2.5), "routed_scaling_factor");
    expect_bad("model_type", json_string("qwen2_moe"), "qwen3_moe (Qwen3MoeForCausalLM)");
    expect_bad("model_type", json_string("mixtral"), "qwen3_moe (Qwen3MoeForCausalLM)");
    expect_bad("model_type", json_string("deepseek_v3"), "qwen3_moe (Qwen3MoeForCausalLM)");
    expect_bad("num_experts_per_tok", json_integer(0), "num_experts_per_tok");
    expect_bad("num_experts_per_tok", json_integer(129), "num_experts_per_tok");
    expect_bad("num_experts", json_integer(-1), "num_experts");
    expect_bad("num_local_experts", json_integer(64), "num_local_experts");
    expect_bad("moe_intermediate_size", json_integer(0), "moe_intermediate_size");
    expect_bad("decoder_sparse_step", json_integer(0), "decoder_sparse_step");
    expect_bad("mlp_only_layers", json_pack("[i]", 48), "mlp_only_layers");
    expect_bad("mlp_only_layers", json_string("0"), "mlp_only_layers");
    expect_bad("mlp_only_layers", json_pack("[i,i]", 0, -1), "mlp_only_layers");
    expect_bad("norm_topk_prob", json_integer(1), "norm_topk_prob");
    expect_bad("output_router_logits", json_string("yes"), "output_router_logits");
    expect_bad("router_aux_loss_coef", json_real(-0.5), "router_aux_loss_coef");
    expect_bad("router_aux_loss_coef", json_string("0.001"), "router_aux_loss_coef");
}

int main(void)
{
    if (!sdp_test_mkdtemp("sdp-test-hfconfig-moe"))
        return sdp_test_finish(1);
    test_a3b();
    test_sparse_rule();
    test_round_trip();
    test_bad();
    sdp_test_rm_tree(sdp_test_dir());
    return sdp_test_finish(sdp_test_nfail);
}
