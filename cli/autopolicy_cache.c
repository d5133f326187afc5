/* SPDX-License-Identifier: MIT */
/* train.policy auto's memory (cli/train_internal.h): a chosen plan as a small JSON file, kept in
 * the run directory (auto-plan.json: a resumed run keeps its plan) and in a cache keyed by what
 * the choice depends on (the model's shape, the batch, the budgets, the machine's identity), so a
 * second run of the same shape starts at once.  A file that cannot be read is reported and the
 * selection runs again; nothing here fails a run. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "cli/train_internal.h"
#include "formats/machine.h"

#define FORMAT "slidedp-auto-plan"

void sdp_train_auto_key(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    const struct sdp_model_cfg *m = &r->model;
    struct sdp_auto *a = &t->autop;
    struct sdp_machine here;
    const char *dir = sdp_env("SDP_CACHE_DIR"), *xdg = sdp_env("XDG_CACHE_HOME");
    const char *home = sdp_env("HOME");
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    memset(&here, 0, sizeof(here));
    sdp_machine_identify(&here);
    snprintf(a->key, sizeof(a->key),
             "v2 arch %d L %d C %d I %d NH %d NKV %d HD %d V %d tie %d | B %d T %d global %d | "
             "ranks %d gpus %d prec %d grad %d chunk %g | gpu %g host %g | %s | %s | %d cores | "
             "%d GPUs %s",
             (int)m->arch, m->num_layers, m->hidden_size, m->intermediate_size, m->num_heads,
             m->num_kv_heads, m->head_dim, m->vocab_size, m->tie_word_embeddings, r->micro_batch,
             r->seq_len, r->global_batch, r->ranks, r->gpus, (int)r->precision, r->grad_bf16,
             r->chunk_mib, r->gpu_memory_gib, r->host_memory_gib, here.host, here.cpu, here.cores,
             here.gpus, here.gpus > 0 ? here.gpu[0].name : "");
    for (const char *c = a->key; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    if (dir && dir[0])
        snprintf(a->cache_dir, sizeof(a->cache_dir), "%s", dir);
    else if (xdg && xdg[0])
        snprintf(a->cache_dir, sizeof(a->cache_dir), "%s/slidedp", xdg);
    else
        snprintf(a->cache_dir, sizeof(a->cache_dir), "%s/.cache/slidedp", home ? home : ".");
    snprintf(a->cache_path, sizeof(a->cache_path), "%s/plans/%016llx.json", a->cache_dir,
             (unsigned long long)h);
}

/* The placement named s, or -1. */
static int place_of(const char *s)
{
    for (int k = 0; s && k < SDP_AUTO_NPLACE; k++)
        if (!strcmp(s, sdp_auto_place_name[k]))
            return k;
    return -1;
}

/* The rows and figures of the file at path into t->autop; key: the cache's (NULL: any).
 * @return 0, -ENOENT (no file), -EINVAL (reported: the file and why) */
