#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets of tests/fuzz/ (one per parser) with clang and
# -fsanitize=fuzzer,address,undefined, then runs each for SECONDS (default 60) on a copy of its
# seed corpus (tests/fuzz/corpus/<target>/) and prints a table of executions, time and crashes.
#
# Usage: tools/fuzz.sh [SECONDS] [TARGET...]      (`make fuzz` runs it; FUZZ_SECONDS=N to change)
# Environment: FUZZ_CC (default clang), FUZZ_DIR (default build/fuzz in the source tree),
#   FUZZ_TMPDIR (the targets' scratch files; default /dev/shm), FUZZ_ARGS (more libFuzzer options).
#   Crash inputs of the last run are kept in FUZZ_DIR/artifacts/<target>/:
#   fix the parser, then add the input under tests/fuzz/regressions/<target>/ for `make check`.
# Exit status: 0 when no target crashed, 1 otherwise, 2 when the build failed.
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[ $# -gt 0 ] && shift
case "$seconds" in
'' | *[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac
cc=${FUZZ_CC:-clang}
out=${FUZZ_DIR:-$top/build/fuzz}
all_targets="safetensors hfconfig recipe tokenizer shard ckpt"
targets=${*:-$all_targets}

# The project sources each target needs, besides tests/fuzz/fuzz_<target>.c and fuzz_log.c.
sources_of()
{
    case "$1" in
    safetensors) echo formats/safetensors.c formats/safetensors_write.c base/fsutil.c ;;
    hfconfig) echo formats/hfconfig.c formats/hfconfig_moe.c models/qwen3.c models/moe.c \
        models/rope.c base/fsutil.c ;;
    recipe) echo cli/recipe.c cli/recipe_check.c cli/recipe_plan.c cli/recipe_lora.c cli/options.c \
        models/qwen3.c models/moe.c models/rope.c models/lora.c ;;
    tokenizer) echo text/tokenizer.c text/tokenizer_encode.c text/bpe.c ;;
    shard) echo formats/shard.c base/fsutil.c ;;
    ckpt) echo formats/ckpt_header.c formats/ckpt_read.c base/crc32c.c models/qwen3.c models/moe.c \
        models/rope.c models/lora.c ;;
    *) return 1 ;;
    esac
}

if ! command -v "$cc" > /dev/null; then
    echo "fuzz.sh: no $cc; install clang and its runtime (tools/setup-debian.sh does)" >&2
    exit 2
fi
mkdir -p "$out"
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);\n%s\n' \
    'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return (int)(d && n); }' \
    > "$out/probe.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined -o "$out/probe" "$out/probe.c" \
    2> "$out/probe.log"; then
    cat "$out/probe.log" >&2
    echo "fuzz.sh: $cc cannot link -fsanitize=fuzzer (Debian: libclang-rt-14-dev)" >&2
    exit 2
fi
# The parsers need no configure results: an empty config.h stands in for autoconf's.
echo '/* config.h for the fuzz builds (tools/fuzz.sh): the parsers need no configure results. */' \
    > "$out/config.h"

export PKG_CONFIG_PATH="$top/deps/starpu/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
libs_of()
{
    case "$1" in
    safetensors | hfconfig | ckpt) pkg-config --cflags --libs jansson ;;
    recipe) pkg-config --cflags --libs yaml-0.1 ;;
    tokenizer) pkg-config --cflags --libs jansson libutf8proc libpcre2-8 ;;
    shard) ;;
    esac
}

cflags="-std=gnu11 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
    -fno-sanitize-recover=undefined -Wall -Wextra -Wno-unused-function -I$out -I$top"
for t in $targets; do
    if ! src=$(sources_of "$t"); then
        echo "fuzz.sh: no target '$t' (targets: $all_targets)" >&2
        exit 2
    fi
    libs=$(libs_of "$t") || { echo "fuzz.sh: pkg-config found no libraries for $t" >&2; exit 2; }
    echo "fuzz.sh: building $out/fuzz_$t"
    # shellcheck disable=SC2086 # word splitting of the flag lists is intended
    (cd "$top" && "$cc" $cflags -o "$out/fuzz_$t" "tests/fuzz/fuzz_$t.c" tests/fuzz/fuzz_log.c \
        $src $libs -lm -lpthread) || { echo "fuzz.sh: build of fuzz_$t failed" >&2; exit 2; }
done

[ "$seconds" -eq 0 ] && exit 0
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export STARPU_SILENT=1
# The targets write every input to a file: on a disk that is ~100x slower than on tmpfs.
if [ -z "${FUZZ_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    FUZZ_TMPDIR=/dev/shm
fi
export TMPDIR=${FUZZ_TMPDIR:-${TMPDIR:-/tmp}}
table="$out/summary.txt"
printf '%-12s %12s %8s %10s %8s  %s\n' target executions seconds "exec/s" crashes result > "$table"
failed=0
for t in $targets; do
    corpus="$out/corpus/$t"
    art="$out/artifacts/$t"
    rm -rf "$art" # artifacts are those of the last run
    mkdir -p "$corpus" "$art"
    echo "fuzz.sh: running fuzz_$t for ${seconds}s (log: $out/fuzz_$t.log)"
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$out/fuzz_$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$art/" ${FUZZ_ARGS:-} \
        "$corpus" "$top/tests/fuzz/corpus/$t" > "$out/fuzz_$t.log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/fuzz_$t.log" | tail -1)
    [ -z "$execs" ] &&
        execs=$(sed -n 's/.*Done \([0-9]*\) runs.*/\1/p' "$out/fuzz_$t.log" | tail -1)
    crashes=$(find "$art" -type f | wc -l)
    result=ok
    if [ $rc -ne 0 ] || [ "$crashes" -gt 0 ]; then
        result="FAILED (rc $rc; inputs in $art)"
        failed=1
        grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|fuzz: ' \
            "$out/fuzz_$t.log" >&2
    fi
    printf '%-12s %12s %8s %10s %8s  %s\n' "$t" "${execs:-?}" "$took" \
        "$(( ${execs:-0} / (took > 0 ? took : 1) ))" "$crashes" "$result" >> "$table"
done
echo
cat "$table"
exit $failed
