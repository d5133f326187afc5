/* SPDX-License-Identifier: MIT */
/* `slidedp tokenize`: turns text into a token shard (formats/shard.h) or whitespace-separated ids.
 * A plain-text input is one document; a .jsonl input holds one document per line (a string field).
 * With --format chat, each JSONL line is a conversation rendered with the chat template
 * (text/chat.c) into a version 2 shard whose loss mask keeps only the assistant replies.
 * Each document is followed by the end-of-document id.  Only parses options and moves bytes: the
 * tokenizer is text/tokenizer.c.  Tests: tests/text/test_tokenize_hf.py,
 * tests/text/test_tokenize_chat.py. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "text/chat.h"
#include "cli/cli.h"
#include "base/fsutil.h"
#include "base/sdp_log.h"
#include "formats/shard.h"
#include "text/tokenizer.h"

/* Progress lines on stderr at most this often, for inputs that take longer than that. */
#define PROGRESS_EVERY_S 5.0

struct opts {
    const char *tokenizer, *input, *output, *field, *eos;
    int text_format, chat_format, skip_errors;
};

struct run {
    const struct opts *o;
    sdp_tok_t *tok;
    int32_t eos_id;
    FILE *text_out; /* --format text */
    uint32_t *ids;  /* pending ids (all of them for a shard, one document for text) */
    size_t n, cap;
    uint8_t *mask; /* --format chat: loss mask of ids, mask_cap entries allocated */
    size_t mask_cap;
    struct sdp_chat_text chat;
    uint64_t n_tokens, n_docs, n_skipped, n_bytes, n_trained;
    double t0, t_last;
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: slidedp tokenize --tokenizer PATH --input FILE --output FILE [options]\n"
        "\n"
        "  --tokenizer PATH     tokenizer.json, or a directory with it or with vocab.json +\n"
        "                       merges.txt (byte-level BPE: Qwen, Llama-3, GPT-2)\n"
        "  --input FILE         plain text (one document) or FILE.jsonl (one document a line)\n"
        "  --output FILE        token shard, or text ids with --format text ('-': stdout)\n"
        "  --format shard|text|chat\n"
        "                       output format (default shard); chat: the JSONL input holds\n"
        "                       one conversation a line, {\"prompt\": ..., \"response\": ...} or\n"
        "                       {\"messages\": [{\"role\": \"system\"|\"user\"|\"assistant\",\n"
        "                       \"content\": ...}, ...]}, rendered with the Qwen3 chat template\n"
        "                       (non-thinking) into a shard whose loss mask trains only the\n"
        "                       assistant replies\n"
        "  --jsonl-field NAME   string field holding the document in .jsonl (default text)\n"
        "  --eos TOKEN|none     id appended after each document (default <|endoftext|> when\n"
        "                       the vocabulary has it)\n"
        "  --on-error skip|stop malformed JSONL lines: skip them or stop (default stop)\n"
        "  -h, --help           this text\n");
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Returns 0, or SDP_EXIT_USAGE after printing why. */
static int parse(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    o->field = "text";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        static const char *const with_value[] = { "--tokenizer", "--input",       "--output",
                                                  "--format",    "--jsonl-field", "--eos",
                                                  "--on-error" };
        size_t k, nk = sizeof(with_value) / sizeof(with_value[0]);
        for (k = 0; k < nk; k++) {
            size_t l = strlen(with_value[k]);
            if (!strncmp(a, with_value[k], l) && (a[l] == '=' || !a[l])) {
                if (a[l] == '=')
                    val = a + l + 1;
                else if (i + 1 < argc)
                    val = argv[++i];
                break;
            }
        }
        if (k == nk) {
            fprintf(stderr, "slidedp tokenize: unknown option '%s'\n\n", a);
            usage(stderr);
            return SDP_EXIT_USAGE;
        }
        if (!val) {
            fprintf(stderr, "slidedp tokenize: %s needs a value\n", a);
            return SDP_EXIT_USAGE;
        }
        switch (k) {
        case 0:
            o->tokenizer = val;
            break;
        case 1:
            o->input = val;
            break;
        case 2:
            o->output = val;
            break;
        case 3:
            if (strcmp(val, "shard") && strcmp(val, "text") && strcmp(val, "chat")) {
                fprintf(stderr, "slidedp tokenize: --format must be shard, text or chat\n");
                return SDP_EXIT_USAGE;
            }
            o->text_format = !strcmp(val, "text");
            o->chat_format = !strcmp(val, "chat");
            break;
        case 4:
            o->field = val;
            break;
        case 5:
            o->eos = val;
            break;
        default:
            if (strcmp(val, "skip") && strcmp(val, "stop")) {
                fprintf(stderr, "slidedp tokenize: --on-error must be skip or stop\n");
                return SDP_EXIT_USAGE;
            }
            o->skip_errors = !strcmp(val, "skip");
        }
    }
    if (!o->tokenizer || !o->input || !o->output) {
        fprintf(stderr, "slidedp tokenize: --tokenizer, --input and --output are required\n\n");
        usage(stderr);
        return SDP_EXIT_USAGE;
    }
    if (o->chat_format && !ends_with(o->input, ".jsonl")) {
        fprintf(stderr, "slidedp tokenize: --format chat needs a .jsonl input\n");
        return SDP_EXIT_USAGE;
    }
    if (!strcmp(o->output, "-") && !o->text_format) {
        fprintf(stderr, "slidedp tokenize: --output - needs --format text\n");
        return SDP_EXIT_USAGE;
    }
    return 0;
}

