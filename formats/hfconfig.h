/* SPDX-License-Identifier: MIT */
/* Hugging Face config.json <-> struct sdp_model_cfg (Qwen3ForCausalLM, LlamaForCausalLM,
 * Qwen3MoeForCausalLM).  Unsupported features (attention bias, sliding window, rope scaling other
 * than "llama3", "yarn", "linear" and "dynamic", MoE families other than Qwen3-MoE, shared experts)
 * are errors that name the key.  Tests: tests/formats/test_hfconfig.c,
 * tests/formats/test_hfconfig_moe.c. */
#ifndef SDP_HFCONFIG_H
#define SDP_HFCONFIG_H

#include "models/sdp_models.h"

/** Parse a config.json file (path of the file, or of the directory holding it), MoE configs
 * (cfg->moe) included.
 * @return 0, -ENOENT, -EINVAL (logged: file, key, value, hint) */
int sdp_hfconfig_read(const char *path, struct sdp_model_cfg *cfg);

/** sdp_hfconfig_read() for train, plan, bench and export.  MoE configs are read too: the step
 * graph runs their sparse layers on CPU workers and refuses them elsewhere (graph/moe.c). */
int sdp_hfconfig_load(const char *path, struct sdp_model_cfg *cfg);

/** Write config.json for cfg into path atomically, loadable by transformers' AutoConfig.
 * torch_dtype: "float32" or "bfloat16". */
int sdp_hfconfig_write(const char *path, const struct sdp_model_cfg *cfg, const char *torch_dtype);

#endif
