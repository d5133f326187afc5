/* SPDX-License-Identifier: MIT */
/* `slidedp train RECIPE.yaml`: load and check everything (recipe, model config and weights, data,
 * memory budget) before starting StarPU, then run the steps, printing one progress line per step on
 * stdout and one JSON object per step to the metrics file, and finally write the trained model as a
 * Hugging Face directory when the recipe names an output directory.  Tests: tests/e2e/. */
#include "config.h"

#include <getopt.h>
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
#include "graph/step.h"
#include "policies/sdp_policies.h"
#include "runtime/ckpt.h"
#include "cli/cli.h"
#include "formats/data.h"
#include "base/fsutil.h"
#include "formats/hfconfig.h"
#include "runtime/init.h"
#include "base/sdp_log.h"
#include "base/env.h"
#include "runtime/trace.h"
#include "runtime/state.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: slidedp train RECIPE.yaml [options]\n"
        "\n"
        "Train the model of RECIPE.yaml (see README.md, \"Recipes\").\n"
        "\n"
        "options:\n"
        "  --steps N          optimizer steps (overrides train.steps)\n"
        "  --metrics FILE     write one JSON object per step to FILE (overrides output.metrics)\n"
        "  --sched NAME       StarPU scheduling policy (overrides train.sched; `slidedp "
        "policies`)\n"
        "  --cpus N           CPU workers (overrides train.cpus; 0 = all cores)\n"
        "  --precision P      fp32 or bf16 (overrides train.precision)\n"
        "  --grad-dtype D     auto, fp32 or bf16: the gradient AdamW reads (overrides "
        "train.grad_dtype)\n"
        "  --work-home H      host or gpu: where the working copies live (overrides "
        "train.work_home)\n"
        "  --embed-home H     host or gpu: where the embedding's working copy lives (overrides "
        "train.embed_home)\n"
        "  --embed-lookup L   compute or host: where the forward's embedding lookup runs "
        "(overrides\n"
        "                     train.embed_lookup)\n"
        "  --embed-early X    on (default) or off: update the tied embedding's rows outside the\n"
        "                     step's tokens during the backward (one rank, bf16 return, no\n"
        "                     clipping)\n"
        "  --mlp-early X      on or off: pack and update each layer's chunks of MLP weights\n"
        "                     once the MLP's backward has run (one rank, bf16 return, no\n"
        "                     clipping; by default with the working copies off the host only;\n"
        "                     on: layer 1's with them on the host too)\n"
        "  --gpu-update N     run the AdamW of layers 1..N on the GPU (overrides "
        "train.gpu_update;\n"
        "                     one rank, bf16 return, working copies on the host)\n"
        "  --collectives C    starpu or nccl: how the GPU-reduction route moves gradients "
        "(overrides\n"
        "                     train.collectives)\n"
        "  --gpus N           CUDA workers (overrides train.gpus; -1 = all found, 0 = none)\n"
        "  --output DIR       run directory: checkpoints, COMPLETE, the trained model in "
        "DIR/final\n"
        "                     (overrides output.dir)\n"
        "  --checkpoint-every K  checkpoint every K steps (overrides output.checkpoint_every)\n"
        "  --no-resume        start afresh even if DIR/checkpoints holds a checkpoint\n"
        "  --trace FILE.json  write a Chrome/Perfetto timeline of every task, one track per lane\n"
        "  --events FILE.jsonl  write the task event log (tools/check_invariants.py checks it)\n"
        "  --ranks R          data-parallel ranks (overrides train.ranks): one per GPU, or CPU\n"
        "                     workers standing in for GPUs when there is none\n"
        "  --grad-route cpu|gpu  gradient return of the ranks (overrides train.grad_route)\n"
        "  --param-route replicated|sharded  parameter dispatch to the ranks (overrides\n"
        "                     train.param_route)\n"
        "  --grad-route-groups SPEC  per-group routes, e.g. gpu:1-18,cpu:19-36 (overrides\n"
        "                     train.grad_route_groups)\n"
        "  --param-delay 0|1  1: asynchronous optimizer, weights one update old (overrides\n"
        "                     train.param_delay; breaks invariant 3, for comparisons)\n"
        "\n"
        "SIGUSR1 or SIGTERM: checkpoint at the next step boundary and exit 0; running the same\n"
        "command again resumes.  Under Slurm, SLURM_JOB_ID names the default run directory\n"
        "(runs/<recipe>-<job id>) and SLURM_CPUS_PER_TASK the CPU workers.\n"
        "  -q, --quiet        no progress lines\n"
        "  -v, --verbose      debug logging\n"
        "  -h, --help         this text\n"
        "\n"
        "exit status: 0 success, 1 runtime failure, 2 usage error\n");
}

