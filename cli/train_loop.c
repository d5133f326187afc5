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
#include <unistd.h>

#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/train_internal.h"
#include "runtime/nodes.h"
#include "runtime/trace.h"

static void fmt_duration(char *buf, size_t len, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

static volatile sig_atomic_t stop_signal;

/* write(2) of a constant: what a signal handler may do (its result cannot be acted on) */
#define SAY(msg) (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1)

static void on_signal(int sig)
{
    if (sig == SIGINT && stop_signal) {
        SAY("\n[sdp][warn] second interrupt: exiting now, without a checkpoint\n");
        _exit(130);
    }
    if (!stop_signal)
        SAY("[sdp][info] stop requested: stopping at the end of this step (a second Ctrl-C "
            "exits at once)\n");
    stop_signal = sig;
}

/* SIGUSR1 (Slurm's warning before the time limit), SIGTERM (preemption, scancel) and SIGINT
 * (Ctrl-C): finish the step, checkpoint, exit.  A second SIGINT exits at once (130); the
 * checkpoint being written then stays a temporary, never a damaged checkpoint.  An ignored SIGINT
 * stays ignored.  Called again after starpu_init, whose SIGINT handler (STARPU_CATCH_SIGNALS)
 * would otherwise come first. */
void sdp_train_install_signals(void)
{
    static int first = 1, int_ignored;
    struct sigaction sa, old;
    if (first && sigaction(SIGINT, NULL, &old) == 0) /* nohup, or `cmd &` in a script */
        int_ignored = old.sa_handler == SIG_IGN;
    first = 0;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (int_ignored)
        sa.sa_handler = SIG_IGN;
    sigaction(SIGINT, &sa, NULL);
}

/* The run stops at a signal after step `done` (the steps done): with a run directory the
 * checkpoint of that step is saved and a rerun resumes (exit 0); without one nothing was saved
 * and the exit status says so (1). */
static int stopped(struct sdp_train *t, int done)
{
    char why[48];
    t->stopped = 1;
    if (stop_signal) /* else another node's signal (runs over several nodes) */
        snprintf(why, sizeof(why), "signal %d", (int)stop_signal);
    else
        snprintf(why, sizeof(why), "%s", "a signal to another node");
    if (t->ckdir[0]) {
        SDP_INFO("stopped by %s at step %d of %d; resume by running the same command", why, done,
                 t->r->steps);
        return SDP_EXIT_OK;
    }
    sdp_err(-EINTR, "stopped by %s at step %d of %d: nothing was saved", why, done, t->r->steps);
    sdp_hint("name a run directory (output.dir, --output) for a checkpoint at a stop signal");
    return SDP_EXIT_FAILURE;
}

/* The next batch with a target into ids/targets: a batch whose every target is masked (-100: a
 * long prompt in instruction data and a small batch) could not train, so it is passed over and
 * counted in *skipped.  Data without any target is refused up front (sdp_train_check_targets);
 * the bound here only keeps a bug from looping.  @return 0, -EINVAL or -EIO (logged) */
static int draw(struct sdp_train *t, int32_t *ids, int32_t *targets, int32_t *segs, int *skipped)
{
    const struct sdp_recipe *r = t->r;
    int first, rows = sdp_train_nodes_rows(r, &first), any;
    size_t n = (size_t)rows * r->seq_len;
    uint64_t bound = 2 * (t->data.nseq / (uint64_t)r->global_batch + 2);
    *skipped = 0;
    for (;;) { /* over several nodes each reads its rows, and they agree on a pass-over */
        sdp_data_next_rows(&t->data, r->global_batch, first, rows, ids, targets, segs);
        if (sdp_train_nodes_any(sdp_train_count_targets(targets, n), &any))
            return -EIO;
        if (any)
            return 0;
        if ((uint64_t)++ * skipped > bound)
            return sdp_err(-EINVAL, "data %s: %d batches in a row without a target", r->data_train,
                           *skipped);
    }
}

/* Step s's batch into t->ids/t->targets, read ahead by step s - 1 or now, and the next step's
 * batch read ahead and told to the graph (sdp_graph_set_next).  *pos: the data's position after
 * step s's batch, what a checkpoint of step s keeps (a resumed run passes over the same batches
 * without a target).  @return an exit status */
static int next_batch(struct sdp_train *t, int s, int *have_next, uint64_t pos[2])
{
    const struct sdp_recipe *r = t->r;
    if (*have_next) {
        int32_t *swap = t->ids;
        t->ids = t->next_ids;
        t->next_ids = swap;
        swap = t->targets;
        t->targets = t->next_targets;
        t->next_targets = swap;
        swap = t->segs;
        t->segs = t->next_segs;
        t->next_segs = swap;
        t->skipped = t->next_skipped;
    } else if (draw(t, t->ids, t->targets, t->segs, &t->skipped)) {
        return SDP_EXIT_FAILURE;
    }
    pos[0] = t->data.epoch;
    pos[1] = t->data.index;
    *have_next = s + 1 < r->steps;
    if (*have_next) {
        if (draw(t, t->next_ids, t->next_targets, t->next_segs, &t->next_skipped))
            return SDP_EXIT_FAILURE;
        if (!sdp_train_auto_hold_next(t, s)) /* a graph that may change after s is not told */
            sdp_graph_set_next(t->g, t->next_ids);
    }
    if (t->skipped > 0 && t->skipped_total == 0)
        SDP_WARN("step %d: %d batch(es) of %d sequences without a target (every target masked) "
                 "passed over; the step takes the next one.  Further ones: the metrics' "
                 "skipped_batches and a count at the end",
                 s + 1, t->skipped, r->global_batch);
    t->skipped_total += t->skipped;
    return SDP_EXIT_OK;
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
    if (r->node > 0) /* several nodes: node 0 writes the run's (the same state) */
        return SDP_EXIT_OK;
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

/* The progress line of step s on stdout (with the validation loss when there was one). */
static void progress(const struct sdp_train *t, int s, const struct sdp_step_result *res, double lr,
                     double step_s, double elapsed, const struct sdp_step_extra *x)
{
    const struct sdp_recipe *r = t->r;
    char el[32], eta[32], val[32] = "";
    if (r->quiet)
        return;
    fmt_duration(el, sizeof(el), elapsed);
    fmt_duration(eta, sizeof(eta), elapsed / (s + 1 - t->first) * (r->steps - s - 1));
    if (x->evaluated)
        snprintf(val, sizeof(val), "  val %.4f", x->val_loss);
#ifdef SDP_SIMGRID /* no codelet ran: the loss and norm are not the model's; the times are */
    printf("step %d/%d  loss -  lr %.3e  gnorm -  %.0f tok/s (simulated)  elapsed %s  eta %s\n",
           s + 1, r->steps, lr, res->tokens / step_s, el, eta);
    (void)val;
#else
    printf("step %d/%d  loss %.4f  lr %.3e  gnorm %.3f  %.0f tok/s  elapsed %s  eta %s%s\n", s + 1,
           r->steps, res->loss, lr, res->grad_norm, res->tokens / step_s, el, eta, val);
#endif
    fflush(stdout);
}

int sdp_train_steps(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    double t0, t_prev;
    int rc = SDP_EXIT_OK, have_next = 0;
    uint64_t pos[2];

    sdp_train_eval_resume(t);
    if (sdp_rt_nodes_bcast(&t->best_loss, sizeof(t->best_loss))) /* node 0's best */
        return SDP_EXIT_FAILURE;
    t0 = t_prev = sdp_cli_now_s();
    int stop0;
    if (sdp_train_nodes_stop(stop_signal != 0, &stop0) != SDP_EXIT_OK)
        return SDP_EXIT_FAILURE; /* several nodes stop before the first step together, or none */
    if (stop0) { /* before the first step: the state as it starts (a resume's is saved) */
        pos[0] = t->data.epoch;
        pos[1] = t->data.index;
        if (t->ckdir[0] && !t->resuming && checkpoint(t, t->first - 1, pos, t->last_loss))
            return SDP_EXIT_FAILURE;
        return stopped(t, t->first);
    }
    for (int s = t->first; s < r->steps && rc == SDP_EXIT_OK; s++) {
        struct sdp_step_result res;
        struct sdp_step_extra x = { 0 };
        double lr = sdp_recipe_lr_at(r, s), now, step_s;
        int stop;
        if ((rc = next_batch(t, s, &have_next, pos)) != SDP_EXIT_OK)
            break;
        if (sdp_graph_step_docs(t->g, s, t->ids, t->targets, t->segs, lr, 1, &res))
            return SDP_EXIT_FAILURE;
        sdp_trace_bus(s); /* the bus bytes since the previous step's return, when tracing */
        now = sdp_cli_now_s();
        step_s = now - t_prev;
        t_prev = now;
        if (s > t->first)
            t->timed_s += step_s, t->timed++;
        if ((rc = check_finite(t, s, &res)) != SDP_EXIT_OK ||
            (rc = sdp_train_auto_after_step(t, s, step_s)) != SDP_EXIT_OK)
            break;
        x.skipped_batches = t->skipped;
        if ((rc = sdp_train_eval(t, s, &x)) != SDP_EXIT_OK)
            break;
        if (x.evaluated) {
            t_prev = sdp_cli_now_s(); /* the next step's time leaves the validation out */
            if (have_next)            /* the validation's passes told the graph of no next step */
                sdp_graph_set_next(t->g, t->next_ids);
        }
        progress(t, s, &res, lr, step_s, now - t0, &x);
        if (t->mf && sdp_train_metrics_write(t->mf, s, &res, lr, step_s, now - t0, &x)) {
            sdp_err(-EIO, "cannot write the metrics file");
            return SDP_EXIT_FAILURE;
        }
        t->last_loss = res.loss;
        t->done = s + 1;
        if ((rc = sdp_train_nodes_stop(stop_signal != 0, &stop)) != SDP_EXIT_OK)
            break; /* several nodes stop at the same step */
        if (t->ckdir[0] && (stop || s + 1 == r->steps ||
                            (r->checkpoint_every > 0 && (s + 1) % r->checkpoint_every == 0)))
            rc = checkpoint(t, s, pos, res.loss);
        /* without a run directory, the metrics file is in place at the end (or the stop) */
        if (rc == SDP_EXIT_OK && !t->ckdir[0] && (stop || s + 1 == r->steps))
            rc = sdp_train_metrics_commit(t, 1);
        if (stop && rc == SDP_EXIT_OK)
            return stopped(t, s + 1);
    }
    if (t->skipped_total > 0)
        SDP_WARN("%lld batch(es) without a target passed over in this run (skipped_batches in the "
                 "metrics)",
                 t->skipped_total);
    return rc;
}
