/* SPDX-License-Identifier: MIT */
/* Helpers shared by the fuzz targets: a private scratch directory, writing an input to a file in
 * it, and the check every target makes on a parser's result (0 or a negative errno, nothing else).
 * Header-only so each target stays one translation unit; used by tests/fuzz/fuzz_*.c. */
#ifndef SDP_FUZZ_COMMON_H
#define SDP_FUZZ_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir_buf[512];

/* The directory holds plain files only. */
static inline void remove_fuzz_dir(void)
{
    DIR *d = opendir(fuzz_dir_buf);
    struct dirent *e;
    char path[1024];
    while (d && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof(path), "%s/%s", fuzz_dir_buf, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(fuzz_dir_buf);
}

/* The scratch directory of this process (created on first use, under $TMPDIR or /tmp, removed at
 * exit). */
static inline const char *fuzz_dir(void)
{
    char *dir = fuzz_dir_buf;
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof(fuzz_dir_buf), "%s/sdp-fuzz.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_fuzz_dir);
    }
    return dir;
}

/* path = scratch directory + "/" + name. */
static inline void fuzz_path(char *path, size_t len, const char *name)
{
    snprintf(path, len, "%s/%s", fuzz_dir(), name);
}

/* Write size bytes to path (truncating); aborts on I/O errors, which are not the parser's. */
static inline void fuzz_write(const char *path, const void *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const char *p = data;
    if (fd < 0) {
        perror(path);
        abort();
    }
    while (size > 0) {
        ssize_t k = write(fd, p, size);
        if (k <= 0) {
            perror(path);
            abort();
        }
        p += k;
        size -= (size_t)k;
    }
    close(fd);
}

/* A parser may return 0 or a negative errno; anything else is a bug. */
static inline void fuzz_check_rc(const char *what, int rc)
{
    if (rc > 0 || rc < -4095) {
        fprintf(stderr, "fuzz: %s returned %d, not 0 or a negative errno\n", what, rc);
        abort();
    }
}

#endif
