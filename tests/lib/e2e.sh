# SPDX-License-Identifier: MIT
# shellcheck shell=sh disable=SC2034 # the variables are for the tests that source this file
# The preamble of the shell tests (tests/e2e/, tests/policies/), sourced after `set -u`:
#   top, build  the source and build directories, absolute (top_srcdir, top_builddir of make check)
#   bin, py     the slidedp program and the Python interpreter (PYTHON3)
#   tmp         a private directory, removed at exit
#   fail        0; a test sets it to 1 on a failed check, and ends with `finish`
# and the helpers below.  POSIX sh, no bashisms.
top=$(cd "${top_srcdir:-.}" && pwd)
build=$(cd "${top_builddir:-.}" && pwd)
bin=$build/slidedp
py=${PYTHON3:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$tmp.out" "$tmp.err"' EXIT
fail=0

# ngpus: the number of GPUs nvidia-smi lists (0 without it).
ngpus() {
    if command -v nvidia-smi > /dev/null 2>&1; then
        nvidia-smi -L 2> /dev/null | grep -c '^GPU'
    else
        echo 0
    fi
}

# need_gpus N: skip the test (exit 77) with fewer than N GPUs.
need_gpus() {
    _n=$(ngpus)
    if [ "$_n" -lt "$1" ]; then
        echo "$_n GPU(s), the test needs $1: SKIP"
        exit 77
    fi
}

# need_sim: skip the test (exit 77) without the simulation build; sets sim to its slidedp.
need_sim() {
    sim=${SDP_SIM_BINARY:-$top/build/sim/slidedp}
    if [ ! -x "$sim" ]; then
        echo "no simulation build at $sim (tools/setup-debian.sh --simgrid, tools/build-sim.sh): SKIP"
        exit 77
    fi
}

# need_mpi: skip the test (exit 77) when slidedp is built without StarPU-MPI; else set up this
# machine's OpenMPI for mpirun: as root in containers, more processes than cores, unbound.
need_mpi() {
    if ! grep -q '^#define SDP_HAVE_MPI 1' "$build/config.h" 2> /dev/null; then
        echo "slidedp built without StarPU-MPI (tools/setup-debian.sh builds it; ./configure finds it): SKIP"
        exit 77
    fi
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
    export OMPI_MCA_hwloc_base_binding_policy=none
}

# need_python MODULE...: skip the test (exit 77) when $py lacks one of the modules.
need_python() {
    _mods=$(echo "$*" | tr ' ' ',')
    if ! "$py" -c "import $_mods" > /dev/null 2>&1; then
        echo "$py lacks $* (see tools/setup-debian.sh): SKIP"
        exit 77
    fi
}

# micro_recipe: tests/e2e/data/micro-qwen3.yaml (2 layers, 4 steps, fp32) on stdout, its data
# path made absolute; tiny_recipe: the same of recipes/tiny-qwen3.yaml.  Edit with a sed after it.
micro_recipe() {
    sed -e "s#^  train: .*#  train: $top/data/kjv/val.tok#" "$top/tests/e2e/data/micro-qwen3.yaml"
}
tiny_recipe() {
    sed -e "s#\.\./data#$top/data#" "$top/recipes/tiny-qwen3.yaml"
}

# stop_at_line PID FILE N [TENTHS]: once FILE (a run's metrics) holds N lines, or after TENTHS
# tenths of a second (600), stop run PID by SIGUSR1 (a checkpoint at the step boundary) and wait
# for it; its exit status
stop_at_line() {
    _i=0
    while [ "$(cat "$2" 2> /dev/null | wc -l)" -lt "$3" ] && [ $_i -lt "${4:-600}" ]; do
        sleep 0.1
        _i=$((_i + 1))
    done
    kill -s USR1 "$1"
    wait "$1"
}

# split_machine OUT: this machine's calibration with the rates that price RoundPipe's split set to
# fixed figures (an LM head as cheap as the layers make it), so the tiny models' split has several
# stages on any machine and under any load
split_machine() {
    "$bin" calibrate -o "$tmp/calibrated.json" 2> "$tmp/calibrate.err" ||
        { echo "calibrate failed"; cat "$tmp/calibrate.err"; return 1; }
    "$py" - "$tmp/calibrated.json" "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m.update(cores=2, task_s=5e-6, task_submit_s=4e-6, dram_bps=3e10, cpu_gemm_flops=9e10,
         cpu_gemm_flops_all=1.8e11, cpu_attention_flops=2.7e10, cpu_head_flops=1.25e14,
         cpu_elem_bps=2.5e9, adamw_bps=[5e10, 5e10], adamw_workers=2, adamw_workers_bps=3.2e10,
         cast_bps=[4e10, 4e10])
for g in m["gemm"]:
    g["flops"] = 9e10
json.dump(m, open(sys.argv[2], "w"))
PY
}
# finish: print PASS or FAIL from $fail and exit with it.
# expect CODE PATTERN -- command...: the command exits CODE, a stderr line matches PATTERN (ERE),
# and nothing under $expect_dir (default $tmp) changes.  Its output goes beside $tmp ($tmp.out,
# $tmp.err), so that $tmp holds only what a case must not change.  expect_prepare, which a test
# may redefine, runs before each case.  Cases are numbered in $n; returns 0 when the case passed.
n=0
expect_dir=
expect_prepare() { :; }
expect_snapshot() {
    (cd "${expect_dir:-$tmp}" && find . -type d -print -o -type f -exec sha256sum {} + | sort)
}
expect() {
    _code=$1 _pat=$2
    shift 3
    n=$((n + 1))
    expect_prepare
    _before=$(expect_snapshot)
    "$@" > "$tmp.out" 2> "$tmp.err"
    _got=$?
    _after=$(expect_snapshot)
    if [ "$_got" != "$_code" ]; then
        echo "case $n: exit $_got, expected $_code: $*"; cat "$tmp.err"; fail=1
    elif ! grep -qE "$_pat" "$tmp.err"; then
        echo "case $n: stderr lacks /$_pat/: $*"; cat "$tmp.err"; fail=1
    elif [ "$_before" != "$_after" ]; then
        echo "case $n: files changed on disk: $*"; fail=1
    else
        echo "case $n: exit $_got, $(grep -E "$_pat" "$tmp.err" | head -n 1 | cut -c1-150)"
        return 0
    fi
    return 1
}

# lacks PATTERN: no stderr line of the last expect case matches PATTERN
lacks() {
    if grep -qE "$1" "$tmp.err"; then
        echo "case $n: stderr has /$1/:"; grep -E "$1" "$tmp.err"; fail=1
    fi
}

finish() {
    if [ "$fail" -eq 0 ]; then
        echo PASS
        exit 0
    fi
    echo FAIL
    exit 1
}
