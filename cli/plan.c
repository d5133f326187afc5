/* SPDX-License-Identifier: MIT */
/* `slidedp plan`: price a run before it runs.  The recipe's (or a preset's) plan, the step-time
 * model's prediction on this machine's calibration (cli/predict_cli.h), whether it fits the GPU
 * and the host, and a what-if table: each single change of chunk size, gradient return,
 * activation placement, lookahead, micro-batch or route, with its predicted gain.  No StarPU, no
 * state: it answers in well under a second.  Test: tests/e2e/test_e2e_plan_predict.sh. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "cli/predict_cli.h"
#include "formats/hfconfig.h"
#include "runtime/init.h"

static const char usage_head[] =
    "usage: slidedp plan RECIPE.yaml [options]\n"
    "       slidedp plan --model PRESET|CONFIG [--batch B] [--seq T] [options]\n"
    "\n"
    "Predict a run before it runs: the per-layer plan, the step time and tokens/s, what bounds\n"
    "the step, the GPU and host peaks, and what each single change would buy.  The machine's\n"
    "figures come from --machine (a file of `slidedp calibrate`), else the model's defaults.\n"
    "Without a recipe the run is bench's (random data, no clipping, one micro-batch a rank).\n"
    "With --nodes N the batch is the run's, over the ranks of N nodes, and the step pays the\n"
    "gradient's way between the nodes (--node-gbs, --node-latency-us, else the machine file's).\n";
static const char usage_tail[] =
    "\nexit status: 0 the plan fits, 1 it does not (by how much and what to change is printed),\n"
    "2 usage error\n";

#define MAX_WHATIF 24

struct whatif {
    char change[96];
    struct sdp_predict p;
    int fits;
};

/* What the run may use: the GPU limit (train.gpu_memory_gib, else the machine's GPU) and the
 * host's (train.host_memory_gib, else what this node has available). */
struct limits {
    double gpu, host;
};

static int fits(const struct sdp_predict *p, const struct limits *l, int ngpus)
{
    return (ngpus == 0 || l->gpu <= 0 || p->gpu_need_bytes <= l->gpu) &&
           (l->host <= 0 || p->host_bytes <= l->host);
}

/* Price r; 0 or an error (logged). */
static int price(const struct sdp_recipe *r, int ngpus, const struct sdp_cli_machine *cm,
                 struct sdp_predict *p)
{
    struct sdp_cli_run cr;
    int rc = sdp_cli_run_make(r, ngpus, &cr);
    if (!rc)
        rc = sdp_predict_step(&cr.run, &cm->mc, p);
    sdp_cli_run_free(&cr);
    return rc;
}

/* out[*n] = r, labelled; @return it, for the caller to move one knob */
static struct sdp_recipe *add(const struct sdp_recipe *r, struct sdp_recipe *out, char (*what)[96],
                              int *n, const char *key, const char *value)
{
    out[*n] = *r;
    snprintf(what[*n], sizeof(what[*n]), "%s: %s", key, value);
    return &out[(*n)++];
}

/* v as text in a static buffer of the caller's (one per call site is enough here) */
static const char *num(char *buf, int v)
{
    snprintf(buf, 16, "%d", v);
    return buf;
}

