/* SPDX-License-Identifier: MIT */
/* Byte-level BPE tokenizer, identical in output to Hugging Face `tokenizers` (Tokenizer.encode with
 * add_special_tokens=False) for Qwen3, Llama-3 and GPT-2 style tokenizers.  It reads a
 * tokenizer.json (BPE model; NFC or no normalizer; Split and ByteLevel pre-tokenizers) or GPT-2's
 * vocab.json + merges.txt.  No StarPU.  Tests: tests/text/test_tokenizer.c (unit) and
 * tests/text/test_tokenize_hf.py (against Python `tokenizers`). */
#ifndef SDP_TOKENIZER_H
#define SDP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct sdp_tok sdp_tok_t;

/** Load a tokenizer.
 * @param[in]  path  a tokenizer.json file, or a directory holding tokenizer.json or
 *                   vocab.json + merges.txt (GPT-2 layout; `<|endoftext|>`, when in the vocabulary,
 *                   becomes a special added token as in GPT-2's tokenizer.json)
 * @param[out] tok   the tokenizer, to release with sdp_tok_free()
 * @return 0, -ENOENT (no such file), -EINVAL (malformed JSON with line/column, or an unsupported
 *         normalizer / pre-tokenizer / model, named with its JSON path), -ENOMEM */
int sdp_tok_load(const char *path, sdp_tok_t **tok);

/** Release a tokenizer (NULL is fine). */
void sdp_tok_free(sdp_tok_t *tok);

/** Encode bytes into token ids.  Added tokens (special or not) are recognised in the text first,
 * then each remaining span is normalized, pre-tokenized and BPE-merged.  Any bytes are accepted:
 * invalid UTF-8 is never merged with valid text by the regex and is still encoded byte by byte.
 * Not thread-safe: the tokenizer keeps a word cache; use one sdp_tok_t per thread.
 * @param[in]  text, len  the input (need not be NUL-terminated)
 * @param[out] ids        malloc'ed array of *n ids (NULL when *n is 0); the caller frees it
 * @param[out] n          number of ids
 * @return 0, -ENOMEM */
int sdp_tok_encode(sdp_tok_t *tok, const char *text, size_t len, uint32_t **ids, size_t *n);

/** Same as sdp_tok_encode, appending to a caller-owned growable array (*ids of capacity *cap,
 * holding *n ids); lets a caller encode many documents without a copy each. */
int sdp_tok_encode_append(sdp_tok_t *tok, const char *text, size_t len, uint32_t **ids, size_t *n,
                          size_t *cap);

/** Decode ids back into bytes (added tokens as their content, special ones included).
 * @param[out] text  malloc'ed, NUL-terminated (the NUL not counted in *len); caller frees
 * @return 0, -EINVAL (an id outside the vocabulary, logged), -ENOMEM */
int sdp_tok_decode(const sdp_tok_t *tok, const uint32_t *ids, size_t n, char **text, size_t *len);

/** Number of ids: highest id of the vocabulary and the added tokens, plus one (151669 for Qwen3,
 * 50257 for GPT-2); equals tokenizers' get_vocab_size(with_added_tokens=True) when ids are
 * dense. */
uint32_t sdp_tok_vocab_size(const sdp_tok_t *tok);

/** Apply the tokenizer's normalizer (NFC for Qwen3; none for GPT-2) to text, as encoding does to
 * the text between added tokens.  A caller that needs byte offsets into the encoded text encodes
 * normalized text (normalizing is idempotent, so the ids do not change).
 * @param[out] owned  malloc'ed result to free, or NULL when the text is unchanged
 * @param[out] res, res_len  the normalized text (text itself when unchanged)
 * @return 0, -ENOMEM */
int sdp_tok_normalize_text(const sdp_tok_t *tok, const char *text, size_t len, char **owned,
                           const char **res, size_t *res_len);

/** Number of bytes id decodes to (its content for an added token); 0 for an id outside the
 * vocabulary.  Summing them over an encoding gives each token's byte offset in the input. */
size_t sdp_tok_token_nbytes(const sdp_tok_t *tok, uint32_t id);

/** Id of a token given as in tokenizer.json: an added token's content ("<|endoftext|>") or a
 * vocabulary entry in its byte-level spelling ("Ġthe").
 * @return the id (>= 0), or -ENOENT when absent (not logged) */
int sdp_tok_token_id(const sdp_tok_t *tok, const char *token);

#endif
