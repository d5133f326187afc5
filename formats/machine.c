/* SPDX-License-Identifier: MIT */
/* The machine description file (formats/machine.h): defaults, this node's identity, JSON read with
 * validation and atomic write. */
#include "config.h"

#include <errno.h>
#include <glob.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "formats/machine.h"

#define FORMAT_NAME "slidedp-machine"

/* The scalar rates of the node, by their key in the file. */
static const struct {
    const char *key;
    size_t off;
} scalars[] = {
    { "adamw_workers_bps", offsetof(struct sdp_machine, adamw_workers_bps) },
    { "dram_bps", offsetof(struct sdp_machine, dram_bps) },
    { "task_submit_s", offsetof(struct sdp_machine, task_submit_s) },
    { "task_s", offsetof(struct sdp_machine, task_s) },
    { "kernel_launch_s", offsetof(struct sdp_machine, kernel_launch_s) },
    { "cpu_gemm_flops", offsetof(struct sdp_machine, cpu_gemm_flops) },
    { "cpu_gemm_flops_all", offsetof(struct sdp_machine, cpu_gemm_flops_all) },
    { "cpu_attention_flops", offsetof(struct sdp_machine, cpu_attention_flops) },
    { "cpu_head_flops", offsetof(struct sdp_machine, cpu_head_flops) },
    { "cpu_elem_bps", offsetof(struct sdp_machine, cpu_elem_bps) },
    { "host_mem_bytes", offsetof(struct sdp_machine, host_mem_bytes) },
    { "calib_s", offsetof(struct sdp_machine, calib_s) },
};

/* The rates of one GPU, by their key in its object. */
static const struct {
    const char *key;
    size_t off;
} gpu_rates[] = {
    { "h2d_bps", offsetof(struct sdp_machine_gpu, h2d_bps) },
    { "d2h_bps", offsetof(struct sdp_machine_gpu, d2h_bps) },
    { "h2d_shared_bps", offsetof(struct sdp_machine_gpu, h2d_shared_bps) },
    { "d2h_shared_bps", offsetof(struct sdp_machine_gpu, d2h_shared_bps) },
    { "h2d_busy_bps", offsetof(struct sdp_machine_gpu, h2d_busy_bps) },
    { "bf16_flops", offsetof(struct sdp_machine_gpu, bf16_flops) },
    { "attention_flops", offsetof(struct sdp_machine_gpu, attention_flops) },
    { "head_flops", offsetof(struct sdp_machine_gpu, head_flops) },
    { "elem_bps", offsetof(struct sdp_machine_gpu, elem_bps) },
    { "mem_bytes", offsetof(struct sdp_machine_gpu, mem_bytes) },
    { "base_bytes", offsetof(struct sdp_machine_gpu, base_bytes) },
};

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

void sdp_machine_defaults(struct sdp_machine *m)
{
    memset(m, 0, sizeof(*m));
    m->cores = 16;
    m->nthreads = 16;
    m->host_mem_bytes = 120.0 * 1073741824; /* of the 125 GiB node (BENCH.md), what is free */
    /* DRAM-bound from about 13 threads: 14 GB/s a thread up to the seed's 183 GB/s; the cast moves
     * 6 B per element against AdamW's 28 but is as bandwidth-bound, so the same curve */
    for (int t = 1; t <= m->nthreads; t++) {
        m->adamw_bps[t - 1] = fmin(14e9 * t, 183e9);
        m->cast_bps[t - 1] = fmin(14e9 * t, 183e9);
    }
    m->dram_bps = 81e9;      /* triad, 16 threads (BENCH.md) */
    m->task_submit_s = 5e-6; /* StarPU's submission of a task, order of magnitude */
    m->task_s = 20e-6;       /* submitted to ended, dependencies included */
    m->kernel_launch_s = 5e-6;
    m->gpus = 1;
    snprintf(m->gpu[0].name, sizeof(m->gpu[0].name), "%s", "");
    m->gpu[0].h2d_bps = 55.5e9; /* pinned copies (BENCH.md) */
    m->gpu[0].d2h_bps = 55.3e9;
    m->gpu[0].h2d_shared_bps = 55.5e9 * 8.7 / 15.6; /* the seed's two GPUs: 8.7 each of 15.6 */
    m->gpu[0].d2h_shared_bps = 55.3e9 * 8.7 / 15.6;
    m->gpu[0].h2d_busy_bps = 55.5e9;          /* none slower: graph/predict.c's reference figure */
    m->gpu[0].bf16_flops = 700e12;            /* the layer GEMMs of qwen3-4b/8b at batch 16 */
    m->gpu[0].attention_flops = 336e12;       /* qwen3-4b attention fwd+bwd */
    m->gpu[0].head_flops = 700e12;            /* a GEMM's rate: its logits and gradients */
    m->gpu[0].elem_bps = 2.7e12;              /* graph/predict.c's reference figure */
    m->gpu[0].mem_bytes = 143771.0 * 1048576; /* the H200's 141 GB as the driver reports them */
    m->gpu[0].base_bytes = 530.0 * 1048576;   /* graph/predict.c's reference figure */
    m->ngemm = 1;
    m->gemm[0] = (struct sdp_machine_gemm){ 16384, 2560, 6144, 787e12 };
}

