/* SPDX-License-Identifier: MIT */
/* Training batches from a token shard: fixed-length windows of T+1 tokens (inputs and next-token
 * targets), sequence i starting at token i*T, visited in an order shuffled per epoch by the seed;
 * with document masking, each token's document start within its row (the packed documents end at
 * the shard's end-of-document id).
 * When the shard carries a loss mask (version 2: instruction data), a target whose mask byte is 0
 * becomes -100, which the loss ignores.  Deterministic; the position (epoch, index) can be saved
 * and restored.  Tests: tests/formats/test_data.c. */
#ifndef SDP_DATA_H
#define SDP_DATA_H

#include <stdint.h>

#include "formats/shard.h"

struct sdp_data {
    struct sdp_shard shard;
    int T;         /* sequence length */
    uint64_t nseq; /* sequences per epoch: (count - 1) / T */
    uint64_t seed;
    int shuffle;
    uint64_t epoch; /* position: epoch and index of the next sequence in that epoch */
    uint64_t index;
    uint64_t *order; /* permutation of [0, nseq) for the current epoch */
    int docs;        /* document masking (sdp_data_set_docs) */
};

/** Open path and prepare sequences of T tokens.
 * @return 0, or -EINVAL when the shard holds fewer than T+1 tokens (logged with the numbers). */
int sdp_data_open(struct sdp_data *d, const char *path, int T, uint64_t seed, int shuffle);
void sdp_data_close(struct sdp_data *d);

/** Document masking of the rows (off after sdp_data_open): the documents end at the shard's
 * end-of-document id, each id's own target (the next document's first token) is ignored.
 * @return 0, or -EINVAL (logged, naming the file and data.doc_mask) when on and the shard has no
 * end-of-document id */
int sdp_data_set_docs(struct sdp_data *d, int on);

/** Next nseq_out sequences: ids and targets (nseq_out, T) int32, advancing the position (wrapping
 * epochs, reshuffled with seed + epoch).  segs (nseq_out, T) int32 or NULL: the position in its
 * row of the first token of each token's document (0 throughout without document masking). */
void sdp_data_next(struct sdp_data *d, int nseq_out, int32_t *ids, int32_t *targets, int32_t *segs);

/** The same position's advance over nseq_out sequences, but only rows [first, first + count) of
 * them are read, into ids, targets and segs (count, T): a node's share of a global batch (the
 * windows of the other rows are never touched).  count 0 reads none; else first + count <=
 * nseq_out. */
void sdp_data_next_rows(struct sdp_data *d, int nseq_out, int first, int count, int32_t *ids,
                        int32_t *targets, int32_t *segs);

/** Every token id of d's shard below vocab (for a shard whose header gives no vocabulary).
 * @return 0, or -EINVAL naming path, the position and the id (logged). */
int sdp_data_check_vocab(const struct sdp_data *d, const char *path, uint32_t vocab);

/** With document masking, the slots cuDNN's variable-length attention lays a row out in
 * (codelets/cuda/attention_cudnn.cu): D, the row's documents, and S, its longest document, each
 * rounded up to a power of two (S at most T), over every window of the shard.  slots: the largest
 * D, longest: the largest S, row_tokens: the largest D x S of one row.  Reads every token once. */
struct sdp_data_docs {
    int slots, longest;
    long long row_tokens;
};
void sdp_data_docs_extent(const struct sdp_data *d, struct sdp_data_docs *x);

/** Move to a saved position. */
void sdp_data_seek(struct sdp_data *d, uint64_t epoch, uint64_t index);

#endif
