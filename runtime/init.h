/* SPDX-License-Identifier: MIT */
/* Starting and stopping StarPU for a run: policy, worker counts, one OpenBLAS thread per worker.
 * StarPU-free header (the policy is passed as an opaque pointer from policies/). */
#ifndef SDP_INIT_H
#define SDP_INIT_H

struct sdp_rt_conf {
    const char *sched_name; /* StarPU stock policy name, or NULL/"" for the default */
    void *sched_policy;     /* a struct starpu_sched_policy * of ours, or NULL */
    int ncpus;              /* CPU workers; 0 = all cores; more than the cores: capped, warned */
    int rank_cpus;          /* CPU workers standing in for GPUs (CPU ranks), allowed beyond the
                               cores as CUDA workers would be */
    int ncuda;              /* CUDA workers; 0 = none, -1 = all found */
    double gpu_memory_gib;  /* memory StarPU may use on each GPU; 0 = no limit */
    int require_cuda;       /* 1: fail unless the CUDA workers asked for start */
};

/** Start StarPU.  @return 0, -ENODEV (no worker), or StarPU's error (logged with a hint) */
int sdp_rt_init(const struct sdp_rt_conf *conf);
/** Wait for every task, then stop StarPU. */
void sdp_rt_shutdown(void);
/** Wait for every submitted task.  @return 0 or a negative errno */
int sdp_rt_wait_all(void);
/** Number of CPU and CUDA workers of the running instance. */
int sdp_rt_ncpus(void);
int sdp_rt_ncuda(void);
/** Whether StarPU's GPU memory is capped (sdp_rt_init's gpu_memory_gib), so that what it holds
 * must stay evictable. */
int sdp_rt_gpu_capped(void);
/** Worker ids of R data-parallel ranks: the first R CUDA workers when there are CUDA workers, else
 * the first R CPU workers (standing in for GPUs).  @return 0 or -EINVAL (too few workers: logged
 * with what to change) */
int sdp_rt_rank_workers(int R, int *ids);

/* Bytes moved over the links of one rank's memory node. */
struct sdp_rank_bytes {
    unsigned long long h2d, d2h;          /* host <-> the rank's GPU */
    unsigned long long peer_in, peer_out; /* from / to other GPUs */
};
/* The buses sdp_rt_bus_totals counts at most (StarPU numbers them from 0). */
#define SDP_RT_MAX_BUSES 256
/** StarPU's bus counters added up since the start (bytes, and transfers when not NULL, per bus
 * id): each reader keeps a baseline, since reading StarPU's counters resets them.  @return the
 * number of buses filled in */
int sdp_rt_bus_totals(unsigned long long *bytes, unsigned long long *transfers);
/** Start counting the bytes StarPU moves between memory nodes (enables StarPU's profiling). */
void sdp_rt_bus_count_start(void);
/** Bytes a task copies itself between the host and memory node `node` (a transfer task,
 * codelets/cl_common.h, counted when submitted: StarPU's bus counters never see them), for
 * sdp_rt_bus_count_read: to_node 1, host to node; 0, node to host. */
void sdp_rt_bus_count_task(int node, int to_node, unsigned long long bytes);
/** Bytes moved since sdp_rt_bus_count_start() or the previous call (which reset the counters),
 * StarPU's and the transfer tasks', for the memory nodes of R ranks' workers (CPU-worker ranks
 * share the host's node: zeros). */
void sdp_rt_bus_count_read(int R, const int *workers, struct sdp_rank_bytes *out);
/** Bytes of GPU memory in use on CUDA device dev (cudaMemGetInfo: StarPU keeps what it allocated
 * cached, so after a step this is the step's peak reservation); 0 without CUDA. */
unsigned long long sdp_rt_gpu_mem_used(int dev);
/** Total memory of CUDA device dev in bytes; 0 without CUDA. */
unsigned long long sdp_rt_gpu_mem_total(int dev);
/** The share of a CUDA device's memory StarPU allocates from when no limit is set
 * (train.gpu_memory_gib 0, no STARPU_LIMIT_CUDA_MEM): its CUDA driver's FREE_MARGIN. */
#define SDP_RT_GPU_SHARE 0.9
/** Host memory available to this process in bytes: min(MemAvailable, cgroup limit - usage); 0 if
 * unknown. */
unsigned long long sdp_rt_host_mem_available(void);
/** Peak resident set size of this process in bytes (VmHWM). */
unsigned long long sdp_rt_host_peak_rss(void);
/** Resident set size of this process in bytes (VmRSS). */
unsigned long long sdp_rt_host_rss(void);

/** Start sampling the run's memory every period_s seconds (StarPU running): one JSON line per
 * sample appended to path and flushed, so a run that stalls or is killed keeps every sample
 * before it.  Fields: t_s (since the start), rss_gib, rss_peak_gib, host_available_gib
 * (sdp_rt_host_mem_available), starpu_host_used_gib and starpu_host_total_gib (what StarPU counts
 * of the host memory it allocated itself, against the size it gives the host node), gpu_used_gib
 * (one per CUDA device, sdp_rt_gpu_mem_used).  @return 0, -EINVAL (period not positive), -EBUSY
 * (already sampling), or -errno (the file or the thread; logged with the path) */
int sdp_rt_memlog_start(const char *path, double period_s);
/** Take a last sample and stop (no-op when not sampling).  Before StarPU stops. */
void sdp_rt_memlog_stop(void);

#endif
