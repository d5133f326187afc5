#!/bin/sh
# SPDX-License-Identifier: MIT
# Slurm requeue, end to end: on a private single-node Slurm (start-slurm.sh), a CPU training job submitted
# with slurm/sbatch-one-gpu.sh gets SIGUSR1 mid-run, as Slurm sends it before a time limit.  The job must
# checkpoint, requeue itself, start again under the same job id, resume from the checkpoint and finish.
# Oracle: an uninterrupted run of the same command without Slurm; COMPLETE (final step and loss) and every
# metrics line (less its timings) must match it exactly.  Exit 77 when Slurm cannot run on this machine.
set -u
top=$(cd "${top_srcdir:-.}" && pwd)
bin=$(cd "${top_builddir:-.}" && pwd)/slidedp
steps=${SDP_SLURM_STEPS:-24}
recipe=$top/tests/e2e/data/micro-qwen3.yaml
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sdp-slurm-test.XXXXXX")
# munged (started by start-slurm.sh) wants the directories above its socket searchable by all
chmod 711 "$tmp"
mkdir "$tmp/slurm"
cleanup()
{
    "$top/tests/slurm/stop-slurm.sh" "$tmp/slurm"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
[ -x "$bin" ] || { echo "no slidedp binary at $bin"; echo FAIL; exit 1; }

fail()
{
    echo "$*"
    for f in "$tmp/job.out" "$tmp/slurm/slurmctld.log" "$tmp"/slurm/slurmd-*.log; do
        [ -s "$f" ] && { echo "--- last lines of $f"; tail -n 25 "$f"; }
    done
    echo FAIL
    exit 1
}

# the whole-node template must run the code tested here: the same body below its #SBATCH header
body()
{
    sed -n '/^# ---- the body below is the same/,$p' "$1"
}
body "$top/slurm/sbatch-one-gpu.sh" > "$tmp/one-gpu.body"
body "$top/slurm/sbatch-node.sh" > "$tmp/node.body"
if [ ! -s "$tmp/one-gpu.body" ] || ! cmp -s "$tmp/one-gpu.body" "$tmp/node.body"; then
    fail "slurm/sbatch-node.sh and slurm/sbatch-one-gpu.sh differ below their #SBATCH headers"
fi

# ---- the Slurm cluster first: skip early when it cannot run here ----
"$top/tests/slurm/start-slurm.sh" "$tmp/slurm"
rc=$?
[ $rc -eq 77 ] && { echo SKIP; exit 77; }
[ $rc -eq 0 ] || fail "start-slurm.sh failed with status $rc"
SLURM_CONF=$tmp/slurm/slurm.conf
export SLURM_CONF

# ---- the oracle: the same training command, uninterrupted, without Slurm ----
args="--steps $steps --checkpoint-every 2 --cpus 1 --gpus 0"
# shellcheck disable=SC2086 # $args: one option per word
"$bin" train "$recipe" $args --output "$tmp/ref" --metrics "$tmp/ref.jsonl" > "$tmp/ref.out" 2>&1 ||
    { tail -n 20 "$tmp/ref.out"; fail "the reference run failed"; }
[ -s "$tmp/ref/COMPLETE" ] || fail "the reference run wrote no $tmp/ref/COMPLETE"
echo "reference run: $(cat "$tmp/ref/COMPLETE")"

# ---- the job: the one-GPU template, its GPU, CPU and memory requests overridden for this node ----
SLIDEDP=$bin
export SLIDEDP
# shellcheck disable=SC2086
jid=$(sbatch --parsable --job-name=sdp-requeue --gres=none --cpus-per-task=1 --mem=512M --time=10:00 \
    --chdir="$tmp" --output="$tmp/job.out" "$top/slurm/sbatch-one-gpu.sh" "$recipe" $args \
    --output "$tmp/run" --metrics "$tmp/job.jsonl") || fail "sbatch failed"
echo "submitted job $jid"

metrics=$tmp/job.jsonl
# shellcheck source=tests/slurm/jobs.sh
. "$top/tests/slurm/jobs.sh"

# ---- once 4 steps are done, the time-limit warning: SIGUSR1 to the batch shell only ----
wait_steps 4 120
scancel --signal=USR1 --batch "$jid" || fail "scancel --signal=USR1 --batch $jid failed"
echo "SIGUSR1 sent after step $(job_steps)"

# ---- the job must stop, requeue itself, run again and complete ----
wait_requeued 180

# ---- what happened, from the job's own output (appended across restarts) ----
starts=$(grep -c "^slidedp-sbatch: job $jid start" "$tmp/job.out")
stopped=$(sed -n 's/.*stopped by signal [0-9]* at step \([0-9]*\).*/\1/p' "$tmp/job.out" | head -n 1)
resumed=$(sed -n 's/.*resuming from .*: step \([0-9]*\) of.*/\1/p' "$tmp/job.out" | head -n 1)
echo "batch script starts: $starts; stopped at step ${stopped:-none}; resumed at step ${resumed:-none}"
if [ "$starts" -ne 2 ] || [ "$restarts" -ne 1 ]; then
    fail "expected 2 starts and Restarts=1"
fi
grep -q "SIGUSR1 passed on" "$tmp/job.out" || fail "the batch script did not pass SIGUSR1 on"
if [ -z "$stopped" ] || [ "$stopped" -lt 4 ] || [ "$stopped" -ge "$steps" ]; then
    fail "the first run did not stop by signal between step 4 and step $steps"
fi
# no step twice: the progress lines of both runs together count each step once
done_steps=$(grep -c "^step [0-9]*/$steps " "$tmp/job.out")
echo "progress lines of both runs: $done_steps for $steps steps"
[ "$done_steps" -eq "$steps" ] || fail "the two runs trained $done_steps steps, not $steps"
[ "$resumed" = "$stopped" ] || fail "the second run resumed at step ${resumed:-none}, not $stopped"

# ---- the result must be the uninterrupted run's, exactly ----
[ -s "$tmp/run/COMPLETE" ] || fail "the job wrote no COMPLETE"
echo "requeued job:  $(cat "$tmp/run/COMPLETE")"
cmp -s "$tmp/ref/COMPLETE" "$tmp/run/COMPLETE" || fail "COMPLETE differs from the reference run's"
untimed()
{
    sed -E 's/"(tokens_per_s|step_s|elapsed_s)":[^,}]*,?//g; s/,}/}/' "$1"
}
untimed "$tmp/ref.jsonl" > "$tmp/ref.untimed"
untimed "$tmp/job.jsonl" > "$tmp/job.untimed"
lines=$(wc -l < "$tmp/job.untimed")
echo "metrics: $lines lines from the job, $(wc -l < "$tmp/ref.untimed") from the reference"
diff "$tmp/ref.untimed" "$tmp/job.untimed" > "$tmp/metrics.diff" ||
    { head -n 10 "$tmp/metrics.diff"; fail "the job's metrics differ from the reference run's"; }
echo "last line: $(tail -n 1 "$tmp/job.untimed")"
echo PASS
