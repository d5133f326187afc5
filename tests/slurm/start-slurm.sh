#!/bin/sh
# SPDX-License-Identifier: MIT
# Start a private single-node Slurm cluster (munged, slurmctld, slurmd) whose configuration, state, logs,
# sockets and munge key all live in DIR, on ports nobody listens on, so it never touches a system Slurm.
#   usage: start-slurm.sh DIR        then: SLURM_CONF=DIR/slurm.conf sbatch ...; stop-slurm.sh DIR
# Installs slurm-wlm and munge with apt-get when they are missing and we are root (SDP_SLURM_INSTALL=0
# forbids it).  Exit status: 0 when the node is idle and takes jobs, 77 when Slurm cannot run on this
# machine (the reason is printed), 1 on a usage error.
set -u
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-}
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
    echo "usage: $0 DIR (an existing, private directory)" >&2
    exit 1
fi
dir=$(cd "$dir" && pwd)
export PATH="$PATH:/usr/sbin:/sbin"

skip()
{
    echo "slurm: cannot run here: $*"
    exit 77
}

fail_daemons()
{
    echo "slurm: $*"
    for f in munged.log slurmctld.log slurmd.log; do
        [ -s "$dir/$f" ] && { echo "--- last lines of $f"; tail -n 15 "$dir/$f"; }
    done
    "$here/stop-slurm.sh" "$dir"
    exit 77
}

# ---- packages ----
[ "$(id -u)" = 0 ] || skip "slurmd must run as root to start jobs (running as uid $(id -u))"
have_all()
{
    for p in munged munge slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
        command -v "$p" > /dev/null 2>&1 || return 1
    done
}
if ! have_all; then
    [ "${SDP_SLURM_INSTALL:-1}" != 0 ] || skip "slurm-wlm or munge is not installed (SDP_SLURM_INSTALL=0)"
    command -v apt-get > /dev/null 2>&1 || skip "slurm-wlm or munge is not installed, and there is no apt-get"
    echo "slurm: installing slurm-wlm and munge (log: $dir/apt.log)"
    # Debian would enable and start the system's munge, slurmctld and slurmd: left disabled here
    if ! "$here/../../tools/apt-install-no-services.sh" slurm-wlm munge > "$dir/apt.log" 2>&1; then
        tail -n 5 "$dir/apt.log"
        skip "apt-get install slurm-wlm munge failed"
    fi
    have_all || skip "slurm-wlm and munge are installed but their commands are missing"
fi

# ---- two free TCP ports (listening sockets are state 0A in /proc/net/tcp*) ----
port_busy()
{
    hex=$(printf ':%04X' "$1")
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
        awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }'
}
port=${SDP_SLURM_PORT:-$((20000 + ($$ % 5000) * 2))}
tries=0
while port_busy "$port" || port_busy $((port + 1)); do
    port=$((port + 2))
    tries=$((tries + 1))
    [ $tries -lt 100 ] || skip "no two free TCP ports near ${SDP_SLURM_PORT:-20000}"
done

# ---- munge: a private key and socket ----
umask 077
if [ ! -s "$dir/munge.key" ]; then
    if command -v mungekey > /dev/null 2>&1; then
        mungekey --create --keyfile="$dir/munge.key" || skip "mungekey could not create a key"
    else
        dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 2> /dev/null ||
            skip "cannot create a munge key"
    fi
fi
chmod 600 "$dir/munge.key"
# munged insists that every directory above its socket is searchable by all
chmod 711 "$dir"
d=$dir
while [ "$d" != / ]; do
    case $(stat -c %A "$d") in
    *x | *t) ;;
    *) skip "munged wants every directory above its socket searchable by all, and $d is not" ;;
    esac
    d=$(dirname "$d")
done
munged --socket="$dir/munge.socket" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" ||
    fail_daemons "munged did not start"
munge -n -S "$dir/munge.socket" 2>/dev/null | unmunge -S "$dir/munge.socket" > /dev/null 2>&1 ||
    fail_daemons "munged does not answer on $dir/munge.socket"

# ---- slurm.conf for this host ----
host=$(uname -n)
host=${host%%.*} # as hostname -s
cpus=$(nproc)
mem_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
# leave the larger of 512 MiB and 10% for the system, so that slurmd never finds less than configured
margin=$((mem_mb / 10 > 512 ? mem_mb / 10 : 512))
mem_mb=$((mem_mb > margin + 256 ? mem_mb - margin : 256))
mkdir -p "$dir/state" "$dir/spool"
: > "$dir/plugstack.conf"
sed -e "s|@DIR@|$dir|g" -e "s|@HOST@|$host|g" -e "s|@CPUS@|$cpus|g" -e "s|@MEM_MB@|$mem_mb|g" \
    -e "s|@CTLD_PORT@|$port|g" -e "s|@SLURMD_PORT@|$((port + 1))|g" \
    "$here/slurm.conf.in" > "$dir/slurm.conf"
chmod 644 "$dir/slurm.conf"
SLURM_CONF="$dir/slurm.conf"
export SLURM_CONF
echo "slurm: node $host, $cpus CPUs, $mem_mb MiB, ports $port-$((port + 1)), SLURM_CONF=$SLURM_CONF"

# ---- daemons (they fork into the background and write their pid files) ----
slurmctld -c -f "$SLURM_CONF" || fail_daemons "slurmctld did not start"
slurmd -c -f "$SLURM_CONF" -N "$host" || fail_daemons "slurmd did not start"
waited=0
while :; do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null)
    [ "$state" = idle ] && break
    [ $waited -lt 60 ] || fail_daemons "node $host is '${state:-not answering}' after 60 s, not idle"
    sleep 1
    waited=$((waited + 1))
done
echo "slurm: node $host idle after $waited s"
exit 0
