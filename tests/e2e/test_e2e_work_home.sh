#!/bin/sh
# Working copies off the host (train.work_home: gpu, sdp_state.work_staged): AdamW and the first
# cast write each chunk into a stage without host home, a param_put copies it into the working
# copy where the compute keeps it, and the stage is dropped, so the host holds the masters and
# moments only.  Here on CPU workers (the stages and the copy stay on the host; the GPU figures are
# in bench/results), tiny recipe, 4 steps, sdp-slidedp:
#   - the losses and gradient norms are bit-identical to work_home host, with one rank and with
#     two ranks (CPU reduction);
#   - the state's host figure drops by the working copy (4 bytes a parameter in fp32);
#   - the event log holds one param_put per chunk and step plus one per chunk for the first cast,
#     host's none, and tools/check_invariants.py passes it (a put is part of its group's update);
#   - tools/lane_util.py --stages pairs every put with the cast or AdamW that wrote its stage;
#   - with SDP_STAGE_BUFFERS=2, sdp-slidedp keeps at most 2 stages alive (the puts commute, so a
#     full bound never waits for itself): the losses stay bit-identical, the checker's
#     --max-stages 2 passes the log and --max-stages 1 fails it, and the log holds "stages full"
#     waits;
#   - work_home gpu with gpu_memory_gib, an unknown --work-home and an unknown work_home value are
#     refused with exit code 2 naming the key.
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"

tiny_recipe | sed -e "s#^  sched: .*#  sched: sdp-slidedp#" > "$tmp/r.yaml"
run() { # NAME ARGS...
    name=$1
    shift
    if ! "$bin" train "$tmp/r.yaml" -q --steps 4 --metrics "$tmp/$name.jsonl" \
        --events "$tmp/$name.ev" "$@" 2> "$tmp/$name.err"; then
        echo "$name: training failed"; cat "$tmp/$name.err"; fail=1
    fi
}
run host --work-home host
run gpu --work-home gpu
run host2 --work-home host --ranks 2
run gpu2 --work-home gpu --ranks 2
SDP_STAGE_BUFFERS=2 && export SDP_STAGE_BUFFERS && run gpu3 --work-home gpu
unset SDP_STAGE_BUFFERS
for n in host gpu; do
    echo "$n: $(grep -o 'state: .*' "$tmp/$n.err")"
done

"$py" - "$tmp" <<'PYEOF' || fail=1
import json, os, re, sys
tmp = sys.argv[1]
def metrics(n):
    return [(x["loss"], x["grad_norm"]) for x in map(json.loads, open(os.path.join(tmp, n + ".jsonl")))]
def events(n):
    return [json.loads(l) for l in open(os.path.join(tmp, n + ".ev"))]
def state(n):
    m = re.search(r"state: (\d+) parameters in \d+ groups, (\d+) chunks.*, ([0-9.]+) GiB of host",
                  open(os.path.join(tmp, n + ".err")).read())
    return int(m.group(1)), int(m.group(2)), float(m.group(3))
ok = True
for a, b in (("host", "gpu"), ("host2", "gpu2"), ("host", "gpu3")):
    x, y = metrics(a), metrics(b)
    print("%s: %s\n%s: %s" % (a, x, b, y))
    if len(x) != 4 or x != y:
        print("%s and %s are not bit-identical" % (a, b))
        ok = False
params, chunks, gib_host = state("host")
_, _, gib_gpu = state("gpu")
drop = (gib_host - gib_gpu) * 2**30 / params
print("host state %.3f GiB, off the host %.3f GiB: %.2f bytes a parameter less" % (gib_host, gib_gpu, drop))
ok = ok and abs(drop - 4.0) < 0.6  # the log prints GiB with 2 decimals
puts = sum(1 for e in events("gpu") if e.get("name") == "param_put")
print("param_put events: %d (chunks %d x (4 steps + the first cast) = %d); with host: %d"
      % (puts, chunks, chunks * 5, sum(1 for e in events("host") if e.get("name") == "param_put")))
