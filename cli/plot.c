/* SPDX-License-Identifier: MIT */
/* `slidedp plot METRICS.jsonl`: draws the loss (left axis) and tokens/s (right axis) of a training
 * run's metrics file over the steps into a PNG, through gnuplot fed on a pipe (data inline).
 * Malformed lines are skipped with a warning naming file:line, and counted.  Must not touch the
 * metrics file; writes OUT.tmp and renames it, so a failed plot leaves no partial image.  Test:
 * tests/e2e/test_e2e_plot.sh. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli.h"
#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "base/env.h"

struct point {
    double step, loss, tokens_per_s, lr; /* tokens_per_s, lr: NAN when the line lacks them */
};

struct series {
    struct point *p;
    size_t n, cap;
    long nlines, nmalformed;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: slidedp plot METRICS.jsonl [options]\n"
               "\n"
               "Draw the loss (left axis) and tokens/s (right axis) of a metrics file written by\n"
               "`slidedp train --metrics` over the steps, as a PNG image (needs gnuplot).\n"
               "Malformed lines are skipped with a warning.\n"
               "\n"
               "options:\n"
               "  -o, --output FILE  the PNG to write (default loss.png)\n"
               "  --title T          title of the plot (default: the metrics file name)\n"
               "  -h, --help         this text\n"
               "\n"
               "exit status: 0 success, 1 runtime failure (no gnuplot, no valid line),\n"
               "2 usage error (bad option, unreadable metrics file)\n");
}

/* A number field; NAN when absent or not a number. */
static double number_field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static int blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return 0;
    return 1;
}

/* Parse one line into p; on failure fill why and return -EINVAL. */
static int parse_line(const char *line, struct point *p, char *why, size_t whylen)
{
    json_error_t jerr;
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &jerr);
    int rc = 0;
    if (!o) {
        snprintf(why, whylen, "not JSON (%s, column %d)", jerr.text, jerr.column);
        return -EINVAL;
    }
    if (!json_is_object(o)) {
        snprintf(why, whylen, "not a JSON object");
        rc = -EINVAL;
        goto out;
    }
    p->step = number_field(o, "step");
    p->loss = number_field(o, "loss");
    p->tokens_per_s = number_field(o, "tokens_per_s");
    p->lr = number_field(o, "lr");
    if (!isfinite(p->step) || !isfinite(p->loss)) {
        snprintf(why, whylen, "no finite number in \"%s\"", isfinite(p->step) ? "loss" : "step");
        rc = -EINVAL;
    }
out:
    json_decref(o);
    return rc;
}

static int read_metrics(const char *path, struct series *s)
{
    FILE *f = fopen(path, "r");
    char *line = NULL, why[256];
    size_t linecap = 0;
    int rc = 0;
    if (!f)
        return sdp_err(-errno, "cannot open metrics file %s", path);
    while (getline(&line, &linecap, f) >= 0) {
        struct point p;
        s->nlines++;
        if (blank(line))
            continue;
        if (parse_line(line, &p, why, sizeof(why))) {
            SDP_WARN("%s:%ld: %s; line skipped", path, s->nlines, why);
            s->nmalformed++;
            continue;
        }
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 256;
            struct point *np = realloc(s->p, cap * sizeof(*np));
            if (!np) {
                rc = sdp_err(-ENOMEM, "metrics file %s: %zu points", path, cap);
                break;
            }
            s->p = np;
            s->cap = cap;
        }
        s->p[s->n++] = p;
    }
    if (!rc && ferror(f))
        rc = sdp_err(-EIO, "cannot read metrics file %s", path);
    free(line);
    fclose(f);
    return rc;
}

/* Is an executable named prog on $PATH? */
static int on_path(const char *prog)
{
    const char *path = sdp_env("PATH");
    char buf[4400];
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)(len ? len : 1), len ? path : ".", prog);
        if (access(buf, X_OK) == 0)
            return 1;
        path = end ? end + 1 : NULL;
    }
    return 0;
}

/* A gnuplot single-quoted string: inside '...' only '' needs escaping. */
static void put_quoted(FILE *g, const char *s)
{
    fputc('\'', g);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', g);
        if (*s != '\n' && *s != '\r')
            fputc(*s, g);
    }
    fputc('\'', g);
}

static void write_script(FILE *g, const struct series *s, const char *out, const char *title)
{
    size_t ntps = 0;
    for (size_t i = 0; i < s->n; i++)
        ntps += isfinite(s->p[i].tokens_per_s) != 0;
    /* pngcairo when this gnuplot has it (antialiased), otherwise the libgd png terminal */
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "  set terminal pngcairo size 1000,600 noenhanced font 'sans,10'\n"
               "} else {\n"
               "  set terminal png size 1000,600 noenhanced\n"
               "}\n");
    fputs("set output ", g);
    put_quoted(g, out);
    fputs("\nset title ", g);
    put_quoted(g, title);
    fputs("\nset xlabel 'step'\nset ylabel 'loss'\nset ytics nomirror\nset grid\n"
          "set key outside bottom center horizontal\n"
          "set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05\n",
          g);
    if (s->p[s->n - 1].step - s->p[0].step <= 10) /* few steps: whole-step tics */
        fputs("set xtics 1\n", g);
    if (ntps) {
        fputs("set y2label 'tokens/s'\nset y2tics\nset y2range [0:*]\n", g);
        fputs("plot '-' using 1:2 axes x1y1 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#1f77b4' "
              "title 'loss', '-' using 1:2 axes x1y2 with linespoints lw 1 pt 5 ps 0.5 "
              "lc rgb '#ff7f0e' title 'tokens/s'\n",
              g);
    } else {
        fputs("plot '-' using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#1f77b4' "
              "title 'loss'\n",
              g);
    }
    for (size_t i = 0; i < s->n; i++)
        fprintf(g, "%.10g %.10g\n", s->p[i].step, s->p[i].loss);
    fputs("e\n", g);
    if (ntps) {
        for (size_t i = 0; i < s->n; i++)
            if (isfinite(s->p[i].tokens_per_s))
                fprintf(g, "%.10g %.10g\n", s->p[i].step, s->p[i].tokens_per_s);
        fputs("e\n", g);
    }
    fputs("unset output\n", g);
}

