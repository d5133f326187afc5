/* SPDX-License-Identifier: MIT */
/* Token shards (format in shard.h, versions 1 and 2 with an optional loss mask): read-only mmap
 * with every header field checked against the file, and an atomic writer (tmp file, fsync, rename,
 * directory fsync) that never leaves a half-written shard or touches an existing one on failure.
 * Never trusts the header before checking it against the file size. Tests:
 * tests/formats/test_shard.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "formats/shard.h"

/* Token ids are used in place from the mapping, so the host must be little-endian like the file. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "token shards are mapped in place: a little-endian host is required"
#endif

#define TOKEN_BYTES 4

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

int sdp_shard_open(const char *path, struct sdp_shard *s)
{
    unsigned char hdr[SDP_SHARD_HEADER_SIZE];
    struct stat st;
    uint32_t version, width, flags, per_token;
    uint64_t count;
    void *map;
    int fd, rc;

    memset(s, 0, sizeof(*s));
    if (strlen(path) >= sizeof(s->path))
        return sdp_err(-ENAMETOOLONG, "token shard path is %zu characters long", strlen(path));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        sdp_err(rc, "token shard %s: cannot open", path);
        if (rc == -ENOENT)
            sdp_hint("create it with tools/make_token_data.py, or fix data.train in the recipe");
        return rc;
    }
    if (fstat(fd, &st) != 0) {
        rc = sdp_err(-errno, "token shard %s: cannot stat", path);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sdp_err(-EINVAL, "token shard %s: not a regular file", path);
        goto fail;
    }
    if ((uint64_t)st.st_size < SDP_SHARD_HEADER_SIZE) {
        rc = sdp_err(-EINVAL, "token shard %s: file is %lld bytes, shorter than the %d-byte header",
                     path, (long long)st.st_size, SDP_SHARD_HEADER_SIZE);
        sdp_hint("the file is truncated or not a token shard; regenerate it");
        goto fail;
    }
    if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
        rc = sdp_err(-EIO, "token shard %s: cannot read the header", path);
        goto fail;
    }
    if (memcmp(hdr, SDP_SHARD_MAGIC, 8) != 0) {
        rc = sdp_err(-EINVAL, "token shard %s: bad magic (expected \"%s\")", path, SDP_SHARD_MAGIC);
        sdp_hint("a data file (data.train, data.val) must be a token shard written by `slidedp "
                 "tokenize` or tools/make_token_data.py, not text");
        goto fail;
    }
    version = get_u32(hdr + 8);
    if (version < 1 || version > SDP_SHARD_VERSION) {
        rc = sdp_err(-EINVAL, "token shard %s: version %u, this build reads versions 1 to %d", path,
                     version, SDP_SHARD_VERSION);
        sdp_hint("regenerate the shard with the tools of this source tree");
        goto fail;
    }
    width = get_u32(hdr + 12);
    if (width != TOKEN_BYTES) {
        rc = sdp_err(-EINVAL,
                     "token shard %s: bytes per token is %u, only %d (uint32 ids) is "
                     "supported",
                     path, width, TOKEN_BYTES);
        sdp_hint("regenerate the shard with tools/make_token_data.py");
        goto fail;
    }
    flags = version >= 2 ? get_u32(hdr + 32) : 0;
    if (flags & ~SDP_SHARD_FLAG_MASK) {
        rc = sdp_err(-EINVAL, "token shard %s: unknown flags 0x%x in the header", path, flags);
        sdp_hint("the shard was written by a newer build, or is corrupt; regenerate it");
        goto fail;
    }
    per_token = TOKEN_BYTES + ((flags & SDP_SHARD_FLAG_MASK) ? 1 : 0);
    count = get_u64(hdr + 16);
    if (count > ((uint64_t)st.st_size - SDP_SHARD_HEADER_SIZE) / per_token ||
        count * per_token + SDP_SHARD_HEADER_SIZE != (uint64_t)st.st_size) {
        if (per_token > TOKEN_BYTES &&
            count <= ((uint64_t)st.st_size - SDP_SHARD_HEADER_SIZE) / TOKEN_BYTES)
            rc = sdp_err(-EINVAL,
                         "token shard %s: %lld bytes, but %llu tokens with a loss mask need "
                         "%llu (%d header + %llu tokens + %llu mask bytes): the mask is %s",
                         path, (long long)st.st_size, (unsigned long long)count,
                         (unsigned long long)(SDP_SHARD_HEADER_SIZE + count * per_token),
                         SDP_SHARD_HEADER_SIZE, (unsigned long long)(count * TOKEN_BYTES),
                         (unsigned long long)count,
                         (uint64_t)st.st_size < SDP_SHARD_HEADER_SIZE + count * per_token
                             ? "truncated"
                             : "followed by extra bytes");
        else
            rc = sdp_err(-EINVAL,
                         "token shard %s: header token count %llu disagrees with the file size "
                         "(%lld bytes after the header, room for %lld tokens%s)",
                         path, (unsigned long long)count,
                         (long long)st.st_size - SDP_SHARD_HEADER_SIZE,
                         ((long long)st.st_size - SDP_SHARD_HEADER_SIZE) / per_token,
                         per_token > TOKEN_BYTES ? " with their mask" : "");
        sdp_hint("the file is truncated or was modified; regenerate it");
        goto fail;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        rc = sdp_err(-EFBIG, "token shard %s: %lld bytes cannot be mapped", path,
                     (long long)st.st_size);
        goto fail;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = sdp_err(-errno, "token shard %s: mmap of %lld bytes failed", path,
                     (long long)st.st_size);
        goto fail;
    }
    close(fd);

    snprintf(s->path, sizeof(s->path), "%s", path);
    s->count = count;
    s->vocab_size = get_u32(hdr + 24);
    s->eos_id = (int32_t)get_u32(hdr + 28);
    s->map = map;
    s->map_len = (size_t)st.st_size;
    s->tokens = (const uint32_t *)((const unsigned char *)map + SDP_SHARD_HEADER_SIZE);
    if (flags & SDP_SHARD_FLAG_MASK) {
        s->mask = (const uint8_t *)map + SDP_SHARD_HEADER_SIZE + count * TOKEN_BYTES;
        /* A byte other than 0 or 1 means the mask is not what the writer made. */
        for (uint64_t i = 0; i < count; i++) {
            if (s->mask[i] > 1) {
                rc = sdp_err(-EINVAL, "token shard %s: loss mask byte %llu is %u, not 0 or 1", path,
                             (unsigned long long)i, s->mask[i]);
                sdp_hint("the file is corrupt; regenerate it");
                sdp_shard_close(s);
                return rc;
            }
        }
    }
    return 0;

