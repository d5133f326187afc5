/* SPDX-License-Identifier: MIT */
/* `slidedp train RECIPE.yaml`: check everything that can be checked before StarPU starts
 * (cli/train_checks.c), find the run directory's checkpoint (cli/train_rundir.c), start StarPU,
 * build the state and the step's graph, run the steps (cli/train_loop.c), and write the trained
 * model as a Hugging Face directory when the recipe names a run directory.  Tests: tests/e2e/. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "codelets/sdp_tasks.h"
#include "graph/plan.h"
#include "policies/sdp_policies.h"
#include "cli/cli.h"
#include "cli/simulate.h"
#include "cli/options.h"
#include "cli/predict_cli.h"
#include "cli/train_internal.h"
#include "base/crc32c.h"
#include "runtime/init.h"
#include "runtime/nodes.h"
#include "runtime/peft.h"
#include "base/sdp_log.h"
#include "runtime/tensor.h"
#include "runtime/trace.h"

static const char usage_head[] =
    "usage: slidedp train RECIPE.yaml [options]\n"
    "\n"
    "Train the model of RECIPE.yaml (docs/options.md lists its keys).  A flag overrides the\n"
    "recipe key named after it.\n";

static const char usage_tail[] =
    "\n"
    "The run directory (output.dir, --output) holds one run: its checkpoints, final/, COMPLETE,\n"
    "run.json and a lock (a second run on it is refused).  Running the same command again\n"
    "resumes from the newest valid checkpoint; a finished run is left as it is.  --no-resume is\n"
    "refused on a directory that holds a run; --force-new moves that run to DIR/previous-N.\n"
    "\n"
    "SIGUSR1, SIGTERM or SIGINT (Ctrl-C): checkpoint at the next step boundary and exit 0\n"
    "(exit 1 without a run directory: nothing was saved); a second Ctrl-C exits at once (130).\n"
    "Under Slurm, SLURM_JOB_ID names the default run directory (runs/<recipe>-<job id>) and\n"
    "SLURM_CPUS_PER_TASK the CPU workers.\n"
    "\n"
    "Every output (the metrics, --trace and --events files, the run directory) is checked\n"
    "against the inputs and for being writable before the run starts (exit 2 if not).\n"
    "\n"
    "exit status: 0 success, 1 runtime failure, 2 usage error\n";

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

/* The graph's configuration from the recipe (the plan refines it per layer). */
static void graph_conf(const struct sdp_recipe *r, struct sdp_graph_conf *gc)
{
    sdp_recipe_graph_conf(r, gc);
    gc->doc_mask = r->doc_mask;
    gc->doc_positions = r->doc_positions;
    gc->allgather = sdp_rt_nodes_allgather;
    sdp_cli_place_norms(r->nodes > 1 ? 2 : r->ranks, gc->window);
}

/* The state: with lora:, the frozen base and the adapters (sdp_state_create_lora). */
static int state_create(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    size_t chunk = sdp_cli_chunk_bytes(r->chunk_mib, &r->model);
    unsigned flags = (sdp_rt_ncuda() > 0 ? SDP_STATE_ON_GPU : 0) |
                     (r->work_on_gpu ? SDP_STATE_WORK_STAGED : 0) |
                     (r->embed_on_gpu ? SDP_STATE_EMBED_STAGED : 0);
    if (r->lora.rank > 0)
        return sdp_state_create_lora(&t->st, &r->model, &r->lora, t->work_dt, chunk, flags);
    return sdp_state_create_ex(&t->st, &r->model, t->work_dt, chunk, t->grad_dt, flags);
}

/* StarPU, the codelets, and the state: resumed from the checkpoint, loaded from the model
 * directory or drawn from the seed.  @return an exit status. */
