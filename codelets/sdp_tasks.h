/* SPDX-License-Identifier: MIT */
/* The task-insertion API: the only way graph/ submits work.  One sdp_task_<op>() per op; each
 * returns starpu_task_insert's code (0, or a negative errno such as -ENODEV when no worker can run
 * the op). Tensors are passed whole; weights and gradients are addressed inside their group's flat
 * vector by an element offset.  Layouts are given as (rows, cols) row-major; see
 * models/sdp_models.h for the letters. StarPU-free: graph/ includes this without seeing <starpu.h>.
 */
#ifndef SDP_TASKS_H
#define SDP_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "codelets/cpu/rope.h"
#include "runtime/hint.h"
#include "runtime/tensor.h"

struct sdp_task_opts {
    int priority;
    struct sdp_hint hint;
    int on_rank; /* 1: run on hint.rank's worker whatever the phase (see sdp_tasks_set_ranks) */
    int on_host; /* 1: on a CPU worker only, any (a codelet with a CUDA side the scheduler must
                    not pick: the ranks' reduction on the host route; the transfer tasks), even
                    in a rank's phase or with on_rank */
    int version; /* parameter version the task reads (an update: writes), for the trace */
    unsigned long long tag;   /* nonzero: the task's tag (from sdp_task_tag_new), for `after` */
    unsigned long long after; /* nonzero: the task starts only once the task tagged so has ended
                                 (needs a tag of its own); for orderings that are not data flow */
};

/** A fresh tag for sdp_task_opts (never 0; unique in the process). */
unsigned long long sdp_task_tag_new(void);
/** Release a tag: waits until its task has ended (tag included), so call it only for a tag whose
 * task was submitted, from outside any task, once every task waiting on it has ended. */
void sdp_task_tag_forget(unsigned long long tag);

/* Most data-parallel ranks a run may have. */
#define SDP_MAX_RANKS 64

/* ---- parameter working copies ---- */
/** work (n) f32|bf16 W  <-  master (n) f32 R.  bf16 rounds to nearest even. */
int sdp_task_cast(const struct sdp_task_opts *o, sdp_rt_tensor_t *work, sdp_rt_tensor_t *master);

/* ---- forward / backward ops ---- */
/** out (n) bf16 W  <-  in (n) f32 R, rounded to nearest even where the compute runs: the fp32
 * residual gradient as the bf16 input of the matmuls' backward (train.residual_dtype fp32, as
 * autocast casts it).  @return starpu_task_insert's code */
int sdp_task_cast_act(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *in);
/** out (N, C) f32 W = w[ids]   (w: embedding (V, C) at w_off of group tensor wg) */
int sdp_task_embedding_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *ids, sdp_rt_tensor_t *wg, size_t w_off, int N, int C);
/** The same lookup on a CPU worker alone, of the N ids from ids_off: out (N, C) W =
 * w[ids[ids_off .. ids_off + N)] (train.embed_lookup: host; the trace names it embedding_fwd).
 * @return 0, -EINVAL (the ids or the output do not hold N rows), or the submission's error */
int sdp_task_embedding_fwd_host(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                                sdp_rt_tensor_t *ids, size_t ids_off, sdp_rt_tensor_t *wg,
                                size_t w_off, int N, int C);
/** grad group gg RW: (V, C) at g_off += scatter(dout (N, C) by ids) */
int sdp_task_embedding_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *gg, size_t g_off,
                           sdp_rt_tensor_t *dout, sdp_rt_tensor_t *ids, int N, int C);

/** out (M, N) W = [resid (M, N) R] + x (M, K) . w (N, K)^T;  resid may be NULL */
int sdp_task_matmul_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *resid,
                        sdp_rt_tensor_t *x, sdp_rt_tensor_t *wg, size_t w_off, int M, int K, int N);
/** dx (M, K) W = dout (M, N) . w (N, K) */
int sdp_task_matmul_bwd_data(const struct sdp_task_opts *o, sdp_rt_tensor_t *dx,
                             sdp_rt_tensor_t *dout, sdp_rt_tensor_t *wg, size_t w_off, int M, int K,
                             int N);
