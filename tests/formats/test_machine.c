/* SPDX-License-Identifier: MIT */
/* Checks formats/machine.c: the defaults, a write/read round trip of every field (absent rates
 * included), this node's identity, and the files a run may meet instead of a good one: missing,
 * stale (another host, CPU model, core count or GPU model), malformed (not JSON, another format or
 * version, a negative or non-numeric rate, tables of different lengths, a GPU list that does not
 * match its count) and short of some fields (a file written before the CPU compute rates among
 * them).  Each bad file must give its error code and the defaults in full; a short one its own
 * fields and the defaults for the rest. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/machine.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_files.h"

/* The file keeps 6 significant digits (JSON_REAL_PRECISION(6)): a rate read back is within half a
 * unit of the 6th digit, 5e-6 relative; 1e-5 leaves a factor 2. */
#define RTOL 1e-5

static int close_to(double a, double b)
{
    return fabs(a - b) <= RTOL * fmax(fabs(a), fabs(b));
}

/* A machine unlike the defaults in every field, two GPUs, some rates absent. */
static void sample(struct sdp_machine *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->host, sizeof(m->host), "node17");
    snprintf(m->cpu, sizeof(m->cpu), "Test CPU 9000 \"quoted\"");
    m->cores = 3;
    m->nthreads = 3;
    for (int t = 0; t < 3; t++) {
        m->adamw_bps[t] = 1.25e10 * (t + 1);
        m->cast_bps[t] = 3.5e9 * (t + 1);
    }
    m->adamw_workers = 2;
    m->adamw_workers_bps = 2.75e10;
    m->dram_bps = 2.345678e10;
    m->task_submit_s = 3.5e-6;
    m->task_s = 1.2e-5;
    m->kernel_launch_s = 0.0; /* not measured */
    m->cpu_gemm_flops = 1.218e11;
    m->cpu_gemm_flops_all = 2.512e11;
    m->cpu_attention_flops = 0.0; /* not measured */
    m->cpu_head_flops = 4.1e10;
    m->cpu_elem_bps = 6.5e9;
    m->calib_s = 12.5;
    m->gpus = 2;
    for (int g = 0; g < 2; g++) {
        snprintf(m->gpu[g].name, sizeof(m->gpu[g].name), "GPU Model X");
        m->gpu[g].h2d_bps = 1.5e10 + g;
        m->gpu[g].d2h_bps = 1.4e10;
        m->gpu[g].h2d_shared_bps = 8.7e9;
        m->gpu[g].d2h_shared_bps = g ? 0.0 : 8.1e9;
        m->gpu[g].bf16_flops = 6.5e14;
        m->gpu[g].attention_flops = 3.3e14;
        m->gpu[g].head_flops = 6.1e14;
        m->gpu[g].elem_bps = 1.9e12;
        m->gpu[g].mem_bytes = 150754820096.0;
        m->gpu[g].h2d_busy_bps = 4.1e9;
        m->gpu[g].base_bytes = 5.4e8 + g;
    }
    m->host_mem_bytes = 1.2e11;
    m->ngemm = 2;
    m->gemm[0] = (struct sdp_machine_gemm){ 16384, 2560, 6144, 7.8e14 };
    m->gemm[1] = (struct sdp_machine_gemm){ 16384, 9728, 2560, 0.0 };
    m->node_gbs = 11.75, m->node_latency_us = 4.5;
}

