/* SPDX-License-Identifier: MIT */
/* Cross-file internal of the moe_fwd / moe_bwd / moe_aux codelets: their arguments and flags, the
 * layout of the forward's kept vector (codelets/moe.c, the CPU implementation), and the CUDA
 * implementation (codelets/moe_cuda.c, built with CUDA only). */
#ifndef SDP_CL_MOE_INTERNAL_H
#define SDP_CL_MOE_INTERNAL_H

#include <stddef.h>

#include "codelets/cl_common.h"
#include "codelets/cpu/moe.h"

struct sdp_moe_args {
    struct sdp_shape_key key; /* N, C, E, K, IM, what the task does (MOE_*) */
    struct sdp_moe_shape s;
    float aux_scale; /* bwd: the weight of this micro-batch's load-balancing loss in the loss */
    double rows;     /* rows of the load-balancing loss: N times the sparse layers */
};

/* moe_fwd flags (key.d[5]) */
#define MOE_OUT     1  /* write out (not in a recomputation) */
#define MOE_TRACK   2  /* accumulate the statistics and the used experts */
#define MOE_FIRST_L 4  /* the micro-batch's first sparse layer: the statistics start from zero */
#define MOE_FIRST_M 8  /* the step's first micro-batch: the used experts start from none */
#define MOE_LAST_M  16 /* its last: the used experts' step counts go up */
/* moe_bwd flags */
#define MOE_GRAD 1 /* weight gradients (not a frozen base) */
#define MOE_AUX  2 /* the load-balancing loss's gradient */
/* both: routed streaming, buffer Wh (the host's working copy) after W (the compute copy, RW): the
 * task first copies the experts its tokens route to from Wh into W */
#define MOE_ROUTED 32

/* A routed forward of a later micro-batch of the step (fl): the index of its buffer `used`, whose
 * marks name the experts the step's earlier micro-batches copied into W already, the task's
 * optional buffers starting at b (out's place); -1 where there is none to skip. */
static inline int sdp_cl_moe_had_buf(int b, int fl)
{
    if (!(fl & MOE_ROUTED) || !(fl & MOE_TRACK) || (fl & MOE_FIRST_M))
        return -1;
    return b + (fl & MOE_OUT ? 3 : 1);
}

/* Expert e's two slices in its layer's working copy (elements): gate_up's, then down's. */
static inline void sdp_cl_moe_expert_slices(const struct sdp_moe_shape *s, int e, size_t at[2],
                                            size_t n[2])
{
    n[0] = (size_t)2 * s->IM * s->C;
    n[1] = (size_t)s->C * s->IM;
    at[0] = s->off_gu + (size_t)e * n[0];
    at[1] = s->off_down + (size_t)e * n[1];
}

/* The pieces of the kept vector: probabilities, routing (int32 arrays stored in place), permuted
 * rows, the experts' intermediates. */
struct sdp_moe_acts {
    struct sdp_moe_routing r;
    float *probs, *xp, *gu, *h, *y;
};

/** Points a's pieces into base (64-byte aligned pieces; base NULL: nothing set).  @return the
 * kept vector's length in 4-byte elements */
size_t sdp_cl_moe_layout(struct sdp_moe_acts *a, float *base, const struct sdp_moe_shape *s);

#ifdef SDP_HAVE_CUDA
/* The CUDA implementations (buffers as the CPU ones of codelets/moe.c).  moe_fwd and moe_bwd wait
 * on their stream once, for the experts' row counts: not STARPU_CUDA_ASYNC. */
void sdp_cl_moe_fwd_cuda(void *buffers[], void *cl_arg);
void sdp_cl_moe_bwd_cuda(void *buffers[], void *cl_arg);
void sdp_cl_moe_aux_cuda(void *buffers[], void *cl_arg);
#endif

#endif
