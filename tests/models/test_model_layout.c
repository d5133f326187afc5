/* SPDX-License-Identifier: MIT */
/* Checks models/qwen3.c against independent references: the parameter counts of the five presets
 * against the table of the benchmark document (0.60/1.72/4.02/8.19/14.8 B, equal once rounded to
 * the table's digits) and against a closed-form count written here; group layouts contiguous, in
 * header order, summing to the total; Hugging Face names; train FLOPs/token of qwen3-4b at T=1024
 * against the document's 25.0 GFLOP; validation of bad configs. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/sdp_models.h"
#include "tests/lib/sdp_test.h"

/* Closed form: embedding V*C (+ V*C lm_head if untied) + final norm C + L * (two norms, optional
 * q/k norms, q, k, v, o, gate, up, down). */
static double closed_form_params(const struct sdp_model_cfg *c)
{
    double V = c->vocab_size, C = c->hidden_size, I = c->intermediate_size, L = c->num_layers;
    double NH = c->num_heads, NKV = c->num_kv_heads, HD = c->head_dim;
    double layer = 2 * C + (c->qk_norm ? 2 * HD : 0) + C * NH * HD + 2 * C * NKV * HD +
                   NH * HD * C + 3 * C * I;
    return V * C * (c->tie_word_embeddings ? 1 : 2) + C + L * layer;
}

static void check_layout(const char *label, const struct sdp_model_cfg *cfg)
{
    const int L = cfg->num_layers;
    size_t total = 0;
    CHECK(sdp_model_num_groups(cfg) == L + 2, "%s: %d groups", label, sdp_model_num_groups(cfg));
    for (int g = 0; g < sdp_model_num_groups(cfg); g++) {
        struct sdp_param_desc d[SDP_MAX_GROUP_TENSORS];
        int n = sdp_model_group_tensors(cfg, g, d);
        size_t off = 0;
        enum sdp_group_kind kind = sdp_model_group_kind(cfg, g);
        CHECK(n > 0 && n <= SDP_MAX_GROUP_TENSORS, "%s: group %d has %d tensors", label, g, n);
        for (int i = 0; i < n; i++) {
            CHECK(d[i].offset == off,
                  "%s: group %d tensor %s at %zu, expected %zu (not contiguous)", label, g,
                  d[i].hf_name, d[i].offset, off);
            CHECK(i == 0 || d[i].kind > d[i - 1].kind, "%s: group %d tensor %d out of header order",
                  label, g, i);
            CHECK(sdp_model_offset(cfg, g, d[i].kind) == d[i].offset,
                  "%s: sdp_model_offset(%d, %d)", label, g, (int)d[i].kind);
            CHECK(d[i].decay == (d[i].rows > 1), "%s: %s decay %d for (%d, %d)", label,
                  d[i].hf_name, d[i].decay, d[i].rows, d[i].cols);
            off += (size_t)d[i].rows * (size_t)d[i].cols;
        }
        CHECK(off == sdp_model_group_nelems(cfg, g), "%s: group %d nelems %zu vs sum %zu", label, g,
              sdp_model_group_nelems(cfg, g), off);
        total += off;
        if (g == 0) {
            CHECK(kind == SDP_GROUP_EMBED && n == 1 &&
                      !strcmp(d[0].hf_name, "model.embed_tokens.weight"),
                  "%s: embedding group", label);
        } else if (g <= L) {
            char want[96];
            CHECK(kind == SDP_GROUP_LAYER && n == (cfg->qk_norm ? 11 : 9),
                  "%s: layer group %d: %d tensors", label, g, n);
            snprintf(want, sizeof(want), "model.layers.%d.self_attn.q_proj.weight", g - 1);
            CHECK(!strcmp(d[1].hf_name, want) && d[1].kind == SDP_PT_Q, "%s: %s vs %s", label,
                  d[1].hf_name, want);
            snprintf(want, sizeof(want), "model.layers.%d.mlp.down_proj.weight", g - 1);
            CHECK(!strcmp(d[n - 1].hf_name, want) && d[n - 1].rows == cfg->hidden_size &&
                      d[n - 1].cols == cfg->intermediate_size,
                  "%s: last tensor %s", label, d[n - 1].hf_name);
            /* q, k, v back to back form one (QKV, C) matrix; gate, up one (2I, C) matrix */
            size_t qkv =
                (size_t)(cfg->num_heads + 2 * cfg->num_kv_heads) * cfg->head_dim * cfg->hidden_size;
            CHECK(sdp_model_offset(cfg, g, SDP_PT_V) +
                          (size_t)cfg->num_kv_heads * cfg->head_dim * cfg->hidden_size -
                          sdp_model_offset(cfg, g, SDP_PT_Q) ==
                      qkv,
                  "%s: q/k/v not one block", label);
            CHECK(sdp_model_offset(cfg, g, SDP_PT_UP) - sdp_model_offset(cfg, g, SDP_PT_GATE) ==
                      (size_t)cfg->intermediate_size * cfg->hidden_size,
                  "%s: gate/up not one block", label);
            CHECK((sdp_model_offset(cfg, g, SDP_PT_QNORM) != (size_t)-1) == (cfg->qk_norm != 0),
                  "%s: q_norm presence", label);
        } else {
            CHECK(kind == SDP_GROUP_HEAD && !strcmp(d[0].hf_name, "model.norm.weight"),
                  "%s: head group", label);
            CHECK(n == (cfg->tie_word_embeddings ? 1 : 2), "%s: head group has %d tensors", label,
                  n);
            if (n == 2)
                CHECK(!strcmp(d[1].hf_name, "lm_head.weight"), "%s: %s", label, d[1].hf_name);
        }
    }
    CHECK(total == sdp_model_num_params(cfg), "%s: groups sum %zu vs num_params %zu", label, total,
          sdp_model_num_params(cfg));
    CHECK((double)total == closed_form_params(cfg), "%s: %zu vs closed form %.0f", label, total,
          closed_form_params(cfg));
}

