/* SPDX-License-Identifier: MIT */
/* `slidedp calibrate`: short microbenchmarks of this node, saved as the machine file
 * (formats/machine.h) the step-time model reads.  On the host, once StarPU has stopped (its
 * workers would compete for the cores): the project's own AdamW and fp32 -> bf16 cast kernels
 * (codelets/cpu/, as bench/host_adamw runs them) over 1 to all cores, and a memcpy over all cores
 * for the DRAM bandwidth.  Before them, through the runtime: the submission and the life of a task
 * that does nothing (sdp_task_zero of one element), AdamW's codelet on every CPU worker
 * (cli/calibrate_update.c), with CUDA workers the pinned H2D copy and
 * the D2H of each GPU alone and of all at once, then the GEMM and attention rates of the compute
 * workers (cli/calibrate_compute.c: each GPU, else the CPU workers) and the launch overhead.
 * Without a CUDA worker the GPU rates are absent.  Started by an MPI launcher with several
 * processes, first the link between node 0 and node 1 (a ping-pong, runtime/nodes.h), then node 0
 * alone measures itself and writes the file.  Each figure is the median of a few timed passes
 * after an untimed one; progress goes to stderr. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "base/fsutil.h"
#include "base/hostmem.h"
#include "base/sdp_log.h"
#include "base/splitmix.h"
#include "cli/calibrate.h"
#include "cli/cli.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#include "codelets/sdp_tasks.h"
#include "formats/machine.h"
#include "policies/sdp_policies.h"
#include "runtime/gpu_link.h"
#include "runtime/init.h"
#include "runtime/hint.h"
#include "runtime/nodes.h"
#include "runtime/tensor.h"

/* Sizes of the host passes: each well beyond a last-level cache (tens of MiB), long enough that
 * starting the threads is a small part of a pass at full rate, and short enough that 1 to 16
 * thread counts take seconds: AdamW 32 Mi parameters (896 MiB moved at 28 B each), the cast 16 Mi
 * elements (96 MiB at 6 B), the copy 128 MiB (256 MiB moved). */
#define ADAMW_N ((size_t)32 << 20)
#define CAST_N  ((size_t)16 << 20)
#define COPY_N  ((size_t)128 << 20)
#define REPS    3          /* timed passes per figure, after one untimed */
#define SLICE   (1u << 20) /* elements per kernel call, about a codelet's chunk */
#define NTASKS  2000       /* empty tasks timed */

enum hkind { H_ADAMW, H_CAST, H_COPY };

/* The buffers of the host passes (those of the kind being timed are allocated). */
struct hbufs {
    float *p, *m, *v, *src;
    uint16_t *g, *w, *dst;
    char *a, *b;
};

struct hjob {
    enum hkind kind;
    struct hbufs *b;
    size_t lo, hi;
    int step;
    atomic_int *stop; /* a background load's: run until set */
};

static void *hwork(void *arg)
{
    const struct hjob *j = arg;
    const struct sdp_adamw_hp hp = { .lr = 1e-4f,
                                     .beta1 = 0.9f,
                                     .beta2 = 0.999f,
                                     .eps = 1e-8f,
                                     .weight_decay = 0.1f,
                                     .gscale = 1.0f,
                                     .step = j->step };
    struct hbufs *b = j->b;
    for (size_t i = j->lo; i < j->hi; i += SLICE) {
        const size_t n = j->hi - i < SLICE ? j->hi - i : SLICE;
        if (j->kind == H_ADAMW)
            sdp_cpu_adamw_gbf16(b->p + i, b->g + i, b->m + i, b->v + i, b->w + i, NULL, n, &hp, 1,
                                0);
        else if (j->kind == H_CAST)
            sdp_cpu_cast_bf16(b->dst + i, b->src + i, n);
        else
            memcpy(b->b + i, b->a + i, n);
    }
    return NULL;
}

