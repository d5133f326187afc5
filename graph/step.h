/* SPDX-License-Identifier: MIT */
/* One training step as a StarPU task graph: for each micro-batch, forward through every layer on
 * the working copies, the LM head with cross-entropy, backward (recomputing each layer's
 * activations from its saved input by default), gradients accumulated in micro-batch order; then
 * per chunk the squared norm, the global norm and clipping coefficient, and AdamW, which also
 * writes the next step's working copy. Dataflow does the rest: a chunk's update starts when its
 * gradient (and, with clipping, the global norm) is final, and the next step's use of a layer waits
 * for that layer's update. Only sdp_task_*(), sdp_rt_tensor_*() and models/ are used here.  The
 * configuration below fills the per-layer plan (graph/plan.h), which decides everything the graph
 * builds; sdp_graph_create_plan takes a plan the caller edited.  Files: plan.c, layer.c, routes.c,
 * optim.c, embed.c, step.c (the driver), cost.c.  Tests: tests/graph/, tests/e2e/. */
#ifndef SDP_STEP_H
#define SDP_STEP_H

#include <stdint.h>

#include "models/sdp_lora.h"
#include "runtime/state.h"

/* Gradient return of data-parallel ranks (the design's routes). */
enum sdp_grad_route {
    SDP_ROUTE_CPU_REDUCE, /* every rank's gradient chunk goes to the host, which sums them */
    SDP_ROUTE_GPU_REDUCE  /* rank 0's worker sums them and returns one gradient */
};

/* Parameter dispatch to data-parallel ranks (the design's routes). */
enum sdp_param_route {
    SDP_ROUTE_REPLICATED, /* every rank receives every working copy from the host */
    SDP_ROUTE_SHARDED     /* the k-th chunk of the model goes from the host to rank k % R, the
                             others copy it from that rank (P/R bytes from the host per rank, the
                             rest GPU to GPU) */
};

