#!/bin/bash
# tests/gpu/fetch-debs.sh: downloads, here (a Debian machine with its archive reachable), the
# packages tests/gpu/check.sh needs that a machine without network may lack (Criterion, hwloc,
# libsodium and what they link), into .gpudeps/ at the repository's root, which git ignores
# (.git/info/exclude) and the device tool carries (`carry: [".gpudeps"]`); check.sh unpacks
# them under /tmp/weft-debs. About 5 MiB.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
grep -qx '/.gpudeps/' .git/info/exclude 2>/dev/null || echo '/.gpudeps/' >>.git/info/exclude
mkdir -p .gpudeps
cd .gpudeps
apt-get download libcriterion3 libcriterion-dev libboxfort-dev libnanomsg5 libnanomsg-dev \
  libgit2-1.5 libhttp-parser2.9 libmbedtls14 libmbedx509-1 libmbedcrypto7 libssh2-1 libffi8 \
  libhwloc15 libhwloc-dev libnuma1 libnuma-dev libltdl7 libsodium23 libsodium-dev
ls -1 | wc -l
du -sh .
