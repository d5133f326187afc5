/* SPDX-License-Identifier: MIT */
/* slidedp sweep: the per-layer host paths of one decoder layer of a preset model, timed for a range
 * of chunk sizes (the design's chunked pipelines):
 *   cast+H2D     per chunk, the fp32 master cast to the bf16 working copy on a CPU worker, then
 *                copied into a replica on the GPU (StarPU moves the chunk over PCIe as soon as its
 *                cast is done, while the next chunk is cast);
 *   D2H+update   a gradient left on the GPU, then per chunk AdamW on a CPU worker (StarPU moves the
 *                chunk to the host as soon as an update can take it), writing the next working
 * copy. One JSON line per chunk size: the median of the timed repetitions, in ms per layer. Without
 * a GPU the same tasks run on the CPU workers (no transfers): a check of the mechanics, not a
 * figure. Test: tests/e2e/test_e2e_sweep.sh. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codelets/sdp_tasks.h"
#include "graph/sweep.h"
#include "policies/sdp_policies.h"
#include "cli/cli.h"
#include "runtime/init.h"
#include "base/sdp_log.h"
#include "runtime/state.h"

#define MAX_SIZES 16
#define LAYER     1 /* the parameter group timed: the first decoder layer */

struct sweep_opts {
    const char *model, *sched;
    double chunks[MAX_SIZES];
    int nchunks, reps, gpus, cpus;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: slidedp sweep --model PRESET [options]\n"
               "\n"
               "Time the cast+H2D and D2H+update paths of one decoder layer of a preset model\n"
               "(qwen3-0.6b ... qwen3-32b) for several chunk sizes; print one JSON line per size.\n"
               "\n"
               "options:\n"
               "  --chunks LIST   chunk sizes, MiB of fp32 master (8,16,32,64,128,256)\n"
               "  --reps N        timed repetitions per size, after one untimed (5)\n"
               "  --gpus N        CUDA workers (-1 = all found, 0 = none; -1)\n"
               "  --cpus N        CPU workers (0 = all cores)\n"
               "  --sched NAME    scheduling policy (sdp-slidedp)\n");
}

/* One chunk size: returns 0 and the two medians (seconds), or a negative errno. */
static int time_size(const struct sweep_opts *so, const struct sdp_model_cfg *cfg, double chunk_mib,
                     int *nchunks, double *cast_h2d, double *d2h_update)
{
    struct sdp_state st;
    struct sdp_group_state *gs;
    sdp_rt_tensor_t *rep = NULL;
    double *t1 = calloc((size_t)so->reps, sizeof(double));
    double *t2 = calloc((size_t)so->reps, sizeof(double));
    int rc;
    if (!t1 || !t2) {
        free(t1);
        free(t2);
        return sdp_err(-ENOMEM, "sweep timings");
    }
    rc = sdp_state_create(&st, cfg, SDP_BF16, (size_t)(chunk_mib * 1048576.0));
    if (rc) {
        free(t1);
        free(t2);
        return rc;
    }
    sdp_state_init_random(&st, 1234);
    gs = &st.groups[LAYER];
    *nchunks = gs->nchunks;
    rc = sdp_rt_tensor_create_device(&rep, SDP_BF16, gs->nelems, "sweep.replica");
    if (!rc)
        rc = sdp_rt_tensor_partition_like(rep, gs->work);
    for (int r = -1; !rc && r < so->reps; r++) { /* r = -1: untimed (allocations, calibration) */
        double t0;
        /* cast + H2D */
        t0 = sdp_cli_now_s();
        rc = sdp_graph_sweep_cast_copy(&st, LAYER, rep);
        if (!rc)
            rc = sdp_rt_wait_all();
        if (r >= 0)
            t1[r] = sdp_cli_now_s() - t0;
        sdp_rt_tensor_discard(rep); /* the next repetition moves every chunk again */
        /* a gradient on the GPU (the compute worker), then D2H + AdamW chunk by chunk */
        if (!rc)
            rc = sdp_graph_sweep_zero_grad(&st, LAYER);
        if (!rc)
            rc = sdp_rt_wait_all();
        t0 = sdp_cli_now_s();
        if (!rc)
            rc = sdp_graph_sweep_update(&st, LAYER, r + 2);
        if (!rc)
            rc = sdp_rt_wait_all();
        if (r >= 0)
            t2[r] = sdp_cli_now_s() - t0;
    }
    if (!rc) {
        *cast_h2d = sdp_cli_median(t1, so->reps);
        *d2h_update = sdp_cli_median(t2, so->reps);
    }
    sdp_rt_tensor_release(rep);
    sdp_state_destroy(&st);
    free(t1);
    free(t2);
    return rc;
}

