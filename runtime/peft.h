/* SPDX-License-Identifier: MIT */
/* LoRA adapters in PEFT's format: adapter_config.json (formats/peftconfig.h) and
 * adapter_model.safetensors with PEFT's tensor names
 * (base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight, ...), written from and read
 * into a LoRA state (runtime/state.h, sdp_state_create_lora), and the merge of the adapters into
 * an fp32 base for `slidedp export --merge`.  Tests: tests/e2e/test_e2e_lora_peft.sh. */
#ifndef SDP_PEFT_H
#define SDP_PEFT_H

#include "runtime/state.h"

/** Write the adapters' fp32 masters and their configuration into dir (created if missing), with
 * base (or NULL) as base_model_name_or_path.  Waits for pending tasks.
 * @return 0, -EIO, -ENOSPC, -ENOMEM (logged) */
int sdp_state_save_peft(struct sdp_state *st, const char *dir, const char *base);

/** Read the adapters of dir into the masters of st (before any task).  The adapter's
 * configuration must be st's (r, lora_alpha, target_modules, layers_to_transform: a disagreement
 * names the field) and every tensor must have the shape the base implies; a tensor that is no
 * adapter of that configuration is refused.  @return 0, -ENOENT, -EINVAL (logged) */
int sdp_state_load_peft(struct sdp_state *st, const char *dir);

/** The configuration of the adapter in dir, for model m (the state to make for it).
 * @return 0, -ENOENT, -EINVAL (logged) */
int sdp_peft_read_config(const char *dir, const struct sdp_model_cfg *m, struct sdp_lora_cfg *c);

/** Whether the adapter in dir has configuration lora for model m (as sdp_state_load_peft checks
 * it), before any state exists.  @return 0, -ENOENT, -EINVAL (logged, naming the field) */
int sdp_peft_check_config(const char *dir, const struct sdp_model_cfg *m,
                          const struct sdp_lora_cfg *lora);

/** Fold every adapter into the fp32 base: W += (alpha / r) B A, the products summed in fp64, as
 * PEFT's merge_and_unload does in the weights' dtype.  The base of st must be fp32.
 * @return 0 or -EINVAL */
int sdp_state_lora_merge(struct sdp_state *st);

#endif