struct sdp_graph_conf {
    int micro_batch; /* B: sequences per micro-batch */
    int n_micro;     /* micro-batches per step, over all ranks (a multiple of nranks) */
    int nranks;      /* data-parallel ranks (0 or 1: one); rank r takes micro-batches
                        [r * n_micro / nranks, (r + 1) * n_micro / nranks) */
    enum sdp_param_route param_route;
    enum sdp_grad_route grad_route;
    const unsigned char *grad_route_gpu; /* per group (1: GPU reduction), or NULL: grad_route for
                                            all; copied by sdp_graph_create */
    int param_delay; /* 0: synchronous (SlideDP's invariants); 1: RoundPipe's asynchronous
                        optimizer: step s computes with the weights of step s - 1's start (two
                        working copies), so the update of step s - 1 overlaps all of step s.  It
                        breaks invariant 3 by design: for comparisons, and to show the checker
                        catching a stale version */
    int window;      /* 0: GPU copies stay until StarPU evicts them; > 0: bounded window: a layer's
                        working copy and gradient are released from the GPU after their last use of
                        the step (the gradient written back to the host), and after the forward of
                        the last micro-batch every layer but the last `window` is released too (the
                        backward brings them back in reverse order).  With one rank the
                        gradient norms of a group are submitted right after its last backward,
                        before the release, and the CLI runs them on the GPU; with more ranks it
                        runs them on the host (sdp_cli_place_norms) */
    int seq_len;     /* T */
    int doc_mask;    /* 1: the rows are packed documents: a token attends only within its own
                        (sdp_graph_step_docs gives each token's document start) */
    int doc_positions; /* with doc_mask: RoPE positions restart at 0 at every document start */
    long long attn_row_tokens; /* with doc_mask: the most tokens cuDNN's masked attention lays a
                                  row out in, D slots of S (sdp_data_docs_extent; 0: seq_len),
                                  which its backward's workspace grows with */
    /* the GPU limit (bytes, train.gpu_memory_gib; 0: none): what the rest of the plan leaves of
     * it is the attention's workspace budget (sdp_graph_ws_bytes) */
    unsigned long long gpu_limit_bytes;
    int recompute;      /* enum sdp_recompute: FULL recomputes the activations in backward from each
                           layer's saved input; SELECTIVE keeps each layer's mid residual (input +
                           attention) too, so the recomputation skips the attention's output
                           projection; NONE keeps every activation from the forward */
    int keep_last;      /* with recompute: the top keep_last layers keep every activation from the
                           forward instead (0: none; the recipe's and the bench's default is 1: the
                           last layer's backward follows the LM head) */
    int keep_mlp;       /* with recompute: the top keep_mlp recomputed layers keep their mid
                           residual and gate/up projection from the forward on the GPU, so their
                           recomputation skips the attention's output projection and the gate/up
                           projection, the largest matmul (0: none; graph/plan.c, act_of) */
    int offload_inputs; /* with recompute: each layer's saved input leaves the GPU once the forward
                           has read it (StarPU moves it to the host) and comes back for that
                           layer's recomputation: the activation offload/reload lane */
    int residual_f32;   /* 1: with bf16 working copies the residual stream (each layer's input and
                           output, its mid residual, the final norm's input) and its gradient are
                           fp32, as under PyTorch's autocast: the norms read fp32 and write bf16,
                           the residual adds are fp32 (graph/layer.c); 0: the working copies'
                           dtype throughout (sdp_plan_residual_f32) */
    int bwd_lookahead;  /* how far the backward's preparations may run ahead of it: layer l's
                           recomputation and gradient zeroing wait for the backward of layer
                           l + 1 + bwd_lookahead to end (the final norm counts as layer L + 1), so
                           a GPU holds the activations and fp32 gradients of about bwd_lookahead +
                           1 layers instead of every layer's; < 0: no bound (they start as soon as
                           their data are ready) */
    double beta1, beta2, eps, weight_decay, max_grad_norm;
    int skip_nonfinite;    /* 1: AdamW leaves the state untouched when the gradient is not finite
                              (the updates then wait for the global norm, as with clipping) */
    int embed_early;       /* 0: update the tied embedding's rows that the step's tokens do not
                              select during the backward, where it applies (one rank, bf16 return, no
                              clipping); -1: the whole embedding after its backward (graph/embed.c,
                              early_embed) */
    int mlp_early;         /* 0: pack and update a layer's chunks that hold only its MLP weights as
                              soon as the MLP's backward of the step's last micro-batch has run,
                              where it applies (one rank, bf16 return, no clipping, working copies
                              off the host); 1: also layer 1's with the working copies on the host;
                              -1: never (graph/optim.c, mlp_early) */
    int gpu_update;        /* the AdamW of layers 1 .. gpu_update runs on the GPU, where it applies
                              (one rank, compute on a GPU, the bf16 return, the working copies on the
                              host): those layers' fp32 masters and moments stay on the GPU while
                              StarPU has the memory for them, and their updates, the last of the
                              backward, no longer wait for the host's cores (graph/optim.c,
                              gpu_updates); 0: every update on the host */
    int embed_lookup_host; /* 1: the forward's embedding lookup runs on the CPU workers, from the
                              working copy on the host, into a pinned buffer per micro-batch in
                              parts of whole sequences; the embedding's copy reaches the GPU only
                              for the tied LM head, at the end of the forward (one rank, the
                              embedding's working copy on the host: graph/embed.c,
                              lookup_host_create);
                              0: the lookup runs where the compute runs */
    int nodes, node; /* a run over several nodes (runtime/nodes.h): their number (0 or 1: one) and
                        this one's index.  nranks and n_micro are this node's, and so are the
                        step's ids, targets and documents: its n_micro micro-batches of the run's,
                        which are dealt node after node; the gradient goes across the nodes
                        after this node's ranks' sum (graph/nodes.c) */
    int (*allgather)(const double *mine, double *all, size_t n); /* with nodes: every node's n
                        values in node order (the target counts, the losses) */
    struct sdp_lora_cfg lora; /* LoRA adapters on the decoder layers' linears, the base frozen
                                 (the recipe's lora:; rank 0, the zeroed default: none) */
    unsigned long long seed;  /* the run's seed: LoRA's dropout masks (graph/lora.c) */
};

struct sdp_step_result {
    double loss;      /* mean cross-entropy over the valid targets of the step, plus aux_loss */
    double aux_loss;  /* Qwen3-MoE with output_router_logits: router_aux_loss_coef times the mean
                         over the micro-batches of each one's load-balancing loss; else 0 */
    double grad_norm; /* global gradient norm before clipping */
    long long tokens; /* input tokens processed (B * n_micro * T) */
    long long valid_targets;
    int bad_group; /* first parameter group whose gradient is not finite, or -1 */
    int experts_routed, experts_total; /* Qwen3-MoE: the experts of the sparse layers that
                          received a token in the step, of all (both 0 for a dense model) */
};

typedef struct sdp_graph sdp_graph_t;

/** What each rank should move per step on the configured routes (the design's formulas), when
 * nothing is evicted for lack of memory: with replicated dispatch every rank receives every
 * group's working copy once, and the layers a bounded window releases after the forward once
 * more for the backward; every rank's fp32 gradient goes to the host (CPU reduction), or ranks
 * 1..R-1 send theirs to rank 0, which returns one (GPU reduction).  Token ids, losses and the
 * norm are not counted (a few KiB). */
