/* SPDX-License-Identifier: MIT */
/* The step-time model: for a plan (graph/plan.h) and a machine, the service demand of one training
 * step on each shared resource (each GPU's compute, PCIe per direction per GPU, the host link all
 * GPUs share, GPU-to-GPU copies, host DRAM, the host's cores, the link between nodes), the
 * dependency terms that keep the GPU waiting (a layer's transfer before its compute, the first
 * layers' update before the next forward, the staging bound, the backward's lookahead, the
 * parameter version), and from them the predicted step time, what bounds it, each resource's busy
 * fraction and the host, pinned and GPU peak memory.  Pure C: no StarPU, no I/O, so `slidedp plan`
 * and tests price a plan without a runtime.
 *
 * Use:
 *     struct sdp_predict_machine mc;  sdp_predict_machine_h200(&mc);   // or a calibration's
 *     struct sdp_plan p;              sdp_predict_plan_from_conf(&p, &m, &gc, 16 << 20, 1);
 *     struct sdp_predict_run run = { .m = &m, .plan = &p, .micro_batch = 16, .seq_len = 1024,
 *                                    .n_micro = 1, .work_dtype = SDP_BF16 };
 *     struct sdp_predict out;         sdp_predict_step(&run, &mc, &out);
 * A plan from sdp_plan_init (a graph's state) works as well; sdp_predict_plan_from_conf builds one
 * from the model and the graph configuration alone, for `slidedp plan` before any state exists.
 * Tests: tests/graph/test_predict.c, test_predict_nodes.c (several nodes). */
#ifndef SDP_PREDICT_H
#define SDP_PREDICT_H

#include "graph/plan.h"

/* A machine as the model sees it: one rate per resource.  Bytes/s and FLOP/s are sustained
 * figures (what a long transfer or kernel reaches), not datasheet peaks.  A rate of 0 for PCIe
 * means no link: the compute reads host memory (CPU workers) and transfers cost nothing. */
struct sdp_predict_machine {
    int ngpus;             /* 0: the compute runs on the host's cores (CPU workers) */
    double gpu_flops;      /* dense bf16 GEMM FLOP/s at the layers' shapes */
    double gpu_attn_flops; /* causal attention FLOP/s (causal half counted), forward and backward */
    double head_flops;     /* the LM head + cross-entropy task's FLOP/s (0: gpu_flops) */
    double elem_bps;       /* the element-wise kernels' bytes/s (norms, RoPE, SwiGLU, zeroing and
                              packing the gradients): their bytes read and written over time */
    double gpu_mem_bps;    /* GPU memory bytes/s (AdamW on the GPU) */
    double h2d_bps;        /* pinned host to GPU, one GPU alone */
    double h2d_busy_bps;   /* the same while the host's threads run AdamW (0: h2d_bps) */
    double d2h_bps;        /* pinned GPU to host, one GPU alone */
    double h2d_all_bps;    /* host to GPUs, all GPUs at once, summed over them */
    double d2h_all_bps;    /* GPUs to host, all at once, summed */
    double peer_bps;       /* GPU to GPU, per GPU (NVLink or through the host bridge) */
    double dram_bps;       /* host DRAM bytes/s, all cores, read-heavy streams */
    double adamw_core_bps; /* host AdamW DRAM bytes/s of one thread ... */
    double adamw_max_bps;  /* ... and where more threads stop helping (saturation) */
    double cast_core_bps;  /* host reduction / cast bytes/s of one thread, and its saturation */
    double cast_max_bps;
    int cpu_cores;                      /* every core; one per GPU drives that GPU */
    double task_s;                      /* per task: submission, scheduling, kernel launch */
    unsigned long long host_base_bytes; /* the process before the state: libraries, data */
    unsigned long long gpu_mem_bytes;   /* each GPU's memory (0: unknown), for the fit */
    unsigned long long gpu_base_bytes;  /* in use before the run allocates: the CUDA context */
    /* the link between nodes (one process per node, graph/nodes.c): one-way bytes/s in each
     * direction (full duplex) and a message's latency; 0: free.  Defaults (the machine file's
     * node_link when `calibrate` ran under an MPI launcher): SDP_PREDICT_NODE_GBS, _LATENCY_US */
    double node_bps;
    double node_latency_s;
};