/* The CPU's model name from /proc/cpuinfo, else the architecture. */
static void cpu_model(char *out, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    struct utsname u;

    out[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon)
            continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(out, len, "%s", colon);
        break;
    }
    if (f)
        fclose(f);
    if (!out[0] && uname(&u) == 0)
        snprintf(out, len, "%s", u.machine);
}

/* The NVIDIA GPUs' model names from the driver's /proc files ("Model: NVIDIA H200"), in PCI
 * order, as CUDA numbers them by default only when CUDA_DEVICE_ORDER=PCI_BUS_ID: the names serve to
 * tell one machine from another, not one device from another.  @return how many */
static int gpu_models(struct sdp_machine_gpu *gpu, int max)
{
    glob_t gl;
    int n = 0;
    if (glob("/proc/driver/nvidia/gpus/*/information", 0, NULL, &gl) != 0)
        return 0;
    for (size_t i = 0; i < gl.gl_pathc && n < max; i++) {
        FILE *f = fopen(gl.gl_pathv[i], "r");
        char line[256];
        while (f && fgets(line, sizeof(line), f)) {
            if (strncmp(line, "Model:", 6))
                continue;
            line[strcspn(line, "\n")] = '\0';
            snprintf(gpu[n++].name, sizeof(gpu[0].name), "%s", line + 6 + strspn(line + 6, " \t"));
            break;
        }
        if (f)
            fclose(f);
    }
    globfree(&gl);
    return n;
}

void sdp_machine_identify(struct sdp_machine *m)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    m->gpus = gpu_models(m->gpu, SDP_MACHINE_MAX_GPUS);
    if (gethostname(m->host, sizeof(m->host)) != 0)
        m->host[0] = '\0';
    m->host[sizeof(m->host) - 1] = '\0';
    cpu_model(m->cpu, sizeof(m->cpu));
    m->cores = n > 0 ? (int)n : 1;
}

static double table_at(const double *tab, int n, int threads)
{
    if (n <= 0)
        return 0.0;
    if (threads < 1)
        threads = 1;
    return tab[(threads > n ? n : threads) - 1];
}

double sdp_machine_adamw_bps(const struct sdp_machine *m, int threads)
{
    return table_at(m->adamw_bps, m->nthreads, threads);
}

double sdp_machine_cast_bps(const struct sdp_machine *m, int threads)
{
    return table_at(m->cast_bps, m->nthreads, threads);
}

/* ---- writing ---- */

/* A rate as JSON: null when not measured. */
static json_t *rate(double v)
{
    return v > 0.0 ? json_real(v) : json_null();
}

static json_t *table(const double *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, rate(v[i]));
    return a;
}

static json_t *to_json(const struct sdp_machine *m)
{
    json_t *o = json_object(), *gpus = json_array(), *gemms = json_array();
    json_object_set_new(o, "format", json_string(FORMAT_NAME));
    json_object_set_new(o, "version", json_integer(SDP_MACHINE_VERSION));
    json_object_set_new(o, "host", json_string(m->host));
    json_object_set_new(o, "cpu", json_string(m->cpu));
    json_object_set_new(o, "cores", json_integer(m->cores));
    json_object_set_new(o, "gpus", json_integer(m->gpus));
    json_object_set_new(o, "adamw_bps", table(m->adamw_bps, m->nthreads));
    json_object_set_new(o, "cast_bps", table(m->cast_bps, m->nthreads));
    json_object_set_new(o, "adamw_workers", json_integer(m->adamw_workers));
    for (int i = 0; i < NELEMS(scalars); i++)
        json_object_set_new(o, scalars[i].key,
                            rate(*(const double *)((const char *)m + scalars[i].off)));
    for (int g = 0; g < m->gpus; g++) {
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(m->gpu[g].name));
        for (int i = 0; i < NELEMS(gpu_rates); i++)
            json_object_set_new(
                e, gpu_rates[i].key,
                rate(*(const double *)((const char *)&m->gpu[g] + gpu_rates[i].off)));
        json_array_append_new(gpus, e);
    }
    json_object_set_new(o, "gpu", gpus);
    for (int i = 0; i < m->ngemm; i++)
        json_array_append_new(gemms, json_pack("{s:i, s:i, s:i, s:o}", "m", m->gemm[i].m, "k",
                                               m->gemm[i].k, "n", m->gemm[i].n, "flops",
                                               rate(m->gemm[i].flops)));
    json_object_set_new(o, "gemm", gemms);
    json_object_set_new(o, "node_link",
                        m->node_gbs > 0 ? json_pack("{s:o, s:o}", "gbs", rate(m->node_gbs),
                                                    "latency_us", json_real(m->node_latency_us))
                                        : json_null());
    return o;
}

