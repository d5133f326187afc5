/* SPDX-License-Identifier: MIT */
/* Qwen3's chat template (tokenizer_config.json's chat_template, the branch without tools) written
 * out in C, with the byte spans of the assistant replies recorded for the loss mask.  It must not
 * diverge from the Jinja template: every string operation below names the template expression it
 * implements.  Tests: tests/text/test_tokenize_chat.py. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"

static const char *const role_name[] = { "system", "user", "assistant" };

static int put(struct sdp_chat_text *o, const char *s, size_t n)
{
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (o->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(o->text, cap);
        if (!p)
            return -ENOMEM;
        o->text = p;
        o->cap = cap;
    }
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = 0;
    return 0;
}

static int puts0(struct sdp_chat_text *o, const char *s)
{
    return put(o, s, strlen(s));
}

static int add_span(struct sdp_chat_text *o, size_t begin, size_t end)
{
    if (o->n_spans == o->cap_spans) {
        size_t cap = o->cap_spans ? 2 * o->cap_spans : 16;
        struct sdp_chat_span *p = realloc(o->spans, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        o->spans = p;
        o->cap_spans = cap;
    }
    o->spans[o->n_spans++] = (struct sdp_chat_span){ begin, end };
    return 0;
}

/* Offset of the first (last when last) occurrence of pat in s[0, n), or -1. */
static long find(const char *s, size_t n, const char *pat, int last)
{
    size_t m = strlen(pat);
    long at = -1;
    for (size_t i = 0; i + m <= n; i++) {
        if (!memcmp(s + i, pat, m)) {
            at = (long)i;
            if (!last)
                break;
        }
    }
    return at;
}

static int starts_with(const struct sdp_chat_msg *m, const char *p)
{
    size_t l = strlen(p);
    return m->len >= l && !memcmp(m->content, p, l);
}

static int ends_with(const struct sdp_chat_msg *m, const char *p)
{
    size_t l = strlen(p);
    return m->len >= l && !memcmp(m->content + m->len - l, p, l);
}

/* One assistant message (template branch `message.role == "assistant"`). */
static int render_assistant(struct sdp_chat_text *o, const struct sdp_chat_msg *m, int think_block)
{
    /* content = message.content; reasoning_content = '' */
    const char *c = m->content, *r = "";
    size_t cn = m->len, rn = 0;
    long close = find(m->content, m->len, "</think>", 0);
    int rc;

    if (close >= 0) {
        /* content = message.content.split('</think>')[-1].lstrip('\n') */
        long last = find(m->content, m->len, "</think>", 1);
        c = m->content + last + 8;
        cn = m->len - (size_t)last - 8;
        while (cn && *c == '\n')
            c++, cn--;
        /* reasoning_content = message.content.split('</think>')[0].rstrip('\n')
         *                     .split('<think>')[-1].lstrip('\n') */
        r = m->content;
        rn = (size_t)close;
        while (rn && r[rn - 1] == '\n')
            rn--;
        long open = find(r, rn, "<think>", 1);
        if (open >= 0) {
            r += open + 7;
            rn -= (size_t)open + 7;
        }
        while (rn && *r == '\n')
            r++, rn--;
    }
    /* think block when loop.index0 > ns.last_query_index and (loop.last or reasoning_content) */
    think_block = think_block == 2 || (think_block == 1 && rn > 0);
    if ((rc = puts0(o, "<|im_start|>assistant\n")))
        return rc;
    size_t begin = o->len;
    if (think_block) {
        /* '<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') */
        while (rn && *r == '\n')
            r++, rn--;
        while (rn && r[rn - 1] == '\n')
            rn--;
        while (cn && *c == '\n')
            c++, cn--;
        if ((rc = puts0(o, "<think>\n")) || (rc = put(o, r, rn)) ||
            (rc = puts0(o, "\n</think>\n\n")))
            return rc;
        /* An empty think block is part of the non-thinking generation prompt: not trained. */
        if (rn == 0)
            begin = o->len;
    }
    if ((rc = put(o, c, cn)) || (rc = puts0(o, "<|im_end|>")))
        return rc;
    if ((rc = add_span(o, begin, o->len)))
        return rc;
    return puts0(o, "\n");
}

int sdp_chat_render_qwen3(const struct sdp_chat_msg *msgs, size_t n, struct sdp_chat_text *o)
{
    size_t last_query = n ? n - 1 : 0;
    int rc;

    o->len = 0;
    o->n_spans = 0;
    if ((rc = put(o, "", 0)))
        return rc;
    /* if messages[0].role == 'system': '<|im_start|>system\n' + content + '<|im_end|>\n' */
    if (n && msgs[0].role == SDP_CHAT_SYSTEM) {
        if ((rc = puts0(o, "<|im_start|>system\n")) ||
            (rc = put(o, msgs[0].content, msgs[0].len)) || (rc = puts0(o, "<|im_end|>\n")))
            return rc;
    }
    /* ns.last_query_index: the last user message that is not a bare tool response */
    for (size_t k = n; k-- > 0;) {
        const struct sdp_chat_msg *m = &msgs[k];
        if (m->role == SDP_CHAT_USER &&
            !(starts_with(m, "<tool_response>") && ends_with(m, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const struct sdp_chat_msg *m = &msgs[i];
        if (m->role == SDP_CHAT_USER || (m->role == SDP_CHAT_SYSTEM && i > 0)) {
            if ((rc = puts0(o, "<|im_start|>")) || (rc = puts0(o, role_name[m->role])) ||
                (rc = puts0(o, "\n")) || (rc = put(o, m->content, m->len)) ||
                (rc = puts0(o, "<|im_end|>\n")))
                return rc;
        } else if (m->role == SDP_CHAT_ASSISTANT) {
            /* 2: always a think block (last message), 1: when reasoning is non-empty, 0: never */
            int tb = i > last_query ? (i == n - 1 ? 2 : 1) : 0;
            if ((rc = render_assistant(o, m, tb)))
                return rc;
        }
    }
    return 0;
}

void sdp_chat_text_free(struct sdp_chat_text *o)
{
    free(o->text);
    free(o->spans);
    memset(o, 0, sizeof(*o));
}
