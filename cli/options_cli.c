/* SPDX-License-Identifier: MIT */
/* The command lines of train and bench, their --help and docs/options.md, all from the registry
 * of cli/options.c: getopt_long's table is built from its rows, every value is checked against the
 * row's type and bounds, and `slidedp options --markdown` prints every row and every environment
 * variable of base/env.c.  Tests: tests/cli/test_options.sh. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "cli/cli.h"
#include "cli/options.h"

/* ---- one value from the command line ---- */

static void *field(const struct sdp_option *o, struct sdp_recipe *r)
{
    return (char *)r + o->off;
}

/* ">= 1" or "in [0, 1]" */
static void bounds_text(const struct sdp_option *o, char *out, size_t len)
{
    char t[96];
    sdp_option_range_text(o, t, sizeof(t)); /* "must be >= 1" */
    snprintf(out, len, "%s", t + strlen("must be "));
}

static int from_arg(const char *name, const struct sdp_option *o, const char *s,
                    struct sdp_recipe *r)
{
    char why[256];
    char *end;

    switch (o->type) {
    case SDP_OPT_INT: {
        long long x = strtoll(s, &end, 10);
        if (*s == '\0' || *end != '\0' || !sdp_option_in_range(o, (double)x)) {
            bounds_text(o, why, sizeof(why));
            fprintf(stderr, "slidedp %s: --%s expects an integer %s, got '%s'\n", name, o->flag,
                    why, s);
            return -1;
        }
        *(int *)field(o, r) = (int)x;
        return 0;
    }
    case SDP_OPT_U64: {
        unsigned long long x = strtoull(s, &end, 10);
        if (*s < '0' || *s > '9' || *end != '\0') {
            fprintf(stderr, "slidedp %s: --%s expects an integer >= 0, got '%s'\n", name, o->flag,
                    s);
            return -1;
        }
        *(unsigned long long *)field(o, r) = x;
        return 0;
    }
    case SDP_OPT_DBL: {
        double x = strtod(s, &end);
        if (*s == '\0' || *end != '\0' || !sdp_option_in_range(o, x)) {
            bounds_text(o, why, sizeof(why));
            fprintf(stderr, "slidedp %s: --%s expects a number %s, got '%s'\n", name, o->flag, why,
                    s);
            return -1;
        }
        *(double *)field(o, r) = x;
        return 0;
    }
    case SDP_OPT_STR:
    case SDP_OPT_PATH:
        if (strlen(s) >= o->size) {
            fprintf(stderr, "slidedp %s: --%s is longer than %zu characters\n", name, o->flag,
                    o->size - 1);
            return -1;
        }
        memcpy(field(o, r), s, strlen(s) + 1);
        return 0;
    case SDP_OPT_CHOICE:
        for (int i = 0; o->names[i]; i++)
            if (!strcmp(s, o->names[i])) {
                if (o->set)
                    o->set(r, i);
                else
                    *(int *)field(o, r) = i;
                return 0;
            }
        sdp_option_join(why, sizeof(why), o->names, " or ");
        fprintf(stderr, "slidedp %s: --%s takes %s, not '%s'\n", name, o->flag, why, s);
        return -1;
    case SDP_OPT_ARG:
        *(const char **)field(o, r) = s;
        return 0;
    case SDP_OPT_FLAG:
        *(int *)field(o, r) = 1;
        return 0;
    case SDP_OPT_BOOL:
    case SDP_OPT_ARCH:
        break;
    }
    fprintf(stderr, "slidedp %s: --%s: no command-line form\n", name, o->flag);
    return -1;
}

/* ---- help ---- */

/* Print text from column `col` on, wrapped before column 100. */
static void wrap(FILE *f, const char *text, int col, int at)
{
    const char *p = text;
    while (*p) {
        int room = 100 - at, n = (int)strlen(p);
        if (n > room) {
            n = room;
            while (n > 0 && p[n] != ' ')
                n--;
            if (n == 0) /* one long word: let it overflow */
                n = (int)strcspn(p, " ");
        }
        fprintf(f, "%.*s", n, p);
        p += n;
        while (*p == ' ')
            p++;
        if (*p) {
            fprintf(f, "\n%*s", col, "");
            at = col;
        }
    }
    fputc('\n', f);
}

