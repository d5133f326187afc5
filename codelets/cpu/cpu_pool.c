/* SPDX-License-Identifier: MIT */
/* A small pool of helper threads for a CPU kernel that splits its own work (the LM head): created
 * at the first call that asks for them, kept for the process's life (BLAS keeps per-thread
 * buffers; fresh threads at every call would allocate them again), one job at a time.  A call that
 * finds the pool busy runs alone.  A helper takes the CPUs of the process's main thread, not the
 * one CPU of the runtime's worker that created it (threads inherit their creator's binding).
 * Test: tests/kernels/test_kernels_lmhead_ce.c. */
#define _GNU_SOURCE /* sched_getaffinity, pthread_setaffinity_np */
#include "config.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <unistd.h>

#include "codelets/cpu/sdp_cpu_kernels.h"

#define POOL_MAX 64

static struct {
    pthread_mutex_t run;  /* held by the caller of the job in progress */
    pthread_mutex_t lock; /* guards the fields below */
    pthread_cond_t go, done;
    int started;  /* helper threads alive */
    unsigned gen; /* job generation: helpers wait for a new one */
    int nth;      /* threads of the job, the caller included */
    int pending;  /* helpers still in the job */
    void (*fn)(void *arg, int tid, int nth);
    void *arg;
} pool = { .run = PTHREAD_MUTEX_INITIALIZER,
           .lock = PTHREAD_MUTEX_INITIALIZER,
           .go = PTHREAD_COND_INITIALIZER,
           .done = PTHREAD_COND_INITIALIZER };

static void *helper(void *p)
{
    const int tid = (int)(intptr_t)p;
    unsigned seen = 0;
    cpu_set_t cpus;

    if (sched_getaffinity(getpid(), sizeof(cpus), &cpus) == 0) /* best effort */
        pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.gen == seen)
            pthread_cond_wait(&pool.go, &pool.lock);
        seen = pool.gen;
        if (tid >= pool.nth)
            continue;
        void (*fn)(void *, int, int) = pool.fn;
        void *arg = pool.arg;
        const int nth = pool.nth;
        pthread_mutex_unlock(&pool.lock);
        fn(arg, tid, nth);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

int sdp_cpu_pool_run(int nthreads, void (*fn)(void *arg, int tid, int nth), void *arg)
{
    int nth = nthreads > POOL_MAX ? POOL_MAX : nthreads;

    if (nth <= 1 || pthread_mutex_trylock(&pool.run) != 0) {
        fn(arg, 0, 1);
        return 1;
    }
    pthread_mutex_lock(&pool.lock);
    while (pool.started < nth - 1) { /* helpers are numbered 1..started */
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &at, helper, (void *)(intptr_t)(pool.started + 1));
        pthread_attr_destroy(&at);
        if (rc)
            break;
        pool.started++;
    }
    nth = pool.started + 1 < nth ? pool.started + 1 : nth;
    pool.fn = fn;
    pool.arg = arg;
    pool.nth = nth;
    pool.pending = nth - 1;
    pool.gen++;
    pthread_cond_broadcast(&pool.go);
    pthread_mutex_unlock(&pool.lock);

    fn(arg, 0, nth);

    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.run);
    return nth;
}
