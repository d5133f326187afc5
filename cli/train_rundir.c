/* SPDX-License-Identifier: MIT */
/* `slidedp train`: the run directory (RUN/checkpoints, RUN/final, RUN/COMPLETE, RUN/run.json,
 * RUN/train.lock): which checkpoint a run resumes from, and what a finished run leaves.
 *
 * A run directory belongs to one run.  RUN/train.lock is held (flock) for the whole run, so a
 * second run on the same directory is refused at once; the kernel drops the lock with the process,
 * even after kill -9.  RUN/run.json records the run's identity when it starts afresh and is checked
 * when it resumes.  A directory that holds a run is resumed, never silently restarted: --no-resume
 * is refused there, --force-new moves the old run to RUN/previous-N first. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/hfdir.h"
#include "cli/train_internal.h"
#include "runtime/peft.h"

/* What a run leaves in its directory, moved together by --force-new. */
static const char *const run_files[] = { "checkpoints",      "final", "COMPLETE", "run.json",
                                         "moe-routing.json", "best" };
#define N_RUN_FILES (sizeof(run_files) / sizeof(run_files[0]))

/* The recipe fields a resumed run must share with the checkpoint's run: they decide the data order
 * (the model configuration is compared by sdp_ckpt_load); micro, the effective micro-batch, only
 * the gradients' summation order, which may change with the rank count (fp_resumable). */
void sdp_train_fingerprint(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    snprintf(t->fp, sizeof(t->fp),
             "seq_len=%d global=%d micro=%d seed=%llu shuffle=%d data_tokens=%llu", r->seq_len,
             r->global_batch, r->micro_batch, r->seed, r->shuffle,
             (unsigned long long)t->data.shard.count);
}

/* The fingerprint a without its micro=N word, into out. */
static void fp_data(const char *a, char *out, size_t cap, int *micro)
{
    const char *m = strstr(a, " micro=");
    *micro = 0;
    if (!m) {
        snprintf(out, cap, "%s", a);
        return;
    }
    *micro = atoi(m + 7);
    snprintf(out, cap, "%.*s%s", (int)(m - a), a, strchr(m + 1, ' ') ? strchr(m + 1, ' ') : "");
}

/* Whether a run of fingerprint `ours` may resume one of `theirs`: the same data order.  Another
 * micro-batch (another rank count, or batch.micro) sums the same gradients in another order: the
 * run resumes, and says that its bits will differ from the uninterrupted run's. */
static int fp_resumable(const char *theirs, const char *ours, const char *what)
{
    char a[128], b[128];
    int ma, mb;
    fp_data(theirs, a, sizeof(a), &ma);
    fp_data(ours, b, sizeof(b), &mb);
    if (strcmp(a, b) != 0)
        return 0;
    static int warned;
    if (ma != mb && !warned++)
        SDP_WARN("%s: micro-batches of %d sequences where the run had %d (another rank count or "
                 "batch.micro): the same data, its gradients summed in another order, so the "
                 "losses will differ from an uninterrupted run's in their last digits",
                 what, mb, ma);
    return 1;
}

/* ---- the lock ---- */

static int lock_fd = -1;

/* At exit: empty the lock file (a later reader finds no stale pid), then let the lock go. */
static void unlock_at_exit(void)
{
    if (lock_fd >= 0 && ftruncate(lock_fd, 0) == 0)
        close(lock_fd);
    lock_fd = -1;
}

/* Take RUN/train.lock (flock, exclusive, not waiting) and write our pid, host and command in it
 * (where the file system cannot lock, warn and go on).
 * @return an exit status: 1 when another process holds it, naming its pid. */
