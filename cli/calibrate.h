/* SPDX-License-Identifier: MIT */
/* The passes of `slidedp calibrate` kept apart from cli/calibrate.c: the compute rates and the
 * host's update lane, measured through the runtime (cli/calibrate_compute.c,
 * cli/calibrate_update.c). */
#ifndef SDP_CLI_CALIBRATE_H
#define SDP_CLI_CALIBRATE_H

#include "formats/machine.h"

/** GEMM and attention rates of the compute workers, StarPU running with the compute ops placed
 * (sdp_tasks_place_compute) and, with GPUs, the CUDA workers set as ranks 0 to m->gpus - 1.
 * With GPUs: per GPU alone, bf16 tensors at qwen3-4b's layer shapes, into m->gpu[g].bf16_flops,
 * .attention_flops, m->gemm[] (GPU 0's shapes) and m->kernel_launch_s.  Without: fp32 tensors at
 * the tiny recipes' shapes on the CPU workers, into m->cpu_gemm_flops, .cpu_gemm_flops_all,
 * .cpu_attention_flops and m->gemm[].  Leaves the ranks unset when it set them.
 * @return 0 or the runtime's error (logged with what failed) */
int sdp_cli_calibrate_compute(struct sdp_machine *m);

/** AdamW's codelet on every CPU worker of the running runtime, the step's update lane, into
 * m->adamw_workers and m->adamw_workers_bps (cli/calibrate_update.c).  @return 0 or the runtime's
 * error (logged) */
int sdp_cli_calibrate_update(struct sdp_machine *m);

#endif