static int load(struct sdp_train *t, const char *path, const char *key)
{
    struct sdp_auto *a = &t->autop;
    json_error_t jerr;
    json_t *o, *rows;
    const char *fmt = NULL, *k = NULL;
    int n = 0, ok;
    if (access(path, F_OK) != 0)
        return -ENOENT;
    if (!(o = json_load_file(path, 0, &jerr))) {
        SDP_WARN("auto plan %s: line %d: %s: choosing again", path, jerr.line, jerr.text);
        return -EINVAL;
    }
    ok = json_unpack(o, "{s:s, s:s, s:o, s:F, s:F}", "format", &fmt, "key", &k, "rows", &rows,
                     "predicted_s", &a->pred_chosen_s, "default_predicted_s",
                     &a->pred_default_s) == 0 &&
         !strcmp(fmt, FORMAT) && json_is_array(rows) &&
         json_array_size(rows) <= SDP_AUTO_MAX_ROWS && (!key || !strcmp(k, key));
    for (size_t i = 0; ok && i < json_array_size(rows); i++) {
        const char *pl = NULL;
        struct sdp_auto_row *w = &a->rows[n];
        ok = json_unpack(json_array_get(rows, i), "{s:i, s:i, s:s}", "first", &w->first, "last",
                         &w->last, "placement", &pl) == 0 &&
             (w->place = place_of(pl)) >= 0 && w->first >= 1 && w->last >= w->first &&
             w->last <= t->r->model.num_layers;
        n += ok;
    }
    if (ok) { /* layers updated on the GPU (absent: none) */
        json_t *u = json_object_get(o, "gpu_update");
        int nu = json_is_integer(u) ? (int)json_integer_value(u) : 0;
        ok = nu >= 0 && nu <= t->r->model.num_layers;
        a->nrows = ok ? n : 0, a->gpu_update = ok ? nu : 0;
    }
    if (!ok)
        SDP_WARN("auto plan %s: not a plan of this run (%s): choosing again", path,
                 key && k && strcmp(k, key) ? "another key" : "malformed");
    json_decref(o);
    return ok ? 0 : -EINVAL;
}

int sdp_train_auto_load_cache(struct sdp_train *t)
{
    int rc = load(t, t->autop.cache_path, t->autop.key);
    if (!rc)
        SDP_INFO("auto: the plan chosen before for this shape and machine (%s)",
                 t->autop.cache_path);
    return rc;
}

int sdp_train_auto_load_run(struct sdp_train *t)
{
    char path[SDP_PATH_MAX + 32];
    int rc;
    snprintf(path, sizeof(path), "%s/auto-plan.json", t->r->output_dir);
    rc = t->r->output_dir[0] ? load(t, path, NULL) : -ENOENT;
    if (!rc)
        SDP_INFO("auto: resuming with the run's plan (%s)", path);
    return rc;
}

/* The file's text: the key, the rows, the figures.  NULL on ENOMEM. */
static char *text_of(const struct sdp_auto *a)
{
    json_t *rows = json_array(), *o;
    char *s;
    for (int i = 0; rows && i < a->nrows; i++)
        json_array_append_new(rows, json_pack("{s:i, s:i, s:s}", "first", a->rows[i].first, "last",
                                              a->rows[i].last, "placement",
                                              sdp_auto_place_name[a->rows[i].place]));
    o = json_pack("{s:s, s:i, s:s, s:o, s:i, s:f, s:f, s:f, s:s, s:f, s:f}", "format", FORMAT,
                  "version", 1, "key", a->key, "rows", rows, "gpu_update", a->gpu_update,
                  "predicted_s", a->pred_chosen_s, "default_predicted_s", a->pred_default_s,
                  "selection_s", a->select_s, "validated", a->verdict[0] ? a->verdict : "not yet",
                  "measured_s", a->meas_s[0], "default_measured_s", a->meas_s[1]);
    s = o ? json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    return s;
}

int sdp_train_auto_save(struct sdp_train *t, int cache)
{
    const struct sdp_auto *a = &t->autop;
    char path[SDP_PATH_MAX + 32], dir[SDP_PATH_MAX + 16];
    char *s = text_of(a);
    int rc = 0;
    if (!s)
        return sdp_err(-ENOMEM, "auto: the plan's file");
    if (t->r->output_dir[0]) { /* the run's: a failure is the run's */
        snprintf(path, sizeof(path), "%s/auto-plan.json", t->r->output_dir);
        rc = sdp_write_file_atomic(path, s, strlen(s));
    }
    snprintf(dir, sizeof(dir), "%s/plans", a->cache_dir);
    if (cache && a->cache_path[0] &&
        (sdp_mkdir_p(dir) || sdp_write_file_atomic(a->cache_path, s, strlen(s))))
        SDP_WARN("auto: the plan could not be cached in %s: the next run chooses again", dir);
    free(s);
    return rc;
}