static void progress(struct run *r, int final)
{
    double t = sdp_cli_now_s();
    if (!final && t - r->t_last < PROGRESS_EVERY_S)
        return;
    r->t_last = t;
    double mb = (double)r->n_bytes / 1e6, dt = t - r->t0 > 1e-9 ? t - r->t0 : 1e-9;
    SDP_INFO("tokenize: %s%" PRIu64 " documents, %.1f MB, %" PRIu64 " tokens, %.2f MB/s",
             final ? "done: " : "", r->n_docs, mb, r->n_tokens, mb / dt);
}

/* Write the pending ids of a text-format run. */
static int flush_text(struct run *r)
{
    errno = 0;
    for (size_t i = 0; i < r->n; i++)
        fprintf(r->text_out, i ? " %u" : "%u", r->ids[i]);
    fputc('\n', r->text_out);
    r->n = 0;
    if (ferror(r->text_out)) { /* errno is the failed write's: ENOSPC on a full disk */
        int rc = sdp_err(errno ? -errno : -EIO, "tokenize: writing %s", r->o->output);
        if (strcmp(r->o->output, "-"))
            sdp_hint("the previous %s, if any, is untouched", r->o->output);
        return rc;
    }
    return 0;
}

static int add_document(struct run *r, const char *text, size_t len)
{
    size_t before = r->n;
    int rc = sdp_tok_encode_append(r->tok, text, len, &r->ids, &r->n, &r->cap);
    if (rc)
        return rc;
    if (r->eos_id >= 0) {
        if (r->n == r->cap) {
            size_t cap = r->cap ? 2 * r->cap : 1024;
            uint32_t *p = realloc(r->ids, cap * sizeof(*p));
            if (!p)
                return -ENOMEM;
            r->ids = p;
            r->cap = cap;
        }
        r->ids[r->n++] = (uint32_t)r->eos_id;
    }
    r->n_tokens += r->n - before;
    r->n_docs++;
    r->n_bytes += len;
    if (r->text_out && (rc = flush_text(r)))
        return rc;
    progress(r, 0);
    return 0;
}

static int run_plain(struct run *r)
{
    FILE *f = fopen(r->o->input, "rb");
    if (!f)
        return sdp_err(-errno, "tokenize: cannot open %s", r->o->input);
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    int rc = 0;
    do {
        if (len + (1 << 20) > cap) {
            size_t c = cap ? 2 * cap : 1 << 22;
            char *p = realloc(buf, c);
            if (!p) {
                rc = -ENOMEM;
                break;
            }
            buf = p;
            cap = c;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    if (!rc && ferror(f))
        rc = sdp_err(-EIO, "tokenize: reading %s", r->o->input);
    fclose(f);
    if (!rc)
        rc = add_document(r, buf ? buf : "", len);
    free(buf);
    return rc;
}

static int run_jsonl(struct run *r)
{
    FILE *f = fopen(r->o->input, "rb");
    if (!f)
        return sdp_err(-errno, "tokenize: cannot open %s", r->o->input);
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t n;
    int rc = 0;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t i = 0;
        while (i < (size_t)n && strchr(" \t\r\n", line[i]))
            i++;
        if (i == (size_t)n) /* blank line: no document */
            continue;
        json_error_t jerr;
        json_t *doc = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &jerr);
        json_t *field = json_object_get(doc, r->o->field);
        if (!json_is_string(field)) {
            if (!doc)
                sdp_log(r->o->skip_errors ? SDP_LOG_WARN : SDP_LOG_ERROR,
                        "%s:%zu: malformed JSON at column %d: %s%s", r->o->input, lineno,
                        jerr.column, jerr.text, r->o->skip_errors ? " (skipped)" : "");
            else
                sdp_log(r->o->skip_errors ? SDP_LOG_WARN : SDP_LOG_ERROR,
                        "%s:%zu: no string field \"%s\"%s", r->o->input, lineno, r->o->field,
                        r->o->skip_errors ? " (skipped)" : "");
            json_decref(doc);
            if (!r->o->skip_errors) {
                sdp_hint("fix the line, or pass --on-error skip to drop such lines");
                rc = -EINVAL;
                break;
            }
            r->n_skipped++;
            continue;
        }
        rc = add_document(r, json_string_value(field), json_string_length(field));
        json_decref(doc);
    }
    if (!rc && ferror(f))
        rc = sdp_err(-EIO, "tokenize: reading %s", r->o->input);
    free(line);
    fclose(f);
    if (r->n_skipped)
        SDP_WARN("tokenize: %s: %" PRIu64 " malformed lines skipped", r->o->input, r->n_skipped);
    return rc;
}

