/* SPDX-License-Identifier: MIT */
/* StarPU start/stop and host facts (memory available, peak RSS).  OpenBLAS is pinned to one thread:
 * each StarPU CPU worker already owns a core, and a single-threaded GEMM keeps results
 * bit-identical whatever worker runs a task. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hwloc.h>
#include <starpu.h>
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
#include <cblas.h>
#endif

#include "base/env.h"
#include "runtime/init.h"
#include "runtime/nodes.h"
#include "base/sdp_log.h"

static int gpu_capped; /* sdp_rt_gpu_capped() */

static int started;

/* Cores this process may run on, as StarPU counts them: hwloc cores (hardware threads where the
 * OS reports no cores) inside the process's CPU binding (Slurm, taskset).  0 if unknown. */
static int bound_cores(void)
{
#ifdef STARPU_SIMGRID /* the cores are the simulated machine's, not this process's: no bound */
    return 0;
#endif
    hwloc_topology_t topo;
    hwloc_bitmap_t bind;
    int n = 0, type = HWLOC_OBJ_CORE;
    if (hwloc_topology_init(&topo))
        return 0;
    if (hwloc_topology_load(topo) || !(bind = hwloc_bitmap_alloc())) {
        hwloc_topology_destroy(topo);
        return 0;
    }
    if (hwloc_get_cpubind(topo, bind, HWLOC_CPUBIND_PROCESS))
        hwloc_bitmap_copy(bind, hwloc_topology_get_allowed_cpuset(topo));
    if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) <= 0)
        type = HWLOC_OBJ_PU;
    n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, bind, type);
    if (n <= 0) /* bound to part of a core's hardware threads */
        n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, bind, HWLOC_OBJ_PU);
    hwloc_bitmap_free(bind);
    hwloc_topology_destroy(topo);
    return n > 0 ? n : 0;
}

/* More CPU workers than cores only slow every task down (StarPU would start up to 128 of them on
 * any machine): keep at most one a core, plus the workers of CPU ranks (they stand in for GPUs,
 * whose workers come on top of the cores), and say so.  @return the workers to ask StarPU for. */
static int cap_cpus(const struct sdp_rt_conf *c)
{
    int cores, limit;
    if (c->ncpus <= 1 || (cores = bound_cores()) <= 0) /* one worker fits any machine */
        return c->ncpus;
    limit = cores + (c->rank_cpus > 0 ? c->rank_cpus : 0);
    if (c->ncpus <= limit)
        return c->ncpus;
    SDP_WARN("%d CPU workers asked for (--cpus, train.cpus), but this process may use %d CPU "
             "core(s): starting %d",
             c->ncpus, cores, limit);
    return limit;
}

/* The clean-buffer targets of StarPU's memory manager: 0 (no write-back ahead of need) when
 * none_ahead, else StarPU's defaults; never a value the user set. */
static void clean_buffers(int none_ahead)
{
    static const char *const var[] = { "STARPU_MINIMUM_CLEAN_BUFFERS",
                                       "STARPU_TARGET_CLEAN_BUFFERS" };
    static int ours[2]; /* var[i] holds this function's 0 */
    for (int i = 0; i < 2; i++) {
        if (none_ahead && !ours[i] && !sdp_env(var[i])) {
            setenv(var[i], "0", 1);
            ours[i] = 1;
        } else if (!none_ahead && ours[i]) {
            unsetenv(var[i]);
            ours[i] = 0;
        }
    }
}

/* STARPU_NCPU overrides train.cpus inside StarPU: the same cap, applied to the variable. */
static void cap_env_cpus(const struct sdp_rt_conf *c)
{
    long want = sdp_env_long("STARPU_NCPU", -1);
    int cores, limit;
    char buf[16];
    if (want <= 1 || (cores = bound_cores()) <= 0)
        return;
    limit = cores + (c->rank_cpus > 0 ? c->rank_cpus : 0);
    if (want <= limit)
        return;
    SDP_WARN("STARPU_NCPU=%ld asks for more CPU workers than the %d CPU core(s) this process may "
             "use: starting %d",
             want, cores, limit);
    snprintf(buf, sizeof(buf), "%d", limit);
    setenv("STARPU_NCPU", buf, 1);
}