static int start(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    struct sdp_rt_conf rc_conf = { 0 };

    sdp_policy_slidedp_configure(r->staging_depth, r->prefetch_groups);
    if (t->pipe > 0 && sdp_cli_roundpipe_configure(r, t->pipe))
        return SDP_EXIT_FAILURE;
    rc_conf.sched_name = r->sched;
    rc_conf.sched_policy = t->policy;
    rc_conf.ncpus = r->cpus;
    /* CPU ranks: one worker each, even on fewer cores (over several nodes StarPU-MPI keeps a core
     * for its thread) */
    if (r->ranks > 1 && r->gpus <= 0 && r->cpus == 0 &&
        sysconf(_SC_NPROCESSORS_ONLN) - (r->nodes > 1) < r->ranks)
        rc_conf.ncpus = r->ranks;
    if (t->pipe > 1 && r->gpus <= 0 && r->cpus == 0 && sysconf(_SC_NPROCESSORS_ONLN) < t->pipe)
        rc_conf.ncpus = t->pipe; /* sdp-roundpipe's stage workers on CPU workers */
    if (t->pipe > 1 && r->gpus <= 0)
        rc_conf.rank_cpus = t->pipe; /* standing in for GPUs, as CPU ranks */
    if (r->ranks > 1 && r->gpus <= 0)
        rc_conf.rank_cpus = r->ranks;
    rc_conf.ncuda = r->gpus;
    rc_conf.require_cuda = r->gpus > 0;
    rc_conf.gpu_memory_gib = r->gpu_memory_gib;
    if (sdp_rt_init(&rc_conf))
        return SDP_EXIT_FAILURE;
    t->started = 1;
    if (sdp_train_nodes_gpus() != SDP_EXIT_OK)
        return SDP_EXIT_USAGE;
    sdp_train_install_signals(); /* over StarPU's SIGINT handler (STARPU_CATCH_SIGNALS) */
    t->grad_dt = sdp_recipe_grad_bf16(r, sdp_rt_ncuda() > 0) ? SDP_BF16 : SDP_F32;
    /* the auto policy's reduced pipeline before the run's state and its trace */
    if (sdp_cli_tasks_init(r->machine, sdp_rt_ncuda()) ||
        sdp_tasks_place_compute(sdp_rt_ncuda() > 0) ||
        (sdp_rt_ncuda() > 0 && sdp_tasks_check_gpu_model(&r->model)) || sdp_train_auto_measure(t))
        return SDP_EXIT_FAILURE;
    if ((r->trace || r->events) && !r->print_plan &&
        (sdp_trace_start() || sdp_train_nodes_trace(r->ranks) != SDP_EXIT_OK))
        return SDP_EXIT_FAILURE;
    if (state_create(t))
        return SDP_EXIT_FAILURE;
    t->state_made = 1;
    if (sdp_rt_ncuda() > 0 && sdp_train_check_gpu_memory(t->r, t->work_dt))
        return SDP_EXIT_FAILURE;
    /* a LoRA checkpoint holds the adapters alone: the frozen base comes from where it came */
    if (t->resuming && r->lora.rank > 0 &&
        (r->model_path[0] ? sdp_state_load_hf(&t->st, r->model_path)
                          : (sdp_state_init_random(&t->st, r->seed), 0)))
        return SDP_EXIT_FAILURE;
    if (t->resuming) {
        if (sdp_ckpt_load(t->ckpath, &t->st, &t->info))
            return SDP_EXIT_FAILURE;
        sdp_data_seek(&t->data, t->info.data_epoch, t->info.data_index);
        t->first = t->info.step;
        t->last_loss = t->info.last_loss; /* a run resumed at its last step knows its final loss */
        SDP_INFO("resuming from %s: step %d of %d", t->ckpath, t->first, r->steps);
    } else if (r->print_plan) {
        /* the plan needs the state's layout, not its values */
    } else if (r->model_path[0]) {
        if (sdp_state_load_hf(&t->st, r->model_path))
            return SDP_EXIT_FAILURE;
    } else {
        sdp_state_init_random(&t->st, r->seed);
    }
    if (!t->resuming && r->lora.rank > 0 && !r->print_plan) {
        sdp_state_lora_init(&t->st, r->seed);
        if (r->lora_init[0] && sdp_state_load_peft(&t->st, r->lora_init))
            return SDP_EXIT_FAILURE;
    }
    return SDP_EXIT_OK;
}

/* The memory the run holds and needs, before its first step: host (pinned and pageable, held
 * now by the state and the graph, and a step's activations, estimated) and GPU (the least a device
 * needs, and the limit). */
