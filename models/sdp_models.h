/* SPDX-License-Identifier: MIT */
/* Transformer architectures as pure C: configuration, the parameter layout of every streamed group,
 * and the cost model (parameter bytes, activation bytes, FLOPs).  No StarPU, no I/O: parsing
 * config.json lives in formats/hfconfig.c.  Tests: tests/models/test_model_layout.c.
 *
 * Dimension legend (used in comments across the project, as in llm.c):
 *   B   sequences in a micro-batch          T   sequence length (tokens per sequence)
 *   N   tokens in a micro-batch (B*T)       C   hidden size (channels)
 *   NH  query heads                         NKV key/value heads (grouped-query attention)
 *   HD  head dimension                      I   MLP intermediate size
 *   V   vocabulary size                     L   decoder layers
 *   QKV (NH + 2*NKV) * HD: width of the fused q/k/v projection
 *   E   experts of a mixture-of-experts layer   K   experts per token (top-k)
 *   IM  an expert's intermediate size (moe_intermediate_size)
 */
#ifndef SDP_MODELS_H
#define SDP_MODELS_H

#include <stddef.h>
#include <stdint.h>

enum sdp_arch {
    SDP_ARCH_QWEN3, /* Qwen3ForCausalLM: Llama + per-head RMSNorm on q and k */
    SDP_ARCH_LLAMA, /* LlamaForCausalLM (rope_scaling "llama3" supported) */
};

/* Hugging Face's rope_type values this project implements (with rope_scaling_factor != 0). */
enum sdp_rope_type {
    SDP_ROPE_LLAMA3 = 0, /* _compute_llama3_parameters */
    SDP_ROPE_YARN,       /* _compute_yarn_parameters: inverse frequencies and an attention factor */
    SDP_ROPE_LINEAR,     /* _compute_linear_scaling_rope_parameters: inv_freq / factor */
    SDP_ROPE_DYNAMIC,    /* _compute_dynamic_ntk_parameters: the base grows with the length */
    SDP_ROPE_NTYPES
};

/* Most entries of a Qwen3-MoE config's mlp_only_layers list. */
#define SDP_MOE_MAX_MLP_ONLY 256

struct sdp_model_cfg {
    enum sdp_arch arch;
    int vocab_size;        /* V */
    int hidden_size;       /* C */
    int intermediate_size; /* I */
    int num_layers;        /* L */
    int num_heads;         /* NH */
    int num_kv_heads;      /* NKV */
    int head_dim;          /* HD */
    int max_position_embeddings;
    double rope_theta;
    double rms_norm_eps;
    int tie_word_embeddings; /* 1: lm_head shares the embedding matrix */
    int qk_norm;             /* 1 for Qwen3 */
    /* RoPE scaling (config.json's rope_scaling): rope_scaling_factor == 0 means none, else
     * rope_type (enum sdp_rope_type) says which; 0 is llama3, so that configurations written
     * before the other kinds read as they did. */
    double rope_scaling_factor;
    double rope_low_freq_factor;  /* llama3 */
    double rope_high_freq_factor; /* llama3 */
    int rope_original_max_pos;    /* llama3, yarn (0 for yarn: max_position_embeddings) */
    int rope_type;
    double rope_beta_fast, rope_beta_slow;   /* yarn; 0: transformers' 32 and 1 */
    double rope_attention_factor;            /* yarn; 0: from factor (and the mscales) */
    double rope_mscale, rope_mscale_all_dim; /* yarn; 0: absent */
    int rope_no_truncate;                    /* yarn: 1 for "truncate": false */
    int bos_token_id;                        /* -1 when absent */
    int eos_token_id;                        /* -1 when absent */
    double initializer_range;
    /* Mixture of experts (model_type qwen3_moe, transformers' Qwen3MoeConfig; moe == 0: a dense
     * model and the fields below are unused).  Which decoder layers are sparse:
     * sdp_model_layer_sparse(). */
    int moe;                   /* 1: Qwen3-MoE */
    int num_experts;           /* E (0: every layer dense) */
    int num_experts_per_tok;   /* K */
    int moe_intermediate_size; /* IM */
    int norm_topk_prob;        /* 1: the K routing weights are renormalised to sum to 1 */
    int decoder_sparse_step;   /* layer l (0-based) is sparse when (l + 1) % step == 0 ... */
    int num_mlp_only;          /* ... and l is not one of mlp_only_layers[0..num_mlp_only) */
    int mlp_only_layers[SDP_MOE_MAX_MLP_ONLY];
    double router_aux_loss_coef; /* the loss adds coef * load-balancing loss ... */
    int output_router_logits;    /* ... when this is 1 (transformers' default: 0, no aux loss) */
    const struct sdp_moe_profile *routing; /* a run's measured routing (NULL: an even router) */
};

