/* SPDX-License-Identifier: MIT */
/* The LoRA parts of the training state (runtime/state_lora.c) that runtime/state.c calls: the
 * adapters of a layer, the rounding of a frozen base into its bf16 working copy, and the
 * counter-based generator both initialisations draw from.  Internal to runtime/. */
#ifndef SDP_STATE_LORA_H
#define SDP_STATE_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/state.h"

/** Allocate decoder layer g's adapters under st->lora (zeros).  @return 0, -ENOMEM (logged) */
int sdp_state_lora_make(struct sdp_state *st, int g);
/** Release gs's adapters (none: nothing). */
void sdp_state_lora_free(struct sdp_group_state *gs);
/** dst[i] = src[i] rounded to bf16, to nearest even, as the cast kernel rounds finite values. */
void sdp_state_lora_round(void *dst, const float *src, size_t n);

/** The generator of the initialisations: splitmix64, and FNV-1a of a tensor's name. */
uint64_t sdp_state_splitmix64(uint64_t x);
uint64_t sdp_state_hash_name(const char *s);

#endif
