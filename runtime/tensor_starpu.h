/* SPDX-License-Identifier: MIT */
/* The StarPU side of a tensor, for codelets/ only (graph/ must not include this). */
#ifndef SDP_TENSOR_STARPU_H
#define SDP_TENSOR_STARPU_H

#include <starpu.h>

#include "runtime/tensor.h"

starpu_data_handle_t sdp_rt_tensor_handle(const sdp_rt_tensor_t *t);

/** The dtype of a vector buffer as seen inside a codelet, from its element size: 2 -> BF16, 4 ->
 * F32/I32 (the caller knows which), 8 -> F64. */
static inline size_t sdp_buf_elemsize(void *buffer)
{
    return STARPU_VECTOR_GET_ELEMSIZE(buffer);
}

#endif
