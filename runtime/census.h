/* SPDX-License-Identifier: MIT */
/* What holds a GPU's memory: the live tensors' replicas on each CUDA device, by kind of tensor,
 * beside what StarPU has allocated there and what the device has in use.  StarPU-free header. */
#ifndef SDP_CENSUS_H
#define SDP_CENSUS_H

/** Log (info) the census of every CUDA device: the bytes of live tensors with a valid replica
 * there, summed by name with digits folded ("g12.work" and "g3.work" are "g#.work"), largest
 * first, then StarPU's allocated bytes on the device and the device's used bytes.  Call with no
 * task running (after sdp_rt_wait_all()); a no-op without CUDA workers. */
void sdp_rt_gpu_census(const char *when);

#endif
