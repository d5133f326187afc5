# SPDX-License-Identifier: MIT
# shellcheck shell=sh disable=SC2154 # jid, metrics: set by the test that sources this
# Sourced by the tests of tests/slurm/: following a submitted job through Slurm.  The caller sets
# $jid (the job), $metrics (the metrics file the job writes, a line a checkpointed step) and defines
# fail MESSAGE.

# JobState, Restarts of job $jid (empty when Slurm no longer knows it)
job_state()
{
    scontrol -o show job "$jid" 2>/dev/null |
        sed -n 's/.*JobState=\([A-Z_]*\).*Restarts=\([0-9]*\).*/\1 \2/p'
}

# metrics lines the job has written so far
job_steps()
{
    if [ -f "$metrics" ]; then wc -l < "$metrics"; else echo 0; fi
}

# wait_steps N SECONDS: wait until the job has written N metrics lines; fails if it ends first
wait_steps()
{
    t=0
    while [ "$(job_steps)" -lt "$1" ]; do
        # shellcheck disable=SC2046 # two words: state, restarts
        set -- "$1" "$2" $(job_state)
        case "${3:-gone}" in
        PENDING | CONFIGURING | RUNNING) ;;
        *) fail "job $jid is ${3:-gone} before its step $1" ;;
        esac
        [ $t -lt $(($2 * 10)) ] || fail "job $jid did not reach step $1 in $2 s"
        sleep 0.1
        t=$((t + 1))
    done
}

# wait_requeued SECONDS: wait until the job, signalled, has requeued itself, run again and completed;
# sets restarts (Slurm's count) and t (the seconds it took)
wait_requeued()
{
    t=0
    restarts=0
    while :; do
        # shellcheck disable=SC2046 # two words: state, restarts
        set -- "$1" $(job_state)
        [ "${3:-0}" -gt "$restarts" ] && { restarts=$3; echo "job $jid requeued (Restarts=$3), now $2"; }
        case "${2:-gone}" in
        COMPLETED) break ;;
        PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED | REQUEUE_FED | RESIZING) ;;
        *) fail "job $jid ended ${2:-unknown to Slurm} after $restarts restarts" ;;
        esac
        [ $t -lt "$1" ] || fail "job $jid not complete $1 s after the signal"
        sleep 1
        t=$((t + 1))
    done
    echo "job $jid completed after $t s, Restarts=$restarts"
}
