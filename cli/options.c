/* SPDX-License-Identifier: MIT */
/* The options registry (cli/options.h): one row per option of a recipe and of the train, bench
 * and plan command lines.  The recipe parser reads the rows with a key, the command lines those
 * with a flag; help texts and docs/options.md are printed from the same rows. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli/options.h"

/* ---- choices and their setters ---- */

static const char *const precision_names[] = { "fp32", "bf16", NULL };
static const char *const grad_dtype_names[] = { "auto", "fp32", "bf16", NULL };
static const char *const residual_dtype_names[] = { "bf16", "fp32", NULL };
static const char *const activation_names[] = { "recompute", "keep",      "offload",
                                                "selective", "keep-attn", NULL };
static const char *const on_nan_names[] = { "stop", "skip", NULL };
static const char *const grad_route_names[] = { "cpu", "gpu", NULL };
static const char *const param_route_names[] = { "replicated", "sharded", NULL };
static const char *const schedule_names[] = { "cosine", "linear", "constant", NULL };
static const char *const optimizer_names[] = { "adamw", NULL };
static const char *const collectives_names[] = { "starpu", "nccl", NULL };
static const char *const home_names[] = { "host", "gpu", NULL };
static const char *const embed_lookup_names[] = { "compute", "host", NULL };
static const char *const on_off_names[] = { "on", "off", NULL };
static const char *const policy_names[] = { "fixed", "auto", NULL };
/* enum sdp_rope_type's order */
static const char *const rope_type_names[] = { "llama3", "yarn", "linear", "dynamic", NULL };

static void set_precision(struct sdp_recipe *r, int i)
{
    r->precision = i == 0 ? SDP_PREC_FP32 : SDP_PREC_BF16;
}

static void set_grad_dtype(struct sdp_recipe *r, int i)
{
    r->grad_bf16 = i - 1; /* auto -1, fp32 0, bf16 1 */
}

static void set_activations(struct sdp_recipe *r, int i)
{
    sdp_recipe_activations(activation_names[i], &r->recompute, &r->act_offload);
    r->act_given = 1;
}

static void set_schedule(struct sdp_recipe *r, int i)
{
    r->lr_schedule = i == 0 ? SDP_LR_COSINE : i == 1 ? SDP_LR_LINEAR : SDP_LR_CONSTANT;
}

static void set_optimizer(struct sdp_recipe *r, int i)
{
    (void)r; /* AdamW is the only optimizer */
    (void)i;
}

static void set_embed_early(struct sdp_recipe *r, int i)
{
    r->embed_early = i == 0 ? 0 : -1;
}

static void set_mlp_early(struct sdp_recipe *r, int i)
{
    r->mlp_early = i == 0 ? 1 : -1;
}

/* ---- the rows ---- */

#define RF(f)                                                                                      \
    .base = SDP_OPT_RECIPE, .off = offsetof(struct sdp_recipe, f),                                 \
    .size = sizeof(((struct sdp_recipe *)0)->f)
#define MF(f)            .base = SDP_OPT_SIZES, .off = offsetof(struct sdp_model_cfg, f)
#define NOLIM            (double)INT_MAX
#define INT_GE(x)        .type = SDP_OPT_INT, .lo = (x), .hi = NOLIM, .arg = "N"
#define DBL_GE(x)        .type = SDP_OPT_DBL, .lo = (x), .hi = INFINITY, .arg = "X"
#define DBL_GT(x)        .type = SDP_OPT_DBL, .lo = (x), .hi = INFINITY, .lo_open = 1, .arg = "X"
#define CHOICE(list, fn) .type = SDP_OPT_CHOICE, .names = list, .set = fn
#define INDEX(list, f)   .type = SDP_OPT_CHOICE, .names = list, RF(f)
#define TRAIN            .cmds = SDP_CMD_TRAIN
#define BENCH            .cmds = SDP_CMD_BENCH
#define BOTH             .cmds = SDP_CMD_TRAIN | SDP_CMD_BENCH
/* the same, and `slidedp plan` (an option that shapes the plan or the step it prices) */
#define TRAIN_P .cmds = SDP_CMD_TRAIN | SDP_CMD_PLAN
#define BENCH_P .cmds = SDP_CMD_BENCH | SDP_CMD_PLAN
#define BOTH_P  .cmds = SDP_CMD_TRAIN | SDP_CMD_BENCH | SDP_CMD_PLAN

