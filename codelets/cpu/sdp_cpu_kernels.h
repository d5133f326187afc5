/* SPDX-License-Identifier: MIT */
/* Pure CPU kernels of every op: scalar reference implementations (`_ref`, the oracle and the
 * portable fallback), AVX-512 variants of the host-bound ops (`_avx512`: AdamW, fp32 -> bf16 cast,
 * gradient sum of squares)
 * and the BLAS-backed GEMMs.  No StarPU, no runtime headers: these functions only compute. All
 * tensors are row-major and contiguous unless a leading dimension is given.  fp32 math with fp32
 * accumulation unless stated; reductions that feed the loss or norms accumulate in double.
 * Deterministic: for the same inputs every function returns the same bits, whatever thread calls
 * it, and an `_avx512` kernel returns the same bits as its `_ref`.
 *
 * Host kernel selection: the entry points without a suffix (sdp_cpu_adamw(), sdp_cpu_cast_bf16(),
 * sdp_cpu_sumsq())
 * run the AVX-512 kernels when the CPU has AVX-512 F, BW and VL, else the scalar references.  The
 * environment variable SDP_HOST_KERNELS=scalar forces the scalar references (`auto`, the default,
 * picks the best the CPU has); it is read once, at the first call.
 * Tests: tests/kernels/ (each against an fp64 oracle; test_kernels_host_simd.c: AVX-512 == _ref).
 */
#ifndef SDP_CPU_KERNELS_H
#define SDP_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* ---- host kernel selection ---- */

enum sdp_cpu_isa { SDP_CPU_ISA_SCALAR, SDP_CPU_ISA_AVX512 };

/** Non-zero when this build has the AVX-512 kernels and the CPU runs them (AVX-512 F, BW, VL). */
int sdp_cpu_have_avx512(void);
/** The kernels the entry points without a suffix use: SDP_CPU_ISA_AVX512 when
 * sdp_cpu_have_avx512() and SDP_HOST_KERNELS is unset, empty, `auto` or `avx512`; the scalar
 * references otherwise (an unknown value is warned about once).  Decided at the first call. */
enum sdp_cpu_isa sdp_cpu_isa(void);
/** "avx512" or "scalar". */
const char *sdp_cpu_isa_name(enum sdp_cpu_isa isa);

/* ---- bf16 ---- */

/** fp32 -> bf16, round to nearest even; NaN stays NaN (quiet, sign kept). */
uint16_t sdp_f32_to_bf16(float x);
/** bf16 -> fp32 (exact). */
float sdp_bf16_to_f32(uint16_t x);

/** dst[i] = bf16(src[i]) for n elements. */
void sdp_cpu_cast_bf16_ref(uint16_t *dst, const float *src, size_t n);
/** The same with AVX-512 (same bits; non-temporal stores to dst).  Only on a CPU where
 * sdp_cpu_have_avx512() is non-zero. */
void sdp_cpu_cast_bf16_avx512(uint16_t *dst, const float *src, size_t n);
/** The same through the selected kernel (sdp_cpu_isa()). */
void sdp_cpu_cast_bf16(uint16_t *dst, const float *src, size_t n);
/** dst[i] = float(src[i]) for n elements. */
void sdp_cpu_bf16_to_f32_ref(float *dst, const uint16_t *src, size_t n);

/* ---- GEMMs (OpenBLAS sgemm, one thread, for the codelets; _ref is a triple loop for tests) ----
 */

/** out (M, N) = (resid (M, N) if non-NULL, else 0) + x (M, K) . w (N, K)^T
 * out may alias resid. */
void sdp_cpu_matmul_fwd(float *out, const float *resid, const float *x, const float *w, int M,
                        int K, int N);
void sdp_cpu_matmul_fwd_ref(float *out, const float *resid, const float *x, const float *w, int M,
                            int K, int N);

