#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Make an instruction data set (JSONL) from the Jargon File in dictd format.

Every entry of the dictionary becomes one line
  {"prompt": "What does the hacker term \\"X\\" mean?", "response": "<definition>"}
for `slidedp tokenize --format chat`.  The definition is cleaned: the headword and the
pronunciation / part-of-speech line are dropped, wrapped lines are joined, the {cross-reference}
braces are removed, paragraphs stay separated by a blank line, and a definition longer than
--max-chars is cut at the last paragraph (else sentence) end before that length.  The dictd
metadata entries (00-database-*) and definitions shorter than --min-chars are left out; aliases
sharing one entry give one example.

The source is the Debian package dict-jargon (The Jargon File 4.4.7, public domain):
  /usr/share/dictd/jargon.index   headword TAB offset TAB length (dictd base64 numbers)
  /usr/share/dictd/jargon.dict.dz the entries, gzip (dictzip) compressed

Example:
  tools/make_jargon_sft.py --output data/jargon/jargon-sft.jsonl
"""

import argparse
import gzip
import json
import os
import re
import sys

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64(s):
    v = 0
    for c in s:
        v = v * 64 + B64.index(c)
    return v


def clean(entry):
    """Headword and definition text of one dictd entry."""
    lines = entry.split("\n")
    head = lines[0].strip()
    # line 2 is the pronunciation and part of speech (" /@·breev'/, n."); the text starts after
    # the first blank line
    try:
        body = lines[lines.index("", 1):]
    except ValueError:
        return head, ""
    paras, cur = [], []
    for line in body:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    out = []
    for p in paras:
        p = re.sub(r"\{\s*([^{}]*?)\s*\}", r"\1", p)
        p = re.sub(r"\s+", " ", p).strip()
        if p:
            out.append(p)
    return head, "\n\n".join(out)


def cut(text, max_chars):
    if len(text) <= max_chars:
        return text
    k = text.rfind("\n\n", 0, max_chars)
    if k > max_chars // 3:
        return text[:k]
    k = max(text.rfind(". ", 0, max_chars), text.rfind("? ", 0, max_chars),
            text.rfind("! ", 0, max_chars))
    if k > 0:
        return text[:k + 1]
    return text[:max_chars].rsplit(" ", 1)[0] + " ..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dict-dir", default="/usr/share/dictd")
    ap.add_argument("--output", required=True)
    ap.add_argument("--max-chars", type=int, default=1200)
    ap.add_argument("--min-chars", type=int, default=20)
    a = ap.parse_args()

    index = os.path.join(a.dict_dir, "jargon.index")
    data_path = os.path.join(a.dict_dir, "jargon.dict.dz")
    if not os.path.exists(index) or not os.path.exists(data_path):
        sys.exit("%s/jargon.{index,dict.dz} not found: apt-get install dict-jargon" % a.dict_dir)
    with gzip.open(data_path) as f:
        data = f.read()
    seen, n, nbytes, ncut = set(), 0, 0, 0
    tmp = a.output + ".tmp"
    with open(index, encoding="utf-8") as idx, open(tmp, "w", encoding="utf-8") as out:
        for line in idx:
            word, off, length = line.rstrip("\n").split("\t")
            off, length = b64(off), b64(length)
            if word.startswith("00-database") or off in seen:
                continue
            seen.add(off)
            head, text = clean(data[off:off + length].decode("utf-8"))
            if len(text) < a.min_chars:
                continue
            short = cut(text, a.max_chars)
            ncut += short != text
            rec = {"prompt": "What does the hacker term \"%s\" mean?" % head, "response": short}
            s = json.dumps(rec, ensure_ascii=False) + "\n"
            out.write(s)
            n += 1
            nbytes += len(s.encode("utf-8"))
    os.replace(tmp, a.output)
    print("%s: %d examples (%d cut to %d characters), %d bytes" % (a.output, n, ncut,
                                                                   a.max_chars, nbytes))


if __name__ == "__main__":
    main()
