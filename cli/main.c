/* SPDX-License-Identifier: MIT */
/* slidedp: the command line.  Dispatches to a subcommand; only this file and its siblings in cli/
 * wire the folders together, and only main() picks the exit status. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "base/sdp_log.h"
#include "cli/cli.h"
#include "runtime/nodes.h"
#ifdef SDP_SIMGRID /* StarPU's library holds main() and runs this one as starpu_main() */
#include <starpu_simgrid_wrap.h>
#endif

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: slidedp <command> [options]\n"
        "\n"
        "commands:\n"
        "  train RECIPE.yaml   train a model as a StarPU task graph (see `slidedp train --help`)\n"
        "  tokenize ...        text or JSONL -> token shard (slidedp tokenize --help)\n"
        "  export CKPT OUTDIR  write a checkpoint as a Hugging Face model directory\n"
        "  bench --model M     time training steps of a preset model on random data\n"
        "  sweep --model M     time one layer's cast+H2D and D2H+update paths per chunk size\n"
        "  plot METRICS.jsonl  draw loss and tokens/s of a metrics file as a PNG (gnuplot)\n"
        "  calibrate           measure this machine for the step-time model (machine.json)\n"
        "  plan RECIPE.yaml    predict a run: step time, bound, memory, what each change buys\n"
        "  simulate ... train  run train or bench on a described machine, in simulated time\n"
        "  policies            list the scheduling policies --sched accepts\n"
        "  options --markdown  every recipe key, flag and environment variable (docs/options.md)\n"
        "\n"
        "options:\n"
        "  -h, --help          this text\n"
        "  --version           print the version\n");
}

/* The command of argv[1]. */
static int command(int argc, char **argv)
{
    if (!strcmp(argv[1], "train"))
        return sdp_cli_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plot"))
        return sdp_cli_plot(argc - 1, argv + 1);
    if (!strcmp(argv[1], "tokenize"))
        return sdp_cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export"))
        return sdp_cli_export(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench"))
        return sdp_cli_bench(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sweep"))
        return sdp_cli_sweep(argc - 1, argv + 1);
    if (!strcmp(argv[1], "options"))
        return sdp_cli_options(argc - 1, argv + 1);
    if (!strcmp(argv[1], "simulate"))
        return sdp_cli_simulate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "calibrate"))
        return sdp_cli_calibrate(argc - 1, argv + 1);
    if (!strcmp(argv[1], "plan"))
        return sdp_cli_plan(argc - 1, argv + 1);
    if (!strcmp(argv[1], "policies"))
        return sdp_cli_policies(argc - 1, argv + 1);
    fprintf(stderr, "slidedp: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return SDP_EXIT_USAGE;
}

/* Started by an MPI launcher with several processes (runtime/nodes.h): `train` runs over the
 * nodes, `calibrate` measures the link between them; the other commands are one process's.  A
 * failure on one node ends every process (the others would wait for it). */
static int over_nodes(int argc, char **argv)
{
    int rc;
    if (sdp_rt_nodes_init(&argc, &argv))
        sdp_rt_nodes_abort(SDP_EXIT_USAGE);
    if (strcmp(argv[1], "train") && strcmp(argv[1], "calibrate")) {
        sdp_err(-EINVAL, "slidedp %s runs as one process; started by an MPI launcher with %d",
                argv[1], sdp_rt_nnodes());
        sdp_hint("start it without mpirun/srun -n, or run `slidedp train` or `slidedp calibrate`");
        sdp_rt_nodes_abort(SDP_EXIT_USAGE);
    }
    rc = command(argc, argv);
    if (rc != SDP_EXIT_OK)
        sdp_rt_nodes_abort(rc);
    sdp_rt_nodes_finalize();
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return SDP_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return SDP_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("slidedp %s\n", PACKAGE_VERSION);
        return SDP_EXIT_OK;
    }
    if (sdp_rt_nodes_launched())
        return over_nodes(argc, argv);
    return command(argc, argv);
}
