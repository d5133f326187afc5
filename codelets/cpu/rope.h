/* SPDX-License-Identifier: MIT */
/* RoPE parameters of the q/k norm + rotary kernels: Hugging Face's rope_type and its values, from
 * which sdp_cpu_rope_freqs (codelets/cpu/rope_freq.c) builds the inverse frequencies and the
 * attention scaling.  Shared by the tasks' interface (codelets/sdp_tasks.h) and the kernels. */
#ifndef SDP_CPU_ROPE_H
#define SDP_CPU_ROPE_H

/* kind: which of transformers' ROPE_INIT_FUNCTIONS */
enum sdp_rope_kind {
    SDP_ROPE_KIND_DEFAULT = 0, /* 1 / theta^(2i/HD) */
    SDP_ROPE_KIND_LLAMA3,      /* factor, low/high_freq_factor, original_max_pos */
    SDP_ROPE_KIND_YARN,        /* factor, original_max_pos, beta_*, attention_factor, mscale* */
    SDP_ROPE_KIND_LINEAR,      /* factor */
    SDP_ROPE_KIND_DYNAMIC,     /* factor, max_pos; depends on the sequence length */
};

/* Copied into every task; 0 in an optional field means transformers' default. */
struct sdp_rope_params {
    int kind;
    double theta, factor, low_freq_factor, high_freq_factor;
    int original_max_pos;
    int max_pos;                   /* max_position_embeddings (dynamic) */
    double beta_fast, beta_slow;   /* yarn: 32 and 1 when 0 */
    double attention_factor;       /* yarn: derived from factor when 0 */
    double mscale, mscale_all_dim; /* yarn: absent when 0 */
    int no_truncate;               /* yarn: 1 for "truncate": false */
};

#endif
