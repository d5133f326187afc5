#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Sanitizer stages of continuous integration, each an out-of-tree CPU-only build:
#   asan  build/asan, --enable-sanitizers=address,undefined: `make check` with every test but
#         tests/e2e/test_e2e_train_tiny.sh (4 minutes of training under ASan; the plain build's
#         `make check` covers it), leaks checked with tests/sanitizers/lsan.supp;
#   tsan  build/tsan, --enable-sanitizers=thread: the tests that run StarPU with several workers,
#         tests/e2e/test_e2e_policies.sh, tests/e2e/test_e2e_hf_parity and
#         tests/policies/test_policies_stale.sh (two ranks under sdp-slidedp), with
#         tests/sanitizers/tsan.supp.
# Usage: tools/ci-sanitizers.sh [asan] [tsan]      (no argument: both)
# Run it after ./autogen.sh and before an in-tree ./configure: automake refuses out-of-tree builds
# of a source tree that is itself configured.  CC (default clang) picks the compiler.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
stages=${*:-asan tsan}
jobs=$(nproc)
export CC=${CC:-clang}

if [ -f "$top/config.status" ]; then
    echo "ci-sanitizers.sh: the source tree is configured in place; run this before ./configure" \
        "(or after make distclean)" >&2
    exit 2
fi
if [ ! -x "$top/configure" ]; then
    (cd "$top" && ./autogen.sh)
fi

# configure_build DIR SANITIZERS: configure (once) and build DIR with the sanitizers.
configure_build()
{
    local dir=$top/build/$1
    mkdir -p "$dir"
    if [ ! -f "$dir/config.status" ]; then
        # without MPI: OpenMPI's libraries keep allocations LeakSanitizer reports at exit, from
        # their dlopen'ed components (no frame to suppress by name); the node tests skip here and
        # run in the plain build's `make check`
        (cd "$dir" && "$top/configure" --without-cuda --without-mpi --enable-werror \
            --enable-sanitizers="$2" CC="$CC")
    fi
    make -C "$dir" -j"$jobs"
}

# run_check DIR TEST...: `make check` of the given tests in DIR, with the log of every failure.
run_check()
{
    local dir=$top/build/$1
    shift
    echo "tests run:"
    printf '  %s\n' "$@"
    if ! make -C "$dir" -j"$jobs" check TESTS="$*"; then
        cat "$dir/test-suite.log" || true
        return 1
    fi
    grep -E '^# (TOTAL|PASS|SKIP|XFAIL|FAIL|XPASS|ERROR)' "$dir/test-suite.log"
}

# Tests of the build in DIR: automake's TESTS variable, read from its Makefile.
tests_of()
{
    # shellcheck disable=SC2016 # $(TESTS) is for make, not the shell
    printf 'ci-print-tests:\n\t@echo $(TESTS)\n' |
        make -s -C "$top/build/$1" -f Makefile -f - ci-print-tests
}

for stage in $stages; do
    start=$(date +%s)
    case "$stage" in
    asan)
        echo "== sanitizers: address,undefined (build/asan)"
        configure_build asan address,undefined
        export ASAN_OPTIONS=halt_on_error=1:print_stacktrace=1:detect_leaks=1:abort_on_error=0
        export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
        export LSAN_OPTIONS=suppressions=$top/tests/sanitizers/lsan.supp:print_suppressions=0
        # hwloc's plugins (Debian's libhwloc-plugins, which OpenMPI brings) are dlopen'ed and
        # closed again: LeakSanitizer then reports their allocations from an unknown module, which
        # no suppression can name; the topology StarPU needs comes without them
        export HWLOC_PLUGINS_BLACKLIST=hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml
        # The 4-minute training run is left to the plain build's `make check`.
        mapfile -t tests < <(tests_of asan | tr ' ' '\n' | grep -E '^tests/' |
            grep -v -x tests/e2e/test_e2e_train_tiny.sh)
        run_check asan "${tests[@]}"
        unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS HWLOC_PLUGINS_BLACKLIST
        ;;
    tsan)
        echo "== sanitizers: thread (build/tsan)"
        configure_build tsan thread
        # StarPU binds workers to cores by default; unbound, the runs do not depend on the machine.
        export STARPU_WORKERS_NOBIND=1
        TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
        export TSAN_OPTIONS=$TSAN_OPTIONS:suppressions=$top/tests/sanitizers/tsan.supp
        run_check tsan tests/e2e/test_e2e_policies.sh tests/e2e/test_e2e_hf_parity \
            tests/policies/test_policies_stale.sh
        unset STARPU_WORKERS_NOBIND TSAN_OPTIONS
        ;;
    *)
        echo "ci-sanitizers.sh: unknown stage '$stage' (asan, tsan)" >&2
        exit 2
        ;;
    esac
    echo "== $stage: $(($(date +%s) - start)) s"
done
