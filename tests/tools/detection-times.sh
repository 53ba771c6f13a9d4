#!/bin/bash
# How long weft takes to notice a fault, as the tests measure it (WEFT_TEST_VERBOSE=1 makes
# them print each survivor's time): the figures behind docs/performance.md "Detection times"
# and behind the tests' bounds, which sit about 10 x above the worst of these.
#   tests/tools/detection-times.sh [BUILD] [REPS]     (default build, 3 runs of each test)
# Prints one line per kind of fault: samples, min, median, max in ms.
set -u
BUILD=${1:-build}
REPS=${2:-3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((i = 0; i < REPS; i++)); do
  for t in coll/test_faults coll/test_abort coll/test_init_death coll/test_mismatch_hosts fault/test_fault_inject; do
    WEFT_TEST_VERBOSE=1 "$BUILD/tests/$t" --jobs 1 --filter '*/*' >/dev/null 2>>"$log" || echo "detection-times: $t failed" >&2
  done
  WEFT_TEST_VERBOSE=1 "$BUILD/tests/unit/test_bootstrap" --jobs 1 --filter 'security/strangers*' >/dev/null 2>>"$log" ||
    echo "detection-times: test_bootstrap failed" >&2
done
awk '
  function add(k, v) { n[k]++; val[k, n[k]] = v + 0 }
  /^dead_peer .*, 4 per host/ && /rc 6 after/ { match($0, /after [0-9]+ ms/); add("dead rank, one host (test_faults)", substr($0, RSTART + 6, RLENGTH - 9)) }
  /^dead_peer .*, 2 per host/ && /rc 6 after/ { match($0, /after [0-9]+ ms/); add("dead rank, 2 emulated hosts x 2 (test_faults)", substr($0, RSTART + 6, RLENGTH - 9)) }
  /^stuck_peer / { match($0, /after [0-9]+ ms/); add("stopped rank, timeout 1500 ms (test_faults)", substr($0, RSTART + 6, RLENGTH - 9)) }
  /^mismatch .*rc 5 after/ { match($0, /after [0-9]+ ms/); add("mismatch, one host (test_faults)", substr($0, RSTART + 6, RLENGTH - 9)) }
  /^change [0-9]: rank .* rc 5 after/ { match($0, /after [0-9]+ ms/); add("mismatch, 2 emulated hosts (test_mismatch_hosts)", substr($0, RSTART + 6, RLENGTH - 9)) }
  /^abort: / { k = $0; sub(/: [0-9]+ ms$/, "", k); v = $0; sub(/.*: /, "", v); add(k " (test_abort)", v) }
  / rank [0-9]+ killed [0-9]+ ms into init: rank .* rc 6 after/ { match($0, /after -?[0-9]+ ms/); add("rank killed during init, remote error (test_init_death)", substr($0, RSTART + 6, RLENGTH - 9)) }
  /^fault: / { kind = $0 ~ /kill/ ? "kill" : $0 ~ /drop/ ? "drop" : "" }
  /^  rank [0-9]+: rc 6 after .* ms after the fault/ && kind == "kill" { match($0, /calls, -?[0-9]+ ms/); v = substr($0, RSTART + 7, RLENGTH - 10); add("injected kill mid-collective (test_fault_inject)", v) }
  /init [0-9]+ ms with strangers/ { match($0, /init [0-9]+ ms/); add("init with silent strangers at listeners (test_bootstrap)", substr($0, RSTART + 5, RLENGTH - 8)) }
  END {
    for (k in n) {
      m = n[k]
      for (i = 1; i <= m; i++) s[i] = val[k, i]
      for (i = 2; i <= m; i++) { x = s[i]; j = i - 1; while (j > 0 && s[j] > x) { s[j + 1] = s[j]; j-- } s[j + 1] = x }
      printf "%-60s %7d %6d %6d %6d\n", k, m, s[1], s[int((m + 1) / 2)], s[m]
    }
  }' "$log" | sort >"$log.table"
printf "%-60s %7s %6s %6s %6s\n" "fault (ms)" samples min median max
cat "$log.table"
rm -f "$log.table"