ok = ok and puts == chunks * 5 and all(e.get("name") != "param_put" for e in events("host"))
sys.exit(0 if ok else 1)
PYEOF
# the stages of the run (tools/lane_util.py --stages): one per put, each writer paired with its put
"$py" "$top/tools/lane_util.py" "$tmp/gpu.ev" --json --stages > "$tmp/st.json" 2> "$tmp/st.err" &&
    "$py" - "$tmp/st.json" "$tmp/gpu.ev" <<'PYEOF' || { cat "$tmp/st.err"; fail=1; }
import json, sys
s = json.load(open(sys.argv[1]))["stages"]
evs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
puts = [e for e in evs if e.get("name") == "param_put"]
first = sum(1 for e in puts if e["phase"] == "cast")
print("stages: first casts %(stages)d, at most %(max_alive)d alive" % s["cast"] +
      "; steps %(stages)d, at most %(max_alive)d alive, wait median %(wait_median_ms).1f ms" % s["update"])
ok = s["all"]["stages"] == len(puts) and s["cast"]["stages"] == first
ok = ok and s["update"]["stages"] == len(puts) - first
ok = ok and all(1 <= s[p]["max_alive"] <= s[p]["stages"] and s[p]["wait_median_ms"] >= 0
                for p in ("cast", "update", "all"))
sys.exit(0 if ok else 1)
PYEOF
for ev in gpu gpu2; do
    "$py" "$top/tools/check_invariants.py" "$tmp/$ev.ev" > "$tmp/check" 2>&1 ||
        { echo "the checker fails the run $ev:"; tail -n 5 "$tmp/check"; fail=1; }
    echo "$ev: $(tail -n 1 "$tmp/check")"
done

# the stage bound: 2 alive at most, seen by the checker, which fails a bound of 1 on the same log
if "$py" "$top/tools/check_invariants.py" --max-stages 2 "$tmp/gpu3.ev" > "$tmp/check3" 2>&1 &&
    grep -q "stages full" "$tmp/check3"; then
    echo "gpu3: $(grep '^stages:' "$tmp/check3"); $(grep -m 1 'stages full' "$tmp/check3" | sed 's/^ *//')"
else
    echo "gpu3: the checker with --max-stages 2 fails the run, or no 'stages full' wait:"
    tail -n 8 "$tmp/check3"; fail=1
fi
"$py" "$top/tools/check_invariants.py" --max-stages 1 "$tmp/gpu3.ev" > "$tmp/check1" 2>&1
st=$?
if [ $st -eq 1 ] && grep -q "max-stages" "$tmp/check1"; then
    echo "gpu3 with --max-stages 1: exit 1, $(grep -m 1 'alive at once' "$tmp/check1" | cut -c1-100)"
else
    echo "gpu3 with --max-stages 1: exit $st, not 1"; tail -n 5 "$tmp/check1"; fail=1
fi

expect2() { # WHAT PATTERN ARGS...
    what=$1 pat=$2
    shift 2
    "$bin" train "$@" > /dev/null 2> "$tmp/bad.err"
    st=$?
    if [ $st -eq 2 ] && grep -q "$pat" "$tmp/bad.err"; then
        echo "$what: exit 2, $(grep -m 1 "$pat" "$tmp/bad.err" | cut -c1-120)"
    else
        echo "$what: exit $st, not 2 naming $pat"; cat "$tmp/bad.err"; fail=1
    fi
}
sed -e "s#^  sched: .*#  sched: sdp-slidedp\n  work_home: gpu\n  gpu_memory_gib: 8#" "$tmp/r.yaml" \
    > "$tmp/mem.yaml"
expect2 "work_home gpu with gpu_memory_gib" "work_home" "$tmp/mem.yaml"
sed -e "s#^  sched: .*#  sched: sdp-slidedp\n  work_home: disk#" "$tmp/r.yaml" > "$tmp/disk.yaml"
expect2 "work_home disk" "work_home" "$tmp/disk.yaml"
expect2 "--work-home disk" "work-home" "$tmp/r.yaml" --work-home disk

finish
