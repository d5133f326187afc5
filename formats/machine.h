/* SPDX-License-Identifier: MIT */
/* The machine description: what `slidedp calibrate` measured on this node, the input of the
 * step-time model beside the plan.  Per-resource rates (host AdamW and fp32 -> bf16 cast bytes/s
 * for each thread count up to the cores, DRAM copy bytes/s, per-task overheads, and per GPU the
 * pinned H2D copy and the D2H into a host stage, bytes/s alone and with every GPU copying at once,
 * bf16 GEMM and attention FLOP/s; without a GPU, the CPU workers' fp32 GEMM and attention FLOP/s;
 * measured under an MPI launcher, the link to the other nodes: node_link {gbs, latency_us}) and
 * the identity of the node they were measured on (host, CPU model, cores, GPU model), which a
 * later run compares with its own to refuse a stale file.
 *
 * Stored as JSON (jansson), version SDP_MACHINE_VERSION; a rate that was not measured (no CUDA
 * worker, say) is null in the file and 0 here.  Reading never fails hard: a missing, stale or
 * malformed file is reported once (the file, what is wrong, `slidedp calibrate -o FILE` as the
 * fix) and the caller gets the defaults, the reference node of docs/performance.md (1 H200, 16
 * cores).  Plain C: no StarPU, no CUDA; the GPU identity is the caller's to give. */
#ifndef SDP_MACHINE_H
#define SDP_MACHINE_H

#define SDP_MACHINE_VERSION     1
#define SDP_MACHINE_MAX_THREADS 256 /* thread counts kept for the host kernels */
#define SDP_MACHINE_MAX_GPUS    16
#define SDP_MACHINE_MAX_GEMMS   8
#define SDP_MACHINE_NAME_LEN    128

/** A GEMM rate: (M, K) x (K, N) in FLOP/s, the forward, backward-data and backward-weight
 * products' FLOPs (2 M K N each) over their summed time. */
struct sdp_machine_gemm {
    int m, k, n;
    double flops;
};

/** One GPU's rates; 0 = not measured. */
struct sdp_machine_gpu {
    char name[SDP_MACHINE_NAME_LEN];
    double h2d_bps, d2h_bps;               /* pinned copy; D2H into a stage; this GPU alone */
    double h2d_shared_bps, d2h_shared_bps; /* this GPU while every GPU copies at once */
    double h2d_busy_bps;                   /* alone, while every other core runs AdamW */
    double bf16_flops;                     /* GEMM rate over the shapes, FLOP-weighted */
    double attention_flops;                /* causal attention fwd+bwd, the half counted */
    double head_flops;                     /* the LM head + cross-entropy task, 3 x 2 N C V */
    double elem_bps;                       /* element-wise kernels (SwiGLU), bytes moved/s */
    double mem_bytes;                      /* the GPU's memory, as the driver reports it */
    double base_bytes; /* in use before the run allocates (the CUDA context, other processes) */
};

/** The node and its rates (bytes/s, FLOP/s, seconds); 0 = not measured. */
struct sdp_machine {
    char host[SDP_MACHINE_NAME_LEN], cpu[SDP_MACHINE_NAME_LEN];
    int cores;                                 /* online CPU cores */
    int gpus;                                  /* GPUs described in gpu[] */
    int nthreads;                              /* entries of the two tables below */
    double adamw_bps[SDP_MACHINE_MAX_THREADS]; /* [t - 1]: t threads; 28 B per parameter */
    double cast_bps[SDP_MACHINE_MAX_THREADS];  /* [t - 1]: fp32 -> bf16, 6 B per element */
    int adamw_workers;          /* the runtime's CPU workers when adamw_workers_bps was measured */
    double adamw_workers_bps;   /* AdamW's codelet on those workers, as the step's update lane */
    double dram_bps;            /* memcpy, read + write bytes per second */
    double task_submit_s;       /* StarPU submission of one task */
    double task_s;              /* one empty task, submitted to ended */
    double kernel_launch_s;     /* a tiny task on a CUDA worker over an empty one */
    double cpu_gemm_flops;      /* fp32 GEMMs one at a time on one CPU worker (a chain's rate) */
    double cpu_gemm_flops_all;  /* fp32 GEMMs one per CPU worker at once, summed */
    double cpu_attention_flops; /* fp32 causal attention fwd+bwd on one CPU worker */
    double cpu_head_flops;      /* fp32 LM head + cross-entropy on one CPU worker */
    double cpu_elem_bps;        /* fp32 element-wise kernels (SwiGLU) on one CPU worker, B/s */
    struct sdp_machine_gpu gpu[SDP_MACHINE_MAX_GPUS];
    int ngemm; /* the compute workers' shapes: GPU 0's bf16 with GPUs, else one CPU worker's fp32 */
    struct sdp_machine_gemm gemm[SDP_MACHINE_MAX_GEMMS];
    double host_mem_bytes; /* memory a run could take when it was measured (MemAvailable) */
    double calib_s;        /* how long the calibration took */
    /* the link between nodes (`calibrate` under an MPI launcher: a ping-pong of node 0 and 1),
     * one-way GB/s and a message's latency in us; 0: not measured.  Optional in the file: a file
     * without node_link (one node's calibration, or an older file) is complete without it */
    double node_gbs, node_latency_us;
    int ndefaulted; /* after sdp_machine_load: fields missing from the file, taken from defaults */
};

/** The reference node's figures (1 H200, a 16-core Xeon; BENCH.md and the seed): AdamW rising
 * with the threads to 183 GB/s at 16, PCIe 55 GB/s alone and the seed's ratio shared, bf16
 * GEMM 700 TFLOP/s, attention 336 TFLOP/s; the CPU compute rates 0 (not measured: the reference
 * node computes on its GPU).  Names are empty: the defaults are never stale. */
void sdp_machine_defaults(struct sdp_machine *m);

/** Fill host, cpu and cores from this node (gethostname, /proc/cpuinfo, sysconf), and gpus and
 * the GPU names from the NVIDIA driver's /proc files (0 GPUs without them); the rates are left as
 * they are. */
void sdp_machine_identify(struct sdp_machine *m);

/** Rate of the host kernels with `threads` threads (clamped to the table); 0 if the table is
 * empty. */
double sdp_machine_adamw_bps(const struct sdp_machine *m, int threads);
double sdp_machine_cast_bps(const struct sdp_machine *m, int threads);

/** Write m to path atomically (path.tmp, fsync, rename).  @return 0 or a negative errno (logged
 * with the path) */
int sdp_machine_save(const char *path, const struct sdp_machine *m);

/** Read path into m.  here (may be NULL: no staleness check) is this node's identity: a file
 * measured on another host name, CPU model, core count or GPU model (when here names a GPU) is
 * stale.  A field missing from the file takes its default, logged with its name and counted in
 * m->ndefaulted.  @return 0; or, with m set to the defaults and the problem logged with the file
 * and the fix: -ENOENT (no such file), -ESTALE (another machine), -EINVAL (not JSON, a wrong
 * type, a negative or non-finite rate, another format or version), -EIO (unreadable) */
int sdp_machine_load(const char *path, const struct sdp_machine *here, struct sdp_machine *m);

#endif
