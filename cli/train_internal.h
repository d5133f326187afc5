/* SPDX-License-Identifier: MIT */
/* The parts of `slidedp train` (cli/train.c): the checks made before StarPU starts
 * (cli/train_checks.c), the run directory (cli/train_rundir.c) and the loop of steps
 * (cli/train_loop.c), sharing one struct sdp_train. */
#ifndef SDP_CLI_TRAIN_INTERNAL_H
#define SDP_CLI_TRAIN_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "base/fsutil.h"
#include "cli/predict_cli.h"
#include "cli/recipe.h"
#include "formats/data.h"
#include "graph/step.h"
#include "runtime/ckpt.h"
#include "runtime/state.h"

/* train.policy auto: where the plan came from, its rows and figures (cli/autopolicy*.c) */
#define SDP_AUTO_MAX_ROWS 64
#define SDP_AUTO_VSTEPS   2 /* the validation's timed steps per plan */
enum { SDP_AUTO_SELECTED = 1, SDP_AUTO_FROM_CACHE, SDP_AUTO_FROM_RUN };
struct sdp_auto {
    int from;       /* SDP_AUTO_*; 0: no selection */
    int measured;   /* stage 2 ran: adjust[] holds its corrections */
    int nrows;      /* the chosen placements (0: the recipe's plan) */
    int gpu_update; /* layers 1..gpu_update updated on the GPU (the host's budget), 0: none */
    struct sdp_auto_row rows[SDP_AUTO_MAX_ROWS];
    double adjust[SDP_AUTO_NPLACE];       /* s a step per layer, measured - predicted */
    double pred_chosen_s, pred_default_s; /* the model's steps */
    double t0, select_s;                  /* when the selection began, how long it took */
    int validate;                         /* stage 4 under way */
    double vchosen[SDP_AUTO_VSTEPS], vbase[SDP_AUTO_VSTEPS]; /* its timed steps */
    double meas_s[2];                                        /* their means: chosen, the recipe's */
    char verdict[48];
    char key[1024], cache_dir[SDP_PATH_MAX], cache_path[SDP_PATH_MAX + 64];
};

/** One training run: the recipe, its data, state and graph, and where it stands. */
struct sdp_train {
    struct sdp_recipe *r;
    struct sdp_data data;
    struct sdp_state st;
    sdp_graph_t *g;
    unsigned char *routes; /* gradient route per parameter group */
    void *policy;          /* the scheduling policy the recipe names (NULL: StarPU's by name) */
    enum sdp_dtype work_dt, grad_dt;
    FILE *mf; /* the metrics file, or NULL */
    int32_t *ids, *targets, *next_ids, *next_targets;
    int32_t *segs, *next_segs; /* document starts (data.doc_mask), else NULL */
    struct sdp_ckpt_info info; /* the checkpoint resumed from */
    char ckdir[SDP_PATH_MAX + 16], ckpath[SDP_PATH_MAX + 64], fp[128];
    int resuming, first, done, stopped, started, state_made; /* done: steps run so far */
    int pipe; /* sdp-roundpipe: the stage workers (the recipe's ranks; the graph has one) */
    unsigned long long host_act,
        host_avail; /* bytes: a step's activations (estimate), the host's */
    double last_loss;
    /* batches without a target passed over (cli/train_loop.c): before the step's batch, before
     * the batch read ahead, in the whole run */
    int skipped, next_skipped;
    long long skipped_total;
    /* the validation (cli/train_eval.c): data.val, a batch of it, the best loss so far */
    struct sdp_data val;
    int32_t *val_ids, *val_targets, *val_segs;
    double best_loss;
    int best_step;
    /* the step-time model's prediction (cli/predict_cli.h) and the steps after the first, timed
     * (the first fills the pipeline and wakes the workers) */
    double pred_step_s, timed_s;
    int timed;
    struct sdp_auto autop; /* train.policy auto */
};

/** What a step's metrics line holds beyond the graph's result. */
struct sdp_step_extra {
    int skipped_batches; /* batches without a target passed over before the step's batch */
    int evaluated;       /* 1: val_loss and val_tokens hold the step's validation */
    double val_loss;     /* mean loss over the targets of data.val */
    long long val_tokens;
};

