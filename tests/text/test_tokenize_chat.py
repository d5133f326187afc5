#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Checks `slidedp tokenize --format chat` (instruction data with a loss mask) against references:
# the rendered text of every conversation against a Jinja-free Python transcription of Qwen3's
# chat template and, when installed, against transformers' apply_chat_template(tokenize=False,
# enable_thinking=False) on data/tokenizers/qwen3 (else jinja2 on the same template); the ids
# against Python `tokenizers` encoding that text; the loss mask against the assistant spans of the
# Python rendering located through the tokenizer's offsets; the v2 shard header byte by byte.
# Also: malformed lines stop with file:line (--on-error stop) or are skipped (skip).
# Exit 0 pass, 1 fail, 77 skip (no `tokenizers`).
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    from tokenizers import Tokenizer
except ImportError:
    print("SKIP: Python package `tokenizers` not installed")
    sys.exit(77)

top_srcdir = os.environ.get("top_srcdir", ".")
top_builddir = os.environ.get("top_builddir", ".")
slidedp = os.environ.get("SLIDEDP", os.path.join(top_builddir, "slidedp"))
qwen3 = os.path.join(top_srcdir, "data", "tokenizers", "qwen3")
EOS = "<|endoftext|>"

failures = 0


def check(ok, what):
    global failures
    print(("ok      " if ok else "FAILED  ") + what)
    if not ok:
        failures += 1


def render(messages):
    """Qwen3's chat_template, branch without tools, no generation prompt, transcribed without
    Jinja.  Returns the text and the trained character spans [begin, end): each assistant reply
    from the end of the non-thinking generation prompt to the end of its <|im_end|>."""
    out, spans = [], []
    n = len(messages)
    if messages[0]["role"] == "system":
        out.append("<|im_start|>system\n" + messages[0]["content"] + "<|im_end|>\n")
    last_query = n - 1
    for i in range(n - 1, -1, -1):
        c = messages[i]["content"]
        if messages[i]["role"] == "user" and not (c.startswith("<tool_response>")
                                                  and c.endswith("</tool_response>")):
            last_query = i
            break
    for i, m in enumerate(messages):
        role, c = m["role"], m["content"]
        if role == "user" or (role == "system" and i > 0):
            out.append("<|im_start|>" + role + "\n" + c + "<|im_end|>\n")
        elif role == "assistant":
            content, reasoning = c, ""
            if "</think>" in c:
                content = c.split("</think>")[-1].lstrip("\n")
                reasoning = c.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
            head = "<|im_start|>assistant\n"
            if i > last_query and (i == n - 1 or reasoning):
                think = "<think>\n" + reasoning.strip("\n") + "\n</think>\n\n"
                body = content.lstrip("\n")
                prompt_part = head + (think if not reasoning else "")
                gen = ("" if not reasoning else think) + body + "<|im_end|>"
            else:
                prompt_part, gen = head, content + "<|im_end|>"
            start = len("".join(out)) + len(prompt_part)
            out.append(prompt_part + gen + "\n")
            spans.append((start, start + len(gen)))
    return "".join(out), spans


def messages_of(rec):
    if "messages" in rec:
        return rec["messages"]
    return [{"role": "user", "content": rec["prompt"]},
            {"role": "assistant", "content": rec["response"]}]


CASES = [
    {"prompt": "What does the hacker term \"foo\" mean?", "response": "A metasyntactic variable."},
    {"prompt": "  leading spaces and\ttabs\n",
     "response": "\n\nleading newlines are stripped"},
    {"prompt": "Unicode: Grüße, 日本語, emoji 😀", "response": " starts with a space. Ünïcödé"},
    {"prompt": "Decomposed e\u0301 (NFC changes it)", "response": "\u00e9 and e\u0301"},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello."},
                  {"role": "user", "content": "And now?"},
                  {"role": "assistant", "content": "Bye."}]},
    {"messages": [{"role": "user", "content": "q1"},
                  {"role": "assistant", "content": "<think>\nearly reasoning\n</think>\n\na1"},
                  {"role": "user", "content": "q2"},
                  {"role": "assistant", "content": "<think>\nI think.\n\n</think>\n\na2"}]},
    {"messages": [{"role": "user", "content": "tool use"},
                  {"role": "assistant", "content": "calling"},
                  {"role": "user", "content": "<tool_response>42</tool_response>"},
                  {"role": "assistant", "content": "<think>\nsaw 42\n</think>\nthe answer: 42"},
                  {"role": "assistant", "content": "final"}]},
    {"messages": [{"role": "user", "content": "a"},
                  {"role": "system", "content": "late system message"},
                  {"role": "assistant", "content": ""}]},
    {"messages": [{"role": "system", "content": "only the system and an assistant"},
                  {"role": "assistant", "content": "\nreply\n"}]},
]


