/* SPDX-License-Identifier: MIT */
/* `slidedp train`: the validation loss over data.val every train.eval_every steps, the model of
 * the best one in RUN/best (output.save_best), and the up-front refusal of data in which no
 * sequence has a target.  The validation runs the step's graph without an update
 * (sdp_graph_step with update 0), so the training's numbers do not change; it costs a forward and
 * a backward per batch of data.val.  Tests: tests/e2e/test_e2e_val.sh, test_e2e_sft_masked.sh. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/train_internal.h"

long long sdp_train_count_targets(const int32_t *targets, size_t n)
{
    long long valid = 0;
    for (size_t i = 0; i < n; i++)
        valid += targets[i] >= 0;
    return valid;
}

int sdp_train_check_targets(const struct sdp_train *t, const struct sdp_data *d, const char *key)
{
    const uint8_t *mask = d->shard.mask;
    uint64_t with = 0, T = (uint64_t)d->T;
    if (!mask)
        return SDP_EXIT_OK; /* every target counts */
    for (uint64_t i = 0; i < d->nseq && !with; i++)
        for (uint64_t j = i * T + 1; j <= i * T + T && !with; j++)
            with = mask[j];
    if (with)
        return SDP_EXIT_OK;
    sdp_err(-EINVAL,
            "%s %s: none of its %llu sequences of %d tokens has a training target (its loss mask "
            "masks every one): no step could learn from it",
            key, d->shard.path, (unsigned long long)d->nseq, d->T);
    sdp_hint("tokenize it with `slidedp tokenize --format chat` so that the replies are targets, "
             "or check the recipe %s names the right file",
             t->r->file);
    return SDP_EXIT_FAILURE;
}

/* data.val's ids within the model's vocabulary: its header's vocabulary, then every id (a header
 * may give 0, unknown). */
static int vocab_check(const struct sdp_recipe *r, const struct sdp_shard *s)
{
    uint64_t i = 0;
    uint32_t V = (uint32_t)r->model.vocab_size;
    while (i < s->count && s->tokens[i] < V)
        i++;
    if (s->vocab_size <= V && i == s->count)
        return 0;
    if (s->vocab_size > V)
        sdp_err(-EINVAL, "data.val %s was tokenized with a vocabulary of %u ids, the model has %u",
                r->data_val, s->vocab_size, V);
    else
        sdp_err(-EINVAL, "data.val %s: token %llu is %u, outside the model's vocabulary of %u",
                r->data_val, (unsigned long long)i, s->tokens[i], V);
    sdp_hint("tokenize the held-out data with the model's tokenizer, like data.train");
    return -EINVAL;
}

int sdp_train_eval_open(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    size_t n = (size_t)r->global_batch * r->seq_len;
    const struct sdp_shard *s = &t->val.shard;
    struct stat sv, st;

    t->best_loss = INFINITY;
    if (!r->data_val[0] || r->print_plan)
        return SDP_EXIT_OK;
    if (r->eval_every == 0)
        SDP_WARN("recipe %s: data.val is set but train.eval_every is 0: no validation loss",
                 r->file);
    if (sdp_data_open(&t->val, r->data_val, r->seq_len, r->seed, 0)) {
        sdp_hint("data.val of %s names it: a token shard (slidedp tokenize) of at least "
                 "data.seq_len + 1 tokens",
                 r->file);
        return SDP_EXIT_FAILURE;
    }
    if (vocab_check(r, s))
        return SDP_EXIT_FAILURE;
    if (sdp_data_set_docs(&t->val, r->doc_mask))
        return SDP_EXIT_USAGE;
    if (stat(r->data_val, &sv) == 0 && stat(r->data_train, &st) == 0 && sv.st_dev == st.st_dev &&
        sv.st_ino == st.st_ino)
        SDP_WARN("recipe %s: data.val is data.train (%s): the validation loss is not held out",
                 r->file, r->data_val);
    if (sdp_train_check_targets(t, &t->val, "data.val"))
        return SDP_EXIT_FAILURE;
    if (r->eval_every > 0)
        SDP_INFO("validation every %d steps and at the last: %s, %llu sequences in %llu batches "
                 "(a forward and a backward each)",
                 r->eval_every, r->data_val, (unsigned long long)t->val.nseq,
                 (unsigned long long)((t->val.nseq + r->global_batch - 1) / r->global_batch));
    t->val_ids = malloc(n * sizeof(*t->val_ids));
    t->val_targets = malloc(n * sizeof(*t->val_targets));
    t->val_segs = r->doc_mask ? malloc(n * sizeof(*t->val_segs)) : NULL;
    if (!t->val_ids || !t->val_targets || (r->doc_mask && !t->val_segs)) {
        sdp_err(-ENOMEM, "validation batch buffers");
        return SDP_EXIT_FAILURE;
    }
    return SDP_EXIT_OK;
}

void sdp_train_eval_close(struct sdp_train *t)
{
    free(t->val_ids);
    free(t->val_targets);
    free(t->val_segs);
    t->val_ids = t->val_targets = t->val_segs = NULL;
    if (t->val.order)
        sdp_data_close(&t->val);
}

/* Remove dir, a directory of plain files (RUN/best.tmp, RUN/best.old); absent is fine. */
static int remove_dir(const char *dir)
{
    char path[SDP_PATH_MAX + 300];
    struct dirent *e;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    return rmdir(dir) ? -errno : 0;
}

/* The model after step s, of validation loss x->val_loss, as RUN/best: written whole into
 * RUN/best.tmp (Hugging Face files and best.json: step and loss), then put in the place of the
 * previous best (kept as RUN/best.old until the rename).  @return an exit status */
