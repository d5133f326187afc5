/* SPDX-License-Identifier: MIT */
/* What a loaded recipe means beyond its keys: the cross-key checks once the model is known, the
 * gradient route of every parameter group, the gradient's dtype and the learning-rate schedule.
 * The keys themselves are parsed by cli/recipe.c.  Tests: tests/cli/test_recipe.c. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/sdp_log.h"
#include "cli/options.h"
#include "cli/recipe.h"

int sdp_recipe_validate(const struct sdp_recipe *r)
{
    char why[256];

    if (r->data_train[0] == '\0') {
        sdp_err(-EINVAL, "recipe %s: data.train is not set", r->file);
        sdp_hint("add 'data: {train: FILE.tok}' (token shards come from tools/make_token_data.py)");
        return -EINVAL;
    }
    if (r->doc_positions && !r->doc_mask) {
        sdp_err(-EINVAL, "recipe %s: data.doc_positions needs data.doc_mask", r->file);
        sdp_hint("positions restart at the documents that masking finds: set data.doc_mask: "
                 "true, or drop data.doc_positions");
        return -EINVAL;
    }
    if ((r->eval_every > 0 || r->save_best) && !r->data_val[0]) {
        sdp_err(-EINVAL, "recipe %s: %s needs data.val", r->file,
                r->save_best ? "output.save_best" : "train.eval_every");
        sdp_hint("add 'data: {val: FILE.tok}', a held-out shard tokenized like data.train");
        return -EINVAL;
    }
    if (r->save_best && (!r->output_dir[0] || r->eval_every == 0)) {
        sdp_err(-EINVAL, "recipe %s: output.save_best needs output.dir and train.eval_every > 0",
                r->file);
        sdp_hint("set output.dir (the best model goes to DIR/best) and train.eval_every");
        return -EINVAL;
    }
    if (r->model_path[0] == '\0' && r->model.hidden_size <= 0) {
        sdp_err(-EINVAL,
                "recipe %s: no model: set model.path, model.preset or model.arch with sizes",
                r->file);
        return -EINVAL;
    }
    if (r->model.hidden_size > 0 && sdp_model_validate(&r->model, why, sizeof(why)) != 0)
        return sdp_err(-EINVAL, "recipe %s: model is not valid: %s", r->file, why);
    if (sdp_recipe_lora_check(r))
        return -EINVAL;
    if (r->residual_f32 > 0 && r->lora.rank > 0) {
        sdp_err(-EINVAL, "recipe %s: train.residual_dtype fp32 with LoRA adapters", r->file);
        sdp_hint("the fp32 residual stream covers dense full training: set train.residual_dtype "
                 "to bf16");
        return -EINVAL;
    }
    if (r->seq_len < 1 || r->steps < 1 || r->global_batch < 1 || r->micro_batch < 1)
        return sdp_err(-EINVAL,
                       "recipe %s: data.seq_len=%d, train.steps=%d, batch.global=%d and "
                       "batch.micro=%d must all be >= 1",
                       r->file, r->seq_len, r->steps, r->global_batch, r->micro_batch);
    if (r->global_batch % r->micro_batch != 0)
        return sdp_err(-EINVAL, "recipe %s: batch.global=%d is not a multiple of batch.micro=%d",
                       r->file, r->global_batch, r->micro_batch);
    if (r->ranks < 1 || r->ranks > 64 || r->global_batch % r->ranks != 0) {
        sdp_err(-EINVAL, "recipe %s: batch.global=%d cannot be shared by train.ranks=%d", r->file,
                r->global_batch, r->ranks);
        sdp_hint("every rank takes batch.global / ranks sequences: pick ranks (1..64) dividing "
                 "batch.global");
        return -EINVAL;
    }
    if (r->nccl && r->gpus == 0) {
        sdp_err(-EINVAL,
                "recipe %s: train.collectives nccl needs the ranks on GPUs, train.gpus is 0",
                r->file);
        sdp_hint("set train.collectives: starpu for CPU ranks");
        return -EINVAL;
    }
    if (r->grad_bf16 > 0 && r->ranks > 1) {
        sdp_err(-EINVAL, "recipe %s: train.grad_dtype bf16 is for one rank, train.ranks is %d",
                r->file, r->ranks);
        sdp_hint("set train.grad_dtype: fp32 for a multi-rank run (each rank's fp32 gradient is "
                 "reduced), or train.ranks: 1");
        return -EINVAL;
    }
    if (r->work_on_gpu &&
        (r->param_delay || r->param_sharded || r->gpu_memory_gib > 0 || r->window > 0)) {
        sdp_err(-EINVAL,
                "recipe %s: train.work_home gpu keeps every working copy on the GPUs; it does not "
                "go with param_delay 1, param_route sharded, gpu_memory_gib or window",
                r->file);
        sdp_hint("drop those keys, or set train.work_home: host");
        return -EINVAL;
    }
    if (r->embed_on_gpu && (r->param_delay || r->param_sharded)) {
        sdp_err(-EINVAL,
                "recipe %s: train.embed_home gpu keeps the embedding's working copy on the GPUs; "
                "it does not go with param_delay 1 or param_route sharded",
                r->file);
        sdp_hint("drop those keys, or set train.embed_home: host");
        return -EINVAL;
    }
    if (r->model.num_layers > 0 && r->gpu_update > r->model.num_layers) {
        sdp_err(-EINVAL,
                "recipe %s: train.gpu_update (or --gpu-update) %d exceeds the model's %d layers",
                r->file, r->gpu_update, r->model.num_layers);
        sdp_hint("lower train.gpu_update or --gpu-update (0: every update on the host)");
        return -EINVAL;
    }
    if (r->model.num_layers > 0 && r->keep_last > r->model.num_layers) {
        sdp_err(-EINVAL, "recipe %s: train.keep_last=%d exceeds the model's %d layers", r->file,
                r->keep_last, r->model.num_layers);
        sdp_hint("lower train.keep_last (0: every layer recomputed)");
        return -EINVAL;
    }
    if (r->model.num_layers > 0 && r->keep_mlp > r->model.num_layers) {
        sdp_err(-EINVAL, "recipe %s: train.keep_mlp=%d exceeds the model's %d layers", r->file,
                r->keep_mlp, r->model.num_layers);
        sdp_hint("lower train.keep_mlp (0: every recomputed layer recomputes its MLP)");
        return -EINVAL;
    }
    if (!(r->chunk_mib >= 0) || !(r->lr > 0))
        return sdp_err(-EINVAL,
                       "recipe %s: train.chunk_mib=%g must be >= 0 and optimizer.lr=%g > 0",
                       r->file, r->chunk_mib, r->lr);
    if (r->model.max_position_embeddings > 0 && r->seq_len > sdp_model_max_seq(&r->model)) {
        sdp_err(-EINVAL,
                "recipe %s: data.seq_len=%d exceeds the model's max_position_embeddings=%d and "
                "the model has no rope scaling",
                r->file, r->seq_len, r->model.max_position_embeddings);
        sdp_hint("lower data.seq_len, or scale RoPE: rope_scaling in config.json, or "
                 "model.rope_type and model.rope_factor (docs/long-sequences.md)");
        return -EINVAL;
    }
    return 0;
}

int sdp_recipe_apply_rope(const char *file, struct sdp_model_cfg *model,
                          const struct sdp_model_cfg *given, const int *line, int path_line)
{
    const struct sdp_option *type = sdp_option_by_key("model.rope_type");
    const struct sdp_option *factor = sdp_option_by_key("model.rope_factor");
    int first = 0, k = -1;
    char why[256];
    for (int i = 0; i < sdp_noptions; i++) {
        if (!sdp_option_is_rope(i) || !line[i])
            continue;
        if (!first || line[i] < first)
            first = line[i], k = i;
        memcpy((char *)model + sdp_options[i].off, (const char *)given + sdp_options[i].off,
               sdp_options[i].type == SDP_OPT_DBL ? sizeof(double) : sizeof(int));
    }
    if (!first)
        return 0;
    if (path_line) {
        sdp_err(-EINVAL, "recipe %s line %d: model.path and %s are both given", file, first,
                sdp_options[k].key);
        sdp_hint("a model directory's rope scaling is its config.json's rope_scaling");
        return -EINVAL;
    }
    if (!line[type - sdp_options] || !line[factor - sdp_options])
        return sdp_err(-EINVAL, "recipe %s line %d: %s needs model.rope_type and model.rope_factor",
                       file, first, sdp_options[k].key);
    if (sdp_model_validate(model, why, sizeof(why)) != 0)
        return sdp_err(-EINVAL, "recipe %s line %d: the model's rope scaling is not valid: %s",
                       file, first, why);
    return 0;
}

int sdp_grad_bf16_choice(int grad_dtype, int ranks, int on_gpu)
{
    return grad_dtype > 0 || (grad_dtype < 0 && ranks == 1 && on_gpu);
}

int sdp_recipe_grad_bf16(const struct sdp_recipe *r, int on_gpu)
{
    /* the bf16 return is one rank's: several nodes reduce like several ranks */
    return sdp_grad_bf16_choice(r->grad_bf16, r->nodes > 1 ? 2 : r->ranks, on_gpu);
}

