/* SPDX-License-Identifier: MIT */
/* Token shards: the on-disk format of tokenized data.
 *
 *   offset     size     field
 *   0          8        magic "SDPTOKEN"
 *   8          4        version (uint32 LE) = 1 or 2
 *   12         4        bytes per token (uint32 LE) = 4 (uint32 ids)
 *   16         8        token count (uint64 LE)
 *   24         4        vocab size of the tokenizer (uint32 LE, 0 = unknown)
 *   28         4        end-of-document id (int32 LE, -1 = none)
 *   32         4        version 2: flags (uint32 LE), bit 0 = has_mask, other bits zero;
 *                       version 1: reserved, zero (read as flags 0)
 *   36         28       reserved, zero
 *   64         4*count  token ids, little-endian
 *   64+4*count count    version 2 with has_mask only: loss mask, one byte per token, 1 = the
 *                       token is a training target, 0 = it is not (a prompt token)
 * The file size is exactly the header plus the tokens plus the mask when present.  Documents are
 * concatenated, each followed by the end-of-document id.  Version 1 files stay readable; a
 * version 1 file is a version 2 file without a mask (every token a target).
 * Tests: tests/formats/test_shard.c. */
#ifndef SDP_SHARD_H
#define SDP_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define SDP_SHARD_MAGIC       "SDPTOKEN"
#define SDP_SHARD_VERSION     2  /* newest version this build reads and writes */
#define SDP_SHARD_FLAG_MASK   1u /* flags bit 0: a loss mask follows the tokens */
#define SDP_SHARD_HEADER_SIZE 64

struct sdp_shard {
    char path[4096];
    uint64_t count; /* tokens */
    uint32_t vocab_size;
    int32_t eos_id;
    const uint32_t *tokens; /* mmap'ed, count entries */
    const uint8_t *mask;    /* mmap'ed, count entries of 0 or 1; NULL when the shard has none */
    void *map;
    size_t map_len;
};

/** Open and validate a shard (magic, version, token width, flags, count and mask against the file
 * size, mask bytes 0 or 1).
 * @return 0, -ENOENT, -EINVAL (logged with the file and the field) */
int sdp_shard_open(const char *path, struct sdp_shard *s);
void sdp_shard_close(struct sdp_shard *s);

/** Write a version 1 shard (no mask) atomically (tmp, fsync, rename, directory fsync). */
int sdp_shard_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size,
                    int32_t eos_id);

/** Write a version 2 shard with a loss mask (count bytes, each 0 or 1; NULL writes version 2
 * without a mask), atomically as sdp_shard_write.
 * @return 0, -EINVAL (a mask byte other than 0 or 1, logged with its position), -errno */
int sdp_shard_write_masked(const char *path, const uint32_t *tokens, const uint8_t *mask,
                           uint64_t count, uint32_t vocab_size, int32_t eos_id);

#endif
