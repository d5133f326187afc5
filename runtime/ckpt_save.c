/* SPDX-License-Identifier: MIT */
/* Saving the training state as a checkpoint (format in formats/ckpt_format.h): the tensors are
 * streamed from the host copies into DIR/step-N.sdpckpt.tmp with their crcs, the header written
 * last, then the file is committed (fsync, rename, directory fsync) and only then are older
 * checkpoints pruned.  Tests: tests/runtime/test_ckpt.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "formats/ckpt_format.h"
#include "runtime/ckpt.h"
#include "runtime/ckpt_internal.h"
#include "runtime/state.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt_save.c writes host fp32 bytes as the little-endian file format"
#endif

#define IO_BLOCK SDP_CKPT_IO_BLOCK

static uint64_t align_up(uint64_t x)
{
    return (x + SDP_CKPT_ALIGN - 1) / SDP_CKPT_ALIGN * SDP_CKPT_ALIGN;
}

static int io_error(const char *path, int err, const char *what)
{
    if (err == ENOSPC || err == EDQUOT) {
        errno = 0; /* the message says why: no errno text after it */
        int rc = sdp_err(-ENOSPC, "checkpoint %s: %s: no space left on the device", path, what);
        sdp_hint("free disk space, lower output.keep_checkpoints in the recipe, or set output.dir "
                 "(--output) to a directory on another file system");
        return rc;
    }
    if (err == EFBIG) {
        int rc = sdp_err(-EFBIG, "checkpoint %s: %s: file size limit reached", path, what);
        sdp_hint("raise the file size limit (ulimit -f) or use a file system without one");
        return rc;
    }
    return sdp_err(err ? -err : -EIO, "checkpoint %s: %s", path, what);
}

static int write_all(FILE *fp, const char *tmp, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        size_t k = n < IO_BLOCK ? n : IO_BLOCK;
        errno = 0;
        if (fwrite(p, 1, k, fp) != k)
            return io_error(tmp, errno, "write failed");
        p += k;
        n -= k;
    }
    return 0;
}

/* Write one tensor of the state (under a read acquire) and its padding; *crc gets its crc32c. */
static int write_tensor(FILE *fp, const char *tmp, sdp_rt_tensor_t *t, uint32_t *crc)
{
    static const unsigned char zeros[SDP_CKPT_ALIGN];
    size_t nbytes = t ? sdp_rt_tensor_nelems(t) * sizeof(float) : 0;
    const char *p;
    int rc;
    *crc = 0;
    if (!t) /* a group without adapters (LoRA) */
        return 0;
    rc = sdp_rt_tensor_acquire(t, 0);
    if (rc)
        return rc;
    p = sdp_rt_tensor_data(t);
    *crc = 0;
    for (size_t done = 0; done < nbytes && !rc;) {
        size_t k = nbytes - done < IO_BLOCK ? nbytes - done : IO_BLOCK;
        *crc = sdp_crc32c(*crc, p + done, k);
        rc = write_all(fp, tmp, p + done, k);
        done += k;
    }
    sdp_rt_tensor_release_acquire(t);
    if (!rc && align_up(nbytes) > nbytes)
        rc = write_all(fp, tmp, zeros, (size_t)(align_up(nbytes) - nbytes));
    return rc;
}

/* Delete all but the newest keep_last checkpoints (the one of step keep_step always stays). */
static void prune(const char *dir, int keep_last, long keep_step)
{
    long *steps = NULL;
    int n = 0, kept = 1;
    char path[4200];
    if (keep_last <= 0 || sdp_ckpt_list_steps(dir, &steps, &n) != 0)
        return;
    for (int i = 0; i < n; i++) {
        if (steps[i] == keep_step)
            continue;
        if (kept < keep_last) {
            kept++;
            continue;
        }
        snprintf(path, sizeof(path), "%s/step-%08ld.sdpckpt", dir, steps[i]);
        if (unlink(path) != 0)
            SDP_WARN("cannot delete old checkpoint %s: %s", path, strerror(errno));
        else
            SDP_DEBUG("deleted old checkpoint %s", path);
    }
    free(steps);
}

/* The header of st and info, with a zeroed tensor table (crcs to come). */
static int fill_header(struct sdp_ckpt_header *h, const struct sdp_state *st,
                       const struct sdp_ckpt_info *info)
{
    memset(h, 0, sizeof(*h));
    h->cfg = st->cfg;
    h->step = info->step;
    h->data_epoch = info->data_epoch;
    h->data_index = info->data_index;
    h->seed = info->seed;
    h->rng_nwords = info->rng_nwords;
    memcpy(h->rng, info->rng, sizeof(h->rng));
    memcpy(h->fingerprint, info->fingerprint, sizeof(h->fingerprint));
    h->last_loss = info->last_loss;
    snprintf(h->work_dtype, sizeof(h->work_dtype), "%s", sdp_dtype_name(st->work_dtype));
    h->chunk_elems = st->chunk_elems;
    h->ngroups = st->ngroups;
    h->lora = st->lora;
    h->ntensors = SDP_CKPT_NKINDS * st->ngroups;
    h->t = calloc((size_t)h->ntensors, sizeof(*h->t));
    if (!h->t)
        return sdp_err(-ENOMEM, "checkpoint of %d tensors", h->ntensors);
    if (sdp_model_num_sparse_layers(&st->cfg) > 0) { /* LoRA too: the routing profile */
        const size_t E = (size_t)st->cfg.num_experts;
        if (!(h->expert_steps = calloc((size_t)st->ngroups * E, sizeof(*h->expert_steps))))
            return sdp_err(-ENOMEM, "checkpoint: expert steps");
        for (int g = 0; g < st->ngroups; g++)
            if (st->groups[g].expert_steps)
                memcpy(h->expert_steps + (size_t)g * E, st->groups[g].expert_steps,
                       E * sizeof(*h->expert_steps));
    }
    for (int i = 0; i < h->ntensors; i++) {
        h->t[i].group = i / SDP_CKPT_NKINDS;
        h->t[i].kind = i % SDP_CKPT_NKINDS;
        h->t[i].nelems = st->lora.rank > 0 ? st->groups[i / SDP_CKPT_NKINDS].lora
                                                 ? st->groups[i / SDP_CKPT_NKINDS].lora->nelems
                                                 : 0
                                           : st->groups[i / SDP_CKPT_NKINDS].nelems;
    }
    return 0;
}

