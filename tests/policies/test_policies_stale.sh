#!/bin/sh
# The invariant checker must fail a schedule that lets ranks compute with a stale parameter
# version.  StarPU releases a task only when its data dependencies are met, so no policy can make
# a task read weights its graph says are not ready; the schedule that breaks invariant 3 is
# therefore a graph that asks for it: RoundPipe's asynchronous optimizer (--param-delay 1), where
# step s computes with the second working copy while the update of step s - 1 writes the first.
# On the same recipe, with 2 ranks, the synchronous run passes the checker and the delayed run
# fails it with invariant 3 among the violations (the checker also reports recorded versions that
# disagree with the ones it derives from the times, since it assumes one working copy), and the
# losses agree at step 0 and differ from step 1 on (step 1 is the first to read a stale version).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
recipe=$top/tests/e2e/data/micro-qwen3.yaml

for delay in 0 1; do
    if ! "$bin" train "$recipe" --ranks 2 --cpus 2 --param-delay $delay -q \
        --metrics "$tmp/d$delay.jsonl" --events "$tmp/d$delay.events" 2> "$tmp/d$delay.err"; then
        echo "param_delay $delay: training failed"; cat "$tmp/d$delay.err"; fail=1
    fi
done

"$py" "$top/tools/check_invariants.py" "$tmp/d0.events" > "$tmp/c0.out" 2>&1
rc0=$?
"$py" "$top/tools/check_invariants.py" "$tmp/d1.events" > "$tmp/c1.out" 2>&1
rc1=$?
echo "synchronous: checker exit $rc0: $(tail -n 1 "$tmp/c0.out")"
echo "delayed:     checker exit $rc1: $(tail -n 1 "$tmp/c1.out")"
[ $rc0 -eq 0 ] || { echo "the synchronous run must pass the checker"; cat "$tmp/c0.out"; fail=1; }
[ $rc1 -eq 1 ] || { echo "the delayed run must fail the checker (exit 1)"; cat "$tmp/c1.out"; fail=1; }
grep -q "^invariant 3 violated" "$tmp/c1.out" ||
    { echo "the delayed run's violations must include invariant 3"; fail=1; }
# the losses: identical for the first two steps (version 0 both times), different afterwards
"$py" - "$tmp/d0.jsonl" "$tmp/d1.jsonl" <<'PYEOF' || fail=1
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
print("synchronous:", a)
print("delayed:    ", b)
# step 1 (0-based) reads version 0 when delayed and version 1 when synchronous
sys.exit(0 if len(a) == len(b) == 4 and a[0] == b[0] and all(x != y for x, y in zip(a[1:], b[1:])) else 1)
PYEOF

finish
