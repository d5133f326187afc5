/* SPDX-License-Identifier: MIT */
/* The compute pass of `slidedp calibrate` (cli/calibrate.h): the project's own matmul and attention
 * tasks timed on the workers that run them in training.  With GPUs, each CUDA worker alone at
 * qwen3-4b's layer shapes in bf16 (M = 8192 tokens: qkv, o, gate/up, down; attention B 8, T 1024,
 * 32 heads, 8 KV heads, head 128); without, the CPU workers at the tiny recipes' shapes in fp32
 * (the dtype the CPU path computes in): M 512 with K, N of 128 to 1024 and the LM-head-like
 * N 151936 / 4, attention B 2, T 128, 4 heads, 2 KV heads, head 32.  A GEMM shape's rate is its
 * forward, backward-data and backward-weight products' FLOPs (2 M K N each) over their summed
 * time; attention counts the forward as 2 B NH T T HD (the causal half, as graph/predict.c does)
 * and the backward 2.5 times that.  The LM head with its cross-entropy is one task (logits, loss
 * and both gradients: 3 x 2 N C V FLOPs), timed alone: its kernel is not a plain GEMM (on the CPU
 * it runs at a third of one).  Each time is the median of REPS passes after an untimed one
 * (which also brings the inputs where the worker computes).  Inputs are zeros: the kernels' time
 * does not depend on the values.  With GPUs, last, the launch overhead: a tiny task's life on a
 * CUDA worker less its life on a CPU worker.  Tasks only, no CUDA call: the same code serves both
 * builds. */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "base/sdp_log.h"
#include "cli/calibrate.h"
#include "cli/cli.h"
#include "codelets/sdp_tasks.h"
#include "runtime/init.h"
#include "runtime/tensor.h"

#define REPS      3
#define GPU_ITERS 10  /* GEMM triples or attention pairs in a GPU pass: tens of ms */
#define CPU_ITERS 1   /* a CPU pass of one is already milliseconds to a second */
#define NLAUNCH   500 /* tiny tasks timed for the launch overhead */
#define MAXSHAPES 4

struct shape {
    int m, k, n;
};

struct att_shape {
    int b, t, nh, nkv, hd;
};

static const struct shape gpu_shapes[MAXSHAPES] = {
    { 8192, 2560, 6144 }, { 8192, 4096, 2560 }, { 8192, 2560, 19456 }, { 8192, 9728, 2560 }
};
static const struct shape cpu_shapes[MAXSHAPES] = {
    { 512, 128, 512 }, { 512, 512, 512 }, { 512, 1024, 1024 }, { 512, 128, 151936 / 4 }
};
static const struct att_shape gpu_att = { 8, 1024, 32, 8, 128 };
static const struct att_shape cpu_att = { 2, 128, 4, 2, 32 };
/* the LM head with its cross-entropy (one task: logits, loss, both gradients): N tokens, C, V */
static const struct shape gpu_head = { 8192, 2560, 151936 };
static const struct shape cpu_head = { 512, 128, 151936 };

/* One GEMM shape's tensors: inputs shared by the ranks (read only), outputs one per rank. */
struct gemm_set {
    struct shape s;
    sdp_rt_tensor_t *x, *w, *dout;
    sdp_rt_tensor_t *out[SDP_MAX_RANKS], *dx[SDP_MAX_RANKS], *gg[SDP_MAX_RANKS];
};

/* The attention tensors, shared by the ranks: attention is timed on one worker at a time. */
struct att_set {
    struct att_shape a;
    sdp_rt_tensor_t *qkv, *dout, *out, *lse, *dqkv;
};

/* The LM head's tensors (one rank at a time). */
struct head_set {
    struct shape s; /* m: tokens, k: hidden, n: vocabulary */
    sdp_rt_tensor_t *loss, *dh, *gg, *h, *w, *targets;
};

struct compute {
    int nranks, ngemm, iters, on_gpu;
    enum sdp_dtype dt;
    struct gemm_set g[MAXSHAPES];
    struct att_set at;
    struct head_set hd;
    sdp_rt_tensor_t *egu, *eout; /* SwiGLU's input and output at GEMM shape 2 */
};