/* One pass of kind over n elements cut into t contiguous ranges.  @return seconds, or -1 */
static double hpass(enum hkind kind, struct hbufs *b, size_t n, int t, int step)
{
    pthread_t th[SDP_MACHINE_MAX_THREADS];
    struct hjob jobs[SDP_MACHINE_MAX_THREADS];
    double t0 = sdp_cli_now_s();
    int started = 0;
    for (int i = 0; i < t; i++) {
        jobs[i] =
            (struct hjob){ kind, b,   n * (size_t)i / (size_t)t, n * (size_t)(i + 1) / (size_t)t,
                           step, NULL };
        if (i > 0 && pthread_create(&th[i], NULL, hwork, &jobs[i]) != 0)
            break;
        started = i + 1;
    }
    hwork(&jobs[0]); /* the calling thread takes the first range */
    for (int i = 1; i < started; i++)
        pthread_join(th[i], NULL);
    return started == t ? sdp_cli_now_s() - t0 : -1.0;
}

/* Bytes per second of kind with t threads: median of REPS passes after one.  0 on failure. */
static double hrate(enum hkind kind, struct hbufs *b, size_t n, double bytes, int t)
{
    double s[REPS];
    for (int r = -1; r < REPS; r++) {
        double dt = hpass(kind, b, n, t, r + 2);
        if (dt <= 0.0)
            return 0.0;
        if (r >= 0)
            s[r] = dt;
    }
    return bytes / sdp_cli_median(s, REPS);
}

/* The AdamW buffers of b (ADAMW_N parameters, typical values), and the cast's if cast.
 * @return 0 or -ENOMEM (logged) */
static int adamw_bufs(struct hbufs *b, int cast)
{
    uint64_t x = 0x5eed;
    b->p = sdp_host_map(ADAMW_N * sizeof(float));
    b->m = sdp_host_map(ADAMW_N * sizeof(float));
    b->v = sdp_host_map(ADAMW_N * sizeof(float));
    b->g = sdp_host_map(ADAMW_N * sizeof(uint16_t));
    b->w = sdp_host_map(ADAMW_N * sizeof(uint16_t));
    if (cast)
        b->src = sdp_host_map(CAST_N * sizeof(float)),
        b->dst = sdp_host_map(CAST_N * sizeof(uint16_t));
    if (!b->p || !b->m || !b->v || !b->g || !b->w || (cast && (!b->src || !b->dst)))
        return sdp_err(-ENOMEM, "calibrate: %zu MiB for the host kernels' buffers",
                       (ADAMW_N * 16 + (cast ? CAST_N * 6 : 0)) >> 20);
    for (size_t i = 0; i < ADAMW_N; i++) {
        b->p[i] = sdp_splitmix_unit(&x);
        b->m[i] = 1e-3f * sdp_splitmix_unit(&x);
        b->v[i] = 1e-5f * (1.0f + sdp_splitmix_unit(&x));
        b->g[i] = sdp_f32_to_bf16(1e-2f * sdp_splitmix_unit(&x));
    }
    for (size_t i = 0; cast && i < CAST_N; i++)
        b->src[i] = sdp_splitmix_unit(&x);
    return 0;
}

static void hbufs_free(struct hbufs *b)
{
    sdp_host_unmap(b->p, ADAMW_N * sizeof(float)), sdp_host_unmap(b->m, ADAMW_N * sizeof(float));
    sdp_host_unmap(b->v, ADAMW_N * sizeof(float));
    sdp_host_unmap(b->g, ADAMW_N * sizeof(uint16_t)),
        sdp_host_unmap(b->w, ADAMW_N * sizeof(uint16_t));
    sdp_host_unmap(b->src, CAST_N * sizeof(float)),
        sdp_host_unmap(b->dst, CAST_N * sizeof(uint16_t));
}

