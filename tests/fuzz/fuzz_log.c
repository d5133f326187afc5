/* SPDX-License-Identifier: MIT */
/* Quiet stand-in for base/log.c in the libFuzzer builds only (tools/fuzz.sh): every message is
 * still formatted (so bad format arguments are caught by the sanitizers) but not printed, unless
 * SDP_FUZZ_VERBOSE is set.  sdp_assert_fail still aborts: an assertion reached from input is a bug.
 * The `make check` replay programs link the real base/log.c instead. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/sdp_log.h"

int sdp_log_verbosity = SDP_LOG_INFO;

static void emit(const char *fmt, va_list ap)
{
    static int verbose = -1;
    char buf[4096];
    int saved = errno;
    if (verbose < 0)
        verbose = getenv("SDP_FUZZ_VERBOSE") != NULL;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    if (verbose)
        fprintf(stderr, "[sdp] %s\n", buf);
    errno = saved;
}

void sdp_log_at(int level, const char *func, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    (void)level, (void)func, (void)file, (void)line;
    va_start(ap, fmt);
    emit(fmt, ap);
    va_end(ap);
}

int sdp_err_at(int rc, const char *func, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    (void)func, (void)file, (void)line;
    va_start(ap, fmt);
    emit(fmt, ap);
    va_end(ap);
    return rc;
}

void sdp_hint(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(fmt, ap);
    va_end(ap);
}

void sdp_assert_fail(const char *cond, const char *func, const char *file, int line,
                     const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "[sdp][bug][%s@%s:%d] assertion '%s' failed: ", func, file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