static int rundir_lock(const char *dir, const char *recipe)
{
    char path[SDP_PATH_MAX + 16], other[SDP_PATH_MAX + 256] = "", mine[SDP_PATH_MAX + 256];
    char host[128] = "";
    ssize_t n;
    snprintf(path, sizeof(path), "%s/train.lock", dir);
    lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) {
        sdp_err(-errno, "cannot open the lock file %s", path);
        sdp_hint("the run directory must be writable; name another one with --output");
        return SDP_EXIT_FAILURE;
    }
    if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        n = pread(lock_fd, other, sizeof(other) - 1, 0);
        other[n > 0 ? n : 0] = '\0';
        other[strcspn(other, "\n")] = '\0';
        close(lock_fd);
        lock_fd = -1;
        if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) { /* some network file systems */
            SDP_WARN("cannot lock %s (%s): a second run on %s would not be noticed", path,
                     strerror(e), dir);
            return SDP_EXIT_OK;
        }
        if (e != EWOULDBLOCK)
            return sdp_err(-e, "cannot lock %s", path), SDP_EXIT_FAILURE;
        sdp_err(-EBUSY, "run directory %s is in use by another slidedp train (%s)", dir,
                other[0] ? other : "pid not yet written");
        sdp_hint("wait for that run to end or stop it (kill -TERM <pid> checkpoints it), or name "
                 "another directory with --output");
        return SDP_EXIT_FAILURE;
    }
    gethostname(host, sizeof(host) - 1);
    n = snprintf(mine, sizeof(mine), "pid %ld on %s: slidedp train %s\n", (long)getpid(), host,
                 recipe);
    n = n < (ssize_t)sizeof(mine) ? n : (ssize_t)sizeof(mine) - 1;
    if (ftruncate(lock_fd, 0) != 0 || pwrite(lock_fd, mine, (size_t)n, 0) != n)
        SDP_WARN("cannot write the pid into %s: %s", path, strerror(errno));
    atexit(unlock_at_exit);
    return SDP_EXIT_OK;
}

/* ---- the run's identity: RUN/run.json ---- */

/* The model the run trains: its shape and where its weights came from. */
static void model_identity(const struct sdp_recipe *r, char *out, size_t len)
{
    const struct sdp_model_cfg *m = &r->model;
    snprintf(out, len, "%s vocab=%d hidden=%d intermediate=%d layers=%d heads=%d/%d from %s",
             sdp_model_arch_name(m->arch), m->vocab_size, m->hidden_size, m->intermediate_size,
             m->num_layers, m->num_heads, m->num_kv_heads,
             r->model_path[0] ? r->model_path : "random init");
}

/* RUN/run.json of a run starting afresh, atomically. */
static int identity_write(const struct sdp_train *t, const char *path)
{
    char model[SDP_PATH_MAX + 160], when[32];
    time_t now = time(NULL);
    json_t *o;
    char *s;
    int rc;
    model_identity(t->r, model, sizeof(model));
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    o = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s}", "fingerprint", t->fp, "model", model, "recipe",
                  t->r->file, "data", t->r->data_train, "steps", t->r->steps, "started", when);
    s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    json_decref(o);
    if (!s)
        return sdp_err(-ENOMEM, "%s", path);
    rc = sdp_write_file_atomic(path, s, strlen(s));
    free(s);
    return rc;
}

/* RUN/run.json against this run: the fingerprint and the model must match.  @return 0, 1 when
 * the file is missing (a directory of an earlier version: adopted), or -EINVAL (logged). */
static int identity_check(const struct sdp_train *t, const char *path)
{
    char model[SDP_PATH_MAX + 160];
    json_error_t jerr;
    json_t *o = json_load_file(path, 0, &jerr);
    const char *fp, *mod;
    int rc = 0;
    if (!o && access(path, F_OK) != 0)
        return 1;
    model_identity(t->r, model, sizeof(model));
    fp = json_string_value(json_object_get(o, "fingerprint"));
    mod = json_string_value(json_object_get(o, "model"));
    if (!fp || !mod) {
        rc = sdp_err(-EINVAL, "%s is not a run record (line %d: %s)", path, jerr.line, jerr.text);
        sdp_hint("it is written when a run starts afresh: pass --force-new to move that run to "
                 "%s/previous-N and start afresh, or remove the file to resume its checkpoints",
                 t->r->output_dir);
        json_decref(o);
        return rc;
    } else if (!fp_resumable(fp, t->fp, path))
        rc = sdp_err(-EINVAL, "%s: the run directory belongs to a run with %s; %s has %s", path, fp,
                     t->r->file, t->fp);
    else if (strcmp(mod, model) != 0)
        rc = sdp_err(-EINVAL, "%s: the run directory belongs to a run of %s; %s trains %s", path,
                     mod, t->r->file, model);
    if (rc)
        sdp_hint("restore those settings to resume that run, name another directory with --output, "
                 "or pass --force-new to move that run to %s/previous-N and start afresh",
                 t->r->output_dir);
    json_decref(o);
    return rc;
}

/* ---- what a directory holds ---- */

static int exists(const char *dir, const char *name)
{
    char path[SDP_PATH_MAX + 64];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return lstat(path, &sb) == 0;
}

/* The first sign of a run in dir (a checkpoint, final/, COMPLETE, run.json, best/), or NULL. */
static const char *rundir_used(const char *dir, const char *ckdir)
{
    if (sdp_ckpt_count(ckdir) > 0)
        return "checkpoints/";
    for (size_t i = 1; i < N_RUN_FILES; i++)
        if (exists(dir, run_files[i]))
            return run_files[i];
    return NULL;
}

