/* SPDX-License-Identifier: MIT */
/* Restoring the training state from a checkpoint (format in formats/ckpt_format.h, read and
 * validated by formats/ckpt_read.c) and the search for the newest valid one of a directory.  A
 * load validates everything before it writes into the state.  Saving: runtime/ckpt_save.c.
 * Tests: tests/runtime/test_ckpt.c. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sdp_log.h"
#include "formats/ckpt_format.h"
#include "runtime/ckpt.h"
#include "runtime/ckpt_internal.h"
#include "runtime/state.h"

#define IO_BLOCK SDP_CKPT_IO_BLOCK

sdp_rt_tensor_t *sdp_ckpt_state_tensor(struct sdp_state *st, int g, int kind)
{
    struct sdp_group_state *gs = &st->groups[g];
    if (gs->frozen) /* LoRA: the group's adapters, or none */
        return !gs->lora   ? NULL
               : kind == 0 ? gs->lora->master
               : kind == 1 ? gs->lora->m
                           : gs->lora->v;
    return kind == 0 ? gs->master : kind == 1 ? gs->m : gs->v;
}

/* The elements of a state tensor (0 for none). */
static size_t state_nelems(sdp_rt_tensor_t *t)
{
    return t ? sdp_rt_tensor_nelems(t) : 0;
}

/* Step of a file name "step-<digits>.sdpckpt", or -1. */
static long name_step(const char *name)
{
    const char *p = name + 5, *end;
    long step = 0;
    if (strncmp(name, "step-", 5) != 0)
        return -1;
    for (end = p; *end >= '0' && *end <= '9'; end++) {
        if (step > 100000000000L)
            return -1;
        step = step * 10 + (*end - '0');
    }
    if (end == p || strcmp(end, ".sdpckpt") != 0)
        return -1;
    return step;
}

static int cmp_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int sdp_ckpt_list_steps(const char *dir, long **steps_out, int *n_out)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    long *steps = NULL;
    int n = 0, cap = 0;
    if (!d)
        return -ENOENT;
    while ((e = readdir(d))) {
        long s = name_step(e->d_name);
        if (s < 0)
            continue;
        if (n == cap) {
            long *p = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(*steps));
            if (!p) {
                free(steps);
                closedir(d);
                return sdp_err(-ENOMEM, "listing %s", dir);
            }
            steps = p;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (n)
        qsort(steps, (size_t)n, sizeof(*steps), cmp_desc);
    *steps_out = steps;
    *n_out = n;
    return 0;
}

/* The scalars of h as the caller's info. */
static void header_info(const struct sdp_ckpt_header *h, struct sdp_ckpt_info *info)
{
    memset(info, 0, sizeof(*info));
    info->step = h->step;
    info->data_epoch = h->data_epoch;
    info->data_index = h->data_index;
    info->seed = h->seed;
    info->rng_nwords = h->rng_nwords;
    memcpy(info->rng, h->rng, sizeof(info->rng));
    memcpy(info->fingerprint, h->fingerprint, sizeof(info->fingerprint));
    info->last_loss = h->last_loss;
    info->work_dtype = strcmp(h->work_dtype, sdp_dtype_name(SDP_BF16)) ? SDP_F32 : SDP_BF16;
    info->chunk_elems = h->chunk_elems;
}

int sdp_ckpt_read_info(const char *path, struct sdp_model_cfg *cfg_out,
                       struct sdp_ckpt_info *info_out)
{
    struct sdp_ckpt_header h;
    int rc = sdp_ckpt_read_header(path, &h);
    if (rc)
        return rc;
    sdp_ckpt_header_free(&h);
    if (cfg_out)
        *cfg_out = h.cfg;
    if (info_out)
        header_info(&h, info_out);
    return 0;
}