/** dx (M, K) = dout (M, N) . w (N, K)     (overwrites dx) */
void sdp_cpu_matmul_bwd_data(float *dx, const float *dout, const float *w, int M, int K, int N);
void sdp_cpu_matmul_bwd_data_ref(float *dx, const float *dout, const float *w, int M, int K, int N);

/** dw (N, K) += dout (M, N)^T . x (M, K)     (accumulates into dw) */
void sdp_cpu_matmul_bwd_weight(float *dw, const float *dout, const float *x, int M, int K, int N);
void sdp_cpu_matmul_bwd_weight_ref(float *dw, const float *dout, const float *x, int M, int K,
                                   int N);

/* ---- LoRA adapters (PEFT: y = W x + s B (A drop(x)), s = alpha / r) ---- */
/** LoRA's dropout on the adapter's input (base/splitmix.h's mask keyed key, threshold thr; thr 0:
 * none): drop(x)[i] = x[i] * scale where element i is kept, else 0; xd: M * in scratch */
struct sdp_cpu_dropout {
    uint64_t key;
    uint32_t thr;
    float scale;
    float *xd;
};
/** y (M, out; row stride ldy) += s (drop(x) (M, in) . A (r, in)^T) . B (out, r)^T; u: M * r
 * scratch; dp NULL: no dropout */
void sdp_cpu_lora_fwd(float *y, int ldy, const float *x, const float *a, const float *b, int M,
                      int in, int out, int r, float s, float *u, const struct sdp_cpu_dropout *dp);
/** With dy (M, out; row stride ldy) the gradient of y: dx (M, in) += drop'(s (dy B) A) (the kept
 * elements times scale), dA (r, in) += s (dy B)^T drop(x), dB (out, r) += s dy^T (drop(x) A^T);
 * u, v: M * r scratch each */
void sdp_cpu_lora_bwd(float *dx, const float *dy, int ldy, const float *x, const float *a,
                      const float *b, float *ga, float *gb, int M, int in, int out, int r, float s,
                      float *u, float *v, const struct sdp_cpu_dropout *dp);

/* ---- embedding ---- */

/** out (N, C) = wte[ids[n]] for n < N.  ids in [0, V). */
void sdp_cpu_embedding_fwd_ref(float *out, const int32_t *ids, const float *wte, int N, int C);
/** dwte (V, C) += scatter of dout (N, C) by ids, in increasing n (deterministic). */
void sdp_cpu_embedding_bwd_ref(float *dwte, const float *dout, const int32_t *ids, int N, int C);

/* ---- RMSNorm over rows of length D: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ---- */

/** out (R, D), rstd (R) written; x (R, D); w (D). */
void sdp_cpu_rmsnorm_fwd_ref(float *out, float *rstd, const float *x, const float *w, int R, int D,
                             float eps);
/** dx (R, D) = (dres (R, D) if non-NULL, else 0) + d/dx; dw (D) += d/dw.  dx may alias dres.
 * dout (R, D) is the gradient of out; x, w, rstd as in the forward. */
void sdp_cpu_rmsnorm_bwd_ref(float *dx, float *dw, const float *dres, const float *dout,
                             const float *x, const float *w, const float *rstd, int R, int D);

/* ---- per-head q/k RMSNorm + rotary embedding, on the fused qkv activation ----
 * qkv (N, QKV): row n holds q (NH, HD) | k (NKV, HD) | v (NKV, HD).  Token n sits at position n %
 * T, or n % T - seg[n] when seg (N) is given (positions restarting at every document start). If
 * qnorm_w is NULL no per-head norm is applied (Llama).  RoPE is the "rotate_half" form of Hugging
 * Face: for i < HD/2, (x_i, x_{i+HD/2}) rotates by angle pos * inv_freq[i]; inv_freq (HD/2) is
 * given, and cos and sin are multiplied by scale in fp32 (yarn's attention factor; 1 else). */

/** out (N, QKV) = qkv with q and k normalized per head and rotated; v copied.  rstd (N, NH+NKV)
 * written when qnorm_w is non-NULL. */