/* --force-new: move the run files of dir, and the metrics file when it lies in dir, into the first
 * free dir/previous-N, never deleting. */
static int move_aside(const char *dir, const char *metrics)
{
    size_t dl = strlen(dir);
    const char *mname = NULL;
    char prev[SDP_PATH_MAX + 32], from[SDP_PATH_MAX + 64], to[SDP_PATH_MAX + 96];
    int n = 1;
    for (;; n++) {
        snprintf(prev, sizeof(prev), "%s/previous-%d", dir, n);
        if (mkdir(prev, 0777) == 0)
            break;
        if (errno != EEXIST)
            return sdp_err(-errno, "cannot create %s", prev);
    }
    for (size_t i = 0; i < N_RUN_FILES; i++) {
        if (!exists(dir, run_files[i]))
            continue;
        snprintf(from, sizeof(from), "%s/%s", dir, run_files[i]);
        snprintf(to, sizeof(to), "%s/%s", prev, run_files[i]);
        if (rename(from, to) != 0)
            return sdp_err(-errno, "cannot move %s to %s", from, to);
    }
    if (strncmp(metrics, dir, dl) == 0 && metrics[dl] == '/' && !strchr(metrics + dl + 1, '/'))
        mname = metrics + dl + 1;
    if (mname && exists(dir, mname)) {
        snprintf(to, sizeof(to), "%s/%s", prev, mname);
        if (rename(metrics, to) != 0)
            return sdp_err(-errno, "cannot move %s to %s", metrics, to);
    }
    if (sdp_fsync_dir(dir) || sdp_fsync_dir(prev))
        SDP_WARN("cannot sync %s", dir);
    SDP_INFO("--force-new: the previous run of %s moved to %s", dir, prev);
    return 0;
}

/* The names of the checkpoint files of ckdir, ", "-separated, into out (cut at len). */
static void list_checkpoints(const char *ckdir, char *out, size_t len)
{
    DIR *d = opendir(ckdir);
    struct dirent *e;
    size_t n = 0;
    out[0] = '\0';
    while (d && (e = readdir(d)) && n + 1 < len) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "step-", 5) != 0 || l < 8 || strcmp(e->d_name + l - 8, ".sdpckpt"))
            continue;
        n += (size_t)snprintf(out + n, len - n, "%s%s", n ? ", " : "", e->d_name);
    }
    if (d)
        closedir(d);
}

/* ---- resuming ---- */

/* The newest valid checkpoint of t->ckdir into t->ckpath and t->info, checked against the recipe.
 * @return an exit status; *found 0 when the directory holds no checkpoint file at all. */
static int find_checkpoint(struct sdp_train *t, int *found)
{
    const struct sdp_recipe *r = t->r;
    char names[512];
    int rc = sdp_ckpt_latest(t->ckdir, t->ckpath, sizeof(t->ckpath)), n;
    *found = rc == 0;
    if (rc == -ENOENT && (n = sdp_ckpt_count(t->ckdir)) > 0) {
        list_checkpoints(t->ckdir, names, sizeof(names));
        sdp_err(-EINVAL,
                "every checkpoint of %s failed validation (%d: %s): nothing to resume from",
                t->ckdir, n, names);
        sdp_hint("the errors above say what is wrong with each; pass --force-new to move them to "
                 "%s/previous-N and start afresh from step 0",
                 r->output_dir);
        return SDP_EXIT_FAILURE;
    }
    if (rc == -ENOENT)
        return SDP_EXIT_OK;
    if (rc || sdp_ckpt_read_info(t->ckpath, NULL, &t->info))
        return SDP_EXIT_FAILURE;
    if (!fp_resumable(t->info.fingerprint, t->fp, t->ckpath)) {
        sdp_err(-EINVAL, "%s was written by a run with %s; %s has %s", t->ckpath,
                t->info.fingerprint, r->file, t->fp);
        sdp_hint("these settings change the data order or the numerics: restore them, use "
                 "another output directory, or pass --force-new to start afresh");
        return SDP_EXIT_FAILURE;
    }
    if (t->info.step > r->steps) {
        sdp_err(-EINVAL, "%s is of step %d, beyond train.steps = %d of %s", t->ckpath, t->info.step,
                r->steps, r->file);
        sdp_hint("set train.steps (--steps) to %d or more to resume that run, or pass --force-new "
                 "to move it aside and start afresh",
                 t->info.step);
        return SDP_EXIT_FAILURE;
    }
    return SDP_EXIT_OK;
}

