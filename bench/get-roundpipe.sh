#!/bin/sh
# Fetches RoundPipe's own code (github.com/ITcarrot/RoundPipe, LGPL-3.0; not part of this project)
# at the commit bench/peers.py --system roundpipe was written against, into DIR (default
# deps/roundpipe), with the pure-Python packages it imports that a PyTorch host may lack (beartype,
# py-cpuinfo, and ninja, which builds its C++ Adam) in DIR/pydeps, where peers.py finds them.  Run it
# where GitHub and a package index are reachable, then copy DIR to a GPU host that has neither.
#   bench/get-roundpipe.sh [DIR]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$top/deps/roundpipe}
commit=e813c67
py=${PYTHON3:-python3}
[ -d "$dir/.git" ] || git clone -q https://github.com/ITcarrot/RoundPipe "$dir"
git -C "$dir" checkout -q "$commit"
"$py" -m pip install -q --target "$dir/pydeps" beartype py-cpuinfo ninja
echo "RoundPipe $(git -C "$dir" rev-parse --short=7 HEAD) in $dir, its packages in $dir/pydeps"
