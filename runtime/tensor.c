/* SPDX-License-Identifier: MIT */
/* Tensors as StarPU vector handles (see tensor.h).  Owns host allocation (starpu_malloc, pinned
 * when CUDA workers exist), registration, partition plans and unregistration.  Never submits tasks
 * itself. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include <starpu.h>

#include "base/hostmem.h"
#include "base/sdp_log.h"
#include "runtime/init.h"
#include "runtime/tensor_starpu.h"

struct sdp_rt_tensor {
    starpu_data_handle_t handle;
    enum sdp_dtype dtype;
    size_t nelems;
    void *data;       /* host memory (persistent tensors only) */
    int malloc_flags; /* how data was allocated: StarPU's flags (pinned or not), or MAPPED */
    int temporary;
    int is_part;        /* a partition child: owned by its parent */
    int home_node;      /* -1: host memory (or none); else the device node its home buffer is on */
    uintptr_t home_ptr; /* that buffer (sdp_rt_tensor_create_on) */
    char name[64];
    int nparts;
    struct sdp_rt_tensor *parts; /* nparts children */
    size_t *part_offsets;
    starpu_data_handle_t *part_handles;
    uint32_t *part_lens;
    struct sdp_rt_tensor *prev, *next; /* the live tensors (sdp_rt_tensor_each) */
};

/* The live tensors, parts excepted: created and released from the submitting thread. */
static struct sdp_rt_tensor *live;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static void link_live(struct sdp_rt_tensor *t)
{
    pthread_mutex_lock(&live_lock);
    t->next = live;
    if (live)
        live->prev = t;
    live = t;
    pthread_mutex_unlock(&live_lock);
}

static void unlink_live(struct sdp_rt_tensor *t)
{
    pthread_mutex_lock(&live_lock);
    if (t->prev)
        t->prev->next = t->next;
    else if (live == t)
        live = t->next;
    if (t->next)
        t->next->prev = t->prev;
    pthread_mutex_unlock(&live_lock);
}

void sdp_rt_tensor_each(void (*fn)(sdp_rt_tensor_t *t, void *arg), void *arg)
{
    pthread_mutex_lock(&live_lock);
    for (struct sdp_rt_tensor *t = live; t; t = t->next)
        fn(t, arg);
    pthread_mutex_unlock(&live_lock);
}

size_t sdp_dtype_size(enum sdp_dtype dt)
{
    switch (dt) {
    case SDP_F32:
    case SDP_I32:
        return 4;
    case SDP_BF16:
        return 2;
    case SDP_F64:
        return 8;
    }
    return 0;
}

const char *sdp_dtype_name(enum sdp_dtype dt)
{
    static const char *names[] = { "f32", "bf16", "i32", "f64" };
    return (unsigned)dt < 4 ? names[dt] : "?";
}

static int check_size(size_t nelems, const char *name)
{
    /* StarPU's vector interface counts elements in 32 bits. */
    if (nelems == 0 || nelems > UINT32_MAX)
        return sdp_err(-EINVAL, "tensor %s: %zu elements (must be 1..%u)", name, nelems,
                       UINT32_MAX);
    return 0;
}

/* malloc_flags of host memory mapped by sdp_host_map() rather than allocated by StarPU. */
#define MAPPED (-1)

/* Host bytes held by tensors: [0] pinned, [1] pageable (sdp_rt_tensor_host_bytes). */
static _Atomic size_t host_held[2];

static void count_host(const struct sdp_rt_tensor *t, int sign)
{
    size_t n = t->nelems * sdp_dtype_size(t->dtype);
    int k = t->malloc_flags == MAPPED ? 1 : 0;
    if (sign > 0)
        atomic_fetch_add(&host_held[k], n);
    else
        atomic_fetch_sub(&host_held[k], n);
}

void sdp_rt_tensor_host_bytes(size_t *pinned, size_t *pageable)
{
    *pinned = atomic_load(&host_held[0]);
    *pageable = atomic_load(&host_held[1]);
}

/* Cleared after the first refused pinned allocation, so one warning covers the run. */
static int pinned_ok = 1;