/* AdamW and cast bytes/s for 1 to m->nthreads threads.  @return 0 or -ENOMEM (logged) */
static int measure_kernels(struct sdp_machine *m)
{
    struct hbufs b = { 0 };
    int rc = adamw_bufs(&b, 1);
    for (int t = 1; !rc && t <= m->nthreads; t++) {
        m->adamw_bps[t - 1] = hrate(H_ADAMW, &b, ADAMW_N, 28.0 * ADAMW_N, t);
        m->cast_bps[t - 1] = hrate(H_CAST, &b, CAST_N, 6.0 * CAST_N, t);
        SDP_INFO("calibrate: %2d thread%s: AdamW %.2f GB/s, cast %.2f GB/s", t, t > 1 ? "s" : "",
                 m->adamw_bps[t - 1] / 1e9, m->cast_bps[t - 1] / 1e9);
    }
    hbufs_free(&b);
    return rc;
}

/* The host's update lane as a background load: n threads running AdamW over their ranges of b
 * until stop is set (the transfers' rate under it is what the step sees at its boundary). */
struct hload {
    struct hbufs b;
    struct hjob jobs[SDP_MACHINE_MAX_THREADS];
    pthread_t th[SDP_MACHINE_MAX_THREADS];
    atomic_int stop;
    int n;
};

static void *hload_work(void *arg)
{
    struct hjob *j = arg;
    while (!atomic_load(j->stop))
        hwork(j), j->step++;
    return NULL;
}

/* Start n threads of AdamW (n >= 1).  @return 0 or a negative errno (logged) */
static int hload_start(struct hload *l, int n)
{
    int rc = adamw_bufs(&l->b, 0);
    atomic_init(&l->stop, 0);
    l->n = 0;
    for (int i = 0; !rc && i < n; i++) {
        l->jobs[i] = (struct hjob){ H_ADAMW,
                                    &l->b,
                                    ADAMW_N * (size_t)i / (size_t)n,
                                    ADAMW_N * (size_t)(i + 1) / (size_t)n,
                                    1,
                                    &l->stop };
        if (pthread_create(&l->th[i], NULL, hload_work, &l->jobs[i]) != 0)
            rc = sdp_err(-EAGAIN, "calibrate: the background AdamW's thread %d of %d", i + 1, n);
        else
            l->n = i + 1;
    }
    return rc;
}

static void hload_stop(struct hload *l)
{
    atomic_store(&l->stop, 1);
    for (int i = 0; i < l->n; i++)
        pthread_join(l->th[i], NULL);
    hbufs_free(&l->b);
}

/* memcpy bytes/s (read + write) over every core.  @return 0 or -ENOMEM (logged) */
static int measure_dram(struct sdp_machine *m)
{
    struct hbufs b = { 0 };
    b.a = sdp_host_map(COPY_N);
    b.b = sdp_host_map(COPY_N);
    if (!b.a || !b.b) {
        sdp_host_unmap(b.a, COPY_N), sdp_host_unmap(b.b, COPY_N);
        return sdp_err(-ENOMEM, "calibrate: 2 x %zu MiB for the copy", COPY_N >> 20);
    }
    memset(b.a, 1, COPY_N);
    memset(b.b, 0, COPY_N);
    m->dram_bps = hrate(H_COPY, &b, COPY_N, 2.0 * COPY_N, m->nthreads);
    SDP_INFO("calibrate: DRAM copy over %d threads: %.2f GB/s", m->nthreads, m->dram_bps / 1e9);
    sdp_host_unmap(b.a, COPY_N), sdp_host_unmap(b.b, COPY_N);
    return 0;
}

/* The submission and the life (submitted to ended, one after the other through their data) of a
 * task that does nothing worth timing: the zeroing of one element.  @return 0 or the runtime's
 * error (logged) */