/* bytes as "123.4 MiB" or "12.34 GiB" into buf */
static const char *human(char *buf, size_t len, double bytes)
{
    if (bytes < 1073741824.0)
        snprintf(buf, len, "%.1f MiB", bytes / 1048576.0);
    else
        snprintf(buf, len, "%.2f GiB", bytes / 1073741824.0);
    return buf;
}

static void print_memory(const struct sdp_train *t, const struct sdp_graph_conf *gc)
{
    const struct sdp_recipe *r = t->r;
    size_t pinned, pageable;
    char gpu[160] = "", b[4][32];
    sdp_rt_tensor_host_bytes(&pinned, &pageable);
    if (sdp_rt_ncuda() > 0)
        snprintf(gpu, sizeof(gpu), "; GPU: at least %s a device, %s %s",
                 human(b[0], sizeof(b[0]), sdp_graph_gpu_bytes_min(&r->model, t->work_dt, gc)),
                 r->gpu_memory_gib > 0 ? "limit" : "of",
                 human(b[1], sizeof(b[1]),
                       r->gpu_memory_gib > 0 ? r->gpu_memory_gib * 1073741824.0
                                             : (double)sdp_rt_gpu_mem_total(0)));
    SDP_INFO("memory before step 1: host %s held (%s pinned) and about %s of activations in a "
             "step, of %s available%s",
             human(b[2], sizeof(b[2]), (double)(pinned + pageable)),
             human(b[3], sizeof(b[3]), (double)pinned), human(b[0], sizeof(b[0]), t->host_act),
             human(b[1], sizeof(b[1]), t->host_avail), gpu);
}

/* The step-time model's prediction of the plan the run built, logged before step 1. */
static void predict(struct sdp_train *t, const struct sdp_plan *plan)
{
    int ngpus = sdp_rt_ncuda() > 0 ? (t->r->ranks > 1 ? t->r->ranks : 1) : 0;
    struct sdp_cli_machine cm;
    struct sdp_predict p;
    char line[4600];
    sdp_cli_machine_get(t->r->machine, ngpus, 0, &cm);
    if (sdp_cli_predict_plan(t->r, &t->r->model, plan, ngpus, &cm, &p))
        return; /* logged; the run does not need it */
    t->pred_step_s = p.step_s;
    sdp_cli_predict_line(&p, &cm, line, sizeof(line));
    SDP_INFO("predicted: %s", line);
}

/* The plan (the recipe's, and the auto policy's rows when with_auto) and the step's graph on the
 * state as it stands; the first time, the prediction (--print-plan: the plan printed instead).
 * @return an exit status */
static int graph_make(struct sdp_train *t, int with_auto, int first)
{
    const struct sdp_recipe *r = t->r;
    struct sdp_graph_conf gc = { 0 };
    struct sdp_plan plan;
    int rc;

    graph_conf(r, &gc);
    gc.grad_route_gpu = t->routes;
    if (plan_make(r, &t->st, &gc, &plan))
        return r->nplan ? SDP_EXIT_USAGE : SDP_EXIT_FAILURE;
    /* the layers updated on the GPU for the host's budget hold for the recipe's plan too (the
     * validation's other side) */
    if ((with_auto || t->autop.gpu_update > 0) &&
        (sdp_train_auto_budget(t, &plan) || (with_auto && sdp_train_auto_apply(t, &plan)) ||
         sdp_plan_check(&plan, &t->st, &gc))) {
        sdp_plan_free(&plan);
        return SDP_EXIT_FAILURE;
    }
    if (first && !r->print_plan)
        predict(t, &plan);
    if (r->print_plan) {
        sdp_plan_print(&plan, stdout);
        sdp_plan_free(&plan);
        return SDP_EXIT_OK;
    }
    rc = sdp_graph_create_plan(&t->g, &t->st, &gc, &plan);
    sdp_plan_free(&plan);
    return rc ? SDP_EXIT_FAILURE : SDP_EXIT_OK;
}

int sdp_train_regraph(struct sdp_train *t, int with_auto)
{
    if (sdp_rt_wait_all())
        return SDP_EXIT_FAILURE;
    sdp_graph_destroy(t->g);
    t->g = NULL;
    return graph_make(t, with_auto, 0);
}