static struct sdp_task_opts opts(enum sdp_phase ph, int rank)
{
    struct sdp_task_opts o = { 0 };
    o.hint.group = 1;
    o.hint.mb = -1;
    o.hint.phase = ph;
    o.hint.rank = rank;
    o.on_rank = 1;
    return o;
}

static double gemm_flops(const struct shape *s)
{
    return 3.0 * 2.0 * s->m * (double)s->k * s->n; /* forward, backward-data, backward-weight */
}

static double att_flops(const struct att_shape *a)
{
    return 3.5 * 2.0 * a->b * (double)a->nh * a->t * (double)a->t * a->hd; /* fwd + 2.5x bwd */
}

/* A tensor of n elements where the ranks' workers first touch it (their GPU, or the host), zeroed
 * on rank's worker. */
static int tensor(struct compute *c, sdp_rt_tensor_t **t, enum sdp_dtype dt, size_t n, int rank)
{
    const struct sdp_task_opts o = opts(SDP_PH_FWD, rank);
    int rc = c->on_gpu ? sdp_rt_tensor_create_device(t, dt, n, "calibrate.compute")
                       : sdp_rt_tensor_create(t, dt, n, "calibrate.compute");
    return rc ? rc : sdp_task_zero(&o, *t);
}

static int alloc_gemm(struct compute *c, struct gemm_set *g)
{
    const size_t M = (size_t)g->s.m, K = (size_t)g->s.k, N = (size_t)g->s.n;
    int rc = tensor(c, &g->x, c->dt, M * K, 0);
    if (!rc)
        rc = tensor(c, &g->w, c->dt, N * K, 0);
    if (!rc)
        rc = tensor(c, &g->dout, c->dt, M * N, 0);
    for (int r = 0; !rc && r < c->nranks; r++) {
        rc = tensor(c, &g->out[r], c->dt, M * N, r);
        if (!rc)
            rc = tensor(c, &g->dx[r], c->dt, M * K, r);
        if (!rc)
            rc = tensor(c, &g->gg[r], SDP_F32, N * K, r); /* weight gradients are fp32 */
    }
    return rc;
}

static int alloc_att(struct compute *c, struct att_set *s)
{
    const struct att_shape *a = &s->a;
    const size_t rows = (size_t)a->b * a->t, q = (size_t)a->nh * a->hd;
    const size_t qkv = (size_t)(a->nh + 2 * a->nkv) * a->hd;
    int rc = tensor(c, &s->qkv, c->dt, rows * qkv, 0);
    if (!rc)
        rc = tensor(c, &s->dout, c->dt, rows * q, 0);
    if (!rc)
        rc = tensor(c, &s->out, c->dt, rows * q, 0);
    if (!rc)
        rc = tensor(c, &s->lse, SDP_F32, (size_t)a->b * a->nh * a->t, 0);
    if (!rc)
        rc = tensor(c, &s->dqkv, c->dt, rows * qkv, 0);
    return rc;
}

static int alloc_head(struct compute *c, struct head_set *s)
{
    const size_t N = (size_t)s->s.m, C = (size_t)s->s.k, V = (size_t)s->s.n;
    int rc = tensor(c, &s->loss, SDP_F64, 2, 0);
    if (!rc)
        rc = tensor(c, &s->dh, c->dt, N * C, 0);
    if (!rc)
        rc = tensor(c, &s->gg, SDP_F32, V * C, 0);
    if (!rc)
        rc = tensor(c, &s->h, c->dt, N * C, 0);
    if (!rc)
        rc = tensor(c, &s->w, c->dt, V * C, 0);
    if (!rc)
        rc = tensor(c, &s->targets, SDP_I32, N, 0); /* token 0 everywhere: every target valid */
    if (!rc) /* SwiGLU at the gate/up shape: N x 2I in, N x I out */
        rc = tensor(c, &c->egu, c->dt, (size_t)c->g[2].s.m * (size_t)c->g[2].s.n, 0);
    if (!rc)
        rc = tensor(c, &c->eout, c->dt, (size_t)c->g[2].s.m * (size_t)(c->g[2].s.n / 2), 0);
    return rc;
}