static int measure_tasks(struct sdp_machine *m)
{
    sdp_rt_tensor_t *t = NULL;
    const struct sdp_task_opts o = { 0 };
    double t0, t1, t2;
    int rc = sdp_rt_tensor_create(&t, SDP_F32, 1, "calibrate.empty");
    for (int i = 0; !rc && i < 50; i++) /* untimed: the workers wake, the perfmodel loads */
        rc = sdp_task_zero(&o, t);
    if (!rc)
        rc = sdp_rt_wait_all();
    t0 = sdp_cli_now_s();
    for (int i = 0; !rc && i < NTASKS; i++)
        rc = sdp_task_zero(&o, t);
    t1 = sdp_cli_now_s();
    if (!rc)
        rc = sdp_rt_wait_all();
    t2 = sdp_cli_now_s();
    if (t)
        sdp_rt_tensor_release(t);
    if (rc)
        return sdp_err(rc, "calibrate: the empty tasks");
    m->task_submit_s = (t1 - t0) / NTASKS;
    m->task_s = (t2 - t0) / NTASKS;
    SDP_INFO("calibrate: a task: %.1f us to submit, %.1f us submitted to ended",
             m->task_submit_s * 1e6, m->task_s * 1e6);
    return 0;
}

/* The GPU passes: a working copy of GPU_N bf16 elements in GPU_CHUNK chunks, cast on the host
 * from an fp32 master and pulled by each GPU as the parameter route's H2D pulls it, through
 * StarPU: 128 MiB per GPU per pass.  The D2H is the CUDA copies a gradient's return makes, timed
 * on the GPU (runtime/gpu_link.h): StarPU's fetch of a replica into host memory, requested by
 * the calibration rather than by a host task's worker, ran well below the rate the step's
 * returns move (bench/results/2026-12-06-h100-predict3.md). */
#define GPU_N     ((size_t)64 << 20)
#define GPU_CHUNK ((size_t)8 << 20)
#define GPU_REPS  3

struct gpu_bufs {
    sdp_rt_tensor_t *master, *work;
    sdp_rt_tensor_t *rep[SDP_MACHINE_MAX_GPUS];
};

static struct sdp_task_opts gpu_opts(enum sdp_phase ph, int chunk, int rank, int on_rank)
{
    struct sdp_task_opts o = { 0 };
    o.hint.group = 1;
    o.hint.chunk = chunk;
    o.hint.mb = -1;
    o.hint.phase = ph;
    o.hint.rank = rank;
    o.on_rank = on_rank;
    return o;
}

/* One H2D pass over the GPUs of mask: every GPU of mask pulls each chunk of the working copy, cast
 * beforehand (untimed: the timed part is the link, not the cast).  @return seconds, or -1 */
static double gpu_pass(struct gpu_bufs *b, int ngpu, unsigned mask)
{
    const int nc = sdp_rt_tensor_nparts(b->work);
    double t0;
    int rc = 0;
    for (int c = 0; !rc && c < nc; c++) {
        struct sdp_task_opts o = gpu_opts(SDP_PH_CAST, c, 0, 0);
        rc = sdp_task_cast(&o, sdp_rt_tensor_part(b->work, c), sdp_rt_tensor_part(b->master, c));
    }
    if (!rc)
        rc = sdp_rt_wait_all();
    t0 = sdp_cli_now_s();
    for (int c = 0; !rc && c < nc; c++)
        for (int g = 0; !rc && g < ngpu; g++) {
            struct sdp_task_opts o = gpu_opts(SDP_PH_CAST, c, g, 1);
            if (mask >> g & 1)
                rc = sdp_task_param_copy(&o, sdp_rt_tensor_part(b->rep[g], c),
                                         sdp_rt_tensor_part(b->work, c));
        }
    if (!rc)
        rc = sdp_rt_wait_all();
    t0 = sdp_cli_now_s() - t0;
    for (int g = 0; g < ngpu; g++)
        if (mask >> g & 1)
            sdp_rt_tensor_discard(b->rep[g]); /* the next pass moves every chunk again */
    return rc ? -1.0 : t0;
}

