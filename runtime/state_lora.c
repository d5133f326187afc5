/* SPDX-License-Identifier: MIT */
/* LoRA's training state (state.h: sdp_state_create_lora): each adapted decoder layer's adapters as
 * one flat vector in chunks, like a trainable group (fp32 master, Adam m and v on the host, an fp32
 * gradient, a working copy), PEFT's initialisation, and the host bytes of a LoRA run. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sdp_log.h"
#include "runtime/state_lora.h"

/* The layer's adapter tensors, in sdp_lora_kinds' order, A then B; returns the elements. */
static size_t describe(struct sdp_lora_state *ls, const struct sdp_state *st, int g)
{
    const struct sdp_group_state *gs = &st->groups[g];
    const unsigned targets = sdp_lora_layer_targets(&st->lora, &st->cfg, g);
    size_t off = 0;
    ls->ntensors = 0;
    for (int i = 0; i < gs->ntensors; i++) {
        const struct sdp_param_desc *d = &gs->tensors[i];
        size_t stem = strlen(d->hf_name) - strlen(".weight");
        if (!sdp_lora_target_name(d->kind) || !(targets & SDP_LORA_BIT(d->kind)))
            continue;
        for (int b = 0; b < 2; b++) {
            struct sdp_lora_tensor *t = &ls->tensors[ls->ntensors++];
            t->kind = d->kind;
            t->is_b = b;
            t->offset = off;
            t->rows = b ? d->rows : st->lora.rank; /* A: (r, in); B: (out, r) */
            t->cols = b ? st->lora.rank : d->cols;
            snprintf(t->peft_name, sizeof(t->peft_name), "base_model.model.%.*s.lora_%c.weight",
                     (int)stem, d->hf_name, b ? 'B' : 'A');
            off += (size_t)t->rows * t->cols;
        }
    }
    return off;
}

int sdp_state_lora_make(struct sdp_state *st, int g)
{
    struct sdp_group_state *gs = &st->groups[g];
    struct sdp_lora_state *ls = calloc(1, sizeof(*ls));
    size_t ce = st->chunk_elems, *parts;
    char name[64];
    int rc = 0;
    if (!ls)
        return sdp_err(-ENOMEM, "group %d: adapters", g);
    gs->lora = ls;
    ls->nelems = describe(ls, st, g);
    ls->nchunks = (int)((ls->nelems + ce - 1) / ce);
    if (!(parts = calloc((size_t)ls->nchunks, sizeof(*parts))))
        return sdp_err(-ENOMEM, "group %d: %d adapter chunks", g, ls->nchunks);
    for (int c = 0; c < ls->nchunks; c++)
        parts[c] = ls->nelems - (size_t)c * ce < ce ? ls->nelems - (size_t)c * ce : ce;
    struct {
        sdp_rt_tensor_t **t;
        const char *what;
        int host_only;
    } list[] = { { &ls->master, "master", 1 },
                 { &ls->m, "adam_m", 1 },
                 { &ls->v, "adam_v", 1 },
                 { &ls->grad, "grad", 0 },
                 { &ls->work, "work", 0 } };
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]) && !rc; i++) {
        enum sdp_dtype dt = list[i].t == &ls->work ? st->work_dtype : SDP_F32;
        snprintf(name, sizeof(name), "g%d.lora.%s", g, list[i].what);
        rc = list[i].host_only ? sdp_rt_tensor_create_host(list[i].t, dt, ls->nelems, name)
                               : sdp_rt_tensor_create(list[i].t, dt, ls->nelems, name);
        if (!rc)
            rc = sdp_rt_tensor_partition(*list[i].t, ls->nchunks, parts);
    }
    free(parts);
    return rc;
}

void sdp_state_lora_free(struct sdp_group_state *gs)
{
    struct sdp_lora_state *ls = gs->lora;
    if (!ls)
        return;
    sdp_rt_tensor_release(ls->master);
    sdp_rt_tensor_release(ls->m);
    sdp_rt_tensor_release(ls->v);
    sdp_rt_tensor_release(ls->grad);
    sdp_rt_tensor_release(ls->work);
    free(ls);
    gs->lora = NULL;
}

void sdp_state_lora_round(void *dst, const float *src, size_t n)
{
    uint16_t *o = dst;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof(u));
        /* finite values (the loads refuse NaN and Inf): adding 0x7fff plus the lowest kept bit
         * rounds to nearest, ties to even, as codelets/cpu/cast_bf16_ref.c does */
        u += 0x7fffu + ((u >> 16) & 1u);
        o[i] = (uint16_t)(u >> 16);
    }
}

/* PEFT's A: nn.Linear's reset_parameters, kaiming_uniform_(a = sqrt(5)) on (r, in): the gain
 * sqrt(2 / (1 + a^2)) = sqrt(1/3) times sqrt(3 / fan_in) bounds it by 1 / sqrt(in). */
static void fill_a(float *a, const struct sdp_lora_tensor *t, unsigned long long seed)
{
    double bound = 1.0 / sqrt((double)t->cols);
    uint64_t key = sdp_state_splitmix64(seed) ^ sdp_state_hash_name(t->peft_name);
    for (size_t i = 0; i < (size_t)t->rows * t->cols; i++) {
        double u = (sdp_state_splitmix64(key + i) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
        a[i] = (float)(bound * (2.0 * u - 1.0));
    }
}

void sdp_state_lora_init(struct sdp_state *st, unsigned long long seed)
{
    for (int g = 0; g < st->ngroups; g++) {
        struct sdp_lora_state *ls = st->groups[g].lora;
        float *master;
        if (!ls)
            continue;
        master = sdp_rt_tensor_data(ls->master);
        memset(master, 0, ls->nelems * sizeof(float)); /* B: zeros */
        memset(sdp_rt_tensor_data(ls->m), 0, ls->nelems * sizeof(float));
        memset(sdp_rt_tensor_data(ls->v), 0, ls->nelems * sizeof(float));
        for (int i = 0; i < ls->ntensors; i++)
            if (!ls->tensors[i].is_b)
                fill_a(master + ls->tensors[i].offset, &ls->tensors[i], seed);
    }
    st->work_valid = 0; /* the adapters' working copies follow their masters (the first cast) */
}

size_t sdp_state_lora_host_bytes(const struct sdp_model_cfg *cfg, const struct sdp_lora_cfg *lora,
                                 enum sdp_dtype work_dtype)
{
    size_t w = sdp_dtype_size(work_dtype);
    return sdp_model_num_params(cfg) * w + sdp_lora_elems(lora, cfg) * (16 + w);
}