int sdp_machine_save(const char *path, const struct sdp_machine *m)
{
    json_t *o;
    char *text, *line;
    size_t len;
    int rc;

    if (m->nthreads < 0 || m->nthreads > SDP_MACHINE_MAX_THREADS || m->gpus < 0 ||
        m->gpus > SDP_MACHINE_MAX_GPUS || m->ngemm < 0 || m->ngemm > SDP_MACHINE_MAX_GEMMS)
        return sdp_err(-EINVAL,
                       "machine file %s: %d thread counts, %d GPUs, %d GEMM shapes "
                       "(at most %d, %d, %d)",
                       path, m->nthreads, m->gpus, m->ngemm, SDP_MACHINE_MAX_THREADS,
                       SDP_MACHINE_MAX_GPUS, SDP_MACHINE_MAX_GEMMS);
    o = to_json(m);
    text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    json_decref(o);
    len = text ? strlen(text) : 0;
    line = text ? realloc(text, len + 2) : NULL; /* the file ends with a newline */
    if (!line) {
        free(text);
        return sdp_err(-ENOMEM, "machine file %s: cannot format", path);
    }
    text = line;
    memcpy(text + len, "\n", 2);
    rc = sdp_write_file_atomic(path, text, len + 1); /* logs the path on failure */
    free(text);
    return rc;
}

/* ---- reading ---- */

/* What a reading knows for its messages: the file and the missing keys. */
struct reader {
    const char *path;
    int nmissing;
    char missing[512];
};

static void note_missing(struct reader *r, const char *key)
{
    size_t len = strlen(r->missing);
    if (len + strlen(key) + 3 < sizeof(r->missing))
        snprintf(r->missing + len, sizeof(r->missing) - len, "%s%s", len ? ", " : "", key);
    r->nmissing++;
}

/* A rate: null = not measured (0), else a finite number >= 0.  @return 0 or -EINVAL (logged) */
static int read_rate(struct reader *r, const json_t *v, const char *key, double *out)
{
    double x;
    if (json_is_null(v)) {
        *out = 0.0;
        return 0;
    }
    x = json_number_value(v);
    if (!json_is_number(v) || !isfinite(x) || x < 0.0)
        return sdp_err(-EINVAL, "machine file %s: '%s' is not a rate (a number >= 0, or null)",
                       r->path, key);
    *out = x;
    return 0;
}

