/* SPDX-License-Identifier: MIT */
/* The step-time model from the commands' side (predict_cli.h): the machine file mapped onto the
 * model's rates, a recipe's plan and run without a state, the prediction as one line. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/predict_cli.h"
#include "formats/machine.h"
#include "runtime/init.h"

/* the largest rate of a per-thread-count table, and its one-thread rate */
static void lane_of(const double *bps, int n, double *core, double *max)
{
    *core = n > 0 ? bps[0] : 0.0;
    *max = 0.0;
    for (int t = 0; t < n; t++)
        *max = bps[t] > *max ? bps[t] : *max;
}

/* Override the defaults in mc with what m measured (a rate of 0 was not measured).  The host
 * lanes come from the AdamW and cast tables (AdamW's best rate the larger of the table's and the
 * runtime workers', cli/calibrate_update.c); DRAM is at least what AdamW moved (the copy's
 * read + write understates a read-heavy stream, graph/predict.c); a GPU's transfer rates are the
 * copy rates, and the shared ones give the host link of all GPUs at once. */
static void map_machine(const struct sdp_machine *m, int ngpus, struct sdp_predict_machine *mc)
{
    double core, max;
    lane_of(m->adamw_bps, m->nthreads, &core, &max);
    if (m->adamw_workers_bps > max) /* the codelet on the runtime's workers, as the step runs it */
        max = m->adamw_workers_bps;
    if (core > 0 && max > 0)
        mc->adamw_core_bps = core, mc->adamw_max_bps = max;
    lane_of(m->cast_bps, m->nthreads, &core, &max);
    if (core > 0 && max > 0)
        mc->cast_core_bps = core, mc->cast_max_bps = max;
    if (m->dram_bps > 0)
        mc->dram_bps = m->dram_bps > mc->adamw_max_bps ? m->dram_bps : mc->adamw_max_bps;
    if (m->cores > 0)
        mc->cpu_cores = m->cores;
    if (m->task_s > 0)
        mc->task_s = m->task_s;
    if (ngpus == 0) { /* CPU workers: the compute's rates are the CPU's */
        if (m->cpu_gemm_flops > 0)
            mc->gpu_flops = m->cpu_gemm_flops;
        if (m->cpu_attention_flops > 0)
            mc->gpu_attn_flops = m->cpu_attention_flops;
        if (m->cpu_head_flops > 0)
            mc->head_flops = m->cpu_head_flops;
        if (m->cpu_elem_bps > 0)
            mc->elem_bps = m->cpu_elem_bps;
        return;
    }
    const struct sdp_machine_gpu *g = &m->gpu[0];
    if (g->bf16_flops > 0)
        mc->gpu_flops = g->bf16_flops;
    if (g->attention_flops > 0)
        mc->gpu_attn_flops = g->attention_flops;
    if (g->head_flops > 0)
        mc->head_flops = g->head_flops;
    if (g->elem_bps > 0)
        mc->elem_bps = g->elem_bps;
    if (g->h2d_bps > 0)
        mc->h2d_bps = g->h2d_bps, mc->h2d_all_bps = g->h2d_bps;
    if (g->d2h_bps > 0)
        mc->d2h_bps = g->d2h_bps, mc->d2h_all_bps = g->d2h_bps;
    if (g->h2d_busy_bps > 0)
        mc->h2d_busy_bps = g->h2d_busy_bps;
    if (ngpus > 1 && g->h2d_shared_bps > 0)
        mc->h2d_all_bps = g->h2d_shared_bps * ngpus;
    if (ngpus > 1 && g->d2h_shared_bps > 0)
        mc->d2h_all_bps = g->d2h_shared_bps * ngpus;
    if (g->mem_bytes > 0)
        mc->gpu_mem_bytes = (unsigned long long)g->mem_bytes;
    if (g->base_bytes > 0)
        mc->gpu_base_bytes = (unsigned long long)g->base_bytes;
}

/* The link between nodes, where `calibrate` ran under an MPI launcher. */
static void map_link(const struct sdp_machine *m, struct sdp_cli_machine *out)
{
    if (m->node_gbs <= 0)
        return;
    out->mc.node_bps = m->node_gbs * 1e9, out->mc.node_latency_s = m->node_latency_us * 1e-6;
    snprintf(out->link, sizeof(out->link), "calibrated");
}

