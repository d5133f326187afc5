/* SPDX-License-Identifier: MIT */
/* Qwen3 and Llama decoders as pure C: presets, validation, the flat layout of every streamed
 * parameter group (embedding, decoder layers, head) and the cost model (parameters, FLOPs,
 * activation and state bytes).  No StarPU, no runtime headers, no I/O: config.json parsing lives in
 * formats/hfconfig.c. Tests: tests/models/test_model_layout.c. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "models/sdp_models.h"

/* ---- presets: shapes of the public Qwen3 configs (BENCH.md, "The standard workload") ---- */
struct preset {
    const char *name;
    int C, I, L, NH, tied;
};

static const struct preset presets[] = {
    { "qwen3-0.6b", 1024, 3072, 28, 16, 1 }, { "qwen3-1.7b", 2048, 6144, 28, 16, 1 },
    { "qwen3-4b", 2560, 9728, 36, 32, 1 },   { "qwen3-8b", 4096, 12288, 36, 32, 0 },
    { "qwen3-14b", 5120, 17408, 40, 40, 0 }, { "qwen3-32b", 5120, 25600, 64, 64, 0 },
};

const char *sdp_model_arch_name(enum sdp_arch arch)
{
    switch (arch) {
    case SDP_ARCH_QWEN3:
        return "qwen3";
    case SDP_ARCH_LLAMA:
        return "llama";
    }
    return "unknown";
}

/* Keeps the shape fields (V, C, I, L, NH, NKV, HD) the caller set, derives NKV and HD where they
 * are 0, and resets every other field to the architecture's transformers default (Qwen3Config,
 * LlamaConfig). */
void sdp_model_defaults(struct sdp_model_cfg *cfg, enum sdp_arch arch)
{
    struct sdp_model_cfg d = { 0 };
    d.arch = arch;
    d.vocab_size = cfg->vocab_size;
    d.hidden_size = cfg->hidden_size;
    d.intermediate_size = cfg->intermediate_size;
    d.num_layers = cfg->num_layers;
    d.num_heads = cfg->num_heads;
    d.num_kv_heads = cfg->num_kv_heads > 0 ? cfg->num_kv_heads : cfg->num_heads;
    d.head_dim = cfg->head_dim;
    if (d.head_dim <= 0 && d.num_heads > 0)
        d.head_dim = d.hidden_size / d.num_heads;
    d.rope_theta = 10000.0;
    d.rms_norm_eps = 1e-6;
    d.tie_word_embeddings = 0;
    d.qk_norm = arch == SDP_ARCH_QWEN3;
    d.max_position_embeddings = arch == SDP_ARCH_QWEN3 ? 32768 : 2048;
    d.bos_token_id = -1;
    d.eos_token_id = -1;
    d.initializer_range = 0.02;
    *cfg = d;
}

void sdp_model_qwen3_shape(struct sdp_model_cfg *c, int C, int I, int L, int NH, int NKV, int tied)
{
    memset(c, 0, sizeof(*c));
    c->vocab_size = 151936;
    c->hidden_size = C;
    c->intermediate_size = I;
    c->num_layers = L;
    c->num_heads = NH;
    c->num_kv_heads = NKV;
    c->head_dim = 128;
    sdp_model_defaults(c, SDP_ARCH_QWEN3);
    c->rope_theta = 1e6;
    c->rms_norm_eps = 1e-6;
    c->max_position_embeddings = 40960;
    c->tie_word_embeddings = tied;
    c->bos_token_id = 151643;
    c->eos_token_id = 151645;
}

int sdp_model_preset(const char *name, struct sdp_model_cfg *cfg)
{
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
        const struct preset *p = &presets[i];
        if (strcmp(name, p->name) != 0)
            continue;
        sdp_model_qwen3_shape(cfg, p->C, p->I, p->L, p->NH, 8, p->tied);
        return 0;
    }
    return sdp_model_moe_preset(name, cfg);
}

