/* SPDX-License-Identifier: MIT */
/* Logging and error reporting to stderr (see sdp_log.h).  Keeps errno intact around logging.
 * Users see the message alone; the source location, and the errno text of a validation error,
 * are for -v (SDP_LOG_DEBUG), where a developer reads them. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sdp_log.h"

int sdp_log_verbosity = SDP_LOG_INFO;

static const char *level_name[] = { "error", "warn", "info", "debug" };

/* "[sdp]", or "[sdp][node N]" in a run of several nodes (sdp_log_set_node) */
static char tag[32] = "[sdp]";

void sdp_log_set_node(int node)
{
    snprintf(tag, sizeof(tag), "[sdp][node %d]", node);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void sdp_log_at(int level, const char *func, const char *file, int line, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    if (level < 0)
        level = 0;
    if (level > SDP_LOG_DEBUG)
        level = SDP_LOG_DEBUG;
    if (level >= SDP_LOG_INFO || sdp_log_verbosity < SDP_LOG_DEBUG)
        fprintf(stderr, "%s[%s] ", tag, level_name[level]);
    else
        fprintf(stderr, "%s[%s][%s@%s:%d] ", tag, level_name[level], func, base_name(file), line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    errno = saved;
}

/* The errno text tells something only where a system call has just failed with it (errno still
 * holds the code, as in sdp_err(-errno, "cannot open %s", path)); a code chosen for a validation
 * error ("unknown policy" as -ENOENT, a recipe value as -EINVAL) gets it only under -v. */
int sdp_err_at(int rc, const char *func, const char *file, int line, const char *fmt, ...)
{
    int saved = errno;
    int verbose = sdp_log_verbosity >= SDP_LOG_DEBUG;
    va_list ap;
    if (verbose)
        fprintf(stderr, "%s[error][%s@%s:%d] ", tag, func, base_name(file), line);
    else
        fprintf(stderr, "%s[error] ", tag);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (rc < 0 && (verbose || saved == -rc))
        fprintf(stderr, ": %s", strerror(-rc));
    fputc('\n', stderr);
    errno = saved;
    return rc;
}

void sdp_hint(const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    fprintf(stderr, "%s[hint] ", tag);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    errno = saved;
}

void sdp_assert_fail(const char *cond, const char *func, const char *file, int line,
                     const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "[sdp][bug][%s@%s:%d] assertion '%s' failed: ", func, base_name(file), line,
            cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