const char *const sdp_option_sections[SDP_OPT_NSECTIONS + 1] = { "model",     "data",     "batch",
                                                                 "optimizer", "schedule", "train",
                                                                 "output",    NULL };

const struct sdp_option sdp_options[] = {
    /* model: path, preset or arch come first; the other keys are sizes (they need arch) */
    { "model.path", .type = SDP_OPT_PATH, RF(model_path), .def = "none",
      .help = "a Hugging Face model directory (config.json and safetensors)" },
    { "model.tokenizer", .type = SDP_OPT_PATH, RF(tokenizer), .def = "model.path's, if any",
      .help = "a tokenizer directory: its files and a generation_config.json go into RUN/final" },
    { "model.preset", .type = SDP_OPT_STR, RF(model_preset), .def = "none",
      .help =
          "a preset of models/: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, "
          "qwen3-30b-a3b, qwen3-30b-a3b-l12 (Qwen3-MoE, docs/moe.md)" },
    { "model.arch", .type = SDP_OPT_ARCH, .def = "none",
      .help = "an architecture (qwen3, llama) whose sizes the next keys give" },
    { "model.vocab_size", MF(vocab_size), INT_GE(1), .def = "the arch's", .help = "vocabulary" },
    { "model.hidden_size", MF(hidden_size), INT_GE(1), .def = "the arch's", .help = "hidden size" },
    { "model.intermediate_size", MF(intermediate_size), INT_GE(1), .def = "the arch's",
      .help = "MLP size" },
    { "model.num_layers", MF(num_layers), INT_GE(1), .def = "the arch's",
      .help = "decoder layers" },
    { "model.num_heads", MF(num_heads), INT_GE(1), .def = "the arch's", .help = "attention heads" },
    { "model.num_kv_heads", MF(num_kv_heads), INT_GE(1), .def = "num_heads",
      .help = "key/value heads" },
    { "model.head_dim", MF(head_dim), INT_GE(1), .def = "hidden_size / num_heads",
      .help = "size of a head" },
    { "model.rope_theta", MF(rope_theta), DBL_GT(0), .def = "the arch's", .help = "RoPE base" },
    { "model.rms_norm_eps", MF(rms_norm_eps), DBL_GT(0), .def = "the arch's",
      .help = "RMSNorm epsilon" },
    { "model.tie_word_embeddings", .type = SDP_OPT_BOOL, MF(tie_word_embeddings),
      .def = "the arch's", .help = "the LM head is the embedding" },
    { "model.max_position_embeddings", MF(max_position_embeddings), INT_GE(1), .def = "the arch's",
      .help = "longest sequence" },
    { "model.initializer_range", MF(initializer_range), DBL_GE(0), .def = "the arch's",
      .help = "standard deviation of the random initialisation" },
    { "model.rope_type", .type = SDP_OPT_CHOICE, .names = rope_type_names, MF(rope_type),
      .def = "none", .help = "RoPE scaling, as config.json's rope_scaling (with rope_factor)" },
    { "model.rope_factor", MF(rope_scaling_factor), DBL_GT(0), .def = "none",
      .help = "RoPE scaling factor (with rope_type)" },
    { "model.rope_original_max_position_embeddings", MF(rope_original_max_pos), INT_GE(1),
      .def = "max_position_embeddings", .help = "yarn, llama3: the pretraining context" },
    { "model.rope_beta_fast", MF(rope_beta_fast), DBL_GT(0), .def = "32",
      .help = "yarn: rotations where extrapolation ends" },
    { "model.rope_beta_slow", MF(rope_beta_slow), DBL_GT(0), .def = "1",
      .help = "yarn: rotations where interpolation begins" },
    { "model.rope_attention_factor", MF(rope_attention_factor), DBL_GT(0),
      .def = "0.1 ln(factor) + 1", .help = "yarn: the factor of cos and sin" },
    { "model.rope_low_freq_factor", MF(rope_low_freq_factor), DBL_GT(0), .def = "none",
      .help = "llama3: low frequency factor" },
    { "model.rope_high_freq_factor", MF(rope_high_freq_factor), DBL_GT(0), .def = "none",
      .help = "llama3: high frequency factor" },

    { "data.train", .type = SDP_OPT_PATH, RF(data_train), .def = "none",
      .help = "the token shard (tools/make_token_data.py, slidedp tokenize)" },
    { "data.val", .type = SDP_OPT_PATH, RF(data_val), .def = "none",
      .help = "held-out token shard for the validation loss (train.eval_every)" },
    { "data.seq_len", "seq", BENCH_P, RF(seq_len), INT_GE(1), .def = "1024",
      .help = "tokens per sequence" },
    { "data.shuffle", .type = SDP_OPT_BOOL, RF(shuffle), .def = "true",
      .help = "shuffle the sequences every epoch" },
    { "data.doc_mask", .type = SDP_OPT_BOOL, RF(doc_mask), .def = "true",
      .help = "attend within each document of a row only (the shard's end-of-document id)" },
    { "data.doc_positions", .type = SDP_OPT_BOOL, RF(doc_positions), .def = "false",
      .help = "with doc_mask: positions restart at every document" },

    { "batch.global", "batch", BENCH_P, RF(global_batch), INT_GE(1), .def = "8", .bench_def = "16",
      .help = "sequences per optimizer step, shared by the ranks" },
    { "batch.micro", "micro", BENCH_P, RF(micro_batch), INT_GE(1), .def = "8",
      .bench_def = "batch / ranks", .help = "sequences per micro-batch; divides batch.global" },

    { "optimizer.name", CHOICE(optimizer_names, set_optimizer), .def = "adamw",
      .help = "the optimizer" },
    { "optimizer.lr", RF(lr), DBL_GT(0), .def = "3e-4", .help = "peak learning rate" },
    { "optimizer.beta1", RF(beta1), .type = SDP_OPT_DBL, .lo = 0, .hi = 1, .hi_open = 1,
      .def = "0.9", .help = "AdamW's beta1" },
    { "optimizer.beta2", RF(beta2), .type = SDP_OPT_DBL, .lo = 0, .hi = 1, .hi_open = 1,
      .def = "0.95", .help = "AdamW's beta2" },
    { "optimizer.eps", RF(eps), DBL_GT(0), .def = "1e-8", .help = "AdamW's epsilon" },
    { "optimizer.weight_decay", RF(weight_decay), DBL_GE(0), .def = "0.1",
      .help = "decoupled weight decay" },
    { "optimizer.max_grad_norm", "max-grad-norm", BENCH_P, RF(max_grad_norm), DBL_GE(0),
      .def = "1.0", .bench_def = "0", .help = "clip the global gradient norm to this (0: none)" },

    { "schedule.name", CHOICE(schedule_names, set_schedule), .def = "cosine",
      .help = "learning-rate decay after the warmup" },
    { "schedule.warmup_steps", RF(warmup_steps), INT_GE(0), .def = "0",
      .help = "steps of linear warmup" },
    { "schedule.min_lr_ratio", RF(min_lr_ratio), .type = SDP_OPT_DBL, .lo = 0, .hi = 1,
      .def = "0.1", .help = "the decay's end, as a fraction of lr" },

    { "train.steps", "steps", BOTH, RF(steps), INT_GE(1), .def = "100", .bench_def = "5",
      .help = "optimizer steps (bench: the timed steps)" },
    { "train.seed", .type = SDP_OPT_U64, RF(seed), .def = "1234",
      .help = "random initialisation and data order" },
    { "train.precision", "precision", BOTH_P, CHOICE(precision_names, set_precision), .def = "bf16",
      .help = "the working copies' dtype" },
    { "train.chunk_mib", "chunk-mib", BENCH_P, RF(chunk_mib), DBL_GE(0), .def = "16",
      .help = "parameter chunk, MiB of fp32 master (0: unchunked, one chunk a group)" },
    { "train.activations", "activations", BENCH_P, CHOICE(activation_names, set_activations),
      .def = "recompute",
      .help = "offload: recompute, the saved inputs wait on the host; selective: recompute, "
              "the mid residuals kept; keep-attn: recompute but the attention core, its output "
              "kept on the GPU; unset, offload where recompute passes the GPU limit" },
    { "train.on_nan", INDEX(on_nan_names, skip_nonfinite), .def = "stop",
      .help = "a non-finite loss or gradient stops the run, or its update is skipped" },
    { "train.sched", "sched", BOTH_P, .type = SDP_OPT_STR, RF(sched), .arg = "NAME",
      .def = "sdp-slidedp", .help = "StarPU scheduling policy (`slidedp policies`)" },
    { "train.cpus", "cpus", BOTH_P, RF(cpus), INT_GE(0), .def = "0",
      .help = "CPU workers (0: all cores; under Slurm, SLURM_CPUS_PER_TASK; more: capped)" },
    { "train.host_memory_gib", RF(host_memory_gib), DBL_GE(0), .def = "0",
      .help = "host memory budget (0: MemAvailable or the cgroup's limit)" },
    { "train.gpus", "gpus", BOTH_P, RF(gpus), INT_GE(-1), .def = "-1",
      .help = "CUDA workers (-1: all found, 0: none)" },
    { "train.gpu_memory_gib", "gpu-memory-gib", BENCH_P, RF(gpu_memory_gib), DBL_GE(0), .def = "0",
      .help = "memory StarPU may use per GPU (0: all)" },
    { "train.ranks", "ranks", BOTH_P, RF(ranks), INT_GE(1), .def = "1",
      .help = "data-parallel ranks: one per GPU, or CPU workers standing in" },
    { "train.grad_route", "grad-route", BOTH_P, INDEX(grad_route_names, grad_route_gpu),
      .def = "cpu", .help = "the host sums the ranks' gradients, or rank 0's GPU does" },
    { "train.param_route", "param-route", BOTH_P, INDEX(param_route_names, param_sharded),
      .def = "replicated", .help = "each rank gets every working copy from the host, or 1/ranks" },
    { "train.grad_route_groups", "grad-route-groups", TRAIN_P, .type = SDP_OPT_STR,
      RF(grad_route_groups), .arg = "SPEC", .def = "none",
      .help = "per-group routes, e.g. gpu:1-18,cpu:19-36 (0: embedding, L+1: head)" },
    { "train.window", "window", BENCH_P, RF(window), INT_GE(0),
      .def = "2 with gpu_memory_gib, else 0",
      .help = "layers kept on the GPU from the forward for the backward" },
    { "train.bwd_lookahead", "bwd-lookahead", BENCH_P, RF(bwd_lookahead), INT_GE(-1), .def = "1",
      .help = "layers the backward's recomputation may run ahead (-1: no bound)" },
    { "train.keep_last", "keep-last", BENCH_P, RF(keep_last), INT_GE(0), .def = "1",
      .help = "with recomputation, the top layers that keep their activations" },
    { "train.keep_mlp", "keep-mlp", BENCH_P, RF(keep_mlp), INT_GE(0), .def = "0",
      .help = "with recomputation, the top recomputed layers keeping their MLP's inputs" },
    { "train.gpu_update", "gpu-update", BOTH_P, RF(gpu_update), INT_GE(-1), .def = "-1",
      .help = "AdamW of layers 1..N on the GPU (one rank, bf16 return, copies on the host; "
              "LoRA: their adapters'); -1: a LoRA run's adapters where they fit, else none" },
    { "train.grad_dtype", "grad-dtype", BOTH_P, CHOICE(grad_dtype_names, set_grad_dtype),
      .def = "auto", .help = "the gradient AdamW reads (auto: bf16 for one rank on a GPU)" },
    { "train.residual_dtype", "residual-dtype", BOTH_P, INDEX(residual_dtype_names, residual_f32),
      .def = "bf16",
      .help = "the residual stream, the norms' inputs and its gradient with bf16 working copies "
              "(fp32: autocast's numerics, for dense full training)" },
    { "train.work_home", "work-home", BOTH_P, INDEX(home_names, work_on_gpu), .def = "host",
      .help = "where the bf16 working copies live" },
    { "train.embed_home", "embed-home", BOTH_P, INDEX(home_names, embed_on_gpu), .def = "host",
      .help = "where the embedding's working copy lives" },
    { "train.embed_lookup", "embed-lookup", BOTH, INDEX(embed_lookup_names, embed_lookup_host),
      .def = "compute", .help = "where the forward's embedding lookup runs" },
    { "train.staging_depth", "staging-depth", BENCH_P, RF(staging_depth), INT_GE(1),
      .def = "SDP_STAGING_DEPTH, or one per CPU worker (>= 4)",
      .help = "sdp-slidedp: casts and updates in flight" },
    { "train.prefetch_groups", "prefetch-groups", BENCH, RF(prefetch_groups), INT_GE(0),
      .def = "SDP_WINDOW_DEPTH, or 2", .help = "sdp-slidedp: groups a GPU may prefetch ahead" },
    { "train.in_flight", "in-flight", BOTH, RF(in_flight), INT_GE(1), .def = "ranks + 1",
      .help = "sdp-roundpipe: micro-batches in flight at once (other policies: ignored, with a "
              "warning)" },
    { "train.collectives", "collectives", BOTH, INDEX(collectives_names, nccl), .def = "starpu",
      .help = "the GPU reduction and sharded dispatch as StarPU tasks, or NCCL" },
    { "train.param_delay", "param-delay", TRAIN_P, RF(param_delay), .type = SDP_OPT_INT, .lo = 0,
      .hi = 1, .arg = "0|1", .def = "0",
      .help = "1: asynchronous optimizer, weights one update old (for comparisons)" },
    { "train.policy", "policy", TRAIN_P, INDEX(policy_names, policy_auto), .def = "fixed",
      .help = "auto: each layer's activation placement chosen by the step-time model, measured "
              "on a reduced pipeline and validated on the first steps (docs/autopolicy.md)" },
    { "train.machine", "machine", BOTH_P, .type = SDP_OPT_PATH, RF(machine), .arg = "FILE",
      .def = "none (the reference node's figures)",
      .help = "the machine file of `slidedp calibrate`, for the step-time model's prediction" },
    { "train.eval_every", "eval-every", TRAIN, RF(eval_every), INT_GE(0), .def = "0",
      .help = "steps between validation losses over data.val, and at the last step (0: never)" },
    { "train.mlp_early", "mlp-early", BOTH_P, CHOICE(on_off_names, set_mlp_early),
      .def = "with the working copies off the host",
      .help = "pack and update a layer's MLP chunks once the MLP's backward has run" },

    { "output.dir", "output", TRAIN, .type = SDP_OPT_PATH, RF(output_dir), .arg = "DIR",
      .def = "none (Slurm: runs/RECIPE-JOBID)",
      .help = "run directory: checkpoints, COMPLETE, the trained model in DIR/final" },
    { "output.metrics", "metrics", TRAIN, .type = SDP_OPT_STR, RF(metrics), .arg = "FILE",
      .def = "none", .help = "one JSON object per step (in a recipe, relative to output.dir)" },
    { "output.checkpoint_every", "checkpoint-every", TRAIN, RF(checkpoint_every), INT_GE(0),
      .def = "0", .help = "steps between checkpoints (0: at the end and on a signal)" },
    { "output.keep_checkpoints", RF(keep_checkpoints), INT_GE(1), .def = "3",
      .help = "checkpoints kept" },
    { "output.save_best", .type = SDP_OPT_BOOL, RF(save_best), .def = "false",
      .help = "keep DIR/best: the model of the lowest validation loss, with its step" },

    /* command line only */
    { NULL, "model", 0, BENCH_P, .type = SDP_OPT_ARG, RF(bench_model), .arg = "PRESET|CONFIG",
      .def = "required", .help = "a preset, or a Hugging Face config.json or its directory" },
    { NULL, "warmup", 0, BENCH, RF(warmup), INT_GE(0), .def = "2", .help = "untimed steps first" },
    { NULL, "lora-rank", 0, BENCH, RF(lora.rank), .type = SDP_OPT_INT, .lo = 1, .hi = 65536,
      .arg = "R", .def = "none: full training",
      .help = "LoRA adapters of rank R on a frozen base (docs/lora.md)" },
    { NULL, "lora-alpha", 0, BENCH, RF(lora.alpha), DBL_GT(0), .def = "8, PEFT's",
      .help = "with --lora-rank: the adapters' scaling is X / R" },
    { NULL, "lora-targets", 0, BENCH, .type = SDP_OPT_ARG, RF(bench_lora_targets), .arg = "LIST",
      .def = "all-linear",
      .help = "with --lora-rank: the adapted linears, all-linear or q_proj,k_proj,...,down_proj" },
    { NULL, "barrier", 0, BENCH, .type = SDP_OPT_FLAG, RF(barrier), .def = "off",
      .help = "wait for every task after each step (tokens/s from the median step)" },
    { NULL, "embed-early", 0, BOTH_P, CHOICE(on_off_names, set_embed_early), .def = "on",
      .help = "update the tied embedding's rows outside the step's tokens during the backward" },
    { NULL, "no-resume", 0, TRAIN, .type = SDP_OPT_FLAG, RF(no_resume), .def = "off",
      .help = "start afresh (refused where DIR holds a run: see --force-new)" },
    { NULL, "force-new", 0, TRAIN, .type = SDP_OPT_FLAG, RF(force_new), .def = "off",
      .help = "start afresh, moving the run DIR holds (checkpoints, final/...) to DIR/previous-N" },
    { NULL, "trace", 0, BOTH, .type = SDP_OPT_ARG, RF(trace), .arg = "FILE.json", .def = "none",
      .help = "Chrome/Perfetto timeline of every task, one track per lane" },
    { NULL, "events", 0, BOTH, .type = SDP_OPT_ARG, RF(events), .arg = "FILE.jsonl", .def = "none",
      .help = "the task event log (tools/check_invariants.py)" },
    { NULL, "mem-log", 0, BENCH, .type = SDP_OPT_ARG, RF(mem_log), .arg = "FILE.jsonl",
      .def = "none", .help = "RSS, host and GPU memory every 0.5 s, one JSON line a sample" },
    { NULL, "print-plan", 0, TRAIN, .type = SDP_OPT_FLAG, RF(print_plan), .def = "off",
      .help = "print the per-layer plan (the knobs, then the recipe's plan: rows) and exit" },
    { NULL, "json", 0, SDP_CMD_PLAN, .type = SDP_OPT_FLAG, RF(json), .def = "off",
      .help = "the prediction as one JSON object" },
    { NULL, "nodes", 0, SDP_CMD_PLAN, RF(nodes), INT_GE(1),
      .def = "1 (train: the MPI launcher's processes)",
      .help = "nodes of the run, one process each: the step-time model prices the link between "
              "them (docs/prediction.md)" },
    { NULL, "node-gbs", 0, SDP_CMD_PLAN, RF(node_gbs), DBL_GT(0),
      .def = "the machine file's node_link, else 12.5 (100 Gb/s)",
      .help = "the link between nodes, GB/s each way" },
    { NULL, "node-latency-us", 0, SDP_CMD_PLAN, RF(node_latency_us), DBL_GE(0),
      .def = "the machine file's node_link, else 10", .help = "the link's latency a message" },
    { NULL, "auto", 0, SDP_CMD_PLAN, .type = SDP_OPT_FLAG, RF(plan_auto), .def = "off",
      .help = "choose each layer's activation placement within the GPU budget (text only)" },
    { NULL, "moe-routing", 0, SDP_CMD_PLAN, .type = SDP_OPT_PATH, RF(moe_routing), .arg = "FILE",
      .def = "an even router",
      .help = "a Qwen3-MoE run's measured routing (RUN/moe-routing.json) "
              "to price routed streaming's bytes" },
    { NULL, "quiet", 'q', TRAIN, .type = SDP_OPT_FLAG, RF(quiet), .def = "off",
      .help = "no progress lines" },
    { NULL, "verbose", 'v', TRAIN, .type = SDP_OPT_FLAG, RF(verbose), .def = "off",
      .help = "debug logging; errors name their source location" },
};
const int sdp_noptions = (int)(sizeof(sdp_options) / sizeof(sdp_options[0]));
_Static_assert(sizeof(sdp_options) / sizeof(sdp_options[0]) <= SDP_OPT_MAX,
               "more options than SDP_OPT_MAX");

