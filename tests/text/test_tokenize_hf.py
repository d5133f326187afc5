#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Checks `slidedp tokenize --format text` against Hugging Face `tokenizers` (the reference): the ids
# must be identical for >= 1 MB of real English text and a crafted multilingual / edge-case text
# (added tokens, NFC-changing input, emoji, CJK, odd whitespace, long runs, random code points),
# with Qwen3's tokenizer.json, GPT-2's vocab.json + merges.txt, and a Llama-3-style tokenizer
# trained here (Llama-3 regex, no normalizer, ignore_merges, "a b" merges).  Also checks the .jsonl
# input (--on-error skip|stop) and that the shard output holds the same ids.  Prints the
# throughput of both (MB/s, one thread).  Exit 0 pass, 1 fail, 77 skip (no `tokenizers`).
import glob
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

try:
    import tokenizers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError:
    print("SKIP: Python package `tokenizers` not installed")
    sys.exit(77)

top_srcdir = os.environ.get("top_srcdir", ".")
top_builddir = os.environ.get("top_builddir", ".")
slidedp = os.environ.get("SLIDEDP", os.path.join(top_builddir, "slidedp"))

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def real_text(min_bytes):
    """KJV bible from Debian's bible-kjv, else the licence texts every Debian system carries."""
    if shutil.which("bible"):
        out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True)
        if out.returncode == 0 and len(out.stdout) >= min_bytes:
            return out.stdout.decode("utf-8", "replace"), "bible -f Gen1:1-Rev22:21"
    parts, total = [], 0
    files = sorted(glob.glob("/usr/share/common-licenses/*")) + \
        sorted(glob.glob("/usr/share/doc/*/copyright"))
    for f in files:
        try:
            with open(f, "rb") as fh:
                s = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        parts.append(s)
        total += len(s.encode())
        if total >= min_bytes:
            break
    return "\n".join(parts), "/usr/share/common-licenses + /usr/share/doc/*/copyright"


def crafted_text():
    fixed = [
        "Hello world! I'm you'RE they'll we'd It's DON'T can't 'S 'll",
        "Numbers: 1234567 3.14159 1,000,000 ١٢٣٤ ⅔ ² 00007 12345678901234567890",
        "日本語のテキスト、中文文本，한국어 텍스트 ภาษาไทย हिन्दी العربية עברית Ελληνικά Русский",
        "Emoji: 🤗 👨‍👩‍👧‍👦 🇯🇵 👍🏽 ❤️ 🏳️‍🌈 😀😃😄",
        "NFC: e\u0301 a\u0308 n\u0303 \u212b \u2126 \uf900 \u1100\u1161\u11a8 o\u0308\u0304 "
        "\u0041\u030a\u0301",
        "Spaces:\tTab  two   three\r\nCRLF\u00a0nbsp\u2028ls\u2029ps\u3000ideo\u0085nel"
        "\u200bzw\ufeffbom\u1680ogham\u2003em \u000b\u000c",
        "Specials: <|im_start|>user\nhi<|im_end|>\n<think>\nok</think><|endoftext|>"
        "<|endoftext|> <|im_sta <|endoftext| <|begin_of_text|>x<|end_of_text|>",
        "Code: def f(x):\n    return x**2  # comment\n\tif(a&&b){}\n\n\n    \n",
        "Controls: \x00 \x01\x02 \x7f \x1b[0m",
        "Ligatures ﬁ ﬂ Ⅻ ㎏ ½ ™ — – … «» „“ ‘’",
        " " * 300 + "x" + "=" * 500 + "\n" * 40 + "9" * 200,
        "".join(random.Random(1).choice("abcdefghijklmnopqrstuvwxyzéß") for _ in range(3000)),
        "trailing spaces   ",
    ]
    # each Unicode space (and look-alikes that are not White_Space) where \s decides the split
    for c in "\t\n\v\f\r \x1c\x85\xa0\u1680\u180e\u2000\u200a\u200b\u2028\u2029\u202f" \
             "\u205f\u2060\u3000\ufeff":
        fixed.append(f"a{c}{c}b x{c} y !{c}{c}! {c}\n{c}{c} .{c}")
    # random code points from well-established blocks (old enough that the Unicode versions of
    # Oniguruma, PCRE2 and utf8proc agree), mixed with combining marks and whitespace
    rng = random.Random(12345)
    blocks = [(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff),
              (0x5d0, 0x5ea), (0x620, 0x64a), (0x900, 0x97f), (0xe01, 0xe3a), (0x1100, 0x1112),
              (0x1161, 0x1175), (0x2000, 0x206f), (0x2190, 0x22ff), (0x3040, 0x30ff),
              (0x4e00, 0x9fa5), (0xac00, 0xd7a3), (0x1f300, 0x1f64f)]
    rand = []
    for _ in range(60000):
        lo, hi = rng.choice(blocks)
        rand.append(chr(rng.randint(lo, hi)))
        if rng.random() < 0.15:
            rand.append(rng.choice(" \n\t  "))
    fixed.append("".join(rand))
    return "\n\n".join(fixed)


