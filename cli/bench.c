/* SPDX-License-Identifier: MIT */
/* `slidedp bench`: the standard workload of the benchmarks (a preset model with random weights,
 * random token ids, full-parameter AdamW), timed per step after warm-up; prints one JSON line with
 * the figures the peers are compared on (tokens/s, model TFLOP/s, GPU and host peak memory) and the
 * settings. */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codelets/sdp_tasks.h"
#include "cli/recipe.h"
#include "graph/step.h"
#include "policies/sdp_policies.h"
#include "cli/cli.h"
#include "cli/simulate.h"
#include "base/env.h"
#include "base/fsutil.h"
#include "cli/options.h"
#include "cli/predict_cli.h"
#include "formats/hfconfig.h"
#include "runtime/census.h"
#include "runtime/init.h"
#include "base/sdp_log.h"
#include "runtime/state.h"
#include "runtime/trace.h"

struct bench_opts {
    const char *model, *sched, *precision, *activations, *trace, *events, *grad_dtype, *mem_log;
    int batch, micro, seq, steps, warmup, gpus, cpus, window, ranks, grad_route_gpu, sharded;
    int embed_early_off, mlp_early_opt, work_on_gpu, embed_on_gpu, lookup_host;
    int lookahead, staging_depth, prefetch_groups, nccl, barrier, keep_last, keep_mlp, gpu_update;
    int residual_f32;
    int pipe; /* sdp-roundpipe: the stage workers (--ranks; the graph has one rank) */
    double chunk_mib, gpu_memory_gib, max_grad_norm;
    unsigned long long seed;
    struct sdp_lora_cfg lora; /* --lora-rank's adapters on a frozen base (rank 0: full training) */
    struct sdp_recipe *r;     /* the options as parsed (train.machine, the plan's knobs) */
};

static const char usage_head[] =
    "usage: slidedp bench --model PRESET|CONFIG [options]\n"
    "\n"
    "Time training steps of a preset model (qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b,\n"
    "qwen3-14b, qwen3-32b), or of the model a Hugging Face config.json (or the directory\n"
    "holding it) describes, with random weights and random tokens; print one JSON line.\n";
static const char usage_tail[] =
    "\n"
    "model_tflops counts tokens/s times the model FLOPs of a token at sequence length T\n"
    "(L layers, NH heads of HD, recomputation not counted): full training 6 * matmul params\n"
    "+ 6 * L * NH * HD * T; with --lora-rank, the frozen base's forward and backward through the\n"
    "activations and the adapters' forward and backward, 4 * matmul params + 6 * L * NH * HD * T\n"
    "+ 6 * adapter params (docs/lora.md).\n";

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The random ids and targets of step s (uniform over the vocabulary, from the seed). */
static void draw(uint64_t seed, int s, int vocab, int32_t *ids, int32_t *targets, size_t ntok)
{
    for (size_t i = 0; i < ntok; i++) {
        uint64_t r = mix(seed ^ mix((uint64_t)s * ntok + i));
        ids[i] = (int32_t)(r % (uint64_t)vocab);
        targets[i] = (int32_t)((r >> 32) % (uint64_t)vocab);
    }
}

/* --lora-rank against the model and the run (sdp_lora_validate; the recipe's rule: the working
 * copies on the host).  @return 0, or SDP_EXIT_USAGE naming the option */
static int lora_check(const struct bench_opts *b, const struct sdp_model_cfg *cfg)
{
    char why[256];
    if (b->lora.rank < 1)
        return 0;
    if (sdp_lora_validate(&b->lora, cfg, why, sizeof(why))) {
        sdp_err(-EINVAL, "%s: %s",
                strstr(why, "lora.alpha")     ? "--lora-alpha"
                : strstr(why, "lora.targets") ? "--lora-targets"
                                              : "--lora-rank",
                why);
        return SDP_EXIT_USAGE;
    }
    if (b->work_on_gpu || b->embed_on_gpu) {
        sdp_err(-EINVAL, "--lora-rank: the frozen base's working copy stays on the host "
                         "(--work-home host --embed-home host)");
        return SDP_EXIT_USAGE;
    }
    return 0;
}