/** grad group gg RW: (N, K) at g_off += dout (M, N)^T . x (M, K) */
int sdp_task_matmul_bwd_weight(const struct sdp_task_opts *o, sdp_rt_tensor_t *gg, size_t g_off,
                               sdp_rt_tensor_t *dout, sdp_rt_tensor_t *x, int M, int K, int N);

/* A LoRA adapter's task: M rows (tokens), the linear's in and out widths, rank r, the output's row
 * stride ldy and first column col0 (a slice of a fused projection), A (r, in) and B (out, r) at
 * a_off, b_off of the adapters' working copy (and dA, dB at the same offsets of their gradient),
 * and the scaling s = alpha / r. */
struct sdp_lora_dims {
    int M, in, out, r, ldy, col0;
    size_t a_off, b_off;
    float s;
    /* dropout on the adapter's input x (M, in) (base/splitmix.h): the mask's key, its threshold
     * round(p 2^24) (0: no dropout) and the kept elements' scale 1 / (1 - p) */
    uint64_t drop_key;
    uint32_t drop_thr;
    float drop_scale;
};
/** y (M, ldy) act RW: columns [col0, col0 + out) += s (drop(x) (M, in) . A^T) . B^T; aw R.  drop
 * is the dims' dropout (the identity without). */
int sdp_task_lora_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *y, sdp_rt_tensor_t *x,
                      sdp_rt_tensor_t *aw, const struct sdp_lora_dims *d);
/** With dy (M, ldy) act R (the slice at col0): dx (M, in) act RW += drop'(s (dy B) A); the
 * adapters' gradient ag f32 RW: dA += s (dy B)^T drop(x), dB += s dy^T (drop(x) A^T) */
int sdp_task_lora_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dx, sdp_rt_tensor_t *dy,
                      sdp_rt_tensor_t *x, sdp_rt_tensor_t *aw, sdp_rt_tensor_t *ag,
                      const struct sdp_lora_dims *d);

/** out (R, D) W, rstd (R) W = rmsnorm(x (R, D)) * w (D) */
int sdp_task_rmsnorm_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *rstd,
                         sdp_rt_tensor_t *x, sdp_rt_tensor_t *wg, size_t w_off, int R, int D,
                         float eps);
/** dx (R, D): W, or RW += when accumulate; grad group gg RW: (D) at g_off += dw */
int sdp_task_rmsnorm_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dx, int accumulate,
                         sdp_rt_tensor_t *gg, size_t g_off, sdp_rt_tensor_t *dout,
                         sdp_rt_tensor_t *x, sdp_rt_tensor_t *wg, size_t w_off,
                         sdp_rt_tensor_t *rstd, int R, int D);

/** out (N, QKV) W, rstd (N, NH+NKV) W (NULL without qk-norm) = rope(qknorm(qkv (N, QKV))).
 * qn_off/kn_off: offsets of q_norm/k_norm in wg, or (size_t)-1 without qk-norm. */
int sdp_task_qknorm_rope_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                             sdp_rt_tensor_t *rstd, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *wg,
                             size_t qn_off, size_t kn_off, const struct sdp_rope_params *rope,
                             int N, int T, int NH, int NKV, int HD, float eps);
/** dqkv (N, QKV) W from dout (N, QKV); grad group gg RW at gqn_off/gkn_off (qk-norm only) */
int sdp_task_qknorm_rope_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                             sdp_rt_tensor_t *gg, size_t gqn_off, size_t gkn_off,
                             sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *wg,
                             size_t qn_off, size_t kn_off, sdp_rt_tensor_t *rstd,
                             const struct sdp_rope_params *rope, int N, int T, int NH, int NKV,
                             int HD);

/** The same two with positions restarting per document: seg (N) i32 R, each token's document
 * start in its row (token n at position n % T - seg[n]); NULL: as above. */
int sdp_task_qknorm_rope_fwd_seg(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                                 sdp_rt_tensor_t *rstd, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *wg,
                                 size_t qn_off, size_t kn_off, const struct sdp_rope_params *rope,
                                 sdp_rt_tensor_t *seg, int N, int T, int NH, int NKV, int HD,
                                 float eps);
