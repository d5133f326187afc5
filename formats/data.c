/* SPDX-License-Identifier: MIT */
/* Training batches from a token shard: sequence i is the window of T+1 tokens starting at i*T
 * (inputs are the first T, next-token targets the last T), visited in a per-epoch Fisher-Yates
 * order drawn from a splitmix64 stream seeded by (seed, epoch).  Pure function of (seed, epoch,
 * index): no global RNG, no clock, so a resumed run sees the same batches.  A target whose token
 * has mask byte 0 in a masked shard becomes -100 (the ignore index of
 * PyTorch's cross-entropy; the loss skips every negative target).  With document masking a token
 * belongs to the document that the end-of-document id after it ends: the target of that id (the
 * next document's first token) becomes -100, as transformers' flattening collator does, and each
 * token's document start in the row is given for the attention.  Tests:
 * tests/formats/test_data.c. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/data.h"
#include "base/sdp_log.h"

#define GOLDEN_GAMMA   0x9e3779b97f4a7c15ULL
#define IGNORED_TARGET (-100)

/* splitmix64 finalizer (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
 * 2014): a bijection on 64-bit words. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t splitmix64_next(uint64_t *state)
{
    *state += GOLDEN_GAMMA;
    return mix64(*state);
}

/* Uniform integer in [0, bound), bound >= 1, without modulo bias: reject the lowest 2^64 mod bound
 * values so the rest split into equal classes. */
static uint64_t uniform_below(uint64_t *state, uint64_t bound)
{
    uint64_t threshold = (0 - bound) % bound;
    uint64_t r;
    do {
        r = splitmix64_next(state);
    } while (r < threshold);
    return r % bound;
}

/* order := the permutation of epoch d->epoch.  The stream starts at mix64(mix64(seed) ^ epoch):
 * distinct epochs of one seed start from distinct states because mix64 is a bijection. */
static void build_order(struct sdp_data *d)
{
    uint64_t n = d->nseq;
    for (uint64_t i = 0; i < n; i++)
        d->order[i] = i;
    if (!d->shuffle)
        return;
    uint64_t state = mix64(mix64(d->seed) ^ d->epoch);
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = uniform_below(&state, i + 1);
        uint64_t t = d->order[i];
        d->order[i] = d->order[j];
        d->order[j] = t;
    }
}

int sdp_data_open(struct sdp_data *d, const char *path, int T, uint64_t seed, int shuffle)
{
    const struct sdp_shard *s;
    uint32_t limit;
    int rc;

    memset(d, 0, sizeof(*d));
    if (T < 1)
        return sdp_err(-EINVAL, "data file %s: sequence length %d must be >= 1", path, T);
    rc = sdp_shard_open(path, &d->shard);
    if (rc < 0)
        return rc;
    s = &d->shard;
    if (s->count < (uint64_t)T + 1) {
        rc = sdp_err(-EINVAL, "data file %s holds %llu tokens, fewer than seq_len+1=%d", path,
                     (unsigned long long)s->count, T + 1);
        sdp_hint("lower data.seq_len or use a larger file");
        goto fail;
    }
    /* Ids leave as int32 and index the embedding table: one pass over the shard now is cheaper than
     * a wild read in a kernel later. */
    limit = s->vocab_size ? s->vocab_size : (uint32_t)INT32_MAX + 1;
    for (uint64_t i = 0; i < s->count; i++) {
        if (s->tokens[i] >= limit) {
            rc = sdp_err(-EINVAL, "data file %s: token %llu is %u, outside the vocabulary of %u",
                         path, (unsigned long long)i, s->tokens[i], limit);
            sdp_hint("the shard is corrupt or its header's vocab size is wrong; regenerate it");
            goto fail;
        }
    }
    d->T = T;
    d->nseq = (s->count - 1) / (uint64_t)T;
    d->seed = seed;
    d->shuffle = shuffle ? 1 : 0;
    if (d->nseq > SIZE_MAX / sizeof(*d->order)) {
        rc = sdp_err(-ENOMEM, "data file %s: %llu sequences do not fit in memory", path,
                     (unsigned long long)d->nseq);
        goto fail;
    }
    d->order = malloc((size_t)d->nseq * sizeof(*d->order));
    if (!d->order) {
        rc = sdp_err(-ENOMEM, "data file %s: no memory for the order of %llu sequences", path,
                     (unsigned long long)d->nseq);
        goto fail;
    }
    build_order(d);
    return 0;

fail:
    sdp_shard_close(&d->shard);
    memset(d, 0, sizeof(*d));
    return rc;
}

int sdp_data_check_vocab(const struct sdp_data *d, const char *path, uint32_t vocab)
{
    const struct sdp_shard *s = &d->shard;
    for (uint64_t i = 0; i < s->count; i++) {
        if (s->tokens[i] >= vocab) {
            sdp_err(-EINVAL,
                    "data file %s: the token at position %llu is %u, outside the model's "
                    "vocabulary of %u",
                    path, (unsigned long long)i, s->tokens[i], vocab);
            sdp_hint("the header gives no vocabulary size: tokenize the data with the model's "
                     "tokenizer");
            return -EINVAL;
        }
    }
    return 0;
}

