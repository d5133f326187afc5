#!/bin/sh
# SPDX-License-Identifier: MIT
# Replays every seed (tests/fuzz/corpus/<target>/) and every past crash input
# (tests/fuzz/regressions/<target>/) through the fuzz targets built with a plain main()
# (tests/fuzz/test_fuzz_replay_<target>): each parser must return 0 or a negative errno without
# crashing, aborting or (in a sanitizer build) touching memory it does not own or leaking.
# Exit 0 pass, 1 fail.
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
fail=0
for t in safetensors hfconfig recipe tokenizer shard ckpt; do
    bin=$top_builddir/tests/fuzz/test_fuzz_replay_$t
    if [ ! -x "$bin" ]; then
        echo "$t: no $bin (build it with make check)"
        fail=1
        continue
    fi
    n=0
    for dir in "$top_srcdir/tests/fuzz/corpus/$t" "$top_srcdir/tests/fuzz/regressions/$t"; do
        [ -d "$dir" ] || continue
        for f in "$dir"/*; do
            [ -f "$f" ] || continue
            n=$((n + 1))
            if ! "$bin" "$f" > /dev/null 2> "${TMPDIR:-/tmp}/replay.$$.err"; then
                echo "$t: $f: the parser crashed or returned a bad value:"
                tail -20 "${TMPDIR:-/tmp}/replay.$$.err"
                fail=1
            fi
        done
    done
    rm -f "${TMPDIR:-/tmp}/replay.$$.err"
    echo "$t: $n inputs replayed"
    [ "$n" -gt 0 ] || { echo "$t: no inputs found under $top_srcdir/tests/fuzz"; fail=1; }
done
if [ $fail -ne 0 ]; then
    echo FAIL
    exit 1
fi
echo PASS
