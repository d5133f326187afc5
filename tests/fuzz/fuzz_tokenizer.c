/* SPDX-License-Identifier: MIT */
/* Fuzz target for text/tokenizer.c, tokenizer_encode.c and bpe.c: the input is loaded as a
 * tokenizer.json; a tokenizer that loads encodes a short text (ASCII, added tokens, non-ASCII,
 * invalid UTF-8), decodes the ids back and looks up a few tokens.  Must only return 0 or a
 * negative errno and free everything.
 * Built by tools/fuzz.sh (libFuzzer) and by tests/fuzz/local.mk (regression replay). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

static const char text[] = "Hello world!  It's 2024\n\n<|endoftext|> na\xc3\xafve "
                           "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 caf\x65\xcc\x81 \xff\xfe end";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sdp_tok_t *tok = NULL;
    uint32_t *ids = NULL;
    size_t n = 0;
    char path[600];
    int rc;
    fuzz_path(path, sizeof(path), "tokenizer.json");
    fuzz_write(path, data, size);
    rc = sdp_tok_load(path, &tok);
    fuzz_check_rc("sdp_tok_load", rc);
    if (rc) {
        if (tok)
            abort();
        return 0;
    }
    rc = sdp_tok_encode(tok, text, sizeof(text) - 1, &ids, &n);
    fuzz_check_rc("sdp_tok_encode", rc);
    if (rc == 0) {
        char *back = NULL;
        size_t len = 0;
        for (size_t i = 0; i < n; i++)
            if (ids[i] >= sdp_tok_vocab_size(tok))
                abort();
        rc = sdp_tok_decode(tok, ids, n, &back, &len);
        fuzz_check_rc("sdp_tok_decode", rc);
        free(back);
    }
    free(ids);
    (void)sdp_tok_token_id(tok, "<|endoftext|>");
    (void)sdp_tok_token_id(tok, "\xc4\xa0the");
    sdp_tok_free(tok);
    return 0;
}
