/* SPDX-License-Identifier: MIT */
/* Raw host-GPU copy rates (runtime/gpu_link.h).  Each device of the mask gets a device buffer, a
 * pinned host buffer and a stream; every pass enqueues all devices' chunks before waiting, so
 * devices that share a link share it as a step's transfers do. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#ifdef SDP_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "base/sdp_log.h"
#include "runtime/gpu_link.h"

#ifdef SDP_HAVE_CUDA
#define MAX_DEV 32

struct link {
    int dev;
    void *d, *h;
    cudaStream_t s;
    cudaEvent_t t0, t1;
};

static int cuda_fail(cudaError_t e, const char *what, int dev)
{
    return sdp_err(-EIO, "GPU %d: %s failed: %s", dev, what, cudaGetErrorString(e));
}

static int link_open(struct link *l, int dev, size_t bytes)
{
    cudaError_t e;
    l->dev = dev;
    if ((e = cudaSetDevice(dev)) != cudaSuccess)
        return cuda_fail(e, "cudaSetDevice", dev);
    if ((e = cudaMalloc(&l->d, bytes)) != cudaSuccess ||
        (e = cudaHostAlloc(&l->h, bytes, cudaHostAllocPortable)) != cudaSuccess)
        return sdp_err(-ENOMEM, "GPU %d: %zu bytes for the link's test: %s", dev, bytes,
                       cudaGetErrorString(e));
    if ((e = cudaMemset(l->d, 0, bytes)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&l->s, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreate(&l->t0)) != cudaSuccess ||
        (e = cudaEventCreate(&l->t1)) != cudaSuccess)
        return cuda_fail(e, "the link's stream and events", dev);
    return 0;
}

static void link_close(struct link *l)
{
    if (cudaSetDevice(l->dev) != cudaSuccess)
        return;
    if (l->t1)
        cudaEventDestroy(l->t1);
    if (l->t0)
        cudaEventDestroy(l->t0);
    if (l->s)
        cudaStreamDestroy(l->s);
    if (l->h)
        cudaFreeHost(l->h);
    if (l->d)
        cudaFree(l->d);
}

/* One pass: every device's chunks enqueued, then waited for.  @return the slowest device's
 * seconds, or -1 */
static double link_pass(struct link *l, int n, int d2h, size_t bytes, size_t chunk)
{
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        char *d = l[i].d, *h = l[i].h;
        cudaSetDevice(l[i].dev);
        cudaEventRecord(l[i].t0, l[i].s);
        for (size_t off = 0; off < bytes; off += chunk) {
            size_t len = bytes - off < chunk ? bytes - off : chunk;
            if (cudaMemcpyAsync(d2h ? h + off : d + off, d2h ? d + off : h + off, len,
                                d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                l[i].s) != cudaSuccess)
                return -1.0;
        }
        cudaEventRecord(l[i].t1, l[i].s);
    }
    for (int i = 0; i < n; i++) {
        float ms = 0.0f;
        cudaSetDevice(l[i].dev);
        if (cudaEventSynchronize(l[i].t1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, l[i].t0, l[i].t1) != cudaSuccess)
            return -1.0;
        if (ms / 1e3 > worst)
            worst = ms / 1e3;
    }
    return worst;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int sdp_rt_gpu_link_bps(unsigned mask, int d2h, size_t bytes, size_t chunk, int reps, double *bps)
{
    struct link l[MAX_DEV] = { 0 };
    double s[16];
    int n = 0, prev = 0, rc = 0;
    if (reps < 1 || reps > 16 || !chunk || !bytes)
        return -EINVAL;
    cudaGetDevice(&prev);
    for (int dev = 0; dev < MAX_DEV && !rc; dev++)
        if (mask >> dev & 1)
            rc = link_open(&l[n++], dev, bytes);
    for (int r = -1; r < reps && !rc; r++) {
        double dt = link_pass(l, n, d2h, bytes, chunk);
        if (dt <= 0.0)
            rc = sdp_err(-EIO, "the %s copies failed", d2h ? "GPU-to-host" : "host-to-GPU");
        else if (r >= 0)
            s[r] = dt;
    }
    for (int i = 0; i < n; i++)
        link_close(&l[i]);
    cudaSetDevice(prev);
    if (rc)
        return rc;
    qsort(s, (size_t)reps, sizeof(s[0]), cmp_double);
    *bps = (double)bytes / s[reps / 2];
    return 0;
}
#else
int sdp_rt_gpu_link_bps(unsigned mask, int d2h, size_t bytes, size_t chunk, int reps, double *bps)
{
    (void)mask, (void)d2h, (void)bytes, (void)chunk, (void)reps, (void)bps;
    return -ENOTSUP;
}
#endif
