#!/bin/sh
# The run directory holds one run: --no-resume on a used directory is refused (exit 2, naming
# --force-new) and changes nothing; --force-new moves the old run to RUN/previous-1; a rerun of a
# finished run leaves it as it is; a recipe with fewer steps than the checkpoint is refused; every
# checkpoint corrupt is refused (exit 1) instead of a silent restart, one corrupt of two resumes the
# other; a directory without run.json (earlier versions) resumes; a second run on a locked
# directory is refused at once naming the first one's pid, and the lock goes with the process
# (kill -9).  --print-plan creates no run directory.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/tests/e2e/data/micro-qwen3.yaml
args="--cpus 2 -q"
sums() { (cd "$1" && find . -type f -exec sha256sum {} + | sort); }
bad() { echo "$1"; [ -f "${2:-}" ] && cat "$2"; fail=1; }

# a finished run of 4 steps, then --no-resume with 2 steps: refused, nothing changed
d=$tmp/run
"$bin" train "$recipe" $args --steps 4 --checkpoint-every 2 --output "$d" 2> "$tmp/a.err" ||
    { cat "$tmp/a.err"; echo "first run failed"; echo FAIL; exit 1; }
[ -s "$d/run.json" ] || bad "no run.json in a fresh run directory"
sums "$d" > "$tmp/a.sum"
"$bin" train "$recipe" $args --steps 2 --no-resume --output "$d" 2> "$tmp/nr.err"
st=$?
sums "$d" > "$tmp/nr.sum"
[ $st -eq 2 ] && grep -q -- "--force-new" "$tmp/nr.err" && cmp -s "$tmp/a.sum" "$tmp/nr.sum" &&
    echo "--no-resume on a used directory: refused (exit 2), nothing changed" ||
    bad "--no-resume on a used directory: exit $st, expected 2 naming --force-new, no change" "$tmp/nr.err"

# --force-new: the old run moved whole to previous-1, the new one alone in the directory
"$bin" train "$recipe" $args --steps 2 --force-new --output "$d" 2> "$tmp/fn.err"
st=$?
sums "$d/previous-1" > "$tmp/prev.sum"
grep -v train.lock "$tmp/a.sum" > "$tmp/a-run.sum"
[ $st -eq 0 ] && cmp -s "$tmp/a-run.sum" "$tmp/prev.sum" &&
    [ "$(ls "$d/checkpoints")" = step-00000002.sdpckpt ] && grep -q "^step 2 " "$d/COMPLETE" &&
    echo "--force-new: the old run in previous-1 unchanged, the new one alone" ||
    bad "--force-new: exit $st, or the old run not moved whole, or the runs mixed" "$tmp/fn.err"

# a plain rerun of the finished run changes nothing; fewer steps than the checkpoint: refused
sums "$d" > "$tmp/b.sum"
"$bin" train "$recipe" $args --steps 2 --output "$d" 2> "$tmp/re.err"
st=$?
sums "$d" > "$tmp/re.sum"
[ $st -eq 0 ] && cmp -s "$tmp/b.sum" "$tmp/re.sum" && echo "rerun of a finished run: unchanged" ||
    bad "rerun of a finished run: exit $st, or the directory changed" "$tmp/re.err"
"$bin" train "$recipe" $args --steps 1 --output "$d" 2> "$tmp/lo.err"
st=$?
sums "$d" > "$tmp/lo.sum"
[ $st -eq 1 ] && grep -q "beyond train.steps" "$tmp/lo.err" && cmp -s "$tmp/b.sum" "$tmp/lo.sum" &&
    echo "fewer steps than the checkpoint: refused" ||
    bad "fewer steps than the checkpoint: exit $st, expected 1 and no change" "$tmp/lo.err"

# every checkpoint corrupt: refused, naming them; one corrupt of two: the other resumed
c=$tmp/corrupt
"$bin" train "$recipe" $args --steps 2 --checkpoint-every 1 --output "$c" 2> "$tmp/c.err" ||
    bad "corrupt: first run failed" "$tmp/c.err"
cp "$c/checkpoints/step-00000001.sdpckpt" "$tmp/good1"
truncate -s 4096 "$c/checkpoints/step-00000001.sdpckpt" "$c/checkpoints/step-00000002.sdpckpt"
sums "$c" > "$tmp/c1.sum"
"$bin" train "$recipe" $args --steps 2 --output "$c" 2> "$tmp/c1.err"
st=$?
sums "$c" > "$tmp/c2.sum"
[ $st -eq 1 ] && grep -q "step-00000001.sdpckpt, step-00000002\|step-00000002.sdpckpt, step-00000001" "$tmp/c1.err" &&
    grep -q -- "--force-new" "$tmp/c1.err" && cmp -s "$tmp/c1.sum" "$tmp/c2.sum" &&
    echo "every checkpoint corrupt: refused (exit 1), nothing changed" ||
    bad "every checkpoint corrupt: exit $st, expected 1 naming the files, no change" "$tmp/c1.err"
cp "$tmp/good1" "$c/checkpoints/step-00000001.sdpckpt"
"$bin" train "$recipe" $args --steps 2 --output "$c" 2> "$tmp/c3.err"
st=$?
[ $st -eq 0 ] && grep -q "skipping checkpoint .*step-00000002" "$tmp/c3.err" &&
    grep -q "resuming from .*step-00000001" "$tmp/c3.err" &&
    echo "one corrupt checkpoint of two: warned, the other resumed" ||
    bad "one corrupt checkpoint of two: exit $st, expected 0 resuming step 1" "$tmp/c3.err"

# a run directory of an earlier version (no run.json) still resumes, and gets one
rm -f "$c/run.json"
"$bin" train "$recipe" $args --steps 3 --output "$c" 2> "$tmp/c4.err"
st=$?
[ $st -eq 0 ] && grep -q "resuming from .*step-00000002" "$tmp/c4.err" && [ -s "$c/run.json" ] &&
    echo "no run.json (an earlier version): resumed, run.json written" ||
    bad "no run.json: exit $st, expected 0 resuming step 2 and a new run.json" "$tmp/c4.err"

# two runs on one directory: the second refused at once with the first one's pid; after kill -9
# of the first, the lock is gone
l=$tmp/locked
"$bin" train "$recipe" --cpus 2 --steps 1000 --checkpoint-every 1000 --output "$l" > "$tmp/l1.out" \
    2> "$tmp/l1.err" &
pid=$!
i=0
while ! grep -q pid "$l/train.lock" 2> /dev/null && ! grep -q "^step 1/" "$tmp/l1.out" &&
    [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
"$bin" train "$recipe" $args --steps 1 --output "$l" 2> "$tmp/l2.err"
st=$?
[ $st -eq 1 ] && grep -q "in use by another slidedp train (pid $pid" "$tmp/l2.err" &&
    echo "second run on a locked directory: refused naming pid $pid" ||
    bad "second run on a locked directory: exit $st, expected 1 naming pid $pid" "$tmp/l2.err"
kill -9 $pid
wait $pid 2> /dev/null
"$bin" train "$recipe" $args --steps 1 --force-new --output "$l" 2> "$tmp/l3.err" &&
    echo "after kill -9 of the holder: the lock is free" ||
    bad "after kill -9 of the holder: the next run failed" "$tmp/l3.err"

# --print-plan leaves the run directory alone
"$bin" train "$recipe" $args --print-plan --output "$tmp/plan" > /dev/null 2> "$tmp/p.err" ||
    bad "--print-plan failed" "$tmp/p.err"
[ -e "$tmp/plan" ] && bad "--print-plan created the run directory"

finish
