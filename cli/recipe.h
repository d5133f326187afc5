/* SPDX-License-Identifier: MIT */
/* Training recipes in YAML (libyaml), in the convention of torchtune and axolotl: sections model,
 * data, batch, optimizer, schedule, train and output, each a mapping of keys.  Every key, its type,
 * bounds, default and meaning is a row of the options registry (cli/options.c), listed in
 * docs/options.md (`slidedp options --markdown`).
 *
 * Relative paths are resolved against the recipe file's directory.  Unknown keys, wrong types and
 * impossible values are errors naming the file, line and key (exit code 2 from the CLI).
 * Tests: tests/cli/test_recipe.c. */
#ifndef SDP_RECIPE_H
#define SDP_RECIPE_H

#include "models/sdp_lora.h"
#include "models/sdp_models.h"

#define SDP_PATH_MAX 4096

enum sdp_precision { SDP_PREC_FP32, SDP_PREC_BF16 };
enum sdp_lr_schedule { SDP_LR_COSINE, SDP_LR_LINEAR, SDP_LR_CONSTANT };

#define SDP_RECIPE_PLAN_ROWS 64 /* settings of a recipe's plan: section at most */

struct sdp_recipe {
    char file[SDP_PATH_MAX]; /* the recipe's own path */

    /* model */
    char model_path[SDP_PATH_MAX]; /* HF directory ("" = random init from sizes/preset) */
    char tokenizer[SDP_PATH_MAX];  /* tokenizer directory for RUN/final ("" = none) */
    char model_preset[64];
    struct sdp_model_cfg model; /* filled from preset/sizes; from config.json by the runtime when
                                   model_path is set (then sizes in the recipe are an error) */

    /* data */
    char data_train[SDP_PATH_MAX];
    char data_val[SDP_PATH_MAX]; /* held-out shard for the validation loss ("" = none) */
    int seq_len;                 /* T */
    int shuffle;
    int doc_mask;      /* attention within each document of a packed row, no target across */
    int doc_positions; /* with doc_mask: RoPE positions restart at every document */
    long long attn_row_tokens; /* derived, with doc_mask: the tokens a row of the masked attention
                                  lays out (sdp_graph_conf.attn_row_tokens; 0 until the data is
                                  read, and without a GPU: seq_len) */

    /* batch */
    int global_batch; /* sequences per optimizer step */
    int micro_batch;  /* sequences per micro-batch; divides global_batch */

    /* optimizer */
    double lr, beta1, beta2, eps, weight_decay, max_grad_norm;

    /* schedule */
    enum sdp_lr_schedule lr_schedule;
    int warmup_steps;
    double min_lr_ratio;

