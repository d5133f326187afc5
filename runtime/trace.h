/* SPDX-License-Identifier: MIT */
/* The task event log of a run and its Chrome/Perfetto timeline.  While tracing is on, every task
 * submitted through codelets/ records one event at its end: codelet name, phase, step, group,
 * chunk, micro-batch, the parameter version it reads or writes, the worker (id, kind, rank) and
 * its start and end times from StarPU's task profiling.  Events go to one of the six lanes of the
 * design (parameter cast, parameter H2D, activation offload/reload, GPU compute, gradient D2H, CPU
 * AdamW), plus "gradient reduction" (norms, packs, the ranks' sums) and "CPU compute" (the compute
 * lane of a CPU worker standing in for a GPU): each op's
 * lane is a field of its row in the table of ops (codelets/ops.c); a compute op that ran on a CPU
 * worker goes to CPU compute, an update that ran on a GPU (train.gpu_update) to GPU compute.
 * StarPU's own data transfers are not tasks, so no task callback sees them: the transfer lanes
 * hold the tasks that move data (param_fetch, param_chunk, param_put, act_fetch, grad_chunk, with
 * the bytes they move) and, per step, StarPU's bus counters (sdp_trace_bus).  param_chunk and
 * grad_chunk are transfer tasks (codelets/cl_common.h): their start and end are a chunk's copy
 * over PCIe; the others' transfers are StarPU's, before the task starts.
 * Parameter version: the number of updates applied to the weights an event reads.  Compute and
 * reduction tasks of step s read version s; the adamw of step s produces version s + 1.
 * Waits (sdp_trace_wait) are events too: time that ready work spent held back by a policy.
 * The events log (JSONL) is what tools/check_invariants.py checks.  StarPU-free header.
 * Test: tests/e2e/test_e2e_trace.sh. */
#ifndef SDP_TRACE_H
#define SDP_TRACE_H

struct starpu_task;

/* Lanes, in their timeline order; the index is the Chrome thread id. */
enum sdp_trace_lane {
    SDP_LANE_PARAM_CAST,  /* "param cast": the casts that write the working copy from the
                             masters (AdamW writes it too, on the CPU AdamW lane) */
    SDP_LANE_PARAM_H2D,   /* "param H2D": the tasks that bring weights to the GPU */
    SDP_LANE_ACT_OFFLOAD, /* "activation offload/reload" (act_fetch) */
    SDP_LANE_GPU_COMPUTE, /* "GPU compute" */
    SDP_LANE_GRAD_REDUCE, /* "gradient reduction" */
    SDP_LANE_GRAD_D2H,    /* "gradient D2H" (grad_chunk, bus samples) */
    SDP_LANE_CPU_ADAMW,   /* "CPU AdamW" */
    SDP_LANE_CPU_COMPUTE, /* "CPU compute": compute ops that ran on a CPU worker */
    SDP_NLANES
};

/* What the submitter knows about a task (the strings are not copied: static storage). */
struct sdp_trace_tag {
    const char *name;  /* codelet name */
    const char *phase; /* "cast", "fwd", "recompute", "bwd", "loss", "norm", "update" */
    int step, group, chunk, mb;
    int rank;                 /* data-parallel rank the task belongs to (0 for shared work) */
    int version;              /* parameter version (see above) */
    int grad_lim;             /* struct sdp_hint's: > 0, it writes no gradient chunk from it on */
    int tied;                 /* struct sdp_hint's: 1, it reads the tied embedding's weights too */
    int stage1;               /* struct sdp_hint's: 1 + sdp-roundpipe's stage, 0: none */
    int round1;               /* struct sdp_hint's: 1 + the stage's round, 0: none */
    long long bytes;          /* on the transfer lanes (parameter H2D, activation offload/reload,
                                 gradient D2H): the bytes the task moves; else 0 */
    enum sdp_trace_lane lane; /* SDP_LANE_GPU_COMPUTE becomes CPU_COMPUTE on a CPU worker */
};

/** The lane's display name. */
const char *sdp_trace_lane_name(enum sdp_trace_lane lane);

/** Enable StarPU's task profiling and start recording (drops events of an earlier trace).  Call
 * after StarPU started, before the tasks to trace are submitted.  @return 0 or a negative errno */
int sdp_trace_start(void);

/** StarPU's clock (microseconds) and the trace's base on it (sdp_trace_start). */
double sdp_trace_now_us(void);
double sdp_trace_base_us(void);
/** A run over several nodes (runtime/nodes.h): every event of this process gets "cluster_node":
 * node, its rank becomes the run's (rank0 + the node's rank), and shift (microseconds) moves its
 * times onto node 0's clock and trace base, so that the logs of all nodes merge
 * (tools/check_invariants.py).  Before sdp_trace_write. */
void sdp_trace_set_node(int node, int rank0, double shift);

/** 1 while recording (read by the task submission to decide whether to attach its callback). */
int sdp_trace_enabled(void);

/** Record the end of task (call from its callback: the profiling times are set then).  Tasks
 * without profiling information (submitted before sdp_trace_start) are skipped. */
void sdp_trace_task_done(struct starpu_task *task, const struct sdp_trace_tag *tag);

/** Record StarPU's bus counters since the previous sample (or sdp_trace_start) as events of
 * `step`: per bus that moved bytes between the host and a GPU, or GPU to GPU, the bytes and
 * transfers ("h2d" on the parameter H2D lane, "d2h" on the gradient D2H lane, "p2p"), spanning
 * the time since that sample.  StarPU's transfers are not tasks: no task event sees them, and a
 * bus does not tell a weight from an activation, so these are totals per direction, for the
 * bytes per step beside the formulas (tools/lane_util.py; the bench's own count,
 * sdp_rt_bus_count_read, keeps its baseline apart).  StarPU's STARPU_BUS_STATS summary then covers
 * only what follows the last read of its counters.  No-op unless recording. */
void sdp_trace_bus(int step);

/** Record a wait: work of (rank, step, group, chunk) that was ready on lane but held back from
 * start_us to end_us (the clock of starpu_timing_now(), in microseconds), for the reason why
 * (static storage, not copied; e.g. "staging full").  In the events log it is a line with
 * "event": "wait" (and "kind": "wait", "phase": "wait", "name": "wait: <why>"); in the Chrome
 * trace a slice "wait: <why>" on the lane.  Does nothing unless recording.  Called by scheduling
 * policies (sdp-slidedp's backpressure). */
void sdp_trace_wait(int lane, int rank, int step, int group, int chunk, double start_us,
                    double end_us, const char *why);

/** Number of events recorded so far. */
long sdp_trace_nevents(void);

/** Write the events (JSON Lines) and/or the Chrome trace (either path may be NULL).  Call after
 * sdp_rt_wait_all(), so that every task has recorded its event.  @return 0 or a negative errno */
int sdp_trace_write(const char *events_jsonl, const char *chrome_json);

/** Stop recording, restore StarPU's profiling status and free the events.  Call while StarPU
 * still runs. */
void sdp_trace_stop(void);

#endif