int sdp_rt_init(const struct sdp_rt_conf *c)
{
    struct starpu_conf conf;
    int rc;
    starpu_conf_init(&conf);
    if (c->sched_policy)
        conf.sched_policy = c->sched_policy;
    else if (c->sched_name && c->sched_name[0])
        conf.sched_policy_name = c->sched_name;
    if (c->ncpus > 0)
        conf.ncpus = cap_cpus(c);
    cap_env_cpus(c);
    conf.ncuda = c->ncuda;
    conf.nopencl = 0;
#if !defined(STARPU_USE_CUDA) && !defined(STARPU_SIMGRID) /* SimGrid simulates the GPUs */
    if (c->require_cuda) {
        rc = sdp_err(-ENODEV, "the run asks for %d GPU(s) but StarPU was built without CUDA",
                     c->ncuda);
        sdp_hint("rebuild StarPU with CUDA (tools/setup-debian.sh on a machine with nvcc), or set "
                 "train.gpus: 0");
        return rc;
    }
#endif
    const char *att = sdp_env("SDP_ATTENTION");
    if (att && *att && strcmp(att, "own") && strcmp(att, "cudnn")) {
        rc = sdp_err(-EINVAL, "SDP_ATTENTION=%s is neither own nor cudnn", att);
        sdp_hint("unset it (cuDNN's fused attention where built, else the project's kernels), or "
                 "give SDP_ATTENTION=own for the project's kernels");
        return rc;
    }
    gpu_capped = c->gpu_memory_gib > 0;
    if (c->gpu_memory_gib > 0) {
        char mib[32];
        snprintf(mib, sizeof(mib), "%.0f", c->gpu_memory_gib * 1024.0);
        setenv("STARPU_LIMIT_CUDA_MEM", mib, 1);
    }
    /* StarPU writes dirty buffers back to their home node while a device idles, to keep some
     * clean for eviction; without a GPU limit nothing is evicted, and the dirty buffers are
     * gradients that tasks sum or copy out where they are, so those writes only take the bus
     * (a user's setting wins) */
    clean_buffers(!gpu_capped);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(1);
#endif
    if (!sdp_env("STARPU_SILENT"))
        setenv("STARPU_SILENT", "1", 0);
    rc = sdp_rt_nodes_starpu_init(&conf);
    if (rc == -ENODEV) {
        rc = sdp_err(rc, "StarPU found no worker (cpus=%d, cuda=%d)", c->ncpus, c->ncuda);
        sdp_hint(
            "check train.cpus in the recipe and STARPU_NCPU / STARPU_NCUDA in the environment");
        return rc;
    }
    if (rc)
        return sdp_err(rc < 0 ? rc : -EIO, "starpu_init failed");
    started = 1;
    if (c->require_cuda && (starpu_cuda_worker_get_count() == 0 ||
                            (c->ncuda > 0 && (int)starpu_cuda_worker_get_count() < c->ncuda))) {
        if (c->ncuda > 0)
            rc = sdp_err(-ENODEV,
                         "the run asks for %d GPU(s), StarPU found %u usable CUDA device(s)",
                         c->ncuda, starpu_cuda_worker_get_count());
        else
            rc = sdp_err(-ENODEV, "the run asks for GPUs, StarPU found no usable CUDA device");
        sdp_hint(
            "check nvidia-smi and CUDA_VISIBLE_DEVICES, or set train.gpus: 0 to train on CPUs");
        sdp_rt_nodes_starpu_shutdown();
        started = 0;
        return rc;
    }
    SDP_INFO("StarPU %d.%d: %u CPU workers, %u CUDA workers, policy %s", STARPU_MAJOR_VERSION,
             STARPU_MINOR_VERSION, starpu_cpu_worker_get_count(), starpu_cuda_worker_get_count(),
             c->sched_name && c->sched_name[0] ? c->sched_name : "default");
    if (starpu_cuda_worker_get_count() > 0)
        SDP_INFO("attention on the GPU in bf16: %s",
#ifdef SDP_HAVE_CUDNN_FRONTEND
                 att && !strcmp(att, "own") ? "the project's kernels (SDP_ATTENTION=own)"
                                            : "cuDNN's fused graphs"
#else
                 "the project's kernels (built without cudnn_frontend)"
#endif
        );
    return 0;
}

