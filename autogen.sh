#!/bin/sh
# Generate ./configure and Makefile.in (needs autoconf and automake; tools/setup-debian.sh installs them).
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
autoreconf --install --force --warnings=all,no-portability "$@"