static int invalid(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int invalid(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

__extension__ typedef unsigned __int128 u128;

/* Largest dimension accepted: keeps rows, columns, NH*HD, (NH+2*NKV)*HD and 2*I in an int. */
#define MAX_DIM (1 << 24)
/* Most layers: 32 times the deepest released LLM (126).  Each layer costs about 1 MiB of host
 * memory beyond its weights (StarPU handles, tasks, tables), which the memory check does not count:
 * 65536 tiny layers pass it and then exhaust a 24 GiB host. */
#define MAX_LAYERS 4096
/* Most parameters: 2^40 (1.1e12) need 16 TiB of fp32 masters, moments and gradients in host
 * memory, beyond any one host; below it every byte count of the state fits in a size_t. */
#define MAX_PARAMS ((u128)1 << 40)

/* The parameter count in 128 bits (no dimension product can overflow it: each is < 2^24), checked
 * against MAX_PARAMS before any size_t count is taken; the key to lower is named. */
static int check_params(const struct sdp_model_cfg *cfg, char *why, size_t whylen)
{
    const u128 C = (u128)cfg->hidden_size, I = (u128)cfg->intermediate_size;
    const u128 HD = (u128)cfg->head_dim, NH = (u128)cfg->num_heads, NKV = (u128)cfg->num_kv_heads;
    const u128 V = (u128)cfg->vocab_size, L = (u128)cfg->num_layers;
    u128 mlp = 3 * I * C;
    if (cfg->moe && cfg->num_experts > 0) /* the larger of a dense and a sparse layer's MLP */
        mlp = (u128)cfg->num_experts * (C + 3 * (u128)cfg->moe_intermediate_size * C) > mlp
                  ? (u128)cfg->num_experts * (C + 3 * (u128)cfg->moe_intermediate_size * C)
                  : mlp;
    u128 layer = 2 * C + (NH + 2 * NKV) * HD * C + NH * HD * C + mlp + (cfg->qk_norm ? 2 * HD : 0);
    u128 embed = V * C * (cfg->tie_word_embeddings ? 1 : 2) + C;
    u128 total = L * layer + embed;
    if (total <= MAX_PARAMS)
        return 0;
    if (embed > MAX_PARAMS)
        return invalid(why, whylen,
                       "vocab_size = %d by hidden_size = %d make %.3g embedding parameters, more "
                       "than the %.3g (2^40) a run can hold",
                       cfg->vocab_size, cfg->hidden_size, (double)embed, (double)MAX_PARAMS);
    if (layer > MAX_PARAMS)
        return invalid(why, whylen,
                       "%s = %d makes %.3g parameters in one layer, more than the %.3g (2^40) a "
                       "run can hold",
                       I > C ? "intermediate_size" : "hidden_size", I > C ? (int)I : (int)C,
                       (double)layer, (double)MAX_PARAMS);
    return invalid(why, whylen,
                   "num_hidden_layers = %d layers of %.3g parameters make %.3g, more than the "
                   "%.3g (2^40) a run can hold",
                   cfg->num_layers, (double)layer, (double)total, (double)MAX_PARAMS);
}

int sdp_model_validate(const struct sdp_model_cfg *cfg, char *why, size_t whylen)
{
    char buf[256];
    const struct {
        const char *name;
        int v, max;
    } dims[] = {
        { "vocab_size", cfg->vocab_size, MAX_DIM },
        { "hidden_size", cfg->hidden_size, MAX_DIM },
        { "intermediate_size", cfg->intermediate_size, MAX_DIM },
        { "num_hidden_layers", cfg->num_layers, MAX_LAYERS },
        { "num_attention_heads", cfg->num_heads, MAX_DIM },
        { "num_key_value_heads", cfg->num_kv_heads, MAX_DIM },
        { "head_dim", cfg->head_dim, MAX_DIM },
    };
    if (why && whylen > 0)
        why[0] = '\0';
    if (cfg->arch != SDP_ARCH_QWEN3 && cfg->arch != SDP_ARCH_LLAMA)
        return invalid(why, whylen, "unknown architecture %d", (int)cfg->arch);
    for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
        if (dims[i].v <= 0 || dims[i].v > dims[i].max)
            return invalid(why, whylen, "%s = %d must be in [1, %d]", dims[i].name, dims[i].v,
                           dims[i].max);
    }
    if (cfg->num_heads % cfg->num_kv_heads != 0)
        return invalid(why, whylen,
                       "num_attention_heads = %d is not a multiple of num_key_value_heads = %d",
                       cfg->num_heads, cfg->num_kv_heads);
    if (cfg->head_dim % 2 != 0)
        return invalid(why, whylen, "head_dim = %d must be even (rotary embedding pairs)",
                       cfg->head_dim);
    /* bf16 tensors start on 16-byte boundaries inside a group only when C and HD are multiples of 8
     */
    if (cfg->hidden_size % 8 != 0)
        return invalid(why, whylen, "hidden_size = %d must be a multiple of 8", cfg->hidden_size);
    if (cfg->head_dim % 8 != 0)
        return invalid(why, whylen, "head_dim = %d must be a multiple of 8", cfg->head_dim);
    if ((long long)(cfg->num_heads + 2LL * cfg->num_kv_heads) * cfg->head_dim > MAX_DIM)
        return invalid(why, whylen, "(NH + 2*NKV) * HD = %lld exceeds %d",
                       (long long)(cfg->num_heads + 2LL * cfg->num_kv_heads) * cfg->head_dim,
                       MAX_DIM);
    if (cfg->moe && sdp_model_moe_check(cfg, buf, sizeof(buf)) != 0) /* before its sizes count */
        return invalid(why, whylen, "%s", buf);
    if (check_params(cfg, why, whylen))
        return -EINVAL;
    if (cfg->qk_norm && cfg->arch != SDP_ARCH_QWEN3)
        return invalid(why, whylen, "qk_norm is a Qwen3 feature, not %s",
                       sdp_model_arch_name(cfg->arch));
    if (!cfg->qk_norm && cfg->arch == SDP_ARCH_QWEN3)
        return invalid(why, whylen, "qwen3 requires qk_norm = 1");
    if (cfg->max_position_embeddings <= 0)
        return invalid(why, whylen, "max_position_embeddings = %d must be positive",
                       cfg->max_position_embeddings);
    if (!(cfg->rope_theta > 0.0))
        return invalid(why, whylen, "rope_theta = %g must be positive", cfg->rope_theta);
    if (!(cfg->rms_norm_eps > 0.0 && cfg->rms_norm_eps < 1.0)) /* 1 or more flattens every norm */
        return invalid(why, whylen, "rms_norm_eps = %g must be in (0, 1)", cfg->rms_norm_eps);
    if (!(cfg->initializer_range >= 0.0))
        return invalid(why, whylen, "initializer_range = %g must be >= 0", cfg->initializer_range);
    if (sdp_model_rope_check(cfg, buf, sizeof(buf)) != 0)
        return invalid(why, whylen, "%s", buf);
    return 0;
}

int sdp_model_num_groups(const struct sdp_model_cfg *cfg)
{
    return cfg->num_layers + 2;
}

enum sdp_group_kind sdp_model_group_kind(const struct sdp_model_cfg *cfg, int g)
{
    if (g == 0)
        return SDP_GROUP_EMBED;
    if (g <= cfg->num_layers)
        return SDP_GROUP_LAYER;
    return SDP_GROUP_HEAD;
}

static void add(struct sdp_param_desc *out, int *n, size_t *off, enum sdp_ptensor kind, int layer,
                int rows, int cols, int decay, const char *suffix)
{
    struct sdp_param_desc *d = &out[(*n)++];
    d->kind = kind;
    d->layer = layer;
    d->offset = *off;
    d->rows = rows;
    d->cols = cols;
    d->decay = decay;
    if (layer >= 0)
        snprintf(d->hf_name, sizeof(d->hf_name), "model.layers.%d.%s", layer, suffix);
    else
        snprintf(d->hf_name, sizeof(d->hf_name), "%s", suffix);
    *off += (size_t)rows * (size_t)cols;
}

int sdp_model_group_tensors(const struct sdp_model_cfg *cfg, int g, struct sdp_param_desc *out)
{
    const int C = cfg->hidden_size, I = cfg->intermediate_size, HD = cfg->head_dim;
    const int V = cfg->vocab_size, NH = cfg->num_heads, NKV = cfg->num_kv_heads;
    int n = 0;
    size_t off = 0;

    if (g < 0 || g >= sdp_model_num_groups(cfg))
        return 0;
    switch (sdp_model_group_kind(cfg, g)) {
    case SDP_GROUP_EMBED:
        add(out, &n, &off, SDP_PT_EMBED, -1, V, C, 1, "model.embed_tokens.weight");
        break;
    case SDP_GROUP_LAYER: {
        int l = g - 1;
        add(out, &n, &off, SDP_PT_LN1, l, 1, C, 0, "input_layernorm.weight");
        add(out, &n, &off, SDP_PT_Q, l, NH * HD, C, 1, "self_attn.q_proj.weight");
        add(out, &n, &off, SDP_PT_K, l, NKV * HD, C, 1, "self_attn.k_proj.weight");
        add(out, &n, &off, SDP_PT_V, l, NKV * HD, C, 1, "self_attn.v_proj.weight");
        if (cfg->qk_norm) {
            add(out, &n, &off, SDP_PT_QNORM, l, 1, HD, 0, "self_attn.q_norm.weight");
            add(out, &n, &off, SDP_PT_KNORM, l, 1, HD, 0, "self_attn.k_norm.weight");
        }
        add(out, &n, &off, SDP_PT_O, l, C, NH * HD, 1, "self_attn.o_proj.weight");
        add(out, &n, &off, SDP_PT_LN2, l, 1, C, 0, "post_attention_layernorm.weight");
        if (sdp_model_layer_sparse(cfg, l)) {
            const int E = cfg->num_experts, IM = cfg->moe_intermediate_size;
            add(out, &n, &off, SDP_PT_ROUTER, l, E, C, 1, "mlp.gate.weight");
            add(out, &n, &off, SDP_PT_EXP_GU, l, E * 2 * IM, C, 1, "mlp.experts.gate_up_proj");
            add(out, &n, &off, SDP_PT_EXP_DOWN, l, E * C, IM, 1, "mlp.experts.down_proj");
            break;
        }
        add(out, &n, &off, SDP_PT_GATE, l, I, C, 1, "mlp.gate_proj.weight");
        add(out, &n, &off, SDP_PT_UP, l, I, C, 1, "mlp.up_proj.weight");
        add(out, &n, &off, SDP_PT_DOWN, l, C, I, 1, "mlp.down_proj.weight");
        break;
    }
    case SDP_GROUP_HEAD:
        add(out, &n, &off, SDP_PT_NORM, -1, 1, C, 0, "model.norm.weight");
        if (!cfg->tie_word_embeddings)
            add(out, &n, &off, SDP_PT_LM_HEAD, -1, V, C, 1, "lm_head.weight");
        break;
    }
    return n;
}

size_t sdp_model_group_nelems(const struct sdp_model_cfg *cfg, int g)
{
    struct sdp_param_desc d[SDP_MAX_GROUP_TENSORS];
    int n = sdp_model_group_tensors(cfg, g, d);
    if (n == 0)
        return 0;
    return d[n - 1].offset + (size_t)d[n - 1].rows * (size_t)d[n - 1].cols;
}

size_t sdp_model_offset(const struct sdp_model_cfg *cfg, int g, enum sdp_ptensor k)
{
    struct sdp_param_desc d[SDP_MAX_GROUP_TENSORS];
    int n = sdp_model_group_tensors(cfg, g, d);
    for (int i = 0; i < n; i++) {
        if (d[i].kind == k)
            return d[i].offset;
    }
    return (size_t)-1;
}

size_t sdp_model_num_params(const struct sdp_model_cfg *cfg)
{
    size_t total = 0;
    for (int g = 0; g < sdp_model_num_groups(cfg); g++)
        total += sdp_model_group_nelems(cfg, g);
    return total;
}

size_t sdp_model_mlp_params(const struct sdp_model_cfg *cfg, int l, int active)
{
    const size_t C = (size_t)cfg->hidden_size, IM = (size_t)cfg->moe_intermediate_size;
    const size_t E = (size_t)cfg->num_experts, K = (size_t)cfg->num_experts_per_tok;
    if (!sdp_model_layer_sparse(cfg, l))
        return 3 * (size_t)cfg->intermediate_size * C;
    return E * C + (active ? K : E) * 3 * IM * C;
}

/* Linear-layer parameters a token passes through in the decoder layers: q, k, v, o, and the MLP's
 * (gate, up, down; of a sparse layer, the router and the K experts a token uses). */
static size_t layers_matmul_params(const struct sdp_model_cfg *cfg)
{
    const size_t C = (size_t)cfg->hidden_size;
    const size_t HD = (size_t)cfg->head_dim, NH = (size_t)cfg->num_heads,
                 NKV = (size_t)cfg->num_kv_heads;
    size_t n = (size_t)cfg->num_layers * ((NH + 2 * NKV) * HD * C + C * NH * HD);
    for (int l = 0; l < cfg->num_layers; l++)
        n += sdp_model_mlp_params(cfg, l, 1);
    return n;
}

size_t sdp_model_matmul_params(const struct sdp_model_cfg *cfg)
{
    /* the LM head is a (V, C) matmul whether or not it shares the embedding's storage */
    return layers_matmul_params(cfg) + (size_t)cfg->vocab_size * (size_t)cfg->hidden_size;
}

double sdp_model_layer_fwd_flops(const struct sdp_model_cfg *cfg, int B, int T)
{
    const double N = (double)B * (double)T;
    /* 2 FLOPs per multiply-add; attention: QK^T and PV are 2*T*T*HD each per head, halved by the
     * mask */
    double gemm = 2.0 * N * (double)layers_matmul_params(cfg) / (double)cfg->num_layers;
    double attn =
        2.0 * (double)B * (double)cfg->num_heads * (double)T * (double)T * (double)cfg->head_dim;
    return gemm + attn;
}

double sdp_model_train_flops_per_token(const struct sdp_model_cfg *cfg, int T)
{
    return 6.0 * (double)sdp_model_matmul_params(cfg) + 6.0 * (double)cfg->num_layers *
                                                            (double)cfg->num_heads *
                                                            (double)cfg->head_dim * (double)T;
}

/* Kept whole, one layer saves per token (elem_bytes each): its input x (C), the ln1 output (C), the
 * q/k/v projection (QKV), q and k after norm and rotary embedding ((NH+NKV)*HD), the attention
 * output (NH*HD), the residual after attention (C), the ln2 output (C), gate and up (2I) and
 * silu(gate)*up (I); and in fp32: the rstd of ln1 and ln2 (2), the rstd of q/k norm (NH+NKV, Qwen3)
 * and the attention log-sum-exp (NH).  A model with sparse layers counts, in place of gate, up and
 * SwiGLU, what a sparse layer keeps where that is larger.  Recomputed, it saves its input x only.
 * The residual stream, x and the residual after attention, may take res_bytes instead
 * (train.residual_dtype fp32: 4 under bf16 activations).
 */
size_t sdp_model_layer_act_bytes(const struct sdp_model_cfg *cfg, int B, int T, int elem_bytes,
                                 int recompute)
{
    return sdp_model_layer_act_bytes_res(cfg, B, T, elem_bytes, elem_bytes, recompute);
}

/* x and the mid residual take res_bytes an element, the rest as above */
size_t sdp_model_layer_act_bytes_res(const struct sdp_model_cfg *cfg, int B, int T, int elem_bytes,
                                     int res_bytes, int recompute)
{
    const size_t N = (size_t)B * (size_t)T, C = (size_t)cfg->hidden_size;
    const size_t I = (size_t)cfg->intermediate_size, HD = (size_t)cfg->head_dim;
    const size_t NH = (size_t)cfg->num_heads, NKV = (size_t)cfg->num_kv_heads;
    const size_t eb = (size_t)elem_bytes, rb = (size_t)res_bytes;
    if (recompute == SDP_RECOMPUTE_ATTN) /* the input, the attention's output, its fp32 LSE */
        return N * (C * rb + NH * HD * eb + NH * 4);
    if (recompute)
        return N * C * rb * (recompute == SDP_RECOMPUTE_SELECTIVE ? 2 : 1);
    size_t mlp = 3 * I, f32 = 2 + NH + (cfg->qk_norm ? NH + NKV : 0);
    if (sdp_model_num_sparse_layers(cfg) > 0) { /* the larger of a dense and a sparse layer's */
        /* per token, in fp32 (codelets/moe.c): E probabilities, K routing slots (id, weight,
         * places) and, per slot, its row, gate/up, SwiGLU and output */
        const size_t E = (size_t)cfg->num_experts, K = (size_t)cfg->num_experts_per_tok;
        const size_t IM = (size_t)cfg->moe_intermediate_size;
        size_t sparse = E + K * (4 + 2 * C + 3 * IM);
        if (sparse * 4 > mlp * eb) {
            f32 += sparse;
            mlp = 0;
        }
    }
    size_t elems = 2 * C + (NH + 2 * NKV) * HD + (NH + NKV) * HD + NH * HD + mlp;
    return N * (elems * eb + 2 * C * rb + f32 * 4);
}

size_t sdp_model_state_bytes(const struct sdp_model_cfg *cfg, int work_elem_bytes)
{
    /* fp32 master, Adam m, Adam v, fp32 gradient: 16 bytes, plus the working copy */
    return sdp_model_num_params(cfg) * (16 + (size_t)work_elem_bytes);
}
