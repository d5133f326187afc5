#!/bin/sh
# Stop signals: SIGTERM without a run directory exits 1 saying that nothing was saved; SIGINT
# (Ctrl-C) checkpoints at the step boundary like SIGTERM and exits 0, and the rerun resumes there;
# a second SIGINT exits at once (130) with no COMPLETE; a signal before the first step checkpoints
# the starting state (step 0).  SIGINT is sent through `env --default-signal=INT`, since a shell
# starts background commands with SIGINT ignored.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/tests/e2e/data/micro-qwen3.yaml
args="--cpus 2 --steps 1000 --checkpoint-every 1000"
bad() { echo "$1"; [ -f "${2:-}" ] && cat "$2"; fail=1; }
env --default-signal=INT true 2> /dev/null || { echo "env lacks --default-signal: SKIP"; exit 77; }
# wait_for FILE PATTERN: until FILE holds a line matching PATTERN (30 s at most)
wait_for() {
    i=0
    while ! grep -q "$2" "$1" 2> /dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
}

# SIGTERM without a run directory: nothing was saved, exit 1
"$bin" train "$recipe" $args > "$tmp/t.out" 2> "$tmp/t.err" &
pid=$!
wait_for "$tmp/t.out" "^step 2/"
kill -TERM $pid
wait $pid
st=$?
[ $st -eq 1 ] && grep -q "nothing was saved" "$tmp/t.err" &&
    echo "SIGTERM without a run directory: exit 1, nothing was saved" ||
    bad "SIGTERM without a run directory: exit $st, expected 1 saying nothing was saved" "$tmp/t.err"

# SIGINT with a run directory: a checkpoint at the step boundary, exit 0, no COMPLETE
d=$tmp/int
env --default-signal=INT "$bin" train "$recipe" $args --output "$d" > "$tmp/i.out" 2> "$tmp/i.err" &
pid=$!
wait_for "$tmp/i.out" "^step 2/"
kill -INT $pid
wait $pid
st=$?
s=$(sed -n 's/.*stopped by signal 2 at step \([0-9]*\) .*/\1/p' "$tmp/i.err")
[ $st -eq 0 ] && [ -n "$s" ] && [ -f "$d/checkpoints/step-$(printf %08d "$s").sdpckpt" ] &&
    [ ! -e "$d/COMPLETE" ] && echo "SIGINT: checkpoint of step $s, exit 0" ||
    bad "SIGINT: exit $st, expected 0 with a checkpoint and no COMPLETE" "$tmp/i.err"

# two SIGINTs: the second exits at once
d=$tmp/int2
env --default-signal=INT "$bin" train "$recipe" $args --output "$d" > "$tmp/j.out" 2> "$tmp/j.err" &
pid=$!
wait_for "$tmp/j.out" "^step 2/"
kill -INT $pid
i=0
while ! grep -q "stop requested" "$tmp/j.err" && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
kill -INT $pid
wait $pid
st=$?
[ $st -eq 130 ] && [ ! -e "$d/COMPLETE" ] && echo "two SIGINTs: exit 130 at once" ||
    bad "two SIGINTs: exit $st, expected 130 and no COMPLETE" "$tmp/j.err"

# SIGTERM before the first step: the starting state as step 0, and the rerun resumes it
d=$tmp/early
"$bin" train "$recipe" $args -q --output "$d" 2> "$tmp/e.err" &
pid=$!
wait_for "$d/train.lock" pid
kill -TERM $pid
wait $pid
st=$?
[ $st -eq 0 ] && [ -f "$d/checkpoints/step-00000000.sdpckpt" ] &&
    grep -q "stopped by signal 15 at step 0 " "$tmp/e.err" &&
    echo "SIGTERM before the first step: checkpoint of step 0, exit 0" ||
    bad "SIGTERM before the first step: exit $st, expected 0 and step-00000000" "$tmp/e.err"
"$bin" train "$recipe" --cpus 2 --steps 1 -q --output "$d" 2> "$tmp/e2.err" &&
    grep -q "resuming from .*step-00000000.sdpckpt" "$tmp/e2.err" &&
    echo "the rerun resumes from step 0" || bad "the rerun did not resume from step 0" "$tmp/e2.err"

finish
