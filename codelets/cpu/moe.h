/* SPDX-License-Identifier: MIT */
/* Mixture-of-experts CPU kernels (Qwen3-MoE, transformers' Qwen3MoeSparseMoeBlock): the router
 * (logits, softmax, top-k, optional renormalisation) and its backward; the load-balancing loss of
 * load_balancing_loss_func and its gradient; the token permutation to experts and back; the
 * experts' SwiGLU MLPs and their backward.  No StarPU; fp32 with CBLAS GEMMs (sdp_cpu_matmul_*),
 * deterministic.  N tokens, C channels, E experts, K experts per token, IM an expert's
 * intermediate size (models/sdp_models.h).  A slot is (token n, rank k), index n*K + k.
 * Tests: tests/kernels/test_kernels_moe.c (fp64 oracles), tests/e2e/test_e2e_moe_hf.sh (against
 * transformers' block). */
#ifndef SDP_CPU_MOE_H
#define SDP_CPU_MOE_H

#include <stddef.h>
#include <stdint.h>

/* One micro-batch's routing: written by sdp_cpu_moe_router_fwd() (ids, wts) and
 * sdp_cpu_moe_permute() (the rest); arrays owned by the caller. */
struct sdp_moe_routing {
    int N, E, K;
    int32_t *ids;     /* (N, K) expert of each slot, by decreasing probability */
    float *wts;       /* (N, K) routing weight of each slot */
    int32_t *counts;  /* (E) slots routed to each expert; 0: the expert is idle this micro-batch */
    int32_t *offsets; /* (E + 1) first permuted row of each expert; offsets[E] = N*K */
    int32_t *rows;    /* (N*K) the slot of each permuted row */
    int32_t *where;   /* (N*K) the permuted row of each slot */
};

/** Router forward: logits (N, E) = x (N, C) . wr (E, C)^T; probs (N, E) = softmax(logits) (fp32,
 * max subtracted, sum in double); r->ids, r->wts the K largest probabilities of each token in
 * decreasing order, ties to the lower expert id (torch.sort(stable=True) order; torch.topk on CPU
 * orders exact ties as its selection algorithm leaves them); with norm_topk the K weights divided
 * by their fp32 sum, as Qwen3MoeTopKRouter does.  NaN probabilities order nothing: the picks they
 * leave are the lowest free ids, so that the ids stay valid and distinct. */
void sdp_cpu_moe_router_fwd(float *logits, float *probs, struct sdp_moe_routing *r, const float *x,
                            const float *wr, int C, int norm_topk);

/** dprobs (N, E) = the gradient of probs from dwts (N, K), the gradient of r->wts (through the
 * renormalisation when norm_topk); 0 for the experts a token did not pick. */
void sdp_cpu_moe_topk_bwd(float *dprobs, const float *dwts, const float *probs,
                          const struct sdp_moe_routing *r, int norm_topk);

/** dlogits (N, E) = softmax backward: p * (dp - sum_e p dp), the sum in double. */
void sdp_cpu_moe_softmax_bwd(float *dlogits, const float *dprobs, const float *probs, int N, int E);

/** dx (N, C) += dlogits . wr; dwr (E, C) += dlogits^T . x (dwr NULL: a frozen router). */
void sdp_cpu_moe_router_bwd(float *dx, float *dwr, const float *dlogits, const float *x,
                            const float *wr, int N, int C, int E);

/* ---- load-balancing loss (load_balancing_loss_func without an attention mask) ----
 * Over the sparse layers' router outputs: count_e = slots routed to e, psum_e = sum of probs[:, e],
 * both summed over layers, rows = N times the layers; loss = E * sum_e (count_e / rows) *
 * (psum_e / rows).  count does not depend on the logits (top-k), so d loss / d probs[n, e] =
 * E * count_e / rows^2 for every layer. */

/** count (E) += slots per expert, psum (E) += column sums of probs (N, E), in double. */
void sdp_cpu_moe_aux_stats(double *count, double *psum, const float *probs,
                           const struct sdp_moe_routing *r);
/** The loss from the accumulated statistics. */
double sdp_cpu_moe_aux_loss(const double *count, const double *psum, double rows, int E);
/** dprobs (N, E) += scale * E * count_e / rows^2 (scale: the loss's weight, e.g.
 * router_aux_loss_coef). */
void sdp_cpu_moe_aux_bwd(float *dprobs, const double *count, double rows, int N, int E,
                         float scale);

/* ---- token permutation and the experts ---- */

/** r->counts, offsets, rows, where from r->ids: a stable counting sort, the slots of expert e in
 * increasing token order.  @return the number of experts that received at least one slot */
int sdp_cpu_moe_permute(struct sdp_moe_routing *r);

/** xp (N*K, C): row i = x[token of r->rows[i]]. */
void sdp_cpu_moe_gather(float *xp, const float *x, const struct sdp_moe_routing *r, int C);

/** Each expert e with counts[e] > 0, on its rows of xp: gu = xp . wgu[e]^T (rows, 2IM: gate | up),
 * h = silu(gate) * up (rows, IM), y = h . wdown[e]^T (rows, C).  wgu (E, 2IM, C) and wdown
 * (E, C, IM) as transformers' Qwen3MoeExperts holds gate_up_proj and down_proj.  gu, h, y:
 * (N*K, 2IM), (N*K, IM), (N*K, C), kept for the backward.  Idle experts are not read. */
void sdp_cpu_moe_experts_fwd(float *y, float *gu, float *h, const float *xp, const float *wgu,
                             const float *wdown, const struct sdp_moe_routing *r, int C, int IM);

/** out (N, C) += sum_k wts[n, k] * y[where[n*K + k]], token by token in k order. */
void sdp_cpu_moe_combine(float *out, const float *y, const struct sdp_moe_routing *r, int C);

/** Backward of the combine: dy (N*K, C) row where[s] = wts[s] * dout[token]; dwts (N, K) =
 * dout[n] . y[where[s]] (double sum). */
void sdp_cpu_moe_combine_bwd(float *dy, float *dwts, const float *dout, const float *y,
                             const struct sdp_moe_routing *r, int C);

/** Backward of the experts: dxp (N*K, C) written; dwgu (E, 2IM, C), dwdown (E, C, IM) += for the
 * experts with counts[e] > 0 only (the others get no gradient, as in PyTorch), NULL for frozen
 * experts; dgu (N*K, 2IM) and dh (N*K, IM) scratch. */
void sdp_cpu_moe_experts_bwd(float *dxp, float *dwgu, float *dwdown, float *dgu, float *dh,
                             const float *dy, const float *xp, const float *gu, const float *h,
                             const float *wgu, const float *wdown, const struct sdp_moe_routing *r,
                             int C, int IM);

/** dx (N, C) += sum_k dxp[where[n*K + k]] (the gather's backward). */
void sdp_cpu_moe_scatter_bwd(float *dx, const float *dxp, const struct sdp_moe_routing *r, int C);

#endif
