/* SPDX-License-Identifier: MIT */
/* Host-resident training state (see state.h): allocation in chunks, initialisation (the Hugging
 * Face load and save: runtime/state_hf.c).  Touches host memory directly only before tasks run or
 * after sdp_rt acquire/wait. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/splitmix.h"
#include "base/sdp_log.h"
#include "runtime/state.h"
#include "runtime/state_lora.h"

static int make_group(struct sdp_group_state *gs, const struct sdp_model_cfg *cfg, int g,
                      enum sdp_dtype work_dtype, size_t chunk_elems, int grad_on_device, int staged,
                      int frozen)
{
    char name[64];
    size_t *parts;
    int rc = 0, c;
    gs->ntensors = sdp_model_group_tensors(cfg, g, gs->tensors);
    gs->nelems = sdp_model_group_nelems(cfg, g);
    if (sdp_model_layer_sparse(cfg, g - 1) && g <= cfg->num_layers &&
        !(gs->expert_steps = calloc((size_t)cfg->num_experts, sizeof(*gs->expert_steps))))
        return sdp_err(-ENOMEM, "group %d: %d experts", g, cfg->num_experts);
    gs->nchunks = (int)((gs->nelems + chunk_elems - 1) / chunk_elems);
    parts = calloc((size_t)gs->nchunks, sizeof(*parts));
    if (!parts)
        return sdp_err(-ENOMEM, "group %d: %d chunks", g, gs->nchunks);
    for (c = 0; c < gs->nchunks; c++) {
        size_t start = (size_t)c * chunk_elems;
        parts[c] = gs->nelems - start < chunk_elems ? gs->nelems - start : chunk_elems;
    }
    struct {
        sdp_rt_tensor_t **t;
        const char *what;
        enum sdp_dtype dt;
        int host_only, device;
    } list[] = { { &gs->master, "master", SDP_F32, 1, 0 },
                 { &gs->m, "adam_m", SDP_F32, 1, 0 },
                 { &gs->v, "adam_v", SDP_F32, 1, 0 },
                 { &gs->grad, "grad", SDP_F32, 0, grad_on_device },
                 { &gs->work, "work", work_dtype, 0, 0 } };
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]) && !rc; i++) {
        snprintf(name, sizeof(name), "g%d.%s", g, list[i].what);
        if (frozen && list[i].t != &gs->work) /* LoRA's base: the working copy alone */
            continue;
        if (staged && list[i].t == &gs->work) { /* no host home, never split */
            rc = sdp_rt_tensor_temp(list[i].t, list[i].dt, gs->nelems, name);
            continue;
        }
        /* masters and moments stay on the host; gradients and working copies cross PCIe, except
         * fp32 gradients packed on the GPU (bf16 return), which get address space, no pages */
        rc = list[i].host_only ? sdp_rt_tensor_create_host(list[i].t, list[i].dt, gs->nelems, name)
             : list[i].device ? sdp_rt_tensor_create_device(list[i].t, list[i].dt, gs->nelems, name)
                              : sdp_rt_tensor_create(list[i].t, list[i].dt, gs->nelems, name);
        if (!rc)
            rc = sdp_rt_tensor_partition(*list[i].t, gs->nchunks, parts);
    }
    free(parts);
    return rc;
}

/* Whether group g's fp32 gradient gets pinned host pages although it is packed on the GPU (bf16
 * return): the tied embedding's (group 0), whose accumulator lives on the GPU from the LM head's
 * backward, the first of the step, to the embedding's, the last.  StarPU may write it back to
 * its host home in between, and a write-back into pages that do not exist yet faults them in and
 * goes through StarPU's bounce buffers, which stalled the GPU once a step
 * (bench/results/2026-12-01-h200-tied-grad.md). */
static int tied_grad_pinned(const struct sdp_model_cfg *cfg, int g)
{
    return g == 0 && cfg->tie_word_embeddings;
}

size_t sdp_state_host_bytes(const struct sdp_model_cfg *cfg, enum sdp_dtype work_dtype,
                            enum sdp_dtype grad_dtype, unsigned flags)
{
    size_t per = 12 + sdp_dtype_size(work_dtype) + 4; /* master, m, v, working copy, fp32 grad */
    size_t extra = 0;
    if (grad_dtype == SDP_BF16 && (flags & SDP_STATE_ON_GPU)) {
        per -= 4;
        if (tied_grad_pinned(cfg, 0))
            extra = sdp_model_group_nelems(cfg, 0) * 4;
    }
    if (flags & SDP_STATE_WORK_STAGED)
        per -= sdp_dtype_size(work_dtype);
    else if (flags & SDP_STATE_EMBED_STAGED)
        return sdp_model_num_params(cfg) * per + extra -
               sdp_model_group_nelems(cfg, 0) * sdp_dtype_size(work_dtype);
    return sdp_model_num_params(cfg) * per + extra;
}

