/* SPDX-License-Identifier: MIT */
/* Checks models/lora.c against the model's own layout (models/qwen3.c): every adaptable kind's
 * (in, out) is its base weight's (cols, rows), and its PEFT target name is the suffix of the
 * weight's Hugging Face name ("...self_attn.q_proj.weight"), for Qwen3 and Llama presets and a
 * model whose widths all differ; the layers a configuration adapts; the adapters' element count
 * against a sum over the layout; and the refusals of sdp_lora_validate, each naming its key. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "models/sdp_lora.h"
#include "tests/lib/sdp_test.h"

static void check_layout(const char *label, const struct sdp_model_cfg *m)
{
    struct sdp_param_desc d[SDP_MAX_GROUP_TENSORS];
    struct sdp_lora_cfg all = { .rank = 3, .alpha = 6 };
    size_t sum = 0;
    int n = sdp_model_group_tensors(m, 1, d), found = 0;
    for (int i = 0; i < SDP_LORA_NTARGETS; i++)
        all.targets |= SDP_LORA_BIT(sdp_lora_kinds[i]);
    for (int i = 0; i < n; i++) {
        const char *name = sdp_lora_target_name(d[i].kind);
        char suffix[64];
        int in, out;
        if (!name)
            continue;
        found++;
        sdp_lora_dims(m, d[i].kind, &in, &out);
        CHECK(in == d[i].cols && out == d[i].rows, "%s %s: lora dims %d x %d, weight %d x %d",
              label, name, out, in, d[i].rows, d[i].cols);
        snprintf(suffix, sizeof(suffix), ".%s.weight", name);
        CHECK(strlen(d[i].hf_name) > strlen(suffix) &&
                  !strcmp(d[i].hf_name + strlen(d[i].hf_name) - strlen(suffix), suffix),
              "%s: %s is not the target of %s", label, name, d[i].hf_name);
        sum += 3 * (size_t)(d[i].rows + d[i].cols);
    }
    CHECK(found == SDP_LORA_NTARGETS, "%s: %d adaptable weights in a layer", label, found);
    CHECK(sdp_lora_layer_elems(&all, m, 1) == sum, "%s: %zu adapter elements, layout says %zu",
          label, sdp_lora_layer_elems(&all, m, 1), sum);
    printf("%s: %d targets, %zu adapter elements a layer at rank 3\n", label, found, sum);
}

/* c refused for m with a message holding `key` */
static void refused(const char *what, const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m,
                    const char *key)
{
    char why[256] = "";
    int rc = sdp_lora_validate(c, m, why, sizeof(why));
    printf("%s: rc %d, %s\n", what, rc, why);
    CHECK(rc == -1 && strstr(why, key), "%s: not refused naming %s", what, key);
}

/* LoRA's model FLOPs against a closed form written out from the shapes: Qwen3-32B (C 5120,
 * I 25600, 64 layers of 64 heads x 128, 8 KV heads, vocab 151936 untied), rank 16 on all seven
 * linears of every layer, and on q_proj of layers 3-10 alone.  Integers below 2^53: exact. */
static void check_flops(void)
{
    struct sdp_model_cfg m;
    struct sdp_lora_cfg c = { .rank = 16, .alpha = 32 };
    const double C = 5120, I = 25600, L = 64, Q = 64 * 128, KV = 8 * 128, V = 151936, T = 1024;
    const double base = L * (C * Q + 2 * C * KV + Q * C + 3 * C * I) + V * C;
    const double attn = 6 * L * Q * T;
    /* A (r x in) and B (out x r) of q, k, v, o, gate, up, down */
    const double per_layer = 16 * ((C + Q) + 2 * (C + KV) + (Q + C) + 2 * (C + I) + (I + C));
    double got, want;
    sdp_model_preset("qwen3-32b", &m);
    for (int i = 0; i < SDP_LORA_NTARGETS; i++)
        c.targets |= SDP_LORA_BIT(sdp_lora_kinds[i]);
    got = sdp_lora_train_flops_per_token(&c, &m, 1024);
    want = 4 * base + attn + 6 * L * per_layer;
    CHECK(got == want, "qwen3-32b r16 all-linear: %.17g FLOPs/token, closed form %.17g", got, want);
    printf("qwen3-32b LoRA r16 all-linear at T=1024: %.4f GFLOP/token (full training %.4f)\n",
           got / 1e9, sdp_model_train_flops_per_token(&m, 1024) / 1e9);
    c.targets = SDP_LORA_BIT(SDP_PT_Q), c.first = 3, c.last = 10;
    got = sdp_lora_train_flops_per_token(&c, &m, 1024);
    want = 4 * base + attn + 6 * 8 * 16 * (C + Q);
    CHECK(got == want, "q_proj of layers 3-10: %.17g FLOPs/token, closed form %.17g", got, want);
}

/* Qwen3-30B-A3B (C 2048, 32 heads x 128, 4 KV heads, 48 sparse layers, moe_intermediate 768) with
 * layers 1-4 dense by mlp_only_layers (intermediate 6144): gate, up and down on a sparse layer are
 * refused (PEFT would adapt its stacked experts); q, k, v and o adapt every layer, and all seven
 * the dense layers alone. */