void sdp_data_close(struct sdp_data *d)
{
    free(d->order);
    sdp_shard_close(&d->shard);
    memset(d, 0, sizeof(*d));
}

int sdp_data_set_docs(struct sdp_data *d, int on)
{
    if (on && d->shard.eos_id < 0) {
        sdp_err(-EINVAL,
                "data file %s has no end-of-document id: document masking (data.doc_mask) cannot "
                "tell where its documents end",
                d->shard.path);
        sdp_hint("tokenize it with an end-of-document id (slidedp tokenize --eos), or set "
                 "data.doc_mask: false to train on whole rows as before");
        return -EINVAL;
    }
    d->docs = on ? 1 : 0;
    return 0;
}

/* The next window's position.  Kept canonical (index < nseq) so that a saved position never
 * points past an epoch. */
static void advance(struct sdp_data *d)
{
    if (++d->index == d->nseq) {
        d->index = 0;
        d->epoch++;
        build_order(d);
    }
}

void sdp_data_next(struct sdp_data *d, int nseq_out, int32_t *ids, int32_t *targets, int32_t *segs)
{
    sdp_data_next_rows(d, nseq_out, 0, nseq_out, ids, targets, segs);
}

/* ids, targets, segs: (count, T) int32 row-major, rows [first, first + count) of the nseq_out. */
void sdp_data_next_rows(struct sdp_data *d, int nseq_out, int first, int count, int32_t *ids,
                        int32_t *targets, int32_t *segs)
{
    const uint32_t *tok = d->shard.tokens;
    const uint8_t *mask = d->shard.mask;
    const uint32_t eod = (uint32_t)d->shard.eos_id;
    size_t T = (size_t)d->T;

    SDP_ASSERT(d->order != NULL, "sdp_data_next called on a closed or failed sdp_data");
    SDP_ASSERT(count <= 0 || (first >= 0 && first + count <= nseq_out),
               "rows [%d, %d) are not among the %d read: pass rows within the batch", first,
               first + count, nseq_out);
    for (int i = 0; i < nseq_out; i++) {
        int b = i - first; /* the row's place in the output, when it is one of count */
        if (b < 0 || b >= count) {
            advance(d); /* the window is another node's: its position only */
            continue;
        }
        uint64_t start = d->order[d->index] * T;
        const uint32_t *w = tok + start; /* T+1 tokens */
        int32_t doc = 0;                 /* where the document of token t starts in the row */
        for (size_t t = 0; t < T; t++) {
            const int ends = d->docs && w[t] == eod; /* its target is another document's */
            ids[(size_t)b * T + t] = (int32_t)w[t];
            /* the target of position t is token start+t+1: ignored when its mask byte is 0 */
            targets[(size_t)b * T + t] =
                ends || (mask && !mask[start + t + 1]) ? IGNORED_TARGET : (int32_t)w[t + 1];
            if (segs)
                segs[(size_t)b * T + t] = doc;
            if (ends)
                doc = (int32_t)t + 1;
        }
        advance(d);
    }
}

static int pow2_at_least(int n)
{
    int p = 1;
    while (p < n)
        p *= 2;
    return p;
}

void sdp_data_docs_extent(const struct sdp_data *d, struct sdp_data_docs *x)
{
    const uint32_t eod = (uint32_t)d->shard.eos_id;
    const int T = d->T;
    memset(x, 0, sizeof(*x));
    for (uint64_t i = 0; i < d->nseq; i++) {
        const uint32_t *w = d->shard.tokens + i * (uint64_t)T;
        int count = 1, start = 0, longest = 0;
        for (int t = 0; d->shard.eos_id >= 0 && t + 1 < T; t++) /* none starts at the row's end */
            if (w[t] == eod) {
                longest = t + 1 - start > longest ? t + 1 - start : longest;
                start = t + 1;
                count++;
            }
        longest = T - start > longest ? T - start : longest;
        const int D = pow2_at_least(count), S2 = pow2_at_least(longest), S = S2 < T ? S2 : T;
        x->slots = D > x->slots ? D : x->slots;
        x->longest = S > x->longest ? S : x->longest;
        x->row_tokens = (long long)D * S > x->row_tokens ? (long long)D * S : x->row_tokens;
    }
}

void sdp_data_seek(struct sdp_data *d, uint64_t epoch, uint64_t index)
{
    SDP_ASSERT(d->order != NULL, "sdp_data_seek called on a closed or failed sdp_data");
    epoch += index / d->nseq;
    index %= d->nseq;
    d->index = index;
    if (epoch != d->epoch) {
        d->epoch = epoch;
        build_order(d);
    }
}