static void release_all(struct compute *c)
{
    sdp_rt_tensor_release(c->hd.loss), sdp_rt_tensor_release(c->hd.dh);
    sdp_rt_tensor_release(c->hd.gg), sdp_rt_tensor_release(c->hd.h);
    sdp_rt_tensor_release(c->hd.w), sdp_rt_tensor_release(c->hd.targets);
    sdp_rt_tensor_release(c->egu), sdp_rt_tensor_release(c->eout);
    for (int i = 0; i < c->ngemm; i++) {
        struct gemm_set *g = &c->g[i];
        sdp_rt_tensor_release(g->x), sdp_rt_tensor_release(g->w), sdp_rt_tensor_release(g->dout);
        for (int r = 0; r < c->nranks; r++)
            sdp_rt_tensor_release(g->out[r]), sdp_rt_tensor_release(g->dx[r]),
                sdp_rt_tensor_release(g->gg[r]);
    }
    sdp_rt_tensor_release(c->at.qkv), sdp_rt_tensor_release(c->at.dout);
    sdp_rt_tensor_release(c->at.out), sdp_rt_tensor_release(c->at.lse);
    sdp_rt_tensor_release(c->at.dqkv);
}

/* The three products of shape g on rank r's worker. */
static int submit_gemm(struct gemm_set *g, int r)
{
    const struct sdp_task_opts f = opts(SDP_PH_FWD, r), b = opts(SDP_PH_BWD, r);
    const int M = g->s.m, K = g->s.k, N = g->s.n;
    int rc = sdp_task_matmul_fwd(&f, g->out[r], NULL, g->x, g->w, 0, M, K, N);
    if (!rc)
        rc = sdp_task_matmul_bwd_data(&b, g->dx[r], g->dout, g->w, 0, M, K, N);
    if (!rc)
        rc = sdp_task_matmul_bwd_weight(&b, g->gg[r], 0, g->dout, g->x, M, K, N);
    return rc;
}

static int submit_att(struct att_set *s, int r)
{
    const struct sdp_task_opts f = opts(SDP_PH_FWD, r), b = opts(SDP_PH_BWD, r);
    const struct att_shape *a = &s->a;
    int rc = sdp_task_attention_fwd(&f, s->out, s->lse, s->qkv, a->b, a->t, a->nh, a->nkv, a->hd);
    if (!rc)
        rc = sdp_task_attention_bwd(&b, s->dqkv, s->dout, s->qkv, s->out, s->lse, a->b, a->t, a->nh,
                                    a->nkv, a->hd);
    return rc;
}

/* One pass of c->iters LM-head tasks (elem 0) or SwiGLU forwards (elem 1) on rank r.
 * @return seconds, or -1 (the error logged) */
static double single_pass(struct compute *c, int r, int elem)
{
    const struct sdp_task_opts o = opts(elem ? SDP_PH_FWD : SDP_PH_LOSS, r);
    const struct shape *s = &c->hd.s;
    double t0 = sdp_cli_now_s();
    int rc = 0;
    for (int it = 0; !rc && it < c->iters; it++)
        rc = elem ? sdp_task_swiglu_fwd(&o, c->eout, c->egu, c->g[2].s.m, c->g[2].s.n / 2)
                  : sdp_task_lmhead_ce(&o, c->hd.loss, c->hd.dh, c->hd.gg, 0, c->hd.h, c->hd.w, 0,
                                       c->hd.targets, s->m, s->k, s->n, 1.0f / s->m);
    if (!rc)
        rc = sdp_rt_wait_all();
    if (rc) {
        sdp_err(rc, "calibrate: the %s tasks failed", elem ? "SwiGLU" : "LM head's");
        return -1.0;
    }
    return sdp_cli_now_s() - t0;
}

