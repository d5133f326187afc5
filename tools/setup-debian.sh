#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs everything SlideDP needs on a Debian (bookworm or later) or Ubuntu machine:
#   1. Debian packages (compiler, autotools, hwloc, OpenBLAS, jansson, libyaml, PCRE2, utf8proc,
#      Python, clang-format, gnuplot, Slurm and munge for the Slurm test: their daemons are left
#      disabled at boot and stopped, since the test starts private ones of its own; OpenMPI for
#      several nodes),
#   2. a Python virtual environment with the reference packages (torch CPU, transformers, tokenizers),
#      and with nvcc present the headers of cuDNN's C++ frontend (for the fused attention),
#   3. StarPU 1.4.10 built from Debian's source tarball (with CUDA when nvcc is present, and with
#      StarPU-MPI: libstarpumpi, for training over several nodes, docs/nodes.md),
#   4. with --simgrid, SimGrid (Debian's libsimgrid-dev) and StarPU built a second time with it, in
#      PREFIX/starpu-simgrid, for the simulation build (tools/build-sim.sh, docs/simulation.md),
# into a prefix that is reused when it is already built.  Idempotent: running it twice is cheap.
#
# Usage: tools/setup-debian.sh [--prefix DIR] [--no-apt] [--no-python] [--no-starpu] [--without-cuda]
#                              [--simgrid]
# Default prefix: ./deps inside the source tree (git-ignored).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
prefix="$here/deps"
do_apt=1
do_python=1
do_starpu=1
with_cuda=auto
do_simgrid=0

usage()
{
    sed -n '3,16p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --no-apt) do_apt=0; shift ;;
    --no-python) do_python=0; shift ;;
    --no-starpu) do_starpu=0; shift ;;
    --without-cuda) with_cuda=no; shift ;;
    --simgrid) do_simgrid=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup-debian.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

say() { printf '[setup] %s\n' "$*" >&2; }

# ---- 1. Debian packages ----
apt_pkgs=(build-essential autoconf automake libtool pkg-config curl ca-certificates
          libhwloc-dev libopenblas-dev libjansson-dev libyaml-dev libpcre2-dev libutf8proc-dev
          python3 python3-venv python3-pip clang-format slurm-wlm munge gnuplot-nox
          clang libclang-rt-14-dev openmpi-bin libopenmpi-dev)
if [ "$do_simgrid" = 1 ]; then apt_pkgs+=(libsimgrid-dev); fi
if [ "$do_apt" = 1 ]; then
    missing=()
    for p in "${apt_pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        sudo=""
        [ "$(id -u)" = 0 ] || sudo=sudo
        say "installing Debian packages: ${missing[*]}"
        # slurm-wlm and munge are for the Slurm test, which runs daemons of its own: leave theirs
        # disabled and stopped (Debian enables and starts them on install)
        $sudo "$here/tools/apt-install-no-services.sh" "${missing[@]}"
    else
        say "Debian packages already installed"
    fi
fi

# ---- 2. Python reference environment ----
if [ "$with_cuda" = auto ]; then
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then with_cuda=yes; else with_cuda=no; fi
fi
venv="$prefix/venv"
if [ "$do_python" = 1 ]; then
    if [ ! -x "$venv/bin/python" ]; then
        say "creating Python environment $venv"
        python3 -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c 'import torch, transformers, tokenizers, safetensors, numpy, peft' 2>/dev/null; then
        say "installing torch, transformers, tokenizers (PyPI) into $venv"
        "$venv/bin/pip" install -q --upgrade pip
        "$venv/bin/pip" install -q -r "$here/tools/requirements.txt"
    else
        say "Python reference packages already installed"
    fi
    # cuDNN's header-only C++ frontend for the fused attention of CUDA builds (configure looks for
    # it in this environment); only its headers are used, so none of its Python dependencies
    if [ "$with_cuda" = yes ] && [ ! -f "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/include/cudnn_frontend.h" ]; then
        say "installing cudnn_frontend's headers (PyPI nvidia-cudnn-frontend) into $venv"
        "$venv/bin/pip" install -q --no-deps "nvidia-cudnn-frontend==1.32.0"
    fi
fi

# ---- 3. StarPU 1.4.10 from Debian's source package (4. and again with SimGrid) ----
starpu_ver=1.4.10
starpu_tar="starpu_${starpu_ver}+dfsg.orig.tar.gz"
starpu_sha=6b3bb9ec0d79f937882148b2da09ae6cb0ad4d1e83a104be45723dd70eba99c3
starpu_prefix="$prefix/starpu"
src="$prefix/src"
sdir=""

