/* SPDX-License-Identifier: MIT */
/* `slidedp train`: the metrics file, one JSON object per step (docs/recipes-and-options.md). */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int sdp_train_metrics_open(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;

    if (r->metrics[0] && !r->print_plan) {
        const char *path = r->metrics;
        if (t->resuming && trim_metrics(path, t->info.step))
            return SDP_EXIT_FAILURE;
        t->mf = fopen(path, t->resuming ? "a" : "w");
        if (!t->mf) {
            sdp_err(-errno, "cannot open metrics file %s", path);
            return SDP_EXIT_FAILURE;
        }
    }
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
