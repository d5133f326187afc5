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
#include "base/fsutil.h"
#include "runtime/init.h"
#include "base/sdp_log.h"
#include "runtime/state.h"

#define EXPORT_CHUNK_BYTES ((size_t)64 << 20) /* any size works: the exported tensors are flat */

/* Tokenizer (and generation) files copied when present; check_tokenizer requires a complete set. */
static const char *const tokenizer_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "tokenizer.model",       "added_tokens.json",       "generation_config.json",
};
#define NTOKENIZER_FILES (sizeof(tokenizer_files) / sizeof(tokenizer_files[0]))

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
            "                     tokenizer_config.json, or vocab.json and merges.txt, ...)\n"
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

static int has_file(const char *dir, const char *name)
{
    char path[4400];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Copy src to dst through dst.tmp, committed by sdp_file_commit (flush, fsync, rename). */
static int copy_file(const char *src, const char *dst)
{
    char tmp[4500], buf[1 << 16];
    const char *what = NULL;
    int in = open(src, O_RDONLY | O_CLOEXEC), rc = 0;
    FILE *out;
    ssize_t n;
    if (in < 0)
        return sdp_err(-errno, "cannot open %s", src);
    snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
    if (!(out = fopen(tmp, "wb"))) {
        rc = sdp_err(-errno, "cannot create %s", tmp);
        close(in);
        return rc;
    }
    while (!rc && (n = read(in, buf, sizeof(buf))) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = sdp_err(-errno, "reading %s", src);
        else if (fwrite(buf, 1, (size_t)n, out) != (size_t)n)
            rc = sdp_err(errno == ENOSPC ? -ENOSPC : -EIO, "writing %s", tmp);
    }
    close(in);
    if (rc) {
        fclose(out);
        unlink(tmp);
        return rc;
    }
    rc = sdp_file_commit(out, tmp, dst, &what);
    if (rc)
        return sdp_err(rc, "writing %s: %s", dst, what);
    return 0;
}

static int copy_tokenizer(const char *from, const char *outdir)
{
    char src[4400], dst[4400];
    int n = 0;
    for (size_t i = 0; i < NTOKENIZER_FILES; i++) {
        if (!has_file(from, tokenizer_files[i]))
            continue;
        snprintf(src, sizeof(src), "%s/%s", from, tokenizer_files[i]);
        snprintf(dst, sizeof(dst), "%s/%s", outdir, tokenizer_files[i]);
        int rc = copy_file(src, dst);
        if (rc)
            return rc;
        n++;
    }
    SDP_INFO("copied %d tokenizer files from %s", n, from);
    return 0;
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

/* The tokenizer directory must hold a complete tokenizer (checked before any heavy work). */
static int check_tokenizer(const char *dir)
{
    if (!is_dir(dir)) {
        fprintf(stderr, "slidedp export: --tokenizer %s is not a directory\n", dir);
        return -1;
    }
    if (has_file(dir, "tokenizer.json") || has_file(dir, "tokenizer.model") ||
        (has_file(dir, "vocab.json") && has_file(dir, "merges.txt")))
        return 0;
    fprintf(stderr,
            "slidedp export: %s holds no tokenizer (tokenizer.json, tokenizer.model, or "
            "vocab.json with merges.txt)\n",
            dir);
    return -1;
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
    rc = sdp_rt_init(&conf);
    if (rc)
        return SDP_EXIT_FAILURE;
    rc = sdp_state_create(&st, &cfg, info.work_dtype, EXPORT_CHUNK_BYTES);
    if (!rc) {
        rc = sdp_ckpt_load(path, &st, NULL);
        if (!rc)
            rc = sdp_state_save_hf(&st, outdir, dtype);
        if (!rc && tokenizer)
            rc = copy_tokenizer(tokenizer, outdir);
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
    if (tokenizer && check_tokenizer(tokenizer) != 0)
        return SDP_EXIT_USAGE;
    if (check_outdir(argv[optind], argv[optind + 1], tokenizer, force))
        return SDP_EXIT_USAGE;
    return run(argv[optind], argv[optind + 1], dtype, tokenizer);
}
