/* SPDX-License-Identifier: MIT */
/* cast: fp32 master chunk -> working copy chunk (bf16, round to nearest even, or an fp32 copy).
 * Kernels: codelets/cpu/cast_bf16_ref.c, cast_avx512.c (chosen at run time, sdp_cpu_cast_bf16()).
 * Tests: tests/kernels/test_kernels_cast_bf16.c, test_kernels_host_simd.c, tests/e2e. */
#include "config.h"

#include <string.h>

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#include "codelets/cpu/sdp_cpu_kernels.h"

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
