/* SPDX-License-Identifier: MIT */
/* Host AdamW throughput: the fused kernel (sdp_cpu_adamw*: update of fp32 p, m, v from a bf16 or
 * fp32 gradient, plus the next working copy) spread over N threads, each thread a contiguous range
 * cut into calls of --chunk elements (as the adamw codelet sees them).  Non-zero random data, first
 * touched by the thread that updates it.  Prints one JSON line: the median of --iters timed steps
 * after --warmup steps, parameters/s and GB/s at the bytes a step must move (read p, m, v, g;
 * write p, m, v and the copy: 28 B/param with bf16 gradient and bf16 copy).  Peer:
 * bench/host_adamw_peer.py (PyTorch's CPU AdamW); both at once: bench/host_adamw.sh.  --op sumsq
 * times the gradient's sum of squares (the norm before clipping) the same way: 4 B/param.
 *   bench/host_adamw [--params N] [--threads T] [--chunk ELEMS] [--grad bf16|f32]
 *                    [--copy bf16|f32|none] [--kernel auto|avx512|scalar] [--iters K] [--warmup W]
 *                    [--op adamw|sumsq]
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

static _Atomic double sumsq_sink; /* keeps the sums of squares, so that no call is dropped */

enum kernel { K_AUTO, K_AVX512, K_SCALAR };

struct opts {
    size_t params, chunk;
    int threads, iters, warmup, gbf16, copy; /* copy: 0 none, 1 bf16, 2 fp32 */
    int sumsq;                               /* 1: time the gradient sum of squares instead */
    enum kernel kernel;
};

struct shared {
    const struct opts *o;
    float *p, *m, *v, *g, *wf;
    uint16_t *gb, *wb;
    pthread_barrier_t start, done;
    int step, stop;
};

struct worker {
    struct shared *s;
    int id;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1), never 0 */
static float unit(uint64_t *x)
{
    return ((float)(splitmix(x) >> 40) + 0.5f) * (2.0f / 16777216.0f) - 1.0f;
}

static void update(const struct shared *s, size_t lo, size_t hi, int step)
{
    const struct opts *o = s->o;
    const struct sdp_adamw_hp hp = { .lr = 1e-4f,
                                     .beta1 = 0.9f,
                                     .beta2 = 0.999f,
                                     .eps = 1e-8f,
                                     .weight_decay = 0.1f,
                                     .gscale = 0.5f,
                                     .step = step };
    const size_t chunk = o->chunk ? o->chunk : hi - lo;

    for (size_t i = lo; i < hi; i += chunk) {
        const size_t n = hi - i < chunk ? hi - i : chunk;
        if (o->sumsq) {
            const double q = o->kernel == K_AUTO     ? sdp_cpu_sumsq(s->g + i, n)
                             : o->kernel == K_AVX512 ? sdp_cpu_sumsq_avx512(s->g + i, n)
                                                     : sdp_cpu_sumsq_ref(s->g + i, n);
            atomic_store_explicit(&sumsq_sink, q, memory_order_relaxed);
            continue;
        }
        uint16_t *wb = o->copy == 1 ? s->wb + i : NULL;
        float *wf = o->copy == 2 ? s->wf + i : NULL;
        if (o->gbf16 && o->kernel == K_AUTO)
            sdp_cpu_adamw_gbf16(s->p + i, s->gb + i, s->m + i, s->v + i, wb, wf, n, &hp, 1, 0);
        else if (o->gbf16 && o->kernel == K_AVX512)
            sdp_cpu_adamw_gbf16_avx512(s->p + i, s->gb + i, s->m + i, s->v + i, wb, wf, n, &hp, 1,
                                       0);
        else if (o->gbf16)
            sdp_cpu_adamw_gbf16_ref(s->p + i, s->gb + i, s->m + i, s->v + i, wb, wf, n, &hp, 1, 0);
        else if (o->kernel == K_AUTO)
            sdp_cpu_adamw(s->p + i, s->g + i, s->m + i, s->v + i, wb, wf, n, &hp, 1, 0);
        else if (o->kernel == K_AVX512)
            sdp_cpu_adamw_avx512(s->p + i, s->g + i, s->m + i, s->v + i, wb, wf, n, &hp, 1, 0);
        else
            sdp_cpu_adamw_ref(s->p + i, s->g + i, s->m + i, s->v + i, wb, wf, n, &hp, 1, 0);
    }
}

