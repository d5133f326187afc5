/* SPDX-License-Identifier: MIT */
/* The tokenizer's files and generation_config.json of a Hugging Face model directory (cli/hfdir.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "cli/hfdir.h"
#include "text/tokenizer.h"

#define SDP_HFDIR_PATH 4400 /* a directory (SDP_PATH_MAX) and a file name */

/* Tokenizer (and generation) files copied when present. */
static const char *const tokenizer_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "tokenizer.model",       "added_tokens.json",       "generation_config.json",
};
#define NTOKENIZER_FILES (sizeof(tokenizer_files) / sizeof(tokenizer_files[0]))

static int has_file(const char *dir, const char *name)
{
    char path[SDP_HFDIR_PATH];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int sdp_hfdir_has_tokenizer(const char *dir)
{
    return has_file(dir, "tokenizer.json") || has_file(dir, "tokenizer.model") ||
           (has_file(dir, "vocab.json") && has_file(dir, "merges.txt"));
}

/* Copy src to dst through dst.tmp, committed by sdp_file_commit (flush, fsync, rename). */
static int copy_file(const char *src, const char *dst)
{
    char tmp[SDP_HFDIR_PATH + 8], buf[1 << 16];
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

/* The id of tokenizer_config.json's `key` ("eos_token": a string or {"content": ...}), or -1. */
static int special_id(const sdp_tok_t *tok, json_t *conf, const char *key)
{
    json_t *v = json_object_get(conf, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!json_is_string(v))
        return -1;
    int id = sdp_tok_token_id(tok, json_string_value(v));
    return id >= 0 ? id : -1;
}

/* bos, eos and pad ids of dir's tokenizer_config.json (-1 where it names none). */
static void special_ids(const char *dir, const sdp_tok_t *tok, int ids[3])
{
    char path[SDP_HFDIR_PATH];
    json_t *conf;
    ids[0] = ids[1] = ids[2] = -1;
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    if (!(conf = json_load_file(path, 0, NULL)))
        return;
    ids[0] = special_id(tok, conf, "bos_token");
    ids[1] = special_id(tok, conf, "eos_token");
    ids[2] = special_id(tok, conf, "pad_token");
    json_decref(conf);
}

static int load(const char *dir, const char *what, sdp_tok_t **tok)
{
    struct stat sb;
    int rc;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        sdp_err(-ENOENT, "%s: %s is not a directory", what, dir);
        sdp_hint("name a directory holding tokenizer.json (or vocab.json and merges.txt)");
        return -ENOENT;
    }
    if (!sdp_hfdir_has_tokenizer(dir)) {
        sdp_err(-ENOENT,
                "%s: %s holds no tokenizer (tokenizer.json, tokenizer.model, or "
                "vocab.json with merges.txt)",
                what, dir);
        return -ENOENT;
    }
    if (has_file(dir, "tokenizer.model") && !has_file(dir, "tokenizer.json") &&
        !has_file(dir, "vocab.json")) {
        *tok = NULL; /* a SentencePiece model: copied as it is, not read */
        return 0;
    }
    if ((rc = sdp_tok_load(dir, tok)) != 0)
        sdp_err(rc, "%s: the tokenizer of %s cannot be read", what, dir);
    return rc;
}

int sdp_hfdir_check_tokenizer(const char *dir, const char *what, struct sdp_model_cfg *cfg)
{
    sdp_tok_t *tok = NULL;
    int rc = load(dir, what, &tok), ids[3];
    if (rc || !tok)
        return rc;
    if (cfg->vocab_size > 0 && sdp_tok_vocab_size(tok) > (uint32_t)cfg->vocab_size) {
        sdp_err(-EINVAL, "%s: the tokenizer of %s has %u ids, the model's vocabulary %d", what, dir,
                sdp_tok_vocab_size(tok), cfg->vocab_size);
        sdp_hint("name the tokenizer the model's data was made with");
        sdp_tok_free(tok);
        return -EINVAL;
    }
    special_ids(dir, tok, ids);
    if (cfg->bos_token_id < 0)
        cfg->bos_token_id = ids[0];
    if (cfg->eos_token_id < 0)
        cfg->eos_token_id = ids[1];
    sdp_tok_free(tok);
    return 0;
}

/* generation_config.json: the model's bos, its eos and the tokenizer's end-of-turn token (the
 * tokenizer_config.json's eos_token: <|im_end|> for Qwen3's chat models) as eos, and the pad. */
static int write_generation_config(const char *from, const char *outdir,
                                   const struct sdp_model_cfg *cfg)
{
    char path[SDP_HFDIR_PATH], *text;
    json_t *o = json_object(), *eos = json_array();
    sdp_tok_t *tok = NULL;
    int ids[3] = { -1, -1, -1 }, rc;
    if (has_file(from, "tokenizer.json") || has_file(from, "vocab.json"))
        if (sdp_tok_load(from, &tok) == 0)
            special_ids(from, tok, ids);
    sdp_tok_free(tok);
    if (cfg->eos_token_id >= 0)
        json_array_append_new(eos, json_integer(cfg->eos_token_id));
    if (ids[1] >= 0 && ids[1] != cfg->eos_token_id)
        json_array_append_new(eos, json_integer(ids[1]));
    if (cfg->bos_token_id >= 0)
        json_object_set_new(o, "bos_token_id", json_integer(cfg->bos_token_id));
    if (json_array_size(eos) == 1)
        json_object_set(o, "eos_token_id", json_array_get(eos, 0));
    else if (json_array_size(eos) > 1)
        json_object_set(o, "eos_token_id", eos);
    if (ids[2] >= 0)
        json_object_set_new(o, "pad_token_id", json_integer(ids[2]));
    json_decref(eos);
    text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    if (!text)
        return sdp_err(-ENOMEM, "generation_config.json");
    snprintf(path, sizeof(path), "%s/generation_config.json", outdir);
    rc = sdp_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

int sdp_hfdir_add_tokenizer(const char *from, const char *outdir, const struct sdp_model_cfg *cfg)
{
    char src[SDP_HFDIR_PATH], dst[SDP_HFDIR_PATH];
    int n = 0, rc;
    for (size_t i = 0; i < NTOKENIZER_FILES; i++) {
        if (!has_file(from, tokenizer_files[i]))
            continue;
        snprintf(src, sizeof(src), "%s/%s", from, tokenizer_files[i]);
        snprintf(dst, sizeof(dst), "%s/%s", outdir, tokenizer_files[i]);
        if ((rc = copy_file(src, dst)) != 0)
            return rc;
        n++;
    }
    if (!has_file(from, "generation_config.json") &&
        (rc = write_generation_config(from, outdir, cfg)) != 0)
        return rc;
    SDP_INFO("copied %d tokenizer files from %s into %s", n, from, outdir);
    return 0;
}
