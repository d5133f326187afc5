#!/bin/sh
# SPDX-License-Identifier: MIT
# Stop the private Slurm cluster that start-slurm.sh DIR started: cancel its jobs and wait for them to
# end (slurmstepd outlives slurmd otherwise), then stop every slurmd, slurmctld and munged by the pids in
# their pid files, checking each pid still names that daemon, and remove the second node's network
# namespace and veth pair (DIR/netns).  Safe to run twice or after a failed start.
#   usage: stop-slurm.sh DIR
set -u
dir=${1:-}
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
    echo "usage: $0 DIR" >&2
    exit 1
fi
export PATH="$PATH:/usr/sbin:/sbin"
SLURM_CONF="$dir/slurm.conf"
export SLURM_CONF

# the pid in the file $2 (default DIR/$1.pid) if that process is still the daemon $1
daemon_pid()
{
    f=${2:-$dir/$1.pid}
    [ -s "$f" ] || return 1
    pid=$(cat "$f")
    case "$pid" in '' | *[!0-9]*) return 1 ;; esac
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] || return 1
    echo "$pid"
}

# stop daemon $1 (pid file $2, default DIR/$1.pid): SIGTERM, up to 10 s, then SIGKILL
stop_daemon()
{
    pid=$(daemon_pid "$1" "${2:-}") || return 0
    kill -TERM "$pid" 2>/dev/null
    n=0
    while [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]; do
        if [ $n -ge 100 ]; then
            echo "slurm: $1 ($pid) ignored SIGTERM for 10 s; killing it"
            kill -KILL "$pid" 2>/dev/null
            break
        fi
        sleep 0.1
        n=$((n + 1))
    done
}

if [ -f "$SLURM_CONF" ] && daemon_pid slurmctld > /dev/null; then
    jobs=$(squeue -h -o %i 2>/dev/null)
    if [ -n "$jobs" ]; then
        # shellcheck disable=SC2086 # one job id per word
        scancel $jobs 2>/dev/null
        n=0
        while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && [ $n -lt 60 ]; do
            sleep 0.5
            n=$((n + 1))
        done
        jobs=$(squeue -h -o %i 2>/dev/null)
        [ -z "$jobs" ] || echo "slurm: jobs still listed after 30 s:" "$jobs"
    fi
fi
for f in "$dir"/slurmd-*.pid; do
    stop_daemon slurmd "$f"
done
stop_daemon slurmctld
stop_daemon munged
if [ -s "$dir/netns" ]; then
    read -r ns veth < "$dir/netns"
    ip netns delete "$ns" 2>/dev/null
    ip link delete "$veth" 2>/dev/null
    rm -f "$dir/netns"
fi
exit 0
