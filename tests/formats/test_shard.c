/* SPDX-License-Identifier: MIT */
/* Token shards: sdp_shard_write's bytes against a header encoded here byte by byte from the format
 * table in formats/shard.h, the round trip through sdp_shard_open, rejection (-EINVAL) of a
 * truncated file, a bad magic, a wrong version, a wrong token width and a count that disagrees with
 * the file size, and a failed write (tmp path unwritable, or a full device) leaving the previous
 * shard intact with no tmp left.  Version 2: sdp_shard_write_masked's bytes against the same
 * independent encoding with flags and mask bytes, the mask round trip (NULL for v1 and for v2
 * without the flag), and rejection of a truncated mask, a mask byte of 2 and unknown flags. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/shard.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_files.h"

static void path_in(char *out, size_t len, const char *name)
{
    const int n = snprintf(out, len, "%s/%s", sdp_test_dir(), name);
    CHECK(n >= 0 && (size_t)n < len, "the path of %s is too long", name);
}

/* The header of shard.h, encoded independently of shard.c. */
static void encode_header(unsigned char *h, const char *magic, uint32_t version, uint32_t width,
                          uint64_t count, uint32_t vocab, int32_t eos)
{
    memset(h, 0, 64);
    memcpy(h, magic, 8);
    for (int i = 0; i < 4; i++) {
        h[8 + i] = (unsigned char)(version >> (8 * i));
        h[12 + i] = (unsigned char)(width >> (8 * i));
        h[24 + i] = (unsigned char)(vocab >> (8 * i));
        h[28 + i] = (unsigned char)((uint32_t)eos >> (8 * i));
    }
    for (int i = 0; i < 8; i++)
        h[16 + i] = (unsigned char)(count >> (8 * i));
}

static void set_flags(unsigned char *h, uint32_t flags)
{
    for (int i = 0; i < 4; i++)
        h[32 + i] = (unsigned char)(flags >> (8 * i));
}

static void append_raw(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "ab");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(b, 1, n, f);
    fclose(f);
}

static void write_raw(const char *path, const unsigned char *hdr, size_t hdr_len,
                      const uint32_t *tok, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(hdr, 1, hdr_len, f);
    for (size_t i = 0; i < n; i++) {
        unsigned char b[4] = { (unsigned char)tok[i], (unsigned char)(tok[i] >> 8),
                               (unsigned char)(tok[i] >> 16), (unsigned char)(tok[i] >> 24) };
        fwrite(b, 1, 4, f);
    }
    fclose(f);
}

static void expect_invalid(const char *what, const char *path)
{
    struct sdp_shard s;
    int rc = sdp_shard_open(path, &s);
    printf("%-40s open -> %d (expected %d)\n", what, rc, -EINVAL);
    CHECK(rc == -EINVAL, "%s: got %d", what, rc);
    if (rc == 0)
        sdp_shard_close(&s);
}