int sdp_task_qknorm_rope_bwd_seg(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                                 sdp_rt_tensor_t *gg, size_t gqn_off, size_t gkn_off,
                                 sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *wg,
                                 size_t qn_off, size_t kn_off, sdp_rt_tensor_t *rstd,
                                 const struct sdp_rope_params *rope, sdp_rt_tensor_t *seg, int N,
                                 int T, int NH, int NKV, int HD);

/** out (B*T, NH*HD) W, lse (B, NH, T) W = causal GQA attention of qkv (B*T, QKV) */
int sdp_task_attention_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *lse, sdp_rt_tensor_t *qkv, int B, int T, int NH,
                           int NKV, int HD);
/** dqkv (B*T, QKV) W from dout (B*T, NH*HD) */
int sdp_task_attention_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                           sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *out,
                           sdp_rt_tensor_t *lse, int B, int T, int NH, int NKV, int HD);
/** What an attention task is told on the host at submission: starts, the same B*T document
 * starts as seg (required with seg; copied into the task, so that a GPU call never reads seg
 * back), and ws_budget, the bytes its cuDNN calls may take (0: the codelet's default;
 * SDP_ATTENTION_WS_MIB, when set, wins). */
struct sdp_attention_host {
    const int32_t *starts;
    unsigned long long ws_budget;
};
/** The same with document masking: seg (B*T) i32 R, the position in its row of each token's
 * document start (query t sees keys seg[t]..t); NULL: the causal attention above.  h may be NULL
 * without seg. */
int sdp_task_attention_fwd_seg(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                               sdp_rt_tensor_t *lse, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *seg,
                               const struct sdp_attention_host *h, int B, int T, int NH, int NKV,
                               int HD);
int sdp_task_attention_bwd_seg(const struct sdp_task_opts *o, sdp_rt_tensor_t *dqkv,
                               sdp_rt_tensor_t *dout, sdp_rt_tensor_t *qkv, sdp_rt_tensor_t *out,
                               sdp_rt_tensor_t *lse, sdp_rt_tensor_t *seg,
                               const struct sdp_attention_host *h, int B, int T, int NH, int NKV,
                               int HD);

/** out (N, I) W = silu(gu[:, :I]) * gu[:, I:] */
int sdp_task_swiglu_fwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *gu,
                        int N, int I);
/** dgu (N, 2I) W from dout (N, I) */
int sdp_task_swiglu_bwd(const struct sdp_task_opts *o, sdp_rt_tensor_t *dgu, sdp_rt_tensor_t *dout,
                        sdp_rt_tensor_t *gu, int N, int I);

/* ---- a sparse layer's MLP (Qwen3-MoE; codelets/moe.c, CPU workers only) ---- */
/* Its shape and where its weights sit in the layer's vector (and gradient). */
struct sdp_moe_shape {
    int N, C, E, K, IM, norm_topk;
    size_t off_router, off_gu, off_down; /* (E, C), (E, 2IM, C), (E, C, IM) */
};
/** Elements of the f32 vector that keeps a sparse layer's forward for its backward. */
size_t sdp_task_moe_acts_elems(const struct sdp_moe_shape *s);
/** The block on h2 (N, C) act R with the weights of W R: acts W (what the backward reads); with
 * out, out (N, C) act W = xmid (N, C) act R + the block's output (the decoder layer's residual);
 * with stats, stats (2E) f64 accumulates the load-balancing loss's per-expert slot counts and
 * probability sums (from zero at the micro-batch's first sparse layer, first_layer), and used
 * (2E) i32 RW marks in used[e] the experts that received a token (from none at the step's first
 * micro-batch, first_mb) and, at its last (last_mb), adds those marks to the experts' step counts
 * used[E + e].  A recomputation passes neither out nor stats.  With Wh (routed streaming: the
 * host's working copy, read in main memory), the task first copies the experts its tokens route
 * to from Wh into W, then RW (W holds no other expert's current weights). */
int sdp_task_moe_fwd(const struct sdp_task_opts *o, const struct sdp_moe_shape *s,
                     sdp_rt_tensor_t *acts, sdp_rt_tensor_t *h2, sdp_rt_tensor_t *W,
                     sdp_rt_tensor_t *Wh, sdp_rt_tensor_t *out, sdp_rt_tensor_t *xmid,
                     sdp_rt_tensor_t *stats, sdp_rt_tensor_t *used, int first_layer, int first_mb,
                     int last_mb);