int sdp_ckpt_latest(const char *dir, char *path_out, size_t len)
{
    long *steps = NULL;
    int n = 0, rc = sdp_ckpt_list_steps(dir, &steps, &n);
    char path[4200];
    if (rc)
        return rc;
    rc = -ENOENT;
    for (int i = 0; i < n && rc == -ENOENT; i++) {
        struct sdp_ckpt_header h;
        int fd;
        snprintf(path, sizeof(path), "%s/step-%08ld.sdpckpt", dir, steps[i]);
        if (sdp_ckpt_file_open(path, &fd, &h) == 0) {
            int bad_data = sdp_ckpt_file_verify(path, fd, &h);
            close(fd);
            sdp_ckpt_header_free(&h);
            if (!bad_data) {
                if (strlen(path) >= len) {
                    rc = sdp_err(-ENAMETOOLONG, "checkpoint path %s", path);
                } else {
                    strcpy(path_out, path);
                    rc = 0;
                }
                break;
            }
        }
        SDP_WARN("skipping checkpoint %s: it failed validation (above)%s", path,
                 i + 1 < n ? "; trying an older one" : "");
    }
    free(steps);
    return rc;
}

int sdp_ckpt_count(const char *dir)
{
    long *steps = NULL;
    int n = 0, rc = sdp_ckpt_list_steps(dir, &steps, &n);
    free(steps);
    return rc == -ENOENT ? 0 : rc ? rc : n;
}

int sdp_ckpt_load(const char *path, struct sdp_state *st, struct sdp_ckpt_info *info_out)
{
    struct sdp_ckpt_header h;
    int fd, rc = sdp_ckpt_file_open(path, &fd, &h);
    if (rc)
        return rc;
    rc = sdp_ckpt_cfg_compare(path, &h.cfg, &st->cfg);
    if (!rc && (h.lora.rank != st->lora.rank || h.lora.alpha != st->lora.alpha ||
                h.lora.targets != st->lora.targets || h.lora.first != st->lora.first ||
                h.lora.last != st->lora.last))
        rc = sdp_err(-EINVAL, "checkpoint %s: %s", path,
                     !h.lora.rank     ? "a whole model's state, not the adapters of a LoRA run"
                     : !st->lora.rank ? "the adapters of a LoRA run, not a whole model's state "
                                        "(its RUN/final is the adapter)"
                                      : "the adapters of another LoRA configuration");
    if (!rc && h.ngroups != st->ngroups)
        rc = sdp_err(-EINVAL, "checkpoint %s: %d groups, the state has %d", path, h.ngroups,
                     st->ngroups);
    for (int i = 0; i < h.ntensors && !rc; i++)
        if (h.t[i].nelems != state_nelems(sdp_ckpt_state_tensor(st, h.t[i].group, h.t[i].kind)))
            rc = sdp_err(-EINVAL, "checkpoint %s: group %d has %" PRIu64 " elements, the state %zu",
                         path, h.t[i].group, h.t[i].nelems, st->groups[h.t[i].group].nelems);
    /* pass 1: every crc, before st is touched */
    if (!rc)
        rc = sdp_ckpt_file_verify(path, fd, &h);
    /* pass 2: the same bytes of the same open file, straight into the host copies */
    for (int i = 0; i < h.ntensors && !rc; i++) {
        sdp_rt_tensor_t *t = sdp_ckpt_state_tensor(st, h.t[i].group, h.t[i].kind);
        if (!t)
            continue; /* a group without adapters (LoRA): 0 elements */
        rc = sdp_rt_tensor_acquire(t, 1);
        if (rc)
            break;
        rc = sdp_ckpt_tensor_check(path, fd, &h.t[i], NULL, IO_BLOCK, sdp_rt_tensor_data(t));
        sdp_rt_tensor_release_acquire(t);
        if (rc) {
            rc = sdp_err(-EIO,
                         "checkpoint %s changed or failed while loading: the state is "
                         "partly loaded",
                         path);
            sdp_hint("restart from another checkpoint; do not modify checkpoints in place");
        }
    }
    for (int g = 0; !rc && h.expert_steps && g < st->ngroups; g++)
        if (st->groups[g].expert_steps)
            memcpy(st->groups[g].expert_steps,
                   h.expert_steps + (size_t)g * (size_t)st->cfg.num_experts,
                   (size_t)st->cfg.num_experts * sizeof(*h.expert_steps));
    close(fd);
    sdp_ckpt_header_free(&h);
    if (rc)
        return rc;
    st->work_valid = 0;
    if (info_out)
        header_info(&h, info_out);
    SDP_INFO("loaded checkpoint %s (step %d)", path, h.step);
    return 0;
}
