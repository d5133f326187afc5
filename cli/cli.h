/* SPDX-License-Identifier: MIT */
/* Subcommands of the slidedp command line.  Each returns the process exit status: 0 success, 1
 * runtime failure, 2 usage error. */
#ifndef SDP_CLI_H
#define SDP_CLI_H

#include <stddef.h>

struct sdp_model_cfg;
struct sdp_moe_profile;

#define SDP_EXIT_OK      0
#define SDP_EXIT_FAILURE 1
#define SDP_EXIT_USAGE   2

int sdp_cli_train(int argc, char **argv);
int sdp_cli_policies(int argc, char **argv);
int sdp_cli_bench(int argc, char **argv);
int sdp_cli_export(int argc, char **argv);
int sdp_cli_tokenize(int argc, char **argv);
int sdp_cli_plot(int argc, char **argv);
int sdp_cli_sweep(int argc, char **argv);
int sdp_cli_options(int argc, char **argv);
int sdp_cli_calibrate(int argc, char **argv);
int sdp_cli_plan(int argc, char **argv);
/** A run's measured routing file (cli/moe_routing.c) into *out, checked against model m's experts
 * and sparse layers, and m->routing set to it; *hits holds its counts (the caller frees it).
 * @return 0 or -EINVAL, -ENOMEM (reported: the file and why) */
int sdp_cli_moe_routing_load(const char *path, struct sdp_model_cfg *m, struct sdp_moe_profile *out,
                             int **hits);
int sdp_cli_simulate(int argc, char **argv);

/** Seconds on the monotonic clock. */
double sdp_cli_now_s(void);
/** The median of v (n >= 1 values; v is sorted in place). */
double sdp_cli_median(double *v, int n);
/** Place the gradient norms for a run of `ranks` ranks with a GPU window of `window` layers: on
 * the GPUs when compute runs there with one rank (no host CPU time or memory traffic for them),
 * else on the host under a window, else anywhere.  @return the placement's name, for logs. */
const char *sdp_cli_place_norms(int ranks, int window);
/** The state's chunk in bytes of fp32 master for train.chunk_mib = mib: 0 means unchunked, one
 * chunk as large as m's largest parameter group (the chunk pipeline's ablation). */
size_t sdp_cli_chunk_bytes(double mib, const struct sdp_model_cfg *m);

/** The adapters of bench's --lora-rank, --lora-alpha and --lora-targets into *lora (rank 0:
 * none): alpha PEFT's 8 and every linear unless given (cli/bench_lora.c).
 * @return 0, or SDP_EXIT_USAGE naming the option */
struct sdp_recipe;
struct sdp_lora_cfg;
int sdp_cli_bench_lora_options(const struct sdp_recipe *r, struct sdp_lora_cfg *lora);

/** train.gpu_update resolved: requested >= 0 as it is; -1 (auto): a LoRA run of one rank on a GPU
 * updates every adapted layer's adapters there when their fp32 master, moments and gradient (16
 * bytes a parameter) fit beside `need` (the run's least GPU bytes) within `limit`, else none; full
 * training updates on the host.  Logs the choice.  @return the layers 1..N updated on the GPU */
int sdp_cli_gpu_update(int requested, const struct sdp_lora_cfg *lora,
                       const struct sdp_model_cfg *m, int ranks, unsigned long long need,
                       unsigned long long limit);

/** Whether a run asking for `gpus` CUDA workers (-1 = all found) may compute on GPUs, as far as
 * is known before StarPU starts: never in a build without CUDA. */
int sdp_cli_may_use_gpu(int gpus);

#endif
