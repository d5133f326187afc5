/* SPDX-License-Identifier: MIT */
/* The optimizer ops: sumsq (partial squared gradient norm of a chunk), grad_norm (global norm and
 * clipping coefficient from all partials) and adamw (one chunk: fp32 master, moments, gradient
 * zeroed after use, and the next step's working copy written in the same pass).  PyTorch AdamW
 * semantics (https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html). Kernels:
 * codelets/cpu/adamw_ref.c, adamw_avx512.c (chosen at run time, sdp_cpu_adamw()), and on the GPU
 * codelets/cuda/adamw.cu (the same bits).  Tests: tests/kernels/test_kernels_adamw.c,
 * test_kernels_host_simd.c, test_cuda_adamw.c, tests/e2e. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

/* ---- sumsq ---- */
struct sdp_sumsq_args {
    struct sdp_shape_key key; /* n (low 31 bits, high bits) */
};

/* buffers: out (1) f64 W, g (n) f32 R */
static void sumsq_cpu(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    *(double *)STARPU_VECTOR_GET_PTR(buffers[0]) =
        sdp_cpu_sumsq(SDP_VECF(buffers[1]), STARPU_VECTOR_GET_NX(buffers[1]));
}

#ifdef SDP_HAVE_CUDA
static void sumsq_cuda(void *buffers[], void *cl_arg)
{
    size_t n = STARPU_VECTOR_GET_NX(buffers[1]);
    (void)cl_arg;
    sdp_cuda_sumsq((double *)STARPU_VECTOR_GET_PTR(buffers[0]), SDP_VECF(buffers[1]), n,
                   sdp_cl_cuda_ws(0, sdp_cuda_sumsq_ws(n)), starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif

static struct starpu_perfmodel sdp_pm_sumsq = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_sumsq_v1",
    .footprint = sdp_cl_footprint,
};
struct starpu_codelet sdp_cl_sumsq = {
    .name = "sumsq",
    .cpu_funcs = { sumsq_cpu },
    .cpu_funcs_name = { "sumsq_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(sumsq_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_sumsq,
};

int sdp_task_sumsq(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *g)
{
    struct sdp_sumsq_args *a = sdp_cl_args_alloc(sizeof(*a));
    size_t n = sdp_rt_tensor_nelems(g);
    struct sdp_cl_buf b[] = { { out, STARPU_W }, { g, STARPU_R } };
    a->key.d[0] = (int)(n & 0x7fffffff);
    a->key.d[1] = (int)(n >> 31);
    return sdp_cl_submit(&sdp_cl_sumsq, o, a, sizeof(*a), 2.0 * n, b, 2);
}

/* ---- grad_norm ---- */
struct sdp_grad_norm_args {
    struct sdp_shape_key key; /* nparts */
    double max_norm;
};

/* buffers: out (2) f64 W, parts[nparts] (1) f64 R.  Summed in part order: deterministic. */
static void grad_norm_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_norm_args *a = cl_arg;
    double *out = (double *)STARPU_VECTOR_GET_PTR(buffers[0]);
    double s = 0.0, norm;
    for (int i = 0; i < a->key.d[0]; i++)
        s += *(const double *)STARPU_VECTOR_GET_PTR(buffers[1 + i]);
    norm = sqrt(s);
    out[0] = norm;
    /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (total_norm + 1e-6), clamped to 1 */
    out[1] = 1.0;
    if (a->max_norm > 0.0) {
        double coef = a->max_norm / (norm + 1e-6);
        out[1] = coef < 1.0 ? coef : 1.0;
    }
}

static struct starpu_perfmodel sdp_pm_grad_norm = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_grad_norm_v1",
    .footprint = sdp_cl_footprint,
};
struct starpu_codelet sdp_cl_grad_norm = {
    .name = "grad_norm",
    .cpu_funcs = { grad_norm_cpu },
    .cpu_funcs_name = { "grad_norm_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_grad_norm,
};

int sdp_task_grad_norm(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t **parts,
                       int nparts, double max_norm)
{
    struct sdp_grad_norm_args *a = sdp_cl_args_alloc(sizeof(*a));
    struct sdp_cl_buf *b = sdp_cl_args_alloc((size_t)(nparts + 1) * sizeof(*b));
    int rc;
    a->key.d[0] = nparts;
    a->max_norm = max_norm;
    b[0] = (struct sdp_cl_buf){ out, STARPU_W };
    for (int i = 0; i < nparts; i++)
        b[1 + i] = (struct sdp_cl_buf){ parts[i], STARPU_R };
    rc = sdp_cl_submit(&sdp_cl_grad_norm, o, a, sizeof(*a), (double)nparts, b, nparts + 1);
    free(b);
    return rc;
}

/* ---- adamw ---- */
struct sdp_adamw_args {
    struct sdp_shape_key key; /* n (low 31 bits, high bits), work element size, has_clip,
                                 gradient element size, partial */
    struct sdp_adamw_hp hp;
    int skip_nonfinite; /* leave the state unchanged when the global norm is not finite */
    int packed;         /* 1: grad, 2: work, 3: both hold the segments back to back */
    int nsegs;
    size_t gbase; /* a packed grad: where the first segment's elements start in it */
    int used;     /* 1: a last buffer, (2E) i32, says which experts' segments to update and
                     their step counts (sdp_task_adamw_experts) */
    int experts;  /* E */
    struct sdp_adamw_segment segs[];
};

/* The step count t of segment s's bias correction: hp's, or, of a sparse layer's expert, the
 * updates that expert has had, this one included (used[E + e]), as torch.optim.AdamW counts
 * per parameter; 0 for an expert without token this step (used[e] == 0), which, as a parameter
 * whose .grad is None, keeps master, m and v (its working copy is rewritten from the master). */
static int seg_step(const struct sdp_adamw_args *a, void *buffers[], int s, void *work, int bf16,
                    size_t woff, int E)
{
    const int32_t *used =
        a->used ? (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[a->key.d[3] ? 6 : 5]) : NULL;
    const float *p = SDP_VECF(buffers[0]) + a->segs[s].offset;
    const int e = a->segs[s].expert1 - 1;
    if (!used || e < 0)
        return a->hp.step;
    if (used[e])
        return used[E + e];
    if (bf16)
        sdp_cpu_cast_bf16((uint16_t *)work + woff, p, a->segs[s].nelems);
    else
        memcpy((float *)work + woff, p, a->segs[s].nelems * sizeof(float));
    return 0;
}

/* buffers: master RW, grad (f32 or bf16) R, m RW, v RW, work W, [clip (2) f64 R], [used (2E)
 * i32 R] */
static void adamw_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_adamw_args *a = cl_arg;
    struct sdp_adamw_hp hp = a->hp;
    float *p = SDP_VECF(buffers[0]), *g = SDP_VECF(buffers[1]);
    int gbf16 = STARPU_VECTOR_GET_ELEMSIZE(buffers[1]) == 2; /* the bf16 gradient return */
    float *m = SDP_VECF(buffers[2]), *v = SDP_VECF(buffers[3]);
    void *work = SDP_VEC(buffers[4]);
    int bf16 = STARPU_VECTOR_GET_ELEMSIZE(buffers[4]) == 2;
    if (a->key.d[3]) {
        const double *clip = (const double *)STARPU_VECTOR_GET_PTR(buffers[5]);
        if (a->skip_nonfinite && !isfinite(clip[0])) {
            /* a non-finite gradient somewhere: leave p, m, v as they are; the working copy still
             * has to be written (the task declares it W) */
            size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
            if (bf16)
                sdp_cpu_cast_bf16((uint16_t *)work, p, n);
            else
                memcpy(work, p, n * sizeof(float));
            return;
        }
        hp.gscale = (float)clip[1];
    }
    size_t run = 0;
    for (int s = 0; s < a->nsegs; s++) {
        size_t off = a->segs[s].offset, goff = a->packed & 1 ? a->gbase + run : off,
               woff = a->packed & 2 ? run : off;
        uint16_t *wb = bf16 ? (uint16_t *)work + woff : NULL;
        float *wf = bf16 ? NULL : (float *)work + woff;
        run += a->segs[s].nelems;
        if ((hp.step = seg_step(a, buffers, s, work, bf16, woff, a->experts)) == 0)
            continue;
        if (gbf16)
            sdp_cpu_adamw_gbf16(p + off, (uint16_t *)(void *)g + goff, m + off, v + off, wb, wf,
                                a->segs[s].nelems, &hp, a->segs[s].decay, 0);
        else
            sdp_cpu_adamw(p + off, g + goff, m + off, v + off, wb, wf, a->segs[s].nelems, &hp,
                          a->segs[s].decay, 0);
    }
}

