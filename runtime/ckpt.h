/* SPDX-License-Identifier: MIT */
/* Crash-consistent checkpoints of the whole training state: every group's fp32 master weights and
 * Adam moments, plus the scalars needed to resume bit for bit (step, data position, seed, RNG
 * state, a recipe fingerprint).  The file format, its codec and reader: formats/ckpt_format.h.
 * StarPU-free header.  Tests: tests/runtime/test_ckpt.c.
 */
#ifndef SDP_CKPT_H
#define SDP_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "formats/ckpt_format.h"
#include "models/sdp_models.h"
#include "runtime/tensor.h"

struct sdp_state;

/* Everything of a checkpoint besides the tensors.  The caller fills the first group for
 * sdp_ckpt_save; sdp_ckpt_read_info and sdp_ckpt_load fill all of it. */
struct sdp_ckpt_info {
    int step;            /* optimizer steps done */
    uint64_t data_epoch; /* data position of the next batch (struct sdp_data) */
    uint64_t data_index;
    uint64_t seed;  /* the run's seed */
    int rng_nwords; /* 0..SDP_CKPT_RNG_WORDS words of RNG state in rng */
    uint64_t rng[SDP_CKPT_RNG_WORDS];
    char fingerprint[128]; /* caller's fingerprint of the recipe fields that shape the run */
    double last_loss;      /* loss of the step that produced this state (NAN when unknown) */
    /* filled from the state by save, from the file by read_info / load */
    enum sdp_dtype work_dtype; /* working copy dtype of the run that wrote it */
    size_t chunk_elems;        /* fp32 elements per chunk of that run */
};

/** Write the state as DIR/step-%08d.sdpckpt (info->step): DIR created if missing, data written
 * to a .tmp file, fsynced, renamed, the directory fsynced.  Only then are the older checkpoints
 * beyond the newest keep_last (by step, the new one always kept) deleted; keep_last <= 0 keeps
 * all.  Reads the host copies of master, m and v under a read acquire (waits for pending tasks
 * that write them: call it between the submission of two steps).  On failure the temporary is
 * removed and the older checkpoints are untouched.
 * @param[in] dir  checkpoint directory
 * @param[in] st  the state
 * @param[in] info  step, data position, seed, rng, fingerprint (work_dtype, chunk_elems ignored)
 * @param[in] keep_last  checkpoints to keep
 * @return 0, -ENOSPC (disk full or quota), -EFBIG (file size limit), -EIO, or the errno of the
 * failing call (-EACCES, -EISDIR, ...), -ENOMEM, -EINVAL (bad info); all logged */
int sdp_ckpt_save(const char *dir, struct sdp_state *st, const struct sdp_ckpt_info *info,
                  int keep_last);

/** The newest checkpoint of dir (by step) whose header and every tensor crc check out; newer
 * corrupt ones are skipped with a warning naming them.  Reads every byte of the files it checks.
 * @param[out] path_out  its path
 * @return 0, -ENOENT (no valid checkpoint, or no such directory: not logged, a fresh start
 * may expect it), -ENAMETOOLONG, -ENOMEM */
int sdp_ckpt_latest(const char *dir, char *path_out, size_t len);

/** The number of checkpoint files of dir (step-*.sdpckpt, valid or not; temporaries not counted):
 * with sdp_ckpt_latest, it tells "no checkpoint" from "every checkpoint corrupt".
 * @return the count (0 when dir is missing), or -ENOMEM (logged) */
int sdp_ckpt_count(const char *dir);

/** Validate the header of a checkpoint (magic, version, header crc, JSON, tensor table against the
 * model and the file size) without reading the tensor data.
 * @param[out] cfg_out  model configuration (may be NULL)
 * @param[out] info_out  the scalars (may be NULL)
 * @return 0, -ENOENT, -EINVAL (corrupt or unsupported: reason logged with the path), -EIO */
int sdp_ckpt_read_info(const char *path, struct sdp_model_cfg *cfg_out,
                       struct sdp_ckpt_info *info_out);

/** Load a checkpoint into st, whose model configuration must equal the file's (the error names the
 * first differing field).  Validates the header, then the crc of every tensor in a first pass
 * over the file, before touching st; a second pass copies the data (through a bounce buffer,
 * checking each crc again).  Any corruption therefore leaves st unchanged; only a read error or
 * a file modified in place between the two passes (never done by sdp_ckpt_save, which renames)
 * can leave it partly loaded, and then -EIO says so.  Working copies are marked stale.  A
 * different work_dtype or chunk size is allowed (the tensors are flat); info_out reports them.
 * @param[out] info_out  the scalars (may be NULL)
 * @return 0, -ENOENT, -EINVAL (corrupt, or written for another model), -EIO, -ENOMEM */
int sdp_ckpt_load(const char *path, struct sdp_state *st, struct sdp_ckpt_info *info_out);

#endif