void sdp_cpu_qknorm_rope_fwd_ref(float *out, float *rstd, const float *qkv, const float *qnorm_w,
                                 const float *knorm_w, const float *inv_freq, float scale,
                                 const int32_t *seg, int N, int T, int NH, int NKV, int HD,
                                 float eps);
/** dqkv (N, QKV) from dout (N, QKV): inverse rotation, then the norm's backward; dv copied.
 * dqnorm_w, dknorm_w (HD) accumulate (+=) when the norm is present. */
void sdp_cpu_qknorm_rope_bwd_ref(float *dqkv, float *dqnorm_w, float *dknorm_w, const float *dout,
                                 const float *qkv, const float *qnorm_w, const float *knorm_w,
                                 const float *rstd, const float *inv_freq, float scale,
                                 const int32_t *seg, int N, int T, int NH, int NKV, int HD);
struct sdp_rope_params;
/** inv_freq (HD/2) of any rope kind (codelets/cpu/rope.h) for sequences of seq_len tokens (dynamic
 * scaling depends on it), as transformers computes them.
 * @return the attention scaling that multiplies cos and sin (yarn's attention_factor; 1 else) */
float sdp_cpu_rope_freqs(float *inv_freq, const struct sdp_rope_params *p, int HD, int seq_len);
/** inv_freq[i] = 1 / theta^(2i/HD), with Llama-3 scaling when factor > 0 (HF
 * _compute_llama3_parameters). Computed in double, stored as float. */
void sdp_cpu_rope_inv_freq(float *inv_freq, int HD, double theta, double factor,
                           double low_freq_factor, double high_freq_factor, int original_max_pos);

/* ---- causal grouped-query attention on the fused qkv activation (after norm + rope) ----
 * qkv (B*T, QKV) as above; query head h uses kv head h / (NH/NKV); scale 1/sqrt(HD).
 * out (B*T, NH*HD); lse (B, NH, T) the log-sum-exp of the scaled scores (natural log).
 * seg (B*T) or NULL: the position in its row of the first token of each token's document
 * (document masking of packed rows): query t sees keys seg[t]..t; NULL: keys 0..t. */
void sdp_cpu_attention_fwd_ref(float *out, float *lse, const float *qkv, const int32_t *seg, int B,
                               int T, int NH, int NKV, int HD);
/** dqkv (B*T, QKV) written (dq, dk, dv) from dout (B*T, NH*HD), using qkv, out and lse of the
 * forward. */
void sdp_cpu_attention_bwd_ref(float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, const int32_t *seg, int B, int T, int NH, int NKV,
                               int HD);
/* The same through BLAS (codelets/cpu/attention_blas.c): whole rows of scores per block of
 * queries in ws, at least sdp_cpu_attention_ws_floats(T) floats. */
size_t sdp_cpu_attention_ws_floats(int T);
void sdp_cpu_attention_fwd(float *out, float *lse, const float *qkv, const int32_t *seg, int B,
                           int T, int NH, int NKV, int HD, float *ws);
void sdp_cpu_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, const int32_t *seg, int B, int T, int NH, int NKV,
                           int HD, float *ws);

/* ---- SwiGLU: gu (N, 2I) holds gate | up; out (N, I) = silu(gate) * up ---- */
void sdp_cpu_swiglu_fwd_ref(float *out, const float *gu, int N, int inter);
/** dgu (N, 2I) written from dout (N, I). */
void sdp_cpu_swiglu_bwd_ref(float *dgu, const float *dout, const float *gu, int N, int inter);