/* cli/train_checks.c */
/** Everything that can be checked before StarPU starts: the model, the recipe, the routes, the
 * policy, the data, the host memory.  Opens t->data.  @return an exit status (0 to go on). */
int sdp_train_check(struct sdp_train *t);
/** The GPU window must fit: the configured limit within the device, the run's minimum within both
 * (checked first by sdp_train_check, before StarPU starts, where CUDA sees a GPU); then
 * train.gpu_update's auto is resolved. */
int sdp_train_check_gpu_memory(struct sdp_recipe *r, enum sdp_dtype work_dt);
/** Slurm: the job id names the default run directory, the CPUs of the task set the CPU workers. */
void sdp_train_apply_slurm(struct sdp_recipe *r);
/** "embedding", "decoder layer 3", "final norm / LM head" for parameter group g. */
void sdp_train_group_name(const struct sdp_recipe *r, int g, char *out, size_t len);

/* cli/train.c */
/** The graph again on the state as it stands (the previous one waited for and destroyed), with
 * the auto policy's rows or the recipe's plan alone.  @return an exit status */
int sdp_train_regraph(struct sdp_train *t, int with_auto);

/* cli/autopolicy.c, cli/autopolicy_cache.c, cli/autopolicy_check.c: train.policy auto */
/** Before StarPU: the plan of the run directory (resume) or of the cache, else stage 1 (the
 * model's choice; a budget nothing fits is refused here).  @return an exit status */
int sdp_train_auto_plan(struct sdp_train *t);
/** StarPU started, before the state: stages 2 and 3 (the reduced pipeline, the corrected choice).
 * @return 0 or an error (logged) */
int sdp_train_auto_measure(struct sdp_train *t);
/** The chosen rows as one log line: "auto: what: 1-13 offload, 14 selective, ...". */
void sdp_train_auto_print(const struct sdp_auto *a, const char *what);
/** A Qwen3-MoE run's routing so far, `steps` steps, into RUN/moe-routing.json (cli/moe_routing.c;
 * nothing for a dense model or without a run directory).  @return 0 or -EIO (logged) */
int sdp_train_moe_routing_save(const struct sdp_train *t, int steps);
/** The chosen rows onto plan p.  @return 0 or -EINVAL (logged) */
int sdp_train_auto_apply(const struct sdp_train *t, struct sdp_plan *p);
/** The layers the host's budget updates on the GPU onto plan p, whether p takes the chosen rows
 * or is the recipe's own (the validation's other side).  @return 0 or -EINVAL (logged) */
int sdp_train_auto_budget(const struct sdp_train *t, struct sdp_plan *p);
/** Before the first step: stage 4 planned, or the choice saved as it stands. */
void sdp_train_auto_start(struct sdp_train *t);
/** Whether step s must not learn of step s + 1 (the graph may change after it). */
int sdp_train_auto_hold_next(const struct sdp_train *t, int s);
/** After step s, which took step_s: stage 4's bookkeeping and changes of graph.  @return an exit
 * status */
int sdp_train_auto_after_step(struct sdp_train *t, int s, double step_s);
/** The key of the cache (the model's shape, batch, budgets, machine) and the cache's paths. */
void sdp_train_auto_key(struct sdp_train *t);
/** The cached or the run directory's plan into t->autop.  @return 0, -ENOENT, -EINVAL (reported) */
int sdp_train_auto_load_cache(struct sdp_train *t);
int sdp_train_auto_load_run(struct sdp_train *t);
/** The plan into the run directory (auto-plan.json) and, with cache, the cache.  @return 0 or the
 * run directory's write error (a cache that cannot be written is a warning) */
int sdp_train_auto_save(struct sdp_train *t, int cache);

/* cli/train_rundir.c */
/** The recipe fields a resumed run must share with the checkpoint's run. */
void sdp_train_fingerprint(struct sdp_train *t);
/** Find the checkpoint to resume from (sets t->resuming, t->info, t->ckpath).  @return an exit
 * status (0 to go on). */
int sdp_train_rundir_open(struct sdp_train *t);
/** The trained model as final/ and the COMPLETE marker.  @return an exit status. */
int sdp_train_rundir_finish(struct sdp_train *t);

