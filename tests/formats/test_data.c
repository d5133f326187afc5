/* SPDX-License-Identifier: MIT */
/* Training batches: every (ids, targets) row against the window cut directly from the token array
 * that was written (ids = tokens[i*T .. i*T+T-1], targets = tokens[i*T+1 .. i*T+T]); each epoch
 * visits every one of (count-1)/T sequences exactly once; the same seed gives the same batches and
 * another seed or epoch another order; no shuffle gives 0, 1, 2, ...; seek to a saved position
 * reproduces the continuation; a shard shorter than T+1 tokens, or holding ids beyond its
 * vocabulary, is rejected with -EINVAL.  A version 2 shard with a loss mask: every target is the
 * next token when that token's mask byte is 1 and -100 when it is 0 (checked against the mask
 * array that was written, over two shuffled epochs); the inputs are never masked.  Document
 * masking: each token's document start and the end-of-document targets (test_docs).  A node's
 * share of each batch: the rows of whole batches (test_rows). */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/data.h"
#include "tests/lib/sdp_test.h"

enum { T = 16, NSEQ = 61, EXTRA = 5, COUNT = NSEQ * T + 1 + EXTRA, B = 4, VOCAB = 50000 };

static uint32_t tok[COUNT];

/* Which sequence a row is: the whole window is compared with every candidate; -1 if none. */
static long identify(const int32_t *ids, const int32_t *tg)
{
    long found = -1;
    for (long s = 0; s < NSEQ; s++) {
        int ok = 1;
        for (int t = 0; t < T && ok; t++)
            ok = ids[t] == (int32_t)tok[s * T + t] && tg[t] == (int32_t)tok[s * T + t + 1];
        if (ok) {
            if (found >= 0)
                return -2; /* ambiguous: the token array must make windows distinct */
            found = s;
        }
    }
    return found;
}

/* Draw n sequences one row at a time and record their indices. */
static int draw(struct sdp_data *d, long n, long *seq)
{
    int32_t ids[B * T], tg[B * T];
    long k = 0;
    while (k < n) {
        int b = n - k < B ? (int)(n - k) : B;
        sdp_data_next(d, b, ids, tg, NULL);
        for (int r = 0; r < b; r++) {
            seq[k] = identify(ids + r * T, tg + r * T);
            if (seq[k] < 0) {
                printf("  row %ld matches no window of the shard\n", k);
                return -1;
            }
            k++;
        }
    }
    return 0;
}

static int is_permutation(const long *seq, long n)
{
    char seen[NSEQ] = { 0 };
    for (long i = 0; i < n; i++) {
        if (seq[i] < 0 || seq[i] >= NSEQ || seen[seq[i]])
            return 0;
        seen[seq[i]] = 1;
    }
    return 1;
}

/* Masked shard: rows identified by their inputs, targets checked against the written mask. */
static void test_masked(const char *path)
{
    static uint8_t mask[COUNT];
    int32_t ids[B * T], tg[B * T];
    struct sdp_data d;
    long rows = 0, bad = 0, ignored = 0, expected_ignored = 0;
    int rc;

    uint64_t x = 4242;
    for (int i = 0; i < COUNT; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        mask[i] = (uint8_t)((x >> 40) % 3 != 0); /* about a third masked out */
    }
    mask[1] = 0; /* the target of position 0 of sequence 0 */
    if (sdp_shard_write_masked(path, tok, mask, COUNT, VOCAB, -1) != 0) {
        CHECK(0, "write_masked failed");
        return;
    }
    rc = sdp_data_open(&d, path, T, 77, 1);
    CHECK(rc == 0 && d.shard.mask, "masked open returned %d", rc);
    if (rc != 0)
        return;
    for (long k = 0; k < 2 * NSEQ; k += B) {
        int b = 2 * NSEQ - k < B ? (int)(2 * NSEQ - k) : B;
        sdp_data_next(&d, b, ids, tg, NULL);
        for (int r = 0; r < b; r++, rows++) {
            const int32_t *in = ids + r * T, *out = tg + r * T;
            long s = -1;
            for (long c = 0; c < NSEQ && s < 0; c++) {
                int ok = 1;
                for (int t = 0; t < T && ok; t++)
                    ok = in[t] == (int32_t)tok[c * T + t];
                if (ok)
                    s = c;
            }
            if (s < 0) {
                bad++;
                continue;
            }
            for (int t = 0; t < T; t++) {
                long j = s * T + t + 1;
                int32_t want = mask[j] ? (int32_t)tok[j] : -100;
                bad += out[t] != want;
                ignored += out[t] == -100;
                expected_ignored += !mask[j];
            }
        }
    }
    printf("masked shard: %ld rows over 2 epochs, %ld targets -100 (mask says %ld), %ld "
           "mismatches\n",
           rows, ignored, expected_ignored, bad);
    CHECK(bad == 0 && ignored == expected_ignored && ignored > 0, "masked targets");
    sdp_data_close(&d);

    /* the same tokens without a mask: no target ignored */
    sdp_shard_write(path, tok, COUNT, VOCAB, -1);
    rc = sdp_data_open(&d, path, T, 77, 1);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc != 0)
        return;
    ignored = 0;
    for (long k = 0; k < NSEQ; k += B) {
        int b = NSEQ - k < B ? (int)(NSEQ - k) : B;
        sdp_data_next(&d, b, ids, tg, NULL);
        for (int i = 0; i < b * T; i++)
            ignored += tg[i] < 0;
    }
    printf("unmasked shard: %ld targets ignored (expected 0)\n", ignored);
    CHECK(ignored == 0, "unmasked shard has ignored targets");
    sdp_data_close(&d);
}

