/* SPDX-License-Identifier: MIT */
/* grad_reduce: out += in_1 + ... + in_{R-1}, element by element, in rank order.  The gradient
 * return of data-parallel ranks: out is rank 0's gradient chunk, in_r rank r's.  Placed on a CPU
 * worker it is the CPU-reduction route (each rank's chunk crosses PCIe and the host sums them);
 * pinned to rank 0's GPU it is the GPU-reduction route (StarPU brings the other ranks' chunks to
 * that GPU, peer to peer where the topology allows, and one reduced chunk returns).  Both give the
 * same bits: ((g0 + g1) + g2) + ... in fp32.  Tests: tests/e2e/test_e2e_ranks.sh. */
#include "config.h"

#include "codelets/cl_common.h"
#include "codelets/codelets_internal.h"
#ifdef SDP_HAVE_CUDA
#include "codelets/cuda/sdp_cuda_kernels.h"
#endif

struct sdp_grad_reduce_args {
    struct sdp_shape_key key; /* n, number of inputs */
};

/* buffers: out (n) f32 RW, in_1 .. in_k (n) f32 R */
static void grad_reduce_cpu(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_reduce_args *a = cl_arg;
    size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
    float *out = SDP_VECF(buffers[0]);
    for (int r = 1; r <= a->key.d[1]; r++) {
        const float *in = SDP_VECF(buffers[r]);
        for (size_t i = 0; i < n; i++)
            out[i] += in[i];
    }
}

#ifdef SDP_HAVE_CUDA
static void grad_reduce_cuda(void *buffers[], void *cl_arg)
{
    const struct sdp_grad_reduce_args *a = cl_arg;
    size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
    for (int r = 1; r <= a->key.d[1]; r++)
        sdp_cuda_add_f32(SDP_VECF(buffers[0]), SDP_VECF(buffers[r]), n,
                         starpu_cuda_get_local_stream());
}
#endif

static struct starpu_perfmodel sdp_pm_grad_reduce = {
    .type = STARPU_HISTORY_BASED,
    .symbol = "sdp_grad_reduce_v1",
    .footprint = sdp_cl_footprint,
};

struct starpu_codelet sdp_cl_grad_reduce = {
    .name = "grad_reduce",
    .cpu_funcs = { grad_reduce_cpu },
    .cpu_funcs_name = { "grad_reduce_cpu" },
#ifdef SDP_HAVE_CUDA
    .cuda_funcs = { grad_reduce_cuda },
    .cuda_flags = { STARPU_CUDA_ASYNC },
#endif
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &sdp_pm_grad_reduce,
};

int sdp_task_grad_reduce(const struct sdp_task_opts *o, sdp_rt_tensor_t *out,
                         sdp_rt_tensor_t *const *in, int nin)
{
    struct sdp_cl_buf b[SDP_MAX_RANKS];
    struct sdp_grad_reduce_args *a;
    size_t n = sdp_rt_tensor_nelems(out);
    if (nin < 1 || nin >= SDP_MAX_RANKS)
        return sdp_err(-EINVAL, "grad_reduce of %d inputs (1..%d)", nin, SDP_MAX_RANKS - 1);
    b[0].t = out;
    b[0].mode = STARPU_RW;
    for (int r = 0; r < nin; r++) {
        if (sdp_rt_tensor_nelems(in[r]) != n || sdp_rt_tensor_dtype(in[r]) != SDP_F32 ||
            sdp_rt_tensor_dtype(out) != SDP_F32)
            return sdp_err(-EINVAL, "grad_reduce: input %d (%s) does not match %s", r + 1,
                           sdp_rt_tensor_name(in[r]), sdp_rt_tensor_name(out));
        b[r + 1].t = in[r];
        b[r + 1].mode = STARPU_R;
    }
    a = sdp_cl_args_alloc(sizeof(*a));
    a->key.d[0] = (int)n;
    a->key.d[1] = nin;
    return sdp_cl_submit(&sdp_cl_grad_reduce, o, a, sizeof(*a), (double)n * nin, b, nin + 1);
}