/** Its backward: dh2 (N, C) act W from dres (N, C) act R, the gradient of the block's output; G
 * (NULL: a frozen base) RW += the router's and the routed experts' weight gradients (an expert
 * without a token gets none); with stats, the gradient of aux_scale times the load-balancing loss
 * of `rows` rows too.  Wh as for the forward (the routing read from acts). */
int sdp_task_moe_bwd(const struct sdp_task_opts *o, const struct sdp_moe_shape *s,
                     sdp_rt_tensor_t *dh2, sdp_rt_tensor_t *dres, sdp_rt_tensor_t *h2,
                     sdp_rt_tensor_t *W, sdp_rt_tensor_t *Wh, sdp_rt_tensor_t *acts,
                     sdp_rt_tensor_t *G, sdp_rt_tensor_t *stats, float aux_scale, double rows);
/** aux (1) f64 W = the load-balancing loss of the statistics stats (2E) f64 R over `rows` rows. */
int sdp_task_moe_aux(const struct sdp_task_opts *o, sdp_rt_tensor_t *aux, sdp_rt_tensor_t *stats,
                     int E, double rows);

/** LM head + cross-entropy, forward and backward in one task.
 * loss (2) f64 W = { sum of -log p(target) over valid targets, number of valid targets };
 * dh (N, C) W = scale * dloss/dh; grad group gg RW: (V, C) at g_off += scale * dloss/dw (gg
 * NULL: no weight gradient, a frozen head).
 * h (N, C) R, w (V, C) at w_off of wg, targets (N) i32 (< 0 ignored). */
int sdp_task_lmhead_ce(const struct sdp_task_opts *o, sdp_rt_tensor_t *loss, sdp_rt_tensor_t *dh,
                       sdp_rt_tensor_t *gg, size_t g_off, sdp_rt_tensor_t *h, sdp_rt_tensor_t *wg,
                       size_t w_off, sdp_rt_tensor_t *targets, int N, int C, int V, float scale);

/** t W = 0, on the node of the worker that runs it (no transfer of the old contents). */
int sdp_task_zero(const struct sdp_task_opts *o, sdp_rt_tensor_t *t);

/* ---- optimizer ---- */
/** out (1) f64 W = sum of squares of g (n) f32 */
int sdp_task_sumsq(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *g);
/** out (2) f64 W = { norm = sqrt(sum of parts), clip coefficient = min(1, max_norm / (norm + 1e-6))
 * or 1 when max_norm <= 0 }  from nparts partial sums of squares (1) f64. */
int sdp_task_grad_norm(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t **parts,
                       int nparts, double max_norm);

/* A contiguous range of a chunk with one weight-decay setting. */
struct sdp_adamw_segment {
    size_t offset, nelems;
    int decay;
    int expert1; /* 1 + the expert whose weights these are (a sparse layer's), skipped in a step
                    where that expert received no token (sdp_task_adamw_experts); 0: none */
};
/** AdamW on one chunk: master, m, v (n) f32 RW; grad (n) f32 or bf16 R; work (n)
 * f32|bf16 W receives the updated parameters for the next step.  clip (2) f64 R (NULL: no
 * clipping). segs cover [0, n) in order.  Segments that cover k < n elements may come with a
 * packed grad or work of k to n - 1 elements, which holds the segments back to back, the rest
 * padding (work then W; not with skip_nonfinite). */
int sdp_task_adamw(const struct sdp_task_opts *o, sdp_rt_tensor_t *master, sdp_rt_tensor_t *grad,
                   sdp_rt_tensor_t *m, sdp_rt_tensor_t *v, sdp_rt_tensor_t *work,
                   sdp_rt_tensor_t *clip, double lr, double beta1, double beta2, double eps,
                   double weight_decay, int step, const struct sdp_adamw_segment *segs, int nsegs);

/** sdp_task_adamw with skip_nonfinite: when clip reports a non-finite global norm, master, m and v
 * are left unchanged (the working copy is rewritten from the master).  clip must be given. */
