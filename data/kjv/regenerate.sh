#!/bin/sh
# SPDX-License-Identifier: MIT
# Regenerate data/kjv/train.tok and data/kjv/val.tok from the Debian package bible-kjv.
# Needs: the `bible` program (apt-get install bible-kjv) and a python3 with `tokenizers`
# (override with PYTHON=...). Run from anywhere; writes into data/kjv/.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
PYTHON=${PYTHON:-python3}
command -v bible >/dev/null 2>&1 || { echo "regenerate.sh: 'bible' not found (apt-get install bible-kjv)" >&2; exit 1; }

# Train: Genesis .. 2 Samuel (10 books). Validation: Ezra + Nehemiah (the last 2 documents).
{ bible -f "Gen1:1-2Sam24:25"; bible -f "Ezra1:1-Neh13:31"; } |
    "$PYTHON" tools/make_token_data.py --format bible \
        --tokenizer data/tokenizers/qwen3/tokenizer.json \
        --output data/kjv/train.tok --val-output data/kjv/val.tok --val-fraction 0.05
sha256sum data/kjv/train.tok data/kjv/val.tok
