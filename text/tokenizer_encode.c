/* SPDX-License-Identifier: MIT */
/* The encode pipeline of tokenizers' Tokenizer::encode, in its order: added tokens found in the
 * raw text (leftmost-longest), normalization of the spans between them, added tokens marked
 * "normalized" found in the normalized spans, the pre-tokenizer steps (regex splits, then
 * ByteLevel), and BPE on each piece (text/bpe.c).  Must not add BOS/EOS or truncate.
 * Tests: tests/text/test_tokenizer.c, tests/text/test_tokenize_hf.py. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/sdp_log.h"
#include "text/tokenizer_internal.h"

/* ---- UTF-8 helpers ---- */

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid (overlong, surrogate,
 * > U+10FFFF, truncated): the rules of utf8proc and PCRE2 alike. */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    if (c < 0xc2 || c > 0xf4)
        return 0;
    size_t n = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (c == 0xe0 && s[1] < 0xa0)
        return 0; /* overlong */
    if (c == 0xed && s[1] >= 0xa0)
        return 0; /* surrogate */
    if (c == 0xf0 && s[1] < 0x90)
        return 0; /* overlong */
    if (c == 0xf4 && s[1] >= 0x90)
        return 0; /* > U+10FFFF */
    return n;
}

/* Code point at s (valid sequence of n bytes). */
static int32_t utf8_cp(const unsigned char *s, size_t n)
{
    if (n == 1)
        return s[0];
    if (n == 2)
        return ((s[0] & 0x1f) << 6) | (s[1] & 0x3f);
    if (n == 3)
        return ((s[0] & 0x0f) << 12) | ((s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    return ((s[0] & 0x07) << 18) | ((s[1] & 0x3f) << 12) | ((s[2] & 0x3f) << 6) | (s[3] & 0x3f);
}

/* Rust's char::is_whitespace: the Unicode White_Space property. */
static int is_white(int32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

/* \w of tokenizers' single_word check: letters, marks, digits, connector punctuation. */
static int is_word(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_NO) || k == UTF8PROC_CATEGORY_PC;
}

/* Start of the character that ends at s + end (end > 0). */
static size_t char_start(const unsigned char *s, size_t end)
{
    size_t b = end - 1;
    while (b > 0 && end - b < 4 && (s[b] & 0xc0) == 0x80)
        b--;
    return b;
}

/* Code point ending just before s + end, or -1. */
static int32_t cp_before(const unsigned char *s, size_t end)
{
    if (!end)
        return -1;
    size_t b = char_start(s, end);
    size_t n = utf8_seq(s + b, end - b);
    return n == end - b ? utf8_cp(s + b, n) : -1;
}

static int32_t cp_at(const unsigned char *s, size_t len)
{
    size_t n = len ? utf8_seq(s, len) : 0;
    return n ? utf8_cp(s, n) : -1;
}

/* ---- normalizer ---- */

static int append(char **buf, size_t *len, size_t *cap, const void *s, size_t n)
{
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return -ENOMEM;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return 0;
}

/* One normalization form over s: valid UTF-8 runs through utf8proc, invalid bytes unchanged. */
static int normalize_once(int opts, const char *s, size_t len, char **out, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)s;
    char *buf = NULL;
    size_t blen = 0, bcap = 0, i = 0;
    int rc = 0;
    while (i < len && !rc) {
        size_t j = i, n;
        while (j < len && (n = utf8_seq(u + j, len - j)))
            j += n;
        if (j > i) {
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t m =
                utf8proc_map(u + i, (utf8proc_ssize_t)(j - i), &dst, (utf8proc_option_t)opts);
            if (m < 0) {
                rc = m == UTF8PROC_ERROR_NOMEM ? -ENOMEM : -EINVAL;
                sdp_err(rc, "normalization failed: %s", utf8proc_errmsg(m));
            } else {
                rc = append(&buf, &blen, &bcap, dst, (size_t)m);
            }
            free(dst);
            i = j;
        } else {
            rc = append(&buf, &blen, &bcap, u + i, 1);
            i++;
        }
    }
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *out_len = blen;
    return 0;
}

int sdp_tok_normalize(const struct sdp_tok *t, const char *s, size_t len, char **owned,
                      const char **res, size_t *res_len)
{
    *owned = NULL;
    *res = s;
    *res_len = len;
    for (int k = 0; k < t->n_norm; k++) {
        int opts = t->norm_opts[k];
        if (opts == (UTF8PROC_STABLE | UTF8PROC_COMPOSE)) {
            /* NFC fast path: code points below U+0300 (lead bytes < 0xCC) are NFC-stable and no
             * composition starts from a pair of them: the text is unchanged. */
            size_t i = 0;
            while (i < *res_len && (unsigned char)(*res)[i] < 0xcc)
                i++;
            if (i == *res_len)
                continue;
        }
        char *out;
        size_t out_len;
        int rc = normalize_once(opts, *res, *res_len, &out, &out_len);
        if (rc) {
            free(*owned);
            *owned = NULL;
            return rc;
        }
        free(*owned);
        *owned = out;
        *res = out ? out : "";
        *res_len = out_len;
    }
    return 0;
}

/* ---- pre-tokenization ---- */

static int pretok(struct sdp_tok *t, const char *s, size_t len, int step, struct sdp_ids *out);

static int emit_piece(struct sdp_tok *t, const char *s, size_t a, size_t b, int step,
                      struct sdp_ids *out)
{
    return b > a ? pretok(t, s + a, b - a, step, out) : 0;
}

/* Split s with the regex of step `step`, hand the pieces to step + 1 (tokenizers'
 * NormalizedString::split with a SplitDelimiterBehavior). */
static int regex_split(struct sdp_tok *t, const struct sdp_pretok *st, const char *s, size_t len,
                       int step, struct sdp_ids *out)
{
    size_t off = 0, cut = 0; /* cut: start of the piece not yet emitted */
    int rc;
    while (off < len) {
        int m = st->jit ? pcre2_jit_match(st->re, (PCRE2_SPTR)s, len, off, 0, t->md, t->mctx)
                        : pcre2_match(st->re, (PCRE2_SPTR)s, len, off, 0, t->md, t->mctx);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof(msg));
            return sdp_err(-EINVAL,
                           "tokenizer %s: regex match failed at byte %zu of a %zu-byte "
                           "span: %s",
                           t->path, off, len, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: no split; step over one character */
            off = ms + 1;
            while (off < len && ((unsigned char)s[off] & 0xc0) == 0x80)
                off++;
            continue;
        }
        switch (st->behavior) {
        case SDP_SPLIT_ISOLATED:
            if ((rc = emit_piece(t, s, cut, ms, step, out)) ||
                (rc = emit_piece(t, s, ms, me, step, out)))
                return rc;
            cut = me;
            break;
        case SDP_SPLIT_REMOVED:
            if ((rc = emit_piece(t, s, cut, ms, step, out)))
                return rc;
            cut = me;
            break;
        case SDP_SPLIT_MERGED_PREV:
            if ((rc = emit_piece(t, s, cut, me, step, out)))
                return rc;
            cut = me;
            break;
        case SDP_SPLIT_MERGED_NEXT:
            if ((rc = emit_piece(t, s, cut, ms, step, out)))
                return rc;
            cut = ms;
            break;
        }
        off = me;
    }
    return emit_piece(t, s, cut, len, step, out);
}