static int save_best(struct sdp_train *t, int s, const struct sdp_step_extra *x)
{
    const char *out = t->r->output_dir;
    char dir[SDP_PATH_MAX + 16], tmp[SDP_PATH_MAX + 16], old[SDP_PATH_MAX + 16];
    char path[SDP_PATH_MAX + 32], line[160];
    int rc;
    snprintf(dir, sizeof(dir), "%s/best", out);
    snprintf(tmp, sizeof(tmp), "%s/best.tmp", out);
    snprintf(old, sizeof(old), "%s/best.old", out);
    snprintf(path, sizeof(path), "%s/best.json", tmp);
    snprintf(line, sizeof(line), "{\"step\": %d, \"val_loss\": %.17g, \"val_tokens\": %lld}\n",
             s + 1, x->val_loss, x->val_tokens);
    if ((rc = remove_dir(tmp)) != 0 || (rc = remove_dir(old)) != 0) {
        sdp_err(rc, "cannot clear %s or %s", tmp, old);
        return SDP_EXIT_FAILURE;
    }
    if (sdp_state_save_hf(&t->st, tmp, "float32") ||
        sdp_write_file_atomic(path, line, strlen(line)))
        return SDP_EXIT_FAILURE;
    if ((rename(dir, old) && errno != ENOENT) || rename(tmp, dir)) {
        sdp_err(-errno, "cannot move %s to %s", tmp, dir);
        return SDP_EXIT_FAILURE;
    }
    sdp_fsync_dir(out);
    remove_dir(old);
    t->best_loss = x->val_loss;
    t->best_step = s + 1;
    SDP_INFO("step %d: validation loss %.4f, the lowest so far: model written to %s", s + 1,
             x->val_loss, dir);
    return SDP_EXIT_OK;
}

void sdp_train_eval_resume(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    char dir[SDP_PATH_MAX + 16], old[SDP_PATH_MAX + 16], path[SDP_PATH_MAX + 32];
    json_t *o;
    /* several nodes: node 0's, which it tells the others (sdp_train_steps) */
    if (!r->save_best || !t->resuming || r->node > 0)
        return;
    snprintf(dir, sizeof(dir), "%s/best", r->output_dir);
    snprintf(old, sizeof(old), "%s/best.old", r->output_dir);
    if (access(dir, F_OK) != 0 && access(old, F_OK) == 0)
        rename(old, dir); /* stopped between the two renames of save_best */
    snprintf(path, sizeof(path), "%s/best.json", dir);
    if (access(path, F_OK) != 0)
        return; /* no validation yet */
    o = json_load_file(path, 0, NULL);
    if (o && json_is_number(json_object_get(o, "val_loss")) &&
        json_is_integer(json_object_get(o, "step"))) {
        t->best_loss = json_number_value(json_object_get(o, "val_loss"));
        t->best_step = (int)json_integer_value(json_object_get(o, "step"));
        SDP_INFO("best validation loss so far: %.4f at step %d (%s)", t->best_loss, t->best_step,
                 dir);
    } else {
        SDP_WARN("%s is not readable: the next validation replaces %s", path, dir);
    }
    json_decref(o);
}

int sdp_train_eval(struct sdp_train *t, int s, struct sdp_step_extra *x)
{
    const struct sdp_recipe *r = t->r;
    int gb = r->global_batch, T = r->seq_len, first, rows = sdp_train_nodes_rows(r, &first), any;
    size_t n = (size_t)rows * T;
    uint64_t left = t->val.nseq;
    double sum = 0.0;
    long long tokens = 0;

    if (r->eval_every == 0 || !t->val_ids || ((s + 1) % r->eval_every && s + 1 != r->steps))
        return SDP_EXIT_OK;
    sdp_data_seek(&t->val, 0, 0);
    while (left > 0) {
        struct sdp_step_result res;
        int k = left < (uint64_t)gb ? (int)left : gb;
        /* this node's rows of the batch, those past the last batch's k padded */
        int real = k - first < 0 ? 0 : k - first < rows ? k - first : rows;
        sdp_data_next_rows(&t->val, k, first, real, t->val_ids, t->val_targets, t->val_segs);
        for (size_t i = (size_t)real * T; i < n; i++) { /* the last batch's padding: no target */
            t->val_ids[i] = 0;
            t->val_targets[i] = -100;
            if (t->val_segs)
                t->val_segs[i] = 0; /* one document a padding row */
        }
        left -= (uint64_t)k;
        if (sdp_train_nodes_any(sdp_train_count_targets(t->val_targets, n), &any))
            return SDP_EXIT_FAILURE;
        if (!any)
            continue;
        /* numbered as the next step: the weights it reads are those the next step will read */
        if (sdp_graph_step_docs(t->g, s + 1, t->val_ids, t->val_targets, t->val_segs, 0.0, 0, &res))
            return SDP_EXIT_FAILURE;
        sum += res.loss * (double)res.valid_targets;
        tokens += res.valid_targets;
    }
    x->evaluated = 1;
    x->val_loss = sum / (double)tokens;
    x->val_tokens = tokens;
    if (r->save_best && x->val_loss < t->best_loss && r->node > 0) {
        t->best_loss = x->val_loss; /* several nodes: node 0 writes the run's best */
        return SDP_EXIT_OK;
    }
    if (r->save_best && x->val_loss < t->best_loss)
        return save_best(t, s, x);
    return SDP_EXIT_OK;
}