/* The LM head's FLOP/s on rank r (3 x 2 N C V FLOPs a task: logits, the two gradients), or the
 * element-wise bytes/s (elem: SwiGLU's forward over GEMM shape 2's output, N x N2/2 outputs from
 * N x N2 inputs: 1.5 N N2 elements moved), median of REPS passes after one.  0 on failure. */
static double single_rate(struct compute *c, int r, int elem)
{
    const struct shape *g = &c->g[2].s;
    double s[REPS];
    for (int i = -1; i < REPS; i++) {
        double dt = single_pass(c, r, elem);
        if (dt <= 0.0)
            return 0.0;
        if (i >= 0)
            s[i] = dt;
    }
    return c->iters *
           (elem ? 1.5 * g->m * (double)g->n * sdp_dtype_size(c->dt) : gemm_flops(&c->hd.s)) /
           sdp_cli_median(s, REPS);
}

/* What one pass submits on each rank of mask: GEMM shape `shape`, the attention (shape = ngemm),
 * or every GEMM shape (-1). */
struct pass {
    int shape;
    unsigned long long mask;
};

/* One pass, c->iters times over.  @return seconds, or -1 (the error logged) */
static double run_pass(struct compute *c, const struct pass *p)
{
    double t0 = sdp_cli_now_s();
    int rc = 0;
    for (int it = 0; !rc && it < c->iters; it++)
        for (int r = 0; !rc && r < c->nranks; r++)
            for (int i = 0; !rc && i < c->ngemm + 1 && (p->mask >> r & 1); i++) {
                if (p->shape >= 0 ? i != p->shape : i == c->ngemm)
                    continue;
                rc = i < c->ngemm ? submit_gemm(&c->g[i], r) : submit_att(&c->at, r);
            }
    if (!rc)
        rc = sdp_rt_wait_all();
    if (rc) {
        sdp_err(rc, "calibrate: the compute tasks failed");
        return -1.0;
    }
    return sdp_cli_now_s() - t0;
}

/* Median seconds of REPS passes after an untimed one; -1 on failure. */
static double time_pass(struct compute *c, const struct pass *p)
{
    double s[REPS];
    for (int r = -1; r < REPS; r++) {
        double dt = run_pass(c, p);
        if (dt <= 0.0)
            return -1.0;
        if (r >= 0)
            s[r] = dt;
    }
    return sdp_cli_median(s, REPS);
}

static const char *unit_name(const struct compute *c)
{
    return c->on_gpu ? "TFLOP/s" : "GFLOP/s";
}

static double in_unit(const struct compute *c, double flops)
{
    return flops / (c->on_gpu ? 1e12 : 1e9);
}

/* Rank r alone: every GEMM shape (recorded in m->gemm[] for rank 0) and the attention.  *gemm is
 * the FLOP-weighted GEMM rate (all the shapes' FLOPs over their summed time).  @return 0 or -EIO */
static int measure_alone(struct compute *c, int r, struct sdp_machine *m, double *gemm, double *att)
{
    const char *who = c->on_gpu ? "GPU" : "CPU worker";
    double flops = 0.0, secs = 0.0, t;
    for (int i = 0; i < c->ngemm; i++) {
        const struct shape *s = &c->g[i].s;
        const struct pass p = { i, 1ull << r };
        if ((t = time_pass(c, &p)) <= 0.0)
            return sdp_err(-EIO, "calibrate: GEMM %dx%dx%d on %s %d", s->m, s->k, s->n, who, r);
        flops += c->iters * gemm_flops(s), secs += t;
        if (r == 0)
            m->gemm[i] =
                (struct sdp_machine_gemm){ s->m, s->k, s->n, c->iters * gemm_flops(s) / t };
        SDP_INFO("calibrate: %s %d: GEMM M %d K %d N %d (fwd, bwd data, bwd weight): %.1f %s", who,
                 r, s->m, s->k, s->n, in_unit(c, c->iters * gemm_flops(s) / t), unit_name(c));
    }
    if (r == 0)
        m->ngemm = c->ngemm;
    *gemm = flops / secs;
    const struct pass p = { c->ngemm, 1ull << r };
    if ((t = time_pass(c, &p)) <= 0.0)
        return sdp_err(-EIO, "calibrate: attention on %s %d", who, r);
    *att = c->iters * att_flops(&c->at.a) / t;
    SDP_INFO("calibrate: %s %d: GEMM %.1f %s over the shapes; attention B %d T %d NH %d NKV %d "
             "HD %d (fwd + bwd): %.1f %s",
             who, r, in_unit(c, *gemm), unit_name(c), c->at.a.b, c->at.a.t, c->at.a.nh, c->at.a.nkv,
             c->at.a.hd, in_unit(c, *att), unit_name(c));
    return 0;
}

