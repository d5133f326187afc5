/* SPDX-License-Identifier: MIT */
/* CUDA kernels of every op, as extern "C" launchers that enqueue on the given stream and never
 * synchronize (but sdp_cuda_moe_offsets_host, which waits for the experts' row counts, and
 * sdp_cudnn_attention_docs_*, which wait when the GPU is several of their calls behind).  No
 * StarPU, no runtime headers (the codelets/<op>.c wrappers pass StarPU's stream and buffers).
 * Storage dtype `dt` of activations and weights: SDP_CUDA_F32 or SDP_CUDA_BF16 (uint16 bf16
 * bits); every reduction and accumulation is fp32 (double where a loss is summed); rstd and lse
 * are always fp32; weight gradients are always fp32 and accumulated (+=).  Layouts are those of
 * codelets/cpu/sdp_cpu_kernels.h (row-major, the same letters).  Tests: tests/kernels/test_cuda_*.c
 * (against the CPU _ref kernels, exit 77 without a GPU). */
#ifndef SDP_CUDA_KERNELS_H
#define SDP_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/env.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sdp_cuda_dt { SDP_CUDA_F32 = 0, SDP_CUDA_BF16 = 1 };

/* 1 under a GPU memory limit below 20 GiB (STARPU_LIMIT_CUDA_MEM, in MiB, which gpu_memory_gib
 * sets): there a kernel's workspace, which the limit counts but StarPU cannot evict, is taken from
 * the data StarPU may keep, so the LM head's logits blocks and cuDNN's attention workspace default
 * to smaller sizes. */
#define SDP_CUDA_SMALL_LIMIT_MIB 20480L
static inline int sdp_cuda_small_gpu_limit(void)
{
    const long mib = sdp_env_long("STARPU_LIMIT_CUDA_MEM", 0);
    return mib > 0 && mib < SDP_CUDA_SMALL_LIMIT_MIB;
}

/* RoPE's tables passed by value: the inverse frequencies (HD/2 <= 256), the factor of cos and
 * sin (yarn's attention factor; 1 for the other kinds), and seg, on the device, or NULL: each
 * token's document start in its row, from which positions restart (token n sits at n % T -
 * seg[n]; n % T without). */
#define SDP_CUDA_MAX_HALF_HD 256
struct sdp_cuda_inv_freq {
    float f[SDP_CUDA_MAX_HALF_HD];
    float scale;
    const int32_t *seg;
};

/* ---- casts ---- */
/** dst (n) dt = src (n) f32; bf16 rounds to nearest even, NaN stays NaN (bit-identical to the CPU).
 */
void sdp_cuda_cast(void *dst, int dt, const float *src, size_t n, cudaStream_t s);
/** For each of nsegs segments i (tab[3i] source offset, below 2^32; tab[3i + 1] destination
 * offset; tab[3i + 2] length, in elements): dst[tab[3i + 1] ...] bf16 = src[tab[3i] ...] f32, the
 * bits of sdp_cuda_cast.  The table goes in the kernels' parameters (one launch per 256 segments).
 */
void sdp_cuda_gather_cast(uint16_t *dst, const float *src, const size_t *tab, int nsegs,
                          cudaStream_t s);
/** dst (n) f32 = src (n) dt, exact (bf16 widens; f32 is a device copy unless dst == src). */
void sdp_cuda_cast_f32(float *dst, const void *src, int dt, size_t n, cudaStream_t s);

/* ---- AdamW ---- */
/** The fp32 constants of one AdamW call (struct sdp_adamw_consts of codelets/cpu/sdp_cpu_kernels.h,
 * member for member: sdp_cpu_adamw_consts computes them). */
struct sdp_cuda_adamw_consts {
    float wd_mul, w1, omw1, b2, c2, nstep, bc2_sqrt, eps, gscale;
    int lerp_small;
};
/** AdamW on n elements: p, m, v (f32) updated from g (gdt), the working copy work (wdt) written;
 * the bits of sdp_cpu_adamw_ref.  clip (device, 2 f64: norm, coefficient) or NULL: with it the
 * gradient is scaled by clip[1] instead of c->gscale, and with skip_nonfinite a non-finite clip[0]
 * leaves p, m, v as they are and writes their working copy only. */
void sdp_cuda_adamw(float *p, const void *g, int gdt, float *m, float *v, void *work, int wdt,
                    size_t n, const struct sdp_cuda_adamw_consts *c, const double *clip,
                    int skip_nonfinite, cudaStream_t s);

