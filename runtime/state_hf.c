/* SPDX-License-Identifier: MIT */
/* The training state's Hugging Face load and save (see state.h): every tensor of the model's
 * layout checked for presence, shape and finite values and read into the masters, or written back
 * with config.json.  A sparse layer's experts are stacked tensors in the layout and named per
 * expert in the files (sdp_model_expert_slices); the fused names of transformers' modules are
 * read too. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "formats/hfconfig.h"
#include "formats/safetensors.h"
#include "runtime/state.h"
#include "runtime/state_lora.h"

/* The tensor of the file that must hold d, checked for presence and shape; NULL (logged) if
 * unusable. */
static const struct sdp_st_tensor *find_checked(sdp_st_t *sf, const char *path,
                                                const struct sdp_model_cfg *cfg,
                                                const struct sdp_param_desc *d)
{
    const struct sdp_st_tensor *t = sdp_st_find(sf, d->hf_name);
    int one_d = d->rows == 1 && d->kind != SDP_PT_EMBED && d->kind != SDP_PT_LM_HEAD;
    if (!t) {
        sdp_err(-EINVAL, "%s: tensor %s is missing", path, d->hf_name);
        sdp_hint("the weights do not match config.json (architecture %s%s, %d layers, %s "
                 "embeddings)",
                 sdp_model_arch_name(cfg->arch), cfg->moe ? "_moe" : "", cfg->num_layers,
                 cfg->tie_word_embeddings ? "tied" : "untied");
        return NULL;
    }
    if (t->ndim == 3 && (d->kind == SDP_PT_EXP_GU || d->kind == SDP_PT_EXP_DOWN) &&
        t->shape[0] == cfg->num_experts && t->shape[0] * t->shape[1] == d->rows &&
        t->shape[2] == d->cols) /* a stacked expert tensor, (E, rows / E, cols) */
        one_d = -1;
    else if (one_d ? (t->ndim != 1 || t->shape[0] != d->cols)
                   : (t->ndim != 2 || t->shape[0] != d->rows || t->shape[1] != d->cols)) {
        sdp_err(-EINVAL, "%s: tensor %s has shape [%lld%s%lld], config.json implies [%d, %d]",
                sdp_st_file_path(sf, t->file), d->hf_name, (long long)t->shape[0],
                t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                one_d ? 1 : d->rows, d->cols);
        return NULL;
    }
    if (t->dtype != SDP_ST_F32 && t->dtype != SDP_ST_BF16 && t->dtype != SDP_ST_F16) {
        sdp_err(-EINVAL, "%s: tensor %s has dtype %s (F32, BF16 or F16 expected)",
                sdp_st_file_path(sf, t->file), d->hf_name, sdp_st_dtype_name(t->dtype));
        return NULL;
    }
    return t;
}

/* Index of the first NaN or Inf of x[0..n), or n.  Blocks are tested with an OR that vectorizes;
 * only a bad block is searched element by element, so the check costs a fraction of the read. */
static size_t first_nonfinite(const float *x, size_t n)
{
    for (size_t b = 0; b < n; b += 4096) {
        size_t e = n - b < 4096 ? n : b + 4096;
        int bad = 0;
        for (size_t i = b; i < e; i++)
            bad |= !isfinite(x[i]);
        if (bad)
            for (size_t i = b; i < e; i++)
                if (!isfinite(x[i]))
                    return i;
    }
    return n;
}

/* Read tensor t of d into dst, refusing NaN and Inf: found at step 1, they would read as the
 * divergence of whatever layer they reach first.  @return 0 or a negative errno (logged). */
static int read_finite(sdp_st_t *sf, const struct sdp_st_tensor *t, const struct sdp_param_desc *d,
                       float *dst)
{
    size_t n = (size_t)d->rows * d->cols, bad;
    int rc = sdp_st_read_f32(sf, t, dst, n);
    if (rc || (bad = first_nonfinite(dst, n)) == n)
        return rc;
    rc = sdp_err(-EINVAL, "%s: tensor %s: element %zu (row %zu, column %zu) is %g",
                 sdp_st_file_path(sf, t->file), d->hf_name, bad, bad / (size_t)d->cols,
                 bad % (size_t)d->cols, dst[bad]);
    sdp_hint("the weights hold NaN or Inf, so training cannot start from them: download or export "
             "the model again, or start from a checkpoint before it diverged");
    return rc;
}

