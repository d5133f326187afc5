/* SPDX-License-Identifier: MIT */
/* Shared plumbing of the codelet files: task submission from a buffer list, perfmodel footprints
 * from the op's shape, per-worker scratch memory, and bf16 -> fp32 views of weights for the CPU
 * kernels. Only codelets/<op>.c include this. */
#ifndef SDP_CL_COMMON_H
#define SDP_CL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <starpu.h>

#include "codelets/sdp_tasks.h"
#include "base/sdp_log.h"
#include "runtime/tensor_starpu.h"

/* The first member of every argument struct: the dimensions that decide the cost of the task.  The
 * perfmodel footprint hashes it, so that ops sharing buffers of equal size but different shapes (q
 * and o projections read the same layer vector) get separate histories. */
struct sdp_shape_key {
    int d[6];
};

struct sdp_cl_buf {
    sdp_rt_tensor_t *t;
    enum starpu_data_access_mode mode;
};

/** Build and submit one task of codelet cl.  args (argsize bytes, malloc'ed) is owned by the task
 * from here on, also on failure.  @return 0 or starpu_task_submit's error (logged) */
int sdp_cl_submit(struct starpu_codelet *cl, const struct sdp_task_opts *o, void *args,
                  size_t argsize, double flops, const struct sdp_cl_buf *bufs, int nbufs);

/** Perfmodel footprint: CRC of the task's sdp_shape_key. */
uint32_t sdp_cl_footprint(struct starpu_task *task);

/** Per-thread scratch memory: slot (0..7) grown to at least nbytes, kept for the thread's next
 * tasks. */
void *sdp_cl_scratch(int slot, size_t nbytes);

/** fp32 view of n elements at element offset off of a vector buffer that holds f32 or bf16: the
 * buffer itself, or a conversion into scratch slot. */
const float *sdp_cl_f32_view(void *vec, size_t off, size_t n, int slot);

/* Activations may be stored in bf16 (bf16 precision) or fp32.  The CPU kernels compute in fp32, so
 * a wrapper reads bf16 buffers through sdp_cl_in() (a converted copy in scratch slot), writes
 * through sdp_cl_out() and then sdp_cl_out_done(), which rounds into the buffer: the same storage
 * rounding as the GPU.  For fp32 buffers all three work in place. */
const float *sdp_cl_in(void *vec, int slot);
float *sdp_cl_out(void *vec, int slot);
/** For read-write buffers: an fp32 copy (or the buffer) to update, then sdp_cl_out_done(). */
float *sdp_cl_inout(void *vec, int slot);
void sdp_cl_out_done(void *vec, const float *p);

/* A codelet of a kernel pair under a name (and a perfmodel) of its own, so that the trace and the
 * checker tell its uses apart: var, its name, the CPU function, and `cuda`, a macro that expands
 * to `.cuda_funcs = { f }, .cuda_flags = { STARPU_CUDA_ASYNC },` or to nothing; variable
 * buffers. */
