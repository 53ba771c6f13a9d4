#!/bin/bash
# make check-asan / make check-tsan: the test suite against a sanitizer build.
#   asan BUILD: every Criterion suite (unit, transport, fault, coll; the heaviest coll cases trimmed
#               by a --filter so it fits CI) and the mpirun runs, under AddressSanitizer +
#               UndefinedBehaviorSanitizer with leak detection.
#   tsan BUILD: Criterion's fork machinery cannot start under ThreadSanitizer, so the
#               multi-threaded paths run through bench/allreduce_perf with ranks as threads:
#               every algorithm, shm and tcp, and ranks on emulated hosts (WEFT_HOSTID).
# Any sanitizer report fails the run. Prints "check-<kind>: N passed, N failed" at the end.
set -u
kind=${1:?asan or tsan}
BUILD=${2:?build directory}
passed=0 failed=0
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
note() { printf '\n=== %s\n' "$*"; }

run_cmd() {
  local name=$1; shift
  note "$name: $*"
  local start=$SECONDS
  timeout 900 "$@"
  local rc=$?
  if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); echo "PASS $name ($((SECONDS - start)) s)"
  else failed=$((failed + 1)); echo "FAIL $name (exit $rc, $((SECONDS - start)) s)"; fi
}

# A Criterion binary: passes when it exits 0 with no failing or crashing test and no sanitizer
# report. A failure without any report (a timing assertion: sanitized code runs several times
# slower) is run once more; a sanitizer report is never retried.
criterion_once() {
  local out=$1; shift
  "$@" >"$out" 2>&1
  local rc=$?
  grep -E "^\[(FAIL|SKIP)\]|Synthesis|ERROR: (Address|Leak)Sanitizer|runtime error|SUMMARY" "$out" | tail -40
  if grep -qE "Sanitizer|runtime error" "$out"; then return 2; fi
  [ "$rc" -eq 0 ] && grep -q "Synthesis" "$out"
}

run_criterion() {
  local bin=$1; shift
  local out status
  out=$(mktemp)
  note "$bin $*"
  local start=$SECONDS
  criterion_once "$out" "$bin" --jobs 1 "$@"
  status=$?
  if [ "$status" -eq 1 ]; then
    grep -E "^\[----\] .*[^ ]|^[^[]" "$out" | grep -v "^\[----\] Criterion" | head -30
    local tests
    tests=$(sed -n 's/^\[FAIL\] \([^:]*\)::\([^:]*\):.*/\1\/\2/p' "$out")
    if [ -n "$tests" ]; then
      status=0
      local one
      for one in $tests; do
        echo "(no sanitizer report: running $one once more)"
        criterion_once "$out" "$bin" --jobs 1 --filter "$one" || { status=$?; break; }
      done
    fi
  fi
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1)); echo "PASS $(basename "$bin") ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1)); echo "FAIL $(basename "$bin") ($((SECONDS - start)) s)"
    grep -E "^\[----\] .*[^ ]|^[^[]" "$out" | grep -v "^\[----\] Criterion" | head -60
  fi
  rm -f "$out"
}

case $kind in
asan)
  # Criterion's workers inherit these; a report makes the test crash, and so fail.
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=66:detect_stack_use_after_return=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export LSAN_OPTIONS=${LSAN_OPTIONS:-}
  for t in "$BUILD"/tests/unit/* "$BUILD"/tests/transport/* "$BUILD"/tests/fault/*; do
    [ -x "$t" ] && run_criterion "$t"
  done
  for t in "$BUILD"/tests/coll/*; do
    [ -x "$t" ] || continue
    if [ "$(basename "$t")" = test_allreduce ]; then
      # The full matrix takes too long sanitized: a thread, a process and a mixed shape of
      # every type and op, the 10,000 back-to-back calls, and emulated hosts.
      for f in 'every_type_op/threads_3' 'every_type_op/procs_2' 'every_type_op/mixed_2x2' \
               'large/threads_8' 'back_to_back/*' 'emulated_hosts/hosts_2x2'; do
        run_criterion "$t" --filter "$f"
      done
    else
      run_criterion "$t"
    fi
  done
  # Open MPI leaks in MPI_Init/MPI_Finalize and its unloaded plugins (unsymbolizable), so
  # leak detection is off in processes that mpirun starts; the same weft code runs with it on
  # in the Criterion suites above and in allreduce_perf with ranks as threads below.
  MPI_ASAN="ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}"
  for t in "$BUILD"/tests/mpi/*; do
    [ -x "$t" ] && run_cmd "mpirun -np 4 $(basename "$t")" $MPIRUN -np 4 -x "$MPI_ASAN" -x UBSAN_OPTIONS "$t"
  done
  run_cmd "mpirun -np 4 allreduce_perf" $MPIRUN -np 4 -x "$MPI_ASAN" -x UBSAN_OPTIONS \
    "$BUILD/bench/allreduce_perf" -b 8 -e 1M -f 8 -c 1 -n 2 -w 1
  run_cmd "allreduce_perf -t 4 (leaks checked)" "$BUILD/bench/allreduce_perf" -t 4 -b 8 -e 1M \
    -f 8 -c 1 -n 2 -w 1
  run_cmd "allreduce_perf -t 3 -d all -o all (leaks checked)" "$BUILD/bench/allreduce_perf" -t 3 \
    -b 1K -e 64K -f 8 -d all -o all -c 1 -n 1 -w 0
  ;;
tsan)
  export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
  perf="$BUILD/bench/allreduce_perf"
  args=(-t 4 -b 8 -e 1M -f 16 -c 1 -n 2 -w 1)
  for algo in ring direct tree; do
    run_cmd "WEFT_ALGO=$algo" env WEFT_ALGO=$algo "$perf" "${args[@]}"
  done
  run_cmd "tuner, every type and op" "$perf" -t 3 -b 1K -e 64K -f 8 -d all -o all -c 1 -n 1 -w 0
  for algo in ring tree; do
    run_cmd "WEFT_TRANSPORTS=tcp WEFT_ALGO=$algo" env WEFT_TRANSPORTS=tcp WEFT_ALGO=$algo "$perf" "${args[@]}"
  done
  ;;
*) echo "usage: $0 asan|tsan BUILD" >&2; exit 2 ;;
esac

echo
echo "check-$kind: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