/* The single changes worth asking about for r: each a copy of r with one knob moved. */
static int changes(const struct sdp_recipe *r, int ngpus, struct sdp_recipe *out, char (*what)[96])
{
    static const int chunks[] = { 4, 16, 64 };
    int n = 0, L = r->model.num_layers, band = L / 4 > 0 ? L / 4 : 1;
    char b[16];
    for (int i = 0; i < 3; i++)
        if (chunks[i] != r->chunk_mib)
            add(r, out, what, &n, "train.chunk_mib", num(b, chunks[i]))->chunk_mib = chunks[i];
    if (ngpus > 0) { /* the other gradient return, where the rule lets it apply */
        int cur = sdp_recipe_grad_bf16(r, 1);
        struct sdp_recipe *a = add(r, out, what, &n, "train.grad_dtype", cur ? "fp32" : "bf16");
        a->grad_bf16 = !cur;
        n -= sdp_recipe_grad_bf16(a, 1) == cur;
    }
    if (r->recompute) {
        add(r, out, what, &n, "train.activations", "keep")->recompute = SDP_RECOMPUTE_NONE;
        if (r->recompute == SDP_RECOMPUTE_FULL && !r->act_offload)
            add(r, out, what, &n, "train.activations", "selective")->recompute =
                SDP_RECOMPUTE_SELECTIVE;
        if (!r->act_offload)
            add(r, out, what, &n, "train.activations", "offload")->act_offload = 1;
        if (r->recompute != SDP_RECOMPUTE_ATTN) { /* on the GPU: not offloaded */
            struct sdp_recipe *a = add(r, out, what, &n, "train.activations", "keep-attn");
            a->recompute = SDP_RECOMPUTE_ATTN;
            a->act_offload = 0;
        }
        if (r->keep_last + band <= L)
            add(r, out, what, &n, "train.keep_last", num(b, r->keep_last + band))->keep_last +=
                band;
        if (r->keep_last + r->keep_mlp + band <= L)
            add(r, out, what, &n, "train.keep_mlp", num(b, r->keep_mlp + band))->keep_mlp += band;
    } else {
        add(r, out, what, &n, "train.activations", "recompute")->recompute = SDP_RECOMPUTE_FULL;
    }
    if (r->bwd_lookahead != -1)
        add(r, out, what, &n, "train.bwd_lookahead", "-1")->bwd_lookahead = -1;
    if (r->micro_batch % 2 == 0)
        add(r, out, what, &n, "batch.micro", num(b, r->micro_batch / 2))->micro_batch /= 2;
    if (ngpus > 0 && r->gpu_memory_gib > 0)
        add(r, out, what, &n, "train.gpu_memory_gib", "0 (no limit)")->gpu_memory_gib = 0;
    if (r->ranks > 1) {
        struct sdp_recipe *a =
            add(r, out, what, &n, "train.grad_route", r->grad_route_gpu ? "cpu" : "gpu");
        a->grad_route_gpu = !r->grad_route_gpu, a->grad_route_groups[0] = '\0';
    }
    if (r->ranks > 1)
        add(r, out, what, &n, "train.param_route", r->param_sharded ? "replicated" : "sharded")
            ->param_sharded = !r->param_sharded;
    return n;
}

static int by_gain(const void *a, const void *b)
{
    double x = ((const struct whatif *)a)->p.step_s, y = ((const struct whatif *)b)->p.step_s;
    return (x > y) - (x < y);
}

/* The what-if table of r, fastest first.  @return its rows, or -1 (an error, logged) */
static int whatifs(const struct sdp_recipe *r, int ngpus, const struct sdp_cli_machine *cm,
                   const struct limits *l, struct whatif *w)
{
    struct sdp_recipe *alt = calloc(MAX_WHATIF, sizeof(*alt));
    char what[MAX_WHATIF][96];
    int n, k = 0;
    if (!alt)
        return sdp_err(-ENOMEM, "the what-if recipes"), -1;
    n = changes(r, ngpus, alt, what);
    for (int i = 0; i < n; i++) {
        struct limits li = *l;
        if (alt[i].gpu_memory_gib != r->gpu_memory_gib)
            li.gpu = cm->mc.gpu_mem_bytes;
        if (price(&alt[i], ngpus, cm, &w[k].p))
            continue; /* a change the model cannot price (logged) is left out */
        memcpy(w[k].change, what[i], sizeof(w[k].change));
        w[k].fits = fits(&w[k].p, &li, ngpus);
        k++;
    }
    free(alt);
    qsort(w, (size_t)k, sizeof(*w), by_gain);
    return k;
}

static double gib(double b)
{
    return b / 1073741824.0;
}