/* ---- scatter ---- */
/** For each of nsegs segments i (tab[3i] destination offset, tab[3i + 1] source offset, tab[3i + 2]
 * length, in 2-byte units): dst[tab[3i] ...] = src[tab[3i + 1] ...].  The table goes in the
 * kernels' parameters (one launch per 256 segments): nothing to upload, nothing to wait for. */
void sdp_cuda_scatter16(uint16_t *dst, const uint16_t *src, const size_t *tab, int nsegs,
                        cudaStream_t s);

/* ---- GEMMs through cuBLASLt (fp32 compute, no TF32 for f32; bf16 tensor cores for bf16) ----
 * ws / ws_bytes: a cuBLASLt workspace (32 MiB is enough for Hopper). */
/** out (M, N) dt = [resid (M, N) dt] + x (M, K) dt . w (N, K)^T dt;  out may alias resid in F32
 * only (cuBLASLt's in-place bf16 epilogue was measured up to 13x beyond the two-rounding bound) */
void sdp_cuda_matmul_fwd(cublasLtHandle_t lt, void *out, const void *resid, const void *x,
                         const void *w, int M, int K, int N, int dt, void *ws, size_t ws_bytes,
                         cudaStream_t s);
/** The same with out and resid in out_dt (fp32 residual stream: out_dt f32, x and w bf16). */
void sdp_cuda_matmul_fwd_res(cublasLtHandle_t lt, void *out, const void *resid, const void *x,
                             const void *w, int M, int K, int N, int dt, int out_dt, void *ws,
                             size_t ws_bytes, cudaStream_t s);
/** dx (M, K) dt = dout (M, N) dt . w (N, K) dt */
void sdp_cuda_matmul_bwd_data(cublasLtHandle_t lt, void *dx, const void *dout, const void *w, int M,
                              int K, int N, int dt, void *ws, size_t ws_bytes, cudaStream_t s);
/** dw (N, K) f32 += dout (M, N)^T dt . x (M, K) dt */
void sdp_cuda_matmul_bwd_weight(cublasLtHandle_t lt, float *dw, const void *dout, const void *x,
                                int M, int K, int N, int dt, void *ws, size_t ws_bytes,
                                cudaStream_t s);

/* ---- LoRA adapters (codelets/cuda/lora.cu) ----
 * y, dy: the slice's first element, row stride ldy; A (r, in), B (out, r) dt; u, us: M * r * 4
 * bytes of device workspace each, t: M * out * 4, v: M * max(r, in) * 4 (the forward's and the
 * backward's fp32 product before its bf16 addition), vs: M * r * 4. */
/** LoRA's dropout on the adapter's input (base/splitmix.h's mask; thr 0: none); xd: the dropped
 * input, M * in elements of the operands' dtype (unused without dropout) */
struct sdp_cuda_dropout {
    uint64_t key;
    uint32_t thr;
    float scale;
    void *xd;
};
/** y (M, out) dt += s (drop(x) (M, in) dt . A^T) . B^T (the scaled product rounded to dt first);
 * drop(x) = x * scale where kept, rounded to dt */
void sdp_cuda_lora_fwd(cublasLtHandle_t lt, void *y, int ldy, const void *x, const void *a,
                       const void *b, int M, int in, int out, int r, float s, int dt, void *u,
                       void *us, void *t, void *ws, size_t ws_bytes, cudaStream_t st,
                       const struct sdp_cuda_dropout *dp);
/** dx (M, in) dt += drop'(s (dy B) A); ga (r, in) f32 += s (dy B)^T drop(x); gb (out, r) f32 +=
 * s dy^T (drop(x) A^T); with dropout dx takes the kept elements' scale * (s (dy B) A) in f32 and is
 * rounded once */
void sdp_cuda_lora_bwd(cublasLtHandle_t lt, void *dx, const void *dy, int ldy, const void *x,
                       const void *a, const void *b, float *ga, float *gb, int M, int in, int out,
                       int r, float s, int dt, void *u, void *us, void *v, void *vs, void *ws,
                       size_t ws_bytes, cudaStream_t st, const struct sdp_cuda_dropout *dp);

/* ---- embedding ---- */
/** out (N, C) dt = wte[ids] (wte (V, C) dt) */
void sdp_cuda_embedding_fwd(void *out, const int32_t *ids, const void *wte, int N, int C, int dt,
                            cudaStream_t s);
