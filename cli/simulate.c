/* SPDX-License-Identifier: MIT */
/* `slidedp simulate [options] train|bench ARGS...`: the same command on a described machine
 * (docs/simulation.md).  The simulation build (tools/build-sim.sh: this program against a StarPU
 * built with SimGrid) runs the real task graph and scheduling policy, but no codelet and no
 * transfer: each task takes the time the cost model of codelets/sim.c gives from a calibrated
 * machine file, each transfer its time over the described buses.  This command describes the
 * machine (cli/sim_platform.c: N GPUs of the machine file's kind, its cores, PCIe per GPU and the
 * host link they share, NVLink or not) in a directory of StarPU's performance-model layout, then
 * runs the simulation build's binary with the command, then removes the directory (--keep keeps
 * it); a run's numerics are not computed (the simulated train says so), its times are the
 * simulation's. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "config.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/env.h"
#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "cli/cli.h"
#include "cli/predict_cli.h"
#include "cli/simulate.h"
#include "codelets/sdp_tasks.h"
#include "formats/machine.h"

#define SIM_HOST "slidedp-sim" /* StarPU's host name for the described machine's files */

int sdp_cli_tasks_init(const char *machine_path, int ngpus)
{
#ifdef SDP_SIMGRID
    struct sdp_cli_machine g, c;
    struct sdp_sim_rates r;
    if (!machine_path || !machine_path[0])
        machine_path = sdp_env("SDP_SIM_MACHINE");
    sdp_cli_machine_get(machine_path, ngpus > 0 ? ngpus : 1, 1, &g);
    sdp_cli_machine_get(machine_path, 0, 1, &c);
    memset(&r, 0, sizeof(r));
    r.gpu = (struct sdp_sim_device){ g.mc.gpu_flops, g.mc.gpu_attn_flops, g.mc.head_flops,
                                     g.mc.elem_bps, g.mc.task_s };
    r.cpu = (struct sdp_sim_device){ c.mc.gpu_flops, c.mc.gpu_attn_flops, c.mc.head_flops,
                                     c.mc.elem_bps, c.mc.task_s };
    r.adamw_core_bps = g.mc.adamw_core_bps;
    r.cast_core_bps = g.mc.cast_core_bps;
    r.h2d_bps = g.mc.h2d_bps;
    r.d2h_bps = g.mc.d2h_bps;
    sdp_tasks_sim_rates(&r);
    SDP_INFO("simulation: the codelets' times from %s", g.source);
#else
    (void)machine_path, (void)ngpus;
#endif
    return sdp_tasks_init();
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: slidedp simulate [options] train|bench ARGS...\n"
            "\n"
            "Run `slidedp train` or `slidedp bench` on a described machine, in simulated time\n"
            "(StarPU's SimGrid mode): the real task graph and scheduling policy, each task timed\n"
            "by the machine file's rates, each transfer by the described buses.  Losses are not\n"
            "computed.  Needs the simulation build (tools/build-sim.sh).\n"
            "\n"
            "  --gpus N             simulated GPUs (1)\n"
            "  --cpus N             simulated cores (the machine file's, else 16)\n"
            "  --machine FILE       a calibration (slidedp calibrate) for the rates and links\n"
            "                       (default: the model's reference node, one H200)\n"
            "  --nvlink GBPS        GPU-to-GPU links of GBPS GB/s each way (default: none,\n"
            "                       through the host)\n"
            "  --gpu-memory-gib G   each GPU's memory (the machine file's, else 141)\n"
            "  --keep DIR           write the machine's description into DIR and keep it\n"
            "  --sim-binary PATH    the simulation build's slidedp (default $SDP_SIM_BINARY,\n"
            "                       else build/sim/slidedp beside this program)\n"
            "  -h, --help           this text\n");
}

struct sim_opts {
    int gpus, cpus;
    double nvlink_gbps, gpu_gib;
    const char *machine, *keep, *binary;
};

