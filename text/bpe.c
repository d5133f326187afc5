/* SPDX-License-Identifier: MIT */
/* Byte-level BPE core: the hash maps of the tokenizer, GPT-2's byte alphabet, and the merge loop
 * of one pre-tokenized piece with its word cache.  The merge order is that of tokenizers'
 * Word::merge_all (lowest rank first, leftmost first on ties), kept in a binary heap, so long
 * pieces cost O(n log n).  Knows nothing of JSON or regexes.
 * Tests: tests/text/test_tokenizer.c and tests/text/test_tokenize_hf.py. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

/* Pieces up to this many bytes are cached; longer ones are rare. */
#define CACHE_MAX_KEY 128
/* The cache is dropped when it holds this many words (about 30 MB with keys and ids). */
#define CACHE_MAX_WORDS (1u << 19)

/* ---- hashing ---- */

/* FNV-1a, 64 bits: pieces are short, so a byte loop is as fast as anything fancier. */
static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (q)
        *cap = c;
    return q;
}

/* ---- string map ---- */

static int strmap_rehash(struct sdp_strmap *m, uint32_t nslots)
{
    uint32_t *slots = calloc(nslots, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (uint32_t e = 0; e < m->n; e++) {
        uint32_t i = (uint32_t)m->ents[e].hash & (nslots - 1);
        while (slots[i])
            i = (i + 1) & (nslots - 1);
        slots[i] = e + 1;
    }
    free(m->slots);
    m->slots = slots;
    m->nslots = nslots;
    return 0;
}

/* Index of the slot holding key, or of the empty slot where it would go. */
static uint32_t strmap_find(const struct sdp_strmap *m, const char *key, size_t len, uint64_t h)
{
    uint32_t i = (uint32_t)h & (m->nslots - 1);
    while (m->slots[i]) {
        const struct sdp_strmap_ent *e = &m->ents[m->slots[i] - 1];
        /* len 0: the arena may still be NULL, and NULL + 0 is undefined */
        if (e->hash == h && e->len == len && (!len || !memcmp(m->arena + e->off, key, len)))
            return i;
        i = (i + 1) & (m->nslots - 1);
    }
    return i;
}

int sdp_strmap_put(struct sdp_strmap *m, const char *key, size_t len, uint32_t val)
{
    uint64_t h = hash_bytes(key, len);
    if (len > UINT32_MAX)
        return -EINVAL;
    if ((uint64_t)(m->n + 1) * 2 > m->nslots) {
        int rc = strmap_rehash(m, m->nslots ? m->nslots * 2 : 1024);
        if (rc)
            return rc;
    }
    uint32_t i = strmap_find(m, key, len, h);
    if (m->slots[i]) { /* a later duplicate wins, as in a JSON object or a Rust HashMap collect */
        m->ents[m->slots[i] - 1].val = val;
        return 0;
    }
    if (m->n == m->ents_cap) {
        size_t cap = m->ents_cap;
        void *p = grow(m->ents, &cap, (size_t)m->n + 1, sizeof(*m->ents));
        if (!p)
            return -ENOMEM;
        m->ents = p;
        m->ents_cap = (uint32_t)cap;
    }
    if (m->arena_len + len > m->arena_cap) {
        void *p = grow(m->arena, &m->arena_cap, m->arena_len + len, 1);
        if (!p)
            return -ENOMEM;
        m->arena = p;
    }
    if (len) /* an empty key (vocabulary entry "") on an empty, NULL arena copies nothing */
        memcpy(m->arena + m->arena_len, key, len);
    m->ents[m->n] =
        (struct sdp_strmap_ent){ .hash = h, .off = m->arena_len, .len = (uint32_t)len, .val = val };
    m->arena_len += len;
    m->slots[i] = ++m->n;
    return 0;
}

int sdp_strmap_get(const struct sdp_strmap *m, const char *key, size_t len, uint32_t *val)
{
    if (!m->n)
        return 0;
    uint32_t i = strmap_find(m, key, len, hash_bytes(key, len));
    if (!m->slots[i])
        return 0;
    *val = m->ents[m->slots[i] - 1].val;
    return 1;
}

void sdp_strmap_clear(struct sdp_strmap *m)
{
    if (m->slots)
        memset(m->slots, 0, m->nslots * sizeof(*m->slots));
    m->n = 0;
    m->arena_len = 0;
}

void sdp_strmap_free(struct sdp_strmap *m)
{
    free(m->slots);
    free(m->ents);
    free(m->arena);
    memset(m, 0, sizeof(*m));
}

/* ---- pair map ---- */

static uint32_t pair_slot(uint64_t key, uint32_t nslots)
{
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (nslots - 1);
}

static int pairmap_rehash(struct sdp_pairmap *m, uint32_t nslots)
{
    uint64_t *keys = malloc(nslots * sizeof(*keys));
    uint32_t *rank = malloc(nslots * sizeof(*rank));
    uint32_t *merged = malloc(nslots * sizeof(*merged));
    if (!keys || !rank || !merged) {
        free(keys);
        free(rank);
        free(merged);
        return -ENOMEM;
    }
    memset(keys, 0xff, nslots * sizeof(*keys));
    for (uint32_t j = 0; j < m->nslots; j++) {
        if (m->keys[j] == UINT64_MAX)
            continue;
        uint32_t i = pair_slot(m->keys[j], nslots);
        while (keys[i] != UINT64_MAX)
            i = (i + 1) & (nslots - 1);
        keys[i] = m->keys[j];
        rank[i] = m->rank[j];
        merged[i] = m->merged[j];
    }
    free(m->keys);
    free(m->rank);
    free(m->merged);
    m->keys = keys;
    m->rank = rank;
    m->merged = merged;
    m->nslots = nslots;
    return 0;
}

int sdp_pairmap_put(struct sdp_pairmap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t merged)
{
    if ((uint64_t)(m->n + 1) * 2 > m->nslots) {
        int rc = pairmap_rehash(m, m->nslots ? m->nslots * 2 : 1024);
        if (rc)
            return rc;
    }
    uint64_t key = ((uint64_t)a << 32) | b;
    uint32_t i = pair_slot(key, m->nslots);
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key)
        i = (i + 1) & (m->nslots - 1);
    if (m->keys[i] == UINT64_MAX)
        m->n++;
    /* a repeated pair keeps its last rank, as tokenizers' HashMap collect does */
    m->keys[i] = key;
    m->rank[i] = rank;
    m->merged[i] = merged;
    return 0;
}

