#!/bin/bash
# The default test suite (make check): unit tests, collective correctness (threads, processes,
# mixed), mpirun-launched runs, and a check that nothing is left in /dev/shm.
# Prints one closing line "check: N passed, N failed, N skipped" and exits non-zero on failure.
set -u
BUILD=${1:-build}
passed=0 failed=0 skipped=0
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers often forbid CMA for MPI

note() { printf '\n=== %s\n' "$*"; }

# Runs one Criterion binary and adds its Synthesis counts.
run_criterion() {
  local bin=$1 out
  note "$bin"
  out=$(mktemp)
  "$bin" --jobs 1 --verbose 2>&1 | tee "$out" | grep -E "^\[(----|FAIL|SKIP|====)\]|Synthesis|Assertion|failed|skipped" | tail -40
  local syn
  syn=$(grep -E "Synthesis" "$out" | tail -1)
  if [ -z "$syn" ]; then
    echo "no Criterion synthesis from $bin: counted as a failure"
    failed=$((failed + 1))
  else
    local p f c s
    p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$syn")
    f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$syn")
    c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$syn")
    s=$(grep -c "^\[SKIP\]" "$out" || true)
    passed=$((passed + p)); failed=$((failed + f + c)); skipped=$((skipped + s))
  fi
  rm -f "$out"
}

# Runs a command that must exit 0 and counts it as one test.
run_cmd() {
  local name=$1; shift
  note "$name: $*"
  if timeout 900 "$@"; then passed=$((passed + 1)); echo "PASS $name"
  else failed=$((failed + 1)); echo "FAIL $name (exit $?)"; fi
}

shm_before=$(ls /dev/shm | grep -c '^weft' || true)

for t in "$BUILD"/tests/unit/*; do [ -x "$t" ] && run_criterion "$t"; done
for t in "$BUILD"/tests/transport/*; do [ -x "$t" ] && run_criterion "$t"; done
for t in "$BUILD"/tests/coll/*; do [ -x "$t" ] && run_criterion "$t"; done
for t in "$BUILD"/tests/fault/*; do [ -x "$t" ] && run_criterion "$t"; done
# Faults across emulated hosts (network namespaces, root only; skipped with the reason otherwise)
for t in "$BUILD"/tests/net/*; do [ -x "$t" ] && run_criterion "$t"; done

for t in "$BUILD"/tests/mpi/*; do
  [ -x "$t" ] && run_cmd "mpirun -np 4 $(basename "$t")" $MPIRUN -np 4 "$t"
done
run_cmd "mpirun -np 4 allreduce_perf -c 1" $MPIRUN -np 4 "$BUILD/bench/allreduce_perf" -b 8 -e 8M -f 8 -c 1 -n 5 -w 1
run_cmd "elastic training example (docs/examples/elastic.c)" "$(dirname "$0")/run-elastic.sh" "$BUILD/examples/elastic"
run_cmd "packaging: exports, SONAME, install/uninstall (tests/pkg/run.sh)" "$(dirname "$0")/pkg/run.sh" "$BUILD"
run_cmd "allreduce_perf -t 3 -d all -o all" "$BUILD/bench/allreduce_perf" -t 3 -b 1K -e 64K -f 8 -d all -o all -c 1 -n 2 -w 1
run_cmd "allreduce_perf takes nccl-tests' flags" "$(dirname "$0")/bench/test-perf-flags.sh" "$BUILD"

# Ranks on several emulated hosts (network namespaces; needs root): 77 means skipped.
note "multi-host: tests/mpi/run-multihost.sh $BUILD"
mh_log=$(mktemp)
timeout 900 "$(dirname "$0")/mpi/run-multihost.sh" "$BUILD" 2>&1 | tee "$mh_log"
mh_rc=${PIPESTATUS[0]}
case $mh_rc in
  0) passed=$((passed + 1)); echo "PASS multi-host" ;;
  77) skipped=$((skipped + 1)); echo "SKIP multi-host: $(sed -n 's/^run-multihost: skipped: //p' "$mh_log" | tail -1)" ;;
  *) failed=$((failed + 1)); echo "FAIL multi-host (exit $mh_rc)" ;;
esac
rm -f "$mh_log"

shm_after=$(ls /dev/shm | grep -c '^weft' || true)
note "/dev/shm: $shm_before weft segments before the suite, $shm_after after"
if [ "$shm_after" -gt "$shm_before" ]; then
  failed=$((failed + 1)); ls -l /dev/shm | grep weft
else
  passed=$((passed + 1))
fi

echo
echo "check: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