/* Version 2 (loss mask) cases. */
static void test_v2(const uint32_t *tok, int n)
{
    unsigned char hdr[64], *bytes, *mask = malloc((size_t)n);
    char p[512];
    struct sdp_shard s;
    size_t len = 0;
    int rc;

    for (int i = 0; i < n; i++)
        mask[i] = (unsigned char)((i * 7 + i / 13) % 3 != 0);
    path_in(p, sizeof(p), "m.tok");
    rc = sdp_shard_write_masked(p, tok, mask, (uint64_t)n, 151669, 151643);
    CHECK(rc == 0, "write_masked returned %d", rc);
    bytes = sdp_test_read_file(p, &len);
    encode_header(hdr, "SDPTOKEN", 2, 4, (uint64_t)n, 151669, 151643);
    set_flags(hdr, 1);
    printf("v2 written file: %zu bytes (expected %d)\n", len, 64 + 5 * n);
    CHECK(bytes && len == 64 + 5 * (size_t)n, "v2 file length %zu", len);
    if (bytes && len == 64 + 5 * (size_t)n) {
        int bad = memcmp(bytes, hdr, 64) != 0;
        for (int i = 0; i < n; i++) {
            uint32_t v = (uint32_t)bytes[64 + 4 * i] | (uint32_t)bytes[65 + 4 * i] << 8 |
                         (uint32_t)bytes[66 + 4 * i] << 16 | (uint32_t)bytes[67 + 4 * i] << 24;
            bad |= v != tok[i] || bytes[64 + 4 * n + i] != mask[i];
        }
        printf("v2 written bytes vs independent encoding: %s\n", bad ? "differ" : "equal");
        CHECK(!bad, "v2 written bytes differ from the format of shard.h");
    }
    free(bytes);
    rc = sdp_shard_open(p, &s);
    CHECK(rc == 0, "v2 open returned %d", rc);
    if (rc == 0) {
        int same = s.count == (uint64_t)n && !memcmp(s.tokens, tok, 4 * (size_t)n) && s.mask &&
                   !memcmp(s.mask, mask, (size_t)n);
        printf("v2 round trip: tokens and mask %s\n", same ? "equal" : "differ");
        CHECK(same, "v2 round trip mismatch");
        sdp_shard_close(&s);
    }

    /* version 2 without a mask: mask NULL */
    rc = sdp_shard_write_masked(p, tok, NULL, (uint64_t)n, 151669, -1);
    CHECK(rc == 0, "write_masked(NULL) returned %d", rc);
    rc = sdp_shard_open(p, &s);
    printf("v2 without mask: open -> %d, mask %s\n", rc, rc == 0 && s.mask ? "set" : "NULL");
    CHECK(rc == 0 && !s.mask && s.count == (uint64_t)n, "v2 without mask");
    if (rc == 0)
        sdp_shard_close(&s);

    /* a mask byte of 2 is refused by the writer */
    mask[5] = 2;
    rc = sdp_shard_write_masked(p, tok, mask, (uint64_t)n, 151669, -1);
    printf("write_masked with a mask byte of 2 -> %d (expected %d)\n", rc, -EINVAL);
    CHECK(rc == -EINVAL, "mask byte 2 accepted by the writer");
    mask[5] = 1;

    /* malformed v2 files, made by hand */
    encode_header(hdr, "SDPTOKEN", 2, 4, 10, 0, -1);
    set_flags(hdr, 1);
    write_raw(p, hdr, 64, tok, 10);
    append_raw(p, mask, 9);
    expect_invalid("v2 mask truncated by one byte", p);
    write_raw(p, hdr, 64, tok, 10);
    expect_invalid("v2 flags say mask, none present", p);
    write_raw(p, hdr, 64, tok, 10);
    append_raw(p, mask, 11);
    expect_invalid("v2 one mask byte too many", p);
    unsigned char two[10] = { 0, 1, 1, 2, 0, 0, 1, 1, 1, 1 };
    write_raw(p, hdr, 64, tok, 10);
    append_raw(p, two, 10);
    expect_invalid("v2 mask byte of 2", p);
    set_flags(hdr, 3);
    write_raw(p, hdr, 64, tok, 10);
    append_raw(p, mask, 10);
    expect_invalid("v2 unknown flag bit 1", p);
    /* and a good hand-made one opens, proving the cases above fail for their stated reason */
    set_flags(hdr, 1);
    write_raw(p, hdr, 64, tok, 10);
    append_raw(p, mask, 10);
    rc = sdp_shard_open(p, &s);
    printf("%-40s open -> %d (expected 0)\n", "v2 hand-made, 10 tokens + 10 mask bytes", rc);
    CHECK(rc == 0 && s.mask && !memcmp(s.mask, mask, 10), "hand-made v2 shard");
    if (rc == 0)
        sdp_shard_close(&s);
    unlink(p);
    free(mask);
}