void sdp_rt_shutdown(void)
{
    if (!started)
        return;
    starpu_task_wait_for_all();
    sdp_rt_nodes_starpu_shutdown();
    started = 0;
}

int sdp_rt_wait_all(void)
{
    int rc = starpu_task_wait_for_all();
    return rc ? sdp_err(rc < 0 ? rc : -EIO, "waiting for tasks failed") : 0;
}

int sdp_rt_ncpus(void)
{
    return (int)starpu_cpu_worker_get_count();
}

int sdp_rt_gpu_capped(void)
{
    return gpu_capped;
}

int sdp_rt_ncuda(void)
{
    return (int)starpu_cuda_worker_get_count();
}

int sdp_rt_rank_workers(int R, int *ids)
{
    int ncuda = sdp_rt_ncuda(), ncpu = sdp_rt_ncpus();
    enum starpu_worker_archtype kind = ncuda > 0 ? STARPU_CUDA_WORKER : STARPU_CPU_WORKER;
    int have = ncuda > 0 ? ncuda : ncpu;
    if (have < R) {
        sdp_err(-EINVAL, "%d ranks need %d %s workers, StarPU has %d", R, R,
                ncuda > 0 ? "CUDA" : "CPU", have);
        sdp_hint(ncuda > 0 ? "lower train.ranks (or --ranks) to the number of GPUs"
                           : "raise train.cpus (or --cpus) to at least the number of ranks");
        return -EINVAL;
    }
    {
        /* StarPU refuses (-ERANGE) a list shorter than its workers of the kind: take them all */
        int *all = malloc((size_t)have * sizeof(*all));
        int n = all ? (int)starpu_worker_get_ids_by_type(kind, all, (unsigned)have) : -ENOMEM;
        if (n >= R)
            memcpy(ids, all, (size_t)R * sizeof(*ids));
        free(all);
        if (n < R)
            return sdp_err(n < 0 ? n : -EINVAL, "cannot list the %s workers of %d ranks",
                           ncuda > 0 ? "CUDA" : "CPU", R);
    }
    return 0;
}

/* StarPU's bus counters, added up here: reading them resets them, so the bench's count and the
 * trace's samples (runtime/trace.c) each keep a baseline of these totals instead of resetting
 * each other's. */
static pthread_mutex_t bus_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long bus_bytes[SDP_RT_MAX_BUSES], bus_transfers[SDP_RT_MAX_BUSES];
static unsigned long long count_base[SDP_RT_MAX_BUSES]; /* sdp_rt_bus_count_*'s baseline */

int sdp_rt_bus_totals(unsigned long long *bytes, unsigned long long *transfers)
{
    int nbus = starpu_bus_get_count();
    nbus = nbus < SDP_RT_MAX_BUSES ? nbus : SDP_RT_MAX_BUSES;
    pthread_mutex_lock(&bus_lock);
    for (int b = 0; b < nbus; b++) {
        struct starpu_profiling_bus_info info;
        if (starpu_bus_get_profiling_info(b, &info)) /* resets StarPU's counters */
            continue;
        bus_bytes[b] += (unsigned long long)info.transferred_bytes;
        bus_transfers[b] += (unsigned long long)info.transfer_count;
    }
    memcpy(bytes, bus_bytes, (size_t)nbus * sizeof(*bytes));
    if (transfers)
        memcpy(transfers, bus_transfers, (size_t)nbus * sizeof(*transfers));
    pthread_mutex_unlock(&bus_lock);
    return nbus;
}

/* the transfer tasks' bytes per memory node since the last read: [node][1] to it, [0] from it */
static unsigned long long task_bytes[STARPU_MAXNODES][2];

void sdp_rt_bus_count_task(int node, int to_node, unsigned long long bytes)
{
    if (node >= 0 && node < STARPU_MAXNODES)
        __atomic_fetch_add(&task_bytes[node][to_node != 0], bytes, __ATOMIC_RELAXED);
}