fail:
    close(fd);
    return rc;
}

void sdp_shard_close(struct sdp_shard *s)
{
    if (s->map)
        munmap(s->map, s->map_len);
    memset(s, 0, sizeof(*s));
}

/* The writer of both versions: version 1 when !v2 (mask must then be NULL). */
static int write_shard(const char *path, int v2, const uint32_t *tokens, const uint8_t *mask,
                       uint64_t count, uint32_t vocab_size, int32_t eos_id)
{
    unsigned char hdr[SDP_SHARD_HEADER_SIZE] = { 0 };
    char tmp[PATH_MAX];
    const char *what = NULL;
    FILE *f;
    int rc;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return sdp_err(-ENAMETOOLONG, "token shard path is %zu characters long", strlen(path));
    if (count > (UINT64_MAX - SDP_SHARD_HEADER_SIZE) / (TOKEN_BYTES + 1) || count > SIZE_MAX)
        return sdp_err(-EINVAL, "token shard %s: token count %llu is too large", path,
                       (unsigned long long)count);
    for (uint64_t i = 0; mask && i < count; i++)
        if (mask[i] > 1)
            return sdp_err(-EINVAL, "token shard %s: loss mask byte %llu is %u, not 0 or 1", path,
                           (unsigned long long)i, mask[i]);

    memcpy(hdr, SDP_SHARD_MAGIC, 8);
    put_u32(hdr + 8, v2 ? 2 : 1);
    put_u32(hdr + 32, mask ? SDP_SHARD_FLAG_MASK : 0);
    put_u32(hdr + 12, TOKEN_BYTES);
    put_u64(hdr + 16, count);
    put_u32(hdr + 24, vocab_size);
    put_u32(hdr + 28, (uint32_t)eos_id);

    f = fopen(tmp, "wb");
    if (!f)
        return sdp_err(-errno, "token shard %s: cannot create %s", path, tmp);
    errno = 0;
    if (fwrite(hdr, 1, sizeof(hdr), f) != sizeof(hdr) ||
        (count && fwrite(tokens, TOKEN_BYTES, (size_t)count, f) != (size_t)count) ||
        (count && mask && fwrite(mask, 1, (size_t)count, f) != (size_t)count)) {
        rc = sdp_err(errno ? -errno : -EIO, "token shard %s: writing %s failed", path, tmp);
        goto fail;
    }
    rc = sdp_file_commit(f, tmp, path, &what);
    if (rc < 0)
        return sdp_err(rc, "token shard %s: %s: %s", path, tmp, what);
    rc = sdp_fsync_parent(path);
    if (rc < 0)
        return sdp_err(rc, "token shard %s: fsync of its directory failed", path);
    return 0;

fail:
    fclose(f);
    unlink(tmp);
    return rc;
}

int sdp_shard_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size,
                    int32_t eos_id)
{
    return write_shard(path, 0, tokens, NULL, count, vocab_size, eos_id);
}

int sdp_shard_write_masked(const char *path, const uint32_t *tokens, const uint8_t *mask,
                           uint64_t count, uint32_t vocab_size, int32_t eos_id)
{
    return write_shard(path, 1, tokens, mask, count, vocab_size, eos_id);
}
