#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tokenize a text file into token shards (the format of formats/shard.h).

The text is split into documents, each document is tokenized with a Hugging Face
`tokenizers` tokenizer.json, and the end-of-document id is appended after every
document. The last documents can go to a separate validation shard.

Input formats (--format):
  bible  the verse-per-line output of `bible -f` ("Ge1:1 In the beginning ..."):
         one document per book; the verse references are removed, verses are
         joined with newlines and chapters separated by a blank line
  plain  documents separated by one or more blank lines
  lines  every non-empty line is a document

Shard layout (little-endian): 64-byte header = magic "SDPTOKEN", uint32 version 1,
uint32 bytes per token 4, uint64 token count, uint32 vocab size, int32 eos id,
32 zero bytes; then uint32 token ids. Files are written to a temporary file in the
destination directory, fsync'ed and renamed into place.

Example:
  bible -f "Gen1:1-Deu34:12" | tools/make_token_data.py --format bible \\
      --output train.tok --val-output val.tok --val-fraction 0.1
"""

import argparse
import os
import re
import struct
import sys
import tempfile

MAGIC = b"SDPTOKEN"
VERSION = 1
BYTES_PER_TOKEN = 4
HEADER_SIZE = 64
DEFAULT_TOKENIZER = os.path.join("data", "tokenizers", "qwen3", "tokenizer.json")
DEFAULT_EOS = "<|endoftext|>"

# "Ge1:1 text", "1Sm3:4 text", "SSol1:1 text": book, chapter, verse, text.
VERSE_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) ?(.*)$")


def die(msg):
    print("make_token_data: error: " + msg, file=sys.stderr)
    sys.exit(1)


def split_bible(text):
    """Return [(name, document text)], one per book, in input order."""
    docs = []  # [name, [chapters], current chapter number]
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        m = VERSE_RE.match(line)
        if m is None:
            # A wrapped verse (output with a narrow line width): continue the last verse.
            if not docs:
                die("line %d: expected a verse reference like 'Ge1:1', got %r"
                    % (lineno, line[:40]))
            docs[-1][1][-1][-1] += " " + line.strip()
            continue
        book, chapter, text_ = m.group(1), int(m.group(2)), m.group(4)
        if not docs or docs[-1][0] != book:
            if any(d[0] == book for d in docs):
                die("line %d: book %s appears twice (not contiguous)" % (lineno, book))
            docs.append([book, [], None])
        d = docs[-1]
        if d[2] != chapter:
            d[1].append([])
            d[2] = chapter
        d[1][-1].append(text_)
    return [(d[0], "\n\n".join("\n".join(ch) for ch in d[1]) + "\n") for d in docs]


def split_plain(text):
    parts = re.split(r"\n[ \t]*\n(?:[ \t]*\n)*", text)
    return [("doc%d" % i, p.strip("\n") + "\n") for i, p in enumerate(parts) if p.strip()]


def split_lines(text):
    lines = [ln for ln in text.split("\n") if ln.strip()]
    return [("line%d" % i, ln) for i, ln in enumerate(lines)]


def write_shard(path, ids, vocab_size, eos_id):
    """Write ids (a list of ints) atomically: tmp file, fsync, rename, directory fsync."""
    count = len(ids)
    header = struct.pack("<8sIIQIi32x", MAGIC, VERSION, BYTES_PER_TOKEN, count,
                         vocab_size, eos_id)
    assert len(header) == HEADER_SIZE
    body = struct.pack("<%dI" % count, *ids)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_shard(path):
    """Return (ids, vocab_size, eos_id) of a shard, validating the header."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_SIZE:
        die("%s: %d bytes, shorter than the %d-byte header" % (path, len(data), HEADER_SIZE))
    magic, ver, width, count, vocab, eos = struct.unpack_from("<8sIIQIi", data)
    if magic != MAGIC or ver != VERSION or width != BYTES_PER_TOKEN:
        die("%s: bad header (magic %r, version %d, width %d)" % (path, magic, ver, width))
    if len(data) != HEADER_SIZE + count * width:
        die("%s: count %d does not match file size %d" % (path, count, len(data)))
    return list(struct.unpack_from("<%dI" % count, data, HEADER_SIZE)), vocab, eos


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, help="tokenizer.json (default %(default)s)")
    ap.add_argument("--input", default="-", help="text file, '-' = stdin (default)")
    ap.add_argument("--format", choices=("bible", "plain", "lines"), default="plain")
    ap.add_argument("--output", required=True, help="train shard path")
    ap.add_argument("--val-output", help="validation shard path (needs --val-fraction)")
    ap.add_argument("--val-fraction", type=float, default=0.0,
                    help="the smallest run of LAST documents holding at least this fraction of "
                         "the text bytes goes to --val-output (at least one document)")
    ap.add_argument("--max-bytes", type=int, default=0,
                    help="read at most this many bytes of input text, cut at a line boundary "
                         "(0 = all)")
    ap.add_argument("--eos-token", default=DEFAULT_EOS, help="appended after each document")
    args = ap.parse_args()

    try:
        from tokenizers import Tokenizer
    except ImportError:
        die("the Python package 'tokenizers' is required (pip install tokenizers)")

    if args.val_output and not 0.0 < args.val_fraction < 1.0:
        die("--val-output needs --val-fraction in (0, 1), got %g" % args.val_fraction)
    if args.val_fraction and not args.val_output:
        die("--val-fraction needs --val-output")

    if args.input == "-":
        raw = sys.stdin.buffer.read()
    else:
        with open(args.input, "rb") as f:
            raw = f.read()
    if args.max_bytes > 0 and len(raw) > args.max_bytes:
        cut = raw.rfind(b"\n", 0, args.max_bytes)
        raw = raw[:cut + 1 if cut >= 0 else args.max_bytes]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        die("%s: not UTF-8 (%s)" % (args.input, e))
    text = text.replace("\r\n", "\n")

    docs = {"bible": split_bible, "plain": split_plain, "lines": split_lines}[args.format](text)
    if not docs:
        die("%s: no documents found" % args.input)

    tok = Tokenizer.from_file(args.tokenizer)
    vocab_size = len(tok.get_vocab())  # includes the added (special) tokens
    eos_id = tok.token_to_id(args.eos_token)
    if eos_id is None:
        die("%s: no token %r" % (args.tokenizer, args.eos_token))

    nval = 0
    if args.val_output:
        if len(docs) < 2:
            die("need at least 2 documents to split off validation, found %d" % len(docs))
        total = sum(len(d[1].encode()) for d in docs)
        acc = 0
        while nval < len(docs) - 1:
            nval += 1
            acc += len(docs[-nval][1].encode())
            if acc >= args.val_fraction * total:
                break

    enc = tok.encode_batch([d[1] for d in docs], add_special_tokens=False)
    parts = [("train", args.output, docs[:len(docs) - nval], enc[:len(docs) - nval])]
    if nval:
        parts.append(("val", args.val_output, docs[len(docs) - nval:], enc[len(docs) - nval:]))
    for split, path, pdocs, penc in parts:
        ids = []
        for e in penc:
            ids.extend(e.ids)
            ids.append(eos_id)
        bad = [i for i in ids if i >= vocab_size]
        if bad:
            die("token id %d >= vocab size %d" % (bad[0], vocab_size))
        write_shard(path, ids, vocab_size, eos_id)
        back, _, _ = read_shard(path)
        if back != ids:
            die("%s: read-back mismatch" % path)
        nbytes = sum(len(d[1].encode()) for d in pdocs)
        print("%s: %s: %d documents, %d text bytes, %d tokens (%.2f bytes/token), "
              "vocab %d, eos %d" % (split, path, len(pdocs), nbytes, len(ids),
                                    nbytes / max(1, len(ids)), vocab_size, eos_id))
        print("  documents: " + " ".join("%s(%d)" % (d[0], len(e.ids) + 1)
                                         for d, e in zip(pdocs, penc)))


if __name__ == "__main__":
    main()