/* An integer field in [lo, hi]; missing: the default stays.  @return 0 or -EINVAL (logged) */
static int read_int(struct reader *r, const json_t *o, const char *key, int lo, int hi, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v) {
        note_missing(r, key);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return sdp_err(-EINVAL, "machine file %s: '%s' is not an integer in [%d, %d]", r->path, key,
                       lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int read_str(struct reader *r, const json_t *o, const char *key, char *out, size_t len)
{
    const json_t *v = json_object_get(o, key);
    if (!v) {
        note_missing(r, key);
        return 0;
    }
    if (!json_is_string(v))
        return sdp_err(-EINVAL, "machine file %s: '%s' is not a string", r->path, key);
    snprintf(out, len, "%s", json_string_value(v));
    return 0;
}

/* A thread table: an array of 1 to SDP_MACHINE_MAX_THREADS rates.  Missing: the defaults stay. */
static int read_table(struct reader *r, const json_t *o, const char *key, double *tab, int *n)
{
    const json_t *a = json_object_get(o, key);
    int len;
    if (!a) {
        note_missing(r, key);
        return 0;
    }
    len = json_is_array(a) ? (int)json_array_size(a) : 0;
    if (len < 1 || len > SDP_MACHINE_MAX_THREADS)
        return sdp_err(-EINVAL, "machine file %s: '%s' is not an array of 1 to %d rates", r->path,
                       key, SDP_MACHINE_MAX_THREADS);
    if (*n > 0 && *n != len)
        return sdp_err(-EINVAL, "machine file %s: '%s' has %d thread counts, the other table %d",
                       r->path, key, len, *n);
    for (int i = 0; i < len; i++)
        if (read_rate(r, json_array_get(a, (size_t)i), key, &tab[i]))
            return -EINVAL;
    *n = len;
    return 0;
}

static int read_gpus(struct reader *r, const json_t *o, struct sdp_machine *m)
{
    const json_t *a = json_object_get(o, "gpu");
    if (!a) {
        note_missing(r, "gpu");
        return 0;
    }
    if (!json_is_array(a) || (int)json_array_size(a) != m->gpus)
        return sdp_err(-EINVAL, "machine file %s: 'gpu' is not an array of 'gpus' (%d) objects",
                       r->path, m->gpus);
    for (int g = 0; g < m->gpus; g++) {
        const json_t *e = json_array_get(a, (size_t)g);
        struct sdp_machine_gpu *d = &m->gpu[g];
        memset(d, 0, sizeof(*d));
        if (!json_is_object(e))
            return sdp_err(-EINVAL, "machine file %s: gpu[%d] is not an object", r->path, g);
        if (read_str(r, e, "name", d->name, sizeof(d->name)))
            return -EINVAL;
        for (int i = 0; i < NELEMS(gpu_rates); i++) {
            const json_t *v = json_object_get(e, gpu_rates[i].key);
            if (!v)
                note_missing(r, gpu_rates[i].key);
            else if (read_rate(r, v, gpu_rates[i].key, (double *)((char *)d + gpu_rates[i].off)))
                return -EINVAL;
        }
    }
    return 0;
}

/* node_link: {gbs > 0, latency_us >= 0}, or null or absent (not measured: no default to note). */
static int read_node_link(struct reader *r, const json_t *o, struct sdp_machine *m)
{
    const json_t *l = json_object_get(o, "node_link"), *g, *u;
    if (!l || json_is_null(l))
        return 0;
    g = json_object_get(l, "gbs"), u = json_object_get(l, "latency_us");
    if (!json_is_object(l) || !json_is_number(g) || !json_is_number(u) ||
        !(json_number_value(g) > 0) || !isfinite(json_number_value(g)) ||
        !(json_number_value(u) >= 0) || !isfinite(json_number_value(u)))
        return sdp_err(-EINVAL,
                       "machine file %s: 'node_link' is not {\"gbs\": GB/s > 0, \"latency_us\": "
                       "us >= 0} (or null)",
                       r->path);
    m->node_gbs = json_number_value(g), m->node_latency_us = json_number_value(u);
    return 0;
}

static int read_gemms(struct reader *r, const json_t *o, struct sdp_machine *m)
{
    const json_t *a = json_object_get(o, "gemm");
    if (!a) {
        note_missing(r, "gemm");
        return 0;
    }
    if (!json_is_array(a) || json_array_size(a) > SDP_MACHINE_MAX_GEMMS)
        return sdp_err(-EINVAL, "machine file %s: 'gemm' is not an array of at most %d shapes",
                       r->path, SDP_MACHINE_MAX_GEMMS);
    m->ngemm = (int)json_array_size(a);
    for (int i = 0; i < m->ngemm; i++) {
        const json_t *e = json_array_get(a, (size_t)i);
        struct sdp_machine_gemm *d = &m->gemm[i];
        if (!json_is_object(e) || read_int(r, e, "m", 1, 1 << 30, &d->m) ||
            read_int(r, e, "k", 1, 1 << 30, &d->k) || read_int(r, e, "n", 1, 1 << 30, &d->n) ||
            read_rate(r, json_object_get(e, "flops"), "gemm flops", &d->flops))
            return sdp_err(-EINVAL, "machine file %s: gemm[%d] is not {m, k, n, flops}", r->path,
                           i);
    }
    return 0;
}

/* Every field of the object o into m (which holds the defaults).  @return 0 or -EINVAL (logged) */
static int from_json(struct reader *r, const json_t *o, struct sdp_machine *m)
{
    const json_t *fmt = json_object_get(o, "format"), *ver = json_object_get(o, "version");
    int nt = 0;
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), FORMAT_NAME) ||
        !json_is_integer(ver) || json_integer_value(ver) != SDP_MACHINE_VERSION)
        return sdp_err(-EINVAL, "machine file %s: not a \"%s\" file of version %d", r->path,
                       FORMAT_NAME, SDP_MACHINE_VERSION);
    if (read_str(r, o, "host", m->host, sizeof(m->host)) ||
        read_str(r, o, "cpu", m->cpu, sizeof(m->cpu)) ||
        read_int(r, o, "cores", 1, 1 << 20, &m->cores) ||
        read_int(r, o, "gpus", 0, SDP_MACHINE_MAX_GPUS, &m->gpus) ||
        read_int(r, o, "adamw_workers", 0, SDP_MACHINE_MAX_THREADS, &m->adamw_workers))
        return -EINVAL;
    if (read_table(r, o, "adamw_bps", m->adamw_bps, &nt) ||
        read_table(r, o, "cast_bps", m->cast_bps, &nt))
        return -EINVAL;
    if (nt)
        m->nthreads = nt;
    for (int i = 0; i < NELEMS(scalars); i++) {
        const json_t *v = json_object_get(o, scalars[i].key);
        if (!v)
            note_missing(r, scalars[i].key);
        else if (read_rate(r, v, scalars[i].key, (double *)((char *)m + scalars[i].off)))
            return -EINVAL;
    }
    return read_gpus(r, o, m) || read_gemms(r, o, m) || read_node_link(r, o, m) ? -EINVAL : 0;
}

