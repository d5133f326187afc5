/* SPDX-License-Identifier: MIT */
/* `slidedp train`: the metrics file, one JSON object per step (docs/recipes-and-options.md), and
 * the check of every path the run writes against what it reads, made before StarPU starts.  A fresh
 * metrics file is written as FILE.tmp and renamed over FILE just before the first checkpoint (or at
 * the end), so a run that fails before leaves the old file; where there was none, it keeps the
 * lines of the steps that ran.  Tests: tests/e2e/test_e2e_paths.sh. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/train_internal.h"

/* A resumed run appends to its metrics file: drop the lines of steps after the checkpoint first
 * (the interrupted run may have gone further), atomically. */
static int trim_metrics(const char *path, int last_step)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL, line[4096];
    size_t len = 0, cap = 0;
    int rc;
    if (!f)
        return 0; /* nothing written yet */
    while (fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "\"step\":");
        size_t n = strlen(line);
        if (!p || atoi(p + 7) > last_step)
            continue;
        if (len + n + 1 > cap) {
            char *nb = realloc(buf, cap = 2 * (len + n + 1));
            if (!nb) {
                free(buf);
                fclose(f);
                return sdp_err(-ENOMEM, "metrics file %s", path);
            }
            buf = nb;
        }
        memcpy(buf + len, line, n);
        len += n;
    }
    fclose(f);
    rc = sdp_write_file_atomic(path, buf ? buf : "", len);
    free(buf);
    return rc;
}

/* FILE.tmp of a fresh metrics file until its first commit ("" once renamed or when appending);
 * one run per process. */
static char metrics_tmp[SDP_PATH_MAX + 8];

int sdp_train_check_paths(const struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    char ck[SDP_PATH_MAX + 16], fin[SDP_PATH_MAX + 16], done[SDP_PATH_MAX + 16],
        best[SDP_PATH_MAX + 16];
    int run = r->output_dir[0] != '\0';
    snprintf(ck, sizeof(ck), "%s/checkpoints", r->output_dir);
    snprintf(fin, sizeof(fin), "%s/final", r->output_dir);
    snprintf(done, sizeof(done), "%s/COMPLETE", r->output_dir);
    snprintf(best, sizeof(best), "%s/best", r->output_dir);
    const struct sdp_path_role in[] = {
        { r->file, "the recipe", SDP_PATH_FILE },
        { r->model_path, "the model directory", SDP_PATH_DIR },
        { r->tokenizer, "the tokenizer directory", SDP_PATH_DIR },
        { r->data_train, "the data file", SDP_PATH_FILE },
        { r->data_val, "the validation data file", SDP_PATH_FILE },
    };
    const struct sdp_path_role out[] = {
        { r->metrics, "the metrics file", SDP_PATH_FILE },
        { r->trace, "the --trace file", SDP_PATH_FILE },
        { r->events, "the --events file", SDP_PATH_FILE },
        { run ? r->output_dir : NULL, "the run directory", SDP_PATH_DIR },
        { run ? ck : NULL, "the run's checkpoint directory", SDP_PATH_DIR_ALL },
        { run ? fin : NULL, "the run's final directory", SDP_PATH_DIR_ALL },
        { run ? done : NULL, "the run's COMPLETE marker", SDP_PATH_FILE },
        { run && r->save_best ? best : NULL, "the run's best directory", SDP_PATH_DIR_ALL },
    };
    if (r->print_plan)
        return SDP_EXIT_OK; /* writes nothing */
    return sdp_paths_check(out, (int)(sizeof(out) / sizeof(out[0])), in,
                           (int)(sizeof(in) / sizeof(in[0])))
               ? SDP_EXIT_USAGE
               : SDP_EXIT_OK;
}

int sdp_train_metrics_open(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;

    if (r->metrics[0] && !r->print_plan) {
        const char *path = r->metrics;
        if (t->resuming && trim_metrics(path, t->info.step))
            return SDP_EXIT_FAILURE;
        metrics_tmp[0] = '\0';
        if (!t->resuming)
            snprintf(metrics_tmp, sizeof(metrics_tmp), "%s.tmp", path);
        t->mf = fopen(t->resuming ? path : metrics_tmp, t->resuming ? "a" : "w");
        if (!t->mf) {
            sdp_err(-errno, "cannot open metrics file %s", t->resuming ? path : metrics_tmp);
            return SDP_EXIT_FAILURE;
        }
    }
    return SDP_EXIT_OK;
}

int sdp_train_metrics_commit(struct sdp_train *t, int ok)
{
    const char *path = t->r->metrics;
    if (!t->mf || !metrics_tmp[0])
        return SDP_EXIT_OK;
    /* a failed run: an older file stays; with none, the steps that ran are kept, if any */
    struct stat sb;
    if (!ok && (stat(path, &sb) == 0 || errno != ENOENT || ftell(t->mf) <= 0)) {
        fclose(t->mf);
        t->mf = NULL;
        unlink(metrics_tmp);
        metrics_tmp[0] = '\0';
        return SDP_EXIT_OK;
    }
    /* the stream stays valid across the rename: later lines go to path */
    if (fflush(t->mf) != 0 || fsync(fileno(t->mf)) != 0 || rename(metrics_tmp, path) != 0) {
        sdp_err(-errno, "cannot move the metrics file %s to %s", metrics_tmp, path);
        return SDP_EXIT_FAILURE;
    }
    metrics_tmp[0] = '\0';
    sdp_fsync_parent(path);
    return SDP_EXIT_OK;
}

/* JSON number, or null when not finite (JSON has no NaN). */
static json_t *num(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

int sdp_train_metrics_write(FILE *mf, int step, const struct sdp_step_result *r, double lr,
                            double step_s, double elapsed, const struct sdp_step_extra *x)
{
    json_t *o = json_pack("{s:i, s:o, s:f, s:o, s:I, s:I, s:f, s:f, s:f}", "step", step + 1, "loss",
                          num(r->loss), "lr", lr, "grad_norm", num(r->grad_norm), "tokens",
                          (json_int_t)r->tokens, "valid_targets", (json_int_t)r->valid_targets,
                          "tokens_per_s", step_s > 0 ? r->tokens / step_s : 0.0, "step_s", step_s,
                          "elapsed_s", elapsed);
    char *s;
    int rc = 0;
    if (!o)
        return -ENOMEM;
    /* only where they apply: a step after batches without a target, a step with a validation */
    if (x->skipped_batches)
        json_object_set_new(o, "skipped_batches", json_integer(x->skipped_batches));
    if (r->experts_total > 0) { /* Qwen3-MoE: how much routed streaming can leave behind */
        json_object_set_new(o, "experts_routed", json_integer(r->experts_routed));
        json_object_set_new(o, "experts", json_integer(r->experts_total));
    }
    if (x->evaluated) {
        json_object_set_new(o, "val_loss", num(x->val_loss));
        json_object_set_new(o, "val_tokens", json_integer(x->val_tokens));
    }
    s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    if (!s)
        return -ENOMEM;
    if (fprintf(mf, "%s\n", s) < 0 || fflush(mf) != 0)
        rc = -EIO;
    free(s);
    return rc;
}
