/* SPDX-License-Identifier: MIT */
/* The training state in host RAM: per parameter group (embedding, each decoder layer, head) one
 * flat fp32 master vector, Adam m and v, an fp32 gradient accumulator, the working copy the
 * compute reads (bf16 or fp32) and optionally a bf16 gradient for AdamW, each partitioned into the
 * same chunks.  Initialised from random
 * (HF's init: normal(0, 0.02) for matrices, ones for norms, seeded per tensor so chunking never
 * changes values) or from a Hugging Face directory; saved back as one.  StarPU-free header.  Tests:
 * tests/e2e/test_e2e_hf_parity.c. */
#ifndef SDP_STATE_H
#define SDP_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "models/sdp_lora.h"
#include "models/sdp_models.h"
#include "runtime/tensor.h"

/* One tensor of a layer's adapters: A (rank, in) or B (out, rank) of the linear `kind`. */
struct sdp_lora_tensor {
    enum sdp_ptensor kind;
    int is_b;            /* 0: lora_A, 1: lora_B */
    size_t offset;       /* elements from the start of the layer's adapter vector */
    int rows, cols;      /* row-major, as the PEFT tensor */
    char peft_name[128]; /* base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight */
};

/* A decoder layer's adapters: one flat vector (per target in sdp_lora_kinds' order, A then B), in
 * chunks of the state's chunk size like a group, with the tensors a trainable group has. */
struct sdp_lora_state {
    size_t nelems;
    int ntensors;
    struct sdp_lora_tensor tensors[2 * SDP_LORA_NTARGETS];
    int nchunks;
    sdp_rt_tensor_t *master, *m, *v; /* f32, host only */
    sdp_rt_tensor_t *grad;           /* f32 accumulator */
    sdp_rt_tensor_t *work;           /* the copy the compute reads (work_dtype) */
};

struct sdp_group_state {
    size_t nelems;
    int ntensors;
    struct sdp_param_desc tensors[SDP_MAX_GROUP_TENSORS];
    int nchunks;
    sdp_rt_tensor_t *master, *m, *v; /* f32, host only */
    sdp_rt_tensor_t *grad;           /* f32 accumulator */
    sdp_rt_tensor_t *work;           /* working copy read by the compute (work_dtype) */
    sdp_rt_tensor_t **grad_ret;      /* [nchunks] bf16 gradient chunks AdamW reads (grad_dtype
                                        bf16), without host home: StarPU allocates them where they
                                        are written or read, and the graph drops each after its
                                        update; or NULL */
    sdp_rt_tensor_t **work_stage;    /* [nchunks] (staged) the chunks AdamW writes, without
                                        host home, copied into `work` where it is computed and
                                        dropped; or NULL */
    int frozen; /* 1: LoRA's frozen base (sdp_state_create_lora): `work` is the only copy, on the
                   host; master, m, v, grad, grad_ret and work_stage are NULL */
    struct sdp_lora_state *lora; /* the layer's adapters (LoRA), or NULL */
    int staged; /* 1: `work` has no host home and is not split into chunks (sdp_state.work_staged
                   for every group; SDP_STATE_EMBED_STAGED for group 0 alone) */
    int32_t *expert_steps; /* a Qwen3-MoE sparse layer's: the AdamW updates each of its E experts
                              has had (each counts its own steps, as PyTorch does per parameter),
                              which the graph counts and checkpoints keep; else NULL */
};

/* sdp_state_create_ex flags */
#define SDP_STATE_ON_GPU      1u /* the compute runs on GPUs */
#define SDP_STATE_WORK_STAGED 2u /* working copies off the host (see sdp_state.work_staged) */
/* group 0's working copy alone off the host, as work_staged does for every group
 * (train.embed_home: gpu) */
#define SDP_STATE_EMBED_STAGED 4u

struct sdp_state {
    struct sdp_model_cfg cfg;
    enum sdp_dtype work_dtype;
    size_t chunk_elems; /* fp32 elements per chunk (the last of a group may be shorter) */
    int ngroups;
    int nchunks_total;
    struct sdp_group_state *groups;
    int work_valid;            /* working copies reflect the masters (set by the graph); a frozen
                                  group's working copy, its only copy, is always valid */
    enum sdp_dtype grad_dtype; /* what AdamW reads: SDP_F32 (grad) or SDP_BF16 (grad_ret) */
    int work_staged;          /* 1: each group's working copy has no host home and is not split into
                                 chunks: AdamW writes a chunk into work_stage[c], a param_put copies it
                                 into the working copy where the compute keeps it (the GPU), and the
                                 stage is dropped.  The host then holds the masters and moments (12 bytes
                                 a parameter) and the stages in flight, not a working copy of the model */
    struct sdp_lora_cfg lora; /* LoRA (rank 0: none): every group frozen, adapters on the
                                 decoder layers lora names */
    int embed_staged;         /* SDP_STATE_EMBED_STAGED was given: group 0 staged on purpose (with
                                 work_staged too), for the early update of its rows (graph/step.c) */
};