void sdp_cli_machine_link(const struct sdp_recipe *r, struct sdp_cli_machine *cm)
{
    if (r->node_gbs > 0)
        cm->mc.node_bps = r->node_gbs * 1e9;
    if (r->node_latency_us >= 0)
        cm->mc.node_latency_s = r->node_latency_us * 1e-6;
    if (r->node_gbs > 0 || r->node_latency_us >= 0)
        snprintf(cm->link, sizeof(cm->link), "%s%s%s", r->node_gbs > 0 ? "--node-gbs" : "",
                 r->node_gbs > 0 && r->node_latency_us >= 0 ? ", " : "",
                 r->node_latency_us >= 0 ? "--node-latency-us" : "");
}

/* The defaults: the reference node with GPUs (the seed's shared link for more than one: 8.7 GB/s
 * each of two against 15.6 alone), or CPU workers on this node's cores. */
static void defaults(int ngpus, struct sdp_predict_machine *mc)
{
    if (ngpus > 0) {
        sdp_predict_machine_h200(mc);
        mc->ngpus = ngpus;
        if (ngpus > 1)
            mc->h2d_all_bps *= 2 * 8.7 / 15.6, mc->d2h_all_bps *= 2 * 8.7 / 15.6;
    } else {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        sdp_predict_machine_cpu2(mc);
        mc->cpu_cores = n > 0 ? (int)n : mc->cpu_cores;
    }
}

void sdp_cli_machine_get(const char *path, int ngpus, int elsewhere, struct sdp_cli_machine *out)
{
    struct sdp_machine here, m;
    memset(out, 0, sizeof(*out));
    defaults(ngpus, &out->mc);
    snprintf(out->link, sizeof(out->link), "the model's defaults");
    if (!path || !path[0]) {
        /* on a GPU host, its GPUs' memory rather than the reference node's: a budget taken from
         * the defaults would otherwise be the H200's on any card */
        unsigned long long dev = ngpus > 0 && !elsewhere ? sdp_rt_gpu_mem_total(0) : 0;
        if (dev > 0)
            out->mc.gpu_mem_bytes = dev;
        snprintf(out->source, sizeof(out->source), "defaults (%s%s; no train.machine file)",
                 ngpus > 0 ? "the reference node: one H200, 16 cores" : "CPU workers",
                 dev > 0 ? ", with this host's GPU memory" : "");
        return;
    }
    memset(&here, 0, sizeof(here));
    sdp_machine_identify(&here);
    if (sdp_machine_load(path, elsewhere ? NULL : &here, &m)) { /* reported: file and fix */
        snprintf(out->source, sizeof(out->source), "defaults (%s could not be used)", path);
        return;
    }
    map_machine(&m, ngpus, &out->mc);
    map_link(&m, out);
    if (sdp_predict_machine_check(&out->mc)) { /* cannot happen for a loaded file: checked */
        defaults(ngpus, &out->mc);
        snprintf(out->link, sizeof(out->link), "the model's defaults");
        snprintf(out->source, sizeof(out->source), "defaults (%s has unusable rates)", path);
        return;
    }
    out->from_file = 1;
    out->foreign = strcmp(m.host, here.host) || strcmp(m.cpu, here.cpu) || m.cores != here.cores;
    out->host_mem = m.host_mem_bytes;
    snprintf(out->source, sizeof(out->source), "%s (calibrated on %s%s)", path,
             m.host[0] ? m.host : "an unnamed host",
             out->foreign ? ", another machine than this one" : "");
}

int sdp_cli_run_gpus(const struct sdp_recipe *r, const char *machine_path)
{
    struct sdp_machine m;
    int have = r->gpus;
    if (r->gpus == 0)
        return 0;
    if (have < 0) { /* all found: this node's, else the calibrated node's */
        memset(&m, 0, sizeof(m));
        sdp_machine_identify(&m);
        have = m.gpus;
        if (have == 0 && machine_path && machine_path[0] && access(machine_path, R_OK) == 0) {
            struct sdp_machine f;
            have = sdp_machine_load(machine_path, NULL, &f) == 0 ? f.gpus : 0;
        }
    }
    if (have <= 0)
        return 0; /* CPU workers, ranks standing in on them */
    return r->ranks > 1 ? r->ranks : 1;
}