/* ---- LM head fused with cross-entropy, in blocks of rows and of the vocabulary so that (N, V)
 * logits never exist whole ---- h (N, C) final-normed hidden states; w (V, C); targets (N), entries
 * < 0 are ignored.  Writes: *loss_sum = sum over valid n of -log softmax(h_n . w^T)[targets[n]]
 * (double, unscaled); *nvalid = number of valid targets; dh (N, C) = scale * d(loss_sum)/dh;
 * dw (V, C) += scale * d(loss_sum)/dw (dw NULL: none, a frozen head).  The blocks: rows of h at a
 * time (dw is read and written once per row block), vcols vocabulary entries at a time (a rows x
 * vcols block of logits, meant to stay in cache), the vocabulary cut into shards (each a partial
 * dh; the result depends on rows, vcols and shards, never on threads), up to threads threads (the
 * caller's and a pool's: sdp_cpu_pool_run()).  All >= 1.  scratch: sdp_cpu_lmhead_ce_scratch()
 * bytes. */
struct sdp_lmhead_blocks {
    int rows, vcols, shards, threads;
};
/** The blocks for N rows of C channels over V classes on up to threads threads: rows so that the
 * shards' partial dh stay within 16 MiB, vcols so that a block of logits is about 1 MiB. */
struct sdp_lmhead_blocks sdp_cpu_lmhead_blocks(int N, int C, int V, int threads);
size_t sdp_cpu_lmhead_ce_scratch(int C, const struct sdp_lmhead_blocks *b);
void sdp_cpu_lmhead_ce(double *loss_sum, int *nvalid, float *dh, float *dw, const float *h,
                       const float *w, const int32_t *targets, int N, int C, int V, float scale,
                       const struct sdp_lmhead_blocks *b, void *scratch);
/** exp(x) for x <= 0 as the LM head computes it (vectorisable; max error 1 ulp; 0 below -104). */
float sdp_cpu_exp_neg(float x);
/* The head's element-wise work on one row of n logits (_ref, _avx512: the same bits; no suffix:
 * dispatched as the other host kernels): the max (NaN if z holds a NaN or an infinity); the sum
 * of exp(z - m) in double; z = k exp(z - m). */
float sdp_cpu_lmhead_row_max_ref(const float *z, int n);
float sdp_cpu_lmhead_row_max_avx512(const float *z, int n);
float sdp_cpu_lmhead_row_max(const float *z, int n);
double sdp_cpu_lmhead_exp_sum_ref(const float *z, int n, float m);
double sdp_cpu_lmhead_exp_sum_avx512(const float *z, int n, float m);
double sdp_cpu_lmhead_exp_sum(const float *z, int n, float m);
void sdp_cpu_lmhead_exp_scale_ref(float *z, int n, float m, float k);
void sdp_cpu_lmhead_exp_scale_avx512(float *z, int n, float m, float k);
void sdp_cpu_lmhead_exp_scale(float *z, int n, float m, float k);
/** Run fn(arg, tid, nth) on nth threads, tid 0 the caller's, the others from a pool of helper
 * threads kept for the next calls; nth <= nthreads (1 when the pool is busy with another call or
 * nthreads <= 1).  Returns nth. */
int sdp_cpu_pool_run(int nthreads, void (*fn)(void *arg, int tid, int nth), void *arg);
/** The same with triple loops and double accumulation (test oracle, small shapes only). */
void sdp_cpu_lmhead_ce_ref(double *loss_sum, int *nvalid, float *dh, float *dw, const float *h,
                           const float *w, const int32_t *targets, int N, int C, int V,
                           float scale);

/* ---- optimizer ---- */

/** Sum of squares of g (n) in double.  Order: element i is added to partial sum i % 32 in
 * increasing i, then the partial sums are added pairwise, s[j] += s[j + w] for w = 16, 8, 4, 2, 1
 * (the order of four 8-lane AVX-512 accumulators and their halving, so that the AVX-512 kernel
 * returns the same bits). */
#define SDP_SUMSQ_LANES 32
double sdp_cpu_sumsq_ref(const float *g, size_t n);
/** The same with AVX-512 (same bits).  Only on a CPU where sdp_cpu_have_avx512() is non-zero. */
double sdp_cpu_sumsq_avx512(const float *g, size_t n);
/** The same through the selected kernel (sdp_cpu_isa()). */
double sdp_cpu_sumsq(const float *g, size_t n);