/* Read tensor t of d into group g's master, or into a frozen group's working copy (through an
 * fp32 buffer rounded to bf16 as the cast kernel rounds: the values are finite). */
static int load_one(struct sdp_state *st, int g, sdp_st_t *sf, const struct sdp_st_tensor *t,
                    const struct sdp_param_desc *d)
{
    struct sdp_group_state *gs = &st->groups[g];
    size_t n = (size_t)d->rows * d->cols;
    float *tmp;
    int rc;
    if (!gs->frozen)
        return read_finite(sf, t, d, (float *)sdp_rt_tensor_data(gs->master) + d->offset);
    if (st->work_dtype == SDP_F32)
        return read_finite(sf, t, d, (float *)sdp_rt_tensor_data(gs->work) + d->offset);
    if (!(tmp = malloc(n * sizeof(float))))
        return sdp_err(-ENOMEM, "reading tensor %s (%zu elements)", d->hf_name, n);
    rc = read_finite(sf, t, d, tmp);
    if (!rc)
        sdp_state_lora_round((uint16_t *)sdp_rt_tensor_data(gs->work) + d->offset, tmp, n);
    free(tmp);
    return rc;
}

/* Check tensor d of group g (and, with st, read it); *used counts the file's tensors it took.  A
 * stacked expert tensor is read whole under its fused name when the file has that, else expert by
 * expert under the checkpoints' names. */
static int visit_one(const struct sdp_model_cfg *cfg, const char *path, struct sdp_state *st,
                     sdp_st_t *sf, int g, const struct sdp_param_desc *d, int *used)
{
    struct sdp_param_desc part[2];
    int rc = 0;
    if (sdp_model_expert_slices(cfg, d, 0, part) > 0 && !sdp_st_find(sf, d->hf_name)) {
        for (int e = 0; e < cfg->num_experts && !rc; e++) {
            int np = sdp_model_expert_slices(cfg, d, e, part);
            for (int i = 0; i < np && !rc; i++)
                rc = visit_one(cfg, path, st, sf, g, &part[i], used);
        }
        return rc;
    }
    const struct sdp_st_tensor *t = find_checked(sf, path, cfg, d);
    if (!t)
        return -EINVAL;
    (*used)++;
    return st ? load_one(st, g, sf, t, d) : 0;
}

/* Check every tensor of cfg (and, with st, read it into the masters). */
static int visit_hf(const struct sdp_model_cfg *cfg, const char *path, struct sdp_state *st)
{
    sdp_st_t *sf = NULL;
    struct sdp_param_desc descs[SDP_MAX_GROUP_TENSORS];
    int rc = sdp_st_open(path, &sf), used = 0, n;
    if (rc)
        return rc;
    for (int g = 0; g < sdp_model_num_groups(cfg) && !rc; g++) {
        int nt = sdp_model_group_tensors(cfg, g, descs);
        for (int i = 0; i < nt && !rc; i++)
            rc = visit_one(cfg, path, st, sf, g, &descs[i], &used);
    }
    n = sdp_st_num_tensors(sf);
    if (!rc && cfg->tie_word_embeddings && sdp_st_find(sf, "lm_head.weight"))
        used++; /* tied checkpoints sometimes store the shared matrix twice */
    if (!rc && st && n > used)
        SDP_WARN("%s: %d tensors in the file are not used by the model", path, n - used);
    sdp_st_close(sf);
    return rc;
}

int sdp_state_check_hf(const struct sdp_model_cfg *cfg, const char *path)
{
    return visit_hf(cfg, path, NULL);
}

