#!/bin/sh
# Fetches RoundPipe's own code (github.com/ITcarrot/RoundPipe, LGPL-3.0; not part of this project)
# at the commit bench/peers.py --system roundpipe was written against, into DIR (default
# deps/roundpipe), with the packages it imports that a PyTorch host may lack (beartype, py-cpuinfo,
# tqdm, typing-extensions, and ninja, which builds its C++ Adam) in DIR/pydeps, where peers.py finds
# them after the host's own packages.  Run it
# where a package index is reachable, then copy DIR to a GPU host that has none; ROUNDPIPE_URL
# clones another copy of the repository (a mirror) instead of GitHub's.
#   bench/get-roundpipe.sh [DIR]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$top/deps/roundpipe}
commit=e813c67
py=${PYTHON3:-python3}
[ -d "$dir/.git" ] || git clone -q "${ROUNDPIPE_URL:-https://github.com/ITcarrot/RoundPipe}" "$dir"
git -C "$dir" checkout -q "$commit"
"$py" -m pip install -q --upgrade --target "$dir/pydeps" beartype py-cpuinfo ninja tqdm typing-extensions
echo "RoundPipe $(git -C "$dir" rev-parse --short=7 HEAD) in $dir, its packages in $dir/pydeps"
