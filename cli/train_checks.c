/* SPDX-License-Identifier: MIT */
/* `slidedp train`: everything checked before StarPU starts (the model, the recipe, the routes, the
 * policy, the data, the host and GPU memory), and the Slurm defaults. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/hfdir.h"
#include "cli/predict_cli.h"
#include "cli/train_internal.h"
#include "formats/hfconfig.h"
#include "policies/sdp_policies.h"
#include "runtime/init.h"
#include "runtime/peft.h"

/* Slurm: the job id names the default run directory (a requeued job keeps its id, so it resumes),
 * and the CPUs of the task set the CPU workers. */
void sdp_train_apply_slurm(struct sdp_recipe *r)
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
void sdp_train_group_name(const struct sdp_recipe *r, int g, char *out, size_t len)
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

/* The GPU window must fit: the configured limit within the device, the run's minimum within both
 * (the saved inputs on the host where only that fits, sdp_cli_fit_activations).  Sets *need and
 * *limit (bytes).  @return 0, -EINVAL or -ENOMEM (reported) */
static int gpu_fits(struct sdp_recipe *r, enum sdp_dtype work_dt, unsigned long long *need_out,
                    unsigned long long *limit_out)
{
    struct sdp_graph_conf gc;
    unsigned long long total = sdp_rt_gpu_mem_total(0);
    unsigned long long limit =
        r->gpu_memory_gib > 0 ? (unsigned long long)(r->gpu_memory_gib * 1073741824.0) : total;
    unsigned long long need;
    if (total > 0 && limit > total) {
        sdp_err(-EINVAL, "%s: train.gpu_memory_gib = %.1f GiB exceeds the GPU's %.1f GiB", r->file,
                r->gpu_memory_gib, total / 1073741824.0);
        sdp_hint("lower train.gpu_memory_gib, or set it to 0 for the whole GPU");
        return -EINVAL;
    }
    need = sdp_cli_fit_activations(r, &r->model, work_dt, NULL, limit);
    if (limit > 0 && need > limit) {
        sdp_recipe_graph_conf(r, &gc);
        sdp_err(-ENOMEM,
                "%s: the run needs at least %.1f GiB of GPU memory (two layers of weights and "
                "gradients, one micro-batch of activations), the %s allows %.1f GiB",
                r->file, need / 1073741824.0, r->gpu_memory_gib > 0 ? "recipe" : "GPU",
                limit / 1073741824.0);
        if (gc.recompute == SDP_RECOMPUTE_FULL && !gc.offload_inputs) {
            gc.offload_inputs = 1; /* the least the run can need as it is */
            need = sdp_graph_gpu_bytes_min(&r->model, work_dt, &gc);
        }
        sdp_hint("the smallest GPU memory this run fits is %.1f GiB%s", need / 1073741824.0,
                 gc.offload_inputs ? " (train.activations: offload)" : "");
        if (r->keep_mlp > 0)
            sdp_hint("lower train.keep_mlp (%d layers keep their MLP's inputs on the GPU), "
                     "batch.micro or data.seq_len, or raise train.gpu_memory_gib",
                     r->keep_mlp);
        else
            sdp_hint("lower batch.micro or data.seq_len, set train.keep_last: 0 or "
                     "train.activations: offload, or raise train.gpu_memory_gib");
        return -ENOMEM;
    }
    *need_out = need, *limit_out = limit;
    return 0;
}

/* gpu_fits once StarPU runs the GPUs, then train.gpu_update's auto resolved against what is left
 * (sdp_cli_gpu_update) */
int sdp_train_check_gpu_memory(struct sdp_recipe *r, enum sdp_dtype work_dt)
{
    unsigned long long need, limit;
    int rc = gpu_fits(r, work_dt, &need, &limit);
    if (rc)
        return rc;
    r->gpu_update = sdp_cli_gpu_update(r->gpu_update, &r->lora, &r->model, r->ranks, need, limit);
    return 0;
}

/* The activations of one step that live in host memory: on CPU workers all of them (recomputed:
 * every layer input of every micro-batch alive), on a GPU only the offloaded layer inputs. */