void sdp_rt_bus_count_start(void)
{
    starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    sdp_rt_bus_totals(count_base, NULL);
    for (int n = 0; n < STARPU_MAXNODES; n++)
        for (int d = 0; d < 2; d++)
            __atomic_store_n(&task_bytes[n][d], 0, __ATOMIC_RELAXED);
}

void sdp_rt_bus_count_read(int R, const int *workers, struct sdp_rank_bytes *out)
{
    unsigned long long now[SDP_RT_MAX_BUSES];
    int nbus = sdp_rt_bus_totals(now, NULL);
    memset(out, 0, (size_t)R * sizeof(*out));
    for (int r = 0; r < R; r++) { /* ranks on one node share its transfer tasks' bytes: once */
        int node = (int)starpu_worker_get_memory_node((unsigned)workers[r]);
        if (starpu_node_get_kind((unsigned)node) == STARPU_CPU_RAM || node >= STARPU_MAXNODES)
            continue;
        out[r].h2d += __atomic_exchange_n(&task_bytes[node][1], 0, __ATOMIC_RELAXED);
        out[r].d2h += __atomic_exchange_n(&task_bytes[node][0], 0, __ATOMIC_RELAXED);
    }
    for (int b = 0; b < nbus; b++) {
        int src = starpu_bus_get_src(b), dst = starpu_bus_get_dst(b);
        unsigned long long n = now[b] - count_base[b];
        count_base[b] = now[b];
        for (int r = 0; r < R; r++) {
            int node = (int)starpu_worker_get_memory_node((unsigned)workers[r]);
            int ram_src = starpu_node_get_kind((unsigned)src) == STARPU_CPU_RAM;
            int ram_dst = starpu_node_get_kind((unsigned)dst) == STARPU_CPU_RAM;
            if (starpu_node_get_kind((unsigned)node) == STARPU_CPU_RAM)
                continue;
            if (dst == node)
                *(ram_src ? &out[r].h2d : &out[r].peer_in) += n;
            if (src == node)
                *(ram_dst ? &out[r].d2h : &out[r].peer_out) += n;
        }
    }
}

static unsigned long long read_ull_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[64];
    unsigned long long v = 0;
    if (!f)
        return 0;
    if (fgets(buf, sizeof(buf), f) && strncmp(buf, "max", 3) != 0)
        v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

static unsigned long long proc_kb(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    char line[256];
    unsigned long long v = 0;
    size_t klen = strlen(key);
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            v = strtoull(line + klen + 1, NULL, 10) * 1024ull;
            break;
        }
    }
    fclose(f);
    return v;
}

unsigned long long sdp_rt_host_mem_available(void)
{
#ifdef SDP_SIMGRID /* the described machine's, not this one's (slidedp simulate sets it) */
    double sim = sdp_env_double("SDP_SIM_HOST_MEM", 0.0);
    if (sim > 0)
        return (unsigned long long)sim;
#endif
    unsigned long long avail = proc_kb("/proc/meminfo", "MemAvailable");
    unsigned long long limit = read_ull_file("/sys/fs/cgroup/memory.max");
    if (limit > 0) {
        unsigned long long used = read_ull_file("/sys/fs/cgroup/memory.current");
        unsigned long long room = limit > used ? limit - used : 0;
        if (avail == 0 || room < avail)
            avail = room;
    }
    return avail;
}

unsigned long long sdp_rt_gpu_mem_used(int dev)
{
#ifdef SDP_HAVE_CUDA
    size_t free_b = 0, total_b = 0;
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess)
        return 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        free_b = total_b = 0;
    cudaSetDevice(prev);
    return total_b - free_b;
#else
    (void)dev;
    return 0;
#endif
}

unsigned long long sdp_rt_gpu_mem_total(int dev)
{
#ifdef SDP_HAVE_CUDA
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess)
        return 0;
    return p.totalGlobalMem;
