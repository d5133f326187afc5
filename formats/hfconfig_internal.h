/* SPDX-License-Identifier: MIT */
/* Shared between formats/hfconfig.c and formats/hfconfig_moe.c: the mixture-of-experts keys of a
 * Qwen3-MoE config.json, read and written. */
#ifndef SDP_HFCONFIG_INTERNAL_H
#define SDP_HFCONFIG_INTERNAL_H

#include <jansson.h>

#include "models/sdp_models.h"

/** Read the MoE keys of a qwen3_moe config (root) into c with Qwen3MoeConfig's defaults for the
 * absent ones; keys of features the runtime does not run (shared experts, another router) are
 * errors naming the key.  @return 0 or -EINVAL (logged) */
int sdp_hfconfig_moe_read(const char *path, json_t *root, struct sdp_model_cfg *c);

/** The boolean key of root into *out.  @return 0; 1 when absent or null (*out unchanged); or
 * -EINVAL (logged with the file and key) when not a boolean */
int sdp_hfconfig_get_bool(const char *path, json_t *root, const char *key, int *out);

/** Add c's MoE keys to root.  @return 0, or -1 when out of memory */
int sdp_hfconfig_moe_write(json_t *root, const struct sdp_model_cfg *c);

#endif
