/* SPDX-License-Identifier: MIT */
/* LoRA adapters as pure C, with PEFT's definitions: which linears of a decoder layer may carry an
 * adapter (PEFT's target names), the adapter's shapes (A: r x in, B: out x r, as nn.Linear's
 * weights), the scaling alpha / r, and the checks of a configuration against a model.  The recipe
 * (cli/recipe_lora.c), the plan (graph/plan.c) and the state share these.  No StarPU, no I/O.
 * Tests: tests/models/test_lora.c. */
#ifndef SDP_LORA_H
#define SDP_LORA_H

#include <stddef.h>

#include "models/sdp_models.h"

#define SDP_LORA_NTARGETS 7 /* q, k, v, o, gate, up, down */

struct sdp_lora_cfg {
    int rank;         /* r; 0: no LoRA (the whole model trains) */
    double alpha;     /* PEFT's lora_alpha: the adapter's output is scaled by alpha / r */
    double dropout;   /* PEFT's lora_dropout, on the adapter's input */
    unsigned targets; /* bit (1u << kind) for every adapted enum sdp_ptensor kind */
    int first, last;  /* adapted decoder layers as plan groups, 1..L inclusive; 0, 0: all */
};

/** The bit of kind k in sdp_lora_cfg.targets. */
#define SDP_LORA_BIT(k) (1u << (unsigned)(k))

/** The adaptable kinds, in PEFT's and the layer's order: q, k, v, o, gate, up, down. */
extern const enum sdp_ptensor sdp_lora_kinds[SDP_LORA_NTARGETS];

/** PEFT's target name of an adaptable kind ("q_proj", ...), or NULL for another kind. */
const char *sdp_lora_target_name(enum sdp_ptensor k);

/** The kind of a PEFT target name.  @return 0, or -1 for a name that is no adaptable linear */
int sdp_lora_target_parse(const char *name, enum sdp_ptensor *k);

/** The adapted linear's input and output widths (nn.Linear's in_features, out_features): A is
 * (rank, in), B is (out, rank).  Kind k must be adaptable. */
void sdp_lora_dims(const struct sdp_model_cfg *m, enum sdp_ptensor k, int *in, int *out);

/** Whether decoder layer group gi (1..L) is in c's layers. */
int sdp_lora_layer_on(const struct sdp_lora_cfg *c, int gi);

/** The targets (sdp_lora_cfg.targets' bits) of decoder layer group gi (1..L): c's targets in c's
 * layers, 0 elsewhere; of a sparse layer (Qwen3-MoE), the attention's only (sdp_lora_validate
 * refuses MLP targets there: PEFT would adapt its stacked experts). */
unsigned sdp_lora_layer_targets(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m,
                                int gi);

/** alpha / rank, PEFT's scaling without rsLoRA. */
double sdp_lora_scale(const struct sdp_lora_cfg *c);

/** Check c against model m: rank at least 1 and at most every adapted linear's smaller width,
 * alpha > 0, dropout in [0, 1), at least one target, layers inside 1..L, no gate, up or down
 * target on a sparse layer (PEFT adapts its stacked experts: target_parameters, not supported). why
 * names the recipe key at fault (lora.rank, ...) and the bound.  @return 0, or -1 with why filled
 */
int sdp_lora_validate(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m, char *why,
                      size_t whylen);

/** Elements of decoder layer group gi's adapters (A and B of each of its targets) under c. */
size_t sdp_lora_layer_elems(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m, int gi);

/** Elements of every layer's adapters under c. */
size_t sdp_lora_elems(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m);

/** Model FLOPs per token of a LoRA training step at sequence length T: the frozen base's forward
 * and its backward through the activations (2 + 2 per matmul parameter, no weight gradient), the
 * causal attention's forward and backward as full training counts them, and the adapters' forward,
 * input gradient and weight gradient (6 per adapter parameter):
 *     4 * matmul params + 6 * L * NH * HD * T + 6 * adapter params
 * (recomputation not counted, as sdp_model_train_flops_per_token). */
double sdp_lora_train_flops_per_token(const struct sdp_lora_cfg *c, const struct sdp_model_cfg *m,
                                      int T);

#endif