/* Bytes/s per GPU of a direction for the GPUs of mask: median of GPU_REPS passes after one. */
static double gpu_rate(struct gpu_bufs *b, int ngpu, unsigned mask, int d2h)
{
    double s[GPU_REPS], bps = 0.0;
    if (d2h) {
        int rc = sdp_rt_gpu_link_bps(mask, 1, 2 * GPU_N, 2 * GPU_CHUNK, GPU_REPS, &bps);
        return rc ? 0.0 : bps;
    }
    for (int r = -1; r < GPU_REPS; r++) {
        double dt = gpu_pass(b, ngpu, mask);
        if (dt <= 0.0)
            return 0.0;
        if (r >= 0)
            s[r] = dt;
    }
    return 2.0 * GPU_N / sdp_cli_median(s, GPU_REPS);
}

/* Each GPU's H2D alone while the other cores run AdamW: the step's boundary, where the next
 * forward's uploads cross the host's update.  @return 0 or a negative errno (logged) */
static int measure_busy(struct sdp_machine *m, struct gpu_bufs *b, int ngpu)
{
    struct hload l = { 0 };
    const int n = m->cores - ngpu > 1 ? m->cores - ngpu : 1;
    int rc = hload_start(&l, n < SDP_MACHINE_MAX_THREADS ? n : SDP_MACHINE_MAX_THREADS);
    for (int g = 0; !rc && g < ngpu; g++) {
        m->gpu[g].h2d_busy_bps = gpu_rate(b, ngpu, 1u << g, 0);
        SDP_INFO("calibrate: GPU %d alone, %d threads in AdamW: H2D %.2f GB/s", g, l.n,
                 m->gpu[g].h2d_busy_bps / 1e9);
        if (m->gpu[g].h2d_busy_bps <= 0.0)
            rc = sdp_err(-EIO, "calibrate: the transfers of GPU %d under load failed", g);
    }
    hload_stop(&l);
    return rc;
}

/* Cast-and-copy H2D and D2H of each GPU alone, then of every GPU at once.  StarPU running with
 * ngpu CUDA workers as ranks.  @return 0 or a negative errno (logged) */
static int measure_gpus(struct sdp_machine *m, int ngpu)
{
    struct gpu_bufs b = { 0 };
    size_t parts[GPU_N / GPU_CHUNK];
    int rc, nc = (int)(GPU_N / GPU_CHUNK);
    for (int c = 0; c < nc; c++)
        parts[c] = GPU_CHUNK;
    for (int g = 0; g < ngpu; g++) /* before this pass allocates: the context, the libraries */
        m->gpu[g].base_bytes = (double)sdp_rt_gpu_mem_used(g);
    rc = sdp_rt_tensor_create_host(&b.master, SDP_F32, GPU_N, "calibrate.master");
    if (!rc)
        rc = sdp_rt_tensor_create(&b.work, SDP_BF16, GPU_N, "calibrate.work");
    if (!rc)
        rc = sdp_rt_tensor_partition(b.master, nc, parts);
    if (!rc)
        rc = sdp_rt_tensor_partition(b.work, nc, parts);
    for (int g = 0; !rc && g < ngpu; g++) {
        /* pinned host memory behind it, as the gradients' */
        rc = sdp_rt_tensor_create(&b.rep[g], SDP_BF16, GPU_N, "calibrate.replica");
        if (!rc)
            rc = sdp_rt_tensor_partition(b.rep[g], nc, parts);
    }
    for (int g = 0; !rc && g < ngpu; g++) {
        struct sdp_machine_gpu *d = &m->gpu[g];
        d->mem_bytes = (double)sdp_rt_gpu_mem_total(g);
        d->h2d_bps = gpu_rate(&b, ngpu, 1u << g, 0);
        d->d2h_bps = gpu_rate(&b, ngpu, 1u << g, 1);
        SDP_INFO("calibrate: GPU %d alone: H2D %.2f GB/s, D2H %.2f GB/s", g, d->h2d_bps / 1e9,
                 d->d2h_bps / 1e9);
        if (d->h2d_bps <= 0.0 || d->d2h_bps <= 0.0)
            rc = sdp_err(-EIO, "calibrate: the transfers of GPU %d failed", g);
    }
    if (!rc) /* the host's update lane on every core that drives no GPU */
        rc = measure_busy(m, &b, ngpu);
    if (!rc && ngpu > 1) {
        const unsigned all = (1u << ngpu) - 1;
        const double h2d = gpu_rate(&b, ngpu, all, 0), d2h = gpu_rate(&b, ngpu, all, 1);
        for (int g = 0; g < ngpu; g++)
            m->gpu[g].h2d_shared_bps = h2d, m->gpu[g].d2h_shared_bps = d2h;
        SDP_INFO("calibrate: %d GPUs at once: H2D %.2f GB/s, D2H %.2f GB/s each", ngpu, h2d / 1e9,
                 d2h / 1e9);
    } else if (!rc) { /* one GPU shares its link with no other */
        m->gpu[0].h2d_shared_bps = m->gpu[0].h2d_bps;
        m->gpu[0].d2h_shared_bps = m->gpu[0].d2h_bps;
    }
    for (int g = 0; g < ngpu; g++)
        sdp_rt_tensor_release(b.rep[g]);
    sdp_rt_tensor_release(b.work);
    sdp_rt_tensor_release(b.master);
    return rc;
}

