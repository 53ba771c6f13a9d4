#!/bin/bash
# The default test suite (make check): the library's layering, unit tests, collective
# correctness (threads, processes, mixed), mpirun-launched runs, emulated hosts, and a check
# that nothing is left in /dev/shm.
# Prints one closing line "check: N passed, N failed, N skipped", after the list of skips with
# their reasons, and exits non-zero on failure.
#
# Nothing passes by accident:
# - every Criterion binary runs under an outer timeout (WEFT_TEST_BINARY_TIMEOUT, 1800 s) and
#   every test has a timeout of its own (checked below); the binary's exit status and its
#   Synthesis line must both say it passed;
# - a skip must name what this machine lacks ("[needs CAP]", tests/common/caps.h), else it is
#   a failure; build/tests/tools/caps probes CAP again, and with WEFT_TESTS_REQUIRE=all (CI) or
#   a comma list of CAPs, a skip whose capability this machine has, or that no probe can
#   confirm, is a failure too.
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
passed=0 failed=0 skipped=0
skips=() failures=()
REQUIRE=${WEFT_TESTS_REQUIRE:-}
BINARY_TIMEOUT=${WEFT_TEST_BINARY_TIMEOUT:-1800}
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMPI_MCA_btl_vader_single_copy_mechanism=none  # containers often forbid CMA for MPI

note() { printf '\n=== %s\n' "$*"; }
pass() { passed=$((passed + 1)); }
# The time each binary or command took, listed slowest first at the end (the suite has a budget).
times=()
took() { times+=("$(($SECONDS - $2)) s  $1"); echo "($(($SECONDS - $2)) s)"; }
fail() { failed=$((failed + 1)); failures+=("$*"); echo "FAIL $*"; }

required() { # CAP: whether WEFT_TESTS_REQUIRE asks for it
  [ "$REQUIRE" = all ] || [[ ",$REQUIRE," == *",$1,"* ]]
}

# The NVIDIA GPUs the kernel's driver lists. The gpu probe asks the library, whose runtime a
# build may lack: a GPU the machine has and the build cannot use is the build's fault, not the
# machine's, and under WEFT_TESTS_REQUIRE its skips fail.
kernel_gpus() {
  local n
  n=$(ls /proc/driver/nvidia/gpus 2>/dev/null | wc -l)
  [ "$n" -gt 0 ] && echo "$n NVIDIA GPU(s) in /proc/driver/nvidia/gpus"
}

# A skip of test NAME for REASON: a skip only if REASON names a capability this machine lacks
# (or, outside WEFT_TESTS_REQUIRE, one no probe knows); otherwise a failure.
judge_skip() {
  local name=$1 reason=$2 cap probe rc
  cap=$(sed -n 's/.*\[needs \([^]]*\)\].*/\1/p' <<<"$reason" | head -1)
  if [ -z "$cap" ]; then
    fail "$name: skipped without naming what this machine lacks: $reason"; return
  fi
  probe=$("$BUILD/tests/tools/caps" "$cap" 2>&1)
  rc=$?
  if [ $rc = 1 ] && [ "$cap" = gpu ] && required gpu && [ -n "$(kernel_gpus)" ]; then
    fail "$name: skipped for lack of a GPU the library can use, but the kernel has $(kernel_gpus) (WEFT_TESTS_REQUIRE=$REQUIRE; a build without CUDA, or a driver that does not start): $probe"
  elif [ $rc = 0 ] && required "$cap"; then
    fail "$name: skipped for lack of $cap, which this machine has (WEFT_TESTS_REQUIRE=$REQUIRE): $reason"
  elif [ $rc = 2 ] && required "$cap"; then
    fail "$name: skipped for lack of $cap, which no probe can confirm (WEFT_TESTS_REQUIRE=$REQUIRE): $reason"
  else
    skipped=$((skipped + 1))
    [ $rc = 0 ] && reason+=" (but the probe finds $cap here: WEFT_TESTS_REQUIRE=all would fail this)"
    skips+=("$name: $reason")
  fi
}

