/* SPDX-License-Identifier: MIT */
/* PEFT adapters in and out of a LoRA state, and their merge into the base (peft.h). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "formats/peftconfig.h"
#include "formats/safetensors.h"
#include "runtime/peft.h"

#define PEFT_CONFIG  "adapter_config.json"
#define PEFT_WEIGHTS "adapter_model.safetensors"

int sdp_state_save_peft(struct sdp_state *st, const char *dir, const char *base)
{
    struct sdp_st_wtensor *wt;
    static const char *const mk[] = { "format" }, *const mv[] = { "pt" };
    char path[4200];
    int n = 0, rc = sdp_mkdir_p(dir);
    for (int g = 0; !rc && g < st->ngroups; g++)
        if (st->groups[g].lora) {
            n += st->groups[g].lora->ntensors;
            rc = sdp_rt_tensor_acquire(st->groups[g].lora->master, 0);
        }
    if (rc)
        goto out;
    if (!(wt = calloc((size_t)n, sizeof(*wt)))) {
        rc = sdp_err(-ENOMEM, "saving %d adapter tensors", n);
        goto out;
    }
    n = 0;
    for (int g = 0; g < st->ngroups; g++) {
        struct sdp_lora_state *ls = st->groups[g].lora;
        for (int i = 0; ls && i < ls->ntensors; i++, n++) {
            const struct sdp_lora_tensor *t = &ls->tensors[i];
            wt[n].name = t->peft_name;
            wt[n].dtype = SDP_ST_F32;
            wt[n].ndim = 2;
            wt[n].shape[0] = t->rows;
            wt[n].shape[1] = t->cols;
            wt[n].data_f32 = (const float *)sdp_rt_tensor_data(ls->master) + t->offset;
        }
    }
    snprintf(path, sizeof(path), "%s/%s", dir, PEFT_WEIGHTS);
    rc = sdp_st_write(path, wt, n, mk, mv, 1);
    free(wt);
    snprintf(path, sizeof(path), "%s/%s", dir, PEFT_CONFIG);
    if (!rc)
        rc = sdp_peftconfig_write(path, &st->lora, base);
out:
    for (int g = 0; g < st->ngroups; g++)
        if (st->groups[g].lora)
            sdp_rt_tensor_release_acquire(st->groups[g].lora->master);
    return rc;
}

int sdp_peft_read_config(const char *dir, const struct sdp_model_cfg *m, struct sdp_lora_cfg *c)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, PEFT_CONFIG);
    return sdp_peftconfig_load(path, m, c);
}

/* The adapter's configuration c against the run's s on L layers: the field that differs, logged. */
static int same_config(const char *dir, const struct sdp_lora_cfg *c, const struct sdp_lora_cfg *s,
                       int L)
{
    const char *field = c->rank != s->rank         ? "r"
                        : c->alpha != s->alpha     ? "lora_alpha"
                        : c->targets != s->targets ? "target_modules"
                                                   : NULL;
    for (int g = 1; !field && g <= L; g++)
        if (!sdp_lora_layer_on(c, g) != !sdp_lora_layer_on(s, g))
            field = "layers_to_transform";
    if (!field)
        return 0;
    sdp_err(-EINVAL,
            "adapter %s: %s differs from the run's LoRA (r %d, lora_alpha %g here; "
            "rank %d, alpha %g in the run)",
            dir, field, c->rank, c->alpha, s->rank, s->alpha);
    sdp_hint("set the recipe's lora: to the adapter's configuration (%s)", PEFT_CONFIG);
    return -EINVAL;
}

int sdp_peft_check_config(const char *dir, const struct sdp_model_cfg *m,
                          const struct sdp_lora_cfg *lora)
{
    struct sdp_lora_cfg c;
    int rc = sdp_peft_read_config(dir, m, &c);
    return rc ? rc : same_config(dir, &c, lora, m->num_layers);
}