static void print_text(const struct sdp_recipe *r, const struct sdp_cli_run *cr,
                       const struct sdp_cli_machine *cm, const struct sdp_predict *p,
                       const struct limits *l, const struct whatif *w, int nw)
{
    char where[64] = "on CPU workers", nodes[32] = "";
    if (cr->plan.nodes > 1)
        snprintf(nodes, sizeof(nodes), "%d nodes of ", cr->plan.nodes);
    if (cr->ngpus > 0)
        snprintf(where, sizeof(where), "on %s%d GPU%s", nodes, cr->ngpus, cr->ngpus > 1 ? "s" : "");
    else if (nodes[0])
        snprintf(where, sizeof(where), "on %sCPU workers", nodes);
    printf("run: %s (%zu parameters, %d layers), %d x %d sequences of %d tokens a step, %s, "
           "chunks of %g MiB, %s\n",
           r->model_preset[0] ? r->model_preset : sdp_model_arch_name(r->model.arch),
           sdp_model_num_params(&r->model), r->model.num_layers, cr->run.n_micro, r->micro_batch,
           r->seq_len, where, r->chunk_mib, r->precision == SDP_PREC_BF16 ? "bf16" : "fp32");
    printf("machine: %s\n", cm->source);
    sdp_plan_print(&cr->plan, stdout);
    printf("\npredicted step: %.3f s, %.0f tokens/s, bound by %s\n", p->step_s, p->tokens_per_s,
           sdp_predict_res_name(p->bound));
    printf("  %-9s %10s %6s\n", "resource", "demand s", "busy");
    for (int i = 0; i < SDP_PRES_COUNT; i++)
        if (p->demand_s[i] > 0)
            printf("  %-9s %10.3f %5.0f%%\n", sdp_predict_res_name((enum sdp_predict_res)i),
                   p->demand_s[i], 100.0 * p->busy[i]);
    printf("  the GPU's chain %.3f s (%.3f s at the step boundary), the host's %.3f s\n",
           p->chain_s, p->boundary_s, p->host_chain_s);
    if (cr->plan.nodes > 1)
        printf("  the node link (%.1f GB/s, %.0f us a message: %s): %.2f GB each way a step, "
               "its chain %.3f s, the last chunk's trip %.4f s\n",
               cm->mc.node_bps / 1e9, cm->mc.node_latency_s * 1e6, cm->link, p->node_bytes / 1e9,
               p->node_chain_s, p->node_tail_s);
    printf("memory: GPU %.2f GiB a device", gib(p->gpu_bytes));
    if (cr->ngpus > 0 && l->gpu > 0)
        printf(" of %.2f GiB%s", gib(l->gpu), r->gpu_memory_gib > 0 ? " (limit)" : "");
    printf(", host %.2f GiB (%.2f pinned)", gib(p->host_bytes), gib(p->pinned_bytes));
    if (l->host > 0)
        printf(" of %.2f GiB%s", gib(l->host), r->host_memory_gib > 0 ? " (budget)" : "");
    printf("\n\nwhat if (one change at a time, fastest first):\n");
    printf("  %-36s %8s %10s %8s %8s %5s\n", "change", "step s", "tokens/s", "gain", "GPU GiB",
           "fits");
    for (int i = 0; i < nw; i++)
        printf("  %-36s %8.3f %10.0f %+7.1f%% %8.2f %5s\n", w[i].change, w[i].p.step_s,
               w[i].p.tokens_per_s, 100.0 * (p->step_s / w[i].p.step_s - 1.0),
               gib(w[i].p.gpu_bytes), w[i].fits ? "yes" : "no");
}

static json_t *pred_json(const struct sdp_predict *p)
{
    json_t *d = json_object(), *b = json_object();
    for (int i = 0; i < SDP_PRES_COUNT; i++) {
        json_object_set_new(d, sdp_predict_res_name((enum sdp_predict_res)i),
                            json_real(p->demand_s[i]));
        json_object_set_new(b, sdp_predict_res_name((enum sdp_predict_res)i),
                            json_real(p->busy[i]));
    }
    return json_pack("{s:f, s:f, s:f, s:f, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:o, s:o, s:I, s:I, "
                     "s:I, s:I}",
                     "h2d_bytes", p->h2d_bytes, "d2h_bytes", p->d2h_bytes, "step_s", p->step_s,
                     "tokens_per_s", p->tokens_per_s, "bound", sdp_predict_res_name(p->bound),
                     "chain_s", p->chain_s, "boundary_s", p->boundary_s, "host_chain_s",
                     p->host_chain_s, "node_chain_s", p->node_chain_s, "node_tail_s",
                     p->node_tail_s, "node_bytes", p->node_bytes, "demand_s", d, "busy", b,
                     "gpu_bytes", (json_int_t)p->gpu_bytes, "gpu_need_bytes",
                     (json_int_t)p->gpu_need_bytes, "host_bytes", (json_int_t)p->host_bytes,
                     "pinned_bytes", (json_int_t)p->pinned_bytes);
}