/** out (N, C) f32 = wte[ids] (wte (V, C) bf16), widened exactly (fp32 residual stream) */
void sdp_cuda_embedding_fwd_f32(float *out, const int32_t *ids, const uint16_t *wte, int N, int C,
                                cudaStream_t s);
/** dwte (V, C) f32 += scatter of dout (N, C) dt by ids (atomics: not bit-reproducible) */
void sdp_cuda_embedding_bwd(float *dwte, const void *dout, const int32_t *ids, int N, int C, int dt,
                            cudaStream_t s);

/* ---- RMSNorm over rows of length D ---- */
/** out (R, D) dt, rstd (R) f32 = rmsnorm(x (R, D) dt) * w (D) dt */
void sdp_cuda_rmsnorm_fwd(void *out, float *rstd, const void *x, const void *w, int R, int D,
                          float eps, int dt, cudaStream_t s);
/** dx (R, D) dt = [dres (R, D) dt] + d/dx;  dw (D) f32 += d/dw.  dx may alias dres.
 * ws: at least sdp_cuda_rmsnorm_bwd_ws(R, D) bytes (per-block partial sums of dw). */
size_t sdp_cuda_rmsnorm_bwd_ws(int R, int D);
void sdp_cuda_rmsnorm_bwd(void *dx, float *dw, const void *dres, const void *dout, const void *x,
                          const void *w, const float *rstd, int R, int D, int dt, void *ws,
                          cudaStream_t s);

/* With the residual stream in fp32 (train.residual_dtype fp32): x, dres and dx fp32, out, dout
 * and w in dt (codelets/cuda/rmsnorm_res.cu); otherwise as above.  dx may alias dres. */
void sdp_cuda_rmsnorm_fwd_res(void *out, float *rstd, const float *x, const void *w, int R, int D,
                              float eps, int dt, cudaStream_t s);
size_t sdp_cuda_rmsnorm_bwd_res_ws(int R, int D);
void sdp_cuda_rmsnorm_bwd_res(float *dx, float *dw, const float *dres, const void *dout,
                              const float *x, const void *w, const float *rstd, int R, int D,
                              int dt, void *ws, cudaStream_t s);

/* ---- per-head q/k RMSNorm + RoPE on the fused qkv (N, QKV) ---- */
/** out (N, QKV) dt; rstd (N, NH+NKV) f32 written when qnorm_w != NULL (then knorm_w != NULL too).
 */
void sdp_cuda_qknorm_rope_fwd(void *out, float *rstd, const void *qkv, const void *qnorm_w,
                              const void *knorm_w, struct sdp_cuda_inv_freq inv_freq, int N, int T,
                              int NH, int NKV, int HD, float eps, int dt, cudaStream_t s);
/** dqkv (N, QKV) dt from dout; dqnorm_w, dknorm_w (HD) f32 += (when the norm is present).
 * ws: at least sdp_cuda_qknorm_rope_bwd_ws(N, NH, NKV, HD) bytes. */
size_t sdp_cuda_qknorm_rope_bwd_ws(int N, int NH, int NKV, int HD);
void sdp_cuda_qknorm_rope_bwd(void *dqkv, float *dqnorm_w, float *dknorm_w, const void *dout,
                              const void *qkv, const void *qnorm_w, const void *knorm_w,
                              const float *rstd, struct sdp_cuda_inv_freq inv_freq, int N, int T,
                              int NH, int NKV, int HD, int dt, void *ws, cudaStream_t s);

/* ---- causal GQA attention, FlashAttention-style (no (T, T) matrix in memory) ---- */
/** out (B*T, NH*HD) dt, lse (B, NH, T) f32 from qkv (B*T, QKV) dt.  HD in {64, 128} at least; any
 * T.  seg (B*T) i32 on the device, or NULL: document masking, query t of a row sees keys
 * seg[t]..t of it (the row position of its document's first token); NULL: keys 0..t. */
void sdp_cuda_attention_fwd(void *out, float *lse, const void *qkv, const int32_t *seg, int B,
                            int T, int NH, int NKV, int HD, int dt, cudaStream_t s);
/** dqkv (B*T, QKV) dt from dout (B*T, NH*HD) dt.  ws: at least sdp_cuda_attention_bwd_ws(...)
 * bytes. */
