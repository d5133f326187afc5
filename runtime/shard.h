/* SPDX-License-Identifier: MIT */
/* Token shards: the on-disk format of tokenized data.
 *
 *   offset size  field
 *   0      8     magic "SDPTOKEN"
 *   8      4     version (uint32 LE) = 1
 *   12     4     bytes per token (uint32 LE) = 4 (uint32 ids)
 *   16     8     token count (uint64 LE)
 *   24     4     vocab size of the tokenizer (uint32 LE, 0 = unknown)
 *   28     4     end-of-document id (int32 LE, -1 = none)
 *   32     32    reserved, zero
 *   64     ...   token ids, little-endian
 * Documents are concatenated, each followed by the end-of-document id.
 * Tests: tests/runtime/test_shard.c. */
#ifndef SDP_SHARD_H
#define SDP_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define SDP_SHARD_MAGIC       "SDPTOKEN"
#define SDP_SHARD_VERSION     1
#define SDP_SHARD_HEADER_SIZE 64

struct sdp_shard {
    char path[4096];
    uint64_t count; /* tokens */
    uint32_t vocab_size;
    int32_t eos_id;
    const uint32_t *tokens; /* mmap'ed, count entries */
    void *map;
    size_t map_len;
};

/** Open and validate a shard (magic, version, token width, count against file size).
 * @return 0, -ENOENT, -EINVAL (logged with the file and the field) */
int sdp_shard_open(const char *path, struct sdp_shard *s);
void sdp_shard_close(struct sdp_shard *s);

/** Write a shard atomically (tmp, fsync, rename, directory fsync). */
int sdp_shard_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size,
                    int32_t eos_id);

#endif