/* Every CPU rank at once, each on its own outputs: the summed GEMM rate.  @return 0 or -EIO */
static int measure_all_cpus(struct compute *c, struct sdp_machine *m)
{
    const unsigned long long all = c->nranks >= 64 ? ~0ull : (1ull << c->nranks) - 1;
    const struct pass p = { -1, all };
    double flops = 0.0, t;
    for (int i = 0; i < c->ngemm; i++)
        flops += c->nranks * c->iters * gemm_flops(&c->g[i].s);
    if ((t = time_pass(c, &p)) <= 0.0)
        return sdp_err(-EIO, "calibrate: GEMMs on the %d CPU workers at once", c->nranks);
    m->cpu_gemm_flops_all = flops / t;
    SDP_INFO("calibrate: %d CPU workers at once: GEMM %.1f GFLOP/s in all", c->nranks,
             m->cpu_gemm_flops_all / 1e9);
    return 0;
}

/* The life of a task that zeroes one element of t, one after the other through their data (50
 * untimed first), submitted with o.  @return seconds per task, or -1 (the error logged) */
static double tiny_life(sdp_rt_tensor_t *t, const struct sdp_task_opts *o)
{
    double t0 = 0.0;
    int rc = 0;
    for (int i = -50; !rc && i < NLAUNCH; i++) {
        if (i == 0 && !(rc = sdp_rt_wait_all()))
            t0 = sdp_cli_now_s();
        if (!rc)
            rc = sdp_task_zero(o, t);
    }
    if (!rc)
        rc = sdp_rt_wait_all();
    if (rc) {
        sdp_err(rc, "calibrate: the tiny tasks");
        return -1.0;
    }
    return (sdp_cli_now_s() - t0) / NLAUNCH;
}

/* What reaching GPU 0 adds to a task: the life of a one-element zero on its CUDA worker (a memset
 * on the worker's stream, and the wait for it) less the same task's on a CPU worker (the codelets
 * restricted to the CPUs for it, then placed back).  0 when not above.  @return 0 or an error */
static int measure_launch(struct sdp_machine *m)
{
    const struct sdp_task_opts gpu = opts(SDP_PH_FWD, 0);
    struct sdp_task_opts host = opts(SDP_PH_UPDATE, 0);
    sdp_rt_tensor_t *t = NULL;
    double on_gpu = -1.0, on_cpu = -1.0;
    int rc = sdp_rt_tensor_create(&t, SDP_BF16, 1, "calibrate.launch");
    host.on_rank = 0; /* an optimizer phase: not pinned to a rank, the scheduler picks a CPU */
    if (!rc)
        on_gpu = tiny_life(t, &gpu);
    if (on_gpu > 0.0 && !(rc = sdp_tasks_restrict("cpu")))
        on_cpu = tiny_life(t, &host);
    if (!rc && !(rc = sdp_tasks_restrict("any")))
        rc = sdp_tasks_place_compute(1);
    sdp_rt_tensor_release(t);
    if (rc || on_gpu <= 0.0 || on_cpu <= 0.0)
        return sdp_err(rc ? rc : -EIO, "calibrate: the launch overhead on GPU 0");
    m->kernel_launch_s = on_gpu > on_cpu ? on_gpu - on_cpu : 0.0;
    SDP_INFO("calibrate: a tiny task: %.1f us on GPU 0, %.1f us on a CPU worker: launch %.1f us",
             on_gpu * 1e6, on_cpu * 1e6, m->kernel_launch_s * 1e6);
    return 0;
}