static int run(const struct sweep_opts *so)
{
    struct sdp_model_cfg cfg;
    struct sdp_rt_conf rc_conf = { 0 };
    void *policy = NULL;
    int rc = SDP_EXIT_FAILURE, wid[1];
    if (sdp_model_preset(so->model, &cfg)) {
        sdp_err(-EINVAL, "unknown model preset '%s'", so->model);
        sdp_hint("presets: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, "
                 "qwen3-30b-a3b, qwen3-30b-a3b-l12");
        return SDP_EXIT_USAGE;
    }
    /* one decoder layer of the preset's shape; a small vocabulary keeps the other groups small */
    cfg.num_layers = 1;
    cfg.vocab_size = 1024;
    if (so->sched && sdp_policy_resolve(so->sched, &policy))
        return SDP_EXIT_USAGE;
    rc_conf.sched_name = so->sched;
    rc_conf.sched_policy = policy;
    rc_conf.ncpus = so->cpus;
    rc_conf.ncuda = so->gpus;
    rc_conf.require_cuda = so->gpus > 0;
    if (sdp_rt_init(&rc_conf))
        return SDP_EXIT_FAILURE;
    if (sdp_tasks_init() || sdp_tasks_place_compute(sdp_rt_ncuda() > 0) ||
        (sdp_rt_ncuda() > 0 && (sdp_rt_rank_workers(1, wid) || sdp_tasks_set_ranks(1, wid))))
        goto out;
    SDP_INFO("sweep: one %s layer (%zu parameters), %d chunk sizes, %d repetitions each, %s",
             so->model, sdp_model_group_nelems(&cfg, LAYER), so->nchunks, so->reps,
             sdp_rt_ncuda() > 0 ? "GPU" : "no GPU: CPU workers only, no transfers");
    for (int i = 0; i < so->nchunks; i++) {
        double ch = 0, du = 0;
        int n = 0;
        size_t np = sdp_model_group_nelems(&cfg, LAYER);
        json_t *o;
        char *line;
        if (time_size(so, &cfg, so->chunks[i], &n, &ch, &du))
            goto out;
        o = json_pack("{s:s, s:s, s:s, s:I, s:f, s:i, s:f, s:f, s:f, s:f, s:i, s:i, s:i}", "system",
                      "slidedp", "sweep", "layer paths", "model", so->model, "layer_params",
                      (json_int_t)np, "chunk_mib", so->chunks[i], "nchunks", n, "cast_h2d_ms",
                      ch * 1e3, "d2h_update_ms", du * 1e3, "cast_h2d_gbps", np * 2.0 / ch / 1e9,
                      "d2h_update_gbps", np * 4.0 / du / 1e9, "gpus", sdp_rt_ncuda(), "cpu_workers",
                      sdp_rt_ncpus(), "reps", so->reps);
        line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
        printf("%s\n", line);
        fflush(stdout);
        free(line);
        json_decref(o);
    }
    rc = SDP_EXIT_OK;
out:
    sdp_tasks_shutdown();
    sdp_rt_shutdown();
    return rc;
}

/* "8,16,32" -> sizes.  @return 0 or -1 (message printed) */
static int parse_list(const char *s, struct sweep_opts *so)
{
    char *end;
    so->nchunks = 0;
    while (*s) {
        double v = strtod(s, &end);
        if (end == s || !(v >= 0.004) || so->nchunks == MAX_SIZES) {
            fprintf(stderr,
                    "slidedp sweep: --chunks expects up to %d sizes in MiB (>= 0.004), "
                    "comma separated\n",
                    MAX_SIZES);
            return -1;
        }
        so->chunks[so->nchunks++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            fprintf(stderr, "slidedp sweep: unexpected '%s' in --chunks\n", end);
            return -1;
        }
    }
    return so->nchunks > 0 ? 0 : -1;
}

int sdp_cli_sweep(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "model", required_argument, NULL, 'M' }, { "chunks", required_argument, NULL, 'k' },
        { "reps", required_argument, NULL, 'r' },  { "gpus", required_argument, NULL, 'g' },
        { "cpus", required_argument, NULL, 'c' },  { "sched", required_argument, NULL, 'S' },
        { "help", no_argument, NULL, 'h' },        { NULL, 0, NULL, 0 },
    };
    struct sweep_opts so = { .reps = 5, .gpus = -1, .sched = "sdp-slidedp" };
    int opt;
    if (parse_list("8,16,32,64,128,256", &so))
        return SDP_EXIT_USAGE;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        char *end;
        long v;
        switch (opt) {
        case 'M':
            so.model = optarg;
            break;
        case 'k':
            if (parse_list(optarg, &so))
                return SDP_EXIT_USAGE;
            break;
        case 'S':
            so.sched = optarg;
            break;
        case 'r':
        case 'g':
        case 'c':
            v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < (opt == 'g' ? -1 : opt == 'c' ? 0 : 1) || v > 4096) {
                fprintf(stderr, "slidedp sweep: bad number '%s'\n", optarg);
                return SDP_EXIT_USAGE;
            }
            *(opt == 'r' ? &so.reps : opt == 'g' ? &so.gpus : &so.cpus) = (int)v;
            break;
        case 'h':
            usage(stdout);
            return SDP_EXIT_OK;
        default:
            usage(stderr);
            return SDP_EXIT_USAGE;
        }
    }
    if (!so.model || optind != argc) {
        usage(stderr);
        return SDP_EXIT_USAGE;
    }
    return run(&so);
}