int main(void)
{
    const struct {
        const char *name;
        double billions; /* benchmark document's table */
        double half_ulp; /* half a unit of its last printed digit: the table's rounding error */
    } table[] = {
        { "qwen3-0.6b", 0.60, 0.005 }, { "qwen3-1.7b", 1.72, 0.005 }, { "qwen3-4b", 4.02, 0.005 },
        { "qwen3-8b", 8.19, 0.005 },   { "qwen3-14b", 14.8, 0.05 },   { "qwen3-32b", 32.8, 0.05 },
    };
    struct sdp_model_cfg cfg;
    char why[256];

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        int rc = sdp_model_preset(table[i].name, &cfg);
        CHECK(rc == 0, "preset %s: rc %d", table[i].name, rc);
        if (rc)
            continue;
        rc = sdp_model_validate(&cfg, why, sizeof(why));
        CHECK(rc == 0, "preset %s invalid: %s", table[i].name, why);
        double p = (double)sdp_model_num_params(&cfg) / 1e9;
        double rel = fabs(p - table[i].billions) / table[i].billions;
        printf("%-11s params %.4f B (table %.2f B, rel diff %.4f), matmul params %.4f B\n",
               table[i].name, p, table[i].billions, rel,
               (double)sdp_model_matmul_params(&cfg) / 1e9);
        /* 0.596 B prints as 0.60 B: 0.66% apart, so the bound is the table's rounding, not a
         * percentage */
        CHECK(fabs(p - table[i].billions) <= table[i].half_ulp, "%s: %.4f B vs %.2f B",
              table[i].name, p, table[i].billions);
        check_layout(table[i].name, &cfg);
    }
    CHECK(sdp_model_preset("qwen3-3b", &cfg) == -ENOENT, "unknown preset accepted");

    /* train FLOPs per token, qwen3-4b at T = 1024: the benchmark document's 25.0 GFLOP (3
     * significant digits, so within 0.2%) */
    sdp_model_preset("qwen3-4b", &cfg);
    double f = sdp_model_train_flops_per_token(&cfg, 1024);
    printf("qwen3-4b train FLOPs/token at T=1024: %.4f GFLOP (document: 25.0)\n", f / 1e9);
    CHECK(fabs(f / 1e9 - 25.0) < 0.05, "train flops %.4f GFLOP", f / 1e9);
    /* forward of one layer relates to the per-token count: 3 * (L * fwd / (B*T) + 2*V*C) */
    double fwd = sdp_model_layer_fwd_flops(&cfg, 2, 1024);
    double from_fwd =
        3.0 * (cfg.num_layers * fwd / 2048.0 + 2.0 * cfg.vocab_size * cfg.hidden_size);
    printf("3 x forward FLOPs/token: %.4f GFLOP\n", from_fwd / 1e9);
    CHECK(fabs(from_fwd - f) <= 1e-9 * f, "forward %.6g vs train/3 %.6g", from_fwd, f);

    /* activation and state bytes */
    size_t rec = sdp_model_layer_act_bytes(&cfg, 2, 1024, 2, 1);
    size_t full = sdp_model_layer_act_bytes(&cfg, 2, 1024, 2, 0);
    CHECK(rec == (size_t)2 * 1024 * 2560 * 2, "recompute act bytes %zu", rec);
    CHECK(full > 10 * rec, "kept act bytes %zu vs recompute %zu", full, rec);
    CHECK(sdp_model_state_bytes(&cfg, 2) == sdp_model_num_params(&cfg) * 18, "state bytes");

    /* a Llama shape: no q/k norms, untied; then invalid configs */
    struct sdp_model_cfg ll = { 0 };
    ll.vocab_size = 128256;
    ll.hidden_size = 2048;
    ll.intermediate_size = 8192;
    ll.num_layers = 16;
    ll.num_heads = 32;
    ll.num_kv_heads = 8;
    sdp_model_defaults(&ll, SDP_ARCH_LLAMA);
    CHECK(ll.head_dim == 64 && ll.qk_norm == 0, "llama defaults: head_dim %d qk_norm %d",
          ll.head_dim, ll.qk_norm);
    CHECK(sdp_model_validate(&ll, why, sizeof(why)) == 0, "llama invalid: %s", why);
    check_layout("llama-1b-untied", &ll);
    printf("llama-1b-untied params %.4f B\n", (double)sdp_model_num_params(&ll) / 1e9);

    struct {
        const char *what;
        struct sdp_model_cfg c;
    } bad[11];
    for (int i = 0; i < 11; i++)
        bad[i].c = ll;
    bad[0].what = "NH % NKV";
    bad[0].c.num_kv_heads = 5;
    bad[1].what = "odd head_dim";
    bad[1].c.head_dim = 63;
    bad[2].what = "C % 8";
    bad[2].c.hidden_size = 2044;
    bad[3].what = "qk_norm on llama";
    bad[3].c.qk_norm = 1;
    bad[4].what = "zero layers";
    bad[4].c.num_layers = 0;
    bad[5].what = "negative vocab";
    bad[5].c.vocab_size = -1;
    bad[6].what = "HD % 8";
    bad[6].c.head_dim = 60;
    bad[7].what = "rope scaling low >= high";
    bad[7].c.rope_scaling_factor = 8;
    bad[7].c.rope_low_freq_factor = 4;
    bad[7].c.rope_high_freq_factor = 1;
    bad[7].c.rope_original_max_pos = 8192;
    /* absurd shapes: refused at once, the count taken in 128 bits (no size_t overflow) */
    bad[8].what = "a million layers";
    bad[8].c.num_layers = 1000000;
    bad[9].what = "2^40 parameters in the layers";
    bad[9].c.intermediate_size = 1 << 24;
    bad[9].c.num_layers = 4096;
    bad[10].what = "2^40 parameters in the embeddings";
    bad[10].c.vocab_size = 1 << 24;
    bad[10].c.hidden_size = 1 << 16;
    for (int i = 0; i < 11; i++) {
        int rc = sdp_model_validate(&bad[i].c, why, sizeof(why));
        printf("invalid config (%s): rc %d, %s\n", bad[i].what, rc, why);
        CHECK(rc == -EINVAL && why[0], "%s accepted", bad[i].what);
    }
    CHECK(!strcmp(sdp_model_arch_name(SDP_ARCH_QWEN3), "qwen3") &&
              !strcmp(sdp_model_arch_name(SDP_ARCH_LLAMA), "llama"),
          "arch names");

    return sdp_test_finish(sdp_test_nfail);
}