static const char *default_of(const struct sdp_option *o, unsigned cmd)
{
    return cmd != SDP_CMD_TRAIN && o->bench_def ? o->bench_def : o->def; /* plan --model: bench's */
}

/* "a|b|c" from a NULL-terminated list */
static void bar_join(char *out, size_t len, const char *const *names)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; names[i] && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s", i ? "|" : "", names[i]);
}

static void print_entry(FILE *f, const struct sdp_option *o, unsigned cmd)
{
    char head[160], text[512], names[128];
    const char *arg = o->arg ? o->arg : "S";
    int n;

    if (o->type == SDP_OPT_CHOICE) {
        bar_join(names, sizeof(names), o->names);
        arg = names;
    }
    if (o->short_flag)
        n = snprintf(head, sizeof(head), "  -%c, --%s", o->short_flag, o->flag);
    else if (o->type == SDP_OPT_FLAG)
        n = snprintf(head, sizeof(head), "  --%s", o->flag);
    else
        n = snprintf(head, sizeof(head), "  --%s %s", o->flag, arg);
    if (o->key)
        snprintf(text, sizeof(text), "%s (%s; default %s)", o->help, o->key, default_of(o, cmd));
    else
        snprintf(text, sizeof(text), "%s (default %s)", o->help, default_of(o, cmd));
    if (n >= 23)
        fprintf(f, "%s\n%*s", head, 24, "");
    else
        fprintf(f, "%-24s", head);
    wrap(f, text, 24, 24);
}

void sdp_options_usage(FILE *f, unsigned cmd, const char *usage_head, const char *usage_tail)
{
    fputs(usage_head, f);
    fputs("\noptions:\n", f);
    for (int i = 0; i < sdp_noptions; i++)
        if (sdp_options[i].flag && (sdp_options[i].cmds & cmd))
            print_entry(f, &sdp_options[i], cmd);
    fprintf(f, "%-24s%s\n", "  -h, --help", "this text");
    fputs(usage_tail, f);
}

/* ---- parsing ---- */

#define OPT_BASE 256 /* getopt values of the rows: OPT_BASE + row */