/* cli/train_nodes.c: runs over several nodes (one process each; no-ops on one) */
/** The node's part of the run, checked against every other process's (the same binary, recipe
 * and arguments, the micro-batches dividing among the nodes' ranks, the options that run on one
 * node refused); the nodes but node 0 quiet.  @return an exit status */
int sdp_train_nodes_setup(struct sdp_train *t, uint32_t args_crc);
/** The run directory: node 0 opens it (sdp_train_rundir_open), the others resume its checkpoint.
 * @return an exit status */
int sdp_train_nodes_rundir(struct sdp_train *t);
/** Every node with as many CUDA workers (after StarPU starts).  @return an exit status */
int sdp_train_nodes_gpus(void);
/** The trace of a run over several nodes on node 0's clock, with the run's ranks (after
 * sdp_trace_start).  @return an exit status */
int sdp_train_nodes_trace(int ranks);
/** The gradient's exchange between the nodes, said in the log: on the GPU route with rank 0 on a
 * GPU through NCCL where the build has it, else StarPU-MPI's messages (after StarPU starts).
 * @return an exit status */
int sdp_train_nodes_exchange(const struct sdp_recipe *r);
/** Whether any node was asked to stop (mine: this one).  @return an exit status */
int sdp_train_nodes_stop(int mine, int *stop);
/** This node's rows of a batch of batch.global sequences, [*first, *first + count): its
 * micro-batches, dealt node after node.  @return count (batch.global on one node) */
int sdp_train_nodes_rows(const struct sdp_recipe *r, int *first);
/** Whether some node's rows of a batch have a target (mine: this node's count; the nodes agree,
 * so that they pass over the same batches).  @return 0 or -EIO (logged) */
int sdp_train_nodes_any(long long mine, int *any);

/* cli/train_metrics.c */
/** Open the metrics file (a resumed run drops the lines after its checkpoint and appends).
 * @return an exit status. */
int sdp_train_metrics_open(struct sdp_train *t);
/** Move a fresh metrics file from FILE.tmp over FILE (ok: at a checkpoint and at the end), or drop
 * the temporary (!ok: a failed run leaves the old FILE).  @return an exit status. */
int sdp_train_metrics_commit(struct sdp_train *t, int ok);
/** Every path the run writes against every path it reads, and writable (exit 2 if not). */
int sdp_train_check_paths(const struct sdp_train *t);
/** The metrics line of step (0-based) with its result.  @return 0 or -errno. */
int sdp_train_metrics_write(FILE *mf, int step, const struct sdp_step_result *r, double lr,
                            double step_s, double elapsed, const struct sdp_step_extra *x);

/* cli/train_eval.c */
/** The targets of n that count (>= 0; -100 is a masked one). */
long long sdp_train_count_targets(const int32_t *targets, size_t n);
/** Refuse a data file none of whose sequences of data.seq_len tokens has a target (every target
 * masked): no batch of it could ever train.  key names it ("data.train").  @return an exit status
 */
int sdp_train_check_targets(const struct sdp_train *t, const struct sdp_data *d, const char *key);
/** Open and check data.val (readable, within the model's vocabulary, some target), when the
 * recipe names it.  @return an exit status */
int sdp_train_eval_open(struct sdp_train *t);
/** Before the first step: the best validation loss a resumed run had (RUN/best/best.json). */
void sdp_train_eval_resume(struct sdp_train *t);
/** The validation after step s (0-based) when train.eval_every asks for one: the loss over every
 * target of data.val, in order, into x; with output.save_best, a new best goes to RUN/best.
 * @return an exit status */
int sdp_train_eval(struct sdp_train *t, int s, struct sdp_step_extra *x);
void sdp_train_eval_close(struct sdp_train *t);

/* cli/train_loop.c */
/** Install the stop signals (SIGUSR1, SIGTERM, SIGINT): the loop checkpoints and stops at a step
 * boundary; a second SIGINT exits at once. */
void sdp_train_install_signals(void);
/** The steps from t->first to the recipe's last.  @return an exit status. */
int sdp_train_steps(struct sdp_train *t);

#endif