/* The runtime's part: StarPU with the project's policy, then the task overheads; the GPUs'
 * count and names.  @return 0 or a negative errno (logged) */
static int measure_runtime(struct sdp_machine *m, int gpus)
{
    struct sdp_rt_conf conf = { .ncuda = gpus, .require_cuda = gpus > 0 };
    void *policy = NULL;
    int rc, wid[SDP_MACHINE_MAX_GPUS];
    if (sdp_policy_resolve("sdp-slidedp", &policy))
        return -EINVAL;
    conf.sched_name = "sdp-slidedp";
    conf.sched_policy = policy;
    rc = sdp_rt_init(&conf);
    if (rc)
        return rc;
    /* the CUDA workers StarPU started; the names came from the driver (sdp_machine_identify) */
    m->gpus = sdp_rt_ncuda() < SDP_MACHINE_MAX_GPUS ? sdp_rt_ncuda() : SDP_MACHINE_MAX_GPUS;
    rc = sdp_tasks_init();
    if (!rc)
        rc = sdp_tasks_place_compute(m->gpus > 0);
    if (!rc && m->gpus > 0 && !(rc = sdp_rt_rank_workers(m->gpus, wid)))
        rc = sdp_tasks_set_ranks(m->gpus, wid);
    if (!rc)
        rc = measure_tasks(m);
    if (!rc)
        rc = sdp_cli_calibrate_update(m);
    if (!rc && m->gpus > 0)
        rc = measure_gpus(m, m->gpus);
    if (!rc)
        rc = sdp_cli_calibrate_compute(m);
    sdp_tasks_shutdown();
    sdp_rt_shutdown();
    return rc;
}

/* The link between nodes: a ping-pong of node 0 and 1, 8 bytes for the latency and 64 MiB for the
 * bandwidth (a gradient chunk's order: 16-64 MiB), 5 round trips each after one untimed, before
 * StarPU starts (the main thread alone).  Every node takes part; node 0 keeps the figures. */
#define LINK_BYTES (64u << 20)
#define LINK_REPS  5

