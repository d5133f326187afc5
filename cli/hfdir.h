/* SPDX-License-Identifier: MIT */
/* What a Hugging Face model directory holds beside its weights and config.json: the tokenizer's
 * files and generation_config.json, so that transformers loads it with its tokenizer and stops
 * generating at the tokenizer's end-of-turn token.  Used by `slidedp train` (RUN/final) and
 * `slidedp export`.  Tests: tests/e2e/test_e2e_final_dir.sh. */
#ifndef SDP_CLI_HFDIR_H
#define SDP_CLI_HFDIR_H

#include "models/sdp_models.h"

/** Whether dir holds a tokenizer (tokenizer.json, tokenizer.model, or vocab.json + merges.txt). */
int sdp_hfdir_has_tokenizer(const char *dir);

/** Check the tokenizer directory `dir` named by `what` (a recipe key or a flag): a directory with
 * a tokenizer that loads, whose ids fit a vocabulary of vocab_size (0: not checked), and fill
 * cfg's bos/eos_token_id where they are unset (-1) from its tokenizer_config.json.  Errors name
 * dir and `what`.  @return 0 or -errno (logged). */
int sdp_hfdir_check_tokenizer(const char *dir, const char *what, struct sdp_model_cfg *cfg);

/** Copy the tokenizer's files (and generation_config.json) of `from` into outdir, each through a
 * temporary renamed into place, then write generation_config.json from cfg and the tokenizer
 * when `from` has none.  @return 0 or -errno (logged). */
int sdp_hfdir_add_tokenizer(const char *from, const char *outdir, const struct sdp_model_cfg *cfg);

#endif