static void *worker_main(void *arg)
{
    const struct worker *w = arg;
    struct shared *s = w->s;
    const struct opts *o = s->o;
    const size_t lo = o->params * (size_t)w->id / (size_t)o->threads;
    const size_t hi = o->params * (size_t)(w->id + 1) / (size_t)o->threads;
    uint64_t x = 0x5eed0000u + (uint64_t)w->id;

    for (size_t i = lo; i < hi; i++) { /* first touch by the updating thread */
        const float g = 1e-2f * unit(&x);
        s->p[i] = unit(&x);
        s->m[i] = 1e-3f * unit(&x);
        s->v[i] = 1e-5f * (1.0f + unit(&x));
        if (o->gbf16)
            s->gb[i] = sdp_f32_to_bf16(g);
        else
            s->g[i] = g;
        if (o->copy == 1)
            s->wb[i] = 0;
        if (o->copy == 2)
            s->wf[i] = 0.0f;
    }
    for (;;) {
        pthread_barrier_wait(&s->start);
        if (s->stop)
            break;
        update(s, lo, hi, s->step);
        pthread_barrier_wait(&s->done);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--params N] [--threads T] [--chunk ELEMS] [--grad bf16|f32]\n"
            "          [--copy bf16|f32|none] [--kernel auto|avx512|scalar] [--iters K] "
            "[--warmup W]\n"
            "          [--op adamw|sumsq]   (sumsq: the fp32 gradient's sum of squares)\n"
            "defaults: 268435456 params, 1 thread, chunk 0 (one call per thread), bf16 gradient,\n"
            "bf16 copy, kernel auto (SDP_HOST_KERNELS), 5 timed steps after 1 warm-up step\n",
            argv0);
}

static int parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){
        .params = 268435456, .threads = 1, .iters = 5, .warmup = 1, .gbf16 = 1, .copy = 1
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!val)
            return -1;
        i++;
        errno = 0;
        if (!strcmp(a, "--params"))
            o->params = strtoull(val, &end, 10);
        else if (!strcmp(a, "--chunk"))
            o->chunk = strtoull(val, &end, 10);
        else if (!strcmp(a, "--threads"))
            o->threads = (int)strtol(val, &end, 10);
        else if (!strcmp(a, "--iters"))
            o->iters = (int)strtol(val, &end, 10);
        else if (!strcmp(a, "--warmup"))
            o->warmup = (int)strtol(val, &end, 10);
        else if (!strcmp(a, "--grad") && (!strcmp(val, "bf16") || !strcmp(val, "f32")))
            o->gbf16 = !strcmp(val, "bf16");
        else if (!strcmp(a, "--copy") && !strcmp(val, "none"))
            o->copy = 0;
        else if (!strcmp(a, "--copy") && !strcmp(val, "bf16"))
            o->copy = 1;
        else if (!strcmp(a, "--copy") && !strcmp(val, "f32"))
            o->copy = 2;
        else if (!strcmp(a, "--kernel") && !strcmp(val, "auto"))
            o->kernel = K_AUTO;
        else if (!strcmp(a, "--kernel") && !strcmp(val, "avx512"))
            o->kernel = K_AVX512;
        else if (!strcmp(a, "--kernel") && !strcmp(val, "scalar"))
            o->kernel = K_SCALAR;
        else if (!strcmp(a, "--op") && (!strcmp(val, "adamw") || !strcmp(val, "sumsq")))
            o->sumsq = !strcmp(val, "sumsq");
        else
            return -1;
        if (end && (*end || errno))
            return -1;
    }
    if (o->params == 0 || o->threads < 1 || o->threads > 4096 || o->iters < 1 || o->warmup < 0)
        return -1;
    if (o->sumsq) { /* reads an fp32 gradient and nothing else */
        o->gbf16 = 0;
        o->copy = 0;
    }
    return 0;
}

static void *alloc_or_null(size_t nbytes, int want)
{
    if (!want)
        return NULL;
    return aligned_alloc(64, (nbytes + 63) / 64 * 64);
}