/* A directory that holds a run: resume it (the record and the newest valid checkpoint must match
 * this run), or start it again where it never saved a checkpoint.  @return an exit status. */
static int resume(struct sdp_train *t, const char *record)
{
    const struct sdp_recipe *r = t->r;
    int rc, found, adopted;
    if ((adopted = identity_check(t, record)) < 0 || (rc = find_checkpoint(t, &found)) != 0)
        return SDP_EXIT_FAILURE;
    if (!found && (exists(r->output_dir, "final") || exists(r->output_dir, "COMPLETE"))) {
        sdp_err(-ENOENT, "%s holds a finished run (final/, COMPLETE) but no checkpoint to resume",
                r->output_dir);
        sdp_hint("pass --force-new to move that run to %s/previous-N and start afresh, or name "
                 "another directory with --output",
                 r->output_dir);
        return SDP_EXIT_FAILURE;
    }
    if (adopted && identity_write(t, record)) /* a run directory of an earlier version */
        return SDP_EXIT_FAILURE;
    t->resuming = found;
    return SDP_EXIT_OK;
}

int sdp_train_rundir_open(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    const char *dir = r->output_dir, *used;
    char record[SDP_PATH_MAX + 16];

    if (!dir[0] || r->print_plan) /* --print-plan leaves the run directory alone */
        return SDP_EXIT_OK;
    if (sdp_mkdir_p(dir)) {
        sdp_hint("output.dir (--output) names the run directory: a directory, created if missing");
        return SDP_EXIT_FAILURE;
    }
    if (rundir_lock(dir, r->file))
        return SDP_EXIT_FAILURE;
    snprintf(t->ckdir, sizeof(t->ckdir), "%s/checkpoints", dir);
    snprintf(record, sizeof(record), "%s/run.json", dir);
    sdp_train_fingerprint(t);
    used = rundir_used(dir, t->ckdir);
    if (used && r->force_new) {
        if (move_aside(dir, r->metrics))
            return SDP_EXIT_FAILURE;
        used = NULL;
    }
    if (used && r->no_resume) {
        sdp_err(-EEXIST, "--no-resume: %s holds a run (%s); a run directory holds one run", dir,
                used);
        sdp_hint("pass --force-new to move that run to %s/previous-N and start afresh, drop "
                 "--no-resume to resume it, or name another directory with --output",
                 dir);
        return SDP_EXIT_USAGE;
    }
    if (used ? resume(t, record) : identity_write(t, record))
        return SDP_EXIT_FAILURE;
    /* where the checkpoints go, found wrong now rather than at the first checkpoint */
    if (sdp_mkdir_p(t->ckdir)) {
        sdp_hint("%s must be a directory the run can write", t->ckdir);
        return SDP_EXIT_FAILURE;
    }
    return SDP_EXIT_OK;
}

int sdp_train_rundir_finish(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    char dir[SDP_PATH_MAX + 16], done[SDP_PATH_MAX + 16], line[128];

    if (!r->output_dir[0])
        return SDP_EXIT_OK;
    snprintf(dir, sizeof(dir), "%s/final", r->output_dir);
    snprintf(done, sizeof(done), "%s/COMPLETE", r->output_dir);
    if (t->resuming && t->first == r->steps && access(done, F_OK) == 0 &&
        exists(dir, r->lora.rank > 0 ? "adapter_model.safetensors" : "model.safetensors")) {
        SDP_INFO("the run of %s was already complete: %s unchanged", r->output_dir, dir);
        return SDP_EXIT_OK;
    }
    /* COMPLETE describes final/: it goes first, so a failure in between leaves neither claim */
    if (unlink(done) != 0 && errno != ENOENT) {
        sdp_err(-errno, "cannot remove %s", done);
        return SDP_EXIT_FAILURE;
    }
    /* LoRA: the adapter in PEFT's format (runtime/peft.h); else the model */
    if ((r->lora.rank > 0
             ? sdp_state_save_peft(&t->st, dir, r->model_path[0] ? r->model_path : NULL)
             : sdp_state_save_hf(&t->st, dir, "float32")) ||
        (r->tokenizer[0] && sdp_hfdir_add_tokenizer(r->tokenizer, dir, &r->model)))
        return SDP_EXIT_FAILURE;
    SDP_INFO("%s written to %s", r->lora.rank > 0 ? "adapter" : "model", dir);
    snprintf(line, sizeof(line), "step %d loss %.10g\n", r->steps, t->last_loss);
    return sdp_write_file_atomic(done, line, strlen(line)) ? SDP_EXIT_FAILURE : SDP_EXIT_OK;
}