/* A node's share (sdp_data_next_rows): three readers of the same seed, each reading rows
 * [2k, 2k + 2) of every batch of 6, give the rows of one reader of whole batches, across an
 * epoch's end (a reshuffle), and end at its position; count 0 reads nothing and advances alike. */
static void test_rows(const char *path)
{
    enum { GB = 6, PARTS = 3, BATCHES = 2 * NSEQ / GB };
    struct sdp_data whole, part[PARTS + 1];
    int32_t ids[GB * T], tg[GB * T], pids[GB * T], ptg[GB * T], none = -7;
    long bad = 0;
    int rc = sdp_data_open(&whole, path, T, 99, 1);
    for (int k = 0; k <= PARTS && rc == 0; k++)
        rc = sdp_data_open(&part[k], path, T, 99, 1);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc != 0)
        return;
    for (int b = 0; b < BATCHES; b++) {
        sdp_data_next(&whole, GB, ids, tg, NULL);
        for (int k = 0; k < PARTS; k++) {
            size_t off = (size_t)k * 2 * T;
            sdp_data_next_rows(&part[k], GB, 2 * k, 2, pids + off, ptg + off, NULL);
        }
        sdp_data_next_rows(&part[PARTS], GB, GB, 0, &none, &none, NULL);
        bad += memcmp(ids, pids, sizeof(ids)) != 0 || memcmp(tg, ptg, sizeof(tg)) != 0;
    }
    for (int k = 0; k <= PARTS; k++)
        bad += part[k].epoch != whole.epoch || part[k].index != whole.index;
    printf("%d batches of %d read in %d shares: %ld differences from whole batches (epoch %llu "
           "at the end), the 0-row reader's buffer %s\n",
           BATCHES, GB, PARTS, bad, (unsigned long long)whole.epoch,
           none == -7 ? "untouched" : "written");
    CHECK(bad == 0 && whole.epoch >= 1 && none == -7, "a node's share of the batch");
    for (int k = 0; k <= PARTS; k++)
        sdp_data_close(&part[k]);
    sdp_data_close(&whole);
}

/* Document masking: a shard whose end-of-document id EOD sits at every 7th token and at a few
 * more, read without shuffling: each row's document starts and targets against the documents cut
 * here from the token array (a token's document ends at the first EOD at or after it), the EOD's
 * target -100 and every other target the next token; off, the same rows with every target and
 * start 0; a shard without an end-of-document id refused with masking on. */