int main(void)
{
    enum { N = 1000 };
    uint32_t tok[N];
    unsigned char hdr[64], *bytes;
    char p[512], q[512], tmp[600];
    struct sdp_shard s;
    size_t len = 0;
    int rc;

    if (!sdp_test_mkdtemp("sdp-test-shard"))
        return sdp_test_finish(1);
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (uint32_t)(x >> 33) % 151669u;
    }
    tok[7] = 0xfffffffeu; /* all four bytes matter */

    /* write: bytes equal the independent encoding */
    path_in(p, sizeof(p), "a.tok");
    rc = sdp_shard_write(p, tok, N, 151669, 151643);
    CHECK(rc == 0, "write returned %d", rc);
    bytes = sdp_test_read_file(p, &len);
    encode_header(hdr, "SDPTOKEN", 1, 4, N, 151669, 151643);
    printf("written file: %zu bytes (expected %d)\n", len, 64 + 4 * N);
    CHECK(bytes && len == 64 + 4 * N, "file length %zu", len);
    if (bytes && len == 64 + 4 * N) {
        int bad = memcmp(bytes, hdr, 64) != 0;
        for (int i = 0; i < N; i++) {
            uint32_t v = (uint32_t)bytes[64 + 4 * i] | (uint32_t)bytes[65 + 4 * i] << 8 |
                         (uint32_t)bytes[66 + 4 * i] << 16 | (uint32_t)bytes[67 + 4 * i] << 24;
            bad |= v != tok[i];
        }
        printf("written bytes vs independent encoding: %s\n", bad ? "differ" : "equal");
        CHECK(!bad, "written bytes differ from the format of shard.h");
    }
    free(bytes);
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    CHECK(access(tmp, F_OK) != 0, "tmp file %s left behind", tmp);

    /* round trip */
    rc = sdp_shard_open(p, &s);
    CHECK(rc == 0, "open returned %d", rc);
    if (rc == 0) {
        int same = s.count == N && memcmp(s.tokens, tok, sizeof(tok)) == 0;
        printf("round trip: count %llu vocab %u eos %d, tokens %s\n", (unsigned long long)s.count,
               s.vocab_size, s.eos_id, same ? "equal" : "differ");
        CHECK(same && s.vocab_size == 151669 && s.eos_id == 151643, "round trip mismatch");
        CHECK(s.mask == NULL, "a version 1 shard has a mask");
        sdp_shard_close(&s);
    }

    /* hand-made file with eos -1 and no tokens opens */
    path_in(q, sizeof(q), "empty.tok");
    encode_header(hdr, "SDPTOKEN", 1, 4, 0, 0, -1);
    write_raw(q, hdr, 64, NULL, 0);
    rc = sdp_shard_open(q, &s);
    printf("empty shard: open -> %d, count %llu, eos %d\n", rc, (unsigned long long)s.count,
           s.eos_id);
    CHECK(rc == 0 && s.count == 0 && s.eos_id == -1, "empty shard");
    if (rc == 0)
        sdp_shard_close(&s);

    /* malformed files */
    path_in(q, sizeof(q), "bad.tok");
    encode_header(hdr, "SDPTOKEN", 1, 4, 10, 0, -1);
    write_raw(q, hdr, 40, NULL, 0);
    expect_invalid("shorter than the header", q);
    encode_header(hdr, "SDPTOKEX", 1, 4, 10, 0, -1);
    write_raw(q, hdr, 64, tok, 10);
    expect_invalid("bad magic", q);
    encode_header(hdr, "SDPTOKEN", 3, 4, 10, 0, -1);
    write_raw(q, hdr, 64, tok, 10);
    expect_invalid("version 3", q);
    encode_header(hdr, "SDPTOKEN", 1, 2, 10, 0, -1);
    write_raw(q, hdr, 64, tok, 10);
    expect_invalid("2 bytes per token", q);
    encode_header(hdr, "SDPTOKEN", 1, 4, 11, 0, -1);
    write_raw(q, hdr, 64, tok, 10);
    expect_invalid("count 11, file holds 10", q);
    encode_header(hdr, "SDPTOKEN", 1, 4, 9, 0, -1);
    write_raw(q, hdr, 64, tok, 10);
    expect_invalid("count 9, file holds 10", q);
    encode_header(hdr, "SDPTOKEN", 1, 4, UINT64_MAX / 2, 0, -1);
    write_raw(q, hdr, 64, tok, 10);
    expect_invalid("count overflowing count*4", q);
    path_in(q, sizeof(q), "missing.tok");
    rc = sdp_shard_open(q, &s);
    printf("%-40s open -> %d (expected %d)\n", "missing file", rc, -ENOENT);
    CHECK(rc == -ENOENT, "missing file: got %d", rc);

    /* failed writes leave the old shard intact: (1) the tmp path is a directory, so it cannot be
     * created; (2) the tmp path is a link to /dev/full, so the data write fails after creation. */
    uint32_t other[3] = { 1, 2, 3 };
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    mkdir(tmp, 0700);
    rc = sdp_shard_write(p, other, 3, 10, -1);
    printf("write with tmp path a directory -> %d\n", rc);
    CHECK(rc < 0, "write should fail");
    rmdir(tmp);
    if (access("/dev/full", W_OK) == 0 && symlink("/dev/full", tmp) == 0) {
        rc = sdp_shard_write(p, other, 3, 10, -1);
        printf("write through /dev/full -> %d (expected %d)\n", rc, -ENOSPC);
        CHECK(rc == -ENOSPC, "write to a full device should fail with ENOSPC");
        CHECK(access(tmp, F_OK) != 0 && errno == ENOENT, "tmp not removed after failure");
        unlink(tmp);
    } else {
        printf("/dev/full unavailable: skipping the full-device case\n");
    }
    rc = sdp_shard_open(p, &s);
    CHECK(rc == 0, "old shard unreadable after failed writes: %d", rc);
    if (rc == 0) {
        int same = s.count == N && memcmp(s.tokens, tok, sizeof(tok)) == 0;
        printf("old shard after failed writes: %s\n", same ? "intact" : "CHANGED");
        CHECK(same, "old shard changed");
        sdp_shard_close(&s);
    }

    test_v2(tok, N);

    /* a successful rewrite replaces it */
    rc = sdp_shard_write(p, other, 3, 10, -1);
    CHECK(rc == 0, "rewrite returned %d", rc);
    rc = sdp_shard_open(p, &s);
    CHECK(rc == 0 && s.count == 3 && s.tokens[2] == 3 && s.vocab_size == 10, "rewrite not visible");
    if (rc == 0)
        sdp_shard_close(&s);

    sdp_test_rm_tree(sdp_test_dir());
    return sdp_test_finish(sdp_test_nfail);
}
