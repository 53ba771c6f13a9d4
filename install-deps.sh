#!/bin/sh
# Installs the Debian packages weft needs to build, test and benchmark. Idempotent; run as root.
set -e
PKGS="build-essential pkg-config clang libclang-rt-14-dev libhwloc-dev libcriterion-dev openmpi-bin libopenmpi-dev libsodium-dev iproute2 procps iperf3 gdb python3 python3-matplotlib python3-torch libtorch-dev pybind11-dev libucx-dev libibverbs-dev librdmacm-dev ibverbs-providers rdma-core ibverbs-utils qemu-system-x86 busybox-static kmod cpio"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q $missing
