/* SPDX-License-Identifier: MIT */
/* Hugging Face safetensors: read one file or a sharded set (model.safetensors.index.json), write
 * one file atomically.  Format: 8-byte little-endian header length n, n bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str:
 * str}}, then the data block (offsets relative to it).  Every header field is validated against the
 * file size; errors name the file and the tensor.  JSON through jansson.  Tests:
 * tests/formats/test_safetensors.c. */
#ifndef SDP_SAFETENSORS_H
#define SDP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum sdp_st_dtype {
    SDP_ST_F32,
    SDP_ST_BF16,
    SDP_ST_F16,
    SDP_ST_I32,
    SDP_ST_I64,
    SDP_ST_OTHER /* listed, not readable */
};

#define SDP_ST_MAX_DIMS 8

struct sdp_st_tensor {
    char *name;
    enum sdp_st_dtype dtype;
    int ndim;
    int64_t shape[SDP_ST_MAX_DIMS];
    size_t nelems;
    uint64_t offset; /* absolute byte offset of the data in its file */
    uint64_t nbytes;
    int file; /* index of the shard file */
};

typedef struct sdp_st sdp_st_t;

/** Open a safetensors file, or a directory holding model.safetensors or
 * model.safetensors.index.json, or an index file.  Validates every header.
 * @return 0, -ENOENT (nothing found), -EINVAL (corrupt: reason logged with the file name), -ENOMEM,
 * -EIO */
int sdp_st_open(const char *path, sdp_st_t **out);
void sdp_st_close(sdp_st_t *st);

int sdp_st_num_tensors(const sdp_st_t *st);
const struct sdp_st_tensor *sdp_st_tensor_at(const sdp_st_t *st, int i);
/** @return the tensor named name, or NULL. */
const struct sdp_st_tensor *sdp_st_find(const sdp_st_t *st, const char *name);
/** @return a value of "__metadata__" (of the first file that has it), or NULL. */
const char *sdp_st_metadata(const sdp_st_t *st, const char *key);
/** Path of shard file i (for messages). */
const char *sdp_st_file_path(const sdp_st_t *st, int i);

/** Read tensor t converted to fp32 into dst (nelems floats).  F32/BF16/F16 only (-EINVAL
 * otherwise). */
int sdp_st_read_f32(sdp_st_t *st, const struct sdp_st_tensor *t, float *dst, size_t nelems);
/** Read tensor t converted to int32 into dst.  I32/I64 only (I64 values must fit). */
int sdp_st_read_i32(sdp_st_t *st, const struct sdp_st_tensor *t, int32_t *dst, size_t nelems);

/* ---- writing ---- */
struct sdp_st_wtensor {
    const char *name;
    enum sdp_st_dtype dtype; /* dtype on disk */
    int ndim;
    int64_t shape[SDP_ST_MAX_DIMS];
    const float *data_f32;   /* source data, fp32; converted to dtype (F32, BF16 rounded, F16) */
    const int32_t *data_i32; /* or int32 source for I32 */
};

/** Write n tensors to path atomically (path.tmp, fsync, rename, fsync of the directory).
 * metadata: NULL or pairs key[i], value[i] for i < nmeta (written in "__metadata__"; HF expects
 * {"format": "pt"}).  On failure path is untouched and the temporary file removed.
 * @return 0, -EIO, -ENOSPC, -ENOMEM, -EINVAL */
int sdp_st_write(const char *path, const struct sdp_st_wtensor *t, int n,
                 const char *const *meta_keys, const char *const *meta_values, int nmeta);

/** Write a sharded set into dir: model-00001-of-0000K.safetensors ... plus
 * model.safetensors.index.json (or a single model.safetensors when everything fits
 * max_shard_bytes).  Atomic per file. */
int sdp_st_write_sharded(const char *dir, const struct sdp_st_wtensor *t, int n,
                         size_t max_shard_bytes);

const char *sdp_st_dtype_name(enum sdp_st_dtype d);
size_t sdp_st_dtype_size(enum sdp_st_dtype d);

#endif
