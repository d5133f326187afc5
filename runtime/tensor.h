/* SPDX-License-Identifier: MIT */
/* Tensors: a flat typed vector behind a StarPU handle.  This header is StarPU-free so graph/ can
 * hold tensors without seeing StarPU; codelets reach the handle through runtime/tensor_starpu.h.
 * Two kinds: persistent tensors own host memory (allocated once, pinned when a GPU is present), and
 * temporaries have no home memory (StarPU allocates them where a task first writes them and frees
 * them after sdp_rt_tensor_release()).  Tests: tests/e2e (through the graph). */
#ifndef SDP_TENSOR_H
#define SDP_TENSOR_H

#include <stddef.h>
#include <stdint.h>

enum sdp_dtype { SDP_F32, SDP_BF16, SDP_I32, SDP_F64 };

typedef struct sdp_rt_tensor sdp_rt_tensor_t;

size_t sdp_dtype_size(enum sdp_dtype dt);
const char *sdp_dtype_name(enum sdp_dtype dt);

/** A persistent tensor with zero-filled host memory of nelems elements.
 * @return 0, -ENOMEM (logged with the size and a hint) */
int sdp_rt_tensor_create(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems, const char *name);
/** The same, for tensors that never leave host memory (fp32 masters, Adam moments): not pinned,
 * since pinning takes time at start-up and no DMA reads them. */
int sdp_rt_tensor_create_host(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems,
                              const char *name);
/** A persistent tensor without host memory: StarPU allocates it on the node that first uses it
 * (a rank's GPU), and it can be partitioned.  For device-side replicas (the sharded route's
 * per-rank working copies). */
int sdp_rt_tensor_create_device(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems,
                                const char *name);
/** A device replica homed on the memory node of StarPU worker `worker` (a rank's GPU): its
 * buffer is allocated there now, and a partitioned replica whose chunks are written there is
 * gathered there, never through the host.  On a CPU worker (or worker -1), or with StarPU's GPU
 * memory capped (sdp_rt_gpu_capped: what it holds must stay evictable), as
 * sdp_rt_tensor_create_device(). */
int sdp_rt_tensor_create_on(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems,
                            const char *name, int worker);
/** A temporary tensor: no memory until a task writes it; release it after its last use is
 * submitted. */
int sdp_rt_tensor_temp(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems, const char *name);
/** Persistent: wait for pending tasks, unregister and free.  Temporary or partition child: submit
 * the unregistration after all pending tasks (asynchronous).  NULL is ignored. */
void sdp_rt_tensor_release(sdp_rt_tensor_t *t);

/** Host bytes the tensors hold now: pinned (page-locked for DMA) and pageable. */
void sdp_rt_tensor_host_bytes(size_t *pinned, size_t *pageable);

/** Plan a partition of a persistent tensor into contiguous parts of the given element counts
 * (summing to the whole).  Tasks may then use the whole or the parts; StarPU switches between them.
 * Once per tensor. */
int sdp_rt_tensor_partition(sdp_rt_tensor_t *t, int nparts, const size_t *part_nelems);
/** Plan the partition of `like` (same element counts) for t: a tensor of the same size chunked
 * the same way.  @return 0, -EINVAL (sizes differ, or like is not partitioned), -ENOMEM */
int sdp_rt_tensor_partition_like(sdp_rt_tensor_t *t, const sdp_rt_tensor_t *like);
int sdp_rt_tensor_nparts(const sdp_rt_tensor_t *t);
sdp_rt_tensor_t *sdp_rt_tensor_part(sdp_rt_tensor_t *t, int i);
/** Element offset of part i inside its parent. */
size_t sdp_rt_tensor_part_offset(const sdp_rt_tensor_t *t, int i);

/** Host memory of a persistent tensor.  Only touch it between acquire and release, or before any
 * task that uses the tensor was submitted. */
void *sdp_rt_tensor_data(sdp_rt_tensor_t *t);
/** Wait until the host copy is valid (and, with write, exclusively ours), then make it so. */
int sdp_rt_tensor_acquire(sdp_rt_tensor_t *t, int write);
void sdp_rt_tensor_release_acquire(sdp_rt_tensor_t *t);
/** Start bringing the tensor's valid copy into its host memory (asynchronous: a later acquire
 * waits for it), as a host task's read of a GPU-written tensor does.  @return 0 or -EIO */
int sdp_rt_tensor_fetch_host(sdp_rt_tensor_t *t);
/** Drop the tensor's contents once the tasks submitted so far are done: every copy is freed and
 * none is written back (for replicas that the next writer overwrites whole). */
void sdp_rt_tensor_discard(sdp_rt_tensor_t *t);
/** Tell StarPU the tensor will not be used for a while (its device copies may go first). */
void sdp_rt_tensor_wont_use(sdp_rt_tensor_t *t);
/** Move the tensor to host memory once the tasks submitted so far have written it, and mark its
 * device copies as the first to go: a temporary has no home for StarPU's wont-use hint to write
 * back to, so without the copy made here its dirty device copy would only leave the GPU when
 * memory runs out, with the next task waiting for the transfer. */
void sdp_rt_tensor_offload(sdp_rt_tensor_t *t);

size_t sdp_rt_tensor_nelems(const sdp_rt_tensor_t *t);
enum sdp_dtype sdp_rt_tensor_dtype(const sdp_rt_tensor_t *t);
const char *sdp_rt_tensor_name(const sdp_rt_tensor_t *t);
/** Call fn on every live tensor (parts excepted: reach them through sdp_rt_tensor_part), under a
 * lock that creating or releasing a tensor also takes: fn must do neither. */
void sdp_rt_tensor_each(void (*fn)(sdp_rt_tensor_t *t, void *arg), void *arg);

#endif