static void print_json(const struct sdp_recipe *r, const struct sdp_cli_run *cr,
                       const struct sdp_cli_machine *cm, const struct sdp_predict *p,
                       const struct limits *l, const struct whatif *w, int nw, int ok)
{
    json_t *arr = json_array(), *o;
    char *s;
    for (int i = 0; i < nw; i++) {
        json_t *e = pred_json(&w[i].p);
        json_object_set_new(e, "change", json_string(w[i].change));
        json_object_set_new(e, "gain", json_real(p->step_s / w[i].p.step_s - 1.0));
        json_object_set_new(e, "fits", json_boolean(w[i].fits));
        json_array_append_new(arr, e);
    }
    o = json_pack("{s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:b, s:o, s:f, s:f, s:b, s:o}",
                  "model",
                  r->model_preset[0] ? r->model_preset : sdp_model_arch_name(r->model.arch),
                  "params", (json_int_t)sdp_model_num_params(&r->model), "gpus", cr->ngpus, "ranks",
                  cr->plan.nranks, "micro_batch", r->micro_batch, "n_micro", cr->run.n_micro,
                  "seq_len", r->seq_len, "chunk_mib", r->chunk_mib, "machine", cm->source,
                  "calibrated", cm->from_file, "predicted", pred_json(p), "gpu_limit_bytes", l->gpu,
                  "host_limit_bytes", l->host, "fits", ok, "what_if", arr);
    json_object_set_new(o, "nodes", json_integer(cr->plan.nodes));
    json_object_set_new(o, "node_link",
                        json_pack("{s:f, s:f, s:s}", "gbs", cm->mc.node_bps / 1e9, "latency_us",
                                  cm->mc.node_latency_s * 1e6, "source", cm->link));
    s = json_dumps(o, JSON_COMPACT);
    if (s)
        puts(s);
    free(s);
    json_decref(o);
}

/* The refusal: what does not fit, by how much, and the single changes that would fit. */
static void refuse(const struct sdp_recipe *r, const struct sdp_predict *p, const struct limits *l,
                   int ngpus, const struct whatif *w, int nw)
{
    int any = 0;
    if (ngpus > 0 && l->gpu > 0 && p->gpu_need_bytes > l->gpu)
        SDP_ERROR(
            "%s: the plan does not fit the GPU: %.2f GiB a device, %.2f GiB over the %s of "
            "%.2f GiB",
            r->file[0] ? r->file : "plan", gib(p->gpu_need_bytes), gib(p->gpu_need_bytes - l->gpu),
            r->gpu_memory_gib > 0 ? "train.gpu_memory_gib limit" : "GPU's memory", gib(l->gpu));
    if (l->host > 0 && p->host_bytes > l->host)
        SDP_ERROR("%s: the plan does not fit the host: %.2f GiB, %.2f GiB over the %s of %.2f GiB",
                  r->file[0] ? r->file : "plan", gib(p->host_bytes), gib(p->host_bytes - l->host),
                  r->host_memory_gib > 0 ? "train.host_memory_gib budget" : "memory available",
                  gib(l->host));
    for (int i = 0; i < nw; i++)
        if (w[i].fits) {
            sdp_hint("%s fits (GPU %.2f GiB, host %.2f GiB, %.3f s a step)", w[i].change,
                     gib(w[i].p.gpu_bytes), gib(w[i].p.host_bytes), w[i].p.step_s);
            any = 1;
        }
    if (!any)
        sdp_hint("no single change fits: combine them (a smaller batch.micro with "
                 "train.activations recompute), or run on more memory");
}

/* The model's sizes: the recipe's (or its model.path's config.json), or --model's preset or
 * config.  @return 0 or an exit status */