/* A run's measured routing (`slidedp train`'s DIR/moe-routing.json, `slidedp plan --moe-routing`):
 * over `steps` steps of `tokens` tokens each, in how many steps expert e of the n-th sparse layer
 * received a token: hits[n * experts + e]. */
struct sdp_moe_profile {
    double tokens;
    int steps, nlayers, experts;
    const int *hits;
};

/* Streamed parameter groups: group 0 is the token embedding, groups 1..L the decoder layers, group
 * L+1 the head (final norm, plus lm_head when embeddings are untied).  Each group is one flat
 * vector; its tensors sit back to back in the order below, so q/k/v form one (QKV, C) matrix and
 * gate/up one (2I, C) matrix.  A sparse layer's experts are two tensors stacked over the experts
 * as transformers' Qwen3MoeExperts holds them (its fused names are their hf_name); checkpoints
 * name them per expert, mlp.experts.{e}.gate_proj/up_proj/down_proj.weight, which
 * runtime/state_moe.c reads and writes. */
enum sdp_ptensor {
    /* group 0 */
    SDP_PT_EMBED, /* (V, C) model.embed_tokens.weight */
    /* decoder layer groups */
    SDP_PT_LN1,   /* (C) input_layernorm.weight */
    SDP_PT_Q,     /* (NH*HD, C) self_attn.q_proj.weight */
    SDP_PT_K,     /* (NKV*HD, C) self_attn.k_proj.weight */
    SDP_PT_V,     /* (NKV*HD, C) self_attn.v_proj.weight */
    SDP_PT_QNORM, /* (HD) self_attn.q_norm.weight (Qwen3 only) */
    SDP_PT_KNORM, /* (HD) self_attn.k_norm.weight (Qwen3 only) */
    SDP_PT_O,     /* (C, NH*HD) self_attn.o_proj.weight */
    SDP_PT_LN2,   /* (C) post_attention_layernorm.weight */
    SDP_PT_GATE,  /* (I, C) mlp.gate_proj.weight */
    SDP_PT_UP,    /* (I, C) mlp.up_proj.weight */
    SDP_PT_DOWN,  /* (C, I) mlp.down_proj.weight */
    /* a sparse layer's MLP (sdp_model_layer_sparse), in place of gate, up and down */
    SDP_PT_ROUTER,   /* (E, C) mlp.gate.weight */
    SDP_PT_EXP_GU,   /* (E, 2IM, C) mlp.experts.gate_up_proj: expert e's gate (IM, C) then up */
    SDP_PT_EXP_DOWN, /* (E, C, IM) mlp.experts.down_proj */
    /* head group */
    SDP_PT_NORM,    /* (C) model.norm.weight */
    SDP_PT_LM_HEAD, /* (V, C) lm_head.weight (untied only) */
    SDP_PT_COUNT
};

enum sdp_group_kind { SDP_GROUP_EMBED, SDP_GROUP_LAYER, SDP_GROUP_HEAD };

/* One tensor of a group: where it sits in the group's flat vector. */
struct sdp_param_desc {
    enum sdp_ptensor kind;
    int layer;        /* decoder layer index (0-based) or -1 */
    size_t offset;    /* elements from the start of the group */
    int rows, cols;   /* row-major (rows, cols); 1-D tensors have rows == 1 */
    int decay;        /* 1: AdamW weight decay applies (matrices), 0: norms */
    char hf_name[96]; /* Hugging Face tensor name */
};

#define SDP_MAX_GROUP_TENSORS 12

/** Check a configuration for values the runtime cannot run.
 * @param[in] cfg  configuration to check
 * @param[out] why  filled with a one-line reason when invalid (may be NULL)
 * @param[in] whylen  size of why
 * @return 0 when valid, -EINVAL otherwise */
int sdp_model_validate(const struct sdp_model_cfg *cfg, char *why, size_t whylen);

/** The mixture-of-experts fields of cfg (sdp_model_validate calls it when cfg->moe).
 * @return 0 when valid, -1 with a one-line reason naming the config.json key in why otherwise */
int sdp_model_moe_check(const struct sdp_model_cfg *cfg, char *why, size_t whylen);

/** Whether decoder layer l (0-based, transformers' layer_idx; the project's group l + 1) has a
 * sparse mixture-of-experts MLP, by Qwen3MoeDecoderLayer's rule: l not in mlp_only_layers and
 * num_experts > 0 and (l + 1) % decoder_sparse_step == 0.  0 for dense models. */
int sdp_model_layer_sparse(const struct sdp_model_cfg *cfg, int l);