/* The training state: full (sdp_state_create_ex), or with --lora-rank the frozen base and the
 * adapters (sdp_state_create_lora). */
static int state_create(const struct bench_opts *b, struct sdp_state *st,
                        const struct sdp_model_cfg *cfg, enum sdp_dtype dt, int gbf16)
{
    size_t chunk = sdp_cli_chunk_bytes(b->chunk_mib, cfg);
    unsigned flags = (sdp_rt_ncuda() > 0 ? SDP_STATE_ON_GPU : 0) |
                     (b->work_on_gpu ? SDP_STATE_WORK_STAGED : 0) |
                     (b->embed_on_gpu ? SDP_STATE_EMBED_STAGED : 0);
    if (b->lora.rank > 0)
        return sdp_state_create_lora(st, cfg, &b->lora, dt, chunk, flags);
    return sdp_state_create_ex(st, cfg, dt, chunk, gbf16 ? SDP_BF16 : SDP_F32, flags);
}

/* Whether the gradient returns in bf16 (--grad-dtype; the recipe's rule).  LoRA: the adapters'
 * gradient is fp32, the base has none. */
static int grad_bf16(const struct bench_opts *b, int on_gpu)
{
    if (b->lora.rank > 0)
        return 0;
    int want = !strcmp(b->grad_dtype, "auto") ? -1 : !strcmp(b->grad_dtype, "bf16");
    return sdp_grad_bf16_choice(want, b->ranks, on_gpu);
}

/* The step-time model's prediction of the plan the graph is built from (logged, and kept for
 * the JSON line as *out); nothing when the model cannot price it. */
static void predict(const struct bench_opts *b, const struct sdp_model_cfg *cfg,
                    const struct sdp_plan *plan, json_t **out)
{
    int ngpus = sdp_rt_ncuda() > 0 ? b->ranks : 0;
    struct sdp_cli_machine cm;
    struct sdp_predict p;
    char line[4600];
    sdp_cli_machine_get(b->r->machine, ngpus, 0, &cm);
    if (!sdp_cli_predict_plan(b->r, cfg, plan, ngpus, &cm, &p)) {
        sdp_cli_predict_line(&p, &cm, line, sizeof(line));
        SDP_INFO("predicted: %s", line);
        *out = json_pack("{s:f, s:f, s:s, s:f, s:f, s:f, s:s}", "step_s", p.step_s, "tokens_per_s",
                         p.tokens_per_s, "bound", sdp_predict_res_name(p.bound), "gpu_peak_gib",
                         p.gpu_bytes / 1073741824.0, "host_peak_gib", p.host_bytes / 1073741824.0,
                         "pinned_gib", p.pinned_bytes / 1073741824.0, "machine", cm.source);
    }
}

/* The model FLOPs of a token (model_tflops): full training's, or LoRA's (the frozen base's
 * forward and backward through the activations, the adapters' forward and backward). */
static double flops_per_token(const struct bench_opts *b, const struct sdp_model_cfg *cfg)
{
    return b->lora.rank > 0 ? sdp_lora_train_flops_per_token(&b->lora, cfg, b->seq)
                            : sdp_model_train_flops_per_token(cfg, b->seq);
}

/* The settings' "lora": rank, alpha and the targets. */
static json_t *lora_json(const struct sdp_lora_cfg *c)
{
    json_t *t = json_array();
    for (int i = 0; i < SDP_LORA_NTARGETS; i++)
        if (c->targets & SDP_LORA_BIT(sdp_lora_kinds[i]))
            json_array_append_new(t, json_string(sdp_lora_target_name(sdp_lora_kinds[i])));
    return json_pack("{s:i, s:f, s:o}", "rank", c->rank, "alpha", c->alpha, "targets", t);
}

/* Rank r's bytes per timed step by direction: the formulas (graph/cost.c; with R ranks, rank 0
 * receives the others' gradients on the GPU route, and on the sharded route each owner sends its
 * chunks to the R - 1 others) beside what StarPU's bus counters saw. */