#define SDP_NAMED_CODELET(var, cl_name, cpu_fn, cuda)                                              \
    static struct starpu_perfmodel var##_pm = {                                                    \
        .type = STARPU_HISTORY_BASED,                                                              \
        .symbol = "sdp_" cl_name "_v1",                                                            \
        .footprint = sdp_cl_footprint,                                                             \
    };                                                                                             \
    struct starpu_codelet var = {                                                                  \
        .name = cl_name,                                                                           \
        .cpu_funcs = { cpu_fn },                                                                   \
        .cpu_funcs_name = { #cpu_fn },                                                             \
        cuda.nbuffers = STARPU_VARIABLE_NBUFFERS,                                                  \
        .model = &var##_pm,                                                                        \
    }

/* A codelet's CUDA implementation: `#ifdef SDP_CUDA_CODELETS .cuda_funcs = { SDP_CUDA(f) }, ...`.
 * In a CUDA build the kernel f; in a simulation build (SimGrid, no CUDA: codelets/sim.c) a
 * stand-in that StarPU never calls, so that the simulated GPUs run the codelets the real ones run,
 * in the time the simulation's cost model gives. */
#if defined(SDP_HAVE_CUDA)
#define SDP_CUDA_CODELETS 1
#define SDP_CUDA(f)       f
#elif defined(SDP_SIMGRID)
#define SDP_CUDA_CODELETS 1
#define SDP_CUDA(f)       sdp_cl_sim_cuda
void sdp_cl_sim_cuda(void *buffers[], void *cl_arg);
#endif

/** Storage dtype of a CUDA buffer for the sdp_cuda_* launchers: 1 for bf16, 0 for fp32. */
#define SDP_CL_DT(buf) (STARPU_VECTOR_GET_ELEMSIZE(buf) == 2 ? 1 : 0)

#ifdef SDP_HAVE_CUDA
/** A device workspace of at least nbytes for the calling CUDA worker (grown on demand, kept). */
void *sdp_cl_cuda_ws(int slot, size_t nbytes);
/** The calling worker's cuBLASLt workspace and its size. */
void *sdp_cl_cublaslt_ws(size_t *nbytes);
/** Abort with file:line and the CUDA error string when a launch failed (codelets cannot return). */
#define SDP_CUDA_CHECK(expr)                                                                       \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        SDP_ASSERT(e_ == cudaSuccess, "CUDA error %s (%s)", cudaGetErrorName(e_),                  \
                   cudaGetErrorString(e_));                                                        \
    } while (0)
#endif

/* Transfer tasks (param_chunk, grad_chunk): a CPU worker copies a chunk between the host and the
 * memory where a rank computes, so that the task's start and end bound the transfer while the
 * GPU's own stream goes on computing.  A codelet names its buffers' nodes (specific_nodes), and
 * StarPU knows them per codelet only: rank r > 0 gets a copy of the rank-0 codelet. */
/** The memory node where rank r computes (the host's on CPU workers). */
int sdp_cl_rank_node(int r);
/** A transfer task's arguments: its bytes (the footprint's key: low 31 bits, high bits), the
 * offset into the whole vector, and the CUDA device of the node it copies to or from (-1: the
 * host's). */
struct sdp_cl_xfer_args {
    struct sdp_shape_key key;
    size_t off_bytes;
    int dev;
    int poison; /* param_chunk's first chunk: fill the whole destination with bytes 0xff first
                   (SDP_POISON_COMPUTE_COPY) */
};
/** tmpl for rank 0, else copies[r - 1] (a copy of tmpl made on first use), with buffer buf's node
 * set to node.  From the submitting thread. */
struct starpu_codelet *sdp_cl_xfer_of(struct starpu_codelet *tmpl, struct starpu_codelet *copies,
                                      int r, int buf, int node);
/** The arguments of a transfer of nbytes at off_bytes between the host and node (to_node: host to
 * node), its bytes counted with StarPU's bus counters (sdp_rt_bus_count_task) when node is a
 * GPU's.  Allocated as sdp_cl_args_alloc. */
struct sdp_cl_xfer_args *sdp_cl_xfer_args(int node, int to_node, size_t nbytes, size_t off_bytes);
/** Copy nbytes from src to dst, one of them on CUDA device dev (to_dev: dst is; dev -1: both on
 * the host), waiting for the copy's end.  From a CPU worker. */
void sdp_cl_xfer_copy(void *dst, const void *src, size_t nbytes, int dev, int to_dev);
/** Fill nbytes at dst (on CUDA device dev; -1: the host) with bytes 0xff (NaN in f32 and bf16),
 * waiting for the end.  From a CPU worker. */
void sdp_cl_xfer_poison(void *dst, size_t nbytes, int dev);

/** Allocate a zeroed argument struct (aborts on out-of-memory: there is no way to return from here
 * usefully inside task construction). */
void *sdp_cl_args_alloc(size_t nbytes);

/** Record the table of ops as defined (placement, kernels, perfmodels), for sdp_tasks_restrict()
 * and sdp_cl_dry_run(); once, by sdp_tasks_init() or whichever of those comes first. */
void sdp_cl_registry_init(void);

#define SDP_VEC(buf)  ((void *)STARPU_VECTOR_GET_PTR(buf))
#define SDP_VECF(buf) ((float *)STARPU_VECTOR_GET_PTR(buf))

#endif