/* Returns the slot of (a, b) or -1. */
static inline long pairmap_get(const struct sdp_pairmap *m, uint32_t a, uint32_t b)
{
    if (!m->n)
        return -1;
    uint64_t key = ((uint64_t)a << 32) | b;
    uint32_t i = pair_slot(key, m->nslots);
    while (m->keys[i] != key) {
        if (m->keys[i] == UINT64_MAX)
            return -1;
        i = (i + 1) & (m->nslots - 1);
    }
    return i;
}

void sdp_pairmap_free(struct sdp_pairmap *m)
{
    free(m->keys);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof(*m));
}

/* ---- byte-level alphabet ---- */

/* bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
 * themselves; the other 68 bytes, in increasing order, take code points 256, 257, ... */
#define BL_ROW(b)       BL_CP(b), BL_CP(b + 1), BL_CP(b + 2), BL_CP(b + 3)
#define BL_PRINTABLE(b) (((b) >= 33 && (b) <= 126) || ((b) >= 161 && (b) <= 172) || (b) >= 174)
/* rank of b among non-printable bytes: 0..32 for 0..32, 33 for 127, 34..66 for 128..160,
 * 67 for 173 */
#define BL_OTHER(b) ((b) <= 32 ? (b) : (b) == 127 ? 33 : (b) <= 160 ? (b)-94 : 67)
#define BL_CP(b)    (BL_PRINTABLE(b) ? (b) : 256 + BL_OTHER(b))
const uint16_t sdp_bytelevel_cp[256] = {
    BL_ROW(0),   BL_ROW(4),   BL_ROW(8),   BL_ROW(12),  BL_ROW(16),  BL_ROW(20),  BL_ROW(24),
    BL_ROW(28),  BL_ROW(32),  BL_ROW(36),  BL_ROW(40),  BL_ROW(44),  BL_ROW(48),  BL_ROW(52),
    BL_ROW(56),  BL_ROW(60),  BL_ROW(64),  BL_ROW(68),  BL_ROW(72),  BL_ROW(76),  BL_ROW(80),
    BL_ROW(84),  BL_ROW(88),  BL_ROW(92),  BL_ROW(96),  BL_ROW(100), BL_ROW(104), BL_ROW(108),
    BL_ROW(112), BL_ROW(116), BL_ROW(120), BL_ROW(124), BL_ROW(128), BL_ROW(132), BL_ROW(136),
    BL_ROW(140), BL_ROW(144), BL_ROW(148), BL_ROW(152), BL_ROW(156), BL_ROW(160), BL_ROW(164),
    BL_ROW(168), BL_ROW(172), BL_ROW(176), BL_ROW(180), BL_ROW(184), BL_ROW(188), BL_ROW(192),
    BL_ROW(196), BL_ROW(200), BL_ROW(204), BL_ROW(208), BL_ROW(212), BL_ROW(216), BL_ROW(220),
    BL_ROW(224), BL_ROW(228), BL_ROW(232), BL_ROW(236), BL_ROW(240), BL_ROW(244), BL_ROW(248),
    BL_ROW(252),
};

