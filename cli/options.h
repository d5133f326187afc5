/* SPDX-License-Identifier: MIT */
/* The options registry: every option of a recipe and of the train and bench command lines, once,
 * on the model of redis's static_configs[] (config.c): its recipe key, its flag, its type and
 * bounds, its default, one help line, the subcommands whose command line takes it, and the field
 * of struct sdp_recipe it fills.  The recipe parser (cli/recipe.c), `slidedp train`, `slidedp
 * bench`, their --help and docs/options.md (`slidedp options --markdown`) all read this table.
 *
 * Adding an option: one row in cli/options.c, and the code that reads its field.  A field that is
 * a graph knob is copied into struct sdp_graph_conf by train.c and bench.c.
 * Tests: tests/cli/test_options.sh (the registry, --help and docs/options.md agree). */
#ifndef SDP_OPTIONS_H
#define SDP_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "cli/recipe.h"

enum sdp_opt_type {
    SDP_OPT_INT,    /* int, base 10, within [lo, hi] */
    SDP_OPT_U64,    /* unsigned long long, base 10 */
    SDP_OPT_DBL,    /* double, finite, within the bounds */
    SDP_OPT_BOOL,   /* int 0/1: true/false/yes/no */
    SDP_OPT_STR,    /* char[size] */
    SDP_OPT_PATH,   /* char[size]; in a recipe, resolved against the recipe's directory */
    SDP_OPT_CHOICE, /* one of names[]: set(), or its index stored in the int at off */
    SDP_OPT_ARCH,   /* an architecture of models/ (the recipe parser handles it) */
    SDP_OPT_ARG,    /* command line only: the argument itself (const char *) */
    SDP_OPT_FLAG,   /* command line only, no argument: the int at off set to 1 */
};

enum sdp_opt_base {
    SDP_OPT_RECIPE, /* off is into struct sdp_recipe */
    SDP_OPT_SIZES,  /* off is into struct sdp_model_cfg (model sizes, applied after the arch's) */
};

#define SDP_OPT_MAX       128 /* rows of the registry at most (the recipe parser's line table) */
#define SDP_OPT_NSECTIONS 7   /* sections of a recipe */

/* Subcommands whose command line takes an option's flag. */
#define SDP_CMD_TRAIN 1u
#define SDP_CMD_BENCH 2u
#define SDP_CMD_PLAN  4u

struct sdp_option {
    const char *key;  /* "section.key" of a recipe, or NULL: command line only */
    const char *flag; /* long flag without "--", or NULL: recipe only */
    char short_flag;  /* e.g. 'q' for -q, or 0 */
    unsigned cmds;    /* SDP_CMD_* taking the flag */
    enum sdp_opt_type type;
    enum sdp_opt_base base;
    size_t off, size;
    double lo, hi;                                 /* allowed range of numbers */
    int lo_open, hi_open;                          /* 1: the bound itself is excluded */
    const char *const *names;                      /* SDP_OPT_CHOICE: NULL-terminated */
    void (*set)(struct sdp_recipe *r, int choice); /* SDP_OPT_CHOICE; NULL: store the index */
    const char *arg;       /* the flag's argument in help texts: N, X, FILE, ... */
    const char *def;       /* the default, as text */
    const char *bench_def; /* the default of `slidedp bench`, where it differs (else NULL) */
    const char *help;      /* one line */
};

/** The registry, in the order of the recipe's sections, then the command-line-only options. */
extern const struct sdp_option sdp_options[];
extern const int sdp_noptions;

/** The recipe's sections, NULL-terminated. */
extern const char *const sdp_option_sections[SDP_OPT_NSECTIONS + 1];

/** The row of a recipe key ("train.steps"), or NULL. */
const struct sdp_option *sdp_option_by_key(const char *key);
/** Whether row i is a rope scaling key (model.rope_*, but model.rope_theta, an architecture's
 * size). */
int sdp_option_is_rope(int i);

/** Whether x lies within o's bounds; and "must be >= 1" style text for them. */
int sdp_option_in_range(const struct sdp_option *o, double x);
void sdp_option_range_text(const struct sdp_option *o, char *out, size_t len);

/** "a, b, c" from a NULL-terminated list. */
void sdp_option_join(char *out, size_t len, const char *const *names, const char *last_sep);

/** Parse the options of argv for subcommand cmd (SDP_CMD_*; name "train", "bench" or "plan" for
 * messages)
 * into r, which holds the defaults or a loaded recipe; argv[*first..argc) are then the operands.
 * -h/--help prints usage_head, the options and usage_tail on stdout.
 * @return 0, 1 after --help, or -1 after a usage error (printed on stderr) */
int sdp_options_parse(const char *name, unsigned cmd, int argc, char **argv, struct sdp_recipe *r,
                      int *first, const char *usage_head, const char *usage_tail);

/** The help text of subcommand cmd: usage_head, one entry per option its command line takes,
 * usage_tail. */
void sdp_options_usage(FILE *f, unsigned cmd, const char *usage_head, const char *usage_tail);

/** docs/options.md: every option and every environment variable of base/env.c, as Markdown. */
void sdp_options_markdown(FILE *f);

#endif
