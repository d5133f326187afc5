#!/usr/bin/env bash
# Builds SlideDP with CUDA out of tree and gathers a relocatable bundle for a GPU host that has the CUDA
# toolkit's libraries but no package index: the slidedp binary, the test programs, and the shared
# libraries a minimal host may lack (jansson, libyaml, utf8proc, PCRE2, hwloc; OpenBLAS and the CUDA
# libraries are expected on the host).
# Run `tools/setup-debian.sh` first.  Usage: tools/gpu-bundle.sh [BUNDLE_DIR]   (default build-gpu)
# On the GPU host, from the source tree:  LD_LIBRARY_PATH=build-gpu/lib build-gpu/slidedp ...
#   tools/gpu-bundle.sh --base REV [BUNDLE_DIR]   (default build-gpu-base)
# bundles only slidedp and the libraries of commit REV, built in a clone of it (build/base-REV), for
# a before/after comparison in one run: bench/run-gpu.sh's TARGETS word BUNDLE=build-gpu-base.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
base=""
if [ "${1:-}" = --base ]; then
    base=${2:?usage: tools/gpu-bundle.sh --base REV [BUNDLE_DIR]}
    shift 2
fi
libs() { # the shared libraries a minimal host may lack, and StarPU's without its debug sections
    local lib path starpu_lib
    for lib in libjansson.so.4 libyaml-0.so.2 libutf8proc.so.2 libpcre2-8.so.0 libhwloc.so.15; do
        path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !f { print $NF; f = 1 }')
        [ -n "$path" ] && cp -L "$path" "$1/lib/"
    done
    starpu_lib=$(ls "$top"/deps/starpu/lib/libstarpu-1.4.so.* 2> /dev/null | sort | tail -n 1)
    if [ -n "$starpu_lib" ]; then
        cp -L "$starpu_lib" "$1/lib/libstarpu-1.4.so.9"
        strip --strip-debug "$1/lib/libstarpu-1.4.so.9"
    fi
}
if [ -n "$base" ]; then
    rev=$(git -C "$top" rev-parse --verify "$base^{commit}")
    out=${1:-$top/build-gpu-base}
    src=$top/build/base-${rev:0:12}
    [ -d "$src/.git" ] || git clone -q "$top" "$src"
    git -C "$src" checkout -q "$rev"
    [ -e "$src/deps" ] || ln -s "$top/deps" "$src/deps"
    mkdir -p "$src/build/cuda" "$out/lib"
    if [ ! -x "$src/configure" ]; then (cd "$src" && ./autogen.sh > /dev/null); fi
    cd "$src/build/cuda"
    [ -f Makefile ] || ../../configure --enable-werror --with-cuda --without-mpi > configure.log
    make -j"$(nproc)" slidedp > make.log
    cp slidedp "$out/"
    strip --strip-debug "$out/slidedp"
    echo "$rev" > "$out/BUILD_INFO"
    libs "$out"
    du -sh "$out"
    exit 0
fi
out=${1:-$top/build-gpu}
obj=$top/build/cuda
mkdir -p "$obj" "$out/lib"
cd "$obj"
[ -f Makefile ] || "$top/configure" --enable-werror --with-cuda --without-mpi > configure.log
make -j"$(nproc)" > make.log
make -j"$(nproc)" check TESTS= > make-check.log
make -j"$(nproc)" bench/host_adamw >> make.log
cp slidedp "$out/"
mkdir -p "$out/tests"
for t in tests/*/test_*; do
    case "$t" in *.o|*.log|*.trs) continue ;; esac
    [ -x "$t" ] && [ -f "$t" ] && { mkdir -p "$out/$(dirname "$t")"; cp "$t" "$out/$t"; }
done
# the bundle's programs without their debug sections (the build tree keeps them): a smaller copy
find "$out" -type f -perm -u+x ! -name '*.so*' -exec strip --strip-debug {} +
# what was built: the commit, and whether the tree had changes on top of it
{ git -C "$top" rev-parse HEAD; git -C "$top" status --short | sed 's/^/changed: /'; } > "$out/BUILD_INFO"
mkdir -p "$out/bench"
cp bench/host_adamw "$out/bench/"
# with StarPU itself, stripped (a seventh of its size): the bundle then needs no deps/starpu there
libs "$out"
du -sh "$out"
