/* SPDX-License-Identifier: MIT */
/* File helpers of the test programs that read and write files: a private scratch directory (under
 * $TMPDIR or /tmp, removed with its contents at the end), paths in it, and whole-file reads and
 * writes.  Header-only, static inline; a failed write counts as a CHECK failure (sdp_test.h). */
#ifndef SDP_TEST_FILES_H
#define SDP_TEST_FILES_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/lib/sdp_test.h"

static char sdp_test_dir_buf[1024] __attribute__((unused));

/** Create the scratch directory "<$TMPDIR or /tmp>/<prefix>.XXXXXX".  Returns its path, or NULL
 * (after printing why) when it cannot be created. */
static inline const char *sdp_test_mkdtemp(const char *prefix)
{
    const char *base = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(sdp_test_dir_buf, sizeof(sdp_test_dir_buf), "%s/%s.XXXXXX", base, prefix);
    if (!mkdtemp(sdp_test_dir_buf)) {
        printf("cannot create a temporary directory under %s\n", base);
        return NULL;
    }
    return sdp_test_dir_buf;
}

/** The scratch directory made by sdp_test_mkdtemp. */
static inline const char *sdp_test_dir(void)
{
    return sdp_test_dir_buf;
}

/** "<scratch directory>/<name>", in one of 8 rotating static buffers (so a call may take a few). */
static inline char *sdp_test_path(const char *name)
{
    static char buf[8][4200];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", sdp_test_dir_buf, name);
    return p;
}

/** The bytes of a file (malloc'd, one spare byte), their count in *len; NULL if unreadable. */
static inline unsigned char *sdp_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *b = NULL;
    long n;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = b ? (size_t)n : 0;
    return b;
}

/** Write n bytes to path (replacing it); a failure is counted in sdp_test_nfail. */
static inline void sdp_test_write_file(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f && fclose(f))
        ok = 0;
    CHECK(ok, "cannot write %s", path);
}

static inline int sdp_test_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/** Remove path and, for a directory, everything under it (symbolic links are not followed). */
static inline void sdp_test_rm_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            char sub[4400];
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            if (snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name) < (int)sizeof(sub))
                sdp_test_rm_tree(sub);
        }
        if (d)
            closedir(d);
    }
    remove(path);
}

#endif
