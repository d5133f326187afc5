/* SPDX-License-Identifier: MIT */
/* Loading a byte-level BPE tokenizer (tokenizer.json, or GPT-2's vocab.json + merges.txt) and
 * decoding ids.  Anything the encoder would not reproduce exactly as Hugging Face `tokenizers` does
 * (other models, normalizers, pre-tokenizers, dropout, suffixes) is refused with -EINVAL and the
 * JSON path, never approximated.  Tests: tests/text/test_tokenizer.c. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <utf8proc.h>

#include "base/sdp_log.h"
#include "text/tokenizer_internal.h"

/* Ids beyond this are refused: they would make the id table huge for no real vocabulary. */
#define MAX_ID (1u << 24)

/* GPT-2's pre-tokenizer regex, used by ByteLevel(use_regex=true) (tokenizers byte_level.rs). */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- id table ---- */

static int set_id_bytes(struct sdp_tok *t, uint32_t id, const char *s, size_t len)
{
    if (id >= t->n_ids) {
        size_t n = t->n_ids ? t->n_ids : 1024;
        while (n <= id)
            n *= 2;
        size_t *off = realloc(t->id_off, n * sizeof(*off));
        if (off)
            t->id_off = off;
        uint32_t *lens = realloc(t->id_len, n * sizeof(*lens));
        if (lens)
            t->id_len = lens;
        if (!off || !lens)
            return -ENOMEM;
        for (size_t i = t->n_ids; i < n; i++)
            t->id_len[i] = UINT32_MAX;
        t->n_ids = (uint32_t)n; /* trimmed to the highest id + 1 at the end of loading */
    }
    if (t->id_bytes_len + len > t->id_bytes_cap) {
        size_t cap = t->id_bytes_cap ? t->id_bytes_cap : 1 << 16;
        while (cap < t->id_bytes_len + len)
            cap *= 2;
        char *p = realloc(t->id_bytes, cap);
        if (!p)
            return -ENOMEM;
        t->id_bytes = p;
        t->id_bytes_cap = cap;
    }
    if (len) /* an empty token ("") first: id_bytes is still NULL, and NULL + 0 is undefined */
        memcpy(t->id_bytes + t->id_bytes_len, s, len);
    t->id_off[id] = t->id_bytes_len;
    t->id_len[id] = (uint32_t)len;
    t->id_bytes_len += len;
    return 0;
}

static void trim_ids(struct sdp_tok *t)
{
    while (t->n_ids > 0 && t->id_len[t->n_ids - 1] == UINT32_MAX)
        t->n_ids--;
}

/* ---- vocabulary and merges ---- */

/* Look a token up by its tokenizer.json spelling; 1 when found. */
static int lookup_spelling(const struct sdp_tok *t, const char *s, size_t len, uint32_t *id)
{
    char stackbuf[256];
    char *buf = len <= sizeof(stackbuf) ? stackbuf : malloc(len);
    if (!buf)
        return 0;
    long n = sdp_bytelevel_unmap(s, len, buf);
    int found = n >= 0 ? sdp_strmap_get(&t->vocab, buf, (size_t)n, id)
                       : sdp_strmap_get(&t->other, s, len, id);
    if (buf != stackbuf)
        free(buf);
    return found;
}

static int add_vocab_entry(struct sdp_tok *t, const char *key, size_t klen, json_int_t id,
                           const char *file, const char *where)
{
    if (id < 0 || id >= (json_int_t)MAX_ID)
        return sdp_err(-EINVAL, "tokenizer %s: %s[\"%s\"]: id %lld outside [0, %u)", file, where,
                       key, (long long)id, MAX_ID);
    char *buf = malloc(klen ? klen : 1);
    if (!buf)
        return -ENOMEM;
    long n = sdp_bytelevel_unmap(key, klen, buf);
    int rc;
    if (n >= 0) {
        rc = sdp_strmap_put(&t->vocab, buf, (size_t)n, (uint32_t)id);
        if (!rc)
            rc = set_id_bytes(t, (uint32_t)id, buf, (size_t)n);
    } else {
        /* outside the byte alphabet: no piece can spell it; decoded as its UTF-8, as
         * tokenizers' ByteLevel decoder does */
        rc = sdp_strmap_put(&t->other, key, klen, (uint32_t)id);
        if (!rc)
            rc = set_id_bytes(t, (uint32_t)id, key, klen);
    }
    free(buf);
    return rc;
}

