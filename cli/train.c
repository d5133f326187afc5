/* SPDX-License-Identifier: MIT */
/* `slidedp train RECIPE.yaml`: load and check everything (recipe, model config and weights, data,
 * memory budget) before starting StarPU, then run the steps, printing one progress line per step on
 * stdout and one JSON object per step to the metrics file, and finally write the trained model as a
 * Hugging Face directory when the recipe names an output directory.  Tests: tests/e2e/. */
#include "config.h"

#include <signal.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codelets/sdp_tasks.h"
#include "cli/recipe.h"
#include "graph/plan.h"
#include "graph/step.h"
#include "policies/sdp_policies.h"
#include "runtime/ckpt.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "formats/data.h"
#include "base/fsutil.h"
#include "formats/hfconfig.h"
#include "runtime/init.h"
#include "base/sdp_log.h"
#include "base/env.h"
#include "runtime/trace.h"
#include "runtime/state.h"

static const char usage_head[] =
    "usage: slidedp train RECIPE.yaml [options]\n"
    "\n"
    "Train the model of RECIPE.yaml (docs/options.md lists its keys).  A flag overrides the\n"
    "recipe key named after it.\n";

static const char usage_tail[] =
    "\n"
    "SIGUSR1 or SIGTERM: checkpoint at the next step boundary and exit 0; running the same\n"
    "command again resumes.  Under Slurm, SLURM_JOB_ID names the default run directory\n"
    "(runs/<recipe>-<job id>) and SLURM_CPUS_PER_TASK the CPU workers.\n"
    "\n"
    "exit status: 0 success, 1 runtime failure, 2 usage error\n";

