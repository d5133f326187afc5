/* SPDX-License-Identifier: MIT */
/* The step-time model (graph/predict.h) as the commands use it: the machine it prices on (the file
 * `slidedp calibrate` wrote, or the model's defaults) and the run a recipe describes, priced
 * before any state exists (`slidedp plan`, cli/plan.c) or from the plan a run built (train, bench:
 * the prediction printed beside the measurement).  Test: tests/e2e/test_e2e_plan_predict.sh. */
#ifndef SDP_PREDICT_CLI_H
#define SDP_PREDICT_CLI_H

#include "cli/recipe.h"
#include "graph/plan.h"
#include "graph/predict.h"

/* A machine for the model, and where its figures came from. */
struct sdp_cli_machine {
    struct sdp_predict_machine mc;
    int from_file;     /* 1: a calibration file's figures; 0: the model's defaults */
    int foreign;       /* the file describes another machine than this one */
    double host_mem;   /* that machine's memory for a run (bytes; 0: unknown) */
    char link[96];     /* where the link between nodes comes from: "calibrated", "defaults",
                          "--node-gbs" ... */
    char source[4200]; /* "FILE (calibrated on HOST)" or "defaults: why" */
};

/** The machine for a run with `ngpus` GPUs (0: CPU workers) from the calibration file at path (NULL
 * or "": none).  A missing or malformed file, or one measured on another machine when the run is
 * to run here (elsewhere 0: train, bench), is reported (formats/machine.h names the file and the
 * fix) and the defaults are used: sdp_predict_machine_h200 with GPUs, _cpu2 with this node's
 * cores without.  elsewhere 1 (plan) prices for the machine the file describes, wherever that
 * is.  A rate the file lacks keeps its default.  Never fails. */
void sdp_cli_machine_get(const char *path, int ngpus, int elsewhere, struct sdp_cli_machine *out);

/** The link between nodes of r's run on cm: r->node_gbs (> 0) and r->node_latency_us (>= 0) over
 * the machine file's or the defaults, noted in cm->link. */
void sdp_cli_machine_link(const struct sdp_recipe *r, struct sdp_cli_machine *cm);

/** The GPUs a run of r computes on: none with train.gpus 0 or where none is found (-1: this node's,
 * from the NVIDIA driver's /proc files, else those of the calibration file), else one per rank. */
int sdp_cli_run_gpus(const struct sdp_recipe *r, const char *machine_path);

/** The graph's configuration of a recipe (train's and plan's; the plan refines it per layer).
 * gc->grad_route_gpu is left NULL. */
void sdp_recipe_graph_conf(const struct sdp_recipe *r, struct sdp_graph_conf *gc);

/** Everything the model needs of a run of r with ngpus GPUs, in one place. */
struct sdp_cli_run {
    struct sdp_model_cfg m;
    struct sdp_graph_conf gc;
    struct sdp_plan plan;
    unsigned char *routes; /* per-group gradient routes (train.grad_route_groups) */
    struct sdp_predict_run run;
    int ngpus;
};

/** Build the plan of r without a state (sdp_predict_plan_from_conf, then r's `plan:` rows) and the
 * run around it.  r->model must hold the sizes (a preset, the recipe's or config.json's).
 * @return 0, or -EINVAL / -ENOMEM (logged with the recipe and the row) */
int sdp_cli_run_make(const struct sdp_recipe *r, int ngpus, struct sdp_cli_run *cr);
void sdp_cli_run_free(struct sdp_cli_run *cr);

/** Predict the plan a run of r on model m built (with its state) on cm's machine.
 * @return 0 or -EINVAL (logged) */
int sdp_cli_predict_plan(const struct sdp_recipe *r, const struct sdp_model_cfg *m,
                         const struct sdp_plan *plan, int ngpus, const struct sdp_cli_machine *cm,
                         struct sdp_predict *out);

/** AutoPolicy's budgets: limit, a GPU's (on CPU workers the host's); host, the host's beside a
 * GPU (0: none). */
struct sdp_auto_budget {
    double limit, host;
};