/* How create() backs a persistent tensor with host memory. */
enum backing {
    PINNED,   /* pinned when it can be (DMA reads it), zero-filled */
    PAGEABLE, /* never leaves the host: not pinned, zero-filled */
    RESERVED  /* device replicas: the home StarPU's partition plans gather through, neither pinned
                 nor touched, so no pages exist unless StarPU writes the tensor back (which
                 sdp_rt_tensor_discard() after the last use avoids) */
};

static int create(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems, const char *name,
                  enum backing how)
{
    struct sdp_rt_tensor *t;
    size_t nbytes = nelems * sdp_dtype_size(dt);
    int rc = check_size(nelems, name);
    if (rc)
        return rc;
    t = calloc(1, sizeof(*t));
    if (!t)
        return sdp_err(-ENOMEM, "tensor %s", name);
        /* Not STARPU_MALLOC_COUNT: StarPU sizes the host node from hwloc's view of the machine,
         * which containers can understate by an order of magnitude; the host budget is checked by
         * the CLI against MemAvailable and the cgroup limit instead. */
#ifdef SDP_SIMGRID /* nothing reads or writes the data: untouched pages, never resident */
    how = RESERVED;
#endif
    if (how == PINNED && pinned_ok) {
        t->malloc_flags = STARPU_MALLOC_PINNED;
        if (starpu_malloc_flags(&t->data, nbytes, t->malloc_flags) != 0) {
            /* Pinning can be refused (driver or container limits): fall back to pageable host
             * memory, which StarPU stages through its own pinned buffers, slower but correct. */
            pinned_ok = 0;
            t->data = NULL;
            SDP_WARN("cannot pin %.1f MiB of host memory for tensor %s; using pageable memory from "
                     "now on (host-device copies will be slower)",
                     nbytes / 1048576.0, name);
        }
    }
    if (!t->data) {
        t->malloc_flags = MAPPED;
        t->data = sdp_host_map(nbytes);
    }
    if (!t->data) {
        free(t);
        rc = sdp_err(-ENOMEM, "tensor %s: cannot allocate %.1f MiB of host memory", name,
                     nbytes / 1048576.0);
        sdp_hint("lower the model size or batch, or free host memory");
        return rc;
    }
    if (t->malloc_flags != MAPPED) /* pinned pages exist already: zeroing them is a plain write */
        memset(t->data, 0, nbytes);
    t->dtype = dt;
    t->nelems = nelems;
    count_host(t, 1);
    snprintf(t->name, sizeof(t->name), "%s", name);
    starpu_vector_data_register(&t->handle, STARPU_MAIN_RAM, (uintptr_t)t->data, (uint32_t)nelems,
                                sdp_dtype_size(dt));
    starpu_data_set_name(t->handle, t->name);
    link_live(t);
    *out = t;
    return 0;
}

int sdp_rt_tensor_create(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems, const char *name)
{
    return create(out, dt, nelems, name, PINNED);
}

int sdp_rt_tensor_create_host(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems,
                              const char *name)
{
    return create(out, dt, nelems, name, PAGEABLE);
}

int sdp_rt_tensor_create_device(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems,
                                const char *name)
{
    return create(out, dt, nelems, name, RESERVED);
}

/* A device replica whose home is the worker's memory node: StarPU's partition plans gather a
 * partitioned tensor on its home node, so a replica homed on the host went down to the host and
 * back up whenever its chunks had been written one by one on the GPU. */
int sdp_rt_tensor_create_on(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems,
                            const char *name, int worker)
{
    struct sdp_rt_tensor *t;
    size_t nbytes = nelems * sdp_dtype_size(dt);
    unsigned node = worker >= 0 ? starpu_worker_get_memory_node((unsigned)worker) : 0;
    int rc = check_size(nelems, name);
    if (rc)
        return rc;
    if (worker < 0 || starpu_node_get_kind(node) == STARPU_CPU_RAM || sdp_rt_gpu_capped())
        return create(out, dt, nelems, name, RESERVED); /* evictable: its home is the host */
    t = calloc(1, sizeof(*t));
    if (!t)
        return sdp_err(-ENOMEM, "tensor %s", name);
    t->home_ptr = starpu_malloc_on_node(node, nbytes);
    if (!t->home_ptr) {
        free(t);
        rc = sdp_err(-ENOMEM, "tensor %s: cannot allocate %.1f MiB on memory node %u", name,
                     nbytes / 1048576.0, node);
        sdp_hint("lower the model size, or use the replicated parameter route");
        return rc;
    }
    t->home_node = (int)node;
    t->dtype = dt;
    t->nelems = nelems;
    snprintf(t->name, sizeof(t->name), "%s", name);
    starpu_vector_data_register(&t->handle, (int)node, t->home_ptr, (uint32_t)nelems,
                                sdp_dtype_size(dt));
    starpu_data_set_name(t->handle, t->name);
    link_live(t);
    *out = t;
    return 0;
}