    /* train */
    int steps;
    unsigned long long seed;
    enum sdp_precision precision;
    double chunk_mib;       /* parameter chunk size, MiB of fp32 master */
    int recompute;          /* enum sdp_recompute (FULL, the default; sdp_graph_conf) */
    int act_offload;        /* activations: offload (the saved layer inputs wait on the host) */
    int act_given;          /* train.activations given; else the plan may offload the saved
                               inputs where the GPU limit binds (sdp_cli_fit_activations) */
    char sched[64];         /* StarPU policy name ("" = runtime default) */
    int cpus;               /* CPU workers (0 = all cores) */
    double host_memory_gib; /* host memory budget (0 = MemAvailable / cgroup limit) */
    int gpus;               /* CUDA workers (-1 = all found, 0 = none) */
    int skip_nonfinite;     /* 1: skip the update of a step with a non-finite gradient; 0: stop */
    double gpu_memory_gib;  /* per-GPU memory StarPU may use (0 = no limit) */
    int ranks;              /* data-parallel ranks: GPUs, or CPU workers standing in (default 1) */
    int nodes, node;        /* the run's nodes and this one's index: from the MPI launcher
                               (runtime/nodes.h, cli/train_nodes.c), not a recipe key; `plan
                               --nodes` sets the first */
    double node_gbs;        /* plan: the link between nodes, GB/s (0: the machine file's) */
    double node_latency_us; /* plan: its latency (< 0: the machine file's) */
    int grad_route_gpu;     /* gradient return: 0 CPU reduction (default), 1 GPU reduction */
    int param_sharded;      /* parameter dispatch: 0 replicated (default), 1 sharded */
    char grad_route_groups[256]; /* per-group overrides: "gpu:1-18,cpu:19-36" ("" = none) */
    int param_delay;             /* 0: synchronous; 1: asynchronous optimizer (one step stale) */
    int window;                  /* GPU window: release layers after use, keeping the last `window`
                                    forward layers (-1 = 2 with gpu_memory_gib, else 0: no release) */
    int bwd_lookahead;           /* sdp_graph_conf.bwd_lookahead (default 1, -1 = no bound) */
    int keep_last;               /* sdp_graph_conf.keep_last (default 1) */
    int keep_mlp;                /* sdp_graph_conf.keep_mlp (default 0) */
    int gpu_update;              /* sdp_graph_conf.gpu_update; -1: auto (sdp_cli_gpu_update) */
    int grad_bf16;               /* train.grad_dtype: -1 auto (default), 0 fp32, 1 bf16 */
    int residual_f32;            /* train.residual_dtype: 0 bf16 (default), 1 fp32
                                    (sdp_graph_conf.residual_f32) */
    int work_on_gpu;             /* train.work_home: 0 host (default), 1 gpu (sdp_state's
                                    work_staged: the working copies off the host) */
    int embed_on_gpu;            /* train.embed_home: 0 host (default), 1 gpu (group 0 staged:
                                    SDP_STATE_EMBED_STAGED) */
    int embed_lookup_host;       /* train.embed_lookup: 0 compute (default), 1 host
                                    (sdp_graph_conf.embed_lookup_host) */
    int staging_depth;           /* sdp-slidedp: casts and updates in flight (0 = policy default) */
    int prefetch_groups; /* sdp-slidedp: groups a GPU prefetches ahead (-1 = policy default) */
    int in_flight;       /* sdp-roundpipe: micro-batches in flight (0 = the ranks + 1) */
    int nccl;            /* train.collectives: 0 starpu (default), 1 nccl (sdp_tasks_use_nccl) */
    int eval_every;      /* steps between validation losses over data.val (0 = never) */
    char machine[SDP_PATH_MAX]; /* the calibration file for the step-time model ("" = defaults) */
    int policy_auto;            /* train.policy: 0 fixed (the recipe's plan), 1 auto (AutoPolicy) */

    /* output */
    char output_dir[SDP_PATH_MAX]; /* "" = no output directory */
    char metrics[SDP_PATH_MAX];    /* "" = none */
    int checkpoint_every;          /* steps between checkpoints (0 = end and signals only) */
    int keep_checkpoints;          /* checkpoints kept in output_dir/checkpoints */
    int save_best;                 /* keep output_dir/best: the model of the best validation loss */

    /* plan: rows of the per-layer plan (cli/plan_recipe.c), applied in order over the knobs */
    int nplan;
    struct sdp_recipe_plan_row {
        int first, last; /* groups (0: embedding, 1..L: layers, L + 1: head); -1..-1: all layers */
        char key[24], value[24];
        int line; /* of the key in the recipe */
    } plan[SDP_RECIPE_PLAN_ROWS];

    /* lora: LoRA adapters (cli/recipe_lora.c); lora.rank 0: none, the whole model trains */
    struct sdp_lora_cfg lora;
    char lora_init[SDP_PATH_MAX]; /* lora.init_from: a PEFT adapter directory ("" = PEFT's init) */

    /* command line only: the rows of cli/options.c without a recipe key */
    int embed_early; /* sdp_graph_conf.embed_early: 0 on (default), -1 off */
    int mlp_early;   /* sdp_graph_conf.mlp_early: 0 where it applies (default), 1 on, -1 off */
    int no_resume, quiet, verbose;  /* train */
    int force_new;                  /* train: move the run a run directory holds aside */
    int print_plan;                 /* train: print the plan and exit */
    int json;                       /* plan: the prediction as JSON */
    int plan_auto;                  /* plan: choose each layer's activation placement */
    char moe_routing[SDP_PATH_MAX]; /* plan: a run's measured routing ("" = an even router) */
    int warmup, barrier;            /* bench: untimed steps first, a barrier after each step */
    const char *trace, *events;     /* Chrome/Perfetto timeline, task event log ("" = none) */
    const char *mem_log;            /* bench: memory samples (JSONL) */
    const char *bench_model;        /* bench: a preset, or a Hugging Face config.json */
    const char *bench_lora_targets; /* bench --lora-targets: all-linear or q_proj,v_proj,... */
};