size_t sdp_cuda_attention_bwd_ws(int B, int T, int NH, int NKV, int HD);
void sdp_cuda_attention_bwd(void *dqkv, const void *dout, const void *qkv, const void *out,
                            const float *lse, const int32_t *seg, int B, int T, int NH, int NKV,
                            int HD, int dt, void *ws, cudaStream_t s);

/* ---- the documents of packed rows as the sequences of a variable-length call (host code,
 * attention_docs.c), from seg (B*T) as above ---- */
/** the most documents in one row of seg, and *longest the longest document; -1 when a start is
 * neither the previous token's nor the token itself (0 at each row's first token) */
int sdp_cuda_attention_docs_max(const int32_t *seg, int B, int T, int *longest);
/** Rows b0..b0+bs-1 as bs*D sequences: slot r*D + j is the j-th document of row b0+r, then empty
 * slots.  len (bs*D): the lengths (0: an empty slot); tok (bs*D + 1): each slot's first token
 * counted from row b0's first (an empty slot: the next row's first), tok[bs*D] = bs*T, so that tok
 * is the prefix sum of len.  Returns 0, or -1 when a row holds more than D documents. */
int sdp_cuda_attention_docs(int32_t *len, int32_t *tok, const int32_t *seg, int b0, int bs, int T,
                            int D);

/* ---- the same attention through cuDNN's fused flash-attention graphs (bf16 only) ----
 * Built when configure finds cudnn_frontend (SDP_HAVE_CUDNN_FRONTEND).  Each returns 0 when done,
 * or -1 with nothing enqueued and the reason in sdp_cudnn_attention_error() (this thread's last
 * failure); a shape cuDNN has no engine for fails at once on later calls.  The graphs and the
 * cuDNN handle belong to the calling thread and its current device. */
/* budget: the bytes a call's workspace may take (0: 1 GiB, 128 MiB under a GPU limit below
 * 20 GiB); SDP_ATTENTION_WS_MIB, when set, replaces it.  The batch runs in calls of the most
 * sequences (a divisor of B) whose workspace fits, one at least. */
/** *ws: the workspace bytes of a call of the forward (bwd 0) or backward (bwd 1) of this shape */
int sdp_cudnn_attention_ws(size_t *ws, int bwd, int B, int T, int NH, int NKV, int HD,
                           size_t budget);
/** the sequences per cuDNN call for this shape; -1 when cuDNN cannot run it */
int sdp_cudnn_attention_batch(int bwd, int B, int T, int NH, int NKV, int HD, size_t budget);
int sdp_cudnn_attention_fwd(void *out, float *lse, const void *qkv, int B, int T, int NH, int NKV,
                            int HD, size_t budget, void *ws, cudaStream_t s);
int sdp_cudnn_attention_bwd(void *dqkv, const void *dout, const void *qkv, const void *out,
                            const float *lse, int B, int T, int NH, int NKV, int HD, size_t budget,
                            void *ws, cudaStream_t s);
const char *sdp_cudnn_attention_error(void);
/* Document masking (starts (B*T) on the host, as seg of sdp_cuda_attention_fwd): every document
 * of a row is a sequence of its own (a ragged layout with a padding mask).  These choose the graph
 * and the sub-batch from the starts, with no wait on the GPU, then take their workspace from
 * ws_fn(bytes) (which may replace an older one: nothing of theirs is queued yet).  lse keeps the
 * layout above.  *call (may be NULL): the rows per cuDNN call, the document slots a row, the
 * longest document, the workspace bytes. */
struct sdp_cudnn_docs_call {
    int bs, docs, longest;
    size_t ws;
};
int sdp_cudnn_attention_docs_fwd(void *out, float *lse, const void *qkv, const int32_t *starts,
                                 int B, int T, int NH, int NKV, int HD, size_t budget,
                                 void *(*ws_fn)(size_t), cudaStream_t s,
                                 struct sdp_cudnn_docs_call *call);
int sdp_cudnn_attention_docs_bwd(void *dqkv, const void *dout, const void *qkv, const void *out,
                                 const float *lse, const int32_t *starts, int B, int T, int NH,
                                 int NKV, int HD, size_t budget, void *(*ws_fn)(size_t),
                                 cudaStream_t s, struct sdp_cudnn_docs_call *call);