static int load_vocab(struct sdp_tok *t, json_t *vocab, const char *file, const char *where)
{
    const char *key;
    json_t *val;
    if (!json_is_object(vocab))
        return sdp_err(-EINVAL, "tokenizer %s: %s is not a JSON object", file, where);
    json_object_foreach (vocab, key, val) {
        if (!json_is_integer(val))
            return sdp_err(-EINVAL, "tokenizer %s: %s[\"%s\"] is not an integer id", file, where,
                           key);
        int rc = add_vocab_entry(t, key, strlen(key), json_integer_value(val), file, where);
        if (rc)
            return rc;
    }
    for (int b = 0; b < 256; b++) {
        uint32_t id;
        char c = (char)b;
        t->byte_id[b] = sdp_strmap_get(&t->vocab, &c, 1, &id) ? (int32_t)id : -1;
    }
    return 0;
}

/* One merge "a b" of rank `rank`; `where` names it for errors (a JSON path or a file line). */
static int add_merge(struct sdp_tok *t, const char *a, size_t alen, const char *b, size_t blen,
                     uint32_t rank, const char *file, const char *where)
{
    uint32_t ia, ib, im;
    if (!lookup_spelling(t, a, alen, &ia) || !lookup_spelling(t, b, blen, &ib))
        return sdp_err(-EINVAL,
                       "tokenizer %s: %s: \"%.*s %.*s\" uses a token missing from the "
                       "vocabulary",
                       file, where, (int)alen, a, (int)blen, b);
    if (ia >= t->n_ids || ib >= t->n_ids || t->id_len[ia] == UINT32_MAX ||
        t->id_len[ib] == UINT32_MAX)
        return sdp_err(-EINVAL, "tokenizer %s: %s: bad ids", file, where);
    /* the merged token, spelled in raw bytes */
    size_t la = t->id_len[ia], lb = t->id_len[ib];
    char *cat = malloc(la + lb);
    if (!cat)
        return -ENOMEM;
    if (la) /* "" tokens only so far: id_bytes is still NULL, and NULL + 0 is undefined */
        memcpy(cat, t->id_bytes + t->id_off[ia], la);
    if (lb)
        memcpy(cat + la, t->id_bytes + t->id_off[ib], lb);
    int found = sdp_strmap_get(&t->vocab, cat, la + lb, &im);
    free(cat);
    if (!found) {
        uint32_t dummy;
        /* a pair of tokens outside the byte alphabet can never be formed: tokenizers keeps it,
         * we may drop it */
        if (sdp_strmap_get(&t->other, a, alen, &dummy) ||
            sdp_strmap_get(&t->other, b, blen, &dummy))
            return 0;
        return sdp_err(-EINVAL,
                       "tokenizer %s: %s: the merge of \"%.*s\" and \"%.*s\" is not in "
                       "the vocabulary",
                       file, where, (int)alen, a, (int)blen, b);
    }
    return sdp_pairmap_put(&t->merges, ia, ib, rank, im);
}

