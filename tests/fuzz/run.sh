#!/bin/bash
# make fuzz: runs each libFuzzer target for a bounded time from its committed seed corpus
# (tests/fuzz/corpus/<target>/, read-only); new inputs go to <build>/corpus/<target>/, and a
# finding is written to <build>/crash-<target>-* and fails the run.
# Usage: tests/fuzz/run.sh BUILD SECONDS BIN...
set -u
build=$1 seconds=$2
shift 2
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for bin in "$@"; do
  t=$(basename "$bin")
  mkdir -p "$build/corpus/$t" "tests/fuzz/corpus/$t"
  log="$build/$t.log"
  start=$(date +%s)
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/crash-$t-" "$build/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "fuzz: $t: ${runs:-?} runs in $(($(date +%s) - start)) s, no finding"
  else
    failed=$((failed + 1))
    echo "fuzz: $t FAILED (exit $rc); log $log:"
    grep -E "ERROR|runtime error|SUMMARY|Test unit written|^    #[0-9]" "$log" | head -30
  fi
done
[ "$failed" -eq 0 ] || { echo "fuzz: $failed target(s) failed"; exit 1; }
