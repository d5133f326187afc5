/* SPDX-License-Identifier: MIT */
/* Logging and error reporting.  An error is reported once, where it is detected, with the values
 * and a hint; after that it travels as a negative errno.  Logs go to stderr; stdout is for
 * machine-readable progress only.  No StarPU here: every folder may include this header. */
#ifndef SDP_LOG_H
#define SDP_LOG_H

#include <errno.h>

enum sdp_log_level { SDP_LOG_ERROR = 0, SDP_LOG_WARN = 1, SDP_LOG_INFO = 2, SDP_LOG_DEBUG = 3 };

extern int sdp_log_verbosity; /* messages above this level are dropped; default SDP_LOG_INFO */

void sdp_log_at(int level, const char *func, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int sdp_err_at(int rc, const char *func, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Tag every message of this process with its node (runs of several nodes, runtime/nodes.h). */
void sdp_log_set_node(int node);
void sdp_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void sdp_assert_fail(const char *cond, const char *func, const char *file, int line,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Log at a level; the arguments are evaluated only when the level is enabled. */
#define sdp_log(level, ...)                                                                        \
    do {                                                                                           \
        if ((level) <= sdp_log_verbosity)                                                          \
            sdp_log_at((level), __func__, __FILE__, __LINE__, __VA_ARGS__);                        \
    } while (0)
#define SDP_ERROR(...) sdp_log(SDP_LOG_ERROR, __VA_ARGS__)
#define SDP_WARN(...)  sdp_log(SDP_LOG_WARN, __VA_ARGS__)
#define SDP_INFO(...)  sdp_log(SDP_LOG_INFO, __VA_ARGS__)
#define SDP_DEBUG(...) sdp_log(SDP_LOG_DEBUG, __VA_ARGS__)

/* Report an error once and return rc (a negative errno):
 *   return sdp_err(-EINVAL, "recipe %s: chunk %d does not divide T=%d", path, chunk, T);
 * prints "[sdp][error] message", adding ": strerror(-rc)" where errno still holds -rc (a system
 * call has just failed with it).  Under -v (sdp_log_verbosity SDP_LOG_DEBUG) it prints
 * "[sdp][error][func@file:line] message: strerror(-rc)" always; warnings get the location too. */
#define sdp_err(rc, ...) sdp_err_at((rc), __func__, __FILE__, __LINE__, __VA_ARGS__)

/* Always-on assertion for bugs (never for input validation); the message says how to fix it. */
#define SDP_ASSERT(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            sdp_assert_fail(#cond, __func__, __FILE__, __LINE__, __VA_ARGS__);                     \
    } while (0)

#ifdef SDP_ENABLE_DEBUG
#define SDP_DEBUG_ASSERT(cond, ...) SDP_ASSERT(cond, __VA_ARGS__)
#else
#define SDP_DEBUG_ASSERT(cond, ...) ((void)0)
#endif

#endif