int sdp_rt_tensor_temp(sdp_rt_tensor_t **out, enum sdp_dtype dt, size_t nelems, const char *name)
{
    struct sdp_rt_tensor *t;
    int rc = check_size(nelems, name);
    if (rc)
        return rc;
    t = calloc(1, sizeof(*t));
    if (!t)
        return sdp_err(-ENOMEM, "tensor %s", name);
    t->dtype = dt;
    t->nelems = nelems;
    t->temporary = 1;
    snprintf(t->name, sizeof(t->name), "%s", name);
    starpu_vector_data_register(&t->handle, -1, 0, (uint32_t)nelems, sdp_dtype_size(dt));
    starpu_data_set_name(t->handle, t->name);
    link_live(t);
    *out = t;
    return 0;
}

void sdp_rt_tensor_release(sdp_rt_tensor_t *t)
{
    if (!t || t->is_part)
        return;
    unlink_live(t);
    if (t->temporary) {
        starpu_data_unregister_submit(t->handle);
        free(t);
        return;
    }
    if (t->nparts) {
        starpu_data_partition_clean(t->handle, (unsigned)t->nparts, t->part_handles);
        free(t->parts);
        free(t->part_offsets);
        free(t->part_handles);
        free(t->part_lens);
    }
    starpu_data_unregister(t->handle);
    if (t->home_ptr)
        starpu_free_on_node((unsigned)t->home_node, t->home_ptr,
                            t->nelems * sdp_dtype_size(t->dtype));
    if (t->data)
        count_host(t, -1);
    if (t->data && t->malloc_flags == MAPPED)
        sdp_host_unmap(t->data, t->nelems * sdp_dtype_size(t->dtype));
    else if (t->data)
        starpu_free_flags(t->data, t->nelems * sdp_dtype_size(t->dtype), t->malloc_flags);
    free(t);
}

int sdp_rt_tensor_partition(sdp_rt_tensor_t *t, int nparts, const size_t *part_nelems)
{
    size_t total = 0;
    struct starpu_data_filter f;
    int i;
    if (t->temporary || t->nparts || nparts < 1)
        return sdp_err(-EINVAL,
                       "tensor %s: cannot partition (temporary, already partitioned, or %d parts)",
                       t->name, nparts);
    for (i = 0; i < nparts; i++)
        total += part_nelems[i];
    if (total != t->nelems)
        return sdp_err(-EINVAL, "tensor %s: parts sum to %zu elements, tensor has %zu", t->name,
                       total, t->nelems);
    t->parts = calloc((size_t)nparts, sizeof(*t->parts));
    t->part_offsets = calloc((size_t)nparts, sizeof(size_t));
    t->part_handles = calloc((size_t)nparts, sizeof(starpu_data_handle_t));
    t->part_lens = calloc((size_t)nparts, sizeof(uint32_t));
    if (!t->parts || !t->part_offsets || !t->part_handles || !t->part_lens) {
        free(t->parts);
        free(t->part_offsets);
        free(t->part_handles);
        free(t->part_lens);
        t->parts = NULL;
        return sdp_err(-ENOMEM, "tensor %s: partition of %d parts", t->name, nparts);
    }
    total = 0;
    for (i = 0; i < nparts; i++) {
        t->part_lens[i] = (uint32_t)part_nelems[i];
        t->part_offsets[i] = total;
        total += part_nelems[i];
    }
    memset(&f, 0, sizeof(f));
    f.filter_func = starpu_vector_filter_list;
    f.nchildren = (unsigned)nparts;
    f.filter_arg_ptr = t->part_lens;
    starpu_data_partition_plan(t->handle, &f, t->part_handles);
    for (i = 0; i < nparts; i++) {
        struct sdp_rt_tensor *p = &t->parts[i];
        p->handle = t->part_handles[i];
        p->dtype = t->dtype;
        p->nelems = part_nelems[i];
        p->data = t->data ? (char *)t->data + t->part_offsets[i] * sdp_dtype_size(t->dtype) : NULL;
        p->is_part = 1;
        snprintf(p->name, sizeof(p->name), "%.48s.%d", t->name, i);
        starpu_data_set_name(p->handle, p->name);
    }
    t->nparts = nparts;
    return 0;
}

