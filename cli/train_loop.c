/* SPDX-License-Identifier: MIT */
/* `slidedp train`: the loop of steps.  One progress line per step on stdout, one JSON object per
 * step in the metrics file, a checkpoint every train.checkpoint_every steps, at the last step and
 * at a stop signal. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/train_internal.h"

static void fmt_duration(char *buf, size_t len, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

/* SIGUSR1 (Slurm's warning before the time limit) and SIGTERM (preemption, scancel): finish the
 * step, checkpoint, exit. */
void sdp_train_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Step s's batch into t->ids/t->targets, read ahead by step s - 1 or now, and the next step's
 * batch read ahead and told to the graph (sdp_graph_set_next).  *pos: the data's position after
 * step s's batch, what a checkpoint of step s keeps. */
static void next_batch(struct sdp_train *t, int s, int *have_next, uint64_t pos[2])
{
    const struct sdp_recipe *r = t->r;
    if (*have_next) {
        int32_t *swap = t->ids;
        t->ids = t->next_ids;
        t->next_ids = swap;
        swap = t->targets;
        t->targets = t->next_targets;
        t->next_targets = swap;
    } else {
        sdp_data_next(&t->data, r->global_batch, t->ids, t->targets);
    }
    pos[0] = t->data.epoch;
    pos[1] = t->data.index;
    *have_next = s + 1 < r->steps;
    if (*have_next) {
        sdp_data_next(&t->data, r->global_batch, t->next_ids, t->next_targets);
        sdp_graph_set_next(t->g, t->next_ids);
    }
}

/* A non-finite loss or gradient norm: an error, or a warning under train.on_nan: skip (the graph
 * skipped the update).  @return an exit status. */
static int check_finite(const struct sdp_train *t, int s, const struct sdp_step_result *res)
{
    const struct sdp_recipe *r = t->r;
    char where[64];
    if (isfinite(res->loss) && isfinite(res->grad_norm))
        return SDP_EXIT_OK;
    sdp_train_group_name(r, res->bad_group, where, sizeof(where));
    if (!r->skip_nonfinite) {
        sdp_err(-EINVAL,
                "step %d: loss %g, gradient norm %g (first non-finite gradient: %s): "
                "training diverged",
                s + 1, res->loss, res->grad_norm, where);
        sdp_hint("lower optimizer.lr, set optimizer.max_grad_norm, use train.precision: "
                 "fp32, or train.on_nan: skip; the checkpoints before this step are intact");
        return SDP_EXIT_FAILURE;
    }
    SDP_WARN("step %d: loss %g, gradient norm %g (first non-finite gradient: %s): update "
             "skipped (train.on_nan: skip)",
             s + 1, res->loss, res->grad_norm, where);
    return SDP_EXIT_OK;
}

/* The checkpoint of step s (s + 1 steps done), the data at pos.  @return an exit status. */
static int checkpoint(struct sdp_train *t, int s, const uint64_t pos[2], double loss)
{
    const struct sdp_recipe *r = t->r;
    /* the metrics file in place first: a resume from an older checkpoint trims it */
    if (sdp_train_metrics_commit(t, 1))
        return SDP_EXIT_FAILURE;
    memset(&t->info, 0, sizeof(t->info));
    t->info.step = s + 1;
    t->info.data_epoch = pos[0];
    t->info.data_index = pos[1];
    t->info.seed = r->seed;
    snprintf(t->info.fingerprint, sizeof(t->info.fingerprint), "%s", t->fp);
    t->info.last_loss = loss;
    return sdp_ckpt_save(t->ckdir, &t->st, &t->info, r->keep_checkpoints) ? SDP_EXIT_FAILURE
                                                                          : SDP_EXIT_OK;
}

int sdp_train_steps(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    double t0, t_prev;
    int rc = SDP_EXIT_OK, have_next = 0;
    uint64_t pos[2];

    t0 = t_prev = sdp_cli_now_s();
    for (int s = t->first; s < r->steps && rc == SDP_EXIT_OK; s++) {
        struct sdp_step_result res;
        double lr = sdp_recipe_lr_at(r, s), now, step_s, elapsed;
        char el[32], eta[32];
        int stop;
        next_batch(t, s, &have_next, pos);
        if (sdp_graph_step(t->g, s, t->ids, t->targets, lr, 1, &res))
            return SDP_EXIT_FAILURE;
        now = sdp_cli_now_s();
        step_s = now - t_prev;
        t_prev = now;
        elapsed = now - t0;
        if ((rc = check_finite(t, s, &res)) != SDP_EXIT_OK)
            break;
        fmt_duration(el, sizeof(el), elapsed);
        fmt_duration(eta, sizeof(eta), elapsed / (s + 1 - t->first) * (r->steps - s - 1));
        if (!r->quiet) {
            printf("step %d/%d  loss %.4f  lr %.3e  gnorm %.3f  %.0f tok/s  elapsed %s  eta %s\n",
                   s + 1, r->steps, res.loss, lr, res.grad_norm, res.tokens / step_s, el, eta);
            fflush(stdout);
        }
        if (t->mf && sdp_train_metrics_write(t->mf, s, &res, lr, step_s, elapsed)) {
            sdp_err(-EIO, "cannot write the metrics file");
            return SDP_EXIT_FAILURE;
        }
        t->last_loss = res.loss;
        stop = stop_signal != 0;
        if (t->ckdir[0] && (stop || s + 1 == r->steps ||
                            (r->checkpoint_every > 0 && (s + 1) % r->checkpoint_every == 0)))
            rc = checkpoint(t, s, pos, res.loss);
        /* without a run directory, the metrics file is in place at the end (or the stop) */
        if (rc == SDP_EXIT_OK && !t->ckdir[0] && (stop || s + 1 == r->steps))
            rc = sdp_train_metrics_commit(t, 1);
        if (stop && rc == SDP_EXIT_OK) {
            SDP_INFO("stopped by signal %d at step %d; resume by running the same command",
                     (int)stop_signal, s + 1);
            t->stopped = 1;
            break;
        }
    }
    return rc;
}
