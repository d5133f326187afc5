#!/bin/sh
# SPDX-License-Identifier: MIT
# slidedp simulate (docs/simulation.md): the tiny recipe on 1, 2 and 4 simulated GPUs of the
# reference node (the simulation build, tools/build-sim.sh, against StarPU with SimGrid):
#   - each run ends (exit 0), with as many CUDA workers as GPUs, the rest of the 16 cores CPU
#     workers, under sdp-slidedp with one data-parallel rank per GPU (and with one rank on 2 GPUs,
#     and sdp-roundpipe with a stage worker per GPU), every step's line marked simulated, without
#     a loss;
#   - the simulated time is the machine's: a machine file whose GPU computes at 100 GFLOP/s (the
#     reference's 700 TFLOP/s) gives a step more than twice as long, and the same run twice gives
#     the same simulated time (SimGrid is deterministic);
#   - the described machine is removed after the run, kept with --keep (its platform file names
#     every GPU and their memory);
#   - bad input exits 2 naming the option: --gpus 0, no command, a command it does not simulate;
#     a missing simulation build exits 1 naming tools/build-sim.sh.
# Skips (77) without the simulation build: CI builds it (tools/setup-debian.sh --simgrid).
set -u
. "${top_srcdir:-.}/tests/lib/e2e.sh"
need_sim
tiny_recipe > "$tmp/r.yaml"
export TMPDIR=$tmp

# run NAME GPUS RANKS ARGS...: simulate train on GPUS GPUs with RANKS data-parallel ranks (ARGS:
# simulate's options); its output in $tmp/NAME.out and .err
run() {
    name=$1 g=$2 ranks=$3
    shift 3
    if ! "$bin" simulate --sim-binary "$sim" --gpus "$g" "$@" train "$tmp/r.yaml" --steps 3 \
        --sched sdp-slidedp --ranks "$ranks" > "$tmp/$name.out" 2> "$tmp/$name.err"; then
        echo "$name: simulate failed"; grep -v '^ *->' "$tmp/$name.err" | tail -n 5; fail=1
    fi
}
# step_s NAME: the mean simulated step time train reports
step_s() { sed -n 's/.*step time: measured \([0-9.]*\) s.*/\1/p' "$tmp/$1.err"; }

for g in 1 2 4; do
    run g$g "$g" "$g" --cpus 16
    grep -q "StarPU 1.4: $((16 - g)) CPU workers, $g CUDA workers, policy sdp-slidedp" "$tmp/g$g.err" ||
        { echo "$g GPUs: not $g CUDA and $((16 - g)) CPU workers"; grep "StarPU 1.4" "$tmp/g$g.err"; fail=1; }
    [ "$(grep -c '^step [0-9]/3  loss -  .* tok/s (simulated)' "$tmp/g$g.out")" = 3 ] ||
        { echo "$g GPUs: not 3 simulated step lines"; cat "$tmp/g$g.out"; fail=1; }
    echo "$g GPU(s): step $(step_s g$g) s simulated"
done
# one rank on 2 GPUs: the second GPU holds nothing, its worker sleeps until woken
run onerank 2 1
grep -q "done: steps 1-3 in" "$tmp/onerank.err" || { echo "one rank on 2 GPUs did not end"; fail=1; }
"$bin" simulate --sim-binary "$sim" --gpus 2 train "$tmp/r.yaml" --steps 3 --sched sdp-roundpipe \
    --ranks 2 > "$tmp/rp.out" 2> "$tmp/rp.err" &&
    grep -q "2 CUDA workers, policy sdp-roundpipe" "$tmp/rp.err" ||
    { echo "sdp-roundpipe on 2 simulated GPUs failed"; tail -n 5 "$tmp/rp.err"; fail=1; }

# a machine whose GPU computes at 100 GFLOP/s (the reference: 700 TFLOP/s), and the same run again
"$py" - "$tmp/slow.json" <<'PY'
import json, sys
m = {"format": "slidedp-machine", "version": 1, "host": "slow", "cpu": "x", "cores": 16, "gpus": 1,
     "gpu": [{"name": "slow GPU", "h2d_bps": 5.5e10, "d2h_bps": 5.5e10, "bf16_flops": 1e11,
              "attention_flops": 1e11, "head_flops": 1e11, "elem_bps": 2e12,
              "mem_bytes": 8.5e10}]}
json.dump(m, open(sys.argv[1], "w"))
PY
run slow 1 1 --machine "$tmp/slow.json"
run again 1 1 --cpus 16
fast=$(step_s g1) slow=$(step_s slow) again=$(step_s again)
echo "1 GPU: $fast s; at 100 GFLOP/s: $slow s; again: $again s"
"$py" -c "import sys; f, s, a = map(float, sys.argv[1:]); sys.exit(0 if s > 2 * f and a == f else 1)" \
    "${fast:-0}" "${slow:-0}" "${again:-1}" ||
    { echo "the simulated time does not follow the machine, or differs between two runs"; fail=1; }

# the description: removed, or kept
[ -z "$(ls -d "$tmp"/slidedp-sim.* 2> /dev/null)" ] ||
    { echo "a described machine was left behind"; ls "$tmp"; fail=1; }
run kept 2 2 --keep "$tmp/kept" --gpu-memory-gib 24
grep -q '<host id="CUDA1"' "$tmp/kept/bus/slidedp-sim.platform.v4.xml" &&
    grep -q '"memsize" value="25769803776"' "$tmp/kept/bus/slidedp-sim.platform.v4.xml" ||
    { echo "--keep: no platform with 2 GPUs of 24 GiB"; ls -R "$tmp/kept"; fail=1; }

expect 2 "gpus expects a number" -- "$bin" simulate --gpus 0 train "$tmp/r.yaml"
expect 2 "expected the command to simulate" -- "$bin" simulate --gpus 1
expect 2 "expected the command to simulate" -- "$bin" simulate tokenize x
expect 1 "tools/build-sim.sh" -- "$bin" simulate --sim-binary "$tmp/none" train "$tmp/r.yaml"
finish