static int pretok(struct sdp_tok *t, const char *s, size_t len, int step, struct sdp_ids *out)
{
    if (!len)
        return 0;
    if (step == t->n_steps)
        return sdp_bpe_word(t, s, len, out);
    const struct sdp_pretok *st = &t->steps[step];
    if (st->bytelevel && st->add_prefix_space && s[0] != ' ') {
        char *p = malloc(len + 1);
        if (!p)
            return -ENOMEM;
        p[0] = ' ';
        memcpy(p + 1, s, len);
        int rc = st->re ? regex_split(t, st, p, len + 1, step + 1, out)
                        : pretok(t, p, len + 1, step + 1, out);
        free(p);
        return rc;
    }
    if (!st->re) /* ByteLevel(use_regex=false): the byte mapping happens inside BPE */
        return pretok(t, s, len, step + 1, out);
    return regex_split(t, st, s, len, step + 1, out);
}

/* ---- added tokens ---- */

typedef int (*span_fn)(struct sdp_tok *t, const char *s, size_t len, struct sdp_ids *out);

/* Find the added tokens of class `normalized` in s (leftmost, then longest, as tokenizers'
 * Aho-Corasick LeftmostLongest), emit their ids, and pass the spans between them to fn. */
static int split_added(struct sdp_tok *t, const char *s, size_t len, int normalized, span_fn fn,
                       struct sdp_ids *out)
{
    const unsigned char *u = (const unsigned char *)s;
    const uint8_t *first = t->added_first[normalized];
    size_t cut = 0, i = 0;
    int rc;
    while (i < len) {
        if (!first[u[i]]) {
            i++;
            continue;
        }
        const struct sdp_added *hit = NULL;
        for (size_t k = 0; k < t->n_added; k++) {
            const struct sdp_added *a = &t->added[k];
            if (a->normalized == normalized && a->len <= len - i &&
                !memcmp(a->content, s + i, a->len)) {
                hit = a;
                break;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t start = i, stop = i + hit->len;
        if (hit->single_word && ((start > 0 && is_word(cp_before(u, start))) ||
                                 (stop < len && is_word(cp_at(u + stop, len - stop))))) {
            i = stop;
            continue;
        }
        if (hit->lstrip) /* swallow the whitespace before it, not past the previous token */
            while (start > cut) {
                int32_t c = cp_before(u, start);
                if (c < 0 || !is_white(c))
                    break;
                start = char_start(u, start);
            }
        if (hit->rstrip)
            while (stop < len) {
                size_t n = utf8_seq(u + stop, len - stop);
                if (!n || !is_white(utf8_cp(u + stop, n)))
                    break;
                stop += n;
            }
        if (start > cut && (rc = fn(t, s + cut, start - cut, out)))
            return rc;
        if ((rc = sdp_ids_push(out, hit->id)))
            return rc;
        cut = i = stop;
    }
    return len > cut ? fn(t, s + cut, len - cut, out) : 0;
}

static int normalized_span(struct sdp_tok *t, const char *s, size_t len, struct sdp_ids *out)
{
    return pretok(t, s, len, 0, out);
}

static int raw_span(struct sdp_tok *t, const char *s, size_t len, struct sdp_ids *out)
{
    char *owned;
    const char *res;
    size_t res_len;
    int rc = sdp_tok_normalize(t, s, len, &owned, &res, &res_len);
    if (rc)
        return rc;
    rc = split_added(t, res, res_len, 1, normalized_span, out);
    free(owned);
    return rc;
}

/* ---- API ---- */

int sdp_tok_encode_append(sdp_tok_t *t, const char *text, size_t len, uint32_t **ids, size_t *n,
                          size_t *cap)
{
    struct sdp_ids o = { .v = *ids, .n = *n, .cap = *cap };
    int rc = split_added(t, text, len, 0, raw_span, &o);
    *ids = o.v;
    *n = o.n;
    *cap = o.cap;
    return rc;
}

int sdp_tok_encode(sdp_tok_t *t, const char *text, size_t len, uint32_t **ids, size_t *n)
{
    size_t cap = 0;
    *ids = NULL;
    *n = 0;
    int rc = sdp_tok_encode_append(t, text, len, ids, n, &cap);
    if (rc) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return rc;
}
