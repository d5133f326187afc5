/* SPDX-License-Identifier: MIT */
/* The simulated machine's description for StarPU's SimGrid mode (cli/simulate.c): the files a real
 * run's bus calibration would leave under $STARPU_PERF_MODEL_DIR/bus/ for host HOST, made from a
 * machine file's figures for N GPUs:
 *   HOST.platform.v4.xml  SimGrid hosts (MAIN, CPU0.., CUDA0.. with their memory, RAM) and links:
 *                         each GPU's own link per direction at its alone rates, the host link all
 *                         GPUs share, one per direction at the summed shared rates, and
 *                         GPU-to-GPU links (NVLink at nvlink_bps, else down one GPU's link and the
 *                         host's and up the other's); the routes between them;
 *   HOST.bandwidth, HOST.latency  the same figures as the matrices StarPU's schedulers read (MB/s
 *                         and us, rows and columns RAM then the GPUs, NaN beyond).
 * The format is StarPU 1.4's (src/core/perfmodel/perfmodel_bus.c writes and reads it). */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "base/sdp_log.h"
#include "cli/simulate.h"

#define MAXNODES 32 /* StarPU's STARPU_MAXNODES: the matrices' width */
#define LAT_S    10e-6

/* bytes/s from node a to node b (0 = RAM, 1.. = the GPUs); 0: no link */
static double rate(const struct sdp_sim_machine *s, int a, int b)
{
    if (a == b)
        return 0.0;
    if (a == 0)
        return s->h2d_bps;
    if (b == 0)
        return s->d2h_bps;
    return s->nvlink_bps > 0 ? s->nvlink_bps : (s->h2d_bps < s->d2h_bps ? s->h2d_bps : s->d2h_bps);
}

static int write_matrix(const char *path, const struct sdp_sim_machine *s, int latency)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return sdp_err(-errno, "simulate: cannot write %s", path);
    fprintf(f, "# to 0");
    for (int j = 1; j < MAXNODES; j++)
        fprintf(f, "\t\tto %d", j);
    fprintf(f, "\t\t\n");
    for (int i = 0; i < MAXNODES; i++) {
        for (int j = 0; j < MAXNODES; j++) {
            const char *sep = j + 1 < MAXNODES ? "\t" : "\n";
            if (i > s->gpus || j > s->gpus)
                fprintf(f, "nan%s", sep);
            else if (i == j)
                fprintf(f, "%f%s", 0.0, sep);
            else if (latency)
                fprintf(f, "%f%s", (i && j && s->nvlink_bps <= 0 ? 2 : 1) * LAT_S * 1e6, sep);
            else
                fprintf(f, "%f%s", rate(s, i, j) / 1e6, sep);
        }
    }
    return fclose(f) ? sdp_err(-EIO, "simulate: cannot write %s", path) : 0;
}

static void link(FILE *f, const char *id, double bps, double lat)
{
    fprintf(f, "   <link id=\"%s\" bandwidth=\"%.6fBps\" latency=\"%.6fs\"/>\n", id, bps, lat);
}

/* a route over up to four links (the first NULL ends the list) */
static void route(FILE *f, const char *src, const char *dst, const char *l1, const char *l2,
                  const char *l3, const char *l4)
{
    const char *ls[] = { l1, l2, l3, l4 };
    fprintf(f, "   <route src=\"%s\" dst=\"%s\" symmetrical=\"NO\">\n", src, dst);
    for (int i = 0; i < 4 && ls[i]; i++)
        fprintf(f, "    <link_ctn id=\"%s\"/>\n", ls[i]);
    fprintf(f, "   </route>\n");
}

