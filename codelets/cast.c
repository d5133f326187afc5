/* SPDX-License-Identifier: MIT */
/* cast: fp32 master chunk -> working copy chunk (bf16, round to nearest even, or an fp32 copy);
 * cast_act: an fp32 activation (the residual gradient) -> bf16 where the compute runs.
 * Kernels: codelets/cpu/cast_bf16_ref.c, cast_avx512.c (chosen at run time, sdp_cpu_cast_bf16()),
 * codelets/cuda/cast.cu.  Tests: tests/kernels/test_kernels_cast_bf16.c, test_kernels_host_simd.c,
 * tests/kernels/test_cuda_cast.c, tests/e2e. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_cast_args {
    struct sdp_shape_key key; /* n (low, high 31 bits), work element size */
};

/* buffers: work (n) f32|bf16 W, master (n) f32 R */
static void cast_cpu(void *buffers[], void *cl_arg)
{
    void *work = SDP_VEC(buffers[0]);
    const float *master = SDP_VECF(buffers[1]);
    size_t n = STARPU_VECTOR_GET_NX(buffers[1]);
    (void)cl_arg;
    if (STARPU_VECTOR_GET_ELEMSIZE(buffers[0]) == 2)
        sdp_cpu_cast_bf16(work, master, n);
    else
        memcpy(work, master, n * sizeof(float));
}

static struct starpu_perfmodel sdp_pm_cast = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_cast_v2", /* v2: AVX-512 kernel */
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_cast = {
    .name = "cast",
    .cpu_funcs = { cast_cpu },
    .cpu_funcs_name = { "cast_cpu" },
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_cast,
};

int sdp_task_cast(const struct sdp_task_opts *o, sdp_rt_tensor_t *work, sdp_rt_tensor_t *master)
{
    struct sdp_cast_args *a = sdp_cl_args_alloc(sizeof(*a));
    size_t n = sdp_rt_tensor_nelems(master);
    struct sdp_cl_buf b[] = { { work, STARPU_W }, { master, STARPU_R } };
    a->key.d[0] = (int)(n & 0x7fffffff);
    a->key.d[1] = (int)(n >> 31);
    a->key.d[2] = (int)sdp_dtype_size(sdp_rt_tensor_dtype(work));
    return sdp_cl_submit(&sdp_cl_cast, o, a, sizeof(*a), (double)n, b, 2);
}

/* ---- cast_act ---- */

/* buffers: out (n) bf16 W, in (n) f32 R (cast_cpu's kernel) */
#ifdef SDP_HAVE_CUDA
static void cast_act_cuda(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    sdp_cuda_cast(SDP_VEC(buffers[0]), SDP_CL_DT(buffers[0]), SDP_VECF(buffers[1]),
                  STARPU_VECTOR_GET_NX(buffers[1]), starpu_cuda_get_local_stream());
    SDP_CUDA_CHECK(cudaGetLastError());
}
#endif
#ifdef SDP_CUDA_CODELETS
#define CAST_ACT_CUDA                                                                              \
    .cuda_funcs = { SDP_CUDA(cast_act_cuda) }, .cuda_flags = { STARPU_CUDA_ASYNC },
#else
#define CAST_ACT_CUDA
#endif
SDP_NAMED_CODELET(sdp_cl_cast_act, "cast_act", cast_cpu, CAST_ACT_CUDA);

int sdp_task_cast_act(const struct sdp_task_opts *o, sdp_rt_tensor_t *out, sdp_rt_tensor_t *in)
{
    struct sdp_cast_args *a = sdp_cl_args_alloc(sizeof(*a));
    size_t n = sdp_rt_tensor_nelems(in);
    struct sdp_cl_buf b[] = { { out, STARPU_W }, { in, STARPU_R } };
    if (sdp_rt_tensor_nelems(out) != n || sdp_rt_tensor_dtype(in) != SDP_F32) {
        free(a);
        return sdp_err(-EINVAL, "cast_act: %zu elements of %s into %zu", n,
                       sdp_dtype_name(sdp_rt_tensor_dtype(in)), sdp_rt_tensor_nelems(out));
    }
    a->key.d[0] = (int)(n & 0x7fffffff);
    a->key.d[1] = (int)(n >> 31);
    a->key.d[2] = (int)sdp_dtype_size(sdp_rt_tensor_dtype(out));
    return sdp_cl_submit(&sdp_cl_cast_act, o, a, sizeof(*a), (double)n, b, 2);
}
