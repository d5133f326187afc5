/* SPDX-License-Identifier: MIT */
/* PEFT's adapter_config.json for LoRA: read into struct sdp_lora_cfg (refusing what the runtime
 * does not implement, naming the field) and written so that PeftModel.from_pretrained loads it.
 * Tests: tests/e2e/test_e2e_lora_peft.sh. */
#ifndef SDP_PEFTCONFIG_H
#define SDP_PEFTCONFIG_H

#include "models/sdp_lora.h"

/** Read path (an adapter_config.json) for model m into c: r, lora_alpha, lora_dropout,
 * target_modules (a list of the seven projection names, or "all-linear") and layers_to_transform
 * (null, an index or a list of 0-based indices forming one contiguous range).  Refused, naming the
 * field: peft_type other than LORA; use_rslora, use_dora or fan_in_fan_out true; bias other than
 * none; modules_to_save, rank_pattern, alpha_pattern or layers_pattern set; a target that names no
 * linear of a layer (a regex target_modules too); layers outside the model.
 * @return 0, -ENOENT, -EINVAL (logged) */
int sdp_peftconfig_load(const char *path, const struct sdp_model_cfg *m, struct sdp_lora_cfg *c);

/** Write c as path (atomically), with base (or null) as base_model_name_or_path.
 * @return 0, -ENOMEM, -EIO (logged) */
int sdp_peftconfig_write(const char *path, const struct sdp_lora_cfg *c, const char *base);

#endif