/** The per-expert tensors of checkpoints inside a stacked expert tensor d of the layout
 * (SDP_PT_EXP_GU: expert e's mlp.experts.{e}.gate_proj.weight (IM, C) and up_proj (IM, C);
 * SDP_PT_EXP_DOWN: its down_proj (C, IM)), as descriptors of their place in the group.
 * @param[out] out  2 entries
 * @return the number written: 2, 1, or 0 when d is not an expert tensor */
int sdp_model_expert_slices(const struct sdp_model_cfg *cfg, const struct sdp_param_desc *d, int e,
                            struct sdp_param_desc *out);

/** Number of sparse decoder layers (0 for dense models). */
int sdp_model_num_sparse_layers(const struct sdp_model_cfg *cfg);

/** Elements of group g's experts (its stacked gate_up and down: E 3 IM C) where g is a sparse
 * layer's group, else 0. */
size_t sdp_model_group_expert_elems(const struct sdp_model_cfg *cfg, int g);

/** The share of a sparse layer's experts that `tokens` tokens route to (routed streaming's bytes,
 * docs/moe.md).  Expected of a router that spreads tokens evenly: each token picks K of E, so an
 * expert gets none of them with probability (1 - K/E)^tokens.  With cfg->routing, measured: an
 * expert that received a token in a share f of the measured steps of N tokens gets none of
 * `tokens` with probability (1 - f)^(tokens / N) (tokens routed independently), averaged over
 * the sparse layers' experts.  0 for dense models. */
double sdp_model_moe_routed_share(const struct sdp_model_cfg *cfg, double tokens);

/** Number of streamed groups: L + 2. */
int sdp_model_num_groups(const struct sdp_model_cfg *cfg);

/** Kind of group g (0 <= g < num_groups). */
enum sdp_group_kind sdp_model_group_kind(const struct sdp_model_cfg *cfg, int g);

/** Tensors of group g, in layout order.
 * @param[out] out  at least SDP_MAX_GROUP_TENSORS entries
 * @return number of tensors written */
int sdp_model_group_tensors(const struct sdp_model_cfg *cfg, int g, struct sdp_param_desc *out);

/** Elements of group g. */
size_t sdp_model_group_nelems(const struct sdp_model_cfg *cfg, int g);

/** Offset (elements) of tensor kind k inside its group g, or (size_t)-1 if absent. */
size_t sdp_model_offset(const struct sdp_model_cfg *cfg, int g, enum sdp_ptensor k);

/** Total trainable parameters (tied embeddings counted once). */
size_t sdp_model_num_params(const struct sdp_model_cfg *cfg);

/** Parameters of the linear layers plus the LM head (BENCH.md's "matmul params"). */
size_t sdp_model_matmul_params(const struct sdp_model_cfg *cfg);

/** Forward FLOPs of one decoder layer for B sequences of T tokens (GEMMs + causal attention half),
 * averaged over the layers (a sparse layer's GEMMs: its router and the K experts of each token).
 */
double sdp_model_layer_fwd_flops(const struct sdp_model_cfg *cfg, int B, int T);

/** Model FLOPs per token for training as BENCH.md counts them:
 * 6 * matmul params + 6 * L * NH * HD * T (recomputation not counted). */
double sdp_model_train_flops_per_token(const struct sdp_model_cfg *cfg, int T);

/* What the backward does with a layer's activations (sdp_graph_conf.recompute, the recipe's
 * train.activations): keep them all from the forward, recompute them from the layer's input,
 * recompute them from the input and the mid residual (input + attention) kept too, or recompute
 * them from the input and the attention's output and log-sum-exp kept too (ATTN: the
 * recomputation skips the attention core, whose cost grows with the sequence's square). */
enum sdp_recompute {
    SDP_RECOMPUTE_NONE = 0,
    SDP_RECOMPUTE_FULL = 1,
    SDP_RECOMPUTE_SELECTIVE = 2,
    SDP_RECOMPUTE_ATTN = 3
};

/** Bytes of the activations one decoder layer keeps between forward and backward for B*T tokens
 * (recompute: enum sdp_recompute): its input when it is recomputed, its input and its mid
 * residual when selectively, its input and the attention's output and LSE with ATTN, every
 * intermediate when it is kept whole; in elements of elem_bytes. */
size_t sdp_model_layer_act_bytes(const struct sdp_model_cfg *cfg, int B, int T, int elem_bytes,
                                 int recompute);
/** The same with the residual stream (the layer's input and its mid residual) in elements of
 * res_bytes (train.residual_dtype fp32: 4 under bf16 activations). */
size_t sdp_model_layer_act_bytes_res(const struct sdp_model_cfg *cfg, int B, int T, int elem_bytes,
                                     int res_bytes, int recompute);

