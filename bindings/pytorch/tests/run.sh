#!/bin/bash
# The PyTorch backend's tests (make check runs this when the backend is built): every
# collective, async and failures, DDP against gloo; then nothing of weft's left in /dev/shm.
# Usage: bindings/pytorch/tests/run.sh [BUILD]. Exit 0 when every test passed.
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3  # Debian's torch is for the system Python only
export PYTHONPATH="$(cd "$BUILD" && pwd)/pytorch${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1
rc=0
shm_before=$(ls /dev/shm | grep -c '^weft' || true)
for t in test_collectives test_async_failures test_ddp; do
  t0=$SECONDS
  if timeout -k 5 300 "$PY" -W ignore "$HERE/$t.py" 2>&1; then
    echo "PASS pytorch $t ($((SECONDS - t0)) s)"
  else
    echo "FAIL pytorch $t ($((SECONDS - t0)) s)"; rc=1
  fi
done
shm_after=$(ls /dev/shm | grep -c '^weft' || true)
if [ "$shm_after" -gt "$shm_before" ]; then
  echo "FAIL pytorch: $((shm_after - shm_before)) weft segments left in /dev/shm"; rc=1
else
  echo "PASS pytorch: nothing left in /dev/shm"
fi
exit $rc