/* Grow r->ids and r->mask to hold at least need entries (the mask follows the ids' capacity). */
static int reserve_masked(struct run *r, size_t need)
{
    if (need > r->cap) {
        size_t cap = r->cap ? r->cap : 1 << 16;
        while (cap < need)
            cap *= 2;
        uint32_t *p = realloc(r->ids, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        r->ids = p;
        r->cap = cap;
    }
    if (r->cap > r->mask_cap) {
        uint8_t *m = realloc(r->mask, r->cap);
        if (!m)
            return -ENOMEM;
        r->mask = m;
        r->mask_cap = r->cap;
    }
    return 0;
}

/* A chat line's messages from JSON, or a message (in why, for file:line) saying what is wrong.
 * The returned content pointers point into doc. */
static int chat_messages(json_t *doc, struct sdp_chat_msg **msgs, size_t *n, size_t *cap, char *why,
                         size_t why_len)
{
    static const char *const roles[] = { "system", "user", "assistant" };
    json_t *list = json_object_get(doc, "messages");
    int assistant = 0;

    *n = 0;
    if (!json_is_object(doc)) {
        snprintf(why, why_len, "expected a JSON object");
        return -EINVAL;
    }
    size_t want = list ? json_array_size(list) : 2;
    if (want > *cap) {
        struct sdp_chat_msg *p = realloc(*msgs, want * sizeof(*p));
        if (!p)
            return -ENOMEM;
        *msgs = p;
        *cap = want;
    }
    if (list) {
        if (!json_is_array(list) || json_array_size(list) == 0) {
            snprintf(why, why_len, "\"messages\" must be a non-empty array");
            return -EINVAL;
        }
        for (size_t i = 0; i < want; i++) {
            json_t *m = json_array_get(list, i), *role, *content;
            role = json_object_get(m, "role");
            content = json_object_get(m, "content");
            if (!json_is_object(m) || !json_is_string(role) || !json_is_string(content)) {
                snprintf(why, why_len,
                         "messages[%zu] must be an object with string fields \"role\" and "
                         "\"content\"",
                         i);
                return -EINVAL;
            }
            size_t k;
            for (k = 0; k < 3 && strcmp(json_string_value(role), roles[k]); k++)
                ;
            if (k == 3) {
                snprintf(why, why_len,
                         "messages[%zu]: role \"%.40s\" is not system, user or assistant", i,
                         json_string_value(role));
                return -EINVAL;
            }
            (*msgs)[i] = (struct sdp_chat_msg){ (enum sdp_chat_role)k, json_string_value(content),
                                                json_string_length(content) };
            assistant |= k == SDP_CHAT_ASSISTANT;
        }
        *n = want;
    } else {
        json_t *prompt = json_object_get(doc, "prompt"),
               *response = json_object_get(doc, "response");
        if (!prompt && !response) {
            snprintf(why, why_len, "neither \"messages\" nor \"prompt\" and \"response\"");
            return -EINVAL;
        }
        if (!json_is_string(prompt) || !json_is_string(response)) {
            snprintf(why, why_len, "\"prompt\" and \"response\" must both be strings");
            return -EINVAL;
        }
        (*msgs)[0] = (struct sdp_chat_msg){ SDP_CHAT_USER, json_string_value(prompt),
                                            json_string_length(prompt) };
        (*msgs)[1] = (struct sdp_chat_msg){ SDP_CHAT_ASSISTANT, json_string_value(response),
                                            json_string_length(response) };
        *n = 2;
        assistant = 1;
    }
    if (!assistant) {
        snprintf(why, why_len, "no assistant message: nothing to train on");
        return -EINVAL;
    }
    return 0;
}

/* Render, encode and mask one conversation, then append the end-of-document id (mask 0).  The
 * contents are normalized first so that token byte lengths add up to offsets in the rendered text:
 * each content sits between a newline and an added token, so normalizing it alone equals what the
 * encoder does to the whole (the ids are unchanged: normalization is idempotent). */
static int add_chat(struct run *r, struct sdp_chat_msg *msgs, size_t n)
{
    size_t before = r->n, off = 0, span = 0;
    char **owned = calloc(n, sizeof(*owned));
    int rc = owned ? 0 : -ENOMEM;
    for (size_t k = 0; k < n && !rc; k++)
        rc = sdp_tok_normalize_text(r->tok, msgs[k].content, msgs[k].len, &owned[k],
                                    &msgs[k].content, &msgs[k].len);
    if (!rc)
        rc = sdp_chat_render_qwen3(msgs, n, &r->chat);
    for (size_t k = 0; owned && k < n; k++)
        free(owned[k]);
    free(owned);
    if (rc)
        return rc;
    rc = sdp_tok_encode_append(r->tok, r->chat.text, r->chat.len, &r->ids, &r->n, &r->cap);
    if (rc || (rc = reserve_masked(r, r->n + 1)))
        return rc;
    /* A token is trained when its first byte lies in an assistant span.  Spans begin after a
     * newline and end with <|im_end|> (an added token), so no token straddles one in practice. */
    for (size_t i = before; i < r->n; i++) {
        const struct sdp_chat_span *sp = r->chat.spans;
        while (span < r->chat.n_spans && off >= sp[span].end)
            span++;
        r->mask[i] = span < r->chat.n_spans && off >= sp[span].begin;
        r->n_trained += r->mask[i];
        off += sdp_tok_token_nbytes(r->tok, r->ids[i]);
    }
    if (off != r->chat.len)
        return sdp_err(-EINVAL, "tokenize: %zu rendered bytes decode to %zu: tokenizer bug",
                       r->chat.len, off);
    if (r->eos_id >= 0) {
        r->ids[r->n] = (uint32_t)r->eos_id;
        r->mask[r->n++] = 0;
    }
    r->n_tokens += r->n - before;
    r->n_docs++;
    r->n_bytes += r->chat.len;
    progress(r, 0);
    return 0;
}

static int run_chat(struct run *r)
{
    FILE *f = fopen(r->o->input, "rb");
    if (!f)
        return sdp_err(-errno, "tokenize: cannot open %s", r->o->input);
    struct sdp_chat_msg *msgs = NULL;
    char *line = NULL, why[200];
    size_t cap = 0, lineno = 0, nmsg = 0, msg_cap = 0;
    ssize_t n;
    int rc = 0;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t i = 0;
        while (i < (size_t)n && strchr(" \t\r\n", line[i]))
            i++;
        if (i == (size_t)n) /* blank line: no conversation */
            continue;
        json_error_t jerr;
        json_t *doc = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &jerr);
        if (!doc) {
            snprintf(why, sizeof(why), "malformed JSON at column %d: %s", jerr.column, jerr.text);
            rc = -EINVAL;
        } else {
            rc = chat_messages(doc, &msgs, &nmsg, &msg_cap, why, sizeof(why));
        }
        if (rc == -EINVAL) {
            sdp_log(r->o->skip_errors ? SDP_LOG_WARN : SDP_LOG_ERROR, "%s:%zu: %s%s", r->o->input,
                    lineno, why, r->o->skip_errors ? " (skipped)" : "");
            json_decref(doc);
            if (!r->o->skip_errors) {
                sdp_hint("fix the line, or pass --on-error skip to drop such lines");
                break;
            }
            r->n_skipped++;
            rc = 0;
            continue;
        }
        if (!rc)
            rc = add_chat(r, msgs, nmsg);
        json_decref(doc);
    }
    if (!rc && ferror(f))
        rc = sdp_err(-EIO, "tokenize: reading %s", r->o->input);
    free(line);
    free(msgs);
    fclose(f);
    if (r->n_skipped)
        SDP_WARN("tokenize: %s: %" PRIu64 " malformed lines skipped", r->o->input, r->n_skipped);
    return rc;
}