/* Whether a and b agree in every field (rates to RTOL). */
static int same(const struct sdp_machine *a, const struct sdp_machine *b)
{
    int ok = !strcmp(a->host, b->host) && !strcmp(a->cpu, b->cpu) && a->cores == b->cores &&
             a->gpus == b->gpus && a->nthreads == b->nthreads && a->ngemm == b->ngemm;
    for (int t = 0; ok && t < a->nthreads; t++)
        ok = close_to(a->adamw_bps[t], b->adamw_bps[t]) && close_to(a->cast_bps[t], b->cast_bps[t]);
    ok = ok && a->adamw_workers == b->adamw_workers &&
         close_to(a->adamw_workers_bps, b->adamw_workers_bps);
    ok = ok && close_to(a->dram_bps, b->dram_bps) && close_to(a->task_submit_s, b->task_submit_s) &&
         close_to(a->task_s, b->task_s) && close_to(a->kernel_launch_s, b->kernel_launch_s) &&
         close_to(a->calib_s, b->calib_s) && close_to(a->cpu_gemm_flops, b->cpu_gemm_flops) &&
         close_to(a->cpu_gemm_flops_all, b->cpu_gemm_flops_all) &&
         close_to(a->cpu_attention_flops, b->cpu_attention_flops) &&
         close_to(a->cpu_head_flops, b->cpu_head_flops) &&
         close_to(a->cpu_elem_bps, b->cpu_elem_bps) &&
         close_to(a->host_mem_bytes, b->host_mem_bytes) && close_to(a->node_gbs, b->node_gbs) &&
         close_to(a->node_latency_us, b->node_latency_us);
    for (int g = 0; ok && g < a->gpus; g++) {
        const struct sdp_machine_gpu *x = &a->gpu[g], *y = &b->gpu[g];
        ok = !strcmp(x->name, y->name) && close_to(x->h2d_bps, y->h2d_bps) &&
             close_to(x->d2h_bps, y->d2h_bps) && close_to(x->h2d_shared_bps, y->h2d_shared_bps) &&
             close_to(x->d2h_shared_bps, y->d2h_shared_bps) &&
             close_to(x->bf16_flops, y->bf16_flops) &&
             close_to(x->attention_flops, y->attention_flops) &&
             close_to(x->head_flops, y->head_flops) && close_to(x->elem_bps, y->elem_bps) &&
             close_to(x->mem_bytes, y->mem_bytes) && close_to(x->h2d_busy_bps, y->h2d_busy_bps) &&
             close_to(x->base_bytes, y->base_bytes);
    }
    for (int i = 0; ok && i < a->ngemm; i++)
        ok = a->gemm[i].m == b->gemm[i].m && a->gemm[i].k == b->gemm[i].k &&
             a->gemm[i].n == b->gemm[i].n && close_to(a->gemm[i].flops, b->gemm[i].flops);
    return ok;
}

static void test_defaults(void)
{
    struct sdp_machine d;
    sdp_machine_defaults(&d);
    CHECK(d.cores == 16 && d.nthreads == 16 && d.gpus == 1, "defaults: a 16-core node, 1 GPU");
    CHECK(sdp_machine_adamw_bps(&d, 16) == 183e9, "defaults: AdamW at 16 threads is the seed's");
    CHECK(sdp_machine_adamw_bps(&d, 1) < sdp_machine_adamw_bps(&d, 8), "AdamW rises with threads");
    CHECK(sdp_machine_adamw_bps(&d, 99) == 183e9 && sdp_machine_adamw_bps(&d, 0) == 14e9,
          "thread counts beyond the table are clamped");
    CHECK(d.gpu[0].h2d_bps > d.gpu[0].h2d_shared_bps, "a shared link is slower than one alone");
    CHECK(d.cpu_gemm_flops == 0.0 && d.cpu_gemm_flops_all == 0.0 && d.cpu_attention_flops == 0.0,
          "defaults: the CPU compute rates not measured (the reference node computes on its GPU)");
    d.nthreads = 0;
    CHECK(sdp_machine_cast_bps(&d, 4) == 0.0, "an empty table gives 0");
}

static void test_identify(void)
{
    struct sdp_machine m;
    memset(&m, 0, sizeof(m));
    sdp_machine_identify(&m);
    CHECK(m.cores >= 1 && m.cpu[0] && m.host[0], "identify: cores %d, cpu '%s', host '%s'", m.cores,
          m.cpu, m.host);
    CHECK(m.gpus >= 0 && m.gpus <= SDP_MACHINE_MAX_GPUS, "identify: %d GPUs", m.gpus);
}

static void test_round_trip(void)
{
    struct sdp_machine a, b, here;
    const char *path = sdp_test_path("m.json");
    sample(&a);
    CHECK(sdp_machine_save(path, &a) == 0, "save %s", path);
    CHECK(sdp_machine_load(path, NULL, &b) == 0 && same(&a, &b) && b.ndefaulted == 0,
          "round trip: every field back, none defaulted (%d)", b.ndefaulted);
    CHECK(b.kernel_launch_s == 0.0 && b.gpu[1].d2h_shared_bps == 0.0 &&
              b.cpu_attention_flops == 0.0,
          "an absent rate reads back absent, not defaulted");
    here = a; /* the same node: not stale */
    CHECK(sdp_machine_load(path, &here, &b) == 0 && same(&a, &b), "load on the same node");
    here.host[0] = '\0'; /* a field here does not know is not compared */
    CHECK(sdp_machine_load(path, &here, &b) == 0, "an unknown host name is not a stale file");
    CHECK(!sdp_test_exists(sdp_test_path("m.json.tmp")), "no temporary left behind");
    a.nthreads = SDP_MACHINE_MAX_THREADS + 1;
    CHECK(sdp_machine_save(sdp_test_path("big.json"), &a) == -EINVAL, "too many thread counts");
    sample(&a);
    CHECK(sdp_machine_save(sdp_test_path("no/such/dir/m.json"), &a) < 0,
          "a file in a missing directory is refused");
}

