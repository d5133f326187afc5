#!/bin/sh
# SPDX-License-Identifier: MIT
# `slidedp plot` on the metrics of a real 3-step run of tests/e2e/data/micro-qwen3.yaml: the output
# must be a PNG (8-byte signature, IHDR of the 1000x600 image asked for, size > 1 KB) that plots one
# point per metrics line; malformed lines must be skipped with a warning naming file:line and
# counted; a missing file, no valid line, a bad option and a missing gnuplot must give exit 2, 1, 2
# and 1 (with the install hint) and leave no image.  Skips (77) without gnuplot.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
if ! command -v gnuplot > /dev/null 2>&1; then
    echo "gnuplot is not installed (apt-get install gnuplot-nox): SKIP"
    exit 77
fi
fails=0
fail() { echo "  FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "  ok: $*"; }

# ---- a real metrics file ----
if ! "$bin" train "$top/tests/e2e/data/micro-qwen3.yaml" --steps 3 --gpus 0 --metrics "$tmp/m.jsonl" \
    --output "$tmp/run" > "$tmp/train.out" 2> "$tmp/train.err"; then
    echo "training failed"; tail -n 20 "$tmp/train.err"; echo FAIL; exit 1
fi
nsteps=$(wc -l < "$tmp/m.jsonl")
echo "metrics: $nsteps lines from a 3-step run"
[ "$nsteps" = 3 ] || { echo "expected 3 metrics lines"; echo FAIL; exit 1; }

# PNG checks: signature 89 50 4e 47 0d 0a 1a 0a, then the IHDR chunk with width and height (big
# endian) at bytes 16..23, and a size above 1 KB (a blank 1000x600 PNG compresses to less).
check_png()
{
    sig=$(od -An -tx1 -N8 "$1" | tr -d ' \n')
    wh=$(od -An -tx1 -j16 -N8 "$1" | tr -d ' \n')
    size=$(wc -c < "$1")
    echo "  $1: signature $sig, IHDR w/h $wh, $size bytes"
    [ "$sig" = 89504e470d0a1a0a ] || { fail "not a PNG signature"; return; }
    [ "$wh" = 000003e800000258 ] || { fail "IHDR is not 1000x600"; return; }
    [ "$size" -gt 1024 ] || { fail "PNG of $size bytes <= 1 KB"; return; }
    ok "PNG 1000x600, $size bytes"
}

# ---- the plot of the real file ----
echo "plot of the run's metrics:"
if "$bin" plot "$tmp/m.jsonl" -o "$tmp/loss.png" --title "micro-qwen3, 3 steps" 2> "$tmp/p1.err"
then
    cat "$tmp/p1.err"
    check_png "$tmp/loss.png"
    grep -q "wrote .*loss.png: $nsteps points" "$tmp/p1.err" || fail "did not plot $nsteps points"
    grep -q '\[warn\]' "$tmp/p1.err" && fail "warnings on a clean metrics file"
    [ -e "$tmp/loss.png.tmp" ] && fail "left loss.png.tmp behind"
else
    cat "$tmp/p1.err"; fail "plot of a valid metrics file exited $?"
fi

# ---- malformed lines: 3 bad lines among the 3 good ones and one more good one ----
echo "malformed lines:"
bad="$tmp/bad.jsonl"
{
    head -n 1 "$tmp/m.jsonl"
    echo 'this is not json'
    sed -n 2p "$tmp/m.jsonl"
    echo '[1, 2, 3]'
    echo '{"step": 9, "lr": 0.001}'
    sed -n 3p "$tmp/m.jsonl"
    echo '{"step": 4, "loss": 11.5, "lr": 0.009, "tokens_per_s": 400.0}'
} > "$bad"
if "$bin" plot "$bad" -o "$tmp/bad.png" 2> "$tmp/p2.err"; then
    cat "$tmp/p2.err"
    nwarn=0
    for l in 2 4 5; do
        if grep -q "$bad:$l: .*skipped" "$tmp/p2.err"; then nwarn=$((nwarn + 1)); else
            fail "no warning naming $bad:$l"; fi
    done
    [ "$(grep -c 'line skipped' "$tmp/p2.err")" = 3 ] || fail "not exactly 3 line warnings"
    grep -q "skipped 3 malformed line(s) of 7" "$tmp/p2.err" || fail "count of 3 malformed lines"
    grep -q "wrote .*bad.png: 4 points" "$tmp/p2.err" || fail "did not plot the 4 valid lines"
    check_png "$tmp/bad.png"
    [ "$nwarn" = 3 ] && ok "3 malformed lines warned (file:line) and counted, 4 points plotted"
else
    cat "$tmp/p2.err"; fail "plot with malformed lines exited $? (expected 0)"
fi

# ---- error paths ----
echo "error paths:"
expect_rc()
{
    want=$1 what=$2 out=$3
    shift 3
    "$@" > "$tmp/e.out" 2> "$tmp/e.err"
    got=$?
    if [ "$got" = "$want" ] && [ ! -e "$out" ] && [ ! -e "$out.tmp" ]; then
        ok "$what: exit $got, no image ($(head -n 1 "$tmp/e.err"))"
    else
        img=no
        [ -e "$out" ] && img=yes
        fail "$what: exit $got (expected $want), image present: $img"
        cat "$tmp/e.err"
    fi
}
expect_rc 2 "missing file" "$tmp/x1.png" "$bin" plot "$tmp/none.jsonl" -o "$tmp/x1.png"
printf 'garbage\n{"loss": 1}\n' > "$tmp/allbad.jsonl"
expect_rc 1 "no valid line" "$tmp/x2.png" "$bin" plot "$tmp/allbad.jsonl" -o "$tmp/x2.png"
expect_rc 2 "no metrics file" "$tmp/x3.png" "$bin" plot -o "$tmp/x3.png"
expect_rc 2 "unknown option" "$tmp/x4.png" "$bin" plot "$tmp/m.jsonl" --frobnicate -o "$tmp/x4.png"
expect_rc 1 "gnuplot missing" "$tmp/x5.png" env PATH="$tmp/empty" "$bin" plot "$tmp/m.jsonl" \
    -o "$tmp/x5.png"
grep -q "apt-get install gnuplot-nox" "$tmp/e.err" || fail "no install hint without gnuplot"

if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed"; echo FAIL; exit 1
fi
echo PASS