#elif defined(STARPU_SIMGRID) /* the described machine's (its platform's memsize) */
    for (unsigned w = 0; started && w < starpu_worker_get_count(); w++)
        if (starpu_worker_get_type((int)w) == STARPU_CUDA_WORKER &&
            starpu_worker_get_devid((int)w) == dev) {
            starpu_ssize_t t = starpu_memory_get_total(starpu_worker_get_memory_node(w));
            return t > 0 ? (unsigned long long)t : 0;
        }
    return 0;
#else
    (void)dev;
    return 0;
#endif
}

unsigned long long sdp_rt_host_peak_rss(void)
{
    return proc_kb("/proc/self/status", "VmHWM");
}

unsigned long long sdp_rt_host_rss(void)
{
    return proc_kb("/proc/self/status", "VmRSS");
}

/* ---- the memory sampler (sdp_rt_memlog_start) ---- */
static struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    FILE *f;
    double period_s, t0_us; /* t0 on starpu_timing_now's clock */
    int running, stop;
} memlog = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void memlog_sample(void)
{
    const double gib = 1073741824.0;
    starpu_ssize_t used = starpu_memory_get_used(STARPU_MAIN_RAM);
    starpu_ssize_t total = starpu_memory_get_total(STARPU_MAIN_RAM);
    fprintf(memlog.f,
            "{\"t_s\": %.3f, \"rss_gib\": %.3f, \"rss_peak_gib\": %.3f, \"host_available_gib\": "
            "%.3f, \"starpu_host_used_gib\": %.3f, \"starpu_host_total_gib\": %.3f, "
            "\"gpu_used_gib\": [",
            (starpu_timing_now() - memlog.t0_us) / 1e6, sdp_rt_host_rss() / gib,
            sdp_rt_host_peak_rss() / gib, sdp_rt_host_mem_available() / gib,
            used > 0 ? used / gib : 0.0, total > 0 ? total / gib : 0.0);
    for (int d = 0; d < sdp_rt_ncuda(); d++)
        fprintf(memlog.f, "%s%.3f", d ? ", " : "", sdp_rt_gpu_mem_used(d) / gib);
    fprintf(memlog.f, "]}\n");
    fflush(memlog.f);
}

static void *memlog_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&memlog.lock);
    while (!memlog.stop) {
        struct timespec until; /* the condition variable's clock: CLOCK_REALTIME */
        memlog_sample();
        clock_gettime(CLOCK_REALTIME, &until);
        long long ns = until.tv_nsec + (long long)(memlog.period_s * 1e9);
        until.tv_sec += (time_t)(ns / 1000000000LL);
        until.tv_nsec = (long)(ns % 1000000000LL);
        while (!memlog.stop &&
               pthread_cond_timedwait(&memlog.cond, &memlog.lock, &until) != ETIMEDOUT)
            ; /* woken early (spuriously, or by the stop): wait on unless stopping */
    }
    memlog_sample(); /* the last one, at the stop */
    pthread_mutex_unlock(&memlog.lock);
    return NULL;
}

int sdp_rt_memlog_start(const char *path, double period_s)
{
    int rc;
    if (!(period_s > 0))
        return sdp_err(-EINVAL, "memory log %s: the period must be positive, not %g s", path,
                       period_s);
    if (memlog.running)
        return sdp_err(-EBUSY, "memory log %s: a memory log is already running", path);
    memlog.f = fopen(path, "w");
    if (!memlog.f)
        return sdp_err(-errno, "memory log %s: cannot open for writing", path);
    memlog.period_s = period_s;
    memlog.t0_us = starpu_timing_now();
    memlog.stop = 0;
    rc = pthread_create(&memlog.thread, NULL, memlog_main, NULL);
    if (rc) {
        fclose(memlog.f);
        memlog.f = NULL;
        return sdp_err(-rc, "memory log %s: cannot start its thread", path);
    }
    memlog.running = 1;
    return 0;
}

void sdp_rt_memlog_stop(void)
{
    if (!memlog.running)
        return;
    pthread_mutex_lock(&memlog.lock);
    memlog.stop = 1;
    pthread_cond_signal(&memlog.cond);
    pthread_mutex_unlock(&memlog.lock);
    pthread_join(memlog.thread, NULL);
    fclose(memlog.f);
    memlog.f = NULL;
    memlog.running = 0;
}