static void check_sparse(void)
{
    struct sdp_model_cfg m;
    struct sdp_lora_cfg c = { .rank = 8, .alpha = 16 };
    const unsigned attn = SDP_LORA_BIT(SDP_PT_Q) | SDP_LORA_BIT(SDP_PT_K) | SDP_LORA_BIT(SDP_PT_V) |
                          SDP_LORA_BIT(SDP_PT_O);
    const size_t C = 2048, Q = 32 * 128, KV = 4 * 128, I = 6144, r = 8;
    const size_t a = r * ((C + Q) + 2 * (C + KV) + (Q + C)), mlp = r * (2 * (C + I) + (I + C));
    char why[256];
    sdp_model_preset("qwen3-30b-a3b", &m);
    m.num_mlp_only = 4;
    for (int i = 0; i < 4; i++)
        m.mlp_only_layers[i] = i;
    m.intermediate_size = (int)I;
    for (int i = 0; i < SDP_LORA_NTARGETS; i++)
        c.targets |= SDP_LORA_BIT(sdp_lora_kinds[i]);
    refused("all seven on every layer", &c, &m, "layer 5, a sparse (MoE) layer");
    c.first = 1, c.last = 4;
    CHECK(sdp_lora_validate(&c, &m, why, sizeof(why)) == 0, "dense layers 1-4 refused: %s", why);
    CHECK(sdp_lora_layer_targets(&c, &m, 4) == c.targets && sdp_lora_layer_targets(&c, &m, 5) == 0,
          "layers 1-4: targets %#x, %#x", sdp_lora_layer_targets(&c, &m, 4),
          sdp_lora_layer_targets(&c, &m, 5));
    CHECK(sdp_lora_elems(&c, &m) == 4 * (a + mlp), "layers 1-4: %zu adapter elements",
          sdp_lora_elems(&c, &m));
    c.targets = attn, c.first = c.last = 0;
    CHECK(sdp_lora_validate(&c, &m, why, sizeof(why)) == 0, "attention refused: %s", why);
    CHECK(sdp_lora_layer_targets(&c, &m, 5) == attn && sdp_lora_layer_elems(&c, &m, 5) == a &&
              sdp_lora_layer_elems(&c, &m, 4) == a,
          "attention: %zu, %zu adapter elements (closed form %zu)", sdp_lora_layer_elems(&c, &m, 4),
          sdp_lora_layer_elems(&c, &m, 5), a);
    CHECK(sdp_lora_elems(&c, &m) == 48 * a, "attention: %zu adapter elements",
          sdp_lora_elems(&c, &m));
    printf("qwen3-30b-a3b, r8 on q, k, v and o: %zu adapter elements\n", sdp_lora_elems(&c, &m));
}

int main(void)
{
    struct sdp_model_cfg m;
    enum sdp_ptensor k;
    sdp_model_preset("qwen3-0.6b", &m);
    check_layout("qwen3-0.6b", &m);
    sdp_model_defaults(&m, SDP_ARCH_LLAMA);
    m.vocab_size = 100, m.hidden_size = 24, m.intermediate_size = 40, m.num_layers = 3;
    m.num_heads = 4, m.num_kv_heads = 2, m.head_dim = 8, m.max_position_embeddings = 64;
    check_layout("llama C24 I40 NH4x8 NKV2", &m);

    CHECK(sdp_lora_target_parse("down_proj", &k) == 0 && k == SDP_PT_DOWN, "down_proj");
    CHECK(sdp_lora_target_parse("lm_head", &k) == -1, "lm_head is no target");
    CHECK(sdp_lora_target_name(SDP_PT_QNORM) == NULL, "q_norm is no target");

    struct sdp_lora_cfg c = { .rank = 16, .alpha = 32, .targets = SDP_LORA_BIT(SDP_PT_Q) };
    char why[256];
    CHECK(sdp_lora_scale(&c) == 2.0, "scale %g", sdp_lora_scale(&c));
    CHECK(sdp_lora_validate(&c, &m, why, sizeof(why)) == 0, "valid config refused");
    CHECK(sdp_lora_layer_on(&c, 1) && sdp_lora_layer_on(&c, 3) && !sdp_lora_layer_on(&c, 0),
          "all layers");
    c.first = 2, c.last = 3;
    CHECK(!sdp_lora_layer_on(&c, 1) && sdp_lora_layer_on(&c, 2), "layers 2-3");
    c.first = c.last = 0;
    /* q_proj is 32 x 24 here: rank 24 fits, 25 does not; k_proj (16 x 24) caps it at 16 */
    c.rank = 24;
    CHECK(sdp_lora_validate(&c, &m, why, sizeof(why)) == 0, "rank 24 on q_proj refused");
    c.rank = 25;
    refused("rank 25 on q_proj (32 x 24)", &c, &m, "lora.rank");
    c.rank = 17, c.targets |= SDP_LORA_BIT(SDP_PT_K);
    refused("rank 17 on k_proj (16 x 24)", &c, &m, "k_proj");
    c.rank = 8, c.alpha = 0;
    refused("alpha 0", &c, &m, "lora.alpha");
    c.alpha = 8, c.dropout = 1;
    refused("dropout 1", &c, &m, "lora.dropout");
    c.dropout = 0, c.first = 2, c.last = 4;
    refused("layers 2-4 of 3", &c, &m, "lora.layers");
    c.first = c.last = 0, c.targets = 0;
    refused("no target", &c, &m, "lora.targets");
    c.targets = SDP_LORA_BIT(SDP_PT_Q), c.rank = 0;
    refused("rank 0", &c, &m, "lora.rank");
    check_flops();
    check_sparse();
    return sdp_test_finish(sdp_test_nfail);
}