static json_t *route_json(const sdp_graph_t *g, int r, int R, const struct sdp_rank_bytes *m,
                          int steps)
{
    struct sdp_route_bytes rb, o;
    double peer_in, peer_out;
    sdp_graph_route_bytes(g, r, &rb);
    peer_in = (double)rb.param_peer, peer_out = (double)(rb.param_out + rb.grad_peer);
    for (int s = 1; r == 0 && s < R; s++) {
        sdp_graph_route_bytes(g, s, &o);
        peer_in += (double)o.grad_peer;
    }
    return json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "rank", r,
                     "param_h2d_gb_pred", rb.param_h2d / 1e9, "param_peer_gb_pred",
                     rb.param_peer / 1e9, "grad_d2h_gb_pred", rb.grad_d2h / 1e9,
                     "grad_peer_gb_pred", rb.grad_peer / 1e9, "peer_in_gb_pred", peer_in / 1e9,
                     "peer_out_gb_pred", peer_out / 1e9, "h2d_gb", m->h2d / 1e9 / steps,
                     "peer_in_gb", m->peer_in / 1e9 / steps, "d2h_gb", m->d2h / 1e9 / steps,
                     "peer_out_gb", m->peer_out / 1e9 / steps);
}

static int run(const struct bench_opts *b)
{
    struct sdp_model_cfg cfg;
    struct sdp_state st;
    struct sdp_rt_conf rc_conf = { 0 };
    struct sdp_graph_conf gc = { 0 };
    sdp_graph_t *g = NULL;
    void *policy = NULL;
    const char *norms_at = "any";
    enum sdp_dtype dt = strcmp(b->precision, "fp32") ? SDP_BF16 : SDP_F32;
    size_t ntok = (size_t)b->batch * b->seq;
    int32_t *ids = NULL, *targets = NULL, *next_ids = NULL, *next_targets = NULL;
    double *step_s = NULL, gpu_peak = 0.0, t_init, t_start = 0.0, t_prev, span, loss = 0.0;
    long long routed = 0, experts = 0; /* Qwen3-MoE: over the timed steps */
    double t_go = sdp_cli_now_s(), t_rt = 0.0, t_state = 0.0, t_graph = 0.0, t_end;
    int rc = SDP_EXIT_FAILURE, state_made = 0, total = b->warmup + b->steps, gbf16;
    int wid[SDP_MAX_RANKS] = { 0 };
    unsigned long long need, avail;
    json_t *pred = NULL; /* the step-time model's prediction of the run */

    if (sdp_model_preset(b->model, &cfg)) {
        if (access(b->model, F_OK) != 0) {
            sdp_err(-EINVAL, "unknown model preset '%s', and no such config file or directory",
                    b->model);
            sdp_hint("presets: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, "
                     "qwen3-30b-a3b, qwen3-30b-a3b-l12; or give a Hugging Face config.json or its "
                     "directory");
            return SDP_EXIT_USAGE;
        }
        if (sdp_hfconfig_load(b->model, &cfg)) /* names the file and the field */
            return SDP_EXIT_USAGE;
    }
    if (lora_check(b, &cfg))
        return SDP_EXIT_USAGE;
    { /* the files written after the last step, checked before the first */
        const struct sdp_path_role in[] = { { access(b->model, F_OK) == 0 ? b->model : NULL,
                                              "the model", SDP_PATH_FILE } };
        const struct sdp_path_role out[] = { { b->trace, "the --trace file", SDP_PATH_FILE },
                                             { b->events, "the --events file", SDP_PATH_FILE },
                                             { b->mem_log, "the --mem-log file", SDP_PATH_FILE } };
        if (sdp_paths_check(out, 3, in, 1))
            return SDP_EXIT_FAILURE; /* as an unwritable --mem-log always was */
    }
    if (b->batch % b->micro != 0) {
        sdp_err(-EINVAL, "--batch %d is not a multiple of --micro %d", b->batch, b->micro);
        return SDP_EXIT_USAGE;
    }
    if (b->sched && sdp_policy_resolve(b->sched, &policy))
        return SDP_EXIT_USAGE;
    /* as far as it is known before StarPU starts; resolved again once it has */
    gbf16 = grad_bf16(b, sdp_cli_may_use_gpu(b->gpus));
    need = b->lora.rank > 0
               ? sdp_state_lora_host_bytes(&cfg, &b->lora, dt)
               : sdp_state_host_bytes(&cfg, dt, gbf16 ? SDP_BF16 : SDP_F32,
                                      (sdp_cli_may_use_gpu(b->gpus) ? SDP_STATE_ON_GPU : 0) |
                                          (b->work_on_gpu ? SDP_STATE_WORK_STAGED : 0) |
                                          (b->embed_on_gpu ? SDP_STATE_EMBED_STAGED : 0));
    avail = sdp_rt_host_mem_available();
    if (avail > 0 && need > avail) {
        sdp_err(-ENOMEM,
                "%s needs %.1f GiB of host memory for its training state, %.1f GiB available",
                b->model, need / 1073741824.0, avail / 1073741824.0);
        return SDP_EXIT_FAILURE;
    }
    ids = malloc(ntok * sizeof(*ids));
    targets = malloc(ntok * sizeof(*targets));
    next_ids = malloc(ntok * sizeof(*next_ids));
    next_targets = malloc(ntok * sizeof(*next_targets));
    step_s = calloc((size_t)total, sizeof(*step_s));
    if (!ids || !targets || !next_ids || !next_targets || !step_s) {
        sdp_err(-ENOMEM, "batch buffers");
        goto out_free;
    }
    sdp_policy_slidedp_configure(b->staging_depth, b->prefetch_groups);
    if (b->pipe > 0) { /* sdp-roundpipe: the split of this model over the stage workers */
        b->r->model = cfg;
        if (sdp_cli_roundpipe_configure(b->r, b->pipe))
            goto out_free;
    }
    rc_conf.sched_name = b->sched;
    rc_conf.sched_policy = policy;
    rc_conf.ncpus = b->cpus;
    if (b->pipe > 1 && b->gpus <= 0)
        rc_conf.rank_cpus = b->pipe; /* stage workers standing in for GPUs, as CPU ranks */
    rc_conf.ncuda = b->gpus;
    rc_conf.require_cuda = b->gpus > 0;
    rc_conf.gpu_memory_gib = b->gpu_memory_gib;
    if (sdp_rt_init(&rc_conf))
        goto out_free;
    t_rt = sdp_cli_now_s();
    if (b->mem_log && sdp_rt_memlog_start(b->mem_log, 0.5))
        goto out;
    gbf16 = grad_bf16(b, sdp_rt_ncuda() > 0);
    if (sdp_cli_tasks_init(b->r->machine, sdp_rt_ncuda()) ||
        sdp_tasks_place_compute(sdp_rt_ncuda() > 0) ||
        (sdp_rt_ncuda() > 0 && sdp_tasks_check_gpu_model(&cfg)) ||
        state_create(b, &st, &cfg, dt, gbf16))
        goto out;
    state_made = 1;
    t_state = sdp_cli_now_s();
    if ((b->trace || b->events) && sdp_trace_start())
        goto out;
    t_init = sdp_cli_now_s();
    sdp_state_init_random(&st, b->seed);
    if (b->lora.rank > 0) /* PEFT's initialisation: A uniform, B zeros */
        sdp_state_lora_init(&st, b->seed);
    SDP_INFO("random initialisation of %zu parameters: %.1f s", sdp_model_num_params(&cfg),
             sdp_cli_now_s() - t_init);
    gc.micro_batch = b->micro;
    gc.n_micro = b->batch / b->micro;
    gc.seq_len = b->seq;
    sdp_recipe_activations(b->activations, &gc.recompute, &gc.offload_inputs); /* checked */
    gc.beta1 = 0.9;
    gc.beta2 = 0.95;
    gc.eps = 1e-8;
    gc.weight_decay = 0.1;
    gc.max_grad_norm = b->max_grad_norm;
    gc.embed_early = b->embed_early_off ? -1 : 0;
    gc.mlp_early = b->mlp_early_opt;
    gc.window = b->window;
    gc.bwd_lookahead = b->lookahead;
    gc.keep_last = b->keep_last;
    gc.keep_mlp = b->keep_mlp;
    gc.gpu_limit_bytes =
        b->gpu_memory_gib > 0 ? (unsigned long long)(b->gpu_memory_gib * 1073741824.0) : 0;
    gc.residual_f32 = b->residual_f32;
    if (sdp_rt_ncuda() > 0) { /* the saved inputs on the host where the GPU limit binds */
        sdp_cli_fit_activations(b->r, &cfg, dt, &gc,
                                b->gpu_memory_gib > 0
                                    ? (unsigned long long)(b->gpu_memory_gib * 1073741824.0)
                                    : sdp_rt_gpu_mem_total(0));
    }
    /* auto: LoRA's adapters on the GPU where they fit (sdp_cli_gpu_update) */
    gc.gpu_update =
        sdp_rt_ncuda() == 0
            ? b->gpu_update
            : sdp_cli_gpu_update(
                  b->gpu_update, &b->lora, &cfg, b->ranks, sdp_graph_gpu_bytes_min(&cfg, dt, &gc),
                  b->gpu_memory_gib > 0 ? (unsigned long long)(b->gpu_memory_gib * 1073741824.0)
                                        : sdp_rt_gpu_mem_total(0));
    gc.gpu_update = gc.gpu_update > 0 ? gc.gpu_update : 0;
    gc.embed_lookup_host = b->lookup_host;
    gc.lora = b->lora;
    norms_at = sdp_cli_place_norms(b->ranks, b->window);
    gc.nranks = b->ranks;
    gc.grad_route = b->grad_route_gpu ? SDP_ROUTE_GPU_REDUCE : SDP_ROUTE_CPU_REDUCE;
    gc.param_route = b->sharded ? SDP_ROUTE_SHARDED : SDP_ROUTE_REPLICATED;
    if (b->ranks > 1 && (sdp_rt_rank_workers(b->ranks, wid) || sdp_tasks_set_ranks(b->ranks, wid) ||
                         (b->nccl && sdp_tasks_use_nccl(b->ranks, wid))))
        goto out;
    { /* the plan once: the graph's, and the model's input */
        struct sdp_plan plan;
        if (sdp_plan_init(&plan, &st, &gc))
            goto out;
        predict(b, &cfg, &plan, &pred);
        int made = sdp_graph_create_plan(&g, &st, &gc, &plan);
        sdp_plan_free(&plan);
        if (made)
            goto out; /* rc is still SDP_EXIT_FAILURE */
    }
    if (b->ranks == 1 && sdp_rt_rank_workers(1, wid))
        goto out;
    t_graph = sdp_cli_now_s();
    /* where a run's minutes go besides its steps (on a GPU host, pinning the state dominates) */
    SDP_INFO("start-up %.1f s: StarPU %.1f s, state %.1f s, initialisation and graph %.1f s",
             t_graph - t_go, t_rt - t_go, t_state - t_rt, t_graph - t_state);
    /* Pipelined (the default, as `train` runs): a step is submitted as soon as the previous one's
     * loss and norm are known, so its forward overlaps the previous updates; a step's time is the
     * interval between two returns of sdp_graph_step.  The timed steps start after a barrier and
     * end with one, and tokens_per_s counts that whole span (the pipeline's fill and drain
     * included).  --barrier waits for every task after each step instead (no overlap across
     * steps). */
    t_prev = sdp_cli_now_s();
    for (int s = 0; s < total; s++) {
        struct sdp_step_result res;
        if (s == b->warmup) {
            if (sdp_rt_wait_all())
                goto out;
            sdp_rt_bus_count_start();
            t_start = t_prev = sdp_cli_now_s();
        }
        if (s == 0) {
            draw(b->seed, s, cfg.vocab_size, ids, targets, ntok);
        } else { /* drawn ahead by the step before */
            int32_t *swap = ids;
            ids = next_ids;
            next_ids = swap;
            swap = targets;
            targets = next_targets;
            next_targets = swap;
        }
        if (s + 1 < total) { /* the next step's ids, told ahead (sdp_graph_set_next) */
            draw(b->seed, s + 1, cfg.vocab_size, next_ids, next_targets, ntok);
            sdp_graph_set_next(g, next_ids);
        }
        if (sdp_graph_step(g, s, ids, targets, 1e-5, 1, &res) || (b->barrier && sdp_rt_wait_all()))
            goto out;
        sdp_trace_bus(s); /* the bus bytes since the previous step's return, when tracing */
        step_s[s] = sdp_cli_now_s() - t_prev;
        loss = res.loss;
        routed += s >= b->warmup ? res.experts_routed : 0;
        experts += s >= b->warmup ? res.experts_total : 0;
        t_prev += step_s[s];
        for (int d = 0; d < sdp_rt_ncuda(); d++) {
            double used = sdp_rt_gpu_mem_used(d) / 1073741824.0;
            gpu_peak = used > gpu_peak ? used : gpu_peak;
        }
        SDP_INFO("step %d/%d%s: %.3f s, %.0f tokens/s, loss %.4f", s + 1, total,
                 s < b->warmup ? " (warm-up)" : "", step_s[s], ntok / step_s[s], res.loss);
    }
    if (sdp_rt_wait_all()) /* the last updates: the drain of the pipeline */
        goto out;
    span = sdp_cli_now_s() - t_start;
    if (sdp_env_is("SDP_GPU_CENSUS", "1"))
        sdp_rt_gpu_census("after the last step");
    /* the memory log covers the steps; its last peak is then at most the result's host peak,
     * read below (writing the event log afterwards may take more) */
    sdp_rt_memlog_stop();
    {
        double *timed = step_s + b->warmup, median, tps, steady = 0.0;
        json_t *settings, *o, *steps_arr = json_array();
        json_t *routes = json_array();
        struct sdp_rank_bytes moved[SDP_MAX_RANKS];
        char *line;
        /* bytes per rank per timed step: the design's formulas and what StarPU moved */
        sdp_rt_bus_count_read(b->ranks, wid, moved);
        for (int r = 0; r < b->ranks; r++)
            json_array_append_new(routes, route_json(g, r, b->ranks, &moved[r], b->steps));
        for (int s = 0; s < b->steps; s++)
            json_array_append_new(steps_arr, json_real(timed[s]));
        median = sdp_cli_median(timed, b->steps);
        /* with a barrier every step is alike; pipelined, the span of all timed steps counts */
        tps = b->barrier ? ntok / median : (double)ntok * b->steps / span;
        if (!b->barrier && b->steps >= 2) /* the steady period: the intervals after the first */
            steady = ntok / sdp_cli_median(timed + 1, b->steps - 1);
        settings = json_pack(
            "{s:s, s:s, s:i, s:s, s:f, s:s, s:i, s:i, s:f, s:i, s:i, s:s, s:i, s:s, s:s, s:f}",
            "precision", b->precision, "grad_dtype", gbf16 ? "bf16" : "fp32", "micro_batch",
            b->micro, "activations", sdp_recipe_activations_name(gc.recompute, gc.offload_inputs),
            "chunk_mib", b->chunk_mib, "sched", b->sched ? b->sched : "default", "gpus",
            sdp_rt_ncuda(), "cpu_workers", sdp_rt_ncpus(), "gpu_memory_gib", b->gpu_memory_gib,
            "window", b->window, "bwd_lookahead", b->lookahead, "norms", norms_at, "ranks",
            b->ranks, "grad_route", b->grad_route_gpu ? "gpu" : "cpu", "param_route",
            b->sharded ? "sharded" : "replicated", "max_grad_norm", b->max_grad_norm);
        /* as asked: 0 / -1 = the policy's default (its log line says which it used) */
        json_object_set_new(settings, "keep_last", json_integer(b->keep_last));
        json_object_set_new(settings, "keep_mlp", json_integer(b->keep_mlp));
        json_object_set_new(settings, "residual_dtype",
                            json_string(sdp_plan_residual_f32(&gc, dt) ? "fp32" : "bf16"));
        json_object_set_new(settings, "gpu_update", json_integer(gc.gpu_update));
        if (b->pipe > 0) { /* sdp-roundpipe's stage workers, micro-batches in flight, LPT */
            json_object_set_new(settings, "stage_workers", json_integer(b->pipe));
            json_object_set_new(settings, "in_flight",
                                json_integer(b->r->in_flight > 0 ? b->r->in_flight : b->pipe + 1));
            json_object_set_new(settings, "lpt_fetch",
                                json_boolean(sdp_env_long("SDP_LPT_FETCH", 0) > 0));
        }
        json_object_set_new(settings, "staging_depth", json_integer(b->staging_depth));
        json_object_set_new(settings, "prefetch_groups", json_integer(b->prefetch_groups));
        json_object_set_new(settings, "collectives", json_string(b->nccl ? "nccl" : "starpu"));
        json_object_set_new(settings, "embed_early", json_boolean(!b->embed_early_off));
        json_object_set_new(settings, "mlp_early",
                            json_string(b->mlp_early_opt < 0   ? "off"
                                        : b->mlp_early_opt > 0 ? "on"
                                                               : "default"));
        json_object_set_new(settings, "work_home", json_string(b->work_on_gpu ? "gpu" : "host"));
        json_object_set_new(settings, "embed_home",
                            json_string(b->embed_on_gpu || b->work_on_gpu ? "gpu" : "host"));
        json_object_set_new(settings, "embed_lookup",
                            json_string(b->lookup_host ? "host" : "compute"));
        /* steps whose late embedding rows waited for the next step's lookup (defer_rows) */
        json_object_set_new(settings, "deferred_steps", json_integer(sdp_graph_deferred_steps(g)));
        json_object_set_new(settings, "timing", json_string(b->barrier ? "barrier" : "pipelined"));
        o = json_pack("{s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:o, s:o}", "system",
                      "slidedp", "model", b->model, "batch", b->batch, "seq", b->seq,
                      "tokens_per_s", tps, "model_tflops", tps * flops_per_token(b, &cfg) / 1e12,
                      "step_s_median", median, "gpu_peak_gib", gpu_peak, "host_peak_gib",
                      sdp_rt_host_peak_rss() / 1073741824.0, "step_s", steps_arr, "settings",
                      settings);
        json_object_set_new(o, "loss", json_real(loss)); /* of the last step */
        json_object_set_new(o, "lora_rank", json_integer(b->lora.rank));
        if (experts > 0) /* the share of the sparse layers' experts a timed step routed to */
            json_object_set_new(o, "experts_routed_share", json_real((double)routed / experts));
        if (b->lora.rank > 0)
            json_object_set_new(settings, "lora", lora_json(&b->lora));
        json_object_set_new(o, "bytes_per_rank_per_step", routes);
        json_object_set_new(o, "startup_s",
                            json_pack("{s:f, s:f, s:f, s:f}", "total", t_graph - t_go, "starpu",
                                      t_rt - t_go, "state", t_state - t_rt, "init_graph",
                                      t_graph - t_state));
        if (pred)
            json_object_set_new(o, "predicted", pred), pred = NULL;
        if (steady > 0) /* pipelined: tokens per steady step (the intervals after the first) */
            json_object_set_new(o, "tokens_per_s_steady", json_real(steady));
        line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        printf("%s\n", line);
        fflush(stdout);
        free(line);
        json_decref(o);
    }
    rc = SDP_EXIT_OK;
    if ((b->trace || b->events) && sdp_trace_write(b->events, b->trace))
        rc = SDP_EXIT_FAILURE;
out:
    json_decref(pred);
    t_end = sdp_cli_now_s();
    sdp_graph_destroy(g);
    if (state_made)
        sdp_state_destroy(&st);
    sdp_trace_stop();
    sdp_rt_memlog_stop();
    sdp_tasks_shutdown();
    sdp_rt_shutdown();
    if (t_graph > 0.0)
        SDP_INFO("shutdown %.1f s, whole run %.1f s", sdp_cli_now_s() - t_end,
                 sdp_cli_now_s() - t_go);
out_free:
    free(ids);
    free(next_ids);
    free(next_targets);
    free(targets);
    free(step_s);
    return rc;
}

