/* SPDX-License-Identifier: MIT */
/* `slidedp export CKPT OUTDIR`: turn a training checkpoint (runtime/ckpt.h) into a Hugging Face
 * directory (config.json, safetensors, optionally the tokenizer files), loadable by transformers.
 * Starts a one-CPU StarPU instance only to hold the state; runs no task.  Must not modify the
 * checkpoint.  Tests: the e2e export test compares logits with transformers. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/ckpt.h"
#include "cli/cli.h"
#include "cli/hfdir.h"
#include "base/fsutil.h"
#include "runtime/init.h"
#include "base/sdp_log.h"
#include "runtime/state.h"

#define EXPORT_CHUNK_BYTES ((size_t)64 << 20) /* any size works: the exported tensors are flat */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: slidedp export CKPT OUTDIR [options]\n"
            "\n"
            "Write the model weights of a checkpoint as a Hugging Face directory (config.json and\n"
            "model.safetensors, sharded above 5 GiB).  CKPT is a .sdpckpt file, or a checkpoint\n"
            "directory, whose newest valid checkpoint is exported.  OUTDIR must be new or empty\n"
            "(--force: replace the files there), and may not be or hold CKPT or the tokenizer.\n"
            "\n"
            "options:\n"
            "  --dtype D          float32 (default) or bfloat16\n"
            "  --tokenizer DIR    copy the tokenizer files of DIR (tokenizer.json and\n"
            "                     tokenizer_config.json, or vocab.json and merges.txt, ...) and\n"
            "                     write a generation_config.json unless DIR has one\n"
            "  --force            write into OUTDIR even if it holds files (an earlier export)\n"
            "  -v, --verbose      debug logging\n"
            "  -h, --help         this text\n"
            "\n"
            "exit status: 0 success, 1 runtime failure, 2 usage error\n");
}

static int is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* OUTDIR against the inputs, and new or empty unless --force.  @return an exit status. */
static int check_outdir(const char *ckpt, const char *outdir, const char *tokenizer, int force)
{
    const struct sdp_path_role in[] = { { ckpt, "the checkpoint", SDP_PATH_FILE },
                                        { tokenizer, "the tokenizer directory", SDP_PATH_DIR } };
    const struct sdp_path_role out[] = { { outdir, "the output directory", SDP_PATH_DIR_ALL } };
    DIR *d;
    struct dirent *e;
    int used = 0;
    if (sdp_paths_check(out, 1, in, 2))
        return SDP_EXIT_USAGE;
    if (force || !(d = opendir(outdir)))
        return SDP_EXIT_OK; /* missing: created by the export */
    while (!used && (e = readdir(d)))
        used = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    if (!used)
        return SDP_EXIT_OK;
    fprintf(stderr, "slidedp export: %s exists and holds files; the export would replace them\n",
            outdir);
    fprintf(stderr, "hint: pass --force to replace them, or name a new directory\n");
    return SDP_EXIT_USAGE;
}

static int run(const char *ckpt, const char *outdir, const char *dtype, const char *tokenizer)
{
    struct sdp_rt_conf conf = { .ncpus = 1, .ncuda = 0 };
    struct sdp_model_cfg cfg;
    struct sdp_ckpt_info info;
    struct sdp_state st;
    char path[4400];
    int rc;

    if (is_dir(ckpt)) {
        rc = sdp_ckpt_latest(ckpt, path, sizeof(path));
        if (rc == -ENOENT) {
            fprintf(stderr, "slidedp export: no valid checkpoint in directory %s\n", ckpt);
            return SDP_EXIT_USAGE;
        }
        if (rc)
            return SDP_EXIT_FAILURE;
    } else {
        snprintf(path, sizeof(path), "%s", ckpt);
    }
    rc = sdp_ckpt_read_info(path, &cfg, &info);
    if (rc)
        return rc == -ENOENT ? SDP_EXIT_USAGE : SDP_EXIT_FAILURE;
    /* a model without bos/eos ids takes the tokenizer's (config.json, generation_config.json) */
    if (tokenizer && sdp_hfdir_check_tokenizer(tokenizer, "--tokenizer", &cfg))
        return SDP_EXIT_USAGE;
    rc = sdp_rt_init(&conf);
    if (rc)
        return SDP_EXIT_FAILURE;
    rc = sdp_state_create(&st, &cfg, info.work_dtype, EXPORT_CHUNK_BYTES);
    if (!rc) {
        rc = sdp_ckpt_load(path, &st, NULL);
        if (!rc)
            rc = sdp_state_save_hf(&st, outdir, dtype);
        if (!rc && tokenizer)
            rc = sdp_hfdir_add_tokenizer(tokenizer, outdir, &cfg);
        sdp_state_destroy(&st);
    }
    sdp_rt_shutdown();
    if (rc)
        return SDP_EXIT_FAILURE;
    SDP_INFO("exported %s (step %d, %s %s) to %s as %s", path, info.step,
             sdp_model_arch_name(cfg.arch), info.fingerprint, outdir, dtype);
    return SDP_EXIT_OK;
}

int sdp_cli_export(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "dtype", required_argument, NULL, 'd' }, { "tokenizer", required_argument, NULL, 't' },
        { "force", no_argument, NULL, 'f' },       { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },        { NULL, 0, NULL, 0 },
    };
    const char *dtype = "float32", *tokenizer = NULL;
    int opt, force = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'd':
            dtype = optarg;
            break;
        case 't':
            tokenizer = optarg;
            break;
        case 'f':
            force = 1;
            break;
        case 'v':
            sdp_log_verbosity = SDP_LOG_DEBUG;
            break;
        case 'h':
            usage(stdout);
            return SDP_EXIT_OK;
        default:
            usage(stderr);
            return SDP_EXIT_USAGE;
        }
    }
    if (optind != argc - 2) {
        fprintf(stderr, "slidedp export: expected a checkpoint and an output directory\n\n");
        usage(stderr);
        return SDP_EXIT_USAGE;
    }
    if (strcmp(dtype, "float32") != 0 && strcmp(dtype, "bfloat16") != 0) {
        fprintf(stderr, "slidedp export: --dtype expects float32 or bfloat16, got '%s'\n", dtype);
        return SDP_EXIT_USAGE;
    }
    if (check_outdir(argv[optind], argv[optind + 1], tokenizer, force))
        return SDP_EXIT_USAGE;
    return run(argv[optind], argv[optind + 1], dtype, tokenizer);
}