int sdp_task_adamw_ex(const struct sdp_task_opts *o, sdp_rt_tensor_t *master, sdp_rt_tensor_t *grad,
                      sdp_rt_tensor_t *m, sdp_rt_tensor_t *v, sdp_rt_tensor_t *work,
                      sdp_rt_tensor_t *clip, int skip_nonfinite, double lr, double beta1,
                      double beta2, double eps, double weight_decay, int step,
                      const struct sdp_adamw_segment *segs, int nsegs);

/** sdp_task_adamw_ex over a sparse layer's chunk, with used (2E) i32 R: a segment of expert e
 * (expert1 = e + 1) whose used[e] is 0 is skipped as torch.optim.AdamW skips a parameter without
 * gradient (no decay, no moment update; its working copy rewritten from the master), the others
 * take their bias correction from used[E + e], the expert's own count of updates, as PyTorch
 * counts steps per parameter.  used NULL: sdp_task_adamw_ex. */
int sdp_task_adamw_experts(const struct sdp_task_opts *o, sdp_rt_tensor_t *master,
                           sdp_rt_tensor_t *grad, sdp_rt_tensor_t *m, sdp_rt_tensor_t *v,
                           sdp_rt_tensor_t *work, sdp_rt_tensor_t *clip, int skip_nonfinite,
                           sdp_rt_tensor_t *used, double lr, double beta1, double beta2, double eps,
                           double weight_decay, int step, const struct sdp_adamw_segment *segs,
                           int nsegs);

/** sdp_task_adamw_ex on the GPU (the same bits: codelets/cuda/adamw.cu): master, grad, m, v and
 * work are read and written where the GPU keeps them, clip read there.  -ENOTSUP in a build
 * without CUDA. */
int sdp_task_adamw_gpu(const struct sdp_task_opts *o, sdp_rt_tensor_t *master,
                       sdp_rt_tensor_t *grad, sdp_rt_tensor_t *m, sdp_rt_tensor_t *v,
                       sdp_rt_tensor_t *work, sdp_rt_tensor_t *clip, int skip_nonfinite, double lr,
                       double beta1, double beta2, double eps, double weight_decay, int step,
                       const struct sdp_adamw_segment *segs, int nsegs);

/** An early update (codelet adamw_early, no clipping): sdp_task_adamw's kernel on segments of a
 * chunk whose gradient is already final there while other elements still wait for a backward
 * task; a later sdp_task_adamw_ex of the same step takes the rest.  Segments that do not cover
 * the chunk make the working copy read-write (the rest of it kept), in either task. */
int sdp_task_adamw_early(const struct sdp_task_opts *o, sdp_rt_tensor_t *master,
                         sdp_rt_tensor_t *grad, sdp_rt_tensor_t *m, sdp_rt_tensor_t *v,
                         sdp_rt_tensor_t *work, double lr, double beta1, double beta2, double eps,
                         double weight_decay, int step, const struct sdp_adamw_segment *segs,
                         int nsegs);

/** A late update (codelet adamw_late, no clipping): sdp_task_adamw_early's kernel on segments whose
 * gradient is packed in grad from element gbase on (the segments of an earlier update of the same
 * chunk come before them there).  The tied embedding's rows that the next step's tokens do not
 * select: their update may end after the next step's lookup, which does not read them. */
int sdp_task_adamw_late(const struct sdp_task_opts *o, sdp_rt_tensor_t *master,
                        sdp_rt_tensor_t *grad, size_t gbase, sdp_rt_tensor_t *m, sdp_rt_tensor_t *v,
                        sdp_rt_tensor_t *work, double lr, double beta1, double beta2, double eps,
                        double weight_decay, int step, const struct sdp_adamw_segment *segs,
                        int nsegs);

/** out (n) f32 RW += in[0] + ... + in[nin - 1] (each (n) f32 R), added in that order.  The
 * gradient return of data-parallel ranks; where it runs decides the route (CPU or GPU
 * reduction). */
int sdp_task_grad_reduce(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                         sdp_rt_tensor_t *const *in, int nin);

/** Runs over several nodes (runtime/nodes.h): t to process `node`, or t (W) from it, matched by
 * tag; detached StarPU-MPI requests ordered with the tasks on t.  @return 0, -ENOTSUP (built
 * without StarPU-MPI) or -EIO */