static int model_of(struct sdp_recipe *r)
{
    if (r->bench_model && !r->file[0]) {
        if (!sdp_model_preset(r->bench_model, &r->model)) {
            snprintf(r->model_preset, sizeof(r->model_preset), "%s", r->bench_model);
            return 0;
        }
        if (access(r->bench_model, F_OK) != 0) {
            sdp_err(-EINVAL, "unknown model preset '%s', and no such config file or directory",
                    r->bench_model);
            sdp_hint("presets: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, "
                     "qwen3-30b-a3b, qwen3-30b-a3b-l12; or give a Hugging Face config.json or its "
                     "directory");
            return SDP_EXIT_USAGE;
        }
        return sdp_hfconfig_load(r->bench_model, &r->model) ? SDP_EXIT_USAGE : 0;
    }
    if (r->model_path[0] && sdp_hfconfig_load(r->model_path, &r->model))
        return SDP_EXIT_USAGE;
    return 0;
}

/* Whether the run's micro-batches divide among its nodes' ranks (train refuses it there too,
 * cli/train_nodes.c).  @return 0 or -EINVAL (reported) */
static int nodes_split(const struct sdp_recipe *r)
{
    int nodes = r->nodes > 1 ? r->nodes : 1, ranks = r->ranks > 1 ? r->ranks : 1;
    int nm = r->micro_batch > 0 ? r->global_batch / r->micro_batch : 0;
    if (nodes == 1 || (nm > 0 && nm % (nodes * ranks) == 0))
        return 0;
    sdp_err(-EINVAL,
            "%s: %d micro-batches a step (batch %d / micro %d) do not divide among %d "
            "nodes of %d rank%s",
            r->file[0] ? r->file : "plan", nm, r->global_batch, r->micro_batch, nodes, ranks,
            ranks > 1 ? "s" : "");
    sdp_hint("make the batch a multiple of %d micro-batches", nodes * ranks);
    return -EINVAL;
}

/* --moe-routing's measured routing, which r->model points to while the command runs */
static struct sdp_moe_profile routing;
static int *routing_hits;

static int plan_run(struct sdp_recipe *r)
{
    struct sdp_cli_machine cm;
    struct sdp_cli_run cr;
    struct sdp_predict p;
    struct limits l = { 0 };
    struct whatif w[MAX_WHATIF];
    int ngpus, nw, ok, width = 0;
    if (!strcmp(r->sched, "sdp-roundpipe")) { /* the ranks are the pipeline's, as in train */
        width = r->ranks > 1 ? r->ranks : 1;
        r->ranks = 1;
    }
    ngpus = sdp_cli_run_gpus(r, r->machine);
    if (model_of(r))
        return SDP_EXIT_USAGE;
    if (r->moe_routing[0] &&
        sdp_cli_moe_routing_load(r->moe_routing, &r->model, &routing, &routing_hits))
        return SDP_EXIT_USAGE;
    if (r->model.routing)
        SDP_INFO("routing: measured (%s: %d steps of %.0f tokens), %.3f of the experts routed "
                 "a step",
                 r->moe_routing, routing.steps, routing.tokens,
                 sdp_model_moe_routed_share(&r->model, (double)r->global_batch * r->seq_len));
    sdp_cli_machine_get(r->machine, ngpus, 1, &cm);
    sdp_cli_machine_link(r, &cm);
    if (nodes_split(r))
        return SDP_EXIT_USAGE;
    if (ngpus > 0) /* where the GPU limit binds, the saved inputs as train and bench place them */
        sdp_cli_fit_activations(
            r, &r->model, r->precision == SDP_PREC_BF16 ? SDP_BF16 : SDP_F32, NULL,
            r->gpu_memory_gib > 0 ? (unsigned long long)(r->gpu_memory_gib * 1073741824.0)
                                  : cm.mc.gpu_mem_bytes);
    if (sdp_cli_run_make(r, ngpus, &cr))
        return SDP_EXIT_USAGE;
    if (sdp_predict_step(&cr.run, &cm.mc, &p)) {
        sdp_cli_run_free(&cr);
        return SDP_EXIT_USAGE;
    }
    l.gpu = r->gpu_memory_gib > 0 ? r->gpu_memory_gib * 1073741824.0 : (double)cm.mc.gpu_mem_bytes;
    /* the host's memory: the recipe's limit, else the described machine's when it is another */
    l.host = r->host_memory_gib > 0          ? r->host_memory_gib * 1073741824.0
             : cm.foreign && cm.host_mem > 0 ? cm.host_mem
                                             : (double)sdp_rt_host_mem_available();
    nw = whatifs(r, ngpus, &cm, &l, w);
    ok = fits(&p, &l, ngpus);
    if (r->json)
        print_json(r, &cr, &cm, &p, &l, w, nw > 0 ? nw : 0, ok);
    else
        print_text(r, &cr, &cm, &p, &l, w, nw > 0 ? nw : 0);
    if (!ok)
        refuse(r, &p, &l, ngpus, w, nw > 0 ? nw : 0);
    if (r->plan_auto || r->policy_auto) {
        /* the host's budget when the recipe gives one (the layers' updates may move to the GPU) */
        /* without a limit, the share of the device StarPU allocates from */
        struct sdp_auto_budget b = { r->gpu_memory_gib > 0 ? l.gpu : l.gpu * SDP_RT_GPU_SHARE,
                                     ngpus > 0 && r->host_memory_gib > 0 ? l.host : 0 };
        if (sdp_cli_plan_auto(&cr, &cm, &b, &p) != 0)
            ok = 0;
    }
    if (!r->json && width > 0 && sdp_cli_plan_split(&cr, &cm, width) != 0)
        ok = 0;
    sdp_cli_run_free(&cr);
    return ok ? SDP_EXIT_OK : SDP_EXIT_FAILURE;
}

