/* SPDX-License-Identifier: MIT */
/* Chat rendering for instruction fine-tuning: a conversation (system / user / assistant messages)
 * becomes the text of Qwen3's chat template (ChatML) plus the byte ranges the model is trained on
 * (assistant replies and their closing <|im_end|>).  Pure string work: no JSON, no tokenizer.
 * Tests: tests/text/test_tokenize_chat.py (against a Python rendering and, when installed,
 * transformers' apply_chat_template). */
#ifndef SDP_CHAT_H
#define SDP_CHAT_H

#include <stddef.h>

enum sdp_chat_role { SDP_CHAT_SYSTEM, SDP_CHAT_USER, SDP_CHAT_ASSISTANT };

struct sdp_chat_msg {
    enum sdp_chat_role role;
    const char *content; /* len bytes, need not be NUL-terminated */
    size_t len;
};

/* A trained byte range [begin, end) of the rendered text. */
struct sdp_chat_span {
    size_t begin, end;
};

/* Rendered text and its trained spans; reused across conversations (zero-initialise once). */
struct sdp_chat_text {
    char *text; /* len bytes, NUL-terminated */
    size_t len, cap;
    struct sdp_chat_span *spans;
    size_t n_spans, cap_spans;
};

/** Render a conversation with Qwen3's chat template, non-thinking, without tools and without a
 * generation prompt: each message becomes "<|im_start|>{role}\n{content}<|im_end|>\n"; the last
 * assistant message (and any after the last user message whose content holds a </think>) gets
 * the think block "<think>\n{reasoning}\n</think>\n\n" before its content, empty reasoning when
 * the content has none, exactly as the template does.  Each assistant message adds one span:
 * from the start of what a model generates after the non-thinking generation prompt
 * ("<|im_start|>assistant\n<think>\n\n</think>\n\n", or "<|im_start|>assistant\n" where the turn
 * has no think block or a non-empty one) to the end of its <|im_end|>; the "\n" after it is not
 * trained.
 * @return 0, -ENOMEM (out is then left valid for sdp_chat_text_free) */
int sdp_chat_render_qwen3(const struct sdp_chat_msg *msgs, size_t n, struct sdp_chat_text *out);

void sdp_chat_text_free(struct sdp_chat_text *out);

#endif