/* Run gnuplot on the script, into out.tmp, then rename it to out. */
static int draw(const struct series *s, const char *out, const char *title)
{
    char tmp[4200];
    struct sigaction ign = { .sa_handler = SIG_IGN }, old;
    struct stat sb;
    FILE *g;
    int status, werr;
    if (!on_path("gnuplot")) {
        sdp_err(-ENOENT, "gnuplot not found on PATH");
        sdp_hint("install it: apt-get install gnuplot-nox (Debian/Ubuntu), or your system's "
                 "gnuplot package");
        return -ENOENT;
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp", out);
    /* a gnuplot that dies early must turn into an error, not a SIGPIPE */
    sigaction(SIGPIPE, &ign, &old);
    fflush(NULL);
    g = popen("gnuplot", "w");
    if (!g) {
        sigaction(SIGPIPE, &old, NULL);
        return sdp_err(-errno, "cannot start gnuplot");
    }
    write_script(g, s, tmp, title);
    werr = ferror(g);
    status = pclose(g);
    sigaction(SIGPIPE, &old, NULL);
    if (werr || status != 0) {
        unlink(tmp);
        if (status == -1)
            return sdp_err(-ECHILD, "gnuplot: cannot get its exit status");
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
            sdp_err(-ENOENT, "gnuplot could not be started (exit status 127)");
            sdp_hint("install it: apt-get install gnuplot-nox");
            return -ENOENT;
        }
        return sdp_err(-EIO, "gnuplot failed (%s %d) while writing %s; its messages are above",
                       WIFEXITED(status) ? "exit status" : "signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), tmp);
    }
    if (stat(tmp, &sb) != 0 || sb.st_size == 0) {
        unlink(tmp);
        sdp_err(-EIO, "gnuplot wrote no image to %s", tmp);
        sdp_hint("check that this gnuplot has the pngcairo or png terminal: "
                 "echo 'set terminal' | gnuplot");
        return -EIO;
    }
    if (rename(tmp, out) != 0) {
        int rc = sdp_err(-errno, "cannot rename %s to %s", tmp, out);
        unlink(tmp);
        return rc;
    }
    return 0;
}

int sdp_cli_plot(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "output", required_argument, NULL, 'o' },
        { "title", required_argument, NULL, 't' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *out = "loss.png", *title = NULL, *path, *base;
    char deftitle[4400];
    struct series s = { 0 };
    double lr_max = NAN;
    int opt, rc;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'o':
            out = optarg;
            break;
        case 't':
            title = optarg;
            break;
        case 'h':
            usage(stdout);
            return SDP_EXIT_OK;
        default:
            usage(stderr);
            return SDP_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "slidedp plot: expected exactly one metrics file\n\n");
        usage(stderr);
        return SDP_EXIT_USAGE;
    }
    if (!out[0]) {
        fprintf(stderr, "slidedp plot: --output expects a file name\n");
        return SDP_EXIT_USAGE;
    }
    path = argv[optind];
    {
        const struct sdp_path_role in[] = { { path, "the metrics file", SDP_PATH_FILE } };
        const struct sdp_path_role png[] = { { out, "the --output file", SDP_PATH_FILE } };
        if (sdp_paths_check(png, 1, in, 1))
            return SDP_EXIT_USAGE;
    }
    rc = read_metrics(path, &s);
    if (rc) {
        free(s.p);
        return rc == -ENOENT || rc == -EACCES || rc == -EISDIR ? SDP_EXIT_USAGE : SDP_EXIT_FAILURE;
    }
    if (s.nmalformed)
        SDP_WARN("%s: skipped %ld malformed line(s) of %ld", path, s.nmalformed, s.nlines);
    if (s.n == 0) {
        sdp_err(-EINVAL, "metrics file %s: no valid line among %ld", path, s.nlines);
        sdp_hint("write one with `slidedp train RECIPE --metrics %s`", path);
        free(s.p);
        return SDP_EXIT_FAILURE;
    }
    for (size_t i = 0; i < s.n; i++)
        if (isfinite(s.p[i].lr) && !(s.p[i].lr <= lr_max))
            lr_max = s.p[i].lr;
    if (!title) {
        base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (isfinite(lr_max))
            snprintf(deftitle, sizeof(deftitle), "%s: %zu steps, peak lr %.3g", base, s.n, lr_max);
        else
            snprintf(deftitle, sizeof(deftitle), "%s: %zu steps", base, s.n);
        title = deftitle;
    }
    rc = draw(&s, out, title);
    if (!rc)
        SDP_INFO("wrote %s: %zu points (steps %.10g..%.10g, loss %.6g -> %.6g), %ld malformed "
                 "line(s) skipped",
                 out, s.n, s.p[0].step, s.p[s.n - 1].step, s.p[0].loss, s.p[s.n - 1].loss,
                 s.nmalformed);
    free(s.p);
    return rc ? SDP_EXIT_FAILURE : SDP_EXIT_OK;
}
