#!/bin/sh
# SPDX-License-Identifier: MIT
# apt-get install PKG... leaving no new service running or enabled at boot.  Debian's maintainer
# scripts enable and start the daemons of what they install (munge, slurmctld and slurmd for
# slurm-wlm and munge); SlideDP wants them only for tests/slurm/, which starts private daemons of
# its own and stops them.  While installing, policy-rc.d forbids starting any service; afterwards
# every systemd unit and init script of a package that was not installed before (dependencies
# included) is disabled at boot and stopped.  Services of packages already installed are left as
# they are.  Root only; exit status: apt-get's.
#   usage: apt-install-no-services.sh PKG...
set -u
[ $# -gt 0 ] || { echo "usage: $0 PKG..." >&2; exit 2; }
export PATH="$PATH:/usr/sbin:/sbin"
installed() { dpkg-query -W -f='${Package} ${Status}\n' 2>/dev/null | sed -n 's/ install ok installed$//p' | sort; }
before=$(mktemp) || exit 1
installed > "$before"

# invoke-rc.d asks policy-rc.d before it starts a service; 101: not allowed (only where none exists)
policy=/usr/sbin/policy-rc.d
own_policy=0
trap 'rm -f "$before"; [ "$own_policy" = 0 ] || rm -f "$policy"' EXIT
trap 'exit 1' INT TERM HUP
if [ ! -e "$policy" ] && printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy"; then
    own_policy=1
fi
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
rc=$?

new=$(installed | comm -13 "$before" -)
units=$(for p in $new; do dpkg -L "$p" 2>/dev/null; done |
    sed -n 's|^\(/usr\)\{0,1\}/lib/systemd/system/\([^/@]*\)\.service$|\2|p; s|^/etc/init\.d/\([^/]*\)$|\1|p' |
    sort -u)
systemd=0
[ -d /run/systemd/system ] && systemd=1
for name in $units; do
    echo "apt-install-no-services: $name: left disabled at boot and stopped"
    if command -v systemctl > /dev/null 2>&1; then
        systemctl disable "$name.service" > /dev/null 2>&1
        [ "$systemd" = 0 ] || systemctl stop "$name.service" > /dev/null 2>&1
    fi
    if [ -x "/etc/init.d/$name" ]; then
        command -v update-rc.d > /dev/null 2>&1 && update-rc.d "$name" disable > /dev/null 2>&1
        [ "$systemd" = 1 ] || "/etc/init.d/$name" stop > /dev/null 2>&1
    fi
done
exit $rc