/* The link between nodes when nothing measured it: a 100 Gb/s NIC (12.5 GB/s, its line rate) and
 * 10 us a message (MPI over InfiniBand takes 1-3 us, over RoCE or TCP 5-50). */
#define SDP_PREDICT_NODE_GBS        12.5
#define SDP_PREDICT_NODE_LATENCY_US 10.0

/** The H200 host of BENCH.md: 1 H200, 16 cores, figures derived in predict.c. */
void sdp_predict_machine_h200(struct sdp_predict_machine *mc);
/** A 2-core machine with CPU workers only (CI). */
void sdp_predict_machine_cpu2(struct sdp_predict_machine *mc);

/** Whether the model can price on mc: every compute, DRAM and host lane rate > 0, at least one
 * core, no negative figure (0 is allowed for the links: none).
 * @return 0 or -EINVAL (logged with the figures and a hint) */
int sdp_predict_machine_check(const struct sdp_predict_machine *mc);

/** Host bytes/s of a saturating lane (AdamW, cast) with `threads` threads:
 * min(threads * per_core, max). */
double sdp_predict_lane_bps(double per_core_bps, double max_bps, int threads);

/* What the plan does not say about a run. */
struct sdp_predict_run {
    const struct sdp_model_cfg *m;
    const struct sdp_plan *plan;
    int micro_batch;           /* B */
    int seq_len;               /* T */
    int n_micro;               /* micro-batches per step over all ranks of all nodes (each node
                                  computes n_micro / plan->nodes of them with its own ranks) */
    enum sdp_dtype work_dtype; /* the working copies' dtype (SDP_BF16) */
    int work_staged;           /* the working copies have no host home (work_home gpu) */
    int stage_buffers;         /* staged: host stages alive at once (0: unbounded) */
    double gpu_limit_bytes;    /* the runtime's cap on its GPU allocations (0: none) */
};

/* The resources, then the dependencies as a pseudo-resource (the GPU waits on them). */
enum sdp_predict_res {
    SDP_PRES_GPU,      /* one GPU's compute (with CPU workers: their cores) */
    SDP_PRES_H2D,      /* one GPU's PCIe, host to GPU */
    SDP_PRES_D2H,      /* one GPU's PCIe, GPU to host */
    SDP_PRES_LINK_H2D, /* the host's link to all GPUs, host to GPU */
    SDP_PRES_LINK_D2H, /* and GPU to host */
    SDP_PRES_PEER,     /* GPU-to-GPU copies of one GPU */
    SDP_PRES_DRAM,     /* host DRAM */
    SDP_PRES_CPU,      /* the host's cores: AdamW, reductions (and compute on CPU workers) */
    SDP_PRES_NODE,     /* the link to the other nodes, the busiest node's busier direction */
    SDP_PRES_COUNT,
    SDP_PRES_DEPS = SDP_PRES_COUNT /* bound only: the dependency chain, not a resource */
};
const char *sdp_predict_res_name(enum sdp_predict_res r);