/** Host bytes of the training state: fp32 master + Adam m, v + fp32 gradient + working copy of
 * work_elem_bytes per parameter. */
size_t sdp_model_state_bytes(const struct sdp_model_cfg *cfg, int work_elem_bytes);

/** rope_type's name in config.json ("llama3", "yarn", "linear", "dynamic"), NULL if out of range.
 */
const char *sdp_model_rope_name(int rope_type);

/** The rope scaling fields of cfg (sdp_model_validate calls it).
 * @return 0 when valid, -1 with a one-line reason in why (non-NULL) otherwise */
int sdp_model_rope_check(const struct sdp_model_cfg *cfg, char *why, size_t whylen);

/** Longest sequence the configuration admits: max_position_embeddings without rope scaling,
 * INT_MAX with it (transformers extrapolates any length then). */
int sdp_model_max_seq(const struct sdp_model_cfg *cfg);

/** Name of an architecture ("qwen3", "llama"). */
const char *sdp_model_arch_name(enum sdp_arch arch);

/** Fill cfg from a named preset of ../BENCH.md ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b",
 * "qwen3-14b", "qwen3-32b") or a Qwen3-MoE one (sdp_model_moe_preset). @return 0, or -ENOENT for
 * an unknown name. */
int sdp_model_preset(const char *name, struct sdp_model_cfg *cfg);

/** Fill cfg from a Qwen3-MoE preset ("qwen3-30b-a3b", "qwen3-30b-a3b-l12": its first 12 layers,
 * the depth whose full fine-tuning fits a 125 GiB host). @return 0, or -ENOENT. */
int sdp_model_moe_preset(const char *name, struct sdp_model_cfg *cfg);
/** A Qwen3 of Hugging Face's released shapes (vocabulary, head_dim 128, RoPE, norms, special ids)
 * with hidden size C, intermediate size I, L layers, NH heads, NKV key/value heads and tied or
 * untied embeddings: what the presets share. */
void sdp_model_qwen3_shape(struct sdp_model_cfg *c, int C, int I, int L, int NH, int NKV, int tied);

/** Parameters of decoder layer l's MLP: dense 3 I C, sparse E C + E 3 IM C (active: only the K
 * experts a token uses, E C + K 3 IM C). */
size_t sdp_model_mlp_params(const struct sdp_model_cfg *cfg, int l, int active);

/** Set the defaults of an architecture (eps, theta, head_dim from C/NH, ...) before overrides. */
void sdp_model_defaults(struct sdp_model_cfg *cfg, enum sdp_arch arch);

/* ---- GPU workspaces that grow with the tokens (models/workspace.c): the codelets size their
 * calls by these and the plan counts the same bytes ---- */
/** Bytes of cuDNN's attention workspace for one call over bs whole rows of T tokens: the backward
 * (bwd 1) two fp32 (bs, NH, T, HD) accumulators and the fp32 (bs, NH, T) softmax sums, the
 * forward none. */
unsigned long long sdp_model_attention_ws_bytes(int bwd, int bs, int T, int NH, int HD);
/* What cuDNN may ask beyond that model, its buffers' rounding: under 0.05 MiB on an H100
 * (bench/results/2026-12-07-h100-long.md), within the 64 MiB the plan counts for the kernels'
 * own workspaces (sdp_graph_ws_bytes); a call asking more is reported. */
#define SDP_CUDNN_WS_SLACK (1ull << 20)
/** Bytes of the project's own attention backward kernels' workspace for B rows of T tokens (one
 * call): the fp32 softmax sums, 256-byte aligned, and an fp32 dQ accumulator. */
unsigned long long sdp_model_attention_own_ws_bytes(int B, int T, int NH, int HD);
/** Rows per attention call for B rows: the largest divisor of B whose workspace fits budget
 * (bytes), else 1. */
int sdp_model_attention_batch(int bwd, int B, int T, int NH, int HD, unsigned long long budget);
/** The LM head's logits block in bytes: requested if > 0, else 1 GiB, or 256 MiB under a GPU
 * limit (bytes, 0: none) below 20 GiB. */
unsigned long long sdp_model_lmhead_block_bytes(unsigned long long gpu_limit,
                                                unsigned long long requested);
/** Token rows of one LM-head block of block_bytes logits of logits_es bytes: 1 .. N. */
int sdp_model_lmhead_block_rows(int N, int V, unsigned long long block_bytes, int logits_es);
/** The LM head's GPU workspace for N tokens in blocks of rows: the logits block and two fp64
 * per-token vectors, each 256-byte aligned (sdp_cuda_lmhead_ce_ws). */
unsigned long long sdp_model_lmhead_ws_bytes(int N, int V, int rows, int logits_es);

#endif