def trained_llama3_style(corpus, workdir):
    """A small Llama-3-style byte-level BPE trained here, saved with "a b" merges."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
    tok.train_from_iterator([corpus[:400000]], trainer=trainer)
    path = os.path.join(workdir, "llama3-style.json")
    tok.save(path)
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    j["model"]["ignore_merges"] = True
    # whole words the merges do not build: with ignore_merges they must come out as one id
    # (Llama-3's vocabulary has such entries)
    next_id = max(j["model"]["vocab"].values()) + 1 + len(j["added_tokens"])
    for w in ["ĠJerusalem", "Ġbegat", "Ġwhatsoever", "Ġfirmament", "ĠNebuchadnezzar", "Ġlicense"]:
        if w not in j["model"]["vocab"]:
            j["model"]["vocab"][w] = next_id
            next_id += 1
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return Tokenizer.from_file(path), path


def run_ours(tok_path, inp, out, extra=()):
    cmd = [slidedp, "tokenize", "--tokenizer", tok_path, "--input", inp, "--output", out] + \
        list(extra)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p, time.perf_counter() - t0


def read_ids(path):
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(name, hf, tok_path, text, work, failures):
    inp = os.path.join(work, "in.txt")
    out = os.path.join(work, "out.txt")
    with open(inp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    nbytes = len(text.encode())
    t0 = time.perf_counter()
    ref = hf.encode(text, add_special_tokens=False).ids
    t_hf = time.perf_counter() - t0
    p, t_ours = run_ours(tok_path, inp, out, ["--format", "text", "--eos", "none"])
    if p.returncode != 0:
        print(f"  {name}: slidedp exited {p.returncode}\n{p.stderr}")
        failures.append(name)
        return
    ours = read_ids(out)
    m = re.search(r"([0-9.]+) MB/s", p.stderr)
    mbs = float(m.group(1)) if m else float("nan")
    ok = ours == ref
    print(f"  {name}: {nbytes / 1e6:.2f} MB, {len(ref)} ids from tokenizers, {len(ours)} from "
          f"slidedp: {'identical' if ok else 'DIFFERENT'}; throughput tokenizers "
          f"{nbytes / 1e6 / t_hf:.2f} MB/s, slidedp {mbs:.2f} MB/s encode "
          f"({nbytes / 1e6 / t_ours:.2f} MB/s with loading)")
    if name.endswith("real text"):
        # how tokenizers is usually driven: many short documents over all cores
        lines = text.split("\n")
        t0 = time.perf_counter()
        hf.encode_batch(lines, add_special_tokens=False)
        t_batch = time.perf_counter() - t0
        print(f"    tokenizers encode_batch over {len(lines)} lines, {os.cpu_count()} CPUs: "
              f"{nbytes / 1e6 / t_batch:.2f} MB/s (for scale; ids not compared)")
    if not ok:
        i = first_diff(ours, ref)
        lo = max(0, i - 5)
        print(f"    first difference at id {i}: slidedp {ours[lo:i + 6]} vs tokenizers "
              f"{ref[lo:i + 6]}")
        print(f"    tokenizers tokens: {[hf.id_to_token(x) for x in ref[lo:i + 6]]}")
        failures.append(name)


def check_jsonl_and_shard(hf, tok_path, eos_id, work, failures):
    docs = ["first document", "", "second\ndoc with <|endoftext|> inside", "é\u0301 🤗 日本"]
    lines = [json.dumps({"text": d, "id": i}) for i, d in enumerate(docs)]
    lines.insert(2, '{"text": "broken line", ')  # malformed: line 3
    lines.insert(4, "")  # blank line: ignored
    inp = os.path.join(work, "docs.jsonl")
    with open(inp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    ref = []
    for d in docs:
        ref += hf.encode(d, add_special_tokens=False).ids + [eos_id]

    out = os.path.join(work, "docs.txt")
    p, _ = run_ours(tok_path, inp, out, ["--format", "text"])
    stop_ok = p.returncode == 1 and "docs.jsonl:3" in p.stderr
    print(f"  jsonl --on-error stop: exit {p.returncode}, reports docs.jsonl:3: "
          f"{'yes' if 'docs.jsonl:3' in p.stderr else 'no'}")
    if not stop_ok:
        print(p.stderr)
        failures.append("jsonl stop")

    p, _ = run_ours(tok_path, inp, out, ["--format", "text", "--on-error", "skip"])
    ours = read_ids(out) if p.returncode == 0 else None
    print(f"  jsonl --on-error skip: exit {p.returncode}, {len(ref)} ids expected, "
          f"{'identical' if ours == ref else 'DIFFERENT'}")
    if ours != ref:
        print(p.stderr, ours, ref)
        failures.append("jsonl skip")

    shard = os.path.join(work, "docs.bin")
    p, _ = run_ours(tok_path, inp, shard, ["--on-error", "skip"])
    ok = False
    if p.returncode == 0:
        with open(shard, "rb") as f:
            data = f.read()
        magic, version, width, count, vocab, eos = struct.unpack("<8sIIQIi", data[:32])
        ids = list(struct.unpack(f"<{count}I", data[64:64 + 4 * count]))
        ok = (magic == b"SDPTOKEN" and width == 4 and ids == ref and eos == eos_id and
              vocab == hf.get_vocab_size(with_added_tokens=True))
        print(f"  shard: {count} ids, vocab {vocab} (tokenizers {hf.get_vocab_size(True)}), "
              f"eos {eos}: {'identical' if ok else 'DIFFERENT'}")
    if not ok:
        print(p.stderr)
        failures.append("shard")


def main():
    if not os.access(slidedp, os.X_OK):
        print(f"FAIL: {slidedp} is not an executable (set top_builddir or SLIDEDP)")
        return 1
    print(f"tokenizers {tokenizers.__version__}; slidedp: {slidedp}")
    corpus, source = real_text(1 << 20)
    crafted = crafted_text()
    print(f"real text: {source}, {len(corpus.encode()) / 1e6:.2f} MB; crafted text: "
          f"{len(crafted.encode()) / 1e6:.2f} MB")
    failures = []
    work = tempfile.mkdtemp(prefix="sdp-tok-")
    try:
        qwen_path = os.path.join(top_srcdir, "data/tokenizers/qwen3/tokenizer.json")
        gpt2_dir = os.path.join(top_srcdir, "data/tokenizers/gpt2")
        qwen = Tokenizer.from_file(qwen_path)
        gpt2 = Tokenizer(models.BPE.from_file(os.path.join(gpt2_dir, "vocab.json"),
                                              os.path.join(gpt2_dir, "merges.txt")))
        gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        gpt2.decoder = decoders.ByteLevel()
        gpt2.add_special_tokens(["<|endoftext|>"])
        llama, llama_path = trained_llama3_style(corpus, work)
        for name, hf, path in [("qwen3", qwen, qwen_path), ("gpt2", gpt2, gpt2_dir),
                               ("llama3-style", llama, llama_path)]:
            print(f"{name}:")
            compare(f"{name} real text", hf, path, corpus, work, failures)
            compare(f"{name} crafted text", hf, path, crafted, work, failures)
        print("qwen3 .jsonl input and shard output:")
        check_jsonl_and_shard(qwen, qwen_path, qwen.token_to_id("<|endoftext|>"), work,
                              failures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("failed: " + ", ".join(failures))
        print("FAIL")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