/* load path with here, expecting rc and the defaults in full. */
static void expect_defaults(const char *what, const char *path, const struct sdp_machine *here,
                            int want)
{
    struct sdp_machine m, d;
    int rc = sdp_machine_load(path, here, &m);
    sdp_machine_defaults(&d);
    CHECK(rc == want, "%s: rc %d, want %d", what, rc, want);
    CHECK(same(&m, &d), "%s: the defaults in full", what);
}

static void test_stale(void)
{
    struct sdp_machine a, here;
    const char *path = sdp_test_path("stale.json");
    sample(&a);
    CHECK(sdp_machine_save(path, &a) == 0, "save %s", path);
    here = a;
    snprintf(here.host, sizeof(here.host), "node18");
    expect_defaults("another host", path, &here, -ESTALE);
    here = a;
    snprintf(here.cpu, sizeof(here.cpu), "Other CPU");
    expect_defaults("another CPU", path, &here, -ESTALE);
    here = a;
    here.cores = 4;
    expect_defaults("another core count", path, &here, -ESTALE);
    here = a;
    snprintf(here.gpu[0].name, sizeof(here.gpu[0].name), "GPU Model Y");
    expect_defaults("another GPU model", path, &here, -ESTALE);
    expect_defaults("no file", sdp_test_path("missing.json"), NULL, -ENOENT);
}