int sdp_task_node_send(sdp_rt_tensor_t *t, int node, int64_t tag);
int sdp_task_node_recv(sdp_rt_tensor_t *t, int node, int64_t tag);
/** The same through NCCL, GPU to GPU (codelets/node_nccl.c), once sdp_tasks_use_node_nccl() set
 * up one communicator over the nodes' rank-0 GPUs (worker workerid here; node 0's id sent by
 * bcast, the driver's broadcast).  The transfers run on that GPU, in the order submitted (the
 * same on every node, as NCCL needs).  @return 0, -ENODEV (no NCCL in this build: not logged;
 * or the worker is no GPU's), -EIO (NCCL could not start; logged) */
int sdp_tasks_use_node_nccl(int node, int nnodes, int workerid, int (*bcast)(void *buf, size_t n));
/** 1 once sdp_tasks_use_node_nccl() succeeded. */
int sdp_tasks_node_nccl(void);
int sdp_task_node_send_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *t, int node);
/** wait: NULL, or a tensor the receive waits for (R, never read): a receive holds its GPU's
 * stream until the message comes, so it is best posted once this node's part is ready. */
int sdp_task_node_recv_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *t, int node,
                            sdp_rt_tensor_t *wait);

/** The bf16 gradient return of one group: grad (n) f32 R, read whole (its partition plan gives
 * the chunks' bounds); for each chunk c: sumsq[c] (1) f64 W = its squared norm (the bits of
 * sdp_task_sumsq on the same elements) and ret[c] (the chunk's length, bf16) W = its elements
 * rounded to nearest even (NaN kept).  Runs where the norms run (sdp_tasks_place_norms). */
int sdp_task_grad_pack(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                       sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq);

/** sdp_task_grad_pack under the name grad_pack_early: the pack of a gradient that later backward
 * tasks still add to in some rows (the early update's input; the group's final pack rewrites its
 * sumsq, which are not the norms yet). */
int sdp_task_grad_pack_early(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                             sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq);

/** The final pack of the tied embedding after its early update, codelet grad_pack_rows: sumsq[c]
 * as sdp_task_grad_pack for every chunk c of grad, and ret[c] (bf16, the segments' length) W =
 * the elements of chunk c's nsegs[c] segments segs[c] (offsets in the chunk), rounded as
 * sdp_task_grad_pack rounds them, back to back (ret[c] may be longer: the rest is not written);
 * ret[c] NULL where nsegs[c] is 0.  The update of
 * those rows reads the packed chunk (sdp_task_adamw), so only they cross PCIe. */
int sdp_task_grad_pack_rows(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                            sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq,
                            struct sdp_adamw_segment *const *segs, const int *nsegs);

/** sdp_task_grad_pack of chunks [0, c1) only (the rest of a group whose last chunks
 * sdp_task_grad_pack_mlp packed). */
int sdp_task_grad_pack_head(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                            sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq, int c1);

/** sdp_task_grad_pack of chunks [c0, nchunks) only, under the name grad_pack_mlp: the chunks of a
 * layer's MLP weights, final while the layer's backward still adds to the chunks before c0. */
int sdp_task_grad_pack_mlp(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                           sdp_rt_tensor_t *const *ret, sdp_rt_tensor_t *const *sumsq, int c0);

/** sdp_task_grad_pack's squared norms alone (the fp32 return): grad (n) f32 R, read whole; for
 * each chunk c: sumsq[c] (1) f64 W, the bits of sdp_task_sumsq on the chunk.  Reading the whole
 * vector keeps it where it was made: a chunk's access would split it on its home node first. */
int sdp_task_grad_sumsq(const struct sdp_task_opts *o, sdp_rt_tensor_t *grad,
                        sdp_rt_tensor_t *const *sumsq);

/** out (n) W on the host = grad[off, off + n), grad (N) R read whole where hint.rank computes, or
 * on the host with o->on_host, both f32 or both bf16 (the gradient return chunk by chunk: out is a
 * chunk's copy, which AdamW reads; a chunk's own access would make StarPU split grad on its home
 * node first).  A CPU worker's task: its copy is the chunk's transfer.  With used (2E) i32 (a
 * sparse layer's marks, sdp_task_adamw_experts), only out's segments segs (AdamW's of the chunk)
 * whose expert received a token, or of no expert, are copied; the others are left unwritten. */