/* The bf16 chunks AdamW reads (grad_dtype bf16): StarPU handles without a host home. */
static int make_grad_ret(struct sdp_group_state *gs, int g)
{
    char name[64];
    gs->grad_ret = calloc((size_t)gs->nchunks, sizeof(*gs->grad_ret));
    if (!gs->grad_ret)
        return sdp_err(-ENOMEM, "group %d: %d gradient chunks", g, gs->nchunks);
    for (int c = 0; c < gs->nchunks; c++) {
        snprintf(name, sizeof(name), "g%d.grad_bf16.%d", g, c);
        int rc = sdp_rt_tensor_temp(&gs->grad_ret[c], SDP_BF16,
                                    sdp_rt_tensor_nelems(sdp_rt_tensor_part(gs->grad, c)), name);
        if (rc)
            return rc;
    }
    return 0;
}

/* The chunks AdamW writes when the working copy is off the host (staged): no host home. */
static int make_work_stage(struct sdp_group_state *gs, int g, enum sdp_dtype work_dtype)
{
    char name[64];
    gs->work_stage = calloc((size_t)gs->nchunks, sizeof(*gs->work_stage));
    if (!gs->work_stage)
        return sdp_err(-ENOMEM, "group %d: %d working-copy stages", g, gs->nchunks);
    for (int c = 0; c < gs->nchunks; c++) {
        snprintf(name, sizeof(name), "g%d.work_stage.%d", g, c);
        int rc = sdp_rt_tensor_temp(&gs->work_stage[c], work_dtype,
                                    sdp_rt_tensor_nelems(sdp_rt_tensor_part(gs->master, c)), name);
        if (rc)
            return rc;
    }
    return 0;
}

int sdp_state_create(struct sdp_state *st, const struct sdp_model_cfg *cfg,
                     enum sdp_dtype work_dtype, size_t chunk_bytes)
{
    return sdp_state_create_ex(st, cfg, work_dtype, chunk_bytes, SDP_F32, 0);
}

/* sdp_state_create_ex, and with lora (rank > 0) sdp_state_create_lora's frozen base and adapters */
static int create(struct sdp_state *st, const struct sdp_model_cfg *cfg, enum sdp_dtype work_dtype,
                  size_t chunk_bytes, enum sdp_dtype grad_dtype, unsigned flags,
                  const struct sdp_lora_cfg *lora)
{
    int on_gpu = (flags & SDP_STATE_ON_GPU) != 0, frozen = lora && lora->rank > 0;
    int g, rc;
    memset(st, 0, sizeof(*st));
    st->cfg = *cfg;
    if (frozen) {
        st->lora = *lora;
        grad_dtype = SDP_F32; /* the base returns no gradient; the adapters' are fp32 */
        if (flags & (SDP_STATE_WORK_STAGED | SDP_STATE_EMBED_STAGED))
            return sdp_err(-EINVAL, "LoRA keeps the base's working copy on the host: "
                                    "train.work_home and embed_home gpu do not apply");
    }
    st->work_dtype = work_dtype;
    if (grad_dtype != SDP_F32 && grad_dtype != SDP_BF16)
        return sdp_err(-EINVAL, "gradient dtype %s: f32 or bf16 expected",
                       sdp_dtype_name(grad_dtype));
    st->grad_dtype = grad_dtype;
    st->work_staged = (flags & SDP_STATE_WORK_STAGED) != 0;
    st->embed_staged = (flags & SDP_STATE_EMBED_STAGED) != 0;
    st->chunk_elems = chunk_bytes / sizeof(float);
    if (st->chunk_elems < 1024)
        return sdp_err(-EINVAL, "chunk of %zu bytes is too small (at least 4 KiB)", chunk_bytes);
    st->ngroups = sdp_model_num_groups(cfg);
    st->groups = calloc((size_t)st->ngroups, sizeof(*st->groups));
    if (!st->groups)
        return sdp_err(-ENOMEM, "state of %d groups", st->ngroups);
    for (g = 0; g < st->ngroups; g++) {
        st->groups[g].staged = st->work_staged || (g == 0 && (flags & SDP_STATE_EMBED_STAGED));
        st->groups[g].frozen = frozen;
        rc = make_group(&st->groups[g], cfg, g, work_dtype, st->chunk_elems,
                        grad_dtype == SDP_BF16 && on_gpu && !tied_grad_pinned(cfg, g),
                        st->groups[g].staged, frozen);
        if (!rc && frozen && sdp_lora_layer_targets(lora, cfg, g))
            rc = sdp_state_lora_make(st, g);
        if (!rc && grad_dtype == SDP_BF16)
            rc = make_grad_ret(&st->groups[g], g);
        if (!rc && st->groups[g].staged)
            rc = make_work_stage(&st->groups[g], g, work_dtype);
        if (rc) {
            sdp_state_destroy(st);
            return rc;
        }
        st->nchunks_total += st->groups[g].nchunks;
    }
    SDP_INFO(
        "state: %zu parameters in %d groups, %d chunks of up to %.1f MiB, %.2f GiB of host memory",
        sdp_model_num_params(cfg), st->ngroups, st->nchunks_total, chunk_bytes / 1048576.0,
        (frozen ? sdp_state_lora_host_bytes(cfg, lora, work_dtype)
                : sdp_state_host_bytes(cfg, work_dtype, grad_dtype, flags)) /
            1073741824.0);
    return 0;
}