static int measure_link(struct sdp_machine *m)
{
    double gbs, lat;
    if (sdp_rt_nnodes() < 2)
        return 0;
    if (sdp_rt_nodes_pingpong(LINK_BYTES, 1, &gbs, &lat) ||
        sdp_rt_nodes_pingpong(LINK_BYTES, LINK_REPS, &gbs, &lat))
        return -EIO;
    if (!(gbs > 0))
        return sdp_err(-EIO, "calibrate: the link between nodes: no time measured for %u bytes",
                       LINK_BYTES);
    m->node_gbs = gbs, m->node_latency_us = lat;
    if (sdp_rt_node() == 0)
        SDP_INFO("calibrate: node link (%s to node 1 of %d): %.2f GB/s, %.1f us a message",
                 sdp_rt_node_host(), sdp_rt_nnodes(), gbs, lat);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: slidedp calibrate [--gpus N] [-o machine.json]\n"
               "\n"
               "Measure this machine for the step-time model (under a minute on a small CPU\n"
               "machine) and save it as JSON: host AdamW and fp32->bf16 cast bytes/s for 1 to all\n"
               "cores, DRAM copy bytes/s, the per-task overheads of the runtime, the GEMM and\n"
               "attention FLOP/s of the compute workers (each GPU, else the CPU workers), and the\n"
               "GPU transfer rates where CUDA workers start (else recorded as absent).  Under an\n"
               "MPI launcher (mpirun -np N, srun), the link between the nodes too; node 0 writes.\n"
               "\n"
               "  --gpus N           CUDA workers (-1 = all found, 0 = none; -1)\n"
               "  -o, --output FILE  the machine file to write (machine.json)\n"
               "  -h, --help         this text\n");
}

static int run(const char *out, int gpus)
{
    const struct sdp_path_role outs[] = { { out, "the machine file (-o)", SDP_PATH_FILE } };
    struct sdp_machine m;
    double t0 = sdp_cli_now_s();
    if (sdp_rt_node() == 0 && sdp_paths_check(outs, 1, NULL, 0)) /* before measuring, not after */
        return SDP_EXIT_USAGE; /* as train, tokenize and export refuse outputs */
    memset(&m, 0, sizeof(m));
    if (measure_link(&m))
        return SDP_EXIT_FAILURE;
    if (sdp_rt_node() > 0) /* the other nodes: the link alone; node 0 writes the file */
        return SDP_EXIT_OK;
    sdp_machine_identify(&m);
    m.nthreads = m.cores < SDP_MACHINE_MAX_THREADS ? m.cores : SDP_MACHINE_MAX_THREADS;
    SDP_INFO("calibrate: %s, %s, %d cores; host kernels over 1 to %d threads", m.host, m.cpu,
             m.cores, m.nthreads);
    /* the runtime first: a GPU asked for and missing is refused before the host passes, which
     * then have the cores to themselves (StarPU stopped) */
    if (measure_runtime(&m, gpus) || measure_kernels(&m) || measure_dram(&m))
        return SDP_EXIT_FAILURE;
    m.host_mem_bytes = (double)sdp_rt_host_mem_available();
    m.calib_s = sdp_cli_now_s() - t0;
    if (sdp_machine_save(out, &m))
        return SDP_EXIT_FAILURE;
    SDP_INFO("calibrate: %s written (%.1f s)", out, m.calib_s);
    return SDP_EXIT_OK;
}

int sdp_cli_calibrate(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "gpus", required_argument, NULL, 'g' },
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *out = "machine.json";
    int gpus = -1, opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
        char *end;
        long v;
        switch (opt) {
        case 'g':
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < -1 || v > SDP_MACHINE_MAX_GPUS) {
                fprintf(stderr, "slidedp calibrate: --gpus expects -1 to %d, not '%s'\n",
                        SDP_MACHINE_MAX_GPUS, optarg);
                return SDP_EXIT_USAGE;
            }
            gpus = (int)v;
            break;
        case 'o':
            if (!*optarg) {
                fprintf(stderr, "slidedp calibrate: -o expects a file name\n");
                return SDP_EXIT_USAGE;
            }
            out = optarg;
            break;
        case 'h':
            usage(stdout);
            return SDP_EXIT_OK;
        default:
            usage(stderr);
            return SDP_EXIT_USAGE;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return SDP_EXIT_USAGE;
    }
    return run(out, gpus);
}