/* A file of the sample machine with `from` replaced by `to` in its text (which must hold it). */
static const char *edited(const char *name, const char *from, const char *to)
{
    struct sdp_machine a;
    const char *path = sdp_test_path(name);
    size_t len = 0;
    char *text, out[8192], *at;
    sample(&a);
    CHECK(sdp_machine_save(path, &a) == 0, "save %s", path);
    text = (char *)sdp_test_read_file(path, &len);
    if (text)
        text[len] = '\0'; /* the spare byte: the text is read as a string */
    at = text ? strstr(text, from) : NULL;
    CHECK(at != NULL, "%s: '%s' in the file", name, from);
    if (at && len + strlen(to) < sizeof(out)) {
        snprintf(out, sizeof(out), "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
        sdp_test_write_file(path, out, strlen(out));
    }
    free(text);
    return path;
}

static void test_malformed(void)
{
    const char *p = sdp_test_path("text.json");
    sdp_test_write_file(p, "{\"format\": ", 11);
    expect_defaults("truncated JSON", p, NULL, -EINVAL);
    sdp_test_write_file(p, "[1, 2]", 6);
    expect_defaults("an array", p, NULL, -EINVAL);
    sdp_test_write_file(p, "", 0);
    expect_defaults("an empty file", p, NULL, -EINVAL);
    expect_defaults("another format", edited("f.json", "slidedp-machine", "other"), NULL, -EINVAL);
    expect_defaults("version 2", edited("v.json", "\"version\": 1", "\"version\": 2"), NULL,
                    -EINVAL);
    expect_defaults("a negative rate", edited("n.json", "\"dram_bps\": ", "\"dram_bps\": -"), NULL,
                    -EINVAL);
    expect_defaults("a string rate", edited("s.json", "\"task_s\": ", "\"task_s\": \"x\", \"y\": "),
                    NULL, -EINVAL);
    expect_defaults("cores 0", edited("c.json", "\"cores\": 3", "\"cores\": 0"), NULL, -EINVAL);
    expect_defaults("gpus not an integer", edited("g.json", "\"gpus\": 2", "\"gpus\": 2.5"), NULL,
                    -EINVAL);
    expect_defaults("gpus against the list", edited("gl.json", "\"gpus\": 2", "\"gpus\": 1"), NULL,
                    -EINVAL);
    expect_defaults("tables of different lengths",
                    edited("t.json", "\"cast_bps\": [", "\"cast_bps\": [1e9, "), NULL, -EINVAL);
    expect_defaults("an empty table",
                    edited("e.json", "\"adamw_bps\": [", "\"adamw_bps\": [], \"x\": ["), NULL,
                    -EINVAL);
    expect_defaults("a host name that is a number",
                    edited("h.json", "\"host\": \"node17\"", "\"host\": 17"), NULL, -EINVAL);
    expect_defaults("a node link of 0 GB/s", edited("l0.json", "\"gbs\": ", "\"gbs\": 0, \"x\": "),
                    NULL, -EINVAL);
    expect_defaults("a negative latency",
                    edited("ll.json", "\"latency_us\": ", "\"latency_us\": -"), NULL, -EINVAL);
    expect_defaults("a node link that is a number",
                    edited("ln.json", "\"node_link\": {", "\"node_link\": 3, \"x\": {"), NULL,
                    -EINVAL);
}

/* One node's calibration: node_link null, read back as not measured and not a missing field. */
static void test_no_node_link(void)
{
    struct sdp_machine a, m;
    const char *p = sdp_test_path("one-node.json");
    sample(&a);
    a.node_gbs = a.node_latency_us = 0;
    CHECK(sdp_machine_save(p, &a) == 0, "save %s", p);
    CHECK(sdp_machine_load(p, NULL, &m) == 0 && m.ndefaulted == 0 && m.node_gbs == 0 &&
              m.node_latency_us == 0 && same(&a, &m),
          "node_link null: not measured, not missing (%d missing)", m.ndefaulted);
}

/* A file of the sample machine without the lines that hold the keys of drop (NULL-ended): each
 * is one line of the indented file and not its object's last. */
static const char *without(const char *name, const char *const *drop)
{
    struct sdp_machine a;
    const char *path = sdp_test_path(name);
    size_t len = 0, n = 0;
    char *text, out[8192], key[64];
    sample(&a);
    CHECK(sdp_machine_save(path, &a) == 0, "save %s", path);
    text = (char *)sdp_test_read_file(path, &len);
    if (text)
        text[len] = '\0';
    for (char *line = text, *end; line && *line; line = end) {
        int keep = 1;
        end = strchr(line, '\n');
        end = end ? end + 1 : line + strlen(line);
        for (int i = 0; drop[i]; i++) {
            snprintf(key, sizeof(key), "\"%s\":", drop[i]);
            keep = keep && !(strstr(line, key) && strstr(line, key) < end);
        }
        if (keep && n + (size_t)(end - line) < sizeof(out))
            memcpy(out + n, line, (size_t)(end - line)), n += (size_t)(end - line);
    }
    CHECK(text && n < len, "%s: some lines dropped", name);
    sdp_test_write_file(path, out, n);
    free(text);
    return path;
}

/* A file written before the CPU compute rates: loads, those from the defaults, each counted. */
static void test_without_cpu_rates(void)
{
    static const char *const cpu[] = { "cpu_gemm_flops",      "cpu_gemm_flops_all",
                                       "cpu_attention_flops", "cpu_head_flops",
                                       "cpu_elem_bps",        NULL };
    struct sdp_machine m, a;
    const char *p = without("old.json", cpu);
    sample(&a);
    CHECK(sdp_machine_load(p, NULL, &m) == 0, "a file without the CPU compute rates loads");
    CHECK(m.ndefaulted == 5 && m.cpu_gemm_flops == 0.0 && m.cpu_gemm_flops_all == 0.0 &&
              m.cpu_attention_flops == 0.0 && m.cpu_head_flops == 0.0 && m.cpu_elem_bps == 0.0,
          "the CPU compute rates from the defaults, 5 counted (%d)", m.ndefaulted);
    CHECK(close_to(m.task_s, a.task_s) && m.ngemm == 2 && close_to(m.gemm[0].flops, 7.8e14) &&
              close_to(m.gpu[0].bf16_flops, 6.5e14),
          "the other fields from the file");
}

static void test_missing_fields(void)
{
    struct sdp_machine m, d, a;
    const char *p = edited("short.json", "\"dram_bps\": ", "\"dram_bps_old\": ");
    sdp_machine_defaults(&d);
    sample(&a);
    CHECK(sdp_machine_load(p, NULL, &m) == 0, "a missing rate is not an error");
    CHECK(m.ndefaulted == 1 && m.dram_bps == d.dram_bps, "dram_bps from the defaults (%d missing)",
          m.ndefaulted);
    CHECK(close_to(m.task_s, a.task_s) && m.cores == 3 && m.gpus == 2,
          "the other fields from the file");
    p = edited("short2.json", "\"gemm\": ", "\"gemms\": ");
    CHECK(sdp_machine_load(p, NULL, &m) == 0 && m.ndefaulted == 1 && m.ngemm == d.ngemm &&
              m.gemm[0].flops == d.gemm[0].flops,
          "a missing GEMM table: the defaults' (%d missing)", m.ndefaulted);
    sdp_test_write_file(p, "{\"format\": \"slidedp-machine\", \"version\": 1}", 43);
    CHECK(sdp_machine_load(p, NULL, &m) == 0 && m.ndefaulted == 21 && same(&m, &d),
          "only the header: every field from the defaults (%d missing)", m.ndefaulted);
}

int main(void)
{
    if (!sdp_test_mkdtemp("sdp-machine")) {
        printf("FAIL: no scratch directory\n");
        return 1;
    }
    test_defaults();
    test_identify();
    test_round_trip();
    test_stale();
    test_malformed();
    test_missing_fields();
    test_without_cpu_rates();
    test_no_node_link();
    sdp_test_rm_tree(sdp_test_dir());
    return sdp_test_finish(sdp_test_nfail);
}