int sdp_state_create_ex(struct sdp_state *st, const struct sdp_model_cfg *cfg,
                        enum sdp_dtype work_dtype, size_t chunk_bytes, enum sdp_dtype grad_dtype,
                        unsigned flags)
{
    return create(st, cfg, work_dtype, chunk_bytes, grad_dtype, flags, NULL);
}

int sdp_state_create_lora(struct sdp_state *st, const struct sdp_model_cfg *cfg,
                          const struct sdp_lora_cfg *lora, enum sdp_dtype work_dtype,
                          size_t chunk_bytes, unsigned flags)
{
    char why[256];
    if (sdp_lora_validate(lora, cfg, why, sizeof(why)))
        return sdp_err(-EINVAL, "state: %s", why);
    return create(st, cfg, work_dtype, chunk_bytes, SDP_F32, flags, lora);
}

void sdp_state_destroy(struct sdp_state *st)
{
    if (!st->groups)
        return;
    for (int g = 0; g < st->ngroups; g++) {
        struct sdp_group_state *gs = &st->groups[g];
        sdp_rt_tensor_release(gs->master);
        sdp_rt_tensor_release(gs->m);
        sdp_rt_tensor_release(gs->v);
        sdp_rt_tensor_release(gs->grad);
        sdp_rt_tensor_release(gs->work);
        for (int c = 0; gs->grad_ret && c < gs->nchunks; c++)
            sdp_rt_tensor_release(gs->grad_ret[c]);
        free(gs->grad_ret);
        for (int c = 0; gs->work_stage && c < gs->nchunks; c++)
            sdp_rt_tensor_release(gs->work_stage[c]);
        free(gs->work_stage);
        free(gs->expert_steps);
        sdp_state_lora_free(gs);
    }
    free(st->groups);
    st->groups = NULL;
}

size_t sdp_state_off(const struct sdp_state *st, int g, enum sdp_ptensor k)
{
    const struct sdp_group_state *gs = &st->groups[g];
    for (int i = 0; i < gs->ntensors; i++)
        if (gs->tensors[i].kind == k)
            return gs->tensors[i].offset;
    SDP_ASSERT(0, "tensor kind %d is not in group %d", (int)k, g);
    return 0;
}

/* ---- random initialisation ---- */

uint64_t sdp_state_splitmix64(uint64_t x)
{
    return sdp_splitmix64(x);
}

uint64_t sdp_state_hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Element i of a tensor is a function of (seed, tensor name, i) only: a Box-Muller normal from two
 * counter-based uniforms.  out[i - begin] for i in [begin, end). */