/* The described machine from the options and the machine file (or the model's defaults). */
static int describe(const struct sim_opts *o, struct sdp_sim_machine *s)
{
    struct sdp_machine m;
    int rc = 0;
    if (o->machine)
        rc = sdp_machine_load(o->machine, NULL, &m); /* any host's: that is the point */
    else
        sdp_machine_defaults(&m);
    if (rc)
        return rc;
    memset(s, 0, sizeof(*s));
    s->gpus = o->gpus;
    s->cpus = o->cpus > 0 ? o->cpus : m.cores;
    if (s->cpus <= s->gpus)
        return sdp_err(-EINVAL, "simulate: %d cores cannot drive %d GPUs and run the host's work",
                       s->cpus, s->gpus);
    s->gpu_mem_bytes = (unsigned long long)(o->gpu_gib > 0           ? o->gpu_gib * 1073741824.0
                                            : m.gpu[0].mem_bytes > 0 ? m.gpu[0].mem_bytes
                                                                     : 141.0 * 1073741824.0);
    snprintf(s->gpu_name, sizeof(s->gpu_name), "%s", m.gpu[0].name);
    s->h2d_bps = m.gpu[0].h2d_bps;
    s->d2h_bps = m.gpu[0].d2h_bps;
    s->h2d_all_bps = s->gpus * (s->gpus > 1 && m.gpu[0].h2d_shared_bps > 0 ? m.gpu[0].h2d_shared_bps
                                                                           : s->h2d_bps);
    s->d2h_all_bps = s->gpus * (s->gpus > 1 && m.gpu[0].d2h_shared_bps > 0 ? m.gpu[0].d2h_shared_bps
                                                                           : s->d2h_bps);
    s->nvlink_bps = o->nvlink_gbps * 1e9;
    s->host_mem_bytes = m.host_mem_bytes > 0 ? m.host_mem_bytes : 120.0 * 1073741824.0;
    if (!(s->h2d_bps > 0 && s->d2h_bps > 0))
        return sdp_err(-EINVAL, "simulate: %s has no GPU transfer rates", o->machine);
    return 0;
}

/* The simulation build's binary: o->binary, $SDP_SIM_BINARY, or build/sim/slidedp beside us. */
static int find_binary(const struct sim_opts *o, char *out, size_t len)
{
    char self[PATH_MAX - 32];
    ssize_t n;
    const char *env = sdp_env("SDP_SIM_BINARY");
    if (o->binary || (env && env[0])) {
        snprintf(out, len, "%s", o->binary ? o->binary : env);
    } else if ((n = readlink("/proc/self/exe", self, sizeof(self) - 1)) > 0) {
        self[n] = '\0';
        *strrchr(self, '/') = '\0';
        snprintf(out, len, "%s/build/sim/slidedp", self);
    } else {
        out[0] = '\0';
    }
    if (out[0] && access(out, X_OK) == 0)
        return 0;
    sdp_err(-ENOENT, "simulate: no simulation build at '%s'", out);
    sdp_hint("build it with tools/build-sim.sh (StarPU with SimGrid: tools/setup-debian.sh "
             "--simgrid), or name it with --sim-binary");
    return -ENOENT;
}

/* A number option's value, or -1 (reported) */
static double number(const char *opt, const char *v, double lo, double hi)
{
    char *end;
    double x = strtod(v, &end);
    if (*end || end == v || !(x >= lo && x <= hi)) {
        fprintf(stderr, "slidedp simulate: %s expects a number in [%g, %g], not '%s'\n", opt, lo,
                hi, v);
        return -1.0;
    }
    return x;
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)type, (void)ftw;
    return remove(path);
}

/* the machine's description and whatever StarPU wrote beside it */
static void rm_tree(const char *dir)
{
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS))
        SDP_WARN("simulate: could not remove %s", dir);
}

/* Run bin with args and wait for it.  @return its exit status (1 when it could not run or was
 * killed) */
static int run_child(const char *bin, char **args)
{
    int status;
    pid_t pid;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        execv(bin, args);
        fprintf(stderr, "[sdp][error] simulate: cannot run %s: %s\n", bin, strerror(errno));
        _exit(SDP_EXIT_FAILURE);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return sdp_err(-errno, "simulate: cannot run %s", bin), SDP_EXIT_FAILURE;
    if (WIFSIGNALED(status))
        return sdp_err(-EINTR, "simulate: %s ended by signal %d", bin, WTERMSIG(status)),
               SDP_EXIT_FAILURE;
    return WEXITSTATUS(status);
}