static int write_platform(const char *path, const struct sdp_sim_machine *s)
{
    char a[32], b[32], l[64], m[64];
    FILE *f = fopen(path, "w");
    if (!f)
        return sdp_err(-errno, "simulate: cannot write %s", path);
    fprintf(f, "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM "
               "\"https://simgrid.org/simgrid.dtd\">\n<platform version=\"4.1\">\n");
    fprintf(f, " <config id=\"General\">\n"
               "   <prop id=\"network/TCP-gamma\" value=\"-1\"></prop>\n"
               "   <prop id=\"network/latency-factor\" value=\"1\"></prop>\n"
               "   <prop id=\"network/bandwidth-factor\" value=\"1\"></prop>\n"
               "   <prop id=\"network/weight-S\" value=\"0.0\"></prop>\n"
               "   <prop id=\"network/crosstraffic\" value=\"0\"></prop>\n"
               " </config>\n <zone id=\"AS0\" routing=\"Full\">\n");
    fprintf(f, "   <host id=\"MAIN\" speed=\"1f\"/>\n");
    for (int c = 0; c < s->cpus; c++)
        fprintf(f, "   <host id=\"CPU%d\" speed=\"2000000000f\"/>\n", c);
    for (int g = 0; g < s->gpus; g++)
        fprintf(f,
                "   <host id=\"CUDA%d\" speed=\"2000000000f\">\n"
                "     <prop id=\"model\" value=\"%s\"/>\n"
                "     <prop id=\"memsize\" value=\"%llu\"/>\n"
                "     <prop id=\"memcpy_peer\" value=\"1\"/>\n   </host>\n",
                g, s->gpu_name[0] ? s->gpu_name : "simulated GPU", s->gpu_mem_bytes);
    fprintf(f, "   <host id=\"RAM\" speed=\"1f\"/>\n");
    link(f, "HostDown", s->h2d_all_bps, 0.0); /* the host link all GPUs share, per direction */
    link(f, "HostUp", s->d2h_all_bps, 0.0);
    for (int g = 0; g < s->gpus; g++) {
        snprintf(l, sizeof(l), "RAM-CUDA%d", g), link(f, l, s->h2d_bps, LAT_S);
        snprintf(l, sizeof(l), "CUDA%d-RAM", g), link(f, l, s->d2h_bps, LAT_S);
        for (int h = 0; h < s->gpus && s->nvlink_bps > 0; h++)
            if (h != g)
                snprintf(l, sizeof(l), "CUDA%d-CUDA%d", g, h), link(f, l, s->nvlink_bps, LAT_S);
    }
    for (int g = 0; g < s->gpus; g++) {
        snprintf(a, sizeof(a), "CUDA%d", g);
        snprintf(l, sizeof(l), "CUDA%d-RAM", g), route(f, a, "RAM", l, "HostUp", NULL, NULL);
        snprintf(l, sizeof(l), "RAM-CUDA%d", g), route(f, "RAM", a, l, "HostDown", NULL, NULL);
        for (int h = 0; h < s->gpus; h++) {
            if (h == g)
                continue;
            snprintf(b, sizeof(b), "CUDA%d", h);
            if (s->nvlink_bps > 0) {
                snprintf(l, sizeof(l), "CUDA%d-CUDA%d", g, h), route(f, a, b, l, NULL, NULL, NULL);
            } else { /* through the host bridge: down from one, up to the other */
                snprintf(l, sizeof(l), "CUDA%d-RAM", g), snprintf(m, sizeof(m), "RAM-CUDA%d", h);
                route(f, a, b, l, "HostUp", "HostDown", m);
            }
        }
    }
    fprintf(f, " </zone>\n</platform>\n");
    return fclose(f) ? sdp_err(-EIO, "simulate: cannot write %s", path) : 0;
}

/* HOST.config: the counts by which StarPU finds the files (CPU cores; CPU RAM, CUDA and OpenCL
 * memory nodes), and HOST.affinity: each GPU's preferred cores, every core in order */
static int write_config(const char *path, const char *apath, const struct sdp_sim_machine *s)
{
    FILE *f = fopen(path, "w"), *a;
    if (!f)
        return sdp_err(-errno, "simulate: cannot write %s", path);
    fprintf(f,
            "# Current configuration\n%d # Number of CPUs\n1 # Number of NUMA nodes\n"
            "%d # Number of CUDA nodes\n0 # Number of OpenCL nodes\n",
            s->cpus, s->gpus);
    if (fclose(f))
        return sdp_err(-EIO, "simulate: cannot write %s", path);
    if (!(a = fopen(apath, "w")))
        return sdp_err(-errno, "simulate: cannot write %s", apath);
    fprintf(a, "# GPU\tNUMA0\n");
    for (int g = 0; g < s->gpus; g++)
        fprintf(a, "%d\t0\t\n", g);
    return fclose(a) ? sdp_err(-EIO, "simulate: cannot write %s", apath) : 0;
}

int sdp_sim_platform_write(const char *busdir, const char *host, const struct sdp_sim_machine *s)
{
    char path[4200], apath[4200];
    int rc;
    snprintf(path, sizeof(path), "%s/%s.config", busdir, host);
    snprintf(apath, sizeof(apath), "%s/%s.affinity", busdir, host);
    rc = write_config(path, apath, s);
    snprintf(path, sizeof(path), "%s/%s.platform.v4.xml", busdir, host);
    if (!rc)
        rc = write_platform(path, s);
    snprintf(path, sizeof(path), "%s/%s.bandwidth", busdir, host);
    if (!rc)
        rc = write_matrix(path, s, 0);
    snprintf(path, sizeof(path), "%s/%s.latency", busdir, host);
    if (!rc)
        rc = write_matrix(path, s, 1);
    return rc;
}