/* The ranks, the plan and the step's graph (--print-plan: print the plan instead).  @return an
 * exit status. */
static int build(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    struct sdp_graph_conf gc = { 0 };
    int rc;

    graph_conf(r, &gc);
    if (r->param_delay)
        SDP_WARN("train.param_delay = 1: every step computes with weights one update old "
                 "(asynchronous optimizer); SlideDP's invariant 3 does not hold");
    if (sdp_train_nodes_exchange(r) != SDP_EXIT_OK)
        return SDP_EXIT_FAILURE;
    if (r->ranks > 1) {
        int wid[SDP_MAX_RANKS];
        if (sdp_rt_rank_workers(r->ranks, wid) || sdp_tasks_set_ranks(r->ranks, wid))
            return SDP_EXIT_FAILURE;
        if (r->nccl && sdp_tasks_use_nccl(r->ranks, wid))
            return SDP_EXIT_FAILURE;
        SDP_INFO("%d data-parallel ranks on %s workers, %s parameters, %s reduction of gradients%s",
                 r->ranks, sdp_rt_ncuda() > 0 ? "CUDA" : "CPU",
                 r->param_sharded ? "sharded" : "replicated", r->grad_route_gpu ? "GPU" : "CPU",
                 r->nccl ? " (NCCL where it is on the GPUs)" : "");
    }
    if ((rc = graph_make(t, t->autop.nrows > 0, 1)) != SDP_EXIT_OK || r->print_plan)
        return rc;
    print_memory(t, &gc);
    SDP_INFO(
        "training %s (%zu parameters, %d layers) for %d steps: %d x %d sequences of %d tokens, "
        "%s, lr %.3g, data %s (%llu sequences)%s%s",
        sdp_model_arch_name(r->model.arch), sdp_model_num_params(&r->model), r->model.num_layers,
        r->steps, gc.n_micro * gc.nodes, r->micro_batch, r->seq_len,
        t->work_dt == SDP_BF16 ? "bf16" : "fp32", r->lr, r->data_train,
        (unsigned long long)t->data.nseq, r->output_dir[0] ? ", run directory " : "",
        r->output_dir);
#ifdef SDP_SIMGRID
    SDP_INFO("simulation: no codelet runs; the losses, norms and weights are not the model's, the "
             "times are the simulated machine's");
#endif
    sdp_train_auto_start(t);
    return SDP_EXIT_OK;
}

/* The closing line: the steps run, their time and mean throughput, the last loss, the peak
 * resident host memory. */
static void print_summary(const struct sdp_train *t, double seconds)
{
    const struct sdp_recipe *r = t->r;
    int last = t->stopped ? t->done : r->steps, n = last - t->first;
    struct rusage ru;
    double rss = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss / 1048576.0 : 0.0;
    if (n <= 0)
        return;
#ifdef SDP_SIMGRID
    SDP_INFO("%s: steps %d-%d in %.3f simulated s, %.0f tokens/s (no loss: a simulation)",
             t->stopped ? "stopped" : "done", t->first + 1, last, seconds,
             seconds > 0 ? (double)n * r->global_batch * r->seq_len / seconds : 0.0);
    (void)rss;
#else
    SDP_INFO("%s: steps %d-%d in %.1f s, %.0f tokens/s, last loss %.4f, peak host memory %.2f GiB "
             "resident",
             t->stopped ? "stopped" : "done", t->first + 1, last, seconds,
             seconds > 0 ? (double)n * r->global_batch * r->seq_len / seconds : 0.0, t->last_loss,
             rss);
#endif
    if (t->timed > 0 && t->pred_step_s > 0)
        SDP_INFO("step time: measured %.3f s (the mean of steps %d-%d), predicted %.3f s (%+.0f%%)",
                 t->timed_s / t->timed, last - t->timed + 1, last, t->pred_step_s,
                 100.0 * (t->pred_step_s / (t->timed_s / t->timed) - 1.0));
}