static void test_docs(const char *path)
{
    enum { EOD = 3 };
    static uint32_t dt[COUNT];
    struct sdp_data d;
    int32_t ids[T], tg[T], sg[T];
    long bad = 0, eods = 0, docs = 0, maxd = 0, maxs = 0, maxds = 0;
    for (int i = 0; i < COUNT; i++)
        dt[i] = i % 7 == 6 || i % 61 == 0 || i % 97 == 1 ? EOD : 10 + tok[i] % 1000;
    if (sdp_shard_write(path, dt, COUNT, VOCAB, EOD) != 0 || sdp_data_open(&d, path, T, 5, 0)) {
        CHECK(0, "docs shard");
        return;
    }
    CHECK(sdp_data_set_docs(&d, 1) == 0, "document masking refused with an EOD id");
    for (long r = 0; r < NSEQ; r++) {
        sdp_data_next(&d, 1, ids, tg, sg);
        for (int t = 0; t < T; t++) {
            const long i = r * T + t;
            long st = i; /* this token's document: after the last EOD before it, within the row */
            while (st > r * T && dt[st - 1] != EOD)
                st--;
            bad += ids[t] != (int32_t)dt[i] || sg[t] != st - r * T;
            bad += tg[t] != (dt[i] == EOD ? -100 : (int32_t)dt[i + 1]);
            eods += dt[i] == EOD;
            docs += sg[t] == t;
        }
        long nd = 0, longest = 0, D = 1, S = 1; /* the row's slots, from its document starts */
        for (int t = 0; t < T; t++) {
            nd += sg[t] == t;
            longest = t - sg[t] + 1 > longest ? t - sg[t] + 1 : longest;
        }
        while (D < nd)
            D *= 2;
        while (S < longest)
            S *= 2;
        S = S < T ? S : T;
        maxd = D > maxd ? D : maxd, maxs = S > maxs ? S : maxs;
        maxds = D * S > maxds ? D * S : maxds;
    }
    struct sdp_data_docs x;
    sdp_data_docs_extent(&d, &x);
    printf("document slots: at most %d a row, the longest %d tokens, %lld tokens a row (the rows: "
           "%ld, %ld, %ld)\n",
           x.slots, x.longest, x.row_tokens, maxd, maxs, maxds);
    CHECK(x.slots == maxd && x.longest == maxs && x.row_tokens == maxds && maxds > T,
          "the slots of the rows' documents");
    printf("document masking: %ld rows, %ld documents, %ld end-of-document targets ignored, %ld "
           "mismatches\n",
           (long)NSEQ, docs, eods, bad);
    CHECK(bad == 0 && eods > NSEQ && docs > 2 * NSEQ, "document starts and targets");
    CHECK(sdp_data_set_docs(&d, 0) == 0, "masking off");
    sdp_data_seek(&d, 0, 0);
    bad = 0;
    for (long r = 0; r < NSEQ; r++) {
        sdp_data_next(&d, 1, ids, tg, sg);
        for (int t = 0; t < T; t++)
            bad += tg[t] != (int32_t)dt[r * T + t + 1] || sg[t] != 0;
    }
    CHECK(bad == 0, "masking off: %ld rows differ from the plain windows", bad);
    sdp_data_close(&d);
    sdp_shard_write(path, dt, COUNT, VOCAB, -1);
    if (sdp_data_open(&d, path, T, 5, 0) == 0) {
        CHECK(sdp_data_set_docs(&d, 1) == -EINVAL, "masking a shard without an EOD id");
        sdp_data_close(&d);
    }
}