/** One AdamW segment (PyTorch torch.optim.AdamW semantics, decoupled weight decay):
 *   g' = g * gscale;  p -= lr * wd * p (when decay);  m = b1 m + (1-b1) g';  v = b2 v + (1-b2)
 * g'^2; p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc1 = 1 - b1^t, bc2 = 1 - b2^t. Then g
 * is zeroed (ready for the next accumulation) when zero_grad is non-zero. If work_bf16 / work_f32
 * is non-NULL the updated p is also written there (bf16 rounded or fp32).  Every fp32 operation
 * rounds on its own, in the order written in adamw_ref.c: the kernel files are compiled with
 * -ffp-contract=off (codelets/cpu/local.mk), so no build turns a*b+c into an FMA.  A NaN result in
 * p, m or v is stored as the quiet NaN 0x7fc00000 (which NaN operand propagates would otherwise
 * depend on the compiler's operand order). */
struct sdp_adamw_hp {
    float lr, beta1, beta2, eps, weight_decay;
    float gscale; /* gradient clipping coefficient (1 when not clipping) */
    int step;     /* t, 1-based */
};
/** The fp32 constants of one AdamW call, computed once from hp in double and rounded to fp32 (as
 * PyTorch rounds its Python-float scalars); shared by every implementation so they agree. */
struct sdp_adamw_consts {
    float wd_mul;   /* 1 - lr wd when decaying, else 1 */
    float w1, omw1; /* lerp weight 1 - b1, and 1 - w1 in fp32 */
    float b2, c2;   /* beta2, 1 - beta2 */
    float nstep;    /* -lr / bc1 */
    float bc2_sqrt; /* sqrt(bc2) */
    float eps, gscale;
    int lerp_small; /* |w1| < 0.5: ATen's lerp takes the self + w (end - self) form */
};
void sdp_cpu_adamw_consts(struct sdp_adamw_consts *c, const struct sdp_adamw_hp *hp, int decay);
void sdp_cpu_adamw_ref(float *p, float *g, float *m, float *v, uint16_t *work_bf16, float *work_f32,
                       size_t n, const struct sdp_adamw_hp *hp, int decay, int zero_grad);
/** The same with a bf16 gradient g (n), widened exactly to fp32 before scaling. */
void sdp_cpu_adamw_gbf16_ref(float *p, uint16_t *g, float *m, float *v, uint16_t *work_bf16,
                             float *work_f32, size_t n, const struct sdp_adamw_hp *hp, int decay,
                             int zero_grad);
/** AVX-512 versions of the two: the same bits in p, m, v, g and the working copy for every input
 * (NaN, Inf and denormals included); the working copy is written with non-temporal stores.  Only on
 * a CPU where sdp_cpu_have_avx512() is non-zero. */
void sdp_cpu_adamw_avx512(float *p, float *g, float *m, float *v, uint16_t *work_bf16,
                          float *work_f32, size_t n, const struct sdp_adamw_hp *hp, int decay,
                          int zero_grad);
void sdp_cpu_adamw_gbf16_avx512(float *p, uint16_t *g, float *m, float *v, uint16_t *work_bf16,
                                float *work_f32, size_t n, const struct sdp_adamw_hp *hp, int decay,
                                int zero_grad);
/** The same through the selected kernel (sdp_cpu_isa()). */
void sdp_cpu_adamw(float *p, float *g, float *m, float *v, uint16_t *work_bf16, float *work_f32,
                   size_t n, const struct sdp_adamw_hp *hp, int decay, int zero_grad);
void sdp_cpu_adamw_gbf16(float *p, uint16_t *g, float *m, float *v, uint16_t *work_bf16,
                         float *work_f32, size_t n, const struct sdp_adamw_hp *hp, int decay,
                         int zero_grad);

#endif