int sdp_rt_tensor_partition_like(sdp_rt_tensor_t *t, const sdp_rt_tensor_t *like)
{
    size_t *parts;
    int rc;
    if (!like->nparts || like->nelems != t->nelems)
        return sdp_err(-EINVAL, "tensor %s: cannot be partitioned like %s", t->name, like->name);
    parts = malloc((size_t)like->nparts * sizeof(*parts));
    if (!parts)
        return sdp_err(-ENOMEM, "tensor %s: partition of %d parts", t->name, like->nparts);
    for (int i = 0; i < like->nparts; i++)
        parts[i] = like->part_lens[i];
    rc = sdp_rt_tensor_partition(t, like->nparts, parts);
    free(parts);
    return rc;
}

int sdp_rt_tensor_nparts(const sdp_rt_tensor_t *t)
{
    return t->nparts;
}

sdp_rt_tensor_t *sdp_rt_tensor_part(sdp_rt_tensor_t *t, int i)
{
    SDP_ASSERT(i >= 0 && i < t->nparts, "tensor %s has %d parts, part %d asked", t->name, t->nparts,
               i);
    return &t->parts[i];
}

size_t sdp_rt_tensor_part_offset(const sdp_rt_tensor_t *t, int i)
{
    SDP_ASSERT(i >= 0 && i < t->nparts, "tensor %s has %d parts, part %d asked", t->name, t->nparts,
               i);
    return t->part_offsets[i];
}

void *sdp_rt_tensor_data(sdp_rt_tensor_t *t)
{
    return t->data;
}

int sdp_rt_tensor_acquire(sdp_rt_tensor_t *t, int write)
{
    int rc = starpu_data_acquire(t->handle, write ? STARPU_RW : STARPU_R);
    if (rc)
        return sdp_err(rc < 0 ? rc : -EIO, "tensor %s: acquire failed", t->name);
    return 0;
}

void sdp_rt_tensor_release_acquire(sdp_rt_tensor_t *t)
{
    starpu_data_release(t->handle);
}

void sdp_rt_tensor_discard(sdp_rt_tensor_t *t)
{
    starpu_data_invalidate_submit(t->handle);
}

int sdp_rt_tensor_fetch_host(sdp_rt_tensor_t *t)
{
    if (starpu_data_fetch_on_node(t->handle, STARPU_MAIN_RAM, 1) != 0)
        return sdp_err(-EIO, "tensor %s: its host copy could not be fetched", t->name);
    return 0;
}

void sdp_rt_tensor_wont_use(sdp_rt_tensor_t *t)
{
    starpu_data_wont_use(t->handle);
}

static void offloaded(void *arg)
{
    starpu_data_release_on_node((starpu_data_handle_t)arg, STARPU_MAIN_RAM);
}

void sdp_rt_tensor_offload(sdp_rt_tensor_t *t)
{
    /* an asynchronous acquire on the host, ordered after the tasks submitted so far (a prefetch
     * is not: it would read a temporary not written yet); its transfer makes the host copy */
    if (starpu_data_acquire_on_node_cb_sequential_consistency(t->handle, STARPU_MAIN_RAM, STARPU_R,
                                                              offloaded, t->handle, 1))
        SDP_WARN("%s: could not ask StarPU for a host copy; it stays on the device until "
                 "evicted",
                 t->name);
    starpu_data_wont_use(t->handle);
}

size_t sdp_rt_tensor_nelems(const sdp_rt_tensor_t *t)
{
    return t->nelems;
}

enum sdp_dtype sdp_rt_tensor_dtype(const sdp_rt_tensor_t *t)
{
    return t->dtype;
}

const char *sdp_rt_tensor_name(const sdp_rt_tensor_t *t)
{
    return t->name;
}

starpu_data_handle_t sdp_rt_tensor_handle(const sdp_rt_tensor_t *t)
{
    return t->handle;
}