static unsigned long long host_act_bytes(const struct sdp_recipe *r)
{
    unsigned long long nm = (unsigned long long)(r->global_batch / r->micro_batch);
    unsigned long long in =
        sdp_model_layer_act_bytes(&r->model, r->micro_batch, r->seq_len, 4, r->recompute);
    if (sdp_cli_may_use_gpu(r->gpus)) /* in the working copies' dtype there */
        return r->recompute && r->act_offload ? nm * in / (r->precision == SDP_PREC_BF16 ? 2 : 1) *
                                                    (unsigned long long)r->model.num_layers
                                              : 0;
    return nm * (in * (unsigned long long)(r->model.num_layers + 1) +
                 sdp_model_layer_act_bytes(&r->model, r->micro_batch, r->seq_len, 4, 0) +
                 (r->recompute ? (unsigned long long)r->keep_mlp * r->micro_batch * r->seq_len *
                                     (r->model.hidden_size + 2ull * r->model.intermediate_size) * 4
                               : 0));
}

/* The moments that get no host pages: those of the layers updated on the GPU (train.gpu_update,
 * full fine-tuning on one GPU; graph/predict_mem.c), or with train.policy auto under a host
 * budget, of every layer it may move there (its stage 1 then checks the budget exactly). */
static unsigned long long gpu_moment_bytes(const struct sdp_recipe *r, enum sdp_dtype grad_dt)
{
    int n = r->policy_auto && r->host_memory_gib > 0 ? r->model.num_layers : r->gpu_update;
    unsigned long long b = 0;
    if (r->lora.rank > 0 || !sdp_cli_may_use_gpu(r->gpus) || r->ranks > 1 || r->work_on_gpu ||
        grad_dt != SDP_BF16)
        return 0;
    for (int g = 1; g <= n && g <= r->model.num_layers; g++)
        b +=
            sdp_model_layer_sparse(&r->model, g - 1) ? 0 : sdp_model_group_nelems(&r->model, g) * 8;
    return b;
}

/* The host memory of the run: its state and the activations of one step that live there, within
 * what the recipe or the host allows. */
static int check_host_memory(struct sdp_train *t)
{
    const struct sdp_recipe *r = t->r;
    unsigned long long need, avail, state_bytes;

    state_bytes = r->lora.rank > 0
                      ? sdp_state_lora_host_bytes(&r->model, &r->lora, t->work_dt)
                      : sdp_state_host_bytes(&r->model, t->work_dt, t->grad_dt,
                                             (sdp_cli_may_use_gpu(r->gpus) ? SDP_STATE_ON_GPU : 0) |
                                                 (r->work_on_gpu ? SDP_STATE_WORK_STAGED : 0) |
                                                 (r->embed_on_gpu ? SDP_STATE_EMBED_STAGED : 0));
    state_bytes -= gpu_moment_bytes(r, t->grad_dt);
    need = state_bytes + host_act_bytes(r);
    avail = r->host_memory_gib > 0 ? (unsigned long long)(r->host_memory_gib * 1073741824.0)
                                   : sdp_rt_host_mem_available();
    t->host_act = need - state_bytes;
    t->host_avail = avail;
    if (avail > 0 && need > avail) {
        sdp_err(-ENOMEM,
                "%s: the run needs about %.2f GiB of host memory (state %.2f GiB for %zu "
                "parameters + activations), %.2f GiB are available",
                r->file, need / 1073741824.0, state_bytes / 1073741824.0,
                sdp_model_num_params(&r->model), avail / 1073741824.0);
        sdp_hint("use a smaller model, batch.micro or data.seq_len, or raise train.host_memory_gib "
                 "if the "
                 "limit is wrong");
        return SDP_EXIT_FAILURE;
    }
    return SDP_EXIT_OK;
}

/* The masked attention's tokens a row (sdp_graph_conf.attn_row_tokens): a micro-batch's call
 * takes the most documents and the longest of its rows, so with several rows a row may count the
 * data's most documents and longest apart; with one, the largest product of one window. */