/* The run's settings from the options parsed into r (bench's defaults where they differ). */
static void from_recipe(struct sdp_recipe *r, struct bench_opts *b)
{
    memset(b, 0, sizeof(*b));
    b->model = r->bench_model;
    b->sched = r->sched;
    b->precision = r->precision == SDP_PREC_FP32 ? "fp32" : "bf16";
    b->activations = sdp_recipe_activations_name(r->recompute, r->act_offload);
    b->trace = r->trace;
    b->events = r->events;
    b->grad_dtype = r->grad_bf16 < 0 ? "auto" : r->grad_bf16 ? "bf16" : "fp32";
    b->mem_log = r->mem_log;
    b->batch = r->global_batch;
    b->micro = r->micro_batch;
    b->seq = r->seq_len;
    b->steps = r->steps;
    b->warmup = r->warmup;
    b->gpus = r->gpus;
    b->cpus = r->cpus;
    b->window = r->window;
    b->ranks = r->ranks;
    b->grad_route_gpu = r->grad_route_gpu;
    b->sharded = r->param_sharded;
    b->embed_early_off = r->embed_early < 0;
    b->mlp_early_opt = r->mlp_early;
    b->work_on_gpu = r->work_on_gpu;
    b->embed_on_gpu = r->embed_on_gpu;
    b->lookup_host = r->embed_lookup_host;
    b->lookahead = r->bwd_lookahead;
    b->staging_depth = r->staging_depth;
    b->prefetch_groups = r->prefetch_groups;
    b->nccl = r->nccl;
    b->barrier = r->barrier;
    b->keep_last = r->keep_last;
    b->keep_mlp = r->keep_mlp;
    b->residual_f32 = r->residual_f32;
    b->gpu_update = r->gpu_update;
    b->chunk_mib = r->chunk_mib;
    b->gpu_memory_gib = r->gpu_memory_gib;
    b->max_grad_norm = r->max_grad_norm;
    b->seed = r->seed;
    b->r = r;
}