int sdp_task_grad_chunk(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *grad,
                        size_t off, const struct sdp_adamw_segment *segs, int nsegs,
                        sdp_rt_tensor_t *used);

/** dst (N) RW: elements [off, off + n) = src (n) R, same dtype, on the worker's node (a GPU where
 * the compute runs).  The working copy off the host (sdp_state.work_staged) takes a chunk.  dst's
 * access commutes with the other puts' (each writes its own range); the hint says SDP_MOVE_PUT:
 * it empties a stage, so sdp-slidedp never holds it back. */
int sdp_task_param_put(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, size_t off,
                       sdp_rt_tensor_t *src);

/** dst[off, off + n) = src (n): chunk src of a working copy on the host into dst, hint.rank's
 * compute copy of its group (or its replica of the chunk: the sharded route), as soon as src is
 * written, by a CPU worker's task whose copy is the
 * chunk's transfer; its hint says SDP_MOVE_FETCH: sdp-slidedp gates it by the window of the GPU
 * that dst is on.  first: the group's first chunk, which writes dst (W: dst may have been
 * dropped) where the others' accesses commute. */
int sdp_task_param_chunk(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, size_t off,
                         sdp_rt_tensor_t *src, int first);

/** dst RW: for each stage k of nsrc and each of its nsegs[k] segments i, elements
 * [off[k] + segs[k][i].offset, + segs[k][i].nelems) = the next segs[k][i].nelems elements of
 * src[k], which holds its segments back to back, then padding (the packed stage of an AdamW on
 * those segments, sdp_task_adamw); same dtype, on the worker's node.  Codelet param_put_rows, or
 * param_put_early for the stages of early updates (sdp_task_adamw_early).  As sdp_task_param_put
 * otherwise: dst's access commutes with the other puts', SDP_MOVE_PUT. */
int sdp_task_param_put_segs(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, int nsrc,
                            const size_t *off, sdp_rt_tensor_t *const *src,
                            struct sdp_adamw_segment *const *segs, const int *nsegs, int early);

/** dst (n) W = src (n) R, same dtype, on a CPU worker: a chunk of the working copy on the host
 * takes the stage an early AdamW wrote (the early MLP update).  The hint says SDP_MOVE_PUT, as
 * sdp_task_param_put's. */
int sdp_task_stage_put(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, sdp_rt_tensor_t *src);

/** dst (n) W = src (n) R, same dtype, on the executing worker's node: a step of the sharded
 * parameter route (a chunk into its owner's replica, then from there into every other rank's). */
int sdp_task_param_copy(const struct sdp_task_opts *o, sdp_rt_tensor_t *dst, sdp_rt_tensor_t *src);

/** Read t (R) where the task runs, and nothing else: placed with the compute ops, it brings a
 * group's working copy to the GPU as soon as the copy is written (a dispatch with one rank).  Its
 * hint says SDP_MOVE_FETCH: sdp-slidedp prefetches its input early and runs it only when the GPU
 * comes near its group. */
int sdp_task_param_fetch(const struct sdp_task_opts *o, sdp_rt_tensor_t *t);
/** sdp_task_param_fetch for activations (codelet act_fetch, lane "activation offload/reload"): the
 * embeddings a lookup on the host wrote, brought to the GPU once written, before the layer that
 * reads them is ready. */
int sdp_task_act_fetch(const struct sdp_task_opts *o, sdp_rt_tensor_t *t);

/* ---- setup ---- */
/** Register the perfmodels and check the codelets (call once after StarPU starts).  @return 0 */
int sdp_tasks_init(void);
/** Place the forward/backward compute ops on the GPUs (on_gpu = 1) or let the scheduler choose
 * (0).  The optimizer ops stay on the CPUs, next to the host-resident state (but for the
 * layers of train.gpu_update, whose AdamW graph/step.c submits with sdp_task_adamw_gpu).
 * @return 0 or -ENODEV (no CUDA worker, or a CUDA-less build; logged) */