/* ---- SwiGLU on gu (N, 2I) = gate | up ---- */
void sdp_cuda_swiglu_fwd(void *out, const void *gu, int N, int inter, int dt, cudaStream_t s);
void sdp_cuda_swiglu_bwd(void *dgu, const void *dout, const void *gu, int N, int inter, int dt,
                         cudaStream_t s);

/* ---- mixture of experts (codelets/cuda/moe.cu, moe_experts.cu), fp32 ----
 * The kernels of codelets/cpu/moe.h on the GPU, same layouts and results: N tokens, C channels, E
 * experts, K per token, IM an expert's intermediate size; slot s = n*K + k.  GEMMs through cuBLAS
 * (the handle h, whose stream is set to s), pedantic fp32 (never TF32); every other sum in a fixed
 * order (no atomics), so a run repeats bit for bit. */
/** The routing of struct sdp_moe_routing (codelets/cpu/moe.h), member for member, on the device. */
struct sdp_cuda_moe_routing {
    int N, E, K;
    int32_t *ids, *counts, *offsets, *rows, *where;
    float *wts;
};
/** logits (N, E) = x (N, C) . wr (E, C)^T; probs = softmax (the sum in double); ids, wts the top-K
 * with the CPU kernel's order and tie rule (lower id first; a row of NaN picks ids 0..K-1), wts
 * renormalised by their fp32 sum with norm_topk. */
void sdp_cuda_moe_router_fwd(cublasHandle_t h, float *logits, float *probs,
                             const struct sdp_cuda_moe_routing *r, const float *x, const float *wr,
                             int C, int norm_topk, cudaStream_t s);
/** r->counts, offsets, rows, where from r->ids: each expert's slots in increasing slot order
 * (the CPU's stable counting sort, the same arrays). */
void sdp_cuda_moe_permute(const struct sdp_cuda_moe_routing *r, cudaStream_t s);
/** off (E + 1), host = r->offsets: the one launcher that waits, on s, for the copy (the experts'
 * GEMM sizes are host arguments of cuBLAS). */
void sdp_cuda_moe_offsets_host(int32_t *off, const struct sdp_cuda_moe_routing *r, cudaStream_t s);
/** xp (N*K, C): row i = x[rows[i] / K]. */
void sdp_cuda_moe_gather(float *xp, const float *x, const struct sdp_cuda_moe_routing *r, int C,
                         cudaStream_t s);
/** The SwiGLU experts on their rows (off: sdp_cuda_moe_offsets_host), as sdp_cpu_moe_experts_fwd:
 * gu (N*K, 2IM), hh (N*K, IM), y (N*K, C) f32; wgu (E, 2IM, C), wdown (E, C, IM) in wdt; for bf16
 * weights wtmp holds one expert's in f32 ((3 IM C) floats; else unused).  Idle experts unread. */
void sdp_cuda_moe_experts_fwd(cublasHandle_t h, float *y, float *gu, float *hh, const float *xp,
                              const void *wgu, const void *wdown, int wdt, float *wtmp,
                              const int32_t *off, int E, int C, int IM, cudaStream_t s);
/** out (N, C) = [resid (N, C)] + sum_k wts[n*K + k] y[where[n*K + k]], in k order. */
void sdp_cuda_moe_combine(float *out, const float *resid, const float *y,
                          const struct sdp_cuda_moe_routing *r, int C, cudaStream_t s);
/** dy (N*K, C) row where[s] = wts[s] dout[s / K]; dwts (N*K) = dout[s / K] . y[where[s]]
 * (a double sum). */
void sdp_cuda_moe_combine_bwd(float *dy, float *dwts, const float *dout, const float *y,
                              const struct sdp_cuda_moe_routing *r, int C, cudaStream_t s);
/** As sdp_cpu_moe_experts_bwd: dxp (N*K, C) written; dwgu, dwdown f32 += for the experts with
 * rows (both NULL: no weight gradients, a frozen base); dgu, dh scratch; wtmp as in the forward. */
void sdp_cuda_moe_experts_bwd(cublasHandle_t h, float *dxp, float *dwgu, float *dwdown, float *dgu,
                              float *dh, const float *dy, const float *xp, const float *gu,
                              const float *hh, const void *wgu, const void *wdown, int wdt,
                              float *wtmp, const int32_t *off, int E, int C, int IM,
                              cudaStream_t s);
/** dx (N, C) += sum_k dxp[where[n*K + k]], in k order. */
void sdp_cuda_moe_scatter_bwd(float *dx, const float *dxp, const struct sdp_cuda_moe_routing *r,
                              int C, cudaStream_t s);