struct sdp_route_bytes {
    unsigned long long param_h2d;  /* from the host (sharded: the rank's own chunks) */
    unsigned long long param_peer; /* from the other ranks (sharded route) */
    unsigned long long param_out;  /* to the other ranks: its own chunks, to each (sharded) */
    unsigned long long grad_d2h;   /* to the host */
    unsigned long long grad_peer;  /* to rank 0 (GPU reduction, ranks > 0) */
};
void sdp_graph_route_bytes(const sdp_graph_t *g, int rank, struct sdp_route_bytes *rb);

/** Smallest GPU memory (bytes) a run of this configuration needs on one GPU: two parameter groups
 * in flight (working copy + fp32 gradient), what one micro-batch keeps between its forward and
 * backward (c->recompute, offload_inputs, keep_last, keep_mlp: the saved layer inputs, mid
 * residuals and gate/up projections, the kept layers' intermediates; every layer's without
 * recomputation), two layers' intermediates and gradients at work, and the workspaces
 * (sdp_graph_ws_bytes: the LM head's logits block, the attention's cuDNN call). */
unsigned long long sdp_graph_gpu_bytes_min(const struct sdp_model_cfg *m, enum sdp_dtype work_dtype,
                                           const struct sdp_graph_conf *c);

/** The workspaces of one GPU's tasks (models/workspace.c), given `rest`, the bytes the plan counts
 * besides them: 64 MiB of cuBLASLt and kernel workspaces, the LM head's logits block of B*T tokens
 * (SDP_LMHEAD_BLOCK_MIB, SDP_LMHEAD_LOGITS as the codelet reads them) and the attention backward's
 * cuDNN call of the rows its budget allows, attn_T tokens a row (T; with document masking D x S,
 * sdp_graph_conf.attn_row_tokens; the own kernels' one call of all rows for f32 or
 * SDP_ATTENTION=own takes T).  *budget: the attention's budget, SDP_ATTENTION_WS_MIB if
 * set, else what gpu_limit leaves after rest and the other workspaces (1 GiB when gpu_limit is
 * 0), which the graph gives its attention tasks.  @return the bytes */
unsigned long long sdp_graph_ws_bytes(const struct sdp_model_cfg *m, enum sdp_dtype work_dtype,
                                      int B, int T, long long attn_T, unsigned long long gpu_limit,
                                      unsigned long long rest, unsigned long long *budget);

/** @return 0, -ENOMEM, -EINVAL (bad configuration, logged) */
int sdp_graph_create(sdp_graph_t **out, struct sdp_state *st, const struct sdp_graph_conf *conf);
void sdp_graph_destroy(sdp_graph_t *g);

/** Submit step `step` (0-based) on ids/targets (n_micro * B, T) int32 and wait for its loss and
 * gradient norm (the updates may still be running when this returns).  lr: learning rate of this
 * step. update = 0 leaves the accumulated gradients in place and skips the optimizer (for tests).
 * @return 0, -EINVAL (no valid target, or a token id out of range: logged), or a task error */
int sdp_graph_step(sdp_graph_t *g, int step, const int32_t *ids, const int32_t *targets, double lr,
                   int update, struct sdp_step_result *res);

/** The same with document masking (conf.doc_mask): segs (n_micro * B, T) int32, the position in
 * its row of each token's document start (0 <= segs[t] <= t, each row's documents contiguous), so
 * that a token attends to the keys of its own document only (and, with conf.doc_positions, its
 * RoPE position is t - segs[t]).  segs is required with doc_mask and ignored without.
 * @return as sdp_graph_step; -EINVAL (logged) for missing or malformed segs */
int sdp_graph_step_docs(sdp_graph_t *g, int step, const int32_t *ids, const int32_t *targets,
                        const int32_t *segs, double lr, int update, struct sdp_step_result *res);

/** The token ids (n_micro * B, T) of the step after the next sdp_graph_step, when the caller knows
 * them (train reads one batch ahead, bench draws them ahead).  With the lookup on the host
 * (train.embed_lookup: host) and the tied embedding's early update, that step then submits the
 * next step's lookups between the updates of the rows those ids select and the others
 * (graph/embed.c defer_rows).  Told ids that the next step does not get are harmless: its lookups
 * are redone.  Ids outside the vocabulary are not taken (the step they belong to reports them). */
void sdp_graph_set_next(sdp_graph_t *g, const int32_t *ids);
/** How many steps so far deferred their late rows (sdp_graph_set_next). */
int sdp_graph_deferred_steps(const sdp_graph_t *g);

/** Forward only: logits (nseq * T, V) fp32 for nseq <= B sequences of ids, every row one document
 * (no document masking).  For tests and evaluation. */
int sdp_graph_logits(sdp_graph_t *g, const int32_t *ids, int nseq, float *logits);

#endif
