/* SPDX-License-Identifier: MIT */
/* Task event recording and the two trace files (events JSONL, Chrome/Perfetto JSON).  Events are
 * appended from task callbacks on any worker thread, under one mutex, into a growing array.  This
 * file must not decide what a task means (lane, version): the submitter tags it.  Times come from
 * StarPU's profiling (the clock of starpu_timing_now) and are written in microseconds since
 * sdp_trace_start.  Test: tests/e2e/test_e2e_trace.sh. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "runtime/init.h"
#include "runtime/trace.h"

struct event {
    struct sdp_trace_tag tag;
    int worker, rank, is_cuda;
    double start_us, end_us;
    /* a task's: pushed to the scheduler (ready), popped by its worker, its inputs there (NAN:
     * not recorded); the gaps before start_us tell a wait on the policy from one on a transfer */
    double ready_us, popped_us, fetched_us;
    const char *why; /* a wait (sdp_trace_wait): its reason; NULL for a task */
    const char *bus; /* a bus sample (sdp_trace_bus): "h2d", "d2h" or "p2p"; NULL otherwise */
    int node;        /* a bus sample's GPU memory node (the destination of p2p) */
    long long transfers;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct event *events;
static long nevents, cap_events;
static int recording;
static int saved_profiling = -1; /* StarPU's profiling status before sdp_trace_start */
static double base_us;
static double bus_us; /* the previous bus sample (sdp_trace_bus) */
/* a run over several nodes (sdp_trace_set_node): this node, its first rank in the run, and what
 * moves its times onto node 0's clock and base; -1: one node */
static int cluster_node = -1, first_rank;
static double shift_us;
static unsigned long long bus_base[SDP_RT_MAX_BUSES], xfer_base[SDP_RT_MAX_BUSES]; /* its totals */

static const char *const lane_names[SDP_NLANES] = {
    [SDP_LANE_PARAM_CAST] = "param cast",
    [SDP_LANE_PARAM_H2D] = "param H2D",
    [SDP_LANE_ACT_OFFLOAD] = "activation offload/reload",
    [SDP_LANE_GPU_COMPUTE] = "GPU compute",
    [SDP_LANE_GRAD_REDUCE] = "gradient reduction",
    [SDP_LANE_GRAD_D2H] = "gradient D2H",
    [SDP_LANE_CPU_ADAMW] = "CPU AdamW",
    [SDP_LANE_CPU_COMPUTE] = "CPU compute",
};

const char *sdp_trace_lane_name(enum sdp_trace_lane lane)
{
    return (unsigned)lane < SDP_NLANES ? lane_names[lane] : "unknown";
}

