#!/usr/bin/env bash
# make check-rdma: the verbs tests on Soft-RoCE in a throw-away QEMU VM (tests/rdma/rdma-vm-run,
# one boot per configuration: -n 2, two rxe devices over a veth pair; -n 1, one). Skips with
# "[needs qemu] ..." (exit 77) where the VM cannot run. The kernel package is downloaded into
# RDMA_VM_CACHE (default /tmp/weft-rdma-vm-cache) on first use. Prints a summary line per
# configuration and "check-rdma: N passed, N failed (S s)".
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-build}
export RDMA_VM_CACHE=${RDMA_VM_CACHE:-/tmp/weft-rdma-vm-cache}
# RDMA_FULL=1: the full sweeps (every type everywhere; tens of minutes under TCG).
[ -n "${RDMA_FULL:-}" ] && export WEFT_VERBS_TESTS_FULL=1
why=$("$BUILD/tests/tools/caps" qemu 2>&1)
if [ $? != 0 ]; then echo "check-rdma: skipped: [needs qemu] ${why#qemu: no: }"; exit 77; fi
if ! [ -x "$BUILD/tests/transport/test_verbs" ]; then
  echo "check-rdma: skipped: [needs rdma] weft was built without libibverbs/librdmacm (no $BUILD/tests/transport/test_verbs)"; exit 77
fi
start=$SECONDS passed=0 failed=0
for config in n2 n1; do
  t0=$SECONDS
  "$HERE/rdma-vm-run" -n "${config#n}" -t "${RDMA_VM_TIMEOUT:-1500}" "$HERE/run-in-vm.sh" "$BUILD" "$config"
  r=$?
  if [ $r = 125 ]; then echo "check-rdma: skipped: [needs qemu] the VM or its RDMA setup failed (rdma-vm-run exit 125)"; exit 77; fi
  if [ $r = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  echo "check-rdma: -n ${config#n}: $([ $r = 0 ] && echo PASS || echo "FAIL (exit $r)") ($((SECONDS - t0)) s)"
done
echo "check-rdma: $passed passed, $failed failed ($((SECONDS - start)) s)"
[ $failed = 0 ]