/* The shapes and dtype of this node's compute workers, and the ranks they run as: the CUDA
 * workers (set by the caller), else every CPU worker (set here).  @return 0 or -EINVAL */
static int setup(struct compute *c, const struct sdp_machine *m)
{
    int ids[SDP_MAX_RANKS], n = sdp_rt_ncpus() < SDP_MAX_RANKS ? sdp_rt_ncpus() : SDP_MAX_RANKS;
    const struct shape *shapes = m->gpus > 0 ? gpu_shapes : cpu_shapes;
    c->on_gpu = m->gpus > 0;
    c->nranks = c->on_gpu ? m->gpus : n;
    c->dt = c->on_gpu ? SDP_BF16 : SDP_F32;
    c->iters = c->on_gpu ? GPU_ITERS : CPU_ITERS;
    c->ngemm = MAXSHAPES;
    for (int i = 0; i < c->ngemm; i++)
        c->g[i].s = shapes[i];
    c->at.a = c->on_gpu ? gpu_att : cpu_att;
    c->hd.s = c->on_gpu ? gpu_head : cpu_head;
    if (c->on_gpu)
        return 0;
    if (n < 1)
        return sdp_err(-EINVAL, "calibrate: no CPU worker for the compute pass");
    return sdp_rt_rank_workers(n, ids) || sdp_tasks_set_ranks(n, ids) ? -EINVAL : 0;
}

int sdp_cli_calibrate_compute(struct sdp_machine *m)
{
    struct compute c = { 0 };
    double gemm = 0.0, att = 0.0;
    int rc = setup(&c, m);
    if (rc)
        return rc;
    SDP_INFO("calibrate: compute on %d %s, %s tensors", c.nranks,
             c.on_gpu ? "GPU(s)" : "CPU worker(s)", c.on_gpu ? "bf16" : "fp32");
    for (int i = 0; !rc && i < c.ngemm; i++)
        rc = alloc_gemm(&c, &c.g[i]);
    if (!rc)
        rc = alloc_att(&c, &c.at);
    if (!rc)
        rc = alloc_head(&c, &c.hd);
    if (rc)
        sdp_err(rc, "calibrate: the compute pass's tensors");
    for (int r = 0; !rc && r < (c.on_gpu ? c.nranks : 1); r++) {
        double head = 0.0, elem = 0.0;
        const char *who = c.on_gpu ? "GPU" : "CPU worker";
        rc = measure_alone(&c, r, m, &gemm, &att);
        if (!rc && ((head = single_rate(&c, r, 0)) <= 0.0 || (elem = single_rate(&c, r, 1)) <= 0.0))
            rc = sdp_err(-EIO, "calibrate: the LM head or SwiGLU on %s %d", who, r);
        if (!rc)
            SDP_INFO("calibrate: %s %d: LM head N %d C %d V %d (logits, loss, gradients): %.1f %s; "
                     "element-wise (SwiGLU forward): %.1f GB/s",
                     who, r, c.hd.s.m, c.hd.s.k, c.hd.s.n, in_unit(&c, head), unit_name(&c),
                     elem / 1e9);
        if (c.on_gpu)
            m->gpu[r].bf16_flops = gemm, m->gpu[r].attention_flops = att,
            m->gpu[r].head_flops = head, m->gpu[r].elem_bps = elem;
        else
            m->cpu_gemm_flops = gemm, m->cpu_attention_flops = att, m->cpu_head_flops = head,
            m->cpu_elem_bps = elem;
    }
    if (!rc && !c.on_gpu)
        rc = measure_all_cpus(&c, m);
    release_all(&c);
    if (!rc && c.on_gpu)
        rc = measure_launch(m);
    if (!c.on_gpu)
        sdp_tasks_set_ranks(0, NULL);
    return rc;
}