static int load_merges_json(struct sdp_tok *t, json_t *merges, const char *file)
{
    size_t i;
    json_t *m;
    char where[64];
    if (!json_is_array(merges))
        return sdp_err(-EINVAL, "tokenizer %s: model.merges is not a JSON array", file);
    json_array_foreach (merges, i, m) {
        int rc;
        snprintf(where, sizeof(where), "model.merges[%zu]", i);
        if (json_is_string(m)) { /* "a b" (older files) */
            const char *s = json_string_value(m);
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return sdp_err(-EINVAL,
                               "tokenizer %s: %s: \"%s\" is not two tokens separated by "
                               "one space",
                               file, where, s);
            rc =
                add_merge(t, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), (uint32_t)i, file, where);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            rc = add_merge(t, json_string_value(a), json_string_length(a), json_string_value(b),
                           json_string_length(b), (uint32_t)i, file, where);
        } else {
            return sdp_err(-EINVAL, "tokenizer %s: %s is neither \"a b\" nor [\"a\", \"b\"]", file,
                           where);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- added tokens ---- */

static int cmp_added(const void *pa, const void *pb)
{
    const struct sdp_added *a = pa, *b = pb;
    if (a->len != b->len)
        return a->len > b->len ? -1 : 1; /* longest first: leftmost-longest matching */
    return a->id < b->id ? -1 : a->id > b->id;
}

static int add_added(struct sdp_tok *t, const char *content, size_t len, uint32_t id,
                     const struct sdp_added *flags)
{
    if (!len)
        return 0;
    struct sdp_added *p = realloc(t->added, (t->n_added + 1) * sizeof(*p));
    if (!p)
        return -ENOMEM;
    t->added = p;
    struct sdp_added *a = &t->added[t->n_added];
    *a = *flags;
    a->id = id;
    a->len = len;
    a->content = malloc(len);
    if (!a->content)
        return -ENOMEM;
    memcpy(a->content, content, len);
    t->n_added++;
    int rc = sdp_strmap_put(&t->added_map, content, len, id);
    return rc ? rc : set_id_bytes(t, id, content, len);
}

static int json_flag(json_t *obj, const char *key, int dflt)
{
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int load_added_json(struct sdp_tok *t, json_t *arr, const char *file)
{
    size_t i;
    json_t *a;
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return sdp_err(-EINVAL, "tokenizer %s: added_tokens is not a JSON array", file);
    json_array_foreach (arr, i, a) {
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || !json_is_string(content) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (json_int_t)MAX_ID)
            return sdp_err(-EINVAL,
                           "tokenizer %s: added_tokens[%zu] needs an integer \"id\" in "
                           "[0, %u) and a string \"content\"",
                           file, i, MAX_ID);
        struct sdp_added f = {
            .special = json_flag(a, "special", 0),
            .normalized = json_flag(a, "normalized", !json_flag(a, "special", 0)),
            .lstrip = json_flag(a, "lstrip", 0),
            .rstrip = json_flag(a, "rstrip", 0),
            .single_word = json_flag(a, "single_word", 0),
        };
        int rc = add_added(t, json_string_value(content), json_string_length(content),
                           (uint32_t)json_integer_value(id), &f);
        if (rc)
            return rc;
    }
    return 0;
}

/* Normalize the contents of normalized added tokens (they are matched in normalized text), then
 * sort longest first and index first bytes. */
static int finish_added(struct sdp_tok *t)
{
    for (size_t i = 0; i < t->n_added; i++) {
        struct sdp_added *a = &t->added[i];
        char *owned = NULL;
        const char *res;
        size_t len;
        if (!a->normalized || !t->n_norm)
            continue;
        int rc = sdp_tok_normalize(t, a->content, a->len, &owned, &res, &len);
        if (rc)
            return rc;
        if (owned) {
            free(a->content);
            a->content = owned;
            a->len = len;
        }
    }
    if (t->n_added)
        qsort(t->added, t->n_added, sizeof(*t->added), cmp_added);
    for (size_t i = 0; i < t->n_added; i++)
        t->added_first[t->added[i].normalized][(unsigned char)t->added[i].content[0]] = 1;
    return 0;
}

/* ---- normalizer and pre-tokenizer ---- */

static int norm_opts(const char *type)
{
    if (!strcmp(type, "NFC"))
        return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    if (!strcmp(type, "NFD"))
        return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    if (!strcmp(type, "NFKC"))
        return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    if (!strcmp(type, "NFKD"))
        return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    return 0;
}

static int load_one_norm(struct sdp_tok *t, json_t *n, const char *file, const char *path)
{
    const char *type = json_string_value(json_object_get(n, "type"));
    int opts = type ? norm_opts(type) : 0;
    if (!opts) {
        sdp_err(-EINVAL, "tokenizer %s: %s.type \"%s\" is not supported", file, path,
                type ? type : "(missing)");
        sdp_hint("supported normalizers: null, NFC, NFD, NFKC, NFKD and a Sequence of them");
        return -EINVAL;
    }
    if (t->n_norm == SDP_TOK_MAX_STEPS)
        return sdp_err(-EINVAL, "tokenizer %s: %s: more than %d normalizers", file, path,
                       SDP_TOK_MAX_STEPS);
    t->norm_opts[t->n_norm++] = opts;
    return 0;
}

static int load_normalizer(struct sdp_tok *t, json_t *n, const char *file)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (type && !strcmp(type, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers"), *e;
        size_t i;
        char path[64];
        if (!json_is_array(list))
            return sdp_err(-EINVAL, "tokenizer %s: normalizer.normalizers is not an array", file);
        json_array_foreach (list, i, e) {
            snprintf(path, sizeof(path), "normalizer.normalizers[%zu]", i);
            int rc = load_one_norm(t, e, file, path);
            if (rc)
                return rc;
        }
        return 0;
    }
    return load_one_norm(t, n, file, "normalizer");
}

static int compile_regex(struct sdp_pretok *st, const char *pat, size_t len, int literal,
                         const char *file, const char *path)
{
    int err;
    PCRE2_SIZE erroff;
    /* UCP: \s, \p{L} and friends on Unicode properties, as Oniguruma does in tokenizers.
     * MATCH_INVALID_UTF: invalid UTF-8 never matches (it stays in the gaps) and is not checked on
     * every call, which would be quadratic. */
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    st->re = pcre2_compile((PCRE2_SPTR)pat, len, opts, &err, &erroff, NULL);
    if (!st->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return sdp_err(-EINVAL, "tokenizer %s: %s: regex does not compile at offset %zu: %s", file,
                       path, (size_t)erroff, (const char *)msg);
    }
    st->jit = pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

static int load_one_pretok(struct sdp_tok *t, json_t *p, const char *file, const char *path)
{
    const char *type = json_string_value(json_object_get(p, "type"));
    char sub[96];
    if (t->n_steps == SDP_TOK_MAX_STEPS)
        return sdp_err(-EINVAL, "tokenizer %s: %s: too many pre-tokenizers", file, path);
    struct sdp_pretok *st = &t->steps[t->n_steps];
    if (type && !strcmp(type, "ByteLevel")) {
        st->bytelevel = 1;
        st->add_prefix_space = json_flag(p, "add_prefix_space", 1);
        st->behavior = SDP_SPLIT_ISOLATED;
        if (json_flag(p, "use_regex", 1)) {
            snprintf(sub, sizeof(sub), "%s (GPT-2 regex)", path);
            int rc = compile_regex(st, gpt2_regex, sizeof(gpt2_regex) - 1, 0, file, sub);
            if (rc)
                return rc;
        }
        t->n_steps++;
        return 0;
    }
    if (type && !strcmp(type, "Split")) {
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        if (!json_is_string(re) && !json_is_string(lit))
            return sdp_err(-EINVAL, "tokenizer %s: %s.pattern needs \"Regex\" or \"String\"", file,
                           path);
        if (json_flag(p, "invert", 0))
            return sdp_err(-EINVAL, "tokenizer %s: %s.invert = true is not supported", file, path);
        if (beh && !strcmp(beh, "Isolated"))
            st->behavior = SDP_SPLIT_ISOLATED;
        else if (beh && !strcmp(beh, "Removed"))
            st->behavior = SDP_SPLIT_REMOVED;
        else if (beh && !strcmp(beh, "MergedWithPrevious"))
            st->behavior = SDP_SPLIT_MERGED_PREV;
        else if (beh && !strcmp(beh, "MergedWithNext"))
            st->behavior = SDP_SPLIT_MERGED_NEXT;
        else
            return sdp_err(-EINVAL, "tokenizer %s: %s.behavior \"%s\" is not supported", file, path,
                           beh ? beh : "(missing)");
        json_t *s = json_is_string(re) ? re : lit;
        snprintf(sub, sizeof(sub), "%s.pattern.%s", path, json_is_string(re) ? "Regex" : "String");
        int rc =
            compile_regex(st, json_string_value(s), json_string_length(s), s == lit, file, sub);
        if (rc)
            return rc;
        t->n_steps++;
        return 0;
    }
    sdp_err(-EINVAL, "tokenizer %s: %s.type \"%s\" is not supported", file, path,
            type ? type : "(missing)");
    sdp_hint("supported pre-tokenizers: Split (regex or string; Isolated, Removed, "
             "MergedWithPrevious, MergedWithNext) and ByteLevel, alone or in a Sequence");
    return -EINVAL;
}

static int load_pretok(struct sdp_tok *t, json_t *p, const char *file)
{
    int rc;
    if (!p || json_is_null(p))
        return sdp_err(-EINVAL, "tokenizer %s: pre_tokenizer is null: not a byte-level BPE", file);
    const char *type = json_string_value(json_object_get(p, "type"));
    if (type && !strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers"), *e;
        size_t i;
        char path[64];
        if (!json_is_array(list))
            return sdp_err(-EINVAL, "tokenizer %s: pre_tokenizer.pretokenizers is not an array",
                           file);
        json_array_foreach (list, i, e) {
            snprintf(path, sizeof(path), "pre_tokenizer.pretokenizers[%zu]", i);
            if ((rc = load_one_pretok(t, e, file, path)))
                return rc;
        }
    } else if ((rc = load_one_pretok(t, p, file, "pre_tokenizer"))) {
        return rc;
    }
    /* ByteLevel maps bytes to its alphabet: a step after it would see that alphabet, which this
     * implementation (working on raw bytes) does not reproduce. */
    for (int i = 0; i < t->n_steps; i++)
        if (t->steps[i].bytelevel != (i == t->n_steps - 1))
            return sdp_err(-EINVAL,
                           "tokenizer %s: pre_tokenizer: ByteLevel must be the last "
                           "step and appear once (byte-level BPE)",
                           file);
    return 0;
}

/* ---- loaders ---- */

static int check_model(struct sdp_tok *t, json_t *model, const char *file)
{
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!json_is_object(model))
        return sdp_err(-EINVAL, "tokenizer %s: model is missing or not an object", file);
    if (type && strcmp(type, "BPE")) {
        sdp_err(-EINVAL, "tokenizer %s: model.type \"%s\" is not supported", file, type);
        sdp_hint("only byte-level BPE models (Qwen, Llama-3, GPT-2 style) are supported");
        return -EINVAL;
    }
    json_t *d = json_object_get(model, "dropout");
    if (d && !json_is_null(d) && !(json_is_number(d) && json_number_value(d) == 0.0))
        return sdp_err(-EINVAL, "tokenizer %s: model.dropout is not supported", file);
    static const char *const empty_keys[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(model, empty_keys[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
            return sdp_err(-EINVAL, "tokenizer %s: model.%s must be empty", file, empty_keys[i]);
    }
    if (json_flag(model, "byte_fallback", 0))
        return sdp_err(-EINVAL, "tokenizer %s: model.byte_fallback = true is not supported", file);
    t->ignore_merges = json_flag(model, "ignore_merges", 0);
    t->fuse_unk = json_flag(model, "fuse_unk", 0);
    return 0;
}

static int load_tokenizer_json(struct sdp_tok *t, const char *file)
{
    json_error_t jerr;
    int rc = 0;
    json_t *root = json_load_file(file, 0, &jerr);
    if (!root) {
        if (jerr.line < 1) /* jansson could not open or read it */
            return sdp_err(-EINVAL, "tokenizer %s: %s", file, jerr.text);
        return sdp_err(-EINVAL, "tokenizer %s: malformed JSON at line %d, column %d: %s", file,
                       jerr.line, jerr.column, jerr.text);
    }
    if (!json_is_object(root)) {
        rc = sdp_err(-EINVAL, "tokenizer %s: the top level is not a JSON object", file);
        goto out;
    }
    json_t *model = json_object_get(root, "model");
    if (!model && json_object_get(root, "Ġ")) {
        rc = sdp_err(-EINVAL, "tokenizer %s: this is a vocab.json, not a tokenizer.json", file);
        sdp_hint("pass the directory that holds vocab.json and merges.txt");
        goto out;
    }
    if ((rc = check_model(t, model, file)) ||
        (rc = load_vocab(t, json_object_get(model, "vocab"), file, "model.vocab")) ||
        (rc = load_merges_json(t, json_object_get(model, "merges"), file)) ||
        (rc = load_added_json(t, json_object_get(root, "added_tokens"), file)) ||
        (rc = load_normalizer(t, json_object_get(root, "normalizer"), file)) ||
        (rc = load_pretok(t, json_object_get(root, "pre_tokenizer"), file)))
        goto out;
    json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        uint32_t id;
        if (!lookup_spelling(t, json_string_value(unk), json_string_length(unk), &id)) {
            rc = sdp_err(-EINVAL, "tokenizer %s: model.unk_token \"%s\" is not in the vocabulary",
                         file, json_string_value(unk));
            goto out;
        }
        t->unk_id = (int32_t)id;
    }
    json_t *dec = json_object_get(root, "decoder");
    const char *dtype = json_string_value(json_object_get(dec, "type"));
    if (dec && !json_is_null(dec) && !(dtype && !strcmp(dtype, "ByteLevel"))) {
        rc = sdp_err(-EINVAL, "tokenizer %s: decoder.type \"%s\" is not supported (ByteLevel only)",
                     file, dtype ? dtype : "(missing)");
        goto out;
    }
    /* post_processor (e.g. Llama-3's BOS template) is not applied: sdp_tok_encode matches
     * encode(add_special_tokens=False); document boundaries are the caller's business. */
out:
    json_decref(root);
    return rc;
}

static int load_gpt2_dir(struct sdp_tok *t, const char *vocab_path, const char *merges_path)
{
    json_error_t jerr;
    int rc;
    json_t *vocab = json_load_file(vocab_path, 0, &jerr);
    if (!vocab)
        return sdp_err(-EINVAL, "tokenizer %s: malformed JSON at line %d, column %d: %s",
                       vocab_path, jerr.line, jerr.column, jerr.text);
    rc = load_vocab(t, vocab, vocab_path, "(top level)");
    json_decref(vocab);
    if (rc)
        return rc;

    FILE *f = fopen(merges_path, "r");
    if (!f)
        return sdp_err(-errno, "tokenizer %s: cannot open", merges_path);
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    uint32_t rank = 0;
    ssize_t n;
    char where[64];
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (!n || !strncmp(line, "#version", 8))
            continue;
        char *sp = strchr(line, ' ');
        snprintf(where, sizeof(where), "line %zu", lineno);
        if (!sp || strchr(sp + 1, ' ')) {
            rc = sdp_err(-EINVAL,
                         "tokenizer %s: %s: \"%s\" is not two tokens separated by one "
                         "space",
                         merges_path, where, line);
            break;
        }
        rc = add_merge(t, line, (size_t)(sp - line), sp + 1, strlen(sp + 1), rank++, merges_path,
                       where);
        if (rc)
            break;
    }
    free(line);
    fclose(f);
    if (rc)
        return rc;

    /* GPT-2's tokenizer.json: no normalizer, ByteLevel(add_prefix_space=false, use_regex=true),
     * <|endoftext|> an added special token */
    t->steps[0].bytelevel = 1;
    t->steps[0].behavior = SDP_SPLIT_ISOLATED;
    t->n_steps = 1;
    if ((rc = compile_regex(&t->steps[0], gpt2_regex, sizeof(gpt2_regex) - 1, 0, vocab_path,
                            "GPT-2 regex")))
        return rc;
    uint32_t eos;
    static const char eot[] = "<|endoftext|>";
    if (sdp_strmap_get(&t->vocab, eot, sizeof(eot) - 1, &eos)) {
        struct sdp_added flags = { .special = 1 };
        rc = add_added(t, eot, sizeof(eot) - 1, eos, &flags);
    }
    return rc;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int sdp_tok_load(const char *path, sdp_tok_t **out)
{
    struct stat st;
    int rc;
    *out = NULL;
    if (stat(path, &st) != 0) {
        rc = sdp_err(-errno, "tokenizer %s", path);
        sdp_hint("give a tokenizer.json, or a directory with tokenizer.json or vocab.json + "
                 "merges.txt");
        return rc;
    }
    struct sdp_tok *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    snprintf(t->path, sizeof(t->path), "%s", path);
    t->unk_id = -1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;

    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + 32;
        char *a = malloc(n), *b = malloc(n);
        if (!a || !b) {
            rc = -ENOMEM;
        } else {
            snprintf(a, n, "%s/tokenizer.json", path);
            if (is_file(a)) {
                rc = load_tokenizer_json(t, a);
            } else {
                snprintf(a, n, "%s/vocab.json", path);
                snprintf(b, n, "%s/merges.txt", path);
                if (is_file(a) && is_file(b)) {
                    rc = load_gpt2_dir(t, a, b);
                } else {
                    rc = sdp_err(-ENOENT,
                                 "tokenizer %s: no tokenizer.json, nor vocab.json + "
                                 "merges.txt, in this directory",
                                 path);
                }
            }
        }
        free(a);
        free(b);
    } else {
        rc = load_tokenizer_json(t, path);
    }
    if (!rc)
        rc = finish_added(t);
    if (!rc && t->byte_id[' '] < 0 && t->byte_id['a'] < 0)
        rc = sdp_err(-EINVAL,
                     "tokenizer %s: the vocabulary lacks the byte-level alphabet "
                     "('Ġ', 'a'): not a byte-level BPE",
                     path);
    if (!rc && !(t->md = pcre2_match_data_create(1, NULL)))
        rc = -ENOMEM;
    if (!rc && !(t->mctx = pcre2_match_context_create(NULL)))
        rc = -ENOMEM;
    /* JIT stack for long runs (a megabyte of spaces backtracks through \s+(?!\S)) */
    if (!rc && (t->jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL)))
        pcre2_jit_stack_assign(t->mctx, NULL, t->jit_stack);
    if (rc) {
        sdp_tok_free(t);
        return rc;
    }
    trim_ids(t);
    *out = t;
    return 0;
}

void sdp_tok_free(sdp_tok_t *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    for (int i = 0; i < SDP_TOK_MAX_STEPS; i++)
        pcre2_code_free(t->steps[i].re);
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jit_stack);
    sdp_strmap_free(&t->vocab);
    sdp_strmap_free(&t->other);
    sdp_strmap_free(&t->added_map);
    sdp_strmap_free(&t->cache);
    sdp_pairmap_free(&t->merges);
    free(t->cache_ids.v);
    free(t->sym);
    free(t->heap);
    free(t->id_off);
    free(t->id_len);
    free(t->id_bytes);
    free(t);
}