/** dprobs (N, E) written from dwts (N*K), as sdp_cpu_moe_topk_bwd. */
void sdp_cuda_moe_topk_bwd(float *dprobs, const float *dwts, const float *probs,
                           const struct sdp_cuda_moe_routing *r, int norm_topk, cudaStream_t s);
/** dlogits (N, E) = p (dp - sum_e p dp), the sum in double. */
void sdp_cuda_moe_softmax_bwd(float *dlogits, const float *dprobs, const float *probs, int N, int E,
                              cudaStream_t s);
/** dx (N, C) += dlogits . wr; dwr (E, C) += dlogits^T . x (dwr NULL: skipped). */
void sdp_cuda_moe_router_bwd(cublasHandle_t h, float *dx, float *dwr, const float *dlogits,
                             const float *x, const float *wr, int N, int C, int E, cudaStream_t s);
/** The load-balancing loss (codelets/cpu/moe.h): count (E) f64 += r->counts, psum (E) f64 +=
 * column sums of probs (N, E); with used (2E) i32, the CPU codelet's used-expert flags too:
 * used[e] = (first_m ? 0 : used[e]) | (counts[e] > 0), used[E + e] += last_m ? used[e] : 0. */
void sdp_cuda_moe_aux_stats(double *count, double *psum, int32_t *used, int first_m, int last_m,
                            const float *probs, const struct sdp_cuda_moe_routing *r,
                            cudaStream_t s);
/** loss (1) f64 = E sum_e (count_e / rows) (psum_e / rows), the CPU's order (the same bits). */
void sdp_cuda_moe_aux_loss(double *loss, const double *count, const double *psum, double rows,
                           int E, cudaStream_t s);
/** dprobs (N, E) += scale * E * count_e / rows^2. */
void sdp_cuda_moe_aux_bwd(float *dprobs, const double *count, double rows, int N, int E,
                          float scale, cudaStream_t s);

/* ---- LM head + cross-entropy, in blocks of rows so (N, V) logits never exist whole ----
 * loss (2) double, device: {sum of -log p(target) over valid rows, number of valid rows} (written).
 * dh (N, C) dt = scale * dloss/dh; dw (V, C) f32 += scale * dloss/dw (NULL: none); targets (N)
 * int32, < 0 ignored.  The logits are stored as zdt (SDP_CUDA_F32, or SDP_CUDA_BF16 for bf16
 * weights), the softmax computed from them in fp32.  ws: at least sdp_cuda_lmhead_ce_ws(N, C, V,
 * rows_per_block, zdt) bytes. */
size_t sdp_cuda_lmhead_ce_ws(int N, int C, int V, int rows_per_block, int zdt);
void sdp_cuda_lmhead_ce(cublasLtHandle_t lt, double *loss, void *dh, float *dw, const void *h,
                        const void *w, const int32_t *targets, int N, int C, int V, float scale,
                        int rows_per_block, int dt, int zdt, void *ws, size_t ws_bytes,
                        void *gemm_ws, size_t gemm_ws_bytes, cudaStream_t s);

/* ---- optimizer support on the GPU ---- */
/** out (1) double = sum of squares of g (n) f32 (device).  ws: sdp_cuda_sumsq_ws(n) bytes. */
size_t sdp_cuda_sumsq_ws(size_t n);
void sdp_cuda_sumsq(double *out, const float *g, size_t n, void *ws, cudaStream_t s);
/** For each chunk c < nchunks of g, elements [off[c], off[c + 1]) (off: a host array of nchunks + 1
 * element offsets): *sumsq[c] (1) double (device) = its sum of squares, the bits sdp_cuda_sumsq
 * gives on it; and, unless dst or dst[c] is NULL, dst[c] (its length) bf16 = its cast, the bits
 * sdp_cuda_cast gives.  g is read once; two launches per 64 chunks.  ws:
 * sdp_cuda_sumsq_cast_ws(off, nchunks) bytes. */
size_t sdp_cuda_sumsq_cast_ws(const size_t *off, int nchunks);
void sdp_cuda_sumsq_cast(double *const *sumsq, uint16_t *const *dst, const float *g,
                         const size_t *off, int nchunks, void *ws, cudaStream_t s);
/** out (n) f32 += in (n) f32 (device), one rank's gradient into rank 0's. */
void sdp_cuda_add_f32(float *out, const float *in, size_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
