/* SPDX-License-Identifier: MIT */
/* The GPU census (runtime/census.h): a diagnostic for the step-time model's memory terms, whose
 * unbounded peaks hold whatever StarPU keeps because nothing evicts it. */
#include "config.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "base/sdp_log.h"
#include "runtime/census.h"
#include "runtime/init.h"
#include "runtime/tensor_starpu.h"

#define NKINDS 128

struct kind {
    char name[64];
    unsigned long long bytes;
    int count;
};

struct census {
    unsigned node;
    struct kind k[NKINDS];
    int n;
    unsigned long long total;
};

/* "g12.work.3" -> "g#.work.#": one kind for every layer and chunk */
static void fold(const char *in, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; in[i] && j + 1 < cap; i++) {
        if (isdigit((unsigned char)in[i])) {
            out[j++] = '#';
            while (isdigit((unsigned char)in[i + 1]))
                i++;
        } else {
            out[j++] = in[i];
        }
    }
    out[j] = '\0';
}

static void add(struct census *c, const char *name, unsigned long long bytes)
{
    char f[64];
    int i;
    fold(name, f, sizeof(f));
    for (i = 0; i < c->n && strcmp(c->k[i].name, f); i++)
        ;
    if (i == c->n) {
        if (c->n == NKINDS)
            i = NKINDS - 1, snprintf(c->k[i].name, sizeof(c->k[i].name), "(other)");
        else
            snprintf(c->k[c->n++].name, sizeof(c->k[i].name), "%s", f);
    }
    c->k[i].bytes += bytes;
    c->k[i].count++;
    c->total += bytes;
}

/* A tensor's replica on the node: the whole, and each part's own (an asynchronous partition keeps
 * separate device buffers for the parent and its parts) */
static void visit(sdp_rt_tensor_t *t, void *arg)
{
    struct census *c = arg;
    size_t es = sdp_dtype_size(sdp_rt_tensor_dtype(t));
    if (starpu_data_is_on_node(sdp_rt_tensor_handle(t), c->node))
        add(c, sdp_rt_tensor_name(t), sdp_rt_tensor_nelems(t) * es);
    for (int i = 0; i < sdp_rt_tensor_nparts(t); i++) {
        sdp_rt_tensor_t *p = sdp_rt_tensor_part(t, i);
        if (starpu_data_is_on_node(sdp_rt_tensor_handle(p), c->node))
            add(c, sdp_rt_tensor_name(p), sdp_rt_tensor_nelems(p) * es);
    }
}

static int by_bytes(const void *a, const void *b)
{
    const struct kind *x = a, *y = b;
    return (x->bytes < y->bytes) - (x->bytes > y->bytes);
}

void sdp_rt_gpu_census(const char *when)
{
    const double gib = 1073741824.0;
    for (unsigned node = 0; node < starpu_memory_nodes_get_count(); node++) {
        struct census *c;
        int dev;
        if (starpu_node_get_kind(node) != STARPU_CUDA_RAM)
            continue;
        c = calloc(1, sizeof(*c));
        if (!c)
            return;
        c->node = node;
        dev = starpu_memory_node_get_devid(node);
        sdp_rt_tensor_each(visit, c);
        qsort(c->k, (size_t)c->n, sizeof(c->k[0]), by_bytes);
        SDP_INFO("GPU %d census %s: live tensors %.3f GiB, StarPU allocated %.3f GiB, device "
                 "used %.3f GiB",
                 dev, when, c->total / gib, starpu_memory_get_used(node) / gib,
                 sdp_rt_gpu_mem_used(dev) / gib);
        for (int i = 0; i < c->n && c->k[i].bytes; i++)
            SDP_INFO("GPU %d census %s: %-28s %4d x, %8.3f GiB", dev, when, c->k[i].name,
                     c->k[i].count, c->k[i].bytes / gib);
        free(c);
    }
}
