/* SPDX-License-Identifier: MIT */
/* `slidedp train`: the run directory (RUN/checkpoints, the metrics file, RUN/final, RUN/COMPLETE):
 * which checkpoint a run resumes from, and what a finished run leaves. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/hfdir.h"
#include "cli/train_internal.h"

/* The recipe fields a resumed run must share with the checkpoint's run: they decide the data order
 * and the gradient summation order (the model configuration is compared by sdp_ckpt_load). */
void sdp_train_fingerprint(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    snprintf(t->fp, sizeof(t->fp),
             "seq_len=%d global=%d micro=%d seed=%llu shuffle=%d data_tokens=%llu", r->seq_len,
             r->global_batch, r->micro_batch, r->seed, r->shuffle,
             (unsigned long long)t->data.shard.count);
}

int sdp_train_rundir_open(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;

    if (r->output_dir[0] && !r->print_plan) {
        if (sdp_mkdir_p(r->output_dir))
            return SDP_EXIT_FAILURE;
        snprintf(t->ckdir, sizeof(t->ckdir), "%s/checkpoints", r->output_dir);
        if (!r->no_resume && sdp_ckpt_latest(t->ckdir, t->ckpath, sizeof(t->ckpath)) == 0) {
            if (sdp_ckpt_read_info(t->ckpath, NULL, &t->info))
                return SDP_EXIT_FAILURE;
            sdp_train_fingerprint(t);
            if (strcmp(t->info.fingerprint, t->fp) != 0) {
                sdp_err(-EINVAL, "%s was written by a run with %s; %s has %s", t->ckpath,
                        t->info.fingerprint, r->file, t->fp);
                sdp_hint("these settings change the data order or the numerics: restore them, use "
                         "another output directory, or pass --no-resume to start afresh");
                return SDP_EXIT_FAILURE;
            }
            t->resuming = 1;
        }
    }
    return SDP_EXIT_OK;
}

int sdp_train_rundir_finish(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    char dir[SDP_PATH_MAX + 16], line[128];

    if (!r->output_dir[0])
        return SDP_EXIT_OK;
    snprintf(dir, sizeof(dir), "%s/final", r->output_dir);
    if (sdp_state_save_hf(&t->st, dir, "float32") ||
        (r->tokenizer[0] && sdp_hfdir_add_tokenizer(r->tokenizer, dir, &r->model)))
        return SDP_EXIT_FAILURE;
    SDP_INFO("model written to %s", dir);
    snprintf(dir, sizeof(dir), "%s/COMPLETE", r->output_dir);
    snprintf(line, sizeof(line), "step %d loss %.10g\n", r->steps, t->last_loss);
    return sdp_write_file_atomic(dir, line, strlen(line)) ? SDP_EXIT_FAILURE : SDP_EXIT_OK;
}