/** Defaults for every field (documented in README's recipe section). */
void sdp_recipe_defaults(struct sdp_recipe *r);

/** Parse and validate a recipe file.  Errors name the file, line and key.
 * @return 0, -ENOENT (file missing), -EINVAL (malformed or impossible value) */
int sdp_recipe_load(const char *path, struct sdp_recipe *r);

/** Validate cross-field constraints (batch divisibility, chunk size > 0, seq_len <= max positions,
 * ...) after the model configuration is known.  @return 0 or -EINVAL (logged) */
int sdp_recipe_validate(const struct sdp_recipe *r);

/** The gradient route of each of ngroups parameter groups (1: GPU reduction, 0: CPU) from
 * train.grad_route and train.grad_route_groups.  @return 0 or -EINVAL (a malformed spec or a group
 * out of range: logged with the recipe file) */
int sdp_recipe_grad_routes(const struct sdp_recipe *r, int ngroups, unsigned char *gpu);

/** Whether the run returns its gradients in bf16: train.grad_dtype bf16, or auto with one rank
 * whose compute is on a GPU (on_gpu); fp32 otherwise.  On a GPU the bf16 return halves the
 * gradient's PCIe and DRAM bytes and the host state; on the CPU it saves nothing. */
int sdp_recipe_grad_bf16(const struct sdp_recipe *r, int on_gpu);

/** The settings of a train.activations name (recompute, keep, offload, selective), for a command
 * line that takes the same names: *recompute (enum sdp_recompute) and *offload (the saved inputs
 * wait on the host).  0, or -EINVAL for another name. */
int sdp_recipe_activations(const char *name, int *recompute, int *offload);
/** The train.activations name of those settings (the inverse of sdp_recipe_activations). */
const char *sdp_recipe_activations_name(int recompute, int offload);
/** The same rule for a requested dtype (-1 auto, 0 fp32, 1 bf16) and a rank count (bench). */
int sdp_grad_bf16_choice(int grad_dtype, int ranks, int on_gpu);

struct yaml_document_s;
struct yaml_node_s;
/** Parse a `plan:` list into r->plan: each item a mapping with `layers` (N, N-M or all: the
 * decoder layers 1..L; 0 is the embedding and L + 1 the LM head) and one or more of the keys
 * sdp_plan_set (graph/plan.h) takes.  Values are checked when the run makes its plan, with the
 * item's line.  @return 0 or -EINVAL (logged with the recipe file and line) */
int sdp_recipe_plan_parse(const char *file, struct sdp_recipe *r, struct yaml_document_s *doc,
                          const struct yaml_node_s *list);

/** Parse a `lora:` mapping into r->lora and r->lora_init (keys rank, alpha, dropout, targets,
 * layers, init_from; PEFT's defaults for the others).  @return 0 or -EINVAL (logged with the
 * recipe file, line and key) */
int sdp_recipe_lora_parse(const char *file, struct sdp_recipe *r, struct yaml_document_s *doc,
                          const struct yaml_node_s *map);
/** r->lora against the model (rank within every adapted linear, layers within the model) and
 * what the runtime supports (dropout 0, one rank).  0 without lora:.  @return 0 or -EINVAL
 * (logged, naming the key) */
int sdp_recipe_lora_check(const struct sdp_recipe *r);
/** The recipe's rope scaling keys (rows of sdp_option_is_rope) from given over model, a preset's
 * or an arch's; line: the recipe line of every registry row (0: absent); path_line: model.path's,
 * whose config.json carries its own rope_scaling, so that the keys are refused then.
 * @return 0 or -EINVAL (logged with the file, line and key) */
int sdp_recipe_apply_rope(const char *file, struct sdp_model_cfg *model,
                          const struct sdp_model_cfg *given, const int *line, int path_line);

/** Learning rate for optimizer step s (0-based) of r->steps: linear warmup (s+1)/warmup, then
 * cosine or linear decay to lr * min_lr_ratio, or constant. */
double sdp_recipe_lr_at(const struct sdp_recipe *r, int s);

#endif
