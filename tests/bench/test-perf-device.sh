#!/bin/bash
# The weft benchmarks on device buffers (-g 1 where a device is usable; -B): each rank's
# buffers are device memory, its calls run on its stream, the data goes through host mirrors.
# Run on the emulated device (build/tests/bench/emu/<name>: tests/common/emudev.c, whose device
# memory the host cannot touch, so a benchmark that touched it would crash): AllReduce,
# ReduceScatter, Broadcast, AllGather and SendRecv on 2 and 3 ranks (threads, and processes
# under mpirun), every row checked (-c 1) and none wrong; a changed element on the device is
# reported (emu-wrong/, tests/bench/wrong_result.c); -B device without a device, and in an MPI
# baseline, is an error; -B host keeps host buffers.
#   tests/bench/test-perf-device.sh [BUILD]      exit 0 when every check passes
set -u
BUILD=${1:-build}
EMU=$BUILD/tests/bench/emu
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
for b in allreduce_perf reduce_scatter_perf broadcast_perf all_gather_perf sendrecv_perf; do
  [ -x "$EMU/$b" ] || { echo "test-perf-device: $EMU/$b not built (make tests)" >&2; exit 1; }
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
SIZES=(-b 8 -e 1M -f 4 -c 1 -n 2 -w 1)

ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 15; }
# run CMD...: into $tmp/out (stdout and stderr); sets rc.
run() { timeout 60 "$@" >"$tmp/out" 2>&1; rc=$?; }
has() { grep -q -- "$1" "$tmp/out"; }
# The values of the #wrong columns (found in the table's header, whose first field is "#"; N/A
# where there is no in-place form) over every table row, each once.
wrongs() {
  awk '$1 == "#" && $2 == "size" { n = 0; for (i = 3; i <= NF; i++) if ($i == "#wrong") col[n++] = i - 1 }
       $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ { for (j = 0; j < n; j++) print $(col[j]) }' "$tmp/out" |
    grep -v '^N/A$' | sort -u | tr '\n' ' '
}
nrows() { awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/' "$tmp/out" | wc -l; }
# 1M by factor 4 from 8: 8 32 ... 512K, nine rows per (type, op).
device_ok() { # NAME: exit 0, device buffers, nine rows, nothing wrong
  if [ "$rc" -eq 0 ] && has "# Buffers: device (emulated, GPU 0 of 1)" && has "share 1 GPU" &&
    [ "$(nrows)" -eq 9 ] && [ "$(wrongs)" = "0 " ]; then ok "$1: device buffers, $(nrows) rows, none wrong"
  else bad "$1: exit $rc, $(nrows) rows, #wrong '$(wrongs)'"; fi
}

for b in allreduce_perf reduce_scatter_perf broadcast_perf all_gather_perf sendrecv_perf; do
  for t in 2 3; do
    run "$EMU/$b" -t "$t" "${SIZES[@]}"
    device_ok "$b -t $t"
  done
done
run $MPIRUN -np 3 "$EMU/allreduce_perf" "${SIZES[@]}"
device_ok "mpirun -np 3 allreduce_perf"
run $MPIRUN -np 2 "$EMU/broadcast_perf" -t 2 -r 3 "${SIZES[@]}"
device_ok "mpirun -np 2 broadcast_perf -t 2 -r 3"
# nccl-tests' other loops on the stream: -m grouped calls, -z 1 / 2 / 3, per-iteration times.
for z in "-m 3" "-z 1" "-z 2" "-z 3 -I 1"; do
  # shellcheck disable=SC2086 # $z is two words on purpose
  run "$EMU/allreduce_perf" -t 2 $z "${SIZES[@]}"
  device_ok "allreduce_perf -t 2 $z"
done

# The mutation: rank 0's first result element, changed on the device after each call, must be
# the one wrong element of every column, and the run must fail.
WRONG=$BUILD/tests/bench/emu-wrong/allreduce_perf
run "$WRONG" -t 2 "${SIZES[@]}"
if [ "$rc" -ne 0 ] && has "# Buffers: device" && [ "$(nrows)" -eq 9 ] && [ "$(wrongs)" = "1 " ]; then
  ok "a changed element on the device: 1 wrong in every column, exit $rc"
else bad "a changed element on the device: exit $rc, #wrong '$(wrongs)'"; fi

# -B host: host buffers even where a device is.
run "$EMU/allreduce_perf" -t 2 -B host "${SIZES[@]}"
if [ "$rc" -eq 0 ] && has "# Buffers: host" && has "# Using host buffers: -B host" && [ "$(wrongs)" = "0 " ]; then
  ok "-B host: host buffers"
else bad "-B host: exit $rc"; fi

# This build's own runtime: without a device, auto says why and runs on host buffers, and
# -B device is an error that says why. (With a GPU both run on it.)
run "$BUILD/bench/allreduce_perf" -t 2 -b 8 -e 64 -f 8 -n 2 -w 1
if [ "$rc" -eq 0 ] && has "# Buffers: host" && has "# Using host buffers: "; then
  run "$BUILD/bench/allreduce_perf" -t 2 -B device -b 8 -e 64 -f 8 -n 2 -w 1
  if [ "$rc" -ne 0 ] && has "allreduce_perf: -B device: no usable device: " && [ "$(nrows)" -eq 0 ]; then
    ok "no device: host buffers with the reason; -B device: exit $rc with the reason"
  else bad "-B device without a device: exit $rc"; fi
elif [ "$rc" -eq 0 ] && has "# Buffers: device"; then ok "this build has a device: auto uses it"
else bad "allreduce_perf on this build: exit $rc"; fi

# MPI baselines stay on host buffers: -B device is refused, auto says host.
MPIB=$BUILD/bench/mpi_allreduce_perf
if [ -x "$MPIB" ]; then
  run $MPIRUN -np 2 "$MPIB" -B device -b 8 -e 64 -f 8 -n 2 -w 1
  if [ "$rc" -ne 0 ] && has "MPI baselines run on host buffers only"; then ok "mpi_allreduce_perf -B device: refused"
  else bad "mpi_allreduce_perf -B device: exit $rc"; fi
  run $MPIRUN -np 2 "$MPIB" -b 8 -e 64 -f 8 -n 2 -w 1
  if [ "$rc" -eq 0 ] && has "# Buffers: host" && has "MPI baselines time host memory only"; then ok "mpi_allreduce_perf: host buffers"
  else bad "mpi_allreduce_perf: exit $rc"; fi
else bad "$MPIB not built"; fi

echo "test-perf-device: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