/** Allocate and register the state of cfg.  chunk_bytes: bytes of fp32 master per chunk.
 * @return 0, -ENOMEM (logged with sizes), -EINVAL */
int sdp_state_create(struct sdp_state *st, const struct sdp_model_cfg *cfg,
                     enum sdp_dtype work_dtype, size_t chunk_bytes);
void sdp_state_destroy(struct sdp_state *st);

/** Hugging Face initialisation from a seed (before any task touches the state). */
void sdp_state_init_random(struct sdp_state *st, unsigned long long seed);

/** Load the master weights from a Hugging Face directory (or safetensors file / index).  Every
 * tensor of the model must be present with the right shape; dtypes F32, BF16, F16.  Before any
 * task.
 * @return 0, -ENOENT, -EINVAL (logged: file, tensor, expected vs found) */
int sdp_state_load_hf(struct sdp_state *st, const char *path);

/** Check that path holds every tensor of cfg with the right shape and a supported dtype, without
 * reading the data (before anything is allocated).  @return 0, -ENOENT, -EINVAL (logged) */
int sdp_state_check_hf(const struct sdp_model_cfg *cfg, const char *path);

/** Write config.json and model.safetensors (sharded above 5 GiB) of the current masters into dir
 * (created if missing), as dtype "float32" or "bfloat16"; of a LoRA state, its fp32 frozen base
 * (merged by sdp_state_lora_merge for an export; a bf16 base is refused).  Waits for pending tasks.
 * @return 0, -EIO, -ENOSPC */
int sdp_state_save_hf(struct sdp_state *st, const char *dir, const char *dtype);

/** sdp_state_create with the gradient AdamW reads: SDP_F32 (what sdp_state_create does: the fp32
 * accumulator comes back to the host) or SDP_BF16 (each group gets bf16 grad_ret chunks, which
 * the graph fills from the final fp32 gradient where it was made and drops after each chunk's
 * update: host memory holds only the chunks between their return and their update).  With on_gpu
 * and SDP_BF16 the fp32 accumulators get host address space but no pages: they live on the GPUs
 * and the graph discards them after packing; except a tied embedding's (group 0), which lives
 * through the whole backward and gets pinned pages for StarPU to write it back into.  flags:
 * SDP_STATE_ON_GPU (on_gpu above), SDP_STATE_WORK_STAGED (work_staged), SDP_STATE_EMBED_STAGED
 * (group 0 staged alone).
 * @return as sdp_state_create */
int sdp_state_create_ex(struct sdp_state *st, const struct sdp_model_cfg *cfg,
                        enum sdp_dtype work_dtype, size_t chunk_bytes, enum sdp_dtype grad_dtype,
                        unsigned flags);

/** The state of a LoRA run: every group frozen (its working copy of work_dtype the only host copy
 * of the base: 2 bytes a parameter in bf16, and in fp32, where CPU workers compute, the 4 bytes of
 * the copy they read; no gradient, no master, no moments), and on every decoder layer lora
 * adapts, fp32 adapter masters, moments, gradient and their working copy (struct sdp_lora_state).
 * The adapters start zero: sdp_state_lora_init gives PEFT's initialisation.  The working copies
 * must be on the host (no SDP_STATE_WORK_STAGED, SDP_STATE_EMBED_STAGED).
 * @return 0, -ENOMEM, -EINVAL (logged) */
int sdp_state_create_lora(struct sdp_state *st, const struct sdp_model_cfg *cfg,
                          const struct sdp_lora_cfg *lora, enum sdp_dtype work_dtype,
                          size_t chunk_bytes, unsigned flags);

/** PEFT's initialisation of every adapter: A as nn.Linear's default (kaiming_uniform_ with
 * a = sqrt(5): uniform in +-1/sqrt(in)), B zeros, moments zero.  Drawn from the project's
 * counter-based generator (seed, PEFT tensor name, element): the bits differ from torch's, so a
 * parity test loads one initial adapter on both sides.  Before any task. */
void sdp_state_lora_init(struct sdp_state *st, unsigned long long seed);

/** Host bytes of sdp_state_create_lora's state: the base's working copy, and 16 bytes (master, m,
 * v, gradient) plus the working copy's per adapter parameter. */
size_t sdp_state_lora_host_bytes(const struct sdp_model_cfg *cfg, const struct sdp_lora_cfg *lora,
                                 enum sdp_dtype work_dtype);

/** Host bytes the state of cfg needs for the whole run: master, m, v, working copy and the fp32
 * gradients, which with SDP_BF16 and on_gpu stay on the GPUs but for a tied embedding's (see
 * sdp_state_create_ex; the bf16 chunks in flight are not counted); without the working copy with
 * SDP_STATE_WORK_STAGED, group 0's without it with SDP_STATE_EMBED_STAGED. */
size_t sdp_state_host_bytes(const struct sdp_model_cfg *cfg, enum sdp_dtype work_dtype,
                            enum sdp_dtype grad_dtype, unsigned flags);

/** Element offset of tensor kind k in group g (aborts if absent: a bug in the caller). */
size_t sdp_state_off(const struct sdp_state *st, int g, enum sdp_ptensor k);

#endif
