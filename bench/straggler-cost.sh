#!/bin/sh
# The straggler report's cost at 8 B (docs/performance.md, "The straggler report at 8 B"):
# allreduce_perf of a build without the report (BASE, e.g. main before it), of this build with
# the report off, and with WEFT_STRAGGLER_REPORT=100, interleaved ROUNDS times per rank count;
# prints each variant's median time (out-of-place and in-place, us).
#   bench/straggler-cost.sh BASE_BUILD_DIR [ROUNDS] [RANKS...]
set -eu
BASE=$1; ROUNDS=${2:-9}; shift; [ $# -gt 0 ] && shift
RANKS=${*:-2 4}
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
run() { # variant ranks binary [env...]
  v=$1; np=$2; bin=$3; shift 3
  flock /tmp/weft-bench.lock env "$@" mpirun --allow-run-as-root --oversubscribe -np "$np" \
    "$bin" -b 8 -e 8 -n 200000 -w 5000 -c 0 | awk '$1 == 8 {print $6, $10}' >> "$OUT/$v.$np"
}
for np in $RANKS; do
  i=0
  while [ $i -lt "$ROUNDS" ]; do
    run base "$np" "$BASE/bench/allreduce_perf"
    run off "$np" "$HERE/build/bench/allreduce_perf" WEFT_STRAGGLER_REPORT=0
    run on "$np" "$HERE/build/bench/allreduce_perf" WEFT_STRAGGLER_REPORT=100
    i=$((i + 1))
  done
done
med() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "ranks variant median-oop-us median-ip-us min-oop max-oop"
for np in $RANKS; do
  for v in base off on; do
    f="$OUT/$v.$np"
    echo "$np $v $(cut -d' ' -f1 "$f" | med) $(cut -d' ' -f2 "$f" | med) $(cut -d' ' -f1 "$f" | sort -n | head -1) $(cut -d' ' -f1 "$f" | sort -n | tail -1)"
  done
done
rm -rf "$OUT"