int sdp_cli_tokenize(int argc, char **argv)
{
    struct opts o;
    struct run r = { .o = &o, .eos_id = -1 };
    char tmp[PATH_MAX + 8];
    const char *what = NULL;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? SDP_EXIT_OK : rc;

    if (strcmp(o.output, "-")) {
        struct stat sb;
        const struct sdp_path_role in[] = {
            { o.input, "the --input file", SDP_PATH_FILE },
            { o.tokenizer, "the tokenizer",
              stat(o.tokenizer, &sb) == 0 && S_ISDIR(sb.st_mode) ? SDP_PATH_DIR : SDP_PATH_FILE },
        };
        const struct sdp_path_role out[] = { { o.output, "the --output file", SDP_PATH_FILE } };
        if (sdp_paths_check(out, 1, in, 2))
            return SDP_EXIT_USAGE;
        snprintf(tmp, sizeof(tmp), "%s.tmp", o.output);
    }
    if (sdp_tok_load(o.tokenizer, &r.tok))
        return SDP_EXIT_FAILURE;
    if (o.eos && !strcmp(o.eos, "none")) {
        r.eos_id = -1;
    } else if (o.eos) {
        r.eos_id = sdp_tok_token_id(r.tok, o.eos);
        if (r.eos_id < 0) {
            fprintf(stderr, "slidedp tokenize: --eos %s: no such token in %s\n", o.eos,
                    o.tokenizer);
            sdp_tok_free(r.tok);
            return SDP_EXIT_USAGE;
        }
    } else {
        r.eos_id = sdp_tok_token_id(r.tok, "<|endoftext|>");
        if (r.eos_id < 0)
            SDP_WARN("tokenize: %s has no <|endoftext|>: documents are not separated "
                     "(pass --eos TOKEN)",
                     o.tokenizer);
    }

    if (o.text_format) {
        r.text_out = strcmp(o.output, "-") ? fopen(tmp, "w") : stdout;
        if (!r.text_out) {
            rc = sdp_err(-errno, "tokenize: cannot create %s", tmp);
            goto out;
        }
    }
    if (o.chat_format &&
        (sdp_tok_token_id(r.tok, "<|im_start|>") < 0 || sdp_tok_token_id(r.tok, "<|im_end|>") < 0))
        SDP_WARN("tokenize: %s has no <|im_start|> / <|im_end|> tokens: the Qwen3 chat template's "
                 "markers are encoded as plain text",
                 o.tokenizer);
    r.t0 = r.t_last = sdp_cli_now_s();
    if (o.chat_format)
        rc = run_chat(&r);
    else
        rc = ends_with(o.input, ".jsonl") ? run_jsonl(&r) : run_plain(&r);
    if (!rc && o.chat_format && r.n_docs == 0)
        rc = sdp_err(-EINVAL, "tokenize: %s holds no conversation", o.input);
    if (!rc && o.chat_format)
        rc = sdp_shard_write_masked(o.output, r.ids, r.mask, r.n, sdp_tok_vocab_size(r.tok),
                                    r.eos_id);
    else if (!rc && !o.text_format)
        rc = sdp_shard_write(o.output, r.ids, r.n, sdp_tok_vocab_size(r.tok), r.eos_id);
    if (!rc)
        progress(&r, 1);
    if (!rc && o.chat_format)
        SDP_INFO("tokenize: %" PRIu64 " of %" PRIu64 " tokens (%.1f%%) are training targets "
                 "(assistant replies)",
                 r.n_trained, r.n_tokens, 100.0 * (double)r.n_trained / (double)r.n_tokens);
out:
    if (r.text_out && r.text_out != stdout && rc) {
        fclose(r.text_out); /* the old output stays */
        unlink(tmp);
    } else if (r.text_out && r.text_out != stdout &&
               (rc = sdp_file_commit(r.text_out, tmp, o.output, &what)) != 0)
        rc = sdp_err(rc, "tokenize: writing %s: %s", o.output, what);
    else if (r.text_out == stdout && fflush(stdout) && !rc)
        rc = sdp_err(-EIO, "tokenize: writing stdout");
    free(r.ids);
    free(r.mask);
    sdp_chat_text_free(&r.chat);
    sdp_tok_free(r.tok);
    return rc ? SDP_EXIT_FAILURE : SDP_EXIT_OK;
}