static void docs_extent(struct sdp_recipe *r, const struct sdp_data *d)
{
    struct sdp_data_docs x;
    sdp_data_docs_extent(d, &x);
    r->attn_row_tokens = r->micro_batch > 1 ? (long long)x.slots * x.longest : x.row_tokens;
    if (r->attn_row_tokens > r->seq_len)
        SDP_INFO("document masking: rows in up to %d document slots of up to %d tokens; the "
                 "attention's workspace counts %lld tokens a row",
                 x.slots, x.longest, r->attn_row_tokens);
}

int sdp_train_check(struct sdp_train *t)
{
    struct sdp_recipe *r = t->r;
    int rc;

    if (r->model_path[0]) {
        rc = sdp_hfconfig_load(r->model_path, &r->model);
        if (!rc)
            rc = sdp_state_check_hf(&r->model, r->model_path);
        if (rc)
            return SDP_EXIT_FAILURE;
    }
    if (sdp_recipe_validate(r))
        return SDP_EXIT_USAGE;
    if (r->lora.rank > 0 && r->lora_init[0] &&
        sdp_peft_check_config(r->lora_init, &r->model, &r->lora)) {
        sdp_hint("lora.init_from (recipe %s) names that adapter", r->file);
        return SDP_EXIT_USAGE;
    }
    /* the tokenizer RUN/final gets: the recipe's, else the model directory's */
    if (!r->tokenizer[0] && r->model_path[0] && sdp_hfdir_has_tokenizer(r->model_path))
        snprintf(r->tokenizer, sizeof(r->tokenizer), "%s", r->model_path);
    else if (r->tokenizer[0] &&
             sdp_hfdir_check_tokenizer(r->tokenizer, "model.tokenizer", &r->model))
        return SDP_EXIT_USAGE;
    if ((rc = sdp_train_check_paths(t)) != SDP_EXIT_OK)
        return rc;
    t->routes = calloc((size_t)sdp_model_num_groups(&r->model), 1);
    if (!t->routes)
        return SDP_EXIT_FAILURE;
    if (sdp_recipe_grad_routes(r, sdp_model_num_groups(&r->model), t->routes))
        return SDP_EXIT_USAGE;
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
    if (r->sched[0] && sdp_policy_resolve(r->sched, &t->policy))
        return SDP_EXIT_USAGE;
    rc = sdp_data_open(&t->data, r->data_train, r->seq_len, r->seed, r->shuffle);
    if (rc)
        return SDP_EXIT_FAILURE;
    if (t->data.shard.vocab_size > (uint32_t)r->model.vocab_size) {
        sdp_err(-EINVAL, "data %s was tokenized with a vocabulary of %u ids, the model has %d",
                r->data_train, t->data.shard.vocab_size, r->model.vocab_size);
        sdp_hint("tokenize the data with the model's tokenizer");
        return SDP_EXIT_FAILURE;
    }
    if (t->data.shard.vocab_size == 0 &&
        sdp_data_check_vocab(&t->data, r->data_train, (uint32_t)r->model.vocab_size))
        return SDP_EXIT_FAILURE;
    if (sdp_data_set_docs(&t->data, r->doc_mask))
        return SDP_EXIT_USAGE;
    if (r->doc_mask && sdp_cli_may_use_gpu(r->gpus)) /* only cuDNN's calls lay rows out in slots */
        docs_extent(r, &t->data);
    if (sdp_train_check_targets(t, &t->data, "data.train") || sdp_train_eval_open(t))
        return SDP_EXIT_FAILURE;
    t->work_dt = r->precision == SDP_PREC_BF16 ? SDP_BF16 : SDP_F32;
    /* the return as far as it is known before StarPU starts (resolved again once it has) */
    t->grad_dt = sdp_recipe_grad_bf16(r, sdp_cli_may_use_gpu(r->gpus)) ? SDP_BF16 : SDP_F32;
    /* the GPU's memory as far as CUDA tells it before StarPU starts (checked again once it has) */
    if (sdp_cli_may_use_gpu(r->gpus) && sdp_rt_gpu_mem_total(0) > 0) {
        unsigned long long need, limit;
        if (gpu_fits(r, t->work_dt, &need, &limit))
            return SDP_EXIT_FAILURE;
    }
    return check_host_memory(t);
}