int main(void)
{
    const char *tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[512], shortp[512];
    struct sdp_data d, e;
    long a[3 * NSEQ], b2[3 * NSEQ], c[3 * NSEQ];
    int rc;

    uint64_t x = 99;
    for (int i = 0; i < COUNT; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (uint32_t)(x >> 33) % VOCAB;
    }
    snprintf(path, sizeof(path), "%s/sdp-test-data-%ld.tok", tmpdir, (long)getpid());
    snprintf(shortp, sizeof(shortp), "%s/sdp-test-data-short-%ld.tok", tmpdir, (long)getpid());
    if (sdp_shard_write(path, tok, COUNT, VOCAB, -1) != 0)
        return 1;

    /* no shuffle: identity order, windows and targets exact, wraps after NSEQ */
    rc = sdp_data_open(&d, path, T, 7, 0);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc != 0)
        goto out;
    printf("count %d, T %d: nseq %llu (expected %d)\n", COUNT, T, (unsigned long long)d.nseq, NSEQ);
    CHECK(d.nseq == NSEQ, "nseq");
    CHECK(draw(&d, NSEQ + 3, a) == 0, "draw");
    int ident = 1;
    for (long i = 0; i < NSEQ + 3; i++)
        ident &= a[i] == i % NSEQ;
    printf("unshuffled order 0..%d then 0,1,2: %s; position after: epoch %llu index %llu\n",
           NSEQ - 1, ident ? "yes" : "no", (unsigned long long)d.epoch,
           (unsigned long long)d.index);
    CHECK(ident && d.epoch == 1 && d.index == 3, "unshuffled order or position");
    sdp_data_close(&d);

    /* shuffle: each epoch a permutation, epochs differ, same seed same batches */
    rc = sdp_data_open(&d, path, T, 1234, 1);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc != 0)
        goto out;
    CHECK(draw(&d, 3 * NSEQ, a) == 0, "draw");
    int perm = is_permutation(a, NSEQ) && is_permutation(a + NSEQ, NSEQ) &&
               is_permutation(a + 2 * NSEQ, NSEQ);
    int diff01 = memcmp(a, a + NSEQ, NSEQ * sizeof(long)) != 0;
    int not_ident = 0;
    for (long i = 0; i < NSEQ; i++)
        not_ident |= a[i] != i;
    printf("shuffled: 3 epochs each a permutation of %d: %s; epoch 0 != epoch 1: %s; "
           "not identity: %s\n",
           NSEQ, perm ? "yes" : "no", diff01 ? "yes" : "no", not_ident ? "yes" : "no");
    CHECK(perm && diff01 && not_ident, "shuffled epochs");
    printf("first sequences of epoch 0: %ld %ld %ld %ld, epoch 1: %ld %ld %ld %ld\n", a[0], a[1],
           a[2], a[3], a[NSEQ], a[NSEQ + 1], a[NSEQ + 2], a[NSEQ + 3]);
    sdp_data_close(&d);

    rc = sdp_data_open(&e, path, T, 1234, 1);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc != 0)
        goto out;
    CHECK(draw(&e, 3 * NSEQ, b2) == 0, "draw");
    int same = memcmp(a, b2, sizeof(a)) == 0;
    printf("same seed reopened: %s\n", same ? "identical batches" : "DIFFERENT");
    CHECK(same, "determinism");
    sdp_data_close(&e);

    rc = sdp_data_open(&e, path, T, 1235, 1);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc != 0)
        goto out;
    CHECK(draw(&e, NSEQ, c) == 0, "draw");
    int other = memcmp(a, c, NSEQ * sizeof(long)) != 0;
    printf("seed 1235 vs 1234: %s\n", other ? "different order" : "SAME order");
    CHECK(other && is_permutation(c, NSEQ), "seed dependence");
    sdp_data_close(&e);

    /* seek: stop mid-epoch 1 at a position, a fresh reader seeks there and continues identically */
    rc = sdp_data_open(&d, path, T, 1234, 1);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc != 0)
        goto out;
    CHECK(draw(&d, NSEQ + 10, c) == 0, "draw");
    uint64_t ep = d.epoch, ix = d.index;
    CHECK(draw(&d, NSEQ, b2) == 0, "draw");
    rc = sdp_data_open(&e, path, T, 1234, 1);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc != 0)
        goto out;
    sdp_data_seek(&e, ep, ix);
    CHECK(draw(&e, NSEQ, c) == 0, "draw");
    same = memcmp(b2, c, NSEQ * sizeof(long)) == 0 &&
           memcmp(b2, a + NSEQ + 10, NSEQ * sizeof(long)) == 0;
    printf("seek to (epoch %llu, index %llu) reproduces the next %d sequences: %s\n",
           (unsigned long long)ep, (unsigned long long)ix, NSEQ, same ? "yes" : "no");
    CHECK(same, "seek");
    /* seek back to the start, and seek with an index past the epoch (normalised) */
    sdp_data_seek(&e, 0, 0);
    CHECK(draw(&e, 5, c) == 0, "draw");
    CHECK(memcmp(c, a, 5 * sizeof(long)) == 0, "seek to (0, 0)");
    sdp_data_seek(&e, 1, NSEQ + 2);
    CHECK(e.epoch == 2 && e.index == 2, "seek normalisation: epoch %llu index %llu",
          (unsigned long long)e.epoch, (unsigned long long)e.index);
    CHECK(draw(&e, 3, c) == 0, "draw");
    CHECK(memcmp(c, a + 2 * NSEQ + 2, 3 * sizeof(long)) == 0, "seek to (1, NSEQ+2)");
    sdp_data_close(&e);
    sdp_data_close(&d);

    /* too short: T tokens cannot give one sequence; T+1 gives exactly one */
    sdp_shard_write(shortp, tok, T, VOCAB, -1);
    rc = sdp_data_open(&d, shortp, T, 1, 1);
    printf("shard of %d tokens, T %d: open -> %d (expected %d)\n", T, T, rc, -EINVAL);
    CHECK(rc == -EINVAL, "short shard accepted");
    if (rc == 0)
        sdp_data_close(&d);
    sdp_shard_write(shortp, tok, T + 1, VOCAB, -1);
    rc = sdp_data_open(&d, shortp, T, 1, 1);
    printf("shard of %d tokens, T %d: open -> %d, nseq %llu (expected 1)\n", T + 1, T, rc,
           (unsigned long long)d.nseq);
    CHECK(rc == 0 && d.nseq == 1, "T+1 tokens");
    if (rc == 0)
        sdp_data_close(&d);

    /* ids beyond the vocabulary in the header */
    sdp_shard_write(shortp, tok, COUNT, 100, -1);
    rc = sdp_data_open(&d, shortp, T, 1, 1);
    printf("ids >= header vocab 100: open -> %d (expected %d)\n", rc, -EINVAL);
    CHECK(rc == -EINVAL, "out-of-vocabulary ids accepted");
    if (rc == 0)
        sdp_data_close(&d);

    test_rows(path);
    test_masked(shortp);
    test_docs(shortp);

out:
    unlink(path);
    unlink(shortp);
    return sdp_test_finish(sdp_test_nfail);
}