void sdp_recipe_graph_conf(const struct sdp_recipe *r, struct sdp_graph_conf *gc)
{
    memset(gc, 0, sizeof(*gc));
    gc->micro_batch = r->micro_batch;
    gc->nodes = r->nodes > 1 ? r->nodes : 1;
    gc->node = r->node;
    gc->n_micro = r->global_batch / r->micro_batch / gc->nodes; /* this node's */
    gc->seq_len = r->seq_len;
    gc->gpu_limit_bytes =
        r->gpu_memory_gib > 0 ? (unsigned long long)(r->gpu_memory_gib * 1073741824.0) : 0;
    gc->recompute = r->recompute;
    gc->offload_inputs = r->act_offload;
    gc->bwd_lookahead = r->bwd_lookahead;
    gc->keep_last = r->keep_last;
    gc->keep_mlp = r->keep_mlp;
    gc->residual_f32 = r->residual_f32;
    gc->attn_row_tokens = r->doc_mask ? r->attn_row_tokens : 0;
    gc->beta1 = r->beta1;
    gc->beta2 = r->beta2;
    gc->eps = r->eps;
    gc->weight_decay = r->weight_decay;
    gc->max_grad_norm = r->max_grad_norm;
    gc->skip_nonfinite = r->skip_nonfinite;
    gc->embed_early = r->embed_early;
    gc->mlp_early = r->mlp_early;
    gc->gpu_update = r->gpu_update;
    gc->embed_lookup_host = r->embed_lookup_host;
    gc->nranks = r->ranks;
    gc->param_delay = r->param_delay;
    gc->window = r->window >= 0 ? r->window : r->gpu_memory_gib > 0 ? 2 : 0;
    gc->grad_route = r->grad_route_gpu ? SDP_ROUTE_GPU_REDUCE : SDP_ROUTE_CPU_REDUCE;
    gc->param_route = r->param_sharded ? SDP_ROUTE_SHARDED : SDP_ROUTE_REPLICATED;
    gc->lora = r->lora;
    gc->seed = r->seed;
}

/* r's `plan:` rows over p, as train applies them (without a state: mlp_early is taken as asked) */
static int apply_rows(const struct sdp_recipe *r, struct sdp_plan *p)
{
    for (int i = 0; i < r->nplan; i++) {
        const struct sdp_recipe_plan_row *row = &r->plan[i];
        int first = row->first < 0 ? 1 : row->first, last = row->last < 0 ? p->nlayers : row->last;
        if (sdp_plan_set(p, NULL, first, last, row->key, row->value))
            return sdp_err(-EINVAL, "recipe %s line %d: the plan refuses %s: %s for layers %d-%d",
                           r->file, row->line, row->key, row->value, first, last);
    }
    return 0;
}

/* The run around plan: what the plan does not say. */
static void fill_run(const struct sdp_recipe *r, const struct sdp_model_cfg *m,
                     const struct sdp_plan *plan, int ngpus, struct sdp_predict_run *run)
{
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    *run = (struct sdp_predict_run){
        .m = m,
        .plan = plan,
        .micro_batch = r->micro_batch,
        .seq_len = r->seq_len,
        .n_micro = r->global_batch / r->micro_batch,
        .work_dtype = r->precision == SDP_PREC_BF16 ? SDP_BF16 : SDP_F32,
        .work_staged = r->work_on_gpu,
        /* sdp-slidedp's default: one stage per CPU worker, at least 4 */
        .stage_buffers =
            r->staging_depth > 0 ? r->staging_depth : (cores - ngpus > 4 ? cores - ngpus : 4),
        .gpu_limit_bytes =
            ngpus > 0 && r->gpu_memory_gib > 0 ? r->gpu_memory_gib * 1073741824.0 : 0,
    };
}

int sdp_cli_predict_plan(const struct sdp_recipe *r, const struct sdp_model_cfg *m,
                         const struct sdp_plan *plan, int ngpus, const struct sdp_cli_machine *cm,
                         struct sdp_predict *out)
{
    struct sdp_predict_run run;
    fill_run(r, m, plan, ngpus, &run);
    return sdp_predict_step(&run, &cm->mc, out);
}