int sdp_trace_start(void)
{
    int prev = starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
    if (prev < 0)
        return sdp_err(prev, "cannot enable StarPU task profiling");
    pthread_mutex_lock(&lock);
    if (saved_profiling < 0)
        saved_profiling = prev;
    nevents = 0;
    base_us = starpu_timing_now();
    bus_us = base_us;
    sdp_rt_bus_totals(bus_base, xfer_base);
    __atomic_store_n(&recording, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    return 0;
}

double sdp_trace_now_us(void)
{
    return starpu_timing_now();
}

double sdp_trace_base_us(void)
{
    return base_us;
}

void sdp_trace_set_node(int node, int rank0, double shift)
{
    cluster_node = node;
    first_rank = rank0;
    shift_us = shift;
}

int sdp_trace_enabled(void)
{
    return __atomic_load_n(&recording, __ATOMIC_ACQUIRE);
}

/* Append one event (times still on starpu_timing_now's clock). */
static void append(struct event *evp)
{
    struct event ev = *evp;
    pthread_mutex_lock(&lock);
    if (recording) {
        if (nevents == cap_events) {
            long ncap = cap_events ? 2 * cap_events : 4096;
            struct event *p = realloc(events, (size_t)ncap * sizeof(*p));
            if (!p) {
                /* a callback cannot return an error: stop recording and say so once */
                recording = 0;
                pthread_mutex_unlock(&lock);
                SDP_ERROR("out of memory for %ld trace events: the trace stops here", ncap);
                return;
            }
            events = p;
            cap_events = ncap;
        }
        ev.start_us -= base_us;
        ev.end_us -= base_us;
        ev.ready_us -= base_us; /* NAN stays NAN */
        ev.popped_us -= base_us;
        ev.fetched_us -= base_us;
        events[nevents++] = ev;
    }
    pthread_mutex_unlock(&lock);
}

/* A profiling time in us on starpu_timing_now's clock, NAN when StarPU left it unset. */
static double stamp_us(struct timespec *t)
{
    return t->tv_sec || t->tv_nsec ? starpu_timing_timespec_to_us(t) : NAN;
}

void sdp_trace_task_done(struct starpu_task *task, const struct sdp_trace_tag *tag)
{
    struct starpu_profiling_task_info *pi = task->profiling_info;
    struct event ev = { 0 };
    if (!pi || !sdp_trace_enabled())
        return;
    ev.tag = *tag;
    ev.worker = pi->workerid;
    ev.is_cuda = pi->workerid >= 0 && starpu_worker_get_type(pi->workerid) == STARPU_CUDA_WORKER;
    ev.rank = tag->rank;
    if (ev.tag.lane == SDP_LANE_GPU_COMPUTE && !ev.is_cuda)
        ev.tag.lane = SDP_LANE_CPU_COMPUTE;
    else if (ev.tag.lane == SDP_LANE_CPU_ADAMW && ev.is_cuda) /* train.gpu_update */
        ev.tag.lane = SDP_LANE_GPU_COMPUTE;
    ev.start_us = starpu_timing_timespec_to_us(&pi->start_time);
    ev.end_us = starpu_timing_timespec_to_us(&pi->end_time);
    ev.ready_us = stamp_us(&pi->push_end_time);
    ev.popped_us = stamp_us(&pi->pop_end_time);
    ev.fetched_us = stamp_us(&pi->acquire_data_end_time);
    ev.why = NULL;
    append(&ev);
}

void sdp_trace_wait(int lane, int rank, int step, int group, int chunk, double start_us,
                    double end_us, const char *why)
{
    struct event ev = { 0 };
    if (!sdp_trace_enabled())
        return;
    ev.tag.name = "wait";
    ev.tag.phase = "wait";
    ev.tag.step = step;
    ev.tag.group = group;
    ev.tag.chunk = chunk;
    ev.tag.mb = -1;
    ev.tag.version = -1;
    ev.tag.rank = rank;
    ev.tag.lane = (unsigned)lane < SDP_NLANES ? (enum sdp_trace_lane)lane : SDP_LANE_CPU_ADAMW;
    ev.worker = -1;
    ev.rank = rank;
    ev.start_us = start_us;
    ev.end_us = end_us;
    ev.why = why ? why : "unknown";
    append(&ev);
}

void sdp_trace_bus(int step)
{
    double now = starpu_timing_now();
    unsigned long long bytes[SDP_RT_MAX_BUSES], xfers[SDP_RT_MAX_BUSES];
    int nbus;
    if (!sdp_trace_enabled())
        return;
    nbus = sdp_rt_bus_totals(bytes, xfers);
    for (int b = 0; b < nbus; b++) {
        int src = starpu_bus_get_src(b), dst = starpu_bus_get_dst(b);
        int hs = starpu_node_get_kind((unsigned)src) == STARPU_CPU_RAM,
            hd = starpu_node_get_kind((unsigned)dst) == STARPU_CPU_RAM;
        unsigned long long n = bytes[b] - bus_base[b], k = xfers[b] - xfer_base[b];
        struct event ev = { 0 };
        bus_base[b] = bytes[b];
        xfer_base[b] = xfers[b];
        if (n == 0 || (hs && hd))
            continue;
        ev.bus = hs ? "h2d" : hd ? "d2h" : "p2p";
        ev.node = hd ? src : dst;
        ev.tag.name = ev.bus;
        ev.tag.phase = "bus";
        ev.tag.step = step;
        ev.tag.group = ev.tag.chunk = ev.tag.mb = ev.tag.version = -1;
        ev.tag.lane = hd ? SDP_LANE_GRAD_D2H : SDP_LANE_PARAM_H2D;
        ev.tag.bytes = (long long)n;
        ev.transfers = (long long)k;
        ev.worker = -1;
        ev.start_us = bus_us;
        ev.end_us = now;
        ev.ready_us = ev.popped_us = ev.fetched_us = NAN;
        append(&ev);
    }
    bus_us = now;
}

long sdp_trace_nevents(void)
{
    long n;
    pthread_mutex_lock(&lock);
    n = nevents;
    pthread_mutex_unlock(&lock);
    return n;
}

/* why as a JSON string body (the reasons are static strings, but stay valid JSON whatever). */
static void put_json_text(FILE *f, const char *t)
{
    for (; *t; t++) {
        if (*t == '"' || *t == '\\')
            fprintf(f, "\\%c", *t);
        else if ((unsigned char)*t < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*t);
        else
            fputc(*t, f);
    }
}

static void write_event_body(FILE *f, const struct event *e);

static void write_event_jsonl(FILE *f, const struct event *e)
{
    if (cluster_node >= 0) { /* the run's ranks and node 0's clock; the rest as one node's */
        struct event c = *e;
        c.start_us += shift_us;
        c.end_us += shift_us;
        c.ready_us += shift_us; /* NAN stays NAN */
        c.popped_us += shift_us;
        c.fetched_us += shift_us;
        c.rank += first_rank;
        fprintf(f, "{\"cluster_node\": %d, ", cluster_node);
        write_event_body(f, &c);
        return;
    }
    fputc('{', f);
    write_event_body(f, e);
}

/* An event's fields after its opening brace. */
static void write_event_body(FILE *f, const struct event *e)
{
    if (e->bus) {
        fprintf(f,
                "\"event\": \"bus\", \"name\": \"%s\", \"phase\": \"bus\", \"step\": %d, "
                "\"group\": -1, \"chunk\": -1, \"mb\": -1, \"version\": -1, \"lane\": \"%s\", "
                "\"lane_id\": %d, \"worker\": -1, \"kind\": \"bus\", \"rank\": 0, \"node\": %d, "
                "\"bytes\": %lld, \"transfers\": %lld, \"start_us\": %.3f, \"end_us\": %.3f}\n",
                e->bus, e->tag.step, sdp_trace_lane_name(e->tag.lane), (int)e->tag.lane, e->node,
                e->tag.bytes, e->transfers, e->start_us, e->end_us);
        return;
    }
    if (e->why) {
        fputs("\"event\": \"wait\", \"name\": \"wait: ", f);
        put_json_text(f, e->why);
        fputs("\", \"why\": \"", f);
        put_json_text(f, e->why);
        fprintf(f,
                "\", \"phase\": \"wait\", \"step\": %d, \"group\": %d, \"chunk\": %d, "
                "\"mb\": -1, \"version\": -1, \"lane\": \"%s\", \"lane_id\": %d, \"worker\": -1, "
                "\"kind\": \"wait\", \"rank\": %d, \"start_us\": %.3f, \"end_us\": %.3f}\n",
                e->tag.step, e->tag.group, e->tag.chunk, sdp_trace_lane_name(e->tag.lane),
                (int)e->tag.lane, e->rank, e->start_us, e->end_us);
        return;
    }
    fprintf(f,
            "\"name\": \"%s\", \"phase\": \"%s\", \"step\": %d, \"group\": %d, \"chunk\": %d, "
            "\"mb\": %d, \"version\": %d, \"lane\": \"%s\", \"lane_id\": %d, \"worker\": %d, "
            "\"kind\": \"%s\", \"rank\": %d, \"start_us\": %.3f, \"end_us\": %.3f",
            e->tag.name, e->tag.phase, e->tag.step, e->tag.group, e->tag.chunk, e->tag.mb,
            e->tag.version, sdp_trace_lane_name(e->tag.lane), (int)e->tag.lane, e->worker,
            e->is_cuda ? "CUDA" : "CPU", e->rank, e->start_us, e->end_us);
    if (e->tag.grad_lim > 0)
        fprintf(f, ", \"grad_lim\": %d", e->tag.grad_lim);
    if (e->tag.tied)
        fprintf(f, ", \"tied\": 1");
    if (e->tag.stage1 > 0)
        fprintf(f, ", \"stage\": %d, \"round\": %d", e->tag.stage1 - 1, e->tag.round1 - 1);
    if (e->tag.bytes > 0)
        fprintf(f, ", \"bytes\": %lld", e->tag.bytes);
    if (!isnan(e->ready_us))
        fprintf(f, ", \"ready_us\": %.3f", e->ready_us);
    if (!isnan(e->popped_us))
        fprintf(f, ", \"popped_us\": %.3f", e->popped_us);
    if (!isnan(e->fetched_us))
        fprintf(f, ", \"fetched_us\": %.3f", e->fetched_us);
    fputs("}\n", f);
}

static void write_chrome(FILE *f, const struct event *ev, long n)
{
    int maxrank = 0;
    long i;
    for (i = 0; i < n; i++)
        if (ev[i].rank > maxrank)
            maxrank = ev[i].rank;
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
    for (int r = 0; r <= maxrank; r++) {
        fprintf(f,
                "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                "\"args\": {\"name\": \"rank %d\"}},\n",
                r, r);
        for (int l = 0; l < SDP_NLANES; l++)
            fprintf(f,
                    "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                    "\"args\": {\"name\": \"%s\"}},\n"
                    "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                    "\"args\": {\"sort_index\": %d}},\n",
                    r, l, lane_names[l], r, l, l);
    }
    for (i = 0; i < n; i++) {
        const struct event *e = &ev[i];
        if (e->bus) { /* a counter, not a span of work: MB since the previous sample */
            fprintf(f,
                    "{\"name\": \"bus %s (node %d)\", \"ph\": \"C\", \"ts\": %.3f, \"pid\": 0, "
                    "\"args\": {\"MB\": %.3f}},\n",
                    e->bus, e->node, e->end_us, e->tag.bytes / 1e6);
            continue;
        }
        if (e->why) {
            fputs("{\"name\": \"wait: ", f);
            put_json_text(f, e->why);
            fprintf(f,
                    "\", \"cat\": \"wait\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, "
                    "\"pid\": %d, \"tid\": %d, \"args\": {\"step\": %d, \"group\": %d, "
                    "\"chunk\": %d, \"mb\": -1, \"version\": -1, \"worker\": -1, "
                    "\"kind\": \"wait\"}},\n",
                    e->start_us, e->end_us - e->start_us, e->rank, (int)e->tag.lane, e->tag.step,
                    e->tag.group, e->tag.chunk);
            continue;
        }
        fprintf(f,
                "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, "
                "\"pid\": %d, \"tid\": %d, \"args\": {\"step\": %d, \"group\": %d, \"chunk\": %d, "
                "\"mb\": %d, \"version\": %d, \"worker\": %d, \"kind\": \"%s\"}},\n",
                e->tag.name, e->tag.phase, e->start_us, e->end_us - e->start_us, e->rank,
                (int)e->tag.lane, e->tag.step, e->tag.group, e->tag.chunk, e->tag.mb,
                e->tag.version, e->worker, e->is_cuda ? "CUDA" : "CPU");
    }
    /* a last metadata event, so that every event above may end with a comma */
    fputs("{\"name\": \"trace_end\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": {}}\n]}\n",
          f);
}