/* Whether the file's node differs from here, as far as both know it.  @return 0 or -ESTALE */
static int check_stale(const char *path, const struct sdp_machine *f, const struct sdp_machine *h)
{
    char what[160] = "", was[300] = "";
    if (h->host[0] && f->host[0] && strcmp(h->host, f->host))
        snprintf(what, sizeof(what), "host %s", f->host), snprintf(was, sizeof(was), "%s", h->host);
    else if (h->cpu[0] && f->cpu[0] && strcmp(h->cpu, f->cpu))
        snprintf(what, sizeof(what), "CPU '%s'", f->cpu),
            snprintf(was, sizeof(was), "'%s'", h->cpu);
    else if (h->cores > 0 && f->cores > 0 && h->cores != f->cores)
        snprintf(what, sizeof(what), "%d cores", f->cores),
            snprintf(was, sizeof(was), "%d", h->cores);
    else if (h->gpus > 0 && h->gpu[0].name[0] && f->gpus > 0 && f->gpu[0].name[0] &&
             strcmp(h->gpu[0].name, f->gpu[0].name))
        snprintf(what, sizeof(what), "GPU '%s'", f->gpu[0].name),
            snprintf(was, sizeof(was), "'%s'", h->gpu[0].name);
    if (!what[0])
        return 0;
    return sdp_err(-ESTALE, "machine file %s: measured on %s, this machine has %s", path, what,
                   was);
}

int sdp_machine_load(const char *path, const struct sdp_machine *here, struct sdp_machine *m)
{
    struct reader r = { .path = path };
    struct stat sb;
    json_error_t jerr;
    json_t *o = NULL;
    int rc;

    sdp_machine_defaults(m);
    if (stat(path, &sb) != 0) {
        rc = sdp_err(-errno, "machine file %s: cannot read it", path);
        goto fail;
    }
    o = json_load_file(path, 0, &jerr);
    if (!o) {
        rc = sdp_err(access(path, R_OK) ? -EIO : -EINVAL, "machine file %s: line %d: %s", path,
                     jerr.line, jerr.text);
        goto fail;
    }
    rc = json_is_object(o) ? from_json(&r, o, m)
                           : sdp_err(-EINVAL, "machine file %s: not a JSON object", path);
    json_decref(o);
    if (!rc && here)
        rc = check_stale(path, m, here);
    if (rc)
        goto fail;
    m->ndefaulted = r.nmissing;
    if (r.nmissing) {
        SDP_WARN("machine file %s: %d field%s missing (%s): the defaults stand for %s", path,
                 r.nmissing, r.nmissing > 1 ? "s" : "", r.missing, r.nmissing > 1 ? "them" : "it");
        sdp_hint("`slidedp calibrate -o %s` measures them all", path);
    }
    return 0;
fail:
    sdp_machine_defaults(m);
    sdp_hint("run `slidedp calibrate -o %s` on this machine; until then the model uses its "
             "defaults (a 16-core node with one H200)",
             path);
    return rc;
}
