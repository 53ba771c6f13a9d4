#!/bin/bash
# tests/gpu/check.sh: issue 12's GPU check, one script for a machine with NVIDIA GPUs (the
# device machine: one H200, 16 cores; it must end within 8 minutes there).
#
#   tests/gpu/check.sh            (from any directory; the log and summary go to $OUT when set)
#
# It builds what it needs into build-gpu/ (never `make check`: no network there for
# install-deps.sh; packages the machine lacks can travel as .debs, see tests/gpu/fetch-debs.sh),
# then runs, failing a step on any "[needs gpu]" skip:
#   1. test_device (the runtime: memory, copies, events, the stream's flag wait, IPC across a
#      fork), test_cuda_reduce (every type x op x mode on the GPU against the host reductions,
#      bit for bit), test_redelem;
#   2. test_devcoll: every collective and Send/Recv, every type and op, counts 0 to 40009, in
#      place and out, on 1, 2, 4 and 8 processes sharing the GPUs there are; a kill -9 of one
#      of 4 ranks in the middle of its calls (every survivor gets weftRemoteError, its stream
#      goes on); the emulated-device suite as well;
#   3. devcopy_bw: device-to-device copy bandwidth (the reference);
#   4. allreduce_perf -g 1 -B device from 8 B to 1 GiB with 2 and 4 ranks (threads of one process),
#      stream-synchronised timing as nccl-tests';
# and prints a summary: each step's result and time, the 8-byte latency and the bus bandwidth
# at 256 MiB against the copy bandwidth.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
OUTDIR=${OUT:-/tmp}
LOG=$OUTDIR/gpu-check.log
: >"$LOG"
BUILD=build-gpu
JOBS=$(nproc)
START=$(date +%s)
SUMMARY=()
FAILED=0

say() { echo "$*" | tee -a "$LOG"; }

# step NAME CMD...: runs CMD with its output in the log; a "[needs gpu]" skip fails it too.
step() {
  local name=$1 t0 rc out
  shift
  t0=$(date +%s)
  out=$OUTDIR/step-$name.txt
  "$@" >"$out" 2>&1
  rc=$?
  cat "$out" >>"$LOG"
  if [ $rc -eq 0 ] && grep -q "needs gpu" "$out"; then rc=99; fi
  local verdict=PASS
  [ $rc -ne 0 ] && verdict="FAIL (rc $rc)" && FAILED=$((FAILED + 1))
  SUMMARY+=("$name: $verdict, $(($(date +%s) - t0)) s")
  say "== $name: $verdict"
  tail -3 "$out"
}

# Packages carried as .debs (tests/gpu/fetch-debs.sh): unpacked under /tmp/weft-debs.
useCarriedDebs() {
  ls .gpudeps/*.deb >/dev/null 2>&1 || return 0
  local d=/tmp/weft-debs
  mkdir -p $d
  for f in .gpudeps/*.deb; do dpkg -x "$f" $d; done
  local lib=$d/usr/lib/x86_64-linux-gnu
  export CPATH=$d/usr/include${CPATH:+:$CPATH}
  export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$lib/pkgconfig:$d/usr/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=$d
  say "using $(ls .gpudeps/*.deb | wc -l) carried packages from .gpudeps/"
}

say "weft GPU check, $(date -u), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi -L 2>&1 | tee -a "$LOG"
useCarriedDebs

TESTS="$BUILD/tests/unit/test_device $BUILD/tests/unit/test_cuda_reduce $BUILD/tests/unit/test_redelem \
  $BUILD/tests/coll/test_devcoll $BUILD/tests/tools/devcopy_bw $BUILD/tests/tools/caps"
step build make -j"$JOBS" BUILD=$BUILD lib $TESTS $BUILD/bench/allreduce_perf
step caps $BUILD/tests/tools/caps gpu
step device timeout 120 $BUILD/tests/unit/test_device --verbose
step reduce_kernels timeout 300 $BUILD/tests/unit/test_cuda_reduce --verbose
step redelem timeout 120 $BUILD/tests/unit/test_redelem
step devcoll timeout 400 $BUILD/tests/coll/test_devcoll --verbose
step devcopy timeout 60 $BUILD/tests/tools/devcopy_bw $((1 << 30)) 20
COPY_GBS=$(sed -n 's/^devcopy: .*: \([0-9.]*\) GB\/s$/\1/p' "$OUTDIR/step-devcopy.txt")

for n in 2 4; do
  step allreduce_perf_$n timeout 200 $BUILD/bench/allreduce_perf -t $n -g 1 -B device -b 8 -e 1G -f 2 -n 10 -w 3 -c 1
done

# ---- Summary ----
say ""
say "==== summary ($(($(date +%s) - START)) s) ===="
for line in "${SUMMARY[@]}"; do say "$line"; done
for n in 2 4; do
  f=$OUTDIR/step-allreduce_perf_$n.txt
  [ -f "$f" ] || continue
  # nccl-tests' table: size count type redop root time algbw busbw #wrong (out of place first)
  lat=$(awk '$1 == 8 {print $6; exit}' "$f")
  bus=$(awk '$1 == 268435456 {print $8; exit}' "$f")
  ratio=$(awk -v b="${bus:-0}" -v c="${COPY_GBS:-0}" -v n=$n 'BEGIN { if (c > 0) printf "%.3f", b / (c / n); else print "?" }')
  say "allreduce $n ranks: 8 B ${lat:-?} us (aim < 30); 256 MiB busbw ${bus:-?} GB/s; device copy ${COPY_GBS:-?} GB/s; busbw / (copy / ranks) = $ratio (aim >= 0.5)"
done
say "failed steps: $FAILED"
[ $FAILED -eq 0 ]