struct sdp_predict {
    double demand_s[SDP_PRES_COUNT]; /* service demand per step (per-GPU resources: one GPU) */
    double busy[SDP_PRES_COUNT];     /* demand_s / step_s */
    double chain_s;      /* the GPU's stream: each layer's compute or its transfers, whichever is
                            longer (forward, then backward), the head, and the boundary below */
    double boundary_s;   /* exposed at the step boundary: layer 1's (and the embedding's) gradient
                            down, update, and first chunk back up before the next forward */
    double host_chain_s; /* the host's cores, and their wait each step for the first gradient:
                            the top layer's forward, the head, the top layer's backward */
    double wait_s; /* of chain_s, the GPU's wait for updated copies (the timeline, one rank) */
    /* several nodes (predict_nodes.c): the gradient's chain and ring between them */
    double node_bytes;   /* the busiest node's bytes each way a step: the fp32 gradient once
                            (2 nodes) or twice (more) */
    double node_tail_s;  /* the last chunk's trip: chain and ring, 2 (nodes - 1) hops; in
                            boundary_s */
    double node_chain_s; /* the link's chain: its wait for the step's first gradient (the forward,
                            the top layer's backward), its demand, the boundary after its last
                            chunk */
    double step_s;       /* max(chain_s, host_chain_s, node_chain_s, every demand) */
    enum sdp_predict_res bound; /* the resource whose demand is the step (SDP_PRES_NODE: or the
                                   link's chain), or SDP_PRES_DEPS */
    double tokens_per_s;
    /* the traffic and work behind the demands, per step (per-GPU figures: one GPU) */
    double gpu_flops, h2d_bytes, d2h_bytes, peer_bytes, dram_bytes, adamw_bytes, reduce_bytes;
    long long tasks;      /* tasks of one GPU's stream, per step */
    long long host_tasks; /* the chunks' tasks on the host's workers (packs, updates) */
    /* memory peaks */
    unsigned long long gpu_bytes;      /* one GPU's peak, as the driver counts it */
    unsigned long long gpu_need_bytes; /* of it, what the plan needs within a GPU limit */
    unsigned long long host_bytes;     /* the process */
    unsigned long long pinned_bytes;   /* of host_bytes, registered with the driver */
};

/** Predict one step of run on mc.
 * @return 0, or -EINVAL (a run the model cannot price: no plan, a plan of another model, B, T
 * or n_micro < 1, n_micro not a multiple of the nodes' ranks, a machine sdp_predict_machine_check
 * refuses; logged) */
int sdp_predict_step(const struct sdp_predict_run *run, const struct sdp_predict_machine *mc,
                     struct sdp_predict *out);

/** One decoder layer's GPU time for one micro-batch of B x T under placement act: its forward,
 * the recomputation act asks, its backward, and its element-wise kernels (the chooser's time
 * cost of a placement, graph/choose.h). */
double sdp_predict_layer_s(const struct sdp_model_cfg *m, int B, int T, enum sdp_dtype work,
                           const struct sdp_predict_machine *mc, enum sdp_act_place act);

/** The attention tasks' workspace budget (bytes) for plan p under gpu_limit (bytes, 0: none):
 * what the limit leaves after the plan's account (sdp_plan_gpu_bytes_min) and what stays on the
 * GPU beyond it, the same figure the prediction's GPU peak counts the attention's call within.
 * The graph gives it to its attention tasks. */
unsigned long long sdp_predict_ws_budget(const struct sdp_plan *p, const struct sdp_model_cfg *m,
                                         enum sdp_dtype dt, int B, int T,
                                         unsigned long long gpu_limit);

/** Fill p from the model and a graph configuration without a runtime state, as sdp_plan_init
 * would for a state with chunks of chunk_bytes of fp32 master, grad_bf16 the state's gradient
 * return and the working copies on the host: the same activation rule (recompute, keep_last,
 * keep_mlp), routes and early embedding update; gpu_update and mlp_early, which need to know
 * where the tasks run, are left off.  Free with sdp_plan_free.
 * @return 0, -ENOMEM, -EINVAL (keep_last or keep_mlp outside 0..L, chunk_bytes < 4: logged) */
int sdp_predict_plan_from_conf(struct sdp_plan *p, const struct sdp_model_cfg *m,
                               const struct sdp_graph_conf *c, size_t chunk_bytes, int grad_bf16);

#endif