int main(int argc, char **argv)
{
    struct opts o;
    struct shared s = { 0 };
    const char *kname;

    if (parse(argc, argv, &o) != 0) {
        usage(argv[0]);
        return 2;
    }
    if (o.kernel == K_AVX512 && !sdp_cpu_have_avx512()) {
        fprintf(stderr, "host_adamw: --kernel avx512, but this CPU lacks AVX-512 F/BW/VL\n");
        return 1;
    }
    kname = o.kernel == K_AUTO     ? sdp_cpu_isa_name(sdp_cpu_isa())
            : o.kernel == K_AVX512 ? "avx512"
                                   : "scalar";
    const size_t n = o.params;
    s.o = &o;
    s.p = alloc_or_null(n * 4, 1);
    s.m = alloc_or_null(n * 4, 1);
    s.v = alloc_or_null(n * 4, 1);
    s.g = alloc_or_null(n * 4, !o.gbf16);
    s.gb = alloc_or_null(n * 2, o.gbf16);
    s.wb = alloc_or_null(n * 2, o.copy == 1);
    s.wf = alloc_or_null(n * 4, o.copy == 2);
    if (!s.p || !s.m || !s.v || (!o.gbf16 && !s.g) || (o.gbf16 && !s.gb) ||
        (o.copy == 1 && !s.wb) || (o.copy == 2 && !s.wf)) {
        fprintf(stderr, "host_adamw: out of memory for %zu parameters\nhint: lower --params\n", n);
        return 1;
    }

    struct worker *w = calloc((size_t)o.threads, sizeof(*w));
    pthread_t *tid = calloc((size_t)o.threads, sizeof(*tid));
    double *t = calloc((size_t)o.iters, sizeof(*t));
    if (!w || !tid || !t) {
        fprintf(stderr, "host_adamw: out of memory\n");
        return 1;
    }
    pthread_barrier_init(&s.start, NULL, (unsigned)o.threads + 1);
    pthread_barrier_init(&s.done, NULL, (unsigned)o.threads + 1);
    for (int i = 0; i < o.threads; i++) {
        w[i] = (struct worker){ &s, i };
        int rc = pthread_create(&tid[i], NULL, worker_main, &w[i]);
        if (rc) {
            fprintf(stderr, "host_adamw: pthread_create: %s\n", strerror(rc));
            return 1;
        }
    }
    for (int it = 0; it < o.warmup + o.iters; it++) {
        s.step = it + 1;
        const double t0 = now_s();
        pthread_barrier_wait(&s.start);
        pthread_barrier_wait(&s.done);
        const double dt = now_s() - t0;
        if (it >= o.warmup)
            t[it - o.warmup] = dt;
    }
    s.stop = 1;
    pthread_barrier_wait(&s.start);
    for (int i = 0; i < o.threads; i++)
        pthread_join(tid[i], NULL);

    qsort(t, (size_t)o.iters, sizeof(*t), cmp_double);
    const double med = o.iters % 2 ? t[o.iters / 2] : 0.5 * (t[o.iters / 2 - 1] + t[o.iters / 2]);
    const int bpp = o.sumsq ? 4 : 24 + (o.gbf16 ? 2 : 4) + (o.copy == 1 ? 2 : o.copy == 2 ? 4 : 0);
    printf("{\"system\": \"slidedp\", \"op\": \"%s\", \"kernel\": \"%s\", \"params\": %zu, "
           "\"threads\": %d, "
           "\"chunk\": %zu, \"grad\": \"%s\", \"copy\": \"%s\", \"bytes_per_param\": %d, "
           "\"iters\": %d, \"median_s\": %.6f, \"min_s\": %.6f, \"params_per_s\": %.4g, "
           "\"gb_per_s\": %.2f}\n",
           o.sumsq ? "sumsq" : "adamw", kname, n, o.threads, o.chunk, o.gbf16 ? "bf16" : "f32",
           o.copy == 1   ? "bf16"
           : o.copy == 2 ? "f32"
                         : "none",
           bpp, o.iters, med, t[0], (double)n / med, (double)n * bpp / med / 1e9);
    free(t);
    free(tid);
    free(w);
    free(s.p);
    free(s.m);
    free(s.v);
    free(s.g);
    free(s.gb);
    free(s.wb);
    free(s.wf);
    return 0;
}