def main():
    if not os.access(slidedp, os.X_OK):
        print("FAIL: %s not built" % slidedp)
        return 1
    tok = Tokenizer.from_file(os.path.join(qwen3, "tokenizer.json"))
    eos = tok.token_to_id(EOS)
    cases = list(CASES)
    jargon = os.path.join(top_srcdir, "data", "jargon", "jargon-sft.jsonl")
    if os.path.exists(jargon):
        with open(jargon, encoding="utf-8") as f:
            cases += [json.loads(line) for _, line in zip(range(300), f)]
        print("using %d conversations (%d from data/jargon/jargon-sft.jsonl)"
              % (len(cases), len(cases) - len(CASES)))

    # the template references: transformers, else jinja2 on the same template
    rendered = [render(messages_of(c)) for c in cases]
    try:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(qwen3)
        ref = [hf.apply_chat_template(messages_of(c), tokenize=False, enable_thinking=False)
               for c in cases]
        ref_name = "transformers apply_chat_template"
    except ImportError:
        try:
            import jinja2
            with open(os.path.join(qwen3, "tokenizer_config.json"), encoding="utf-8") as f:
                tmpl = json.load(f)["chat_template"]
            env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
            t = env.from_string(tmpl)
            ref = [t.render(messages=messages_of(c), enable_thinking=False,
                            add_generation_prompt=False) for c in cases]
            ref_name = "jinja2 on tokenizer_config.json's chat_template"
        except ImportError:
            ref, ref_name = None, None
    if ref is not None:
        same = sum(r == text for r, (text, _) in zip(ref, rendered))
        check(same == len(cases), "Python transcription == %s: %d of %d conversations"
              % (ref_name, same, len(cases)))
        for r, (text, _) in zip(ref, rendered):
            if r != text:
                print("  reference: %r\n  ours:      %r" % (r, text))
                break
    else:
        print("note: neither transformers nor jinja2 installed: template not cross-checked")

    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "chat.jsonl"), os.path.join(d, "chat.tok")
        with open(src, "w", encoding="utf-8") as f:
            for c in cases:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
            f.write("\n")  # blank lines are not conversations
        p = subprocess.run([slidedp, "tokenize", "--tokenizer", qwen3, "--input", src,
                            "--output", out, "--format", "chat"], capture_output=True, text=True)
        check(p.returncode == 0, "slidedp tokenize --format chat exit %d" % p.returncode)
        if p.returncode != 0:
            print(p.stderr)
            return 1
        data = open(out, "rb").read()
        magic, ver, width, count, vocab, eos_h, flags = struct.unpack_from("<8sIIQIiI", data, 0)
        check(magic == b"SDPTOKEN" and ver == 2 and width == 4 and flags == 1 and eos_h == eos
              and vocab == tok.get_vocab_size(with_added_tokens=True)
              and data[36:64] == bytes(28) and len(data) == 64 + 5 * count,
              "v2 header: version %d, flags %d, %d tokens, eos %d, %d bytes" % (
                  ver, flags, count, eos_h, len(data)))
        ids = list(struct.unpack_from("<%dI" % count, data, 64))
        mask = list(data[64 + 4 * count:])

        want_ids, want_mask = [], []
        for text, spans in rendered:
            enc = tok.encode(text, add_special_tokens=False)
            want_ids += enc.ids + [eos]
            want_mask += [int(any(b <= s < e for b, e in spans)) for s, _ in enc.offsets] + [0]
        check(ids == want_ids,
              "ids == tokenizers.encode(rendered text) + EOS: %d tokens" % len(ids))
        bad = [i for i, (a, b) in enumerate(zip(mask, want_mask)) if a != b]
        check(len(mask) == len(want_mask) and not bad,
              "mask == assistant spans via tokenizer offsets: %d of %d tokens trained, %d differ"
              % (sum(mask), len(mask), len(bad)))
        if bad:
            i = bad[0]
            print("  first difference at token %d (%r): ours %d, reference %d"
                  % (i, tok.id_to_token(ids[i]), mask[i], want_mask[i]))
        # direct facts: EOS never trained, every trained run ends with <|im_end|>
        im_end = tok.token_to_id("<|im_end|>")
        eos_trained = sum(m for t, m in zip(ids, mask) if t == eos)
        ends_ok = all(ids[i] == im_end for i in range(len(ids))
                      if mask[i] and (i + 1 == len(ids) or not mask[i + 1]))
        n_im_end = sum(1 for c in cases for m in messages_of(c) if m["role"] == "assistant")
        trained_im_end = sum(m for t, m in zip(ids, mask) if t == im_end)
        check(eos_trained == 0 and ends_ok and trained_im_end == n_im_end,
              "EOS never trained; each trained run ends with <|im_end|>; %d trained <|im_end|> "
              "for %d assistant messages" % (trained_im_end, n_im_end))

        # malformed lines: stop names file:line, skip drops them
        bad_lines = ['{"prompt": "no response"}', '{"prompt": 1, "response": "x"}',
                     '{"messages": [{"role": "robot", "content": "x"}]}',
                     '{"messages": [{"role": "user"}]}', '{"messages": []}',
                     '{"messages": [{"role": "user", "content": "no reply"}]}',
                     '["not an object"]', '{"prompt": "x", "response": "y"']
        for k, line in enumerate(bad_lines):
            with open(src, "w", encoding="utf-8") as f:
                f.write(json.dumps(CASES[0]) + "\n" + line + "\n" + json.dumps(CASES[1]) + "\n")
            p = subprocess.run([slidedp, "tokenize", "--tokenizer", qwen3, "--input", src,
                                "--output", out, "--format", "chat"], capture_output=True,
                               text=True)
            msg = [l for l in p.stderr.splitlines() if "chat.jsonl:2:" in l]
            check(p.returncode != 0 and msg, "stop on %s -> exit %d, %s"
                  % (line, p.returncode, msg[0].split("chat.jsonl:")[1] if msg else "no file:line"))
            p = subprocess.run([slidedp, "tokenize", "--tokenizer", qwen3, "--input", src,
                                "--output", out, "--format", "chat", "--on-error", "skip"],
                               capture_output=True, text=True)
            n_ok = 0
            if p.returncode == 0:
                data = open(out, "rb").read()
                count = struct.unpack_from("<Q", data, 16)[0]
                n_ok = struct.unpack_from("<%dI" % count, data, 64).count(eos)
            check(p.returncode == 0 and n_ok == 2, "skip: exit %d, %d conversations kept (2)"
                  % (p.returncode, n_ok))
    print("PASS" if failures == 0 else "FAIL")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
