/* SPDX-License-Identifier: MIT */
/* The host-GPU links' raw copy rates, as the CUDA driver moves a step's chunks between pinned
 * host memory and a GPU (StarPU's own transfers are the same cudaMemcpyAsync calls).  StarPU-free
 * header. */
#ifndef SDP_GPU_LINK_H
#define SDP_GPU_LINK_H

#include <stddef.h>

/** Bytes/s per GPU of one direction (d2h 1: GPU to host, 0: host to GPU) for the CUDA devices of
 * mask at once: `bytes` per device in `chunk`-byte copies on one stream each, median of reps timed
 * passes after an untimed one.  @return 0, -ENOTSUP (built without CUDA), -ENOMEM or -EIO (the
 * CUDA call named in the log) */
int sdp_rt_gpu_link_bps(unsigned mask, int d2h, size_t bytes, size_t chunk, int reps, double *bps);

#endif