/** `slidedp plan --auto` (cli/plan_auto.c): every decoder layer's activation placement chosen
 * within b's budgets (sdp_cli_auto_choose), printed with its predicted gain over base (cr's own
 * plan) and the recipe rows that give it.  @return 0, -ENOSPC (no placement fits: logged with the
 * least that does), -ENOMEM */
int sdp_cli_plan_auto(struct sdp_cli_run *cr, const struct sdp_cli_machine *cm,
                      const struct sdp_auto_budget *b, const struct sdp_predict *base);

/** `slidedp plan --sched sdp-roundpipe` (cli/plan_split.c): RoundPipe's stage split of cr's step
 * on cm, the dynamic program's and the greedy split's, the chosen one stage by stage.
 * @return 0, -EINVAL, -ENOMEM (logged) */
int sdp_cli_plan_split(const struct sdp_cli_run *cr, const struct sdp_cli_machine *cm, int width);
/** Configure the sdp-roundpipe policy with the recipe's stage split over `width` stage workers
 * (the recipe's ranks; its graph then has one).  @return 0 or a negative errno (logged) */
int sdp_cli_roundpipe_configure(const struct sdp_recipe *r, int width);

/* AutoPolicy's placements of a decoder layer's activations, the chooser's options in order: the
 * last two are full recomputation and full recomputation offloaded (the least GPU memory) */
#define SDP_AUTO_NPLACE 6
extern const enum sdp_act_place sdp_auto_place_act[SDP_AUTO_NPLACE];
extern const int sdp_auto_place_off[SDP_AUTO_NPLACE];
extern const char *const sdp_auto_place_name[SDP_AUTO_NPLACE]; /* keep ... recompute, offload */
extern const char *const sdp_auto_place_plan[SDP_AUTO_NPLACE]; /* its plan rows' activations */

/** Every decoder layer of p at placement k. */
void sdp_auto_set_all(struct sdp_plan *p, int k);

/** A run of layers first..last (1-based) at placement k. */
struct sdp_auto_row {
    int first, last, place;
};
/** pick (a placement per layer) as runs of equal layers.  @return the rows, or -ENOSPC (max) */
int sdp_auto_rows(const int *pick, int L, struct sdp_auto_row *rows, int max);

/** AutoPolicy's assignment: on a GPU with a host budget, first the fewest decoder layers, from the
 * first, whose AdamW runs on the GPU (*gpu_update, their moments off the host) for the host's peak
 * to fit it; then pick[l] for every layer, the least predicted GPU time whose bytes fit the limit
 * beside the rest of the run; adjust[k] (NULL: none) adds a measured correction to placement k's
 * time per layer.  chosen: the choice priced whole; *least: the least any choice needs (of the
 * host when *host_short, of the limit otherwise).  @return 0, -ENOSPC (none fits), -ENOMEM */
int sdp_cli_auto_choose(struct sdp_cli_run *cr, const struct sdp_cli_machine *cm,
                        const struct sdp_auto_budget *b, const double *adjust, int *pick,
                        int *gpu_update, struct sdp_predict *chosen, double *least,
                        int *host_short);

/** One line: the predicted step, tokens/s, bound and peaks, and the machine's source. */
void sdp_cli_predict_line(const struct sdp_predict *p, const struct sdp_cli_machine *cm, char *out,
                          size_t len);

/** The plan's own placement of the saved layer inputs: unless the recipe or the command line chose
 * the activations (train.activations, or a plan row of them), a run of full recomputation whose
 * least GPU bytes pass `limit` (> 0) has its saved inputs wait on the host (gc->offload_inputs set)
 * when that fits; logs the choice.  gc NULL: the recipe's own
 * configuration (sdp_recipe_graph_conf), the choice written back to r->recompute and
 * r->act_offload; a caller with a configuration of its own (bench) passes it.
 * @return the run's least GPU bytes (sdp_graph_gpu_bytes_min) */
unsigned long long sdp_cli_fit_activations(struct sdp_recipe *r, const struct sdp_model_cfg *m,
                                           enum sdp_dtype dt, struct sdp_graph_conf *gc,
                                           unsigned long long limit);

#endif