int sdp_recipe_grad_routes(const struct sdp_recipe *r, int ngroups, unsigned char *gpu)
{
    const char *p = r->grad_route_groups;
    for (int i = 0; i < ngroups; i++)
        gpu[i] = (unsigned char)r->grad_route_gpu;
    while (*p) {
        int route, a, b, n = 0;
        if (!strncmp(p, "gpu:", 4))
            route = 1;
        else if (!strncmp(p, "cpu:", 4))
            route = 0;
        else
            goto bad;
        p += 4;
        if (sscanf(p, "%d%n", &a, &n) != 1)
            goto bad;
        p += n;
        b = a;
        if (*p == '-') {
            if (sscanf(p + 1, "%d%n", &b, &n) != 1)
                goto bad;
            p += 1 + n;
        }
        if (a < 0 || b < a || b >= ngroups) {
            sdp_err(-EINVAL, "recipe %s: train.grad_route_groups: groups %d-%d outside 0-%d",
                    r->file, a, b, ngroups - 1);
            sdp_hint("groups are 0 (embedding), 1..L (layers) and L+1 (final norm, LM head)");
            return -EINVAL;
        }
        for (int i = a; i <= b; i++)
            gpu[i] = (unsigned char)route;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return 0;
bad:
    sdp_err(-EINVAL, "recipe %s: train.grad_route_groups '%s' is malformed near '%s'", r->file,
            r->grad_route_groups, p);
    sdp_hint("write ROUTE:FIRST-LAST entries separated by commas, e.g. \"gpu:1-18,cpu:19-36\"");
    return -EINVAL;
}

/* Warmup: lr * (s+1) / warmup for s < warmup.  Then, with progress
 * p = (s - warmup) / (steps - warmup) clamped to [0, 1] and lr_min = lr * min_lr_ratio:
 *   cosine    lr_min + 0.5 (lr - lr_min) (1 + cos(pi p))   (Loshchilov & Hutter, SGDR, 2017)
 *   linear    lr_min + (lr - lr_min) (1 - p)
 *   constant  lr */
double sdp_recipe_lr_at(const struct sdp_recipe *r, int s)
{
    double lr = r->lr, lr_min = r->lr * r->min_lr_ratio, p;
    int span = r->steps - r->warmup_steps;

    if (s < r->warmup_steps)
        return lr * (double)(s + 1) / (double)r->warmup_steps;
    if (r->lr_schedule == SDP_LR_CONSTANT)
        return lr;
    p = span > 0 ? (double)(s - r->warmup_steps) / (double)span : 1.0;
    if (p > 1)
        p = 1;
    if (p < 0)
        p = 0;
    if (r->lr_schedule == SDP_LR_LINEAR)
        return lr_min + (lr - lr_min) * (1 - p);
    return lr_min + 0.5 * (lr - lr_min) * (1 + cos(M_PI * p));
}