#ifdef SDP_HAVE_CUDA
/* The same on the GPU (sdp_cuda_adamw: the CPU's bits), segment by segment; the clipping
 * coefficient is read there from the grad_norm result. */
static void adamw_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_adamw_args *a = cl_arg;
    cudaStream_t stream = starpu_cuda_get_local_stream();
    float *p = SDP_VECF(buffers[0]), *m = SDP_VECF(buffers[2]), *v = SDP_VECF(buffers[3]);
    const size_t gsize = STARPU_VECTOR_GET_ELEMSIZE(buffers[1]),
                 wsize = STARPU_VECTOR_GET_ELEMSIZE(buffers[4]);
    const char *g = SDP_VEC(buffers[1]);
    char *work = SDP_VEC(buffers[4]);
    const double *clip = a->key.d[3] ? (const double *)STARPU_VECTOR_GET_PTR(buffers[5]) : NULL;
    size_t run = 0;
    for (int s = 0; s < a->nsegs; s++) {
        size_t off = a->segs[s].offset, goff = a->packed & 1 ? a->gbase + run : off,
               woff = a->packed & 2 ? run : off;
        struct sdp_adamw_consts c;
        struct sdp_cuda_adamw_consts cc;
        sdp_cpu_adamw_consts(&c, &a->hp, a->segs[s].decay);
        cc = (struct sdp_cuda_adamw_consts){ c.wd_mul, c.w1,       c.omw1, c.b2,     c.c2,
                                             c.nstep,  c.bc2_sqrt, c.eps,  c.gscale, c.lerp_small };
        sdp_cuda_adamw(p + off, g + goff * gsize, gsize == 2 ? SDP_CUDA_BF16 : SDP_CUDA_F32,
                       m + off, v + off, work + woff * wsize,
                       wsize == 2 ? SDP_CUDA_BF16 : SDP_CUDA_F32, a->segs[s].nelems, &cc, clip,
                       a->skip_nonfinite, stream);
        run += a->segs[s].nelems;
    }
    SDP_CUDA_CHECK(cudaGetLastError());
}