/* Read the tensor t of the file into dst, checked for presence, shape, dtype and finiteness. */
static int read_one(sdp_st_t *sf, const char *dir, const struct sdp_lora_tensor *t, float *dst)
{
    const struct sdp_st_tensor *f = sdp_st_find(sf, t->peft_name);
    size_t n = (size_t)t->rows * t->cols;
    int rc;
    if (!f)
        return sdp_err(-EINVAL, "adapter %s: tensor %s is missing", dir, t->peft_name);
    if (f->ndim != 2 || f->shape[0] != t->rows || f->shape[1] != t->cols)
        return sdp_err(-EINVAL,
                       "adapter %s: tensor %s has shape [%lld, %lld], the base implies "
                       "[%d, %d]",
                       dir, t->peft_name, (long long)f->shape[0],
                       f->ndim > 1 ? (long long)f->shape[1] : 0LL, t->rows, t->cols);
    if (f->dtype != SDP_ST_F32 && f->dtype != SDP_ST_BF16 && f->dtype != SDP_ST_F16)
        return sdp_err(-EINVAL, "adapter %s: tensor %s has dtype %s (F32, BF16 or F16 expected)",
                       dir, t->peft_name, sdp_st_dtype_name(f->dtype));
    if ((rc = sdp_st_read_f32(sf, f, dst, n)))
        return rc;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return sdp_err(-EINVAL, "adapter %s: tensor %s: element %zu is %g", dir, t->peft_name,
                           i, dst[i]);
    return 0;
}

int sdp_state_load_peft(struct sdp_state *st, const char *dir)
{
    struct sdp_lora_cfg c;
    char path[4200];
    sdp_st_t *sf = NULL;
    int rc = sdp_peft_read_config(dir, &st->cfg, &c), used = 0;
    if (rc || (rc = same_config(dir, &c, &st->lora, st->cfg.num_layers)))
        return rc;
    snprintf(path, sizeof(path), "%s/%s", dir, PEFT_WEIGHTS);
    if ((rc = sdp_st_open(path, &sf)))
        return rc;
    for (int g = 0; !rc && g < st->ngroups; g++) {
        struct sdp_lora_state *ls = st->groups[g].lora;
        for (int i = 0; ls && !rc && i < ls->ntensors; i++, used++)
            rc = read_one(sf, dir, &ls->tensors[i],
                          (float *)sdp_rt_tensor_data(ls->master) + ls->tensors[i].offset);
    }
    for (int i = 0; !rc && i < sdp_st_num_tensors(sf) && used < sdp_st_num_tensors(sf); i++) {
        const char *name = sdp_st_tensor_at(sf, i)->name;
        int ours = 0;
        for (int g = 0; !ours && g < st->ngroups; g++)
            for (int k = 0; st->groups[g].lora && k < st->groups[g].lora->ntensors; k++)
                ours |= !strcmp(name, st->groups[g].lora->tensors[k].peft_name);
        if (!ours)
            rc = sdp_err(-EINVAL, "adapter %s: tensor %s is not a LoRA adapter of %s", dir, name,
                         PEFT_CONFIG);
    }
    sdp_st_close(sf);
    st->work_valid = 0;
    return rc;
}

/* W (out, in) += scale * B (out, r) . A (r, in), each product summed in fp64 */
static void merge_one(float *w, const float *a, const float *b, int out, int in, int r, double s)
{
    for (int i = 0; i < out; i++)
        for (int j = 0; j < in; j++) {
            double acc = 0;
            for (int k = 0; k < r; k++)
                acc += (double)b[(size_t)i * r + k] * a[(size_t)k * in + j];
            w[(size_t)i * in + j] = (float)(w[(size_t)i * in + j] + s * acc);
        }
}

int sdp_state_lora_merge(struct sdp_state *st)
{
    double scale = sdp_lora_scale(&st->lora);
    if (st->lora.rank < 1 || st->work_dtype != SDP_F32)
        return sdp_err(-EINVAL, "merge: a LoRA state with an fp32 base is needed");
    for (int g = 0; g < st->ngroups; g++) {
        struct sdp_group_state *gs = &st->groups[g];
        struct sdp_lora_state *ls = gs->lora;
        for (int i = 0; ls && i + 1 < ls->ntensors; i += 2) {
            const struct sdp_lora_tensor *ta = &ls->tensors[i], *tb = &ls->tensors[i + 1];
            const float *m = sdp_rt_tensor_data(ls->master);
            float *w = (float *)sdp_rt_tensor_data(gs->work) + sdp_state_off(st, g, ta->kind);
            merge_one(w, m + ta->offset, m + tb->offset, tb->rows, ta->cols, ta->rows, scale);
        }
    }
    return 0;
}