int sdp_cli_run_make(const struct sdp_recipe *r, int ngpus, struct sdp_cli_run *cr)
{
    int grad_bf16 = sdp_recipe_grad_bf16(r, ngpus > 0), rc;
    memset(cr, 0, sizeof(*cr));
    cr->m = r->model;
    cr->ngpus = ngpus;
    sdp_recipe_graph_conf(r, &cr->gc);
    if (!(cr->routes = calloc((size_t)r->model.num_layers + 2, 1)))
        return sdp_err(-ENOMEM, "the gradient routes");
    if ((rc = sdp_recipe_grad_routes(r, r->model.num_layers + 2, cr->routes)) != 0)
        return rc;
    cr->gc.grad_route_gpu = cr->routes;
    rc = sdp_predict_plan_from_conf(&cr->plan, &cr->m, &cr->gc,
                                    sdp_cli_chunk_bytes(r->chunk_mib, &cr->m), grad_bf16);
    if (!rc && (rc = apply_rows(r, &cr->plan)) != 0)
        sdp_plan_free(&cr->plan);
    if (rc)
        return rc;
    for (int gi = 0; gi < cr->plan.ngroups;
         gi++) { /* the chunk pipeline as graph/plan.c takes it */
        struct sdp_plan_group *pg = &cr->plan.group[gi];
        int off = sdp_env_is("SDP_CHUNK_PIPELINE", "off");
        pg->work_chunks = pg->work_chunks && !off && !pg->update_gpu;
        pg->grad_chunks = pg->grad_chunks && !off;
    }
    fill_run(r, &cr->m, &cr->plan, ngpus, &cr->run);
    return 0;
}

void sdp_cli_run_free(struct sdp_cli_run *cr)
{
    if (cr->plan.group)
        sdp_plan_free(&cr->plan);
    free(cr->routes);
    cr->routes = NULL;
}

void sdp_cli_predict_line(const struct sdp_predict *p, const struct sdp_cli_machine *cm, char *out,
                          size_t len)
{
    char gpu[48] = "";
    if (cm->mc.ngpus > 0)
        snprintf(gpu, sizeof(gpu), "GPU %.2f GiB, ", p->gpu_bytes / 1073741824.0);
    snprintf(out, len,
             "%.3f s a step, %.0f tokens/s, bound by %s; peaks: %shost %.2f GiB; machine: %s",
             p->step_s, p->tokens_per_s, sdp_predict_res_name(p->bound), gpu,
             p->host_bytes / 1073741824.0, cm->source);
}

/* Whether a plan row of the recipe names key for some layers. */
static int plan_names(const struct sdp_recipe *r, const char *key)
{
    for (int i = 0; i < r->nplan; i++)
        if (!strcmp(r->plan[i].key, key))
            return 1;
    return 0;
}

unsigned long long sdp_cli_fit_activations(struct sdp_recipe *r, const struct sdp_model_cfg *m,
                                           enum sdp_dtype dt, struct sdp_graph_conf *gc,
                                           unsigned long long limit)
{
    const double gib = 1073741824.0;
    struct sdp_graph_conf own;
    unsigned long long need, off;
    if (!gc) { /* the recipe's run: its configuration, and its choice written back */
        sdp_recipe_graph_conf(r, &own);
        gc = &own;
    }
    need = sdp_graph_gpu_bytes_min(m, dt, gc);
    if (!r->act_given && !plan_names(r, "activations") && gc->recompute == SDP_RECOMPUTE_FULL &&
        !gc->offload_inputs) {
        if (limit > 0 && need > limit) {
            gc->offload_inputs = 1;
            off = sdp_graph_gpu_bytes_min(m, dt, gc);
            gc->offload_inputs = off <= limit;
            if (off <= limit) {
                SDP_INFO("the saved layer inputs wait on the host (train.activations: offload): "
                         "on the GPU the run would need %.2f GiB, %.2f GiB with them on the "
                         "host, within %.2f GiB",
                         need / gib, off / gib, limit / gib);
                need = off;
            }
        }
    }
    if (gc == &own)
        r->recompute = gc->recompute, r->act_offload = gc->offload_inputs;
    return need;
}
