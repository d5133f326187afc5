/* SPDX-License-Identifier: MIT */
/* Checks that formats/safetensors.c refuses what it must: every corrupt input (missing file,
 * truncation, header length past the end, non-JSON header, offsets out of range, size mismatches,
 * index naming a missing or wrong shard) and every bad writer input returns the expected error
 * code; a failed write leaves an existing file byte-identical and no temporary file behind.
 * Valid files: tests/formats/test_safetensors.c. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "tests/formats/safetensors_test.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_files.h"

static void expect_open(const char *what, const char *path, int want)
{
    sdp_st_t *st = (sdp_st_t *)&st; /* must be reset to NULL on failure */
    int rc = sdp_st_open(path, &st);
    printf("bad input: %-40s -> %d (%s)\n", what, rc, rc ? strerror(-rc) : "accepted");
    CHECK(rc == want, "%s: rc %d, expected %d", what, rc, want);
    CHECK(rc == 0 || st == NULL, "%s: out not NULL on failure", what);
    if (rc == 0)
        sdp_st_close(st);
}

static void test_bad_inputs(void)
{
    static const float x[4] = { 1, 2, 3, 4 };
    const char *ok = "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    char hdr[512];

    expect_open("missing file", sdp_test_path("nope.safetensors"), -ENOENT);
    mkdir(sdp_test_path("emptydir"), 0755);
    expect_open("directory without model files", sdp_test_path("emptydir"), -ENOENT);
    st_make_file(sdp_test_path("ok.st"), ok, strlen(ok), x, 16);
    expect_open("valid control file", sdp_test_path("ok.st"), 0);
    st_make_file(sdp_test_path("trunc.st"), ok, strlen(ok), x, 12);
    expect_open("truncated data", sdp_test_path("trunc.st"), -EINVAL);
    st_make_file(sdp_test_path("extra.st"), ok, strlen(ok), x, 16);
    {
        FILE *f = fopen(sdp_test_path("extra.st"), "ab");
        fputs("junk", f);
        fclose(f);
    }
    expect_open("bytes after the last tensor", sdp_test_path("extra.st"), -EINVAL);
    st_make_file(sdp_test_path("short.st"), "", 0, NULL, 0);
    sdp_test_write_file(sdp_test_path("short.st"), "abc", 3);
    expect_open("file shorter than 8 bytes", sdp_test_path("short.st"), -EINVAL);
    st_make_file(sdp_test_path("hlen.st"), ok, strlen(ok) + 17, x, 16);
    expect_open("header length past the end", sdp_test_path("hlen.st"), -EINVAL);
    st_make_file(sdp_test_path("hlenhuge.st"), ok, UINT64_MAX, x, 16);
    expect_open("header length 2^64-1", sdp_test_path("hlenhuge.st"), -EINVAL);
    st_make_file(sdp_test_path("hlen1.st"), "{", 1, NULL, 0);
    expect_open("header length 1", sdp_test_path("hlen1.st"), -EINVAL);
    st_make_file(sdp_test_path("notjson.st"), "not json at all!", 16, x, 16);
    expect_open("header not JSON", sdp_test_path("notjson.st"), -EINVAL);
    st_make_file(sdp_test_path("array.st"), "[1,2,3] ", 8, NULL, 0);
    expect_open("header a JSON array", sdp_test_path("array.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr), "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,32]}}");
    st_make_file(sdp_test_path("range.st"), hdr, strlen(hdr), x, 16);
    expect_open("offsets out of range", sdp_test_path("range.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr), "{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}");
    st_make_file(sdp_test_path("mismatch.st"), hdr, strlen(hdr), x, 16);
    expect_open("nelems/offsets mismatch", sdp_test_path("mismatch.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr), "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}");
    st_make_file(sdp_test_path("reversed.st"), hdr, strlen(hdr), x, 16);
    expect_open("end before begin", sdp_test_path("reversed.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr),
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}");
    st_make_file(sdp_test_path("overlap.st"), hdr, strlen(hdr), x, 16);
    expect_open("overlapping tensors", sdp_test_path("overlap.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr), "{\"t\":{\"dtype\":\"F33\",\"shape\":[4],\"data_offsets\":[0,16]}}");
    st_make_file(sdp_test_path("dtype.st"), hdr, strlen(hdr), x, 16);
    expect_open("unknown dtype", sdp_test_path("dtype.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr), "{\"t\":{\"shape\":[4],\"data_offsets\":[0,16]}}");
    st_make_file(sdp_test_path("nodtype.st"), hdr, strlen(hdr), x, 16);
    expect_open("missing dtype", sdp_test_path("nodtype.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr),
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}");
    st_make_file(sdp_test_path("negshape.st"), hdr, strlen(hdr), x, 16);
    expect_open("negative shape", sdp_test_path("negshape.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr),
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
             "\"data_offsets\":[0,16]}}");
    st_make_file(sdp_test_path("ovf.st"), hdr, strlen(hdr), x, 16);
    expect_open("element count overflow", sdp_test_path("ovf.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr),
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}");
    st_make_file(sdp_test_path("dup.st"), hdr, strlen(hdr), x, 16);
    expect_open("duplicate tensor name", sdp_test_path("dup.st"), -EINVAL);
    snprintf(hdr, sizeof(hdr),
             "{\"__metadata__\":{\"format\":1},"
             "\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}");
    st_make_file(sdp_test_path("meta.st"), hdr, strlen(hdr), x, 16);
    expect_open("non-string metadata", sdp_test_path("meta.st"), -EINVAL);

    /* indexes */
    mkdir(sdp_test_path("idx"), 0755);
    st_make_file(sdp_test_path("idx/model-00001-of-00002.safetensors"), ok, strlen(ok), x, 16);
    const char *i1 =
        "{\"metadata\":{\"total_size\":32},\"weight_map\":{\"t\":"
        "\"model-00001-of-00002.safetensors\",\"u\":\"model-00002-of-00002.safetensors\"}}";
    sdp_test_write_file(sdp_test_path("idx/model.safetensors.index.json"), i1, strlen(i1));
    expect_open("index naming a missing shard", sdp_test_path("idx"), -EINVAL);
    const char *i2 = "{\"metadata\":{},\"weight_map\":{\"t\":\"model-00001-of-00002.safetensors\","
                     "\"u\":\"model-00001-of-00002.safetensors\"}}";
    sdp_test_write_file(sdp_test_path("idx/model.safetensors.index.json"), i2, strlen(i2));
    expect_open("index naming a tensor its shard lacks", sdp_test_path("idx"), -EINVAL);
    const char *i3 = "{\"metadata\":{},\"weight_map\":{\"t\":\"../ok.st\"}}";
    sdp_test_write_file(sdp_test_path("idx/model.safetensors.index.json"), i3, strlen(i3));
    expect_open("index shard outside its directory", sdp_test_path("idx"), -EINVAL);
    sdp_test_write_file(sdp_test_path("idx/model.safetensors.index.json"), "{\"weight_map\":", 14);
    expect_open("index not JSON", sdp_test_path("idx"), -EINVAL);
    const char *i4 =
        "{\"metadata\":{},\"weight_map\":{\"t\":\"model-00001-of-00002.safetensors\"}}";
    sdp_test_write_file(sdp_test_path("idx/model.safetensors.index.json"), i4, strlen(i4));
    expect_open("valid control index", sdp_test_path("idx/model.safetensors.index.json"), 0);

    /* writer input errors */
    struct sdp_st_wtensor w[2] = {
        { .name = "t", .dtype = SDP_ST_F32, .ndim = 1, .shape = { 4 }, .data_f32 = x },
        { .name = "t", .dtype = SDP_ST_F32, .ndim = 1, .shape = { 4 }, .data_f32 = x },
    };
    CHECK(sdp_st_write(sdp_test_path("w.st"), w, 2, NULL, NULL, 0) == -EINVAL,
          "duplicate names written");
    w[1].name = "u";
    w[1].data_f32 = NULL;
    CHECK(sdp_st_write(sdp_test_path("w.st"), w, 2, NULL, NULL, 0) == -EINVAL, "NULL data written");
    w[1].data_f32 = x;
    w[1].shape[0] = -1;
    CHECK(sdp_st_write(sdp_test_path("w.st"), w, 2, NULL, NULL, 0) == -EINVAL,
          "negative shape written");
    CHECK(!sdp_test_exists(sdp_test_path("w.st")) && !sdp_test_exists(sdp_test_path("w.st.tmp")),
          "rejected write left files");
}

static int same_bytes(const char *path, const unsigned char *ref, size_t n)
{
    size_t len = 0;
    unsigned char *b = sdp_test_read_file(path, &len);
    int same = b && len == n && !memcmp(b, ref, n);
    free(b);
    return same;
}

static void test_failed_writes(void)
{
    static float big[1 << 18];
    static const float small[4] = { 1, 2, 3, 4 };
    struct sdp_st_wtensor ws = {
        .name = "old", .dtype = SDP_ST_F32, .ndim = 1, .shape = { 4 }, .data_f32 = small
    };
    struct sdp_st_wtensor wb = {
        .name = "new", .dtype = SDP_ST_BF16, .ndim = 1, .shape = { 1 << 18 }, .data_f32 = big
    };
    const char *path = sdp_test_path("keep.safetensors");
    size_t n = 0;
    int rc = sdp_st_write(path, &ws, 1, NULL, NULL, 0);
    unsigned char *ref = sdp_test_read_file(path, &n);
    CHECK(rc == 0 && ref, "writing the original (rc %d)", rc);
    if (!ref)
        return;

    /* 1: the temporary file cannot be created (its name is taken by a directory) */
    mkdir(sdp_test_path("keep.safetensors.tmp"), 0755);
    rc = sdp_st_write(path, &wb, 1, NULL, NULL, 0);
    printf("failed write (tmp not creatable): rc %d, original identical: %d\n", rc,
           same_bytes(path, ref, n));
    CHECK(rc == -EIO && same_bytes(path, ref, n), "tmp-not-creatable case");
    rmdir(sdp_test_path("keep.safetensors.tmp"));

    /* 2: the write fails midway (file size limit, as a full disk would) */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 64 * 1024;
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
        rc = sdp_st_write(path, &wb, 1, NULL, NULL, 0);
        setrlimit(RLIMIT_FSIZE, &old);
        printf(
            "failed write (midway, file size limit): rc %d, original identical: %d, tmp left: %d\n",
            rc, same_bytes(path, ref, n), sdp_test_exists(sdp_test_path("keep.safetensors.tmp")));
        CHECK(rc == -EIO && same_bytes(path, ref, n) &&
                  !sdp_test_exists(sdp_test_path("keep.safetensors.tmp")),
              "midway failure case");
    } else {
        printf("skipped the midway-failure case: setrlimit failed\n");
    }
    signal(SIGXFSZ, SIG_DFL);

    /* 3: the parent is a regular file; 4: the parent does not exist */
    rc = sdp_st_write(sdp_test_path("keep.safetensors/x.safetensors"), &wb, 1, NULL, NULL, 0);
    CHECK(rc == -EIO && same_bytes(path, ref, n), "parent is a file: rc %d", rc);
    rc = sdp_st_write(sdp_test_path("no/such/dir/x.safetensors"), &wb, 1, NULL, NULL, 0);
    CHECK(rc == -EIO, "parent missing: rc %d", rc);

    /* 5: read-only directory (meaningless as root, who may write anyway) */
    if (geteuid() != 0) {
        mkdir(sdp_test_path("ro"), 0755);
        rc = sdp_st_write(sdp_test_path("ro/keep.safetensors"), &ws, 1, NULL, NULL, 0);
        size_t n2 = 0;
        unsigned char *ref2 = sdp_test_read_file(sdp_test_path("ro/keep.safetensors"), &n2);
        chmod(sdp_test_path("ro"), 0555);
        int rc2 = sdp_st_write(sdp_test_path("ro/keep.safetensors"), &wb, 1, NULL, NULL, 0);
        chmod(sdp_test_path("ro"), 0755);
        CHECK(rc == 0 && rc2 == -EIO && ref2 &&
                  same_bytes(sdp_test_path("ro/keep.safetensors"), ref2, n2),
              "read-only directory case: rc %d", rc2);
        free(ref2);
    }
    free(ref);
}

int main(void)
{
    if (!sdp_test_mkdtemp("sdp-test-st-bad"))
        return sdp_test_finish(1);

    test_bad_inputs();
    test_failed_writes();

    sdp_test_rm_tree(sdp_test_dir());
    return sdp_test_finish(sdp_test_nfail);
}