int sdp_cli_bench(int argc, char **argv)
{
    static struct sdp_recipe r; /* 20 KB of paths: keep it off the stack */
    struct bench_opts b;
    int first, rc;

    sdp_recipe_defaults(&r);
    /* bench's defaults where they differ from a recipe's (the registry's bench_def) */
    r.global_batch = 16;
    r.micro_batch = 0; /* batch / ranks */
    r.steps = 5;
    r.warmup = 2;
    r.max_grad_norm = 0;
    snprintf(r.sched, sizeof(r.sched), "%s", "sdp-slidedp");
    rc = sdp_options_parse("bench", SDP_CMD_BENCH, argc, argv, &r, &first, usage_head, usage_tail);
    if (rc)
        return rc > 0 ? SDP_EXIT_OK : SDP_EXIT_USAGE;
    if (!r.bench_model || first != argc) {
        sdp_options_usage(stderr, SDP_CMD_BENCH, usage_head, usage_tail);
        return SDP_EXIT_USAGE;
    }
    if (r.chunk_mib != 0 && r.chunk_mib < 0.004) { /* at least 4 KiB of fp32 master, or 0 */
        fprintf(stderr, "slidedp bench: --chunk-mib expects 0 (unchunked) or >= 0.004, got %g\n",
                r.chunk_mib);
        return SDP_EXIT_USAGE;
    }
    if (!strcmp(r.sched, "sdp-roundpipe")) { /* the ranks are the pipeline's: one graph rank */
        int width = r.ranks > 1 ? r.ranks : 1;
        r.micro_batch = r.micro_batch > 0 ? r.micro_batch : r.global_batch / width;
        r.ranks = 1;
        from_recipe(&r, &b);
        b.pipe = width;
    } else {
        if (r.in_flight > 0)
            SDP_WARN("--in-flight is sdp-roundpipe's: ignored by %s", r.sched);
        from_recipe(&r, &b);
        b.pipe = 0;
    }
    if (sdp_cli_bench_lora_options(&r, &b.lora))
        return SDP_EXIT_USAGE;
    r.lora = b.lora; /* the adapters as resolved, for the prediction */
    if (b.micro == 0)
        b.micro = b.batch / b.ranks;
    if (b.window < 0)
        b.window = b.gpu_memory_gib > 0 ? 2 : 0;
    r.micro_batch = b.micro; /* the run as it will be, for the prediction */
    r.window = b.window;
    if (b.batch % b.ranks || (b.batch / b.ranks) % b.micro) {
        fprintf(stderr,
                "slidedp bench: --batch %d must split into %d ranks of whole micro-batches of "
                "%d\n",
                b.batch, b.ranks, b.micro);
        return SDP_EXIT_USAGE;
    }
    return run(&b);
}