static void fill_normal(float *out, size_t begin, size_t end, double std, uint64_t key)
{
    const double two_pi = 6.283185307179586;
    for (size_t i = begin; i < end; i++) {
        uint64_t a = sdp_state_splitmix64(key + 2 * i), b = sdp_state_splitmix64(key + 2 * i + 1);
        double u1 = ((a >> 11) + 1.0) * (1.0 / 9007199254740993.0); /* (0, 1] */
        double u2 = (b >> 11) * (1.0 / 9007199254740992.0);         /* [0, 1) */
        out[i - begin] = (float)(std * sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
    }
}

/* One slice of the initialisation: elements [begin, end) of one tensor, whose element 0 is at dst
 * (f32, or bf16 rounded from the f32 values: a LoRA's frozen base). */
struct init_job {
    void *dst;
    size_t begin, end;
    double std;
    uint64_t key;
    int normal, bf16;
};

struct init_work {
    struct init_job *jobs;
    int njobs;
    int next;
    pthread_mutex_t lock;
};

static void fill_f32(float *out, const struct init_job *jb, size_t begin, size_t end)
{
    if (jb->normal) {
        fill_normal(out, begin, end, jb->std, jb->key);
    } else {
        for (size_t i = begin; i < end; i++)
            out[i - begin] = 1.0f;
    }
}

static void run_job(const struct init_job *jb)
{
    enum { piece = 4096 };
    float buf[piece];
    if (!jb->bf16) {
        fill_f32((float *)jb->dst + jb->begin, jb, jb->begin, jb->end);
        return;
    }
    for (size_t b = jb->begin; b < jb->end; b += piece) {
        size_t e = b + piece < jb->end ? b + piece : jb->end;
        fill_f32(buf, jb, b, e);
        sdp_state_lora_round((uint16_t *)jb->dst + b, buf, e - b);
    }
}

static void *init_worker(void *arg)
{
    struct init_work *w = arg;
    for (;;) {
        int j;
        pthread_mutex_lock(&w->lock);
        j = w->next++;
        pthread_mutex_unlock(&w->lock);
        if (j >= w->njobs)
            return NULL;
        run_job(&w->jobs[j]);
    }
}

/* The initialisation of every group into dst[g] (its fp32 vector, or bf16 with bf16). */
static void init_groups(struct sdp_state *st, unsigned long long seed, void *const *dst, int bf16)
{
    const size_t slice = (size_t)1 << 22, es = bf16 ? 2 : 4; /* elements per job */
    double std = st->cfg.initializer_range > 0 ? st->cfg.initializer_range : 0.02;
    struct init_work w = { 0 };
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = ncpu > 1 ? (int)(ncpu > 64 ? 64 : ncpu) : 1;
    pthread_t th[64];
    int cap = 0, started = 0;

    /* element i of a tensor depends on (seed, name, i) only: any slicing gives the same values */
    for (int pass = 0; pass < 2; pass++) {
        w.njobs = 0;
        for (int g = 0; g < st->ngroups; g++) {
            struct sdp_group_state *gs = &st->groups[g];
            for (int i = 0; i < gs->ntensors; i++) {
                const struct sdp_param_desc *d = &gs->tensors[i];
                size_t n = (size_t)d->rows * d->cols;
                for (size_t b = 0; b < n; b += slice) {
                    if (pass == 1) {
                        struct init_job *jb = &w.jobs[w.njobs];
                        jb->dst = (char *)dst[g] + d->offset * es;
                        jb->begin = b;
                        jb->end = b + slice < n ? b + slice : n;
                        jb->std = std;
                        jb->key = sdp_state_splitmix64(seed) ^ sdp_state_hash_name(d->hf_name);
                        jb->normal = d->decay;
                        jb->bf16 = bf16;
                    }
                    w.njobs++;
                }
            }
        }
        if (pass == 0) {
            cap = w.njobs;
            w.jobs = calloc((size_t)cap, sizeof(*w.jobs));
            SDP_ASSERT(w.jobs != NULL, "out of memory for %d initialisation jobs", cap);
        }
    }
    pthread_mutex_init(&w.lock, NULL);
    for (int t = 0; t < nthreads; t++)
        if (pthread_create(&th[t], NULL, init_worker, &w) == 0)
            started++;
    if (started == 0)
        init_worker(&w);
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&w.lock);
    free(w.jobs);
}

void sdp_state_init_random(struct sdp_state *st, unsigned long long seed)
{
#ifdef SDP_SIMGRID /* a simulation computes nothing: the state's pages stay untouched */
    (void)st, (void)seed;
    return;
#endif
    void **dst = calloc((size_t)st->ngroups, sizeof(*dst));
    SDP_ASSERT(dst != NULL, "out of memory for %d groups", st->ngroups);
    for (int g = 0; g < st->ngroups; g++)
        dst[g] =
            sdp_rt_tensor_data(st->groups[g].frozen ? st->groups[g].work : st->groups[g].master);
    /* a bf16 frozen base (LoRA): each value rounded from its f32 draw */
    init_groups(st, seed, dst, st->lora.rank && st->work_dtype != SDP_F32);
    free(dst);
    st->work_valid = 0;
}
