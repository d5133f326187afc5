#!/bin/sh
# SPDX-License-Identifier: MIT
# Start a private Slurm cluster (munged, slurmctld, one slurmd per node) whose configuration, state, logs,
# sockets and munge key all live in DIR, on ports nobody listens on, so it never touches a system Slurm.
#   usage: start-slurm.sh DIR [NODES]    then: SLURM_CONF=DIR/slurm.conf sbatch ...; stop-slurm.sh DIR
# NODES is 1 (the default) or 2.  Two slurmd on one host need two addresses (Debian's slurmd is built
# without multiple-slurmd support), so the second node's slurmd runs in a network namespace of its own,
# joined to this host's by a veth pair, under a host name of its own (a UTS namespace); DIR/nodes says
# how many nodes the cluster has.  Where namespaces cannot be made, it says why and starts one node.
# Installs slurm-wlm and munge with apt-get when they are missing and we are root (SDP_SLURM_INSTALL=0
# forbids it).  Exit status: 0 when every node is idle and takes jobs, 77 when Slurm cannot run on this
# machine (the reason is printed), 1 on a usage error.
set -u
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-}
nodes=${2:-1}
if [ -z "$dir" ] || [ ! -d "$dir" ] || { [ "$nodes" != 1 ] && [ "$nodes" != 2 ]; }; then
    echo "usage: $0 DIR [NODES] (DIR: an existing, private directory; NODES: 1 or 2)" >&2
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
    for f in "$dir"/munged.log "$dir"/slurmctld.log "$dir"/slurmd-*.log; do
        [ -s "$f" ] && { echo "--- last lines of $(basename "$f")"; tail -n 15 "$f"; }
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

# ---- the second node's network: a namespace and a veth pair, named after the ports ----
# netns_up: 0 with $addr1 (this host's end) and $addr2 (the namespace's), else 1 with the reason in $why
netns_up()
{
    for c in ip nsenter unshare hostname; do
        command -v $c > /dev/null 2>&1 || { why="no $c command"; return 1; }
    done
    ns=sdp-slurm-$port
    veth=sdp${port}a
    # a /24 of 10.213/16 picked by the port, so that two clusters at once do not share one
    net=10.213.$(((port / 2) % 250 + 1))
    if ip -o -4 addr show | grep -q " inet $net\."; then
        why="this host already has an address in $net.0/24"
        return 1
    fi
    ip netns add "$ns" 2> "$dir/netns.err" || { why="ip netns add: $(cat "$dir/netns.err")"; return 1; }
    # stop-slurm.sh removes both (the namespace takes its end of the pair with it)
    echo "$ns $veth" > "$dir/netns"
    if ! { ip link add "$veth" type veth peer name "sdp${port}b" &&
        ip link set "sdp${port}b" netns "$ns" &&
        ip addr add "$net.1/24" dev "$veth" && ip link set "$veth" up &&
        ip netns exec "$ns" ip addr add "$net.2/24" dev "sdp${port}b" &&
        ip netns exec "$ns" ip link set "sdp${port}b" up &&
        ip netns exec "$ns" ip link set lo up; } 2> "$dir/netns.err"; then
        why="the veth pair: $(cat "$dir/netns.err")"
        return 1
    fi
    addr1=$net.1
    addr2=$net.2
}

# ---- slurm.conf for this host ----
host=$(uname -n)
host=${host%%.*} # as hostname -s
host2=$host-node2
cpus=$(nproc)
mem_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
# leave the larger of 512 MiB and 10% for the system, so that slurmd never finds less than configured
margin=$((mem_mb / 10 > 512 ? mem_mb / 10 : 512))
mem_mb=$((mem_mb > margin + 256 ? mem_mb - margin : 256))
addr1=127.0.0.1
addr2=
if [ "$nodes" = 2 ] && ! netns_up; then
    echo "slurm: no second node: its slurmd needs a network namespace, but $why; ONE node entry" \
        "instead, whose slurmd runs every task"
    nodes=1
fi
if [ "$nodes" = 2 ]; then
    # both nodes are this host: all of its CPUs each (nothing binds tasks to CPUs), half its memory each
    mem_mb=$((mem_mb / 2))
    node_lines="NodeName=$host NodeAddr=$addr1 NodeHostname=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
NodeName=$host2 NodeAddr=$addr2 NodeHostname=$host2 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host,$host2 Default=YES MaxTime=INFINITE State=UP"
else
    node_lines="NodeName=$host NodeAddr=$addr1 NodeHostname=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP"
fi
echo "$nodes" > "$dir/nodes"
mkdir -p "$dir/state" "$dir/spool-$host" "$dir/tmp-$host"
[ "$nodes" = 1 ] || mkdir -p "$dir/spool-$host2" "$dir/tmp-$host2"
: > "$dir/plugstack.conf"
{
    sed -e "s|@DIR@|$dir|g" -e "s|@HOST@|$host|g" -e "s|@ADDR@|$addr1|g" \
        -e "s|@CTLD_PORT@|$port|g" -e "s|@SLURMD_PORT@|$((port + 1))|g" "$here/slurm.conf.in"
    echo "$node_lines"
} > "$dir/slurm.conf"
chmod 644 "$dir/slurm.conf"
SLURM_CONF="$dir/slurm.conf"
export SLURM_CONF
echo "slurm: $nodes node(s): $host${addr2:+ and $host2 (a network namespace, $addr2)}, $cpus CPUs and" \
    "$mem_mb MiB each, ports $port-$((port + 1)), SLURM_CONF=$SLURM_CONF"

# ---- daemons (they fork into the background and write their pid files) ----
slurmctld -c -f "$SLURM_CONF" || fail_daemons "slurmctld did not start"
slurmd -c -f "$SLURM_CONF" -N "$host" || fail_daemons "slurmd of $host did not start"
if [ "$nodes" = 2 ]; then
    # nsenter, not `ip netns exec`: that one mounts a /sys of its own, without the cgroup file system
    # slurmd looks for
    # shellcheck disable=SC2016 # $1 and $2 are the inner shell's
    nsenter --net="/run/netns/$ns" unshare --uts sh -c 'hostname "$1" && exec slurmd -c -f "$2" -N "$1"' \
        sh "$host2" "$SLURM_CONF" || fail_daemons "slurmd of $host2 did not start in namespace $ns"
fi
waited=0
while :; do
    idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq "$nodes" ] && break
    if [ $waited -ge 60 ]; then
        states=$(sinfo -h -N -o '%N %T' 2>/dev/null | tr '\n' ' ')
        fail_daemons "$idle of $nodes node(s) idle after 60 s: ${states:-sinfo does not answer}"
    fi
    sleep 1
    waited=$((waited + 1))
done
echo "slurm: $nodes node(s) idle after $waited s"
exit 0