/* ---- lookups and texts ---- */

int sdp_option_is_rope(int i)
{
    const char *k = sdp_options[i].key;
    return k && !strncmp(k, "model.rope_", 11) && strcmp(k, "model.rope_theta") != 0;
}

const struct sdp_option *sdp_option_by_key(const char *key)
{
    for (int i = 0; i < sdp_noptions; i++)
        if (sdp_options[i].key && !strcmp(sdp_options[i].key, key))
            return &sdp_options[i];
    return NULL;
}

int sdp_option_in_range(const struct sdp_option *o, double x)
{
    if (x < o->lo || (o->lo_open && x == o->lo))
        return 0;
    if (x > o->hi || (o->hi_open && x == o->hi))
        return 0;
    return 1;
}

void sdp_option_range_text(const struct sdp_option *o, char *out, size_t len)
{
    if (isinf(o->hi) || o->hi == NOLIM)
        snprintf(out, len, "must be %s %g", o->lo_open ? ">" : ">=", o->lo);
    else
        snprintf(out, len, "must be in %c%g, %g%c", o->lo_open ? '(' : '[', o->lo, o->hi,
                 o->hi_open ? ')' : ']');
}

void sdp_option_join(char *out, size_t len, const char *const *names, const char *last_sep)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; names[i]; i++) {
        const char *sep = i == 0 ? "" : names[i + 1] || !last_sep ? ", " : last_sep;
        int w = snprintf(out + used, len - used, "%s%s", sep, names[i]);
        if (w < 0 || (size_t)w >= len - used)
            break;
        used += (size_t)w;
    }
}
