/* SPDX-License-Identifier: MIT */
/* Internals shared by text/tokenizer.c (loading, decoding), text/tokenizer_encode.c (the
 * encode pipeline) and text/bpe.c (hash maps, the byte-level alphabet, BPE merges, word cache).
 * Not a public header: only those three files include it. */
#ifndef SDP_TOKENIZER_INTERNAL_H
#define SDP_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tokenizer.h"

/* ---- hash map: byte string -> uint32 (open addressing, keys copied into an arena) ---- */
struct sdp_strmap_ent {
    uint64_t hash;
    size_t off; /* key offset in arena */
    uint32_t len;
    uint32_t val;
};

struct sdp_strmap {
    uint32_t *slots; /* entry index + 1; 0 = empty */
    uint32_t nslots; /* power of two */
    struct sdp_strmap_ent *ents;
    uint32_t n, ents_cap;
    char *arena;
    size_t arena_len, arena_cap;
};

int sdp_strmap_put(struct sdp_strmap *m, const char *key, size_t len, uint32_t val);
int sdp_strmap_get(const struct sdp_strmap *m, const char *key, size_t len, uint32_t *val);
void sdp_strmap_clear(struct sdp_strmap *m);
void sdp_strmap_free(struct sdp_strmap *m);

/* ---- merges: (left id, right id) -> (rank, merged id) ---- */
struct sdp_pairmap {
    uint64_t *keys; /* (left << 32) | right; UINT64_MAX = empty */
    uint32_t *rank, *merged;
    uint32_t nslots, n;
};

int sdp_pairmap_put(struct sdp_pairmap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged);
void sdp_pairmap_free(struct sdp_pairmap *m);

/* ---- GPT-2's byte-level alphabet (bytes_to_unicode in openai/gpt-2 encoder.py) ---- */
extern const uint16_t sdp_bytelevel_cp[256]; /* byte -> code point (all < 324) */

/** Byte-level spelling (UTF-8) -> raw bytes into out (capacity >= len).
 * @return the byte count, or -1 when a character is outside the alphabet */
long sdp_bytelevel_unmap(const char *s, size_t len, char *out);

/* ---- tokenizer ---- */
enum sdp_split_behavior {
    SDP_SPLIT_ISOLATED,
    SDP_SPLIT_REMOVED,
    SDP_SPLIT_MERGED_PREV,
    SDP_SPLIT_MERGED_NEXT
};

struct sdp_pretok {
    int bytelevel;        /* 1: ByteLevel step, 0: Split step */
    int add_prefix_space; /* ByteLevel */
    pcre2_code *re;       /* Split pattern, or GPT-2's regex for ByteLevel(use_regex=true) */
    int jit;              /* re was JIT-compiled */
    enum sdp_split_behavior behavior;
};

struct sdp_added {
    char *content; /* as matched: normalized when `normalized` is set */
    size_t len;
    uint32_t id;
    int special, normalized, lstrip, rstrip, single_word;
};

#define SDP_TOK_MAX_STEPS 8

/* Growable id array. */
struct sdp_ids {
    uint32_t *v;
    size_t n, cap;
};

struct sdp_bpe_sym {
    uint32_t id;
    uint32_t len; /* 0 once merged into its left neighbour */
    int32_t prev, next;
};

struct sdp_tok {
    char path[4096];
    /* id -> bytes (decode); id_len = UINT32_MAX for ids that nothing defines */
    uint32_t n_ids;
    size_t *id_off;
    uint32_t *id_len;
    char *id_bytes;
    size_t id_bytes_len, id_bytes_cap;

    /* BPE model */
    struct sdp_strmap vocab; /* raw bytes -> id, for the entries of the byte-level alphabet */
    struct sdp_strmap other; /* spelling -> id, for entries with characters outside it */
    struct sdp_pairmap merges;
    int32_t byte_id[256]; /* id of each single byte, -1 when absent */
    int32_t unk_id;       /* -1: unknown bytes are dropped, as tokenizers does without unk */
    int fuse_unk, ignore_merges;

    /* added tokens, longest first; added_first[normalized][b]: some token starts with byte b */
    struct sdp_added *added;
    size_t n_added;
    uint8_t added_first[2][256];
    struct sdp_strmap added_map; /* content as written in tokenizer.json -> id */

    /* normalizer: utf8proc option sets applied in order (0 entries: none) */
    int norm_opts[SDP_TOK_MAX_STEPS];
    int n_norm;

    /* pre-tokenizer steps; the last one is ByteLevel */
    struct sdp_pretok steps[SDP_TOK_MAX_STEPS];
    int n_steps;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;

    /* word cache: piece bytes -> span in cache_ids */
    struct sdp_strmap cache;
    struct sdp_ids cache_ids;

    /* scratch of the BPE merge loop */
    struct sdp_bpe_sym *sym;
    size_t sym_cap;
    uint64_t *heap;
    size_t heap_cap;
};

int sdp_ids_push(struct sdp_ids *o, uint32_t id);

/** Apply the normalizer to s.  *res points to s itself when nothing changes (*owned = NULL),
 * else to *owned, a malloc'ed buffer the caller frees. */
int sdp_tok_normalize(const struct sdp_tok *t, const char *s, size_t len, char **owned,
                      const char **res, size_t *res_len);

/** BPE-merge one pre-tokenized piece (raw bytes) and append its ids (through the word cache). */
int sdp_bpe_word(struct sdp_tok *t, const char *s, size_t len, struct sdp_ids *out);

#endif