static void fmt_duration(char *buf, size_t len, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

static int parse_int(const char *opt, const char *s, int lo, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > 1000000000) {
        fprintf(stderr, "slidedp train: %s expects an integer >= %d, got '%s'\n", opt, lo, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

struct overrides {
    int steps, cpus, gpus, checkpoint_every, no_resume, ranks, param_delay, embed_early_off;
    int mlp_early_opt, gpu_update;
    const char *work_home, *embed_home, *embed_lookup;
    const char *metrics, *sched, *precision, *output, *trace, *events, *grad_route, *route_groups,
        *param_route, *grad_dtype, *collectives;
    int quiet;
};

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

static int run(struct sdp_recipe *r, const struct overrides *ov)
{
    struct sdp_data data = { 0 };
    struct sdp_state st = { 0 };
    sdp_graph_t *g = NULL;
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
    if (r->output_dir[0]) {
        if (sdp_mkdir_p(r->output_dir)) {
            rc = SDP_EXIT_FAILURE;
            goto out;
        }
        snprintf(ckdir, sizeof(ckdir), "%s/checkpoints", r->output_dir);
        if (!ov->no_resume && sdp_ckpt_latest(ckdir, ckpath, sizeof(ckpath)) == 0) {
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
    if (ov->metrics || r->metrics[0]) {
        const char *path = ov->metrics ? ov->metrics : r->metrics;
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
    if ((ov->trace || ov->events) && sdp_trace_start()) {
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
    gc.embed_early = ov->embed_early_off ? -1 : 0;
    gc.mlp_early = ov->mlp_early_opt;
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
    if (sdp_graph_create(&g, &st, &gc)) {
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
        if (!ov->quiet) {
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
    if ((ov->trace || ov->events) && sdp_trace_write(ov->events, ov->trace))
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
    static const struct option longopts[] = {
        { "steps", required_argument, NULL, 's' },
        { "metrics", required_argument, NULL, 'm' },
        { "sched", required_argument, NULL, 'S' },
        { "cpus", required_argument, NULL, 'c' },
        { "precision", required_argument, NULL, 'p' },
        { "output", required_argument, NULL, 'o' },
        { "gpus", required_argument, NULL, 'g' },
        { "checkpoint-every", required_argument, NULL, 'K' },
        { "no-resume", no_argument, NULL, 'R' },
        { "trace", required_argument, NULL, 'T' },
        { "events", required_argument, NULL, 'E' },
        { "ranks", required_argument, NULL, 'N' },
        { "grad-route", required_argument, NULL, 'G' },
        { "param-delay", required_argument, NULL, 'P' },
        { "grad-route-groups", required_argument, NULL, 'X' },
        { "param-route", required_argument, NULL, 'Y' },
        { "grad-dtype", required_argument, NULL, 'D' },
        { "collectives", required_argument, NULL, 'C' },
        { "embed-early", required_argument, NULL, 1000 },
        { "work-home", required_argument, NULL, 1001 },
        { "embed-home", required_argument, NULL, 1004 },
        { "mlp-early", required_argument, NULL, 1003 },
        { "gpu-update", required_argument, NULL, 1005 },
        { "embed-lookup", required_argument, NULL, 1006 },
        { "quiet", no_argument, NULL, 'q' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct overrides ov = {
        .steps = -1,
        .cpus = -1,
        .gpus = -2,
        .checkpoint_every = -1,
        .ranks = -1,
        .param_delay = -1,
        .gpu_update = -1,
    };
    struct sdp_recipe r;
    int opt, rc;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "qvh", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            if (parse_int("--steps", optarg, 1, &ov.steps))
                return SDP_EXIT_USAGE;
            break;
        case 'c':
            if (parse_int("--cpus", optarg, 0, &ov.cpus))
                return SDP_EXIT_USAGE;
            break;
        case 'g':
            if (parse_int("--gpus", optarg, -1, &ov.gpus))
                return SDP_EXIT_USAGE;
            break;
        case 'K':
            if (parse_int("--checkpoint-every", optarg, 0, &ov.checkpoint_every))
                return SDP_EXIT_USAGE;
            break;
        case 'R':
            ov.no_resume = 1;
            break;
        case 'm':
            ov.metrics = optarg;
            break;
        case 'S':
            ov.sched = optarg;
            break;
        case 'p':
            ov.precision = optarg;
            break;
        case 'o':
            ov.output = optarg;
            break;
        case 'T':
            ov.trace = optarg;
            break;
        case 'E':
            ov.events = optarg;
            break;
        case 'N':
            if (parse_int("--ranks", optarg, 1, &ov.ranks))
                return SDP_EXIT_USAGE;
            break;
        case 'X':
            ov.route_groups = optarg;
            break;
        case 'Y':
            if (strcmp(optarg, "replicated") && strcmp(optarg, "sharded")) {
                fprintf(stderr, "slidedp train: --param-route takes replicated or sharded\n");
                return SDP_EXIT_USAGE;
            }
            ov.param_route = optarg;
            break;
        case 'P':
            if (parse_int("--param-delay", optarg, 0, &ov.param_delay) || ov.param_delay > 1) {
                fprintf(stderr, "slidedp train: --param-delay takes 0 or 1\n");
                return SDP_EXIT_USAGE;
            }
            break;
        case 'G':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "gpu")) {
                fprintf(stderr, "slidedp train: --grad-route takes cpu or gpu, not '%s'\n", optarg);
                return SDP_EXIT_USAGE;
            }
            ov.grad_route = optarg;
            break;
        case 'D':
            if (strcmp(optarg, "auto") && strcmp(optarg, "fp32") && strcmp(optarg, "bf16")) {
                fprintf(stderr, "slidedp train: --grad-dtype takes auto, fp32 or bf16, not '%s'\n",
                        optarg);
                return SDP_EXIT_USAGE;
            }
            ov.grad_dtype = optarg;
            break;
        case 1000:
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "slidedp train: --embed-early takes on or off, not '%s'\n", optarg);
                return SDP_EXIT_USAGE;
            }
            ov.embed_early_off = !strcmp(optarg, "off");
            break;
        case 1003:
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "slidedp train: --mlp-early takes on or off, not '%s'\n", optarg);
                return SDP_EXIT_USAGE;
            }
            ov.mlp_early_opt = !strcmp(optarg, "off") ? -1 : 1;
            break;
        case 1005:
            if (parse_int("--gpu-update", optarg, 0, &ov.gpu_update))
                return SDP_EXIT_USAGE;
            break;
        case 1001:
            if (strcmp(optarg, "host") && strcmp(optarg, "gpu")) {
                fprintf(stderr, "slidedp train: --work-home takes host or gpu, not '%s'\n", optarg);
                return SDP_EXIT_USAGE;
            }
            ov.work_home = optarg;
            break;
        case 1004:
            if (strcmp(optarg, "host") && strcmp(optarg, "gpu")) {
                fprintf(stderr, "slidedp train: --embed-home takes host or gpu, not '%s'\n",
                        optarg);
                return SDP_EXIT_USAGE;
            }
            ov.embed_home = optarg;
            break;
        case 1006:
            if (strcmp(optarg, "compute") && strcmp(optarg, "host")) {
                fprintf(stderr, "slidedp train: --embed-lookup takes compute or host, not '%s'\n",
                        optarg);
                return SDP_EXIT_USAGE;
            }
            ov.embed_lookup = optarg;
            break;
        case 'C':
            if (strcmp(optarg, "starpu") && strcmp(optarg, "nccl")) {
                fprintf(stderr, "slidedp train: --collectives takes starpu or nccl, not '%s'\n",
                        optarg);
                return SDP_EXIT_USAGE;
            }
            ov.collectives = optarg;
            break;
        case 'q':
            ov.quiet = 1;
            break;
        case 'v':
            sdp_log_verbosity = SDP_LOG_DEBUG;
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
        fprintf(stderr, "slidedp train: expected exactly one recipe file\n\n");
        usage(stderr);
        return SDP_EXIT_USAGE;
    }
    rc = sdp_recipe_load(argv[optind], &r);
    if (rc)
        return rc == -ENOENT || rc == -EINVAL ? SDP_EXIT_USAGE : SDP_EXIT_FAILURE;
    if (ov.steps > 0)
        r.steps = ov.steps;
    if (ov.cpus >= 0)
        r.cpus = ov.cpus;
    if (ov.gpus >= -1)
        r.gpus = ov.gpus;
    if (ov.ranks > 0)
        r.ranks = ov.ranks;
    if (ov.param_delay >= 0)
        r.param_delay = ov.param_delay;
    if (ov.route_groups && snprintf(r.grad_route_groups, sizeof(r.grad_route_groups), "%s",
                                    ov.route_groups) >= (int)sizeof(r.grad_route_groups)) {
        fprintf(stderr, "slidedp train: --grad-route-groups is longer than %zu characters\n",
                sizeof(r.grad_route_groups) - 1);
        return SDP_EXIT_USAGE;
    }
    if (ov.grad_route)
        r.grad_route_gpu = !strcmp(ov.grad_route, "gpu");
    if (ov.param_route)
        r.param_sharded = !strcmp(ov.param_route, "sharded");
    if (ov.grad_dtype)
        r.grad_bf16 = !strcmp(ov.grad_dtype, "auto") ? -1 : !strcmp(ov.grad_dtype, "bf16");
    if (ov.collectives)
        r.nccl = !strcmp(ov.collectives, "nccl");
    if (ov.work_home)
        r.work_on_gpu = !strcmp(ov.work_home, "gpu");
    if (ov.embed_home)
        r.embed_on_gpu = !strcmp(ov.embed_home, "gpu");
    if (ov.embed_lookup)
        r.embed_lookup_host = !strcmp(ov.embed_lookup, "host");
    if (ov.gpu_update >= 0)
        r.gpu_update = ov.gpu_update;
    if (ov.checkpoint_every >= 0)
        r.checkpoint_every = ov.checkpoint_every;
    if (ov.output)
        snprintf(r.output_dir, sizeof(r.output_dir), "%s", ov.output);
    apply_slurm(&r);
    if (ov.sched)
        snprintf(r.sched, sizeof(r.sched), "%s", ov.sched);
    if (!r.sched[0]) /* the project's policy unless the recipe or the command line names one */
        snprintf(r.sched, sizeof(r.sched), "%s", "sdp-slidedp");
    if (ov.precision) {
        if (!strcmp(ov.precision, "fp32"))
            r.precision = SDP_PREC_FP32;
        else if (!strcmp(ov.precision, "bf16"))
            r.precision = SDP_PREC_BF16;
        else {
            fprintf(stderr, "slidedp train: --precision expects fp32 or bf16, got '%s'\n",
                    ov.precision);
            return SDP_EXIT_USAGE;
        }
    }
    return run(&r, &ov);
}
