#!/bin/bash
# make check-asan / make check-tsan: the test suite against a sanitizer build.
#   asan BUILD: every Criterion suite (unit, transport, fault, coll; the heaviest coll cases trimmed
#               by a --filter so it fits CI) and the mpirun runs, under AddressSanitizer +
#               UndefinedBehaviorSanitizer with leak detection.
#   tsan BUILD: Criterion's fork machinery cannot start under ThreadSanitizer, so the
#               multi-threaded paths run through tests/tsan/tsan_paths (ranks as threads of one
#               process and of processes on emulated hosts: every algorithm, hier included,
#               shm and tcp; non-blocking init and collectives; abort from another thread; the
#               signature notes of a mismatch and of a stuck rank, results checked) and
#               bench/allreduce_perf with ranks as threads.
# A failure is a failure: nothing is run again. Any sanitizer report fails the run, and so does
# a skip that does not name the capability this machine lacks. Prints
# "check-<kind>: N passed, N failed, N skipped" at the end.
set -u
kind=${1:?asan or tsan}
BUILD=${2:?build directory}
passed=0 failed=0 skipped=0
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

# A Criterion binary: passes when it exits 0 with no failing or crashing test, no sanitizer
# report and no unexplained skip.
run_criterion() {
  local bin=$1 out rc ok=1; shift
  out=$(mktemp)
  note "$bin $*"
  local start=$SECONDS
  timeout -k 10 1800 "$bin" --jobs 1 --verbose "$@" >"$out" 2>&1
  rc=$?
  grep -E "^\[(FAIL|SKIP)\]|Synthesis|ERROR: (Address|Leak|Thread)Sanitizer|runtime error|SUMMARY" "$out" | tail -40
  if grep -qE "Sanitizer|runtime error" "$out"; then ok=0; fi
  [ "$rc" -eq 0 ] && grep -q "Synthesis" "$out" || ok=0
  local line
  while IFS= read -r line; do
    if [[ "$line" == *"[needs "*"]"* ]]; then skipped=$((skipped + 1)); else ok=0; echo "unexplained skip: $line"; fi
  done < <(sed -n 's/^\[SKIP\] //p' "$out" | { if [ $# -gt 0 ]; then grep -v ': Test is disabled$'; else cat; fi; })
  # (with --filter, Criterion lists every test left out as "disabled")
  if [ "$ok" = 1 ]; then
    passed=$((passed + 1)); echo "PASS $(basename "$bin") ($((SECONDS - start)) s)"
  else
    failed=$((failed + 1)); echo "FAIL $(basename "$bin") (exit $rc, $((SECONDS - start)) s)"
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
               'new_shapes/threads_5' 'new_shapes/mixed_3x2' 'large/threads_8' 'back_to_back/*' \
               'emulated_hosts/hosts_2x2'; do
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
    [ "$(basename "$t")" = mpi_straggler_check ] && continue # needs a slowed link: run-multihost.sh
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
  run_cmd "tests/tsan/tsan_paths" "$BUILD/tests/tsan/tsan_paths"
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
echo "check-$kind: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
