/* SPDX-License-Identifier: MIT */
/* zero: fill a tensor with zeros where it will be used next.  Write-only access, so StarPU
 * allocates the buffer on the worker's node without transferring the old contents: gradient
 * accumulators are cleared on the GPU at the start of a step instead of being uploaded as zeros.
 * Tests: tests/e2e. */
#include "config.h"

#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"

struct sdp_zero_args {
    struct sdp_shape_key key; /* bytes (low 31 bits, high bits) */
};

/* buffers: t (n) any dtype W */
static void zero_cpu(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    memset(SDP_VEC(buffers[0]), 0,
           (size_t)STARPU_VECTOR_GET_NX(buffers[0]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[0]));
}

#ifdef SDP_HAVE_CUDA
static void zero_cuda(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    SDP_CUDA_CHECK(cudaMemsetAsync(SDP_VEC(buffers[0]), 0,
                                   (size_t)STARPU_VECTOR_GET_NX(buffers[0]) *
                                       STARPU_VECTOR_GET_ELEMSIZE(buffers[0]),
                                   starpu_cuda_get_local_stream()));
}
#endif

static struct starpu_perfmodel sdp_pm_zero = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_zero_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_zero = {
    .name = "zero",
    .cpu_funcs = { zero_cpu },
    .cpu_funcs_name = { "zero_cpu" },
#ifdef SDP_CUDA_CODELETS
    .cuda_funcs = { SDP_CUDA(zero_cuda) },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_zero,
};

int sdp_task_zero(const struct sdp_task_opts *o, sdp_rt_tensor_t *t)
{
    struct sdp_zero_args *a = sdp_cl_args_alloc(sizeof(*a));
    size_t nbytes = sdp_rt_tensor_nelems(t) * sdp_dtype_size(sdp_rt_tensor_dtype(t));
    struct sdp_cl_buf b[] = { { t, STARPU_W } };
    a->key.d[0] = (int)(nbytes & 0x7fffffff);
    a->key.d[1] = (int)(nbytes >> 31);
    return sdp_cl_submit(&sdp_cl_zero, o, a, sizeof(*a), 0.0, b, 1);
}