static int check_info(const struct sdp_ckpt_info *info)
{
    if (info->step < 0 || info->rng_nwords < 0 || info->rng_nwords > SDP_CKPT_RNG_WORDS ||
        !memchr(info->fingerprint, '\0', sizeof(info->fingerprint)))
        return sdp_err(-EINVAL, "checkpoint info: step %d, %d rng words (0..%d), fingerprint %s",
                       info->step, info->rng_nwords, SDP_CKPT_RNG_WORDS,
                       memchr(info->fingerprint, '\0', sizeof(info->fingerprint)) ? "ok"
                                                                                  : "unterminated");
    return 0;
}

/* Write the file through fp: a zero header, the tensors with their crcs, then the real header
 * (whose JSON, with the crcs, keeps the length of json).  Leaves fp open. */
static int write_body(FILE *fp, const char *tmp, const char *path, struct sdp_state *st,
                      struct sdp_ckpt_header *h, const char *json)
{
    unsigned char *head = calloc(1, (size_t)h->data_off);
    char *final = NULL;
    int rc;
    if (!head)
        return sdp_err(-ENOMEM, "checkpoint %s: header of %" PRIu64 " bytes", path, h->data_off);
    rc = write_all(fp, tmp, head, (size_t)h->data_off);
    for (int i = 0; i < h->ntensors && !rc; i++)
        rc = write_tensor(fp, tmp, sdp_ckpt_state_tensor(st, h->t[i].group, h->t[i].kind),
                          &h->t[i].crc);
    if (!rc && !(final = sdp_ckpt_header_json(h)))
        rc = sdp_err(-ENOMEM, "checkpoint %s: JSON header", path);
    if (rc)
        goto out;
    SDP_ASSERT(strlen(final) == strlen(json), "JSON header changed length (%zu, then %zu bytes)",
               strlen(json), strlen(final));
    sdp_ckpt_header_pack(head, h, final);
    if (fflush(fp) != 0)
        rc = io_error(tmp, errno, "flush failed");
    else if (fseeko(fp, 0, SEEK_SET) != 0)
        rc = io_error(tmp, errno, "seek failed");
    else
        rc = write_all(fp, tmp, head, (size_t)h->data_off);
out:
    free(final);
    free(head);
    return rc;
}

int sdp_ckpt_save(const char *dir, struct sdp_state *st, const struct sdp_ckpt_info *info,
                  int keep_last)
{
    struct sdp_ckpt_header h = { 0 };
    char path[4200], tmp[4210], *json = NULL;
    const char *what = NULL;
    FILE *fp = NULL;
    int fd, rc = check_info(info);

    if (!rc && strlen(dir) > 4000)
        rc = sdp_err(-ENAMETOOLONG, "checkpoint directory name of %zu bytes", strlen(dir));
    if (!rc)
        rc = fill_header(&h, st, info);
    if (!rc)
        rc = sdp_mkdir_p(dir);
    if (!rc)
        rc = sdp_ckpt_header_layout(&h, &json);
    if (rc)
        goto out;
    snprintf(path, sizeof(path), "%s/step-%08d.sdpckpt", dir, info->step);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = io_error(tmp, errno, "cannot create");
        goto out;
    }
    if (!(fp = fdopen(fd, "wb"))) {
        rc = io_error(tmp, errno, "fdopen failed");
        close(fd);
        unlink(tmp);
        goto out;
    }
    rc = write_body(fp, tmp, path, st, &h, json);
    if (rc) {
        fclose(fp);
        if (unlink(tmp) != 0)
            SDP_WARN("cannot remove %s: %s", tmp, strerror(errno));
        goto out;
    }
    rc = sdp_file_commit(fp, tmp, path, &what); /* closes fp; removes tmp on failure */
    if (rc) {
        rc = io_error(tmp, -rc, what);
        goto out;
    }
    rc = sdp_fsync_dir(dir);
    if (rc) { /* the rename may not be durable yet: keep the older checkpoints */
        rc = sdp_err(rc, "checkpoint directory %s: fsync failed", dir);
        goto out;
    }
    SDP_INFO("checkpoint %s: step %d, %.1f MiB", path, info->step, h.file_nbytes / 1048576.0);
    prune(dir, keep_last, info->step);
out:
    free(json);
    sdp_ckpt_header_free(&h);
    return rc;
}