static int run(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    int first;
    size_t n = (size_t)sdp_train_nodes_rows(r, &first) * r->seq_len; /* this node's rows */
    double t0;
    int rc;

    if ((rc = sdp_train_check(t)) != SDP_EXIT_OK ||
        (rc = sdp_train_nodes_rundir(t)) != SDP_EXIT_OK ||
        (rc = sdp_train_metrics_open(t)) != SDP_EXIT_OK)
        return rc;
    t->ids = malloc(n * sizeof(*t->ids));
    t->targets = malloc(n * sizeof(*t->targets));
    t->next_ids = malloc(n * sizeof(*t->next_ids));
    t->next_targets = malloc(n * sizeof(*t->next_targets));
    if (r->doc_mask) {
        t->segs = malloc(n * sizeof(*t->segs));
        t->next_segs = malloc(n * sizeof(*t->next_segs));
    }
    if (!t->ids || !t->targets || !t->next_ids || !t->next_targets ||
        (r->doc_mask && (!t->segs || !t->next_segs))) {
        sdp_err(-ENOMEM, "batch buffers");
        return SDP_EXIT_FAILURE;
    }
    if ((rc = sdp_train_auto_plan(t)) != SDP_EXIT_OK || (rc = start(t)) != SDP_EXIT_OK ||
        (rc = build(t)) != SDP_EXIT_OK || r->print_plan)
        return rc;
    sdp_train_fingerprint(t);
    t0 = sdp_cli_now_s();
    rc = sdp_train_steps(t);
    t0 = sdp_cli_now_s() - t0;
    if (sdp_rt_wait_all() && rc == SDP_EXIT_OK)
        rc = SDP_EXIT_FAILURE;
    sdp_trace_bus(r->steps - 1); /* what the last step moved after it returned */
    if ((r->trace || r->events) && sdp_trace_write(r->events, r->trace))
        rc = SDP_EXIT_FAILURE;
    if (rc == SDP_EXIT_OK && !t->stopped && r->node == 0) /* node 0 writes for the run */
        rc = sdp_train_rundir_finish(t);
    if (rc == SDP_EXIT_OK && r->node == 0 &&
        sdp_train_moe_routing_save(t, t->stopped ? t->done : r->steps))
        rc = SDP_EXIT_FAILURE;
    if (rc == SDP_EXIT_OK)
        print_summary(t, t0);
    return rc;
}

static void train_free(struct sdp_train *t)
{
    sdp_graph_destroy(t->g);
    free(t->routes);
    if (t->state_made)
        sdp_state_destroy(&t->st);
    if (t->started) {
        sdp_trace_stop();
        sdp_tasks_shutdown();
        sdp_rt_shutdown();
    }
    sdp_train_metrics_commit(t, 0); /* a failed run: the old file stays, else its steps are kept */
    if (t->mf)
        fclose(t->mf);
    free(t->ids);
    free(t->targets);
    free(t->next_ids);
    free(t->next_targets);
    free(t->segs);
    free(t->next_segs);
    sdp_train_eval_close(t);
    sdp_data_close(&t->data);
}

int sdp_cli_train(int argc, char **argv)
{
    struct sdp_recipe r;
    int first, rc;

    /* a stop request before the first step is honoured there (after a checkpoint of the state) */
    sdp_train_install_signals();
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
    sdp_train_apply_slurm(&r);
    if (!r.sched[0]) /* the project's policy unless the recipe or the command line names one */
        snprintf(r.sched, sizeof(r.sched), "%s", "sdp-slidedp");
    {
        struct sdp_train t = { .r = &r, .last_loss = NAN };
        uint32_t args_crc = 0;
        for (int i = 0; i < argc; i++) /* the processes of several nodes compare theirs */
            args_crc = sdp_crc32c(args_crc, argv[i], strlen(argv[i]) + 1);
        if ((rc = sdp_train_nodes_setup(&t, args_crc)) != SDP_EXIT_OK)
            return rc;
        if (!strcmp(r.sched, "sdp-roundpipe")) { /* the ranks are the pipeline's, not the data's */
            t.pipe = r.ranks > 1 ? r.ranks : 1;
            r.ranks = 1;
        } else if (r.in_flight > 0) {
            SDP_WARN("train.in_flight (--in-flight) is sdp-roundpipe's: ignored by %s", r.sched);
        }
        rc = run(&t);
        train_free(&t);
    }
    return rc;
}
