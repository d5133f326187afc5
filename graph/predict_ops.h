/* SPDX-License-Identifier: MIT */
/* The step-time model's costs per op, for RoundPipe's stage split (graph/split.h): a decoder
 * layer's forward and backward apart (the backward with the recomputation its placement asks),
 * the embedding's and the LM head's, each for one micro-batch of B x T on one GPU, from the same
 * formulas as graph/predict.c (a layer's forward plus backward is sdp_predict_layer_s).  Compute
 * only: a stage's parameter upload overlaps the stage before it (RoundPipe's copy streams), so the
 * transfers are not in the ops.
 * Test: tests/graph/test_predict_ops.c. */
#ifndef SDP_PREDICT_OPS_H
#define SDP_PREDICT_OPS_H

#include "graph/predict.h"
#include "graph/split.h"

/** A decoder layer's forward: its GEMMs, attention and element-wise kernels. */
double sdp_predict_layer_fwd_s(const struct sdp_model_cfg *m, int B, int T, enum sdp_dtype work,
                               const struct sdp_predict_machine *mc);

/** The same layer's backward under placement act, with the recomputation act asks (LoRA: frozen,
 * no weight gradients): sdp_predict_layer_s less the forward. */
double sdp_predict_layer_bwd_s(const struct sdp_model_cfg *m, int B, int T, enum sdp_dtype work,
                               const struct sdp_predict_machine *mc, enum sdp_act_place act,
                               int frozen);

/** The LM head's forward (logits and loss: a third of its FLOPs) and backward (both gradients:
 * two thirds; frozen, the input's gradient only: one third). */
void sdp_predict_head_ops_s(const struct sdp_model_cfg *m, int B, int T,
                            const struct sdp_predict_machine *mc, int frozen, double *fwd_s,
                            double *bwd_s);

/** The step's 2 (L + 2) ops in the order they run, priced for plan p (each layer's placement, LoRA
 * or not): the forward of groups 0..L + 1, then the backward of L + 1..0; the head's forward is
 * joined to its backward (the graph runs them as one task).  ops holds 2 * p->ngroups entries.
 * @return the number of ops */
int sdp_predict_split_ops(const struct sdp_plan *p, const struct sdp_model_cfg *m, int B, int T,
                          enum sdp_dtype work, const struct sdp_predict_machine *mc,
                          struct sdp_split_op *ops);

#endif