long sdp_bytelevel_unmap(const char *s, size_t len, char *out)
{
    static int16_t cp_byte[324];
    static int ready;
    if (!ready) { /* idempotent, so a race between two loaders writes the same values */
        for (int c = 0; c < 324; c++)
            cp_byte[c] = -1;
        for (int b = 0; b < 256; b++)
            cp_byte[sdp_bytelevel_cp[b]] = (int16_t)b;
        ready = 1;
    }
    const unsigned char *p = (const unsigned char *)s;
    long n = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        if (p[i] < 0x80) {
            cp = p[i++];
        } else if ((p[i] & 0xe0) == 0xc0 && i + 1 < len && (p[i + 1] & 0xc0) == 0x80) {
            cp = ((uint32_t)(p[i] & 0x1f) << 6) | (p[i + 1] & 0x3f);
            i += 2;
        } else {
            return -1; /* every code point of the alphabet is below 0x800 */
        }
        if (cp >= 324 || cp_byte[cp] < 0)
            return -1;
        out[n++] = (char)cp_byte[cp];
    }
    return n;
}

/* ---- merge loop ---- */

int sdp_ids_push(struct sdp_ids *o, uint32_t id)
{
    if (o->n == o->cap) {
        void *p = grow(o->v, &o->cap, o->n + 1, sizeof(*o->v));
        if (!p)
            return -ENOMEM;
        o->v = p;
    }
    o->v[o->n++] = id;
    return 0;
}

/* Min-heap of (rank << 32 | position): pops the lowest rank, then the leftmost position. */
static void heap_push(uint64_t *h, size_t *n, uint64_t x)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > x) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0];
    if (--*n == 0)
        return top;
    uint64_t x = h[*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= x)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

static void push_pair(struct sdp_tok *t, size_t *nh, int32_t pos)
{
    int32_t next = t->sym[pos].next;
    if (next < 0)
        return;
    long slot = pairmap_get(&t->merges, t->sym[pos].id, t->sym[next].id);
    if (slot >= 0)
        heap_push(t->heap, nh, ((uint64_t)t->merges.rank[slot] << 32) | (uint32_t)pos);
}

