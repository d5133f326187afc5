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

/** Allocate a zeroed argument struct (aborts on out-of-memory: there is no way to return from here
 * usefully inside task construction). */
void *sdp_cl_args_alloc(size_t nbytes);

/** Register a codelet in the list sdp_tasks_restrict() acts on. */
void sdp_cl_register(struct starpu_codelet *cl);

#define SDP_VEC(buf)  ((void *)STARPU_VECTOR_GET_PTR(buf))
#define SDP_VECF(buf) ((float *)STARPU_VECTOR_GET_PTR(buf))

#endif
