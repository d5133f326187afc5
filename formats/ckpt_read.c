/* SPDX-License-Identifier: MIT */
/* The checkpoint reader (format in ckpt_format.h): open a file and validate its fixed header,
 * JSON and tensor table before any tensor is read, then check the crc of each tensor.  Never
 * trusts a field before checking it against the file.  Plain C, no StarPU.  Tests:
 * tests/runtime/test_ckpt.c, tests/fuzz/fuzz_ckpt.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/sdp_log.h"
#include "formats/ckpt_format.h"

#define FIXED_NBYTES SDP_CKPT_FIXED_NBYTES
#define ALIGN        SDP_CKPT_ALIGN
#define IO_BLOCK     SDP_CKPT_IO_BLOCK
#define JSON_MAX     ((uint64_t)64 << 20) /* sanity bound on the JSON header */

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Read n bytes at off: 0, 1 at end of file, or a negative errno. */
static int read_at(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n) {
        ssize_t k = pread(fd, p, n < IO_BLOCK ? n : IO_BLOCK, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            return 1;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

static int not_ckpt(const char *path, const char *why)
{
    return sdp_err(-EINVAL, "checkpoint %s: %s", path, why);
}

/* Read the fixed header into fixed and the JSON after it into *json_out (json_nbytes bytes,
 * caller frees). */
static int read_head(const char *path, int fd, uint64_t file_size, unsigned char *fixed,
                     char **json_out, uint64_t *json_nbytes)
{
    char *json;
    int rc = read_at(fd, fixed, FIXED_NBYTES, 0);
    if (rc < 0)
        return sdp_err(-EIO, "checkpoint %s: read failed: %s", path, strerror(-rc));
    if (rc > 0 || memcmp(fixed, SDP_CKPT_MAGIC, 8) != 0)
        return not_ckpt(path, rc > 0 ? "truncated inside the fixed header"
                                     : "not a slidedp checkpoint (wrong magic)");
    *json_nbytes = get_u64(fixed + 16);
    if (*json_nbytes == 0 || *json_nbytes > JSON_MAX || *json_nbytes > file_size)
        return not_ckpt(path, "corrupt fixed header (JSON length) or truncated file");
    json = malloc((size_t)*json_nbytes);
    if (!json)
        return sdp_err(-ENOMEM, "checkpoint %s: JSON header of %" PRIu64 " bytes", path,
                       *json_nbytes);
    rc = read_at(fd, json, (size_t)*json_nbytes, FIXED_NBYTES);
    if (rc != 0) {
        free(json);
        return rc > 0 ? not_ckpt(path, "truncated inside the JSON header")
                      : sdp_err(-EIO, "checkpoint %s: read failed: %s", path, strerror(-rc));
    }
    *json_out = json;
    return 0;
}

/* The checks of the fixed header once the JSON is in: header crc, version and flags, file size,
 * data offset.  Sets h->data_off and h->file_nbytes. */
static int check_fixed(const char *path, const unsigned char *fixed, const char *json,
                       uint64_t json_nbytes, uint64_t file_size, struct sdp_ckpt_header *h)
{
    uint32_t version = get_u32(fixed + 8), flags = get_u32(fixed + 12);
    h->data_off = get_u64(fixed + 24);
    h->file_nbytes = get_u64(fixed + 32);
    if (sdp_crc32c(sdp_crc32c(0, fixed, 60), json, (size_t)json_nbytes) != get_u32(fixed + 60))
        return not_ckpt(path, "header crc32c mismatch: the header is corrupt");
    if (version != SDP_CKPT_VERSION || flags != 0) {
        int rc = sdp_err(-EINVAL,
                         "checkpoint %s: format version %" PRIu32 " flags %#" PRIx32
                         ", this build reads version %d flags 0",
                         path, version, flags, SDP_CKPT_VERSION);
        sdp_hint("export it with the slidedp that wrote it");
        return rc;
    }
    if (h->file_nbytes != file_size)
        return sdp_err(-EINVAL, "checkpoint %s: %lld bytes, the header says %" PRIu64 "%s", path,
                       (long long)file_size, h->file_nbytes,
                       file_size < h->file_nbytes ? " (truncated)" : "");
    if (h->data_off % ALIGN || h->data_off < FIXED_NBYTES + json_nbytes)
        return not_ckpt(path, "corrupt fixed header (data offset)");
    return 0;
}

int sdp_ckpt_file_open(const char *path, int *fd_out, struct sdp_ckpt_header *h)
{
    unsigned char fixed[FIXED_NBYTES];
    char *json = NULL;
    uint64_t json_nbytes = 0;
    struct stat sb;
    int fd, rc;
    memset(h, 0, sizeof(*h));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sdp_err(-errno, "checkpoint %s: cannot open", path);
    if (fstat(fd, &sb) != 0)
        rc = sdp_err(-errno, "checkpoint %s: fstat failed", path);
    else
        rc = read_head(path, fd, (uint64_t)sb.st_size, fixed, &json, &json_nbytes);
    if (!rc)
        rc = check_fixed(path, fixed, json, json_nbytes, (uint64_t)sb.st_size, h);
    if (!rc)
        rc = sdp_ckpt_header_parse(path, json, (size_t)json_nbytes, h);
    free(json);
    if (rc) {
        sdp_ckpt_header_free(h);
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return 0;
}

int sdp_ckpt_tensor_check(const char *path, int fd, const struct sdp_ckpt_tensor *t, char *buf,
                          size_t bufsize, char *dst)
{
    size_t nbytes = (size_t)t->nelems * sizeof(float);
    uint32_t crc = 0;
    for (size_t done = 0; done < nbytes;) {
        size_t k = nbytes - done < bufsize ? nbytes - done : bufsize;
        char *p = dst ? dst + done : buf;
        int rc = read_at(fd, p, k, t->offset + done);
        if (rc)
            return rc > 0 ? not_ckpt(path, "truncated in the tensor data")
                          : sdp_err(-EIO, "checkpoint %s: read failed: %s", path, strerror(-rc));
        crc = sdp_crc32c(crc, p, k);
        done += k;
    }
    if (crc != t->crc)
        return sdp_err(-EINVAL,
                       "checkpoint %s: group %d %s: crc32c %08" PRIx32
                       ", the header says %08" PRIx32 ": the data is corrupt",
                       path, t->group, sdp_ckpt_kind_name(t->kind), crc, t->crc);
    return 0;
}

int sdp_ckpt_file_verify(const char *path, int fd, const struct sdp_ckpt_header *h)
{
    size_t bufsize = 0;
    char *buf;
    int rc = 0;
    for (int i = 0; i < h->ntensors; i++)
        if (h->t[i].nelems * sizeof(float) > bufsize)
            bufsize = (size_t)h->t[i].nelems * sizeof(float);
    if (bufsize > IO_BLOCK)
        bufsize = IO_BLOCK;
    buf = malloc(bufsize);
    if (!buf)
        return sdp_err(-ENOMEM, "checkpoint %s: read buffer of %zu bytes", path, bufsize);
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
    for (int i = 0; i < h->ntensors && !rc; i++)
        rc = sdp_ckpt_tensor_check(path, fd, &h->t[i], buf, bufsize, NULL);
    free(buf);
    return rc;
}

int sdp_ckpt_read_header(const char *path, struct sdp_ckpt_header *h)
{
    int fd, rc = sdp_ckpt_file_open(path, &fd, h);
    if (rc)
        return rc;
    close(fd);
    return 0;
}