/* Merge the symbols of one piece; appends the resulting ids to out. */
static int merge_piece(struct sdp_tok *t, const unsigned char *s, size_t len, struct sdp_ids *out)
{
    if (len > t->sym_cap) {
        void *p = grow(t->sym, &t->sym_cap, len, sizeof(*t->sym));
        if (!p)
            return -ENOMEM;
        t->sym = p;
    }
    /* n - 1 initial pairs, then at most 2 pushes per merge and n - 1 merges: < 3 n entries */
    if (3 * len > t->heap_cap) {
        void *p = grow(t->heap, &t->heap_cap, 3 * len, sizeof(*t->heap));
        if (!p)
            return -ENOMEM;
        t->heap = p;
    }
    int32_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[s[i]];
        if (id < 0) {
            /* a byte missing from the alphabet: unk (fused if asked), or dropped without unk */
            if (t->unk_id < 0)
                continue;
            if (t->fuse_unk && n > 0 && t->sym[n - 1].id == (uint32_t)t->unk_id) {
                t->sym[n - 1].len++;
                continue;
            }
            id = t->unk_id;
        }
        t->sym[n] =
            (struct sdp_bpe_sym){ .id = (uint32_t)id, .len = 1, .prev = n - 1, .next = n + 1 };
        n++;
    }
    if (!n)
        return 0;
    t->sym[n - 1].next = -1;

    size_t nh = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        push_pair(t, &nh, i);
    while (nh) {
        uint64_t top = heap_pop(t->heap, &nh);
        int32_t pos = (int32_t)(uint32_t)top;
        struct sdp_bpe_sym *a = &t->sym[pos];
        if (!a->len || a->next < 0)
            continue;
        struct sdp_bpe_sym *b = &t->sym[a->next];
        long slot = pairmap_get(&t->merges, a->id, b->id);
        /* a stale entry: this position now starts another pair */
        if (slot < 0 || t->merges.rank[slot] != (uint32_t)(top >> 32))
            continue;
        a->id = t->merges.merged[slot];
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (a->next >= 0)
            t->sym[a->next].prev = pos;
        if (a->prev >= 0)
            push_pair(t, &nh, a->prev);
        push_pair(t, &nh, pos);
    }
    for (int32_t i = 0; i >= 0; i = t->sym[i].next) {
        int rc = sdp_ids_push(out, t->sym[i].id);
        if (rc)
            return rc;
    }
    return 0;
}

int sdp_bpe_word(struct sdp_tok *t, const char *s, size_t len, struct sdp_ids *out)
{
    uint32_t v;
    int rc;
    if (!len)
        return 0;
    if (len <= CACHE_MAX_KEY && sdp_strmap_get(&t->cache, s, len, &v)) {
        /* v indexes cache_ids: [count, ids...] */
        uint32_t cnt = t->cache_ids.v[v];
        for (uint32_t i = 0; i < cnt; i++)
            if ((rc = sdp_ids_push(out, t->cache_ids.v[v + 1 + i])))
                return rc;
        return 0;
    }
    size_t first = out->n;
    if (t->ignore_merges && sdp_strmap_get(&t->vocab, s, len, &v))
        rc = sdp_ids_push(out, v);
    else
        rc = merge_piece(t, (const unsigned char *)s, len, out);
    if (rc || len > CACHE_MAX_KEY)
        return rc;
    if (t->cache.n >= CACHE_MAX_WORDS) {
        sdp_strmap_clear(&t->cache);
        t->cache_ids.n = 0;
    }
    size_t at = t->cache_ids.n;
    if (at > UINT32_MAX - len - 1)
        return 0; /* cache full in index space: skip caching */
    if ((rc = sdp_ids_push(&t->cache_ids, (uint32_t)(out->n - first))))
        return rc;
    for (size_t i = first; i < out->n; i++)
        if ((rc = sdp_ids_push(&t->cache_ids, out->v[i])))
            return rc;
    return sdp_strmap_put(&t->cache, s, len, (uint32_t)at);
}