/* The update of a chunk that the GPU runs (sdp_task_adamw_gpu): the name of the host's, so the
 * trace and the checker see an update; a perfmodel of its own. */
static struct starpu_perfmodel sdp_pm_adamw_gpu = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_adamw_gpu_v1",
    .footprint = sdp_cl_footprint,
};
struct starpu_codelet sdp_cl_adamw_gpu = {
    .name = "adamw",
    .cuda_funcs = { adamw_cuda },
    .cuda_flags = { STARPU_CUDA_ASYNC },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_adamw_gpu,
};
#endif

static struct starpu_perfmodel sdp_pm_adamw = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_adamw_v2", /* v2: AVX-512 kernel */
    .footprint = sdp_cl_footprint,
};
struct starpu_codelet sdp_cl_adamw = {
    .name = "adamw",
    .cpu_funcs = { adamw_cpu },
    .cpu_funcs_name = { "adamw_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_adamw,
};

/* The same kernel under its own name, so the trace and the checker tell an early update (rows no
 * later backward task writes) from the update of the rest. */
static struct starpu_perfmodel sdp_pm_adamw_early = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_adamw_early_v1",
    .footprint = sdp_cl_footprint,
};
struct starpu_codelet sdp_cl_adamw_early = {
    .name = "adamw_early",
    .cpu_funcs = { adamw_cpu },
    .cpu_funcs_name = { "adamw_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_adamw_early,
};

/* And under a third name: a late update (the tied embedding's rows that the next step's lookup
 * does not read), which the checker lets that lookup run before. */
static struct starpu_perfmodel sdp_pm_adamw_late = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_adamw_late_v1",
    .footprint = sdp_cl_footprint,
};
struct starpu_codelet sdp_cl_adamw_late = {
    .name = "adamw_late",
    .cpu_funcs = { adamw_cpu },
    .cpu_funcs_name = { "adamw_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_adamw_late,
};

int sdp_task_adamw(const struct sdp_task_opts *o, sdp_rt_tensor_t *master, sdp_rt_tensor_t *grad,
                   sdp_rt_tensor_t *m, sdp_rt_tensor_t *v, sdp_rt_tensor_t *work,
                   sdp_rt_tensor_t *clip, double lr, double beta1, double beta2, double eps,
                   double weight_decay, int step, const struct sdp_adamw_segment *segs, int nsegs)
{
    return sdp_task_adamw_ex(o, master, grad, m, v, work, clip, 0, lr, beta1, beta2, eps,
                             weight_decay, step, segs, nsegs);
}

static int adamw_submit(struct starpu_codelet *cl, const struct sdp_task_opts *o,
                        sdp_rt_tensor_t *master, sdp_rt_tensor_t *grad, sdp_rt_tensor_t *m,
                        sdp_rt_tensor_t *v, sdp_rt_tensor_t *work, sdp_rt_tensor_t *clip,
                        int skip_nonfinite, double lr, double beta1, double beta2, double eps,
                        double weight_decay, int step, const struct sdp_adamw_segment *segs,
                        int nsegs, size_t gbase, sdp_rt_tensor_t *used)
{
    size_t argsize =
        sizeof(struct sdp_adamw_args) + (size_t)nsegs * sizeof(struct sdp_adamw_segment);
    struct sdp_adamw_args *a;
    size_t n = sdp_rt_tensor_nelems(master), covered = 0;
    for (int s = 0; s < nsegs; s++)
        covered += segs[s].nelems;
    /* a gradient or working copy of fewer elements than the chunk, but at least `covered`, holds
     * the segments back to back (packed; the rest is padding) */
    size_t ng = sdp_rt_tensor_nelems(grad), nw = sdp_rt_tensor_nelems(work);
    int packed = (ng < n && ng >= gbase + covered) | (nw < n && nw >= covered) << 1;
    /* segments that leave part of the chunk to another update keep that part of the working copy:
     * read-write then, write-only (nothing fetched) when they cover it all or it is packed */
    struct sdp_cl_buf b[] = { { master, STARPU_RW },
                              { grad, STARPU_R },
                              { m, STARPU_RW },
                              { v, STARPU_RW },
                              { work, covered == n || (packed & 2) ? STARPU_W : STARPU_RW },
                              { clip, STARPU_R },
                              { used, STARPU_R } };
    int nb = clip ? 6 : 5;
    if (used && !clip)
        b[5] = b[6];
    nb += used != NULL;
    if ((ng != n && !(packed & 1)) || (gbase && !(packed & 1)) ||
        (sdp_rt_tensor_dtype(grad) != SDP_F32 && sdp_rt_tensor_dtype(grad) != SDP_BF16))
        return sdp_err(-EINVAL, "adamw: gradient %s is not an f32 or bf16 vector of %zu (or %zu)",
                       sdp_rt_tensor_name(grad), n, covered);
    if ((nw != n && !(packed & 2)) || (packed && skip_nonfinite))
        return sdp_err(-EINVAL,
                       "adamw: working copy %s holds %zu elements, not %zu (or %zu packed, "
                       "without skip_nonfinite)",
                       sdp_rt_tensor_name(work), sdp_rt_tensor_nelems(work), n, covered);
    a = sdp_cl_args_alloc(argsize);
    a->key.d[0] = (int)(n & 0x7fffffff);
    a->key.d[1] = (int)(n >> 31);
    a->key.d[2] = (int)sdp_dtype_size(sdp_rt_tensor_dtype(work));
    a->key.d[3] = clip != NULL;
    a->key.d[4] = (int)sdp_dtype_size(sdp_rt_tensor_dtype(grad));
    a->key.d[5] = (covered != n) | packed << 1; /* part of a chunk: a history of its own */
    a->hp.lr = (float)lr;
    a->hp.beta1 = (float)beta1;
    a->hp.beta2 = (float)beta2;
    a->hp.eps = (float)eps;
    a->hp.weight_decay = (float)weight_decay;
    a->hp.gscale = 1.0f;
    a->hp.step = step;
    a->skip_nonfinite = skip_nonfinite;
    a->packed = packed;
    a->nsegs = nsegs;
    a->gbase = gbase;
    a->used = used != NULL;
    a->experts = used ? (int)(sdp_rt_tensor_nelems(used) / 2) : 0;
    memcpy(a->segs, segs, (size_t)nsegs * sizeof(*segs));
    return sdp_cl_submit(cl, o, a, argsize, 12.0 * (double)covered, b, nb);
}

int sdp_task_adamw_ex(const struct sdp_task_opts *o, sdp_rt_tensor_t *master, sdp_rt_tensor_t *grad,
                      sdp_rt_tensor_t *m, sdp_rt_tensor_t *v, sdp_rt_tensor_t *work,
                      sdp_rt_tensor_t *clip, int skip_nonfinite, double lr, double beta1,
                      double beta2, double eps, double weight_decay, int step,
                      const struct sdp_adamw_segment *segs, int nsegs)
{
    return adamw_submit(&sdp_cl_adamw, o, master, grad, m, v, work, clip, skip_nonfinite, lr, beta1,
                        beta2, eps, weight_decay, step, segs, nsegs, 0, NULL);
}

int sdp_task_adamw_experts(const struct sdp_task_opts *o, sdp_rt_tensor_t *master,
                           sdp_rt_tensor_t *grad, sdp_rt_tensor_t *m, sdp_rt_tensor_t *v,
                           sdp_rt_tensor_t *work, sdp_rt_tensor_t *clip, int skip_nonfinite,
                           sdp_rt_tensor_t *used, double lr, double beta1, double beta2, double eps,
                           double weight_decay, int step, const struct sdp_adamw_segment *segs,
                           int nsegs)
{
    return adamw_submit(&sdp_cl_adamw, o, master, grad, m, v, work, clip, skip_nonfinite, lr, beta1,
                        beta2, eps, weight_decay, step, segs, nsegs, 0, used);
}

int sdp_task_adamw_early(const struct sdp_task_opts *o, sdp_rt_tensor_t *master,
                         sdp_rt_tensor_t *grad, sdp_rt_tensor_t *m, sdp_rt_tensor_t *v,
                         sdp_rt_tensor_t *work, double lr, double beta1, double beta2, double eps,
                         double weight_decay, int step, const struct sdp_adamw_segment *segs,
                         int nsegs)
{
    return adamw_submit(&sdp_cl_adamw_early, o, master, grad, m, v, work, NULL, 0, lr, beta1, beta2,
                        eps, weight_decay, step, segs, nsegs, 0, NULL);
}

int sdp_task_adamw_late(const struct sdp_task_opts *o, sdp_rt_tensor_t *master,
                        sdp_rt_tensor_t *grad, size_t gbase, sdp_rt_tensor_t *m, sdp_rt_tensor_t *v,
                        sdp_rt_tensor_t *work, double lr, double beta1, double beta2, double eps,
                        double weight_decay, int step, const struct sdp_adamw_segment *segs,
                        int nsegs)
{
    return adamw_submit(&sdp_cl_adamw_late, o, master, grad, m, v, work, NULL, 0, lr, beta1, beta2,
                        eps, weight_decay, step, segs, nsegs, gbase, NULL);
}

int sdp_task_adamw_gpu(const struct sdp_task_opts *o, sdp_rt_tensor_t *master,
                       sdp_rt_tensor_t *grad, sdp_rt_tensor_t *m, sdp_rt_tensor_t *v,
                       sdp_rt_tensor_t *work, sdp_rt_tensor_t *clip, int skip_nonfinite, double lr,
                       double beta1, double beta2, double eps, double weight_decay, int step,
                       const struct sdp_adamw_segment *segs, int nsegs)
{
#ifdef SDP_HAVE_CUDA
    return adamw_submit(&sdp_cl_adamw_gpu, o, master, grad, m, v, work, clip, skip_nonfinite, lr,
                        beta1, beta2, eps, weight_decay, step, segs, nsegs, 0, NULL);
#else
    (void)o, (void)master, (void)grad, (void)m, (void)v, (void)work, (void)clip;
    (void)skip_nonfinite, (void)lr, (void)beta1, (void)beta2, (void)eps, (void)weight_decay;
    (void)step, (void)segs, (void)nsegs;
    return sdp_err(-ENOTSUP, "adamw_gpu: built without CUDA");
#endif
}