/* ---- queries and decoding ---- */

uint32_t sdp_tok_vocab_size(const sdp_tok_t *t)
{
    return t->n_ids;
}

int sdp_tok_normalize_text(const sdp_tok_t *t, const char *text, size_t len, char **owned,
                           const char **res, size_t *res_len)
{
    return sdp_tok_normalize(t, text, len, owned, res, res_len);
}

size_t sdp_tok_token_nbytes(const sdp_tok_t *t, uint32_t id)
{
    if (id >= t->n_ids || t->id_len[id] == UINT32_MAX)
        return 0;
    return t->id_len[id];
}

int sdp_tok_token_id(const sdp_tok_t *t, const char *token)
{
    uint32_t id;
    size_t len = strlen(token);
    if (sdp_strmap_get(&t->added_map, token, len, &id) || lookup_spelling(t, token, len, &id))
        return (int)id;
    return -ENOENT;
}

int sdp_tok_decode(const sdp_tok_t *t, const uint32_t *ids, size_t n, char **text, size_t *len)
{
    size_t total = 0;
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->n_ids || t->id_len[ids[i]] == UINT32_MAX)
            return sdp_err(-EINVAL,
                           "tokenizer %s: id %u (position %zu) is not in the vocabulary "
                           "of %u ids",
                           t->path, ids[i], i, t->n_ids);
        total += t->id_len[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s)
        return -ENOMEM;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + at, t->id_bytes + t->id_off[ids[i]], t->id_len[ids[i]]);
        at += t->id_len[ids[i]];
    }
    s[at] = 0;
    *text = s;
    *len = at;
    return 0;
}
