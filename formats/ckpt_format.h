/* SPDX-License-Identifier: MIT */
/* The checkpoint file format: its header codec (fixed header, JSON, tensor table) and its reader
 * (validation of the header, crc of every tensor).  Plain C over models/ and base/: saving and
 * restoring a training state's tensors is runtime/ckpt.h's part.  Tests: tests/runtime/test_ckpt.c
 * and tests/fuzz/fuzz_ckpt.c.
 *
 * File DIR/step-%08d.sdpckpt, all integers little-endian:
 *
 *   offset  size  field
 *        0     8  magic "SDPCKPT1"
 *        8     4  u32 format version (SDP_CKPT_VERSION)
 *       12     4  u32 flags (0; readers reject unknown bits)
 *       16     8  u64 json_nbytes: length of the JSON header that starts at byte 64
 *       24     8  u64 data_offset: start of the tensor data (64-aligned, >= 64 + json_nbytes)
 *       32     8  u64 file_nbytes: size of the whole file (detects truncation)
 *       40    20  zero
 *       60     4  u32 header crc32c of bytes [0, 60) followed by the json_nbytes JSON bytes
 *       64     n  JSON (UTF-8, no terminating NUL), zero padding up to data_offset
 *
 * The JSON header:
 *   { "format": "slidedp-checkpoint", "version": 1,
 *     "model": { "arch": "qwen3"|"llama", every other field of struct sdp_model_cfg by name,
 *                "mlp_only_layers": [ int, ... ] },
 *     "step": int, "data": { "epoch": int, "index": int }, "seed": "decimal u64",
 *     "rng": [ "decimal u64", ... ] (0 to SDP_CKPT_RNG_WORDS words), "fingerprint": str,
 *     "last_loss": number or null (optional),
 *     "work_dtype": "f32"|"bf16", "chunk_elems": int, "num_groups": int,
 *     "expert_steps": { "g": [ E ints ], ... } (a Qwen3-MoE model's: for every sparse layer's
 *             group g, the AdamW updates each expert has had, <= step),
 *     "lora": { "rank", "alpha", "targets" (bits of the adapted kinds), "first", "last" }
 *             (optional: a LoRA run's checkpoint, whose tensors are each decoder layer's
 *             adapters, master, m and v, 0 elements for a group without adapters),
 *     "tensors": [ { "group": g, "kind": "master"|"m"|"v", "nelems": n,
 *                    "offset": absolute file offset (64-aligned), "crc32c": "8 hex digits" },
 *                  ... ] }
 * The tensors follow in table order (group-major, then master, m, v), each the raw fp32 bytes of
 * the group's flat vector (layout of models/sdp_models.h), zero-padded to a multiple of 64
 * bytes; the last one ends at file_nbytes.  crc32c is base/crc32c.h's Castagnoli CRC.
 */
#ifndef SDP_CKPT_FORMAT_H
#define SDP_CKPT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "models/sdp_lora.h"
#include "models/sdp_models.h"

#define SDP_CKPT_MAGIC        "SDPCKPT1"
#define SDP_CKPT_VERSION      1
#define SDP_CKPT_RNG_WORDS    4
#define SDP_CKPT_FIXED_NBYTES 64                 /* the fixed header, before the JSON */
#define SDP_CKPT_ALIGN        64                 /* data offset and every tensor's padded size */
#define SDP_CKPT_NKINDS       3                  /* tensors per group: master, m, v */
#define SDP_CKPT_IO_BLOCK     ((size_t)64 << 20) /* bytes per read or write call */

/* One entry of the tensor table. */
struct sdp_ckpt_tensor {
    int group, kind; /* kind: 0 master, 1 m, 2 v */
    uint64_t nelems; /* fp32 elements */
    uint64_t offset; /* absolute file offset */
    uint32_t crc;    /* crc32c of the nelems * 4 bytes */
};