int sdp_state_load_hf(struct sdp_state *st, const char *path)
{
    int rc = visit_hf(&st->cfg, path, st);
    st->work_valid = 0;
    return rc;
}

/* The fp32 copy of group gs's weights: its master, or a frozen fp32 base's working copy (a LoRA
 * state merged for export, sdp_state_lora_merge). */
static sdp_rt_tensor_t *base_of(struct sdp_group_state *gs)
{
    return gs->frozen ? gs->work : gs->master;
}

/* The tensors of group gs as the files name them into wt (from wt[n]; NULL: only counted), the
 * per-expert ones' names into names (one sdp_param_desc hf_name each, from names[*nn]), their data
 * from p.  @return the new n */
static int save_list(const struct sdp_model_cfg *cfg, const struct sdp_group_state *gs,
                     const float *p, const char *dtype, struct sdp_st_wtensor *wt, int n,
                     struct sdp_param_desc *names, int *nn)
{
    enum sdp_st_dtype sdt = !strcmp(dtype, "bfloat16") ? SDP_ST_BF16 : SDP_ST_F32;
    struct sdp_param_desc part[2];
    for (int i = 0; i < gs->ntensors; i++) {
        const struct sdp_param_desc *d = &gs->tensors[i];
        int np = sdp_model_expert_slices(cfg, d, 0, part), ne = np ? cfg->num_experts : 1;
        for (int e = 0; e < ne; e++) {
            for (int k = 0; k < (np ? np : 1); k++, n++) {
                if (!wt)
                    continue;
                if (np) { /* the expert's slice, under a name kept in names */
                    sdp_model_expert_slices(cfg, d, e, part);
                    names[*nn] = part[k];
                    d = &names[(*nn)++];
                }
                int one_d = d->rows == 1 && d->kind != SDP_PT_EMBED && d->kind != SDP_PT_LM_HEAD;
                wt[n].name = d->hf_name;
                wt[n].dtype = sdt;
                wt[n].ndim = one_d ? 1 : 2;
                wt[n].shape[0] = one_d ? d->cols : d->rows;
                wt[n].shape[1] = d->cols;
                wt[n].data_f32 = p + d->offset;
                d = &gs->tensors[i];
            }
        }
    }
    return n;
}

int sdp_state_save_hf(struct sdp_state *st, const char *dir, const char *dtype)
{
    struct sdp_st_wtensor *wt;
    struct sdp_param_desc *names = NULL;
    int n = 0, rc, nn = 0;
    char path[4200];
    if (st->lora.rank > 0 && st->work_dtype != SDP_F32)
        return sdp_err(-EINVAL, "state: the base of a LoRA run is frozen and has no master to "
                                "save; its adapters are what it trains");
    rc = sdp_mkdir_p(dir);
    if (rc)
        return rc;
    for (int g = 0; g < st->ngroups; g++) {
        /* the masters are written only by CPU tasks: make the host copy current */
        rc = sdp_rt_tensor_acquire(base_of(&st->groups[g]), 0);
        if (rc)
            return rc;
        n = save_list(&st->cfg, &st->groups[g], NULL, dtype, NULL, n, NULL, NULL);
    }
    wt = calloc((size_t)n, sizeof(*wt));
    names = calloc((size_t)n, sizeof(*names));
    if (!wt || !names) {
        rc = sdp_err(-ENOMEM, "saving %d tensors", n);
        goto out;
    }
    n = 0;
    for (int g = 0; g < st->ngroups; g++)
        n = save_list(&st->cfg, &st->groups[g], sdp_rt_tensor_data(base_of(&st->groups[g])), dtype,
                      wt, n, names, &nn);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    rc = sdp_hfconfig_write(path, &st->cfg, dtype);
    if (!rc)
        rc = sdp_st_write_sharded(dir, wt, n, (size_t)5 << 30);
out:
    free(wt);
    free(names);
    for (int g = 0; g < st->ngroups; g++)
        sdp_rt_tensor_release_acquire(base_of(&st->groups[g]));
    return rc;
}