/* bench's defaults, for a plan of --model without a recipe */
static void bench_defaults(struct sdp_recipe *r)
{
    r->global_batch = 16;
    r->micro_batch = 0; /* batch / ranks */
    r->max_grad_norm = 0;
}

int sdp_cli_plan(int argc, char **argv)
{
    static struct sdp_recipe r; /* 50 KB of paths and rows: off the stack */
    int first, rc;
    sdp_recipe_defaults(&r);
    bench_defaults(&r);
    rc = sdp_options_parse("plan", SDP_CMD_PLAN, argc, argv, &r, &first, usage_head, usage_tail);
    if (rc)
        return rc > 0 ? SDP_EXIT_OK : SDP_EXIT_USAGE;
    if (first == argc - 1) { /* a recipe: its values, then the flags over them */
        sdp_recipe_defaults(&r);
        if ((rc = sdp_recipe_load(argv[first], &r)) != 0)
            return rc == -ENOENT || rc == -EINVAL ? SDP_EXIT_USAGE : SDP_EXIT_FAILURE;
        sdp_options_parse("plan", SDP_CMD_PLAN, argc, argv, &r, &first, usage_head, usage_tail);
    } else if (first != argc || !r.bench_model) {
        fprintf(stderr, "slidedp plan: give one recipe file, or --model\n\n");
        sdp_options_usage(stderr, SDP_CMD_PLAN, usage_head, usage_tail);
        return SDP_EXIT_USAGE;
    } else {
        int w = r.ranks * (r.nodes > 1 ? r.nodes : 1); /* every node's ranks */
        r.micro_batch = r.micro_batch > 0 ? r.micro_batch : r.global_batch / w;
        if (r.global_batch % w || r.micro_batch < 1 || (r.global_batch / w) % r.micro_batch) {
            fprintf(stderr,
                    "slidedp plan: --batch %d must split into %d ranks of whole micro-batches of "
                    "%d\n",
                    r.global_batch, w, r.micro_batch);
            return SDP_EXIT_USAGE;
        }
    }
    if (r.plan_auto && r.json) {
        fprintf(stderr, "slidedp plan: --auto prints a table and recipe rows; drop --json\n");
        return SDP_EXIT_USAGE;
    }
    if (r.chunk_mib < 0.004) {
        fprintf(stderr, "slidedp plan: --chunk-mib expects a number >= 0.004, got %g\n",
                r.chunk_mib);
        return SDP_EXIT_USAGE;
    }
    rc = plan_run(&r);
    r.model.routing = NULL;
    free(routing_hits);
    routing_hits = NULL;
    return rc;
}