static int parse(int argc, char **argv, struct sim_opts *o)
{
    static const struct option longopts[] = {
        { "gpus", required_argument, NULL, 'g' },
        { "cpus", required_argument, NULL, 'c' },
        { "machine", required_argument, NULL, 'm' },
        { "nvlink", required_argument, NULL, 'n' },
        { "gpu-memory-gib", required_argument, NULL, 'G' },
        { "keep", required_argument, NULL, 'k' },
        { "sim-binary", required_argument, NULL, 'b' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int opt;
    double x = 0;
    *o = (struct sim_opts){ .gpus = 1 };
    optind = 1;
    /* "+": stop at the command, whose own options follow it */
    while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'g':
        case 'c':
            if ((x = number(opt == 'g' ? "--gpus" : "--cpus", optarg, 1, 256)) < 0)
                return SDP_EXIT_USAGE;
            *(opt == 'g' ? &o->gpus : &o->cpus) = (int)x;
            break;
        case 'n':
        case 'G':
            if ((x = number(opt == 'n' ? "--nvlink" : "--gpu-memory-gib", optarg, 0, 1e4)) < 0)
                return SDP_EXIT_USAGE;
            *(opt == 'n' ? &o->nvlink_gbps : &o->gpu_gib) = x;
            break;
        case 'm':
            o->machine = optarg;
            break;
        case 'k':
            o->keep = optarg;
            break;
        case 'b':
            o->binary = optarg;
            break;
        case 'h':
            usage(stdout);
            return -1;
        default:
            usage(stderr);
            return SDP_EXIT_USAGE;
        }
    }
    if (optind >= argc || (strcmp(argv[optind], "train") && strcmp(argv[optind], "bench"))) {
        fprintf(stderr, "slidedp simulate: expected the command to simulate, train or bench\n");
        usage(stderr);
        return SDP_EXIT_USAGE;
    }
    return 0;
}

/* The machine's description in dir/bus/.  @return 0 or a negative errno (logged) */
static int write_dir(const char *dir, const struct sdp_sim_machine *s)
{
    char bus[PATH_MAX + 8];
    snprintf(bus, sizeof(bus), "%s/bus", dir);
    if (sdp_mkdir_p(bus))
        return sdp_err(-errno, "simulate: cannot create %s", bus);
    return sdp_sim_platform_write(bus, SIM_HOST, s);
}

int sdp_cli_simulate(int argc, char **argv)
{
    struct sim_opts o;
    struct sdp_sim_machine s;
    char bin[PATH_MAX], dir[PATH_MAX], num[32];
    char **args;
    int rc = parse(argc, argv, &o), n = 0;
    if (rc)
        return rc < 0 ? SDP_EXIT_OK : rc;
    if (describe(&o, &s))
        return SDP_EXIT_USAGE;
    if (find_binary(&o, bin, sizeof(bin)))
        return SDP_EXIT_FAILURE;
    if (o.keep) {
        snprintf(dir, sizeof(dir), "%s", o.keep);
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/slidedp-sim.XXXXXX", t && t[0] ? t : "/tmp");
        if (!mkdtemp(dir))
            return sdp_err(-errno, "simulate: cannot create %s", dir), SDP_EXIT_FAILURE;
    }
    if (write_dir(dir, &s))
        return SDP_EXIT_FAILURE;
    SDP_INFO("simulate: %d GPU%s (%s, %.0f GiB, PCIe %.1f/%.1f GB/s, host link %.1f/%.1f GB/s, "
             "%s), %d cores; described in %s",
             s.gpus, s.gpus > 1 ? "s" : "", s.gpu_name[0] ? s.gpu_name : "the reference GPU",
             s.gpu_mem_bytes / 1073741824.0, s.h2d_bps / 1e9, s.d2h_bps / 1e9, s.h2d_all_bps / 1e9,
             s.d2h_all_bps / 1e9, s.nvlink_bps > 0 ? "NVLink" : "no NVLink", s.cpus, dir);
    setenv("STARPU_PERF_MODEL_DIR", dir, 1);
    setenv("STARPU_HOSTNAME", SIM_HOST, 1);
    snprintf(num, sizeof(num), "%d", s.gpus), setenv("STARPU_NCUDA", num, 1);
    snprintf(num, sizeof(num), "%d", s.cpus - s.gpus), setenv("STARPU_NCPU", num, 1);
    if (o.machine)
        setenv("SDP_SIM_MACHINE", o.machine, 1);
    snprintf(num, sizeof(num), "%.0f", s.host_mem_bytes), setenv("SDP_SIM_HOST_MEM", num, 1);
    /* bin COMMAND ARGS... --gpus N */
    args = calloc((size_t)(argc - optind + 4), sizeof(*args));
    if (!args)
        return SDP_EXIT_FAILURE;
    args[n++] = bin;
    for (int i = optind; i < argc; i++)
        args[n++] = argv[i];
    snprintf(num, sizeof(num), "%d", s.gpus);
    args[n++] = "--gpus";
    args[n++] = num;
    rc = run_child(bin, args);
    free(args);
    if (!o.keep)
        rm_tree(dir);
    return rc;
}