static int cmp_start(const void *a, const void *b)
{
    const struct event *x = a, *y = b;
    return (x->start_us > y->start_us) - (x->start_us < y->start_us);
}

/* Render with fn into memory, then write path atomically. */
static int write_one(const char *path, const struct event *ev, long n,
                     void (*fn)(FILE *, const struct event *, long))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc;
    if (!f)
        return sdp_err(-ENOMEM, "trace %s: cannot allocate the output buffer", path);
    fn(f, ev, n);
    if (fclose(f) != 0) {
        free(buf);
        return sdp_err(-ENOMEM, "trace %s: cannot render %ld events", path, n);
    }
    rc = sdp_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}

static void write_jsonl(FILE *f, const struct event *ev, long n)
{
    for (long i = 0; i < n; i++)
        write_event_jsonl(f, &ev[i]);
}

int sdp_trace_write(const char *events_jsonl, const char *chrome_json)
{
    struct event *copy;
    long n;
    int rc = 0;
    pthread_mutex_lock(&lock);
    n = nevents;
    copy = malloc((size_t)(n ? n : 1) * sizeof(*copy));
    if (copy && n)
        memcpy(copy, events, (size_t)n * sizeof(*copy));
    pthread_mutex_unlock(&lock);
    if (!copy)
        return sdp_err(-ENOMEM, "cannot copy %ld trace events", n);
    qsort(copy, (size_t)n, sizeof(*copy), cmp_start);
    if (events_jsonl)
        rc = write_one(events_jsonl, copy, n, write_jsonl);
    if (!rc && chrome_json)
        rc = write_one(chrome_json, copy, n, write_chrome);
    free(copy);
    return rc;
}

void sdp_trace_stop(void)
{
    pthread_mutex_lock(&lock);
    __atomic_store_n(&recording, 0, __ATOMIC_RELEASE);
    free(events);
    events = NULL;
    nevents = cap_events = 0;
    if (saved_profiling >= 0)
        starpu_profiling_status_set(saved_profiling);
    saved_profiling = -1;
    pthread_mutex_unlock(&lock);
}