# Every Test / ParameterizedTest of the Criterion sources has a .timeout, its own or its
# suite's (TestSuite(name, .timeout = ...)), so a hang fails that test instead of the run.
check_timeouts() {
  local missing
  missing=$(awk '
    function flush(t) { for (t in pending) if (!(pending[t] in suite)) print t; for (t in pending) delete pending[t] }
    FNR == 1 { flush(); for (k in suite) delete suite[k] }
    /^[ \t]*TestSuite\(/ && /\.timeout/ { s = $0; sub(/^[ \t]*TestSuite\( */, "", s); sub(/[ ,)].*/, "", s); suite[s] = 1 }
    /^[ \t]*(Parameterized)?Test\(/ && !/\.timeout/ {
      s = $0; sub(/^[ \t]*(Parameterized)?Test\( */, "", s)
      if ($0 ~ /ParameterizedTest\(/) sub(/^[^,]*, */, "", s)
      sub(/[ ,].*/, "", s); pending[FILENAME ": " $0] = s
    }
    END { flush() }
  ' "$HERE"/unit/*.c "$HERE"/transport/*.c "$HERE"/coll/*.c "$HERE"/fault/test_*.c "$HERE"/net/*.c "$HERE"/sim/*.c)
  note "every Criterion test has a timeout"
  if [ -n "$missing" ]; then fail "tests without a timeout: $missing"; else pass; echo "PASS"; fi
}

# Runs one Criterion binary and adds its Synthesis counts; its exit status must agree.
run_criterion() {
  local bin=$1 out rc syn name
  name=$(basename "$bin")
  note "$bin"
  out=$(mktemp)
  local t0=$SECONDS
  timeout -k 10 "$BINARY_TIMEOUT" "$bin" --jobs 1 --verbose >"$out" 2>&1
  rc=$?
  grep -E "^\[(----|FAIL|SKIP|====)\]|Synthesis|Assertion|failed|skipped" "$out" | tail -40
  took "$name" $t0
  syn=$(grep -E "Synthesis" "$out" | tail -1)
  local p=0 f=0 c=0
  if [ -n "$syn" ]; then
    p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$syn")
    f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$syn")
    c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$syn")
  fi
  passed=$((passed + p))
  failed=$((failed + f + c))
  [ $((f + c)) -gt 0 ] && failures+=("$name: $f failing, $c crashing: $(sed -n 's/^\[FAIL\] \([^:]*::[^:]*\):.*/\1/p' "$out" | tr '\n' ' ')")
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    fail "$name: killed after $BINARY_TIMEOUT s (WEFT_TEST_BINARY_TIMEOUT)"
  elif [ -z "$syn" ]; then
    fail "$name: no Criterion synthesis (exit $rc)"
  elif [ "$rc" != 0 ] && [ $((f + c)) = 0 ]; then
    fail "$name: exit $rc although its synthesis counts no failure"
  fi
  local line
  while IFS= read -r line; do
    judge_skip "$name ${line%%: *}" "${line#*: }"
  done < <(sed -n 's/^\[SKIP\] //p' "$out")
  rm -f "$out"
}

# Runs a command that must exit 0 and counts it as one test.
run_cmd() {
  local name=$1 rc; shift
  note "$name: $*"
  local t0=$SECONDS
  timeout -k 10 900 "$@"
  rc=$?
  if [ $rc = 0 ]; then pass; echo "PASS $name"; else fail "$name (exit $rc)"; fi
  took "$name" $t0
}

shm_before=$(ls /dev/shm | grep -c '^weft' || true)
start=$SECONDS

check_timeouts
run_cmd "layering: calls run one way (tests/tools/layering.py)" "$HERE/tools/layering.py" "$BUILD"
for t in "$BUILD"/tests/unit/*; do [ -x "$t" ] && run_criterion "$t"; done
for t in "$BUILD"/tests/sim/*; do [ -x "$t" ] && run_criterion "$t"; done
for t in "$BUILD"/tests/transport/*; do [ -x "$t" ] && run_criterion "$t"; done
for t in "$BUILD"/tests/coll/*; do [ -x "$t" ] && run_criterion "$t"; done
for t in "$BUILD"/tests/fault/*; do [ -x "$t" ] && run_criterion "$t"; done
# Faults across emulated hosts (network namespaces, root only; skipped with the reason otherwise)
for t in "$BUILD"/tests/net/*; do [ -x "$t" ] && run_criterion "$t"; done

# Every MPI check that runs on one host with no arguments; mpi_straggler_check needs a slowed
# link between emulated hosts (run-multihost.sh, MULTIHOST_STRAGGLER_RATE), so not here.
for t in "$BUILD"/tests/mpi/*; do
  [ "$(basename "$t")" = mpi_straggler_check ] && continue
  [ -x "$t" ] && run_cmd "mpirun -np 4 $(basename "$t")" $MPIRUN -np 4 "$t"
done
run_cmd "mpirun -np 4 allreduce_perf -c 1" $MPIRUN -np 4 "$BUILD/bench/allreduce_perf" -b 8 -e 8M -f 8 -c 1 -n 5 -w 1
run_cmd "elastic training example (docs/examples/elastic.c)" "$HERE/run-elastic.sh" "$BUILD/examples/elastic"
for n in 1 3 4; do
  run_cmd "example broadcast_allgather $n ranks" "$BUILD/examples/broadcast_allgather" $n
  run_cmd "example sendrecv_ring $n ranks" "$BUILD/examples/sendrecv_ring" $n
done
# The PyTorch backend (bindings/pytorch), built by make when torch is installed.
if compgen -G "$BUILD/pytorch/weft_torch/_C*.so" > /dev/null; then
  run_cmd "pytorch backend (bindings/pytorch/tests/run.sh)" "$HERE/../bindings/pytorch/tests/run.sh" "$BUILD"
else
  judge_skip "pytorch backend" "[needs torch] python3-torch, libtorch-dev and pybind11-dev (install-deps.sh) are not all installed, so make did not build the backend"
fi
run_cmd "packaging: exports, SONAME, install/uninstall (tests/pkg/run.sh)" "$HERE/pkg/run.sh" "$BUILD"
run_cmd "allreduce_perf -t 3 -d all -o all" "$BUILD/bench/allreduce_perf" -t 3 -b 1K -e 64K -f 8 -d all -o all -c 1 -n 2 -w 1
run_cmd "allreduce_perf takes nccl-tests' flags" "$HERE/bench/test-perf-flags.sh" "$BUILD"
run_cmd "*_perf on device buffers (emulated device)" "$HERE/bench/test-perf-device.sh" "$BUILD"

# Ranks on several emulated hosts (network namespaces; needs root): 77 means skipped.
note "multi-host: tests/mpi/run-multihost.sh $BUILD"
mh_log=$(mktemp)
mh_t0=$SECONDS
timeout -k 10 900 "$HERE/mpi/run-multihost.sh" "$BUILD" 2>&1 | tee "$mh_log"
mh_rc=${PIPESTATUS[0]}
took "multi-host" $mh_t0
case $mh_rc in
  0) pass; echo "PASS multi-host" ;;
  77) judge_skip "multi-host" "$(sed -n 's/^run-multihost: skipped: //p' "$mh_log" | tail -1)" ;;
  *) fail "multi-host (exit $mh_rc)" ;;
esac
rm -f "$mh_log"

# The verbs tests on Soft-RoCE in a QEMU VM (make check-rdma): 77 means skipped.
note "rdma: tests/rdma/check-rdma.sh $BUILD"
rdma_log=$(mktemp)
rdma_t0=$SECONDS
timeout -k 10 1200 "$HERE/rdma/check-rdma.sh" "$BUILD" 2>&1 | tee "$rdma_log"
rdma_rc=${PIPESTATUS[0]}
took "check-rdma" $rdma_t0
case $rdma_rc in
  0) pass; echo "PASS check-rdma" ;;
  77) judge_skip "check-rdma" "$(sed -n 's/^check-rdma: skipped: //p' "$rdma_log" | tail -1)" ;;
  *) fail "check-rdma (exit $rdma_rc)" ;;
esac
rm -f "$rdma_log"

shm_after=$(ls /dev/shm | grep -c '^weft' || true)
note "/dev/shm: $shm_before weft segments before the suite, $shm_after after"
if [ "$shm_after" -gt "$shm_before" ]; then
  fail "/dev/shm: $((shm_after - shm_before)) weft segments left"; ls -l /dev/shm | grep weft
else
  pass
fi

echo
echo "slowest:"
printf '%s\n' "${times[@]}" | sort -rn | head -12 | sed 's/^/  /'
for s in "${skips[@]}"; do echo "skipped: $s"; done
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "check: $passed passed, $failed failed, $skipped skipped ($((SECONDS - start)) s${REQUIRE:+, WEFT_TESTS_REQUIRE=$REQUIRE})"
[ "$failed" -eq 0 ]
