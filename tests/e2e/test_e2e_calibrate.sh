#!/bin/sh
# SPDX-License-Identifier: MIT
# slidedp calibrate on CPU workers: a real calibration of this machine in under a minute, its
# machine file read back (format, this node's host name and core count, one positive AdamW and
# cast rate per thread count up to the cores, AdamW's rate on the runtime's CPU workers (one per
# core), positive DRAM and task figures, no GPU rates without
# a GPU; the CPU workers' fp32 GEMM rates at the four shapes, the LM-head-like one included, and
# the attention rate, each positive and plausible), progress on stderr and nothing on stdout; then the refusals: -o on a directory or in a
# missing directory (exit 2, naming the file, before any measurement, nothing written), and bad
# options (exit 2).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
start=$(date +%s)
if ! "$bin" calibrate --gpus 0 -o "$tmp/m.json" > "$tmp/out" 2> "$tmp/err"; then
    echo "calibrate failed"; cat "$tmp/err"; fail=1
fi
took=$(($(date +%s) - start))
echo "calibrate: ${took} s"
[ "$took" -lt 60 ] || { echo "calibrate took ${took} s, over a minute"; fail=1; }
[ ! -s "$tmp/out" ] || { echo "calibrate wrote to stdout:"; cat "$tmp/out"; fail=1; }
grep -q "calibrate: .*thread.*AdamW" "$tmp/err" || { echo "no progress on stderr"; fail=1; }
grep -q "calibrate: CPU worker 0: GEMM .*GFLOP/s" "$tmp/err" || { echo "no GEMM progress"; fail=1; }
cat "$tmp/m.json"
"$py" - "$tmp/m.json" "$(hostname)" "$(getconf _NPROCESSORS_ONLN)" <<'PYEOF' || fail=1
import json, sys
m = json.load(open(sys.argv[1]))
host, cores = sys.argv[2], int(sys.argv[3])
checks = {
    "format": m["format"] == "slidedp-machine" and m["version"] == 1,
    "identity": m["host"] == host and m["cores"] == cores and m["cpu"],
    "tables": len(m["adamw_bps"]) == min(cores, 256) == len(m["cast_bps"]),
    "rates": all(x > 0 for x in m["adamw_bps"] + m["cast_bps"] + [m["dram_bps"]]),
    # AdamW's codelet on the runtime's CPU workers (all cores here: no GPU drives one)
    "update lane": m["adamw_workers"] == cores and m["adamw_workers_bps"] > 0,
    "tasks": 0 < m["task_submit_s"] < 0.01 and 0 < m["task_s"] < 0.01,
    "no gpu": m["gpus"] == 0 and m["gpu"] == [] and m["kernel_launch_s"] is None,
    "took": 0 < m["calib_s"] < 60,
    # fp32 GEMMs on one CPU worker: 0.1 to 1000 GFLOP/s; all the workers at once at least as fast
    "gemm": 1e8 < m["cpu_gemm_flops"] < 1e12
    and m["cpu_gemm_flops"] * 0.9 < m["cpu_gemm_flops_all"] < 1e12 * cores,
    "attention": 1e7 < m["cpu_attention_flops"] < 1e12,
    "shapes": [(g["m"], g["k"], g["n"]) for g in m["gemm"]]
    == [(512, 128, 512), (512, 512, 512), (512, 1024, 1024), (512, 128, 37984)]
    and all(1e8 < g["flops"] < 1e12 for g in m["gemm"]),
}
bad = [k for k, ok in checks.items() if not ok]
print("machine file checks failed:", bad) if bad else print("machine file: all checks hold")
sys.exit(1 if bad else 0)
PYEOF
mkdir "$tmp/dir"
for out in "$tmp/dir" "$tmp/missing/m.json"; do
    "$bin" calibrate --gpus 0 -o "$out" > /dev/null 2> "$tmp/bad.err"
    rc=$?
    if [ $rc -ne 2 ] || ! grep -q "machine file" "$tmp/bad.err" || grep -q "thread" "$tmp/bad.err"
    then
        echo "calibrate -o $out: exit $rc (expected 2, the file named, nothing measured)"
        cat "$tmp/bad.err"; fail=1
    fi
done
if [ -e "$tmp/missing" ] || [ -n "$(ls "$tmp/dir")" ]; then
    echo "a refused -o wrote"; fail=1
fi
for bad in "--gpus x" "--gpus -2" "-o" "extra" "--frobnicate"; do
    # shellcheck disable=SC2086 # the options are split on purpose
    "$bin" calibrate $bad > /dev/null 2> "$tmp/bad.err"
    rc=$?
    if [ $rc -ne 2 ]; then
        echo "calibrate $bad: expected exit 2, got $rc"; cat "$tmp/bad.err"; fail=1
    fi
done
finish