int sdp_tasks_place_compute(int on_gpu);
/** 1 when sdp_tasks_place_compute placed the compute ops on the GPUs. */
int sdp_tasks_compute_on_gpu(void);
/* Where the gradient norms (sumsq) run. */
enum sdp_norm_place {
    SDP_NORMS_ANY,  /* wherever the scheduler likes (the default) */
    SDP_NORMS_HOST, /* on the CPUs: every gradient chunk comes to the host as soon as its
                       backward is done, so a bounded GPU window can drop a clean copy */
    SDP_NORMS_GPU   /* on the GPUs, where the gradient was made: no host CPU time and no host
                       memory traffic for the norms (the gradient still goes to the host for
                       AdamW); for one rank, whose graph submits each group's norms right after
                       its last backward (sdp_graph_conf) */
};
void sdp_tasks_place_norms(enum sdp_norm_place where);
/** 1 when the norms run on the GPUs (SDP_NORMS_GPU with a CUDA worker), else 0. */
int sdp_tasks_norms_on_gpu(void);
/** Check that the GPU kernels support the model's shapes (head_dim, grouped-query ratio).
 * @return 0 or -EINVAL (logged) */
struct sdp_model_cfg;
int sdp_tasks_check_gpu_model(const struct sdp_model_cfg *m);
/** NCCL collectives for these nranks ranks (every one on a CUDA worker, in rank order): from here
 * on, sdp_task_grad_reduce() pinned to rank 0 (on_rank) is one task that reduces every rank's
 * chunk into rank 0's with ncclReduce, GPU to GPU, and sdp_task_param_bcast_nccl() is available
 * for the sharded route (codelets/nccl.c).  Call after sdp_tasks_set_ranks().  @return 0, -ENODEV
 * (no NCCL in this build, a rank on a CPU worker, or no CPU worker to drive the collective; logged
 * with a hint), -EIO (NCCL could not start) */
int sdp_tasks_use_nccl(int nranks, const int *workerids);
/** Ranks NCCL is set up for (0: none). */
int sdp_tasks_nccl_ranks(void);
/** The sharded route's broadcast of one chunk through NCCL: replicas[r] (rank r's replica of the
 * chunk, on its GPU) W for every rank but root, whose replica (R) they receive. */
int sdp_task_param_bcast_nccl(const struct sdp_task_opts *o, sdp_rt_tensor_t *const *replicas,
                              int nranks, int root);
/** Release what sdp_tasks_init() set up (call before StarPU stops). */
void sdp_tasks_shutdown(void);
/** Data-parallel ranks: rank r's forward, loss and backward tasks run on worker workerids[r]
 * (a CUDA worker, or a CPU worker standing in for a GPU).  nranks = 0 (the default) lets the
 * scheduler place them.  The ids are copied.  @return 0 or -EINVAL (logged) */
int sdp_tasks_set_ranks(int nranks, const int *workerids);
/** The worker of rank r set by sdp_tasks_set_ranks(), or -1 where none is set. */
int sdp_tasks_rank_worker(int r);
/** Restrict every codelet to one kind of worker ("cpu", "cuda") or all ("any"), for tests.
 * @return 0 or -EINVAL */
int sdp_tasks_restrict(const char *where);
/** Dry run (on = 1): every codelet submitted from here on runs a no-op instead of its CPU or CUDA
 * kernel, with the same buffers, access modes, dependencies, placement, name and trace records, so
 * that a step's task graph can be built and run through StarPU without computing anything (the
 * data is left as it was). on = 0 puts the kernels back. Call it with no task in flight (before
 * the first submission or after starpu_task_wait_for_all). */
void sdp_cl_dry_run(int on);

/* The simulation's rates (a simulation build: codelets/sim.c), from the step-time model's machine:
 * per kind of worker, GEMM, attention and LM-head FLOP/s, the element-wise ops' bytes/s and a
 * task's launch overhead; one host thread's AdamW and cast bytes/s; pinned host-to-GPU and
 * GPU-to-host bytes/s (the chunk copies that are transfers: param_chunk, grad_chunk). */
struct sdp_sim_device {
    double gemm_flops, attn_flops, head_flops, elem_bps, launch_s;
};
struct sdp_sim_rates {
    struct sdp_sim_device gpu, cpu;
    double adamw_core_bps, cast_core_bps;
    double h2d_bps, d2h_bps;
};
/** Set the rates the simulated codelets take (before the first task). */
void sdp_tasks_sim_rates(const struct sdp_sim_rates *r);

#endif
