/* SPDX-License-Identifier: MIT */
/* `slidedp export CKPT OUTDIR`: turn a training checkpoint (runtime/ckpt.h) into a Hugging Face
 * directory (config.json, safetensors, optionally the tokenizer files), loadable by transformers;
 * `slidedp export ADAPTER OUTDIR --base MODEL [--merge]`: a PEFT LoRA adapter checked against its
 * base and written again (runtime/peft.h), or merged into the base as a Hugging Face directory.
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
#include "formats/hfconfig.h"
#include "runtime/peft.h"
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
            "  --base MODEL       CKPT is a PEFT LoRA adapter (adapter_config.json and\n"
            "                     adapter_model.safetensors) of the Hugging Face model MODEL:\n"
            "                     write it again, in fp32, after checking it against MODEL\n"
            "  --merge            with --base: write MODEL with the adapter folded into its\n"
            "                     weights (W + alpha / r * B A), a Hugging Face directory\n"
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

/* An adapter against its base: written again, or merged into the base (fp32, one CPU worker). */
static int run_adapter(const char *adapter, const char *outdir, const char *dtype,
                       const char *tokenizer, const char *base, int merge)
{
    struct sdp_rt_conf conf = { .ncpus = 1, .ncuda = 0 };
    struct sdp_model_cfg cfg;
    struct sdp_lora_cfg lc;
    struct sdp_state st;
    int rc;
    if (sdp_hfconfig_load(base, &cfg) || sdp_state_check_hf(&cfg, base) ||
        sdp_peft_read_config(adapter, &cfg, &lc))
        return SDP_EXIT_USAGE;
    if (tokenizer && sdp_hfdir_check_tokenizer(tokenizer, "--tokenizer", &cfg))
        return SDP_EXIT_USAGE;
    if (sdp_rt_init(&conf))
        return SDP_EXIT_FAILURE;
    rc = sdp_state_create_lora(&st, &cfg, &lc, SDP_F32, EXPORT_CHUNK_BYTES, 0);
    if (!rc) {
        rc = sdp_state_load_hf(&st, base);
        if (!rc)
            rc = sdp_state_load_peft(&st, adapter);
        if (!rc && merge && !(rc = sdp_state_lora_merge(&st)))
            rc = sdp_state_save_hf(&st, outdir, dtype);
        else if (!rc && !merge)
            rc = sdp_state_save_peft(&st, outdir, base);
        if (!rc && tokenizer)
            rc = sdp_hfdir_add_tokenizer(tokenizer, outdir, &cfg);
        sdp_state_destroy(&st);
    }
    sdp_rt_shutdown();
    if (rc)
        return SDP_EXIT_FAILURE;
    SDP_INFO("exported the adapter %s (rank %d) of %s to %s%s", adapter, lc.rank, base, outdir,
             merge ? ", merged" : "");
    return SDP_EXIT_OK;
}

/* Whether path is a PEFT adapter directory. */
static int is_adapter(const char *path)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/adapter_config.json", path);
    return access(p, F_OK) == 0;
}

int sdp_cli_export(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "dtype", required_argument, NULL, 'd' }, { "tokenizer", required_argument, NULL, 't' },
        { "force", no_argument, NULL, 'f' },       { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },        { "base", required_argument, NULL, 'b' },
        { "merge", no_argument, NULL, 'm' },       { NULL, 0, NULL, 0 },
    };
    const char *dtype = "float32", *tokenizer = NULL, *base = NULL;
    int opt, force = 0, merge = 0;
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
        case 'b':
            base = optarg;
            break;
        case 'm':
            merge = 1;
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
    if ((base || merge) && !(base && is_dir(argv[optind]) && is_adapter(argv[optind]))) {
        fprintf(stderr, "slidedp export: --base and --merge take a PEFT adapter directory (with "
                        "adapter_config.json) and --base MODEL, the model it adapts\n");
        return SDP_EXIT_USAGE;
    }
    if (!base && is_dir(argv[optind]) && is_adapter(argv[optind])) {
        fprintf(stderr, "slidedp export: %s is a PEFT adapter\n", argv[optind]);
        fprintf(stderr, "hint: pass --base MODEL (the model it adapts), and --merge to write the "
                        "merged model\n");
        return SDP_EXIT_USAGE;
    }
    if (check_outdir(argv[optind], argv[optind + 1], tokenizer, force) ||
        (base && check_outdir(base, argv[optind + 1], NULL, 1)))
        return SDP_EXIT_USAGE;
    if (base)
        return run_adapter(argv[optind], argv[optind + 1], dtype, tokenizer, base, merge);
    return run(argv[optind], argv[optind + 1], dtype, tokenizer);
}
