#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the simulation build (docs/simulation.md): slidedp against the StarPU that
# `tools/setup-debian.sh --simgrid` builds with SimGrid (deps/starpu-simgrid), out of tree in
# build/sim, where `slidedp simulate` looks for it.  A source tree configured in place cannot host
# an out-of-tree build: the sources are then copied to build/sim-src first (tracked and untracked
# files, as git lists them).
# Usage: tools/build-sim.sh [STARPU_SIMGRID_PREFIX]   (default deps/starpu-simgrid)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:-$top/deps/starpu-simgrid}
if [ ! -f "$prefix/lib/pkgconfig/starpu-1.4.pc" ]; then
    echo "build-sim.sh: no StarPU in $prefix; run tools/setup-debian.sh --simgrid" >&2
    exit 1
fi
src=$top
if [ -f "$top/config.status" ]; then
    src=$top/build/sim-src
    rm -rf "$src"
    mkdir -p "$src"
    (cd "$top" && git ls-files -z --cached --others --exclude-standard |
        tar --null -T - -cf -) | tar -C "$src" -xf -
    [ -e "$src/deps" ] || ln -s "$top/deps" "$src/deps"
    rm -f "$top/build/sim/config.status"
fi
[ -x "$src/configure" ] || (cd "$src" && ./autogen.sh > /dev/null)
mkdir -p "$top/build/sim"
cd "$top/build/sim"
[ -f config.status ] || "$src/configure" --enable-werror --with-starpu="$prefix" > configure.log ||
    { tail -n 30 configure.log >&2; exit 1; }
make -j"$(nproc)" slidedp
echo "build-sim.sh: $top/build/sim/slidedp"