int sdp_options_parse(const char *name, unsigned cmd, int argc, char **argv, struct sdp_recipe *r,
                      int *first, const char *usage_head, const char *usage_tail)
{
    struct option longopts[SDP_OPT_MAX + 2];
    char shortopts[32] = "h";
    int n = 0, opt;

    for (int i = 0; i < sdp_noptions; i++) {
        const struct sdp_option *o = &sdp_options[i];
        if (!o->flag || !(o->cmds & cmd))
            continue;
        longopts[n++] =
            (struct option){ o->flag, o->type == SDP_OPT_FLAG ? no_argument : required_argument,
                             NULL, OPT_BASE + i };
        if (o->short_flag) {
            size_t len = strlen(shortopts);
            shortopts[len] = o->short_flag;
            shortopts[len + 1] = '\0';
        }
    }
    longopts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
    longopts[n] = (struct option){ NULL, 0, NULL, 0 };

    optind = 1;
    while ((opt = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        const struct sdp_option *o = NULL;
        if (opt == 'h') {
            sdp_options_usage(stdout, cmd, usage_head, usage_tail);
            return 1;
        }
        if (opt >= OPT_BASE && opt < OPT_BASE + sdp_noptions)
            o = &sdp_options[opt - OPT_BASE];
        for (int i = 0; !o && opt > 0 && opt < OPT_BASE && i < sdp_noptions; i++)
            if (sdp_options[i].short_flag == opt && (sdp_options[i].cmds & cmd))
                o = &sdp_options[i];
        if (!o) {
            sdp_options_usage(stderr, cmd, usage_head, usage_tail);
            return -1;
        }
        if (from_arg(name, o, optarg, r))
            return -1;
    }
    *first = optind;
    return 0;
}

/* ---- docs/options.md and `slidedp options` ---- */

/* A Markdown table cell: '|' escaped. */
static void cell(FILE *f, const char *s)
{
    fputs(" ", f);
    for (; *s; s++) {
        if (*s == '|')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputs(" |", f);
}

static const char *type_name(const struct sdp_option *o)
{
    static const char *const names[] = { "integer",    "integer (64-bit)", "number",
                                         "true/false", "string",           "path",
                                         "choice",     "architecture",     "string",
                                         "flag" };
    return names[o->type];
}

static void cmds_text(const struct sdp_option *o, char *out, size_t len)
{
    static const unsigned bits[] = { SDP_CMD_TRAIN, SDP_CMD_BENCH, SDP_CMD_PLAN };
    static const char *const names[] = { "train", "bench", "plan" };
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < 3 && used < len; i++)
        if (o->cmds & bits[i])
            used += (size_t)snprintf(out + used, len - used, "%s%s", used ? ", " : "", names[i]);
}

static void print_row(FILE *f, const struct sdp_option *o)
{
    char flag[96] = "", cmds[32] = "", range[128] = "", dflt[160];

    if (o->flag) {
        if (o->short_flag)
            snprintf(flag, sizeof(flag), "-%c, --%s", o->short_flag, o->flag);
        else
            snprintf(flag, sizeof(flag), "--%s", o->flag);
        cmds_text(o, cmds, sizeof(cmds));
    }
    if (o->type == SDP_OPT_CHOICE)
        bar_join(range, sizeof(range), o->names);
    else if (o->type == SDP_OPT_INT || o->type == SDP_OPT_DBL)
        bounds_text(o, range, sizeof(range));
    if (o->bench_def)
        snprintf(dflt, sizeof(dflt), "%s (bench: %s)", o->def, o->bench_def);
    else
        snprintf(dflt, sizeof(dflt), "%s", o->def);
    fputs("|", f);
    cell(f, o->key ? o->key : "");
    cell(f, flag);
    cell(f, cmds);
    cell(f, type_name(o));
    cell(f, range);
    cell(f, dflt);
    cell(f, o->help);
    fputs("\n", f);
}

void sdp_options_markdown(FILE *f)
{
    fputs(
        "# Options\n\n"
        "Generated by `slidedp options --markdown` from the registry in cli/options.c and the\n"
        "table of base/env.c; do not edit (tests/cli/test_options.sh compares them).\n\n"
        "Every recipe key, and the flag of `slidedp train` or `slidedp bench` that sets the same\n"
        "field; a flag overrides the recipe.  Exit status 2 for a usage error.\n\n",
        f);
    for (int pass = 0; pass < 2; pass++) {
        fputs(pass == 0 ? "## Recipe keys\n\n" : "\n## Command line only\n\n", f);
        fputs("| key | flag | commands | type | values | default | what |\n"
              "| --- | --- | --- | --- | --- | --- | --- |\n",
              f);
        for (int i = 0; i < sdp_noptions; i++)
            if ((sdp_options[i].key != NULL) == (pass == 0))
                print_row(f, &sdp_options[i]);
    }
    fputs("\n## Environment variables\n\n"
          "Read only through base/env.h.\n\n"
          "| name | values | what |\n"
          "| --- | --- | --- |\n",
          f);
    for (const struct sdp_env_var *v = sdp_env_vars; v->name; v++) {
        fputs("|", f);
        cell(f, v->name);
        cell(f, v->values);
        cell(f, v->help);
        fputs("\n", f);
    }
}

/* `slidedp options`: the registry as Markdown (docs/options.md), or one option a line, tab
 * separated (key, flag, commands), for tests/cli/test_options.sh. */
int sdp_cli_options(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--markdown")) {
        sdp_options_markdown(stdout);
        return SDP_EXIT_OK;
    }
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < sdp_noptions; i++) {
            const struct sdp_option *o = &sdp_options[i];
            char cmds[32] = "";
            cmds_text(o, cmds, sizeof(cmds));
            printf("%s\t%s\t%s\n", o->key ? o->key : "-", o->flag ? o->flag : "-",
                   o->flag ? cmds : "-");
        }
        return SDP_EXIT_OK;
    }
    fprintf(argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr,
            "usage: slidedp options --markdown | --list\n"
            "  --markdown  every option and environment variable as Markdown (docs/options.md)\n"
            "  --list      one option a line: recipe key, flag, commands (tab separated)\n");
    return argc == 2 && !strcmp(argv[1], "--help") ? SDP_EXIT_OK : SDP_EXIT_USAGE;
}