/* A checkpoint's header in memory: the fixed header's offsets, the JSON's fields, the table. */
struct sdp_ckpt_header {
    struct sdp_model_cfg cfg;
    int step;
    uint64_t data_epoch, data_index, seed;
    int rng_nwords;
    uint64_t rng[SDP_CKPT_RNG_WORDS];
    char fingerprint[128];
    double last_loss;          /* NAN when unknown */
    char work_dtype[8];        /* "f32" or "bf16" */
    size_t chunk_elems;        /* fp32 elements per chunk of the run that wrote it */
    int ngroups;               /* sdp_model_num_groups(&cfg) */
    struct sdp_lora_cfg lora;  /* rank 0: a whole model's state; else a LoRA run's adapters */
    int ntensors;              /* SDP_CKPT_NKINDS * ngroups */
    struct sdp_ckpt_tensor *t; /* [ntensors], table order; freed by sdp_ckpt_header_free */
    uint64_t data_off, file_nbytes;
    int32_t *expert_steps; /* [ngroups * num_experts]: each sparse layer's experts' AdamW step
                              counts (0 for the other groups), or NULL for a dense model; freed
                              by sdp_ckpt_header_free */
};

/** "master", "m" or "v". */
const char *sdp_ckpt_kind_name(int kind);

/** Free h->t (the rest of h is plain data). */
void sdp_ckpt_header_free(struct sdp_ckpt_header *h);

/* ---- writing (formats/ckpt_header.c) ---- */

/** Lay out a header whose scalars and h->t[i].nelems are filled: choose data_off after the
 * JSON, every tensor's offset and file_nbytes, and return the JSON text with the crcs of h->t
 * (the caller writes the data with placeholder crcs, then calls sdp_ckpt_header_json again with
 * the real ones: a crc is always 8 hex digits, so the length stays).
 * @param[out] json_out  the JSON text (caller frees)
 * @return 0 or -ENOMEM (logged) */
int sdp_ckpt_header_layout(struct sdp_ckpt_header *h, char **json_out);

/** The JSON text of h (offsets and crcs as they are); NULL when out of memory.  Caller frees. */
char *sdp_ckpt_header_json(const struct sdp_ckpt_header *h);

/** Fill the fixed header and the JSON into head (h->data_off bytes, zero past the JSON),
 * with the header crc over both. */
void sdp_ckpt_header_pack(unsigned char *head, const struct sdp_ckpt_header *h, const char *json);

/* ---- reading ---- */

/** Parse the JSON header of path (len bytes of text) into h, checking every field against the
 * model it names and the tensor table against h->data_off and h->file_nbytes (set by the caller).
 * @return 0, -EINVAL (reason logged with the path), -ENOMEM; on failure h->t is freed */
int sdp_ckpt_header_parse(const char *path, const char *text, size_t len,
                          struct sdp_ckpt_header *h);

/** Name the first field where a (the checkpoint's) and b (the state's) differ.
 * @return 0 or -EINVAL (logged) */
int sdp_ckpt_cfg_compare(const char *path, const struct sdp_model_cfg *a,
                         const struct sdp_model_cfg *b);

/** Open path and validate its whole header (magic, version, header crc, JSON, tensor table
 * against the model and the file size) without reading the tensor data.
 * @param[out] fd_out  the open file (caller closes)
 * @param[out] h  the header (caller frees with sdp_ckpt_header_free)
 * @return 0, -ENOENT, -EINVAL (corrupt or unsupported: reason logged with the path), -EIO,
 * -ENOMEM */
int sdp_ckpt_file_open(const char *path, int *fd_out, struct sdp_ckpt_header *h);

/** sdp_ckpt_file_open, then close the file. */
int sdp_ckpt_read_header(const char *path, struct sdp_ckpt_header *h);

/** Check the crc of tensor t of the file open as fd, reading it in blocks of bufsize bytes into
 * buf or, with dst, straight into dst (t->nelems floats).
 * @return 0, -EINVAL (truncated or crc mismatch: logged), -EIO */
int sdp_ckpt_tensor_check(const char *path, int fd, const struct sdp_ckpt_tensor *t, char *buf,
                          size_t bufsize, char *dst);

/** sdp_ckpt_tensor_check of every tensor of h, in table order.
 * @return 0, -EINVAL, -EIO, -ENOMEM */
int sdp_ckpt_file_verify(const char *path, int fd, const struct sdp_ckpt_header *h);

#endif
