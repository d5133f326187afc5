/* SPDX-License-Identifier: MIT */
/* The environment variables the project reads, listed once (name, values, what it changes), and
 * the only functions that read them.  Reading a variable that is not in the table is a bug and
 * aborts, so the table (and docs/options.md, generated from it) cannot fall behind the code.
 * Tests: tests/cli/test_options.sh. */
#ifndef SDP_ENV_H
#define SDP_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

struct sdp_env_var {
    const char *name;   /* SDP_... or a StarPU/Slurm variable the project reads */
    const char *values; /* what it takes, and its default */
    const char *help;   /* one line: what it changes */
};

/** The table, ended by a row whose name is NULL. */
extern const struct sdp_env_var sdp_env_vars[];

/** getenv(name) for a listed variable; NULL when unset.  Aborts for an unlisted name. */
const char *sdp_env(const char *name);
/** The variable as a base-10 integer; dflt when unset, empty or not a number. */
long sdp_env_long(const char *name, long dflt);
/** The variable as a number; dflt when unset, empty or not a number. */
double sdp_env_double(const char *name, double dflt);
/** 1 when the variable is set to exactly `value`. */
int sdp_env_is(const char *name, const char *value);

#ifdef __cplusplus
}
#endif
#endif