static void fmt_duration(char *buf, size_t len, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

/* JSON number, or null when not finite (JSON has no NaN). */
static json_t *num(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

static int write_metrics(FILE *mf, int step, const struct sdp_step_result *r, double lr,
                         double step_s, double elapsed)
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
    s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    if (!s)
        return -ENOMEM;
    if (fprintf(mf, "%s\n", s) < 0 || fflush(mf) != 0)
        rc = -EIO;
    free(s);
    return rc;
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

/* SIGUSR1 (Slurm's warning before the time limit) and SIGTERM (preemption, scancel): finish the
 * step, checkpoint, exit. */
static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The recipe fields a resumed run must share with the checkpoint's run: they decide the data order
 * and the gradient summation order (the model configuration is compared by sdp_ckpt_load). */
/* The run's plan: the knobs of gc (sdp_plan_init), then the recipe's plan: rows in order, checked
 * as the graph will check it.  0, or an error logged with the recipe's line. */
static int plan_make(const struct sdp_recipe *r, const struct sdp_state *st,
                     const struct sdp_graph_conf *gc, struct sdp_plan *p)
{
    int rc = sdp_plan_init(p, st, gc);
    for (int i = 0; !rc && i < r->nplan; i++) {
        const struct sdp_recipe_plan_row *row = &r->plan[i];
        int first = row->first < 0 ? 1 : row->first;
        int last = row->last < 0 ? p->nlayers : row->last;
        rc = sdp_plan_set(p, st, first, last, row->key, row->value);
        if (rc)
            SDP_ERROR("recipe %s line %d: the plan refuses %s: %s for layers %d-%d", r->file,
                      row->line, row->key, row->value, first, last);
    }
    if (!rc && (rc = sdp_plan_check(p, st, gc)) != 0 && r->nplan)
        SDP_ERROR("recipe %s: the plan its `plan:` rows make cannot be built", r->file);
    if (rc)
        sdp_plan_free(p);
    return rc;
}

static void fingerprint(const struct sdp_recipe *r, const struct sdp_data *d, char *out, size_t len)
{
    snprintf(out, len, "seq_len=%d global=%d micro=%d seed=%llu shuffle=%d data_tokens=%llu",
             r->seq_len, r->global_batch, r->micro_batch, r->seed, r->shuffle,
             (unsigned long long)d->shard.count);
}

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

/* Slurm: the job id names the default run directory (a requeued job keeps its id, so it resumes),
 * and the CPUs of the task set the CPU workers. */
static void apply_slurm(struct sdp_recipe *r)
{
    const char *job = sdp_env("SLURM_JOB_ID"), *cpus = sdp_env("SLURM_CPUS_PER_TASK");
    if (!job)
        return;
    if (!r->output_dir[0]) {
        const char *base = strrchr(r->file, '/');
        char name[256];
        snprintf(name, sizeof(name), "%.200s", base ? base + 1 : r->file);
        if (strlen(name) > 5 && !strcmp(name + strlen(name) - 5, ".yaml"))
            name[strlen(name) - 5] = '\0';
        snprintf(r->output_dir, sizeof(r->output_dir), "runs/%s-%.64s", name, job);
    }
    if (r->cpus == 0 && cpus && atoi(cpus) > 0)
        r->cpus = atoi(cpus);
    SDP_INFO("Slurm job %s: run directory %s, %d CPU workers", job, r->output_dir, r->cpus);
}

/* "embedding", "decoder layer 3", "head" for a parameter group (see models/sdp_models.h). */
static void group_name(const struct sdp_recipe *r, int g, char *out, size_t len)
{
    if (g < 0)
        snprintf(out, len, "none, the loss only");
    else if (g == 0)
        snprintf(out, len, "embedding");
    else if (g <= r->model.num_layers)
        snprintf(out, len, "decoder layer %d", g - 1);
    else
        snprintf(out, len, "final norm / LM head");
}

/* The GPU window must fit: the configured limit within the device, the run's minimum within both.
 */
static int check_gpu_memory(const struct sdp_recipe *r, enum sdp_dtype work_dt)
{
    struct sdp_graph_conf gc = { .micro_batch = r->micro_batch,
                                 .seq_len = r->seq_len,
                                 .recompute = r->recompute,
                                 .offload_inputs = r->act_offload,
                                 .keep_last = r->keep_last,
                                 .keep_mlp = r->keep_mlp };
    unsigned long long total = sdp_rt_gpu_mem_total(0);
    unsigned long long limit =
        r->gpu_memory_gib > 0 ? (unsigned long long)(r->gpu_memory_gib * 1073741824.0) : total;
    unsigned long long need = sdp_graph_gpu_bytes_min(&r->model, work_dt, &gc);
    if (total > 0 && limit > total) {
        sdp_err(-EINVAL, "%s: train.gpu_memory_gib = %.1f GiB exceeds the GPU's %.1f GiB", r->file,
                r->gpu_memory_gib, total / 1073741824.0);
        sdp_hint("lower train.gpu_memory_gib, or set it to 0 for the whole GPU");
        return -EINVAL;
    }
    if (limit > 0 && need > limit) {
        sdp_err(-ENOMEM,
                "%s: the run needs at least %.1f GiB of GPU memory (two layers of weights and "
                "gradients, one micro-batch of activations), the %s allows %.1f GiB",
                r->file, need / 1073741824.0, r->gpu_memory_gib > 0 ? "recipe" : "GPU",
                limit / 1073741824.0);
        if (r->keep_mlp > 0)
            sdp_hint("lower train.keep_mlp (%d layers keep their MLP's inputs on the GPU), "
                     "batch.micro or data.seq_len, or raise train.gpu_memory_gib",
                     r->keep_mlp);
        else
            sdp_hint("lower batch.micro or data.seq_len, set train.keep_last: 0 or "
                     "train.activations: offload, or raise train.gpu_memory_gib");
        return -ENOMEM;
    }
    return 0;
}

static int run(struct sdp_recipe *r)
{
    struct sdp_data data = { 0 };
    struct sdp_state st = { 0 };
    sdp_graph_t *g = NULL;
    struct sdp_plan plan;
    struct sdp_rt_conf rc_conf = { 0 };
    struct sdp_graph_conf gc = { 0 };
    void *policy = NULL;
    FILE *mf = NULL;
    int32_t *ids = NULL, *targets = NULL, *next_ids = NULL, *next_targets = NULL;
    enum sdp_dtype work_dt, grad_dt;
    unsigned long long need, avail, state_bytes;
    double t0, t_prev, elapsed;
    int rc, started = 0, state_made = 0, resuming = 0, first = 0, stopped = 0;
    struct sdp_ckpt_info info = { 0 };
    char ckdir[SDP_PATH_MAX + 16] = "", ckpath[SDP_PATH_MAX + 64], fp[128];
    double last_loss = NAN;
    unsigned char *routes = NULL; /* gradient route per parameter group */

    /* a stop request before the first step is honoured there (after a checkpoint of the state) */
    install_signals();

    /* ---- everything that can be checked before StarPU starts ---- */
    if (r->model_path[0]) {
        rc = sdp_hfconfig_load(r->model_path, &r->model);
        if (!rc)
            rc = sdp_state_check_hf(&r->model, r->model_path);
        if (rc)
            return SDP_EXIT_FAILURE;
    }
    if (sdp_recipe_validate(r))
        return SDP_EXIT_USAGE;
    routes = calloc((size_t)sdp_model_num_groups(&r->model), 1);
    if (!routes)
        return SDP_EXIT_FAILURE;
    if (sdp_recipe_grad_routes(r, sdp_model_num_groups(&r->model), routes)) {
        free(routes);
        return SDP_EXIT_USAGE;
    }
    if (r->ranks > 1) {
        /* every rank takes global / ranks sequences, in micro-batches of at most batch.micro */
        int per = r->global_batch / r->ranks, mb = r->micro_batch < per ? r->micro_batch : per;
        while (per % mb)
            mb--;
        if (mb != r->micro_batch)
            SDP_INFO("%d ranks of %d sequences each: micro-batches of %d sequences (batch.micro "
                     "is %d)",
                     r->ranks, per, mb, r->micro_batch);
        r->micro_batch = mb;
    }
    if (r->sched[0] && sdp_policy_resolve(r->sched, &policy)) {
        free(routes);
        return SDP_EXIT_USAGE;
    }
    rc = sdp_data_open(&data, r->data_train, r->seq_len, r->seed, r->shuffle);
    if (rc) {
        free(routes);
        return SDP_EXIT_FAILURE;
    }
    if (data.shard.vocab_size > (uint32_t)r->model.vocab_size) {
        sdp_err(-EINVAL, "data %s was tokenized with a vocabulary of %u ids, the model has %d",
                r->data_train, data.shard.vocab_size, r->model.vocab_size);
        sdp_hint("tokenize the data with the model's tokenizer");
        rc = SDP_EXIT_FAILURE;
        goto out;
    }
    work_dt = r->precision == SDP_PREC_BF16 ? SDP_BF16 : SDP_F32;
    /* state + the activations of one step (recomputed: every layer input of every micro-batch
     * alive) */
    /* the return as far as it is known before StarPU starts (resolved again once it has) */
    grad_dt = sdp_recipe_grad_bf16(r, sdp_cli_may_use_gpu(r->gpus)) ? SDP_BF16 : SDP_F32;
    state_bytes = sdp_state_host_bytes(&r->model, work_dt, grad_dt,
                                       (sdp_cli_may_use_gpu(r->gpus) ? SDP_STATE_ON_GPU : 0) |
                                           (r->work_on_gpu ? SDP_STATE_WORK_STAGED : 0) |
                                           (r->embed_on_gpu ? SDP_STATE_EMBED_STAGED : 0));
    need = state_bytes +
           (unsigned long long)r->global_batch / r->micro_batch *
               (sdp_model_layer_act_bytes(&r->model, r->micro_batch, r->seq_len, 4, r->recompute) *
                    (unsigned long long)(r->model.num_layers + 1) +
                sdp_model_layer_act_bytes(&r->model, r->micro_batch, r->seq_len, 4, 0) +
                (r->recompute ? (unsigned long long)r->keep_mlp * r->micro_batch * r->seq_len *
                                    (r->model.hidden_size + 2ull * r->model.intermediate_size) * 4
                              : 0));
    avail = r->host_memory_gib > 0 ? (unsigned long long)(r->host_memory_gib * 1073741824.0)
                                   : sdp_rt_host_mem_available();
    if (avail > 0 && need > avail) {
        sdp_err(-ENOMEM,
                "%s: the run needs about %.2f GiB of host memory (state %.2f GiB for %zu "
                "parameters + activations), %.2f GiB are available",
                r->file, need / 1073741824.0, state_bytes / 1073741824.0,
                sdp_model_num_params(&r->model), avail / 1073741824.0);
        sdp_hint("use a smaller model, batch.micro or data.seq_len, or raise train.host_memory_gib "
                 "if the "
                 "limit is wrong");
        rc = SDP_EXIT_FAILURE;
        goto out;
    }
    /* ---- resume: the newest valid checkpoint of the run directory ---- */
    if (r->output_dir[0] && !r->print_plan) {
        if (sdp_mkdir_p(r->output_dir)) {
            rc = SDP_EXIT_FAILURE;
            goto out;
        }
        snprintf(ckdir, sizeof(ckdir), "%s/checkpoints", r->output_dir);
        if (!r->no_resume && sdp_ckpt_latest(ckdir, ckpath, sizeof(ckpath)) == 0) {
            if (sdp_ckpt_read_info(ckpath, NULL, &info)) {
                rc = SDP_EXIT_FAILURE;
                goto out;
            }
            fingerprint(r, &data, fp, sizeof(fp));
            if (strcmp(info.fingerprint, fp) != 0) {
                sdp_err(-EINVAL, "%s was written by a run with %s; %s has %s", ckpath,
                        info.fingerprint, r->file, fp);
                sdp_hint("these settings change the data order or the numerics: restore them, use "
                         "another output directory, or pass --no-resume to start afresh");
                rc = SDP_EXIT_FAILURE;
                goto out;
            }
            resuming = 1;
        }
    }
    if (r->metrics[0] && !r->print_plan) {
        const char *path = r->metrics;
        if (resuming && trim_metrics(path, info.step)) {
            rc = SDP_EXIT_FAILURE;
            goto out;
        }
        mf = fopen(path, resuming ? "a" : "w");
        if (!mf) {
            sdp_err(-errno, "cannot open metrics file %s", path);
            rc = SDP_EXIT_FAILURE;
            goto out;
        }
    }
    ids = malloc((size_t)r->global_batch * r->seq_len * sizeof(*ids));
    targets = malloc((size_t)r->global_batch * r->seq_len * sizeof(*targets));
    next_ids = malloc((size_t)r->global_batch * r->seq_len * sizeof(*next_ids));
    next_targets = malloc((size_t)r->global_batch * r->seq_len * sizeof(*next_targets));
    if (!ids || !targets || !next_ids || !next_targets) {
        sdp_err(-ENOMEM, "batch buffers");
        rc = SDP_EXIT_FAILURE;
        goto out;
    }

    /* ---- StarPU, state, graph ---- */
    sdp_policy_slidedp_configure(r->staging_depth, r->prefetch_groups);
    rc_conf.sched_name = r->sched;
    rc_conf.sched_policy = policy;
    rc_conf.ncpus = r->cpus;
    if (r->ranks > 1 && r->gpus <= 0 && r->cpus == 0 && sysconf(_SC_NPROCESSORS_ONLN) < r->ranks)
        rc_conf.ncpus = r->ranks; /* CPU ranks: one worker each, even on fewer cores */
    rc_conf.ncuda = r->gpus;
    rc_conf.require_cuda = r->gpus > 0;
    rc_conf.gpu_memory_gib = r->gpu_memory_gib;
    if (sdp_rt_init(&rc_conf)) {
        rc = SDP_EXIT_FAILURE;
        goto out;
    }
    started = 1;
    if ((r->trace || r->events) && !r->print_plan && sdp_trace_start()) {
        rc = SDP_EXIT_FAILURE;
        goto out;
    }
    grad_dt = sdp_recipe_grad_bf16(r, sdp_rt_ncuda() > 0) ? SDP_BF16 : SDP_F32;
    if (sdp_tasks_init() || sdp_tasks_place_compute(sdp_rt_ncuda() > 0) ||
        (sdp_rt_ncuda() > 0 && sdp_tasks_check_gpu_model(&r->model)) ||
        sdp_state_create_ex(&st, &r->model, work_dt, (size_t)(r->chunk_mib * 1048576.0), grad_dt,
                            (sdp_rt_ncuda() > 0 ? SDP_STATE_ON_GPU : 0) |
                                (r->work_on_gpu ? SDP_STATE_WORK_STAGED : 0) |
                                (r->embed_on_gpu ? SDP_STATE_EMBED_STAGED : 0))) {
        rc = SDP_EXIT_FAILURE;
        goto out;
    }
    state_made = 1;
    if (sdp_rt_ncuda() > 0 && check_gpu_memory(r, work_dt)) {
        rc = SDP_EXIT_FAILURE;
        goto out;
    }
    if (resuming) {
        if (sdp_ckpt_load(ckpath, &st, &info)) {
            rc = SDP_EXIT_FAILURE;
            goto out;
        }
        sdp_data_seek(&data, info.data_epoch, info.data_index);
        first = info.step;
        last_loss = info.last_loss; /* a run resumed at its last step still knows its final loss */
        SDP_INFO("resuming from %s: step %d of %d", ckpath, first, r->steps);
    } else if (r->print_plan) {
        /* the plan needs the state's layout, not its values */
    } else if (r->model_path[0]) {
        if (sdp_state_load_hf(&st, r->model_path)) {
            rc = SDP_EXIT_FAILURE;
            goto out;
        }
    } else {
        sdp_state_init_random(&st, r->seed);
    }
    gc.micro_batch = r->micro_batch;
    gc.n_micro = r->global_batch / r->micro_batch;
    gc.seq_len = r->seq_len;
    gc.recompute = r->recompute;
    gc.offload_inputs = r->act_offload;
    gc.bwd_lookahead = r->bwd_lookahead;
    gc.keep_last = r->keep_last;
    gc.keep_mlp = r->keep_mlp;
    gc.beta1 = r->beta1;
    gc.beta2 = r->beta2;
    gc.eps = r->eps;
    gc.weight_decay = r->weight_decay;
    gc.max_grad_norm = r->max_grad_norm;
    gc.skip_nonfinite = r->skip_nonfinite;
    gc.embed_early = r->embed_early;
    gc.mlp_early = r->mlp_early;
    gc.gpu_update = r->gpu_update;
    gc.embed_lookup_host = r->embed_lookup_host;
    gc.nranks = r->ranks;
    gc.param_delay = r->param_delay;
    if (r->param_delay)
        SDP_WARN("train.param_delay = 1: every step computes with weights one update old "
                 "(asynchronous optimizer); SlideDP's invariant 3 does not hold");
    gc.window = r->window >= 0 ? r->window : r->gpu_memory_gib > 0 ? 2 : 0;
    sdp_cli_place_norms(r->ranks, gc.window);
    gc.grad_route = r->grad_route_gpu ? SDP_ROUTE_GPU_REDUCE : SDP_ROUTE_CPU_REDUCE;
    gc.grad_route_gpu = routes;
    gc.param_route = r->param_sharded ? SDP_ROUTE_SHARDED : SDP_ROUTE_REPLICATED;
    if (r->ranks > 1) {
        int wid[SDP_MAX_RANKS];
        if (sdp_rt_rank_workers(r->ranks, wid) || sdp_tasks_set_ranks(r->ranks, wid)) {
            rc = SDP_EXIT_FAILURE;
            goto out;
        }
        if (r->nccl && sdp_tasks_use_nccl(r->ranks, wid)) {
            rc = SDP_EXIT_FAILURE;
            goto out;
        }
        SDP_INFO("%d data-parallel ranks on %s workers, %s parameters, %s reduction of gradients%s",
                 r->ranks, sdp_rt_ncuda() > 0 ? "CUDA" : "CPU",
                 r->param_sharded ? "sharded" : "replicated", r->grad_route_gpu ? "GPU" : "CPU",
                 r->nccl ? " (NCCL where it is on the GPUs)" : "");
    }
    if (plan_make(r, &st, &gc, &plan)) {
        rc = r->nplan ? SDP_EXIT_USAGE : SDP_EXIT_FAILURE;
        goto out;
    }
    if (r->print_plan) {
        sdp_plan_print(&plan, stdout);
        sdp_plan_free(&plan);
        rc = SDP_EXIT_OK;
        goto out;
    }
    rc = sdp_graph_create_plan(&g, &st, &gc, &plan);
    sdp_plan_free(&plan);
    if (rc) {
        rc = SDP_EXIT_FAILURE;
        goto out;
    }
    SDP_INFO(
        "training %s (%zu parameters, %d layers) for %d steps: %d x %d sequences of %d tokens, "
        "%s, lr %.3g, data %s (%llu sequences)%s%s",
        sdp_model_arch_name(r->model.arch), sdp_model_num_params(&r->model), r->model.num_layers,
        r->steps, gc.n_micro, r->micro_batch, r->seq_len, work_dt == SDP_BF16 ? "bf16" : "fp32",
        r->lr, r->data_train, (unsigned long long)data.nseq,
        r->output_dir[0] ? ", run directory " : "", r->output_dir);

    /* ---- steps ---- */
    t0 = t_prev = sdp_cli_now_s();
    rc = SDP_EXIT_OK;
    fingerprint(r, &data, fp, sizeof(fp));
    int have_next = 0;
    uint64_t pos_epoch = data.epoch, pos_index = data.index;
    for (int s = first; s < r->steps; s++) {
        struct sdp_step_result res;
        double lr = sdp_recipe_lr_at(r, s), t, step_s;
        char el[32], eta[32];
        int stop;
        /* step s's batch, read ahead by step s - 1 or now; the data's position after it is what
         * a checkpoint of step s keeps */
        if (have_next) {
            int32_t *swap = ids;
            ids = next_ids;
            next_ids = swap;
            swap = targets;
            targets = next_targets;
            next_targets = swap;
        } else {
            sdp_data_next(&data, r->global_batch, ids, targets);
        }
        pos_epoch = data.epoch;
        pos_index = data.index;
        /* the next step's batch, read ahead and told to the graph (sdp_graph_set_next) */
        have_next = s + 1 < r->steps;
        if (have_next) {
            sdp_data_next(&data, r->global_batch, next_ids, next_targets);
            sdp_graph_set_next(g, next_ids);
        }
        if (sdp_graph_step(g, s, ids, targets, lr, 1, &res)) {
            rc = SDP_EXIT_FAILURE;
            break;
        }
        t = sdp_cli_now_s();
        step_s = t - t_prev;
        t_prev = t;
        elapsed = t - t0;
        if (!isfinite(res.loss) || !isfinite(res.grad_norm)) {
            char where[64];
            group_name(r, res.bad_group, where, sizeof(where));
            if (!r->skip_nonfinite) {
                sdp_err(-EINVAL,
                        "step %d: loss %g, gradient norm %g (first non-finite gradient: %s): "
                        "training diverged",
                        s + 1, res.loss, res.grad_norm, where);
                sdp_hint(
                    "lower optimizer.lr, set optimizer.max_grad_norm, use train.precision: "
                    "fp32, or train.on_nan: skip; the checkpoints before this step are intact");
                rc = SDP_EXIT_FAILURE;
                break;
            }
            SDP_WARN("step %d: loss %g, gradient norm %g (first non-finite gradient: %s): update "
                     "skipped (train.on_nan: skip)",
                     s + 1, res.loss, res.grad_norm, where);
        }
        fmt_duration(el, sizeof(el), elapsed);
        fmt_duration(eta, sizeof(eta), elapsed / (s + 1 - first) * (r->steps - s - 1));
        if (!r->quiet) {
            printf("step %d/%d  loss %.4f  lr %.3e  gnorm %.3f  %.0f tok/s  elapsed %s  eta %s\n",
                   s + 1, r->steps, res.loss, lr, res.grad_norm, res.tokens / step_s, el, eta);
            fflush(stdout);
        }
        if (mf && write_metrics(mf, s, &res, lr, step_s, elapsed)) {
            sdp_err(-EIO, "cannot write the metrics file");
            rc = SDP_EXIT_FAILURE;
            break;
        }
        last_loss = res.loss;
        stop = stop_signal != 0;
        if (ckdir[0] && (stop || s + 1 == r->steps ||
                         (r->checkpoint_every > 0 && (s + 1) % r->checkpoint_every == 0))) {
            memset(&info, 0, sizeof(info));
            info.step = s + 1;
            info.data_epoch = pos_epoch;
            info.data_index = pos_index;
            info.seed = r->seed;
            snprintf(info.fingerprint, sizeof(info.fingerprint), "%s", fp);
            info.last_loss = res.loss;
            if (sdp_ckpt_save(ckdir, &st, &info, r->keep_checkpoints)) {
                rc = SDP_EXIT_FAILURE;
                break;
            }
        }
        if (stop) {
            SDP_INFO("stopped by signal %d at step %d; resume by running the same command",
                     (int)stop_signal, s + 1);
            stopped = 1;
            break;
        }
    }
    if (sdp_rt_wait_all() && rc == SDP_EXIT_OK)
        rc = SDP_EXIT_FAILURE;
    if ((r->trace || r->events) && sdp_trace_write(r->events, r->trace))
        rc = SDP_EXIT_FAILURE;
    if (rc == SDP_EXIT_OK && !stopped && r->output_dir[0]) {
        char dir[SDP_PATH_MAX + 16], line[128];
        snprintf(dir, sizeof(dir), "%s/final", r->output_dir);
        if (sdp_state_save_hf(&st, dir, "float32")) {
            rc = SDP_EXIT_FAILURE;
        } else {
            SDP_INFO("model written to %s", dir);
            snprintf(dir, sizeof(dir), "%s/COMPLETE", r->output_dir);
            snprintf(line, sizeof(line), "step %d loss %.10g\n", r->steps, last_loss);
            if (sdp_write_file_atomic(dir, line, strlen(line)))
                rc = SDP_EXIT_FAILURE;
        }
    }
out:
    sdp_graph_destroy(g);
    free(routes);
    if (state_made)
        sdp_state_destroy(&st);
    if (started) {
        sdp_trace_stop();
        sdp_tasks_shutdown();
        sdp_rt_shutdown();
    }
    if (mf)
        fclose(mf);
    free(ids);
    free(targets);
    free(next_ids);
    free(next_targets);
    sdp_data_close(&data);
    return rc;
}

int sdp_cli_train(int argc, char **argv)
{
    struct sdp_recipe r;
    int first, rc;

    /* the flags are checked before the recipe is read, then applied over it */
    sdp_recipe_defaults(&r);
    rc = sdp_options_parse("train", SDP_CMD_TRAIN, argc, argv, &r, &first, usage_head, usage_tail);
    if (rc)
        return rc > 0 ? SDP_EXIT_OK : SDP_EXIT_USAGE;
    if (r.verbose)
        sdp_log_verbosity = SDP_LOG_DEBUG;
    if (first != argc - 1) {
        fprintf(stderr, "slidedp train: expected exactly one recipe file\n\n");
        sdp_options_usage(stderr, SDP_CMD_TRAIN, usage_head, usage_tail);
        return SDP_EXIT_USAGE;
    }
    rc = sdp_recipe_load(argv[first], &r);
    if (rc)
        return rc == -ENOENT || rc == -EINVAL ? SDP_EXIT_USAGE : SDP_EXIT_FAILURE;
    if (sdp_options_parse("train", SDP_CMD_TRAIN, argc, argv, &r, &first, usage_head, usage_tail))
        return SDP_EXIT_USAGE; /* accepted above: cannot fail */
    apply_slurm(&r);
    if (!r.sched[0]) /* the project's policy unless the recipe or the command line names one */
        snprintf(r.sched, sizeof(r.sched), "%s", "sdp-slidedp");
    return run(&r);
}