# starpu_source: download (or reuse) and verify the tarball, unpack and patch it once into $sdir
starpu_source()
{
    [ -n "$sdir" ] && return 0
    mkdir -p "$src"
    if [ ! -f "$src/$starpu_tar" ] || ! echo "$starpu_sha  $src/$starpu_tar" | sha256sum -c --quiet 2>/dev/null; then
        rm -f "$src/$starpu_tar"
        for url in "http://deb.debian.org/debian/pool/main/s/starpu/$starpu_tar" \
                   "https://snapshot.debian.org/archive/debian/20250601T000000Z/pool/main/s/starpu/$starpu_tar"; do
            say "downloading $url"
            if curl -fsSL --retry 3 -o "$src/$starpu_tar.part" "$url"; then
                mv "$src/$starpu_tar.part" "$src/$starpu_tar"
                break
            fi
        done
        if [ ! -f "$src/$starpu_tar" ]; then
            echo "setup-debian.sh: could not download $starpu_tar from Debian's archive." >&2
            echo "hint: place the file in $src/ by hand (sha256 $starpu_sha) and run again." >&2
            exit 1
        fi
    fi
    if ! echo "$starpu_sha  $src/$starpu_tar" | sha256sum -c --quiet; then
        echo "setup-debian.sh: $src/$starpu_tar has the wrong sha256 (expected $starpu_sha)." >&2
        echo "hint: the archive moved on; delete the file and pin another version in this script." >&2
        exit 1
    fi
    rm -rf "$src/starpu-$starpu_ver"
    tar -C "$src" -xzf "$src/$starpu_tar"
    sdir=$(ls -d "$src"/starpu-"$starpu_ver"* | head -n 1)
    # CUDA 13 removed cudaDeviceProp::computeMode; query the attribute instead.
    patch -d "$sdir" -p1 --forward --silent < "$here/tools/patches/starpu-1.4.10-cuda13-computemode.patch"
}

# build_starpu PREFIX LABEL CONFIGURE_OPTIONS...: StarPU into PREFIX unless built there with LABEL
build_starpu()
{
    local into=$1 label=$2 bdir
    shift 2
    local stamp="$into/.slidedp-build-$starpu_ver-$label"
    if [ -f "$stamp" ] && [ -f "$into/lib/pkgconfig/starpu-1.4.pc" ]; then
        say "StarPU $starpu_ver ($label) already built in $into"
        return 0
    fi
    starpu_source
    local cfg=(--prefix="$into" --enable-maxcpus=128 --enable-maxcudadev=8 --enable-maxnumanodes=8
               --disable-opencl --disable-fortran --disable-build-doc --disable-build-examples
               --disable-build-tests --disable-mpi --disable-socl --disable-starpufft --disable-starpupy
               --disable-static --disable-hdf5 --disable-fxt "$@")
    bdir="$src/build-starpu-$label"
    rm -rf "$bdir"
    mkdir -p "$bdir"
    say "configuring StarPU $starpu_ver ($label) into $into"
    (cd "$bdir" && "$sdir/configure" "${cfg[@]}" > configure.log 2>&1) ||
        { tail -n 40 "$bdir/configure.log" >&2; echo "setup-debian.sh: StarPU configure failed (log: $bdir/configure.log)" >&2; exit 1; }
    say "building StarPU ($label; a few minutes on two cores)"
    (cd "$bdir" && make -j"$(nproc)" > make.log 2>&1 && make install > install.log 2>&1) ||
        { tail -n 40 "$bdir/make.log" >&2; echo "setup-debian.sh: StarPU build failed (log: $bdir/make.log)" >&2; exit 1; }
    rm -f "$into"/.slidedp-build-*
    touch "$stamp"
    say "StarPU ($label) installed in $into"
}

if [ "$do_starpu" = 1 ]; then
    if [ "$with_cuda" = yes ]; then
        cudadir=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
        build_starpu "$starpu_prefix" cuda-yes-mpi --enable-cuda --with-cuda-dir="$cudadir" --enable-mpi
    else
        build_starpu "$starpu_prefix" cuda-no-mpi --disable-cuda --enable-mpi
    fi
    # the simulation build's: the GPUs simulated, so no CUDA (StarPU refuses both at once)
    if [ "$do_simgrid" = 1 ]; then
        build_starpu "$prefix/starpu-simgrid" simgrid --enable-simgrid --disable-cuda
    fi
fi

cat >&2 <<EOM
[setup] done.  Configure SlideDP with:
[setup]   PKG_CONFIG_PATH=$starpu_prefix/lib/pkgconfig ./configure
[setup] (./configure finds ./deps/starpu by itself when the default prefix was used)
EOM
if [ "$do_simgrid" = 1 ]; then
    say "the simulation build: tools/build-sim.sh"
fi
