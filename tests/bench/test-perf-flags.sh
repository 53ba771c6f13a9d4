#!/bin/bash
# The benchmarks take what nccl-tests scripts pass (-N -T -J -u -S -C -I -K -M -z -c, and -G -R
# -y -x -D -V with a note), each with its effect checked on allreduce_perf; and a size range that
# holds no element of the datatype is an error, not an empty table that passes. Then every
# collective's benchmark: its table, its results and a wrong result reported, its MPI baseline;
# and bench/plot.py on a canned input. Short runs: 2 or 3 ranks as threads (processes under
# mpirun for the MPI baselines and -T on a hung rank), a few small sizes, -n 2 -w 1.
#   tests/bench/test-perf-flags.sh [BUILD]      exit 0 when every check passes
set -u
BUILD=${1:-build}
PERF=$BUILD/bench/allreduce_perf
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
[ -x "$PERF" ] || { echo "test-perf-flags: $PERF not built (make benches)" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 15; }
# perf ARGS...: runs the benchmark with 2 threads into $tmp/out (stdout and stderr); sets rc.
perf() { timeout 120 "$PERF" -t 2 -n 2 -w 1 "$@" >"$tmp/out" 2>&1; rc=$?; }
# Table rows (size and count are numbers) of $tmp/out.
rows() { awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/' "$tmp/out"; }
nrows() { rows | wc -l; }
has() { grep -q -- "$1" "$tmp/out"; }
json() { python3 - "$@"; } # a python check script on stdin, args after

# -b 3 -e 3 -d float: no size holds a float; before, an empty table that passed.
perf -b 3 -e 3 -d float
if [ "$rc" -ne 0 ] && has "no size from minbytes (-b) 3 to maxbytes (-e) 3 holds one float element" && [ "$(nrows)" -eq 0 ]; then
  ok "-b 3 -e 3 -d float: exit $rc with a message"
else bad "-b 3 -e 3 -d float: exit $rc, want non-zero and a message"; fi
perf -b 3 -e 3 -d float -i 1
[ "$rc" -ne 0 ] && ok "-b 3 -e 3 -i 1 -d float: exit $rc" || bad "-b 3 -e 3 -i 1 -d float: exit $rc"
# ... but with -d all, the types that fit run and the others are noted.
perf -b 1 -e 3 -d all -o sum
if [ "$rc" -eq 0 ] && [ "$(nrows)" -eq 2 ] && has "holds one float (4 bytes): skipped"; then
  ok "-b 1 -e 3 -d all: int8 and uint8 rows, the others noted"
else bad "-b 1 -e 3 -d all: exit $rc, $(nrows) rows"; fi

# -N 2: the sweep twice; -N 0: until killed.
perf -b 8 -e 512 -f 4 -N 2
sizes=$(rows | awk '{ print $1 }' | tr '\n' ' ')
if [ "$rc" -eq 0 ] && [ "$sizes" = "8 32 128 512 8 32 128 512 " ]; then ok "-N 2: the table twice"
else bad "-N 2: exit $rc, sizes '$sizes'"; fi
timeout 3 "$PERF" -t 2 -b 8 -e 8 -n 1 -w 0 -N 0 >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 124 ] && [ "$(nrows)" -gt 2 ]; then ok "-N 0: still measuring when killed ($(nrows) rows)"
else bad "-N 0: exit $rc, $(nrows) rows"; fi

# -J: nccl-tests' JSON (layout version 3), one result per row; an existing file is kept.
perf -b 8 -e 1K -f 4 -J "$tmp/r.json" -I 1 -A 1
if [ "$rc" -eq 0 ] && python3 -m json.tool "$tmp/r.json" >/dev/null &&
  json "$tmp/r.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["results"]
assert [x["size"] for x in r] == [8, 32, 128, 512], r
assert all(x["type"] == "float" and x["redop"] == "sum" and x["algo"] for x in r)
for x in r:
    for p in ("out_of_place", "in_place"):
        assert x[p]["nwrong"] == 0 and x[p]["time"] > 0 and "bus_bw" in x[p], x[p]
        assert len(x[p + "_per_iter"]["times_us"]) == 2, x
assert d["config"]["iterations"] == 2 and len(d["config"]["devices"]) == 2, d["config"]
assert d["out_of_bounds"]["count"] == 0 and d["errors"] == [] and d["end_time"]
PY
then ok "-J: valid JSON with one result per size"
else bad "-J: exit $rc, $(head -c 300 "$tmp/r.json" 2>&1)"; fi
perf -b 8 -e 8 -J "$tmp/r.json"
if [ "$rc" -eq 0 ] && has "Writing JSON output to $tmp/r.json.0" && json "$tmp/r.json" "$tmp/r.json.0" <<'PY'
import json, sys
assert len(json.load(open(sys.argv[1]))["results"]) == 4
assert len(json.load(open(sys.argv[2]))["results"]) == 1
PY
then ok "-J to an existing file: FILE.0, FILE kept"
else bad "-J to an existing file: exit $rc"; fi
perf -b 8 -e 8 -J "$tmp/r.txt"
if [ "$rc" -eq 0 ] && has "only .json output files" && [ ! -e "$tmp/r.txt" ]; then ok "-J r.txt: a note, no file"
else bad "-J r.txt: exit $rc"; fi

# -T: a collective longer than the timeout ends the run with exit 4 (nccl-tests' testTimeout),
# the JSON file still valid; a generous timeout changes nothing.
perf -b 1M -e 1M -T 0.000001 -J "$tmp/t.json"
if [ "$rc" -eq 4 ] && has "Test timeout" && json "$tmp/t.json" <<'PY'
import json, sys
assert "Test timeout" in json.load(open(sys.argv[1]))["errors"][0]
PY
then ok "-T 0.000001: exit 4, 'Test timeout', JSON closed"
else bad "-T 0.000001: exit $rc"; fi
perf -b 8 -e 64 -f 8 -T 100
[ "$rc" -eq 0 ] && [ "$(nrows)" -eq 2 ] && ok "-T 100: runs as without" || bad "-T 100: exit $rc"
# "# Links": each rank's transport to the others and what it uses for it.
perf -b 8 -e 8
if [ "$rc" -eq 0 ] && has "^#  Rank  0 shm to 1$" && has "^#  Rank  1 shm to 1$"; then
  ok "# Links: shm to 1 on both ranks"
else bad "# Links on one host: exit $rc"; fi
WEFT_TRANSPORTS=tcp perf -b 8 -e 8
if [ "$rc" -eq 0 ] && has "^#  Rank  1 tcp to 1 ([^ ]* [0-9a-f.:]*)$"; then
  ok "# Links with WEFT_TRANSPORTS=tcp: the interface and address"
else bad "# Links with WEFT_TRANSPORTS=tcp: exit $rc"; fi
# A rank that stops (SIGSTOP) leaves its peer hanging, in a collective or in the benchmark's own
# barrier: the watchdog ends the job.
if command -v mpirun >/dev/null; then
  $MPIRUN -np 2 timeout -k 5 60 "$PERF" -b 8 -e 8 -n 1000 -w 1 -N 0 -T 1 >"$tmp/out" 2>&1 &
  job=$!
  for _ in $(seq 300); do [ "$(nrows)" -gt 0 ] && break; sleep 0.1; done
  pid=$(sed -n 's/^#  Rank  1 Group  0 Pid *\([0-9]*\) .*/\1/p' "$tmp/out")
  t0=$(date +%s)
  [ -n "$pid" ] && kill -STOP "$pid"
  wait "$job"
  rc=$? took=$(($(date +%s) - t0))
  [ -n "$pid" ] && kill -CONT "$pid" 2>/dev/null
  if [ -n "$pid" ] && [ "$rc" -ne 0 ] && [ "$took" -le 20 ] && has "Test timeout (1s): rank 0: "; then
    ok "-T 1 with a stopped rank: rank 0 ends the job (exit $rc after ${took}s)"
  else bad "-T 1 with a stopped rank (pid '$pid'): exit $rc after ${took}s"; fi
else echo "skip -T with a stopped rank: no mpirun"; fi

# -u 3: buffers start 3 elements past their alignment (seen at the call), results still right.
perf -b 8 -e 64K -f 8 -u 3 -d all -o all
if [ "$rc" -eq 0 ] && has "unalign: 3" && has "Out of bounds values : 0 OK" && [ "$(nrows)" -gt 20 ]; then
  ok "-u 3 -d all -o all: right results"
else bad "-u 3: exit $rc"; fi
# The addresses are read from the call's first two arguments, in x86-64's registers. gdb is
# installed by install-deps.sh, so its absence is a failure, not a skip.
if [ "$(uname -m)" != x86_64 ]; then echo "skip -u alignment at the call: not x86_64 (registers)"
elif ! command -v gdb >/dev/null; then bad "-u alignment at the call: no gdb (install-deps.sh installs it)"
else
  for case in "0 float 0" "3 float 12" "3 double 24" "5 int8 5"; do
    set -- $case
    got=$(timeout 60 gdb -q -batch -ex 'break *weftAllReduce' -ex run \
      -ex 'printf "align %lu %lu\n", $rdi % 64, $rsi % 64' -ex kill \
      --args "$PERF" -t 1 -b 64 -e 64 -n 1 -w 0 -c 0 -u "$1" -d "$2" 2>/dev/null | sed -n 's/^align //p')
    [ "$got" = "$3 $3" ] && ok "-u $1 -d $2: send and recv at $3 mod 64" || bad "-u $1 -d $2: '$got', want '$3 $3'"
  done
fi

# -S: a timestamp ends each row; -C: the time columns are CPU time.
perf -b 8 -e 64 -f 8 -S 1
if [ "$rc" -eq 0 ] && [ "$(rows | grep -c -E ' [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$')" -eq 2 ] && has "timestamp"; then
  ok "-S 1: a timestamp on every row"
else bad "-S 1: exit $rc"; fi
perf -b 8 -e 64 -f 8 -C 1 -J "$tmp/c.json"
if [ "$rc" -eq 0 ] && grep -q "^# *size .* cputime .* cputime" "$tmp/out" && [ "$(nrows)" -eq 2 ] &&
  json "$tmp/c.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
assert all("cpu_time" in x["out_of_place"] and "time" not in x["out_of_place"] for x in r), r
PY
then ok "-C 1: cputime columns"
else bad "-C 1: exit $rc"; fi

# -I: i_min i_max i_p99 i_cv% after each placement; -K leaves leading iterations out.
perf -b 8 -e 64 -f 8 -n 4 -I 1 -K 2 -J "$tmp/i.json"
if [ "$rc" -eq 0 ] && has "i_min" && [ "$(rows | awk '{ print NF }' | sort -u)" = 21 ] &&
  json "$tmp/i.json" <<'PY'
import json, sys
for x in json.load(open(sys.argv[1]))["results"]:
    s = x["in_place_per_iter"]
    assert s["skipped_iterations"] == 2 and len(s["times_us"]) == 4, s
    t = s["times_us"][2:]
    assert abs(s["min_us"] - min(t)) < 1e-3 and abs(s["max_us"] - max(t)) < 1e-3, s
PY
then ok "-I 1 -K 2: per-iteration columns and statistics"
else bad "-I 1 -K 2: exit $rc"; fi
perf -b 8 -e 8 -K 1
[ "$rc" -eq 0 ] && has "requires per-iteration timing (-I 1). Disabling." && ok "-K without -I: noted, disabled" || bad "-K without -I: exit $rc"

# -M: a memory report; what the benchmark allocated is exact: 2 ranks x 2 x (1 MiB + 64).
perf -b 1M -e 1M -M 1
if [ "$rc" -eq 0 ] && has "# Host memory usage    : Initialization .* | User-Allocated 4.00 MB | Collective .* | Total"; then
  ok "-M 1: memory report"
else bad "-M 1: exit $rc"; fi

# nccl-tests' -z 0..3 and -c N.
perf -b 8 -e 64 -f 8 -z 3 -c 3
if [ "$rc" -eq 0 ] && has "after each outer iteration (-n); time excludes barrier" && [ "$(nrows)" -eq 2 ]; then
  ok "-z 3 -c 3"
else bad "-z 3 -c 3: exit $rc"; fi
perf -b 8 -e 64 -f 8 -z 2
[ "$rc" -eq 0 ] && has "no barrier" && ok "-z 2" || bad "-z 2: exit $rc"

# Flags without a meaning on host buffers: accepted, one line each, and the run goes on.
for f in "G 4:no CUDA graphs" "R 1:no buffer registration" "R 2:no buffer registration" "y 1:no streams" \
  "x 1:no CTAs" "D 1:no device implementation" "V 8:no device implementation"; do
  flag=${f%%:*} note=${f#*:}
  perf -b 8 -e 64 -f 8 -${flag% *} "${flag#* }"
  if [ "$rc" -eq 0 ] && [ "$(grep -c -- "^# -${flag% *} ${flag#* }: $note" "$tmp/out")" -eq 1 ] && [ "$(nrows)" -eq 2 ]; then
    ok "-$flag: a note, then the table"
  else bad "-$flag: exit $rc"; fi
done
# Long options, as nccl-tests spells them.
perf --minbytes 8 --maxbytes 8 --run_cycles 2 --report_timestamps 1 --unalign 1 --cudagraph 1 \
  --local_register 1 --stream_null 1 --cta_policy 0 --memory 1 --per_iter_timing 1 --per_iter_skip 1 \
  --report_cputime 1 --timeout 60 --blocking 3 --check 2 --output_file "$tmp/l.json"
[ "$rc" -eq 0 ] && [ "$(nrows)" -eq 2 ] && python3 -m json.tool "$tmp/l.json" >/dev/null &&
  ok "long options" || bad "long options: exit $rc"

# The MPI baseline shares the driver: -J and -I over 2 processes.
if command -v mpirun >/dev/null && [ -x "$BUILD/bench/mpi_allreduce_perf" ]; then
  timeout 120 $MPIRUN -np 2 "$BUILD/bench/mpi_allreduce_perf" -b 8 -e 64 -f 8 -n 2 -w 1 -I 1 -J "$tmp/m.json" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ] && json "$tmp/m.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["results"]) == 2 and len(d["config"]["devices"]) == 2
assert all(len(x["out_of_place_per_iter"]["per_process_max_times_us"]) == 2 for x in d["results"])
PY
  then ok "mpi_allreduce_perf -J -I under mpirun"
  else bad "mpi_allreduce_perf -J -I: exit $rc"; fi
fi

# Every collective's benchmark, over 2 and 3 ranks (threads) with -c 1: the table has nccl-tests'
# columns; size and count follow nccl-tests' convention (AllGather, ReduceScatter, AlltoAll,
# Gather, Scatter: size is the whole n-part buffer, count a rank's part of size / n rounded
# down to 16 bytes); redop is "none" where nothing is reduced; root is -1, or with -r all every
# rank in turn; busbw / algbw is the bus factor and algbw is size / time; the in-place columns
# are N/A where the collective has no in-place form. The same benchmark with tests/bench/
# wrong_result.c linked in (rank 0's first element changed after each call) must report
# exactly 1 wrong element in every checked column and exit 1. The MPI baseline under mpirun
# must pass the same checks and give the same rows. weft 0: no weft benchmark, only the MPI
# baseline.
#   name            size   busbw factor  redop  rooted  in place  weft
colls="allreduce       whole  2*(n-1)/n     sum    0       1         1
broadcast       whole  1             none   1       1         1
reduce          whole  1             sum    1       1         1
all_gather      parts  (n-1)/n       none   0       1         1
reduce_scatter  parts  (n-1)/n       sum    0       1         1
alltoall        parts  (n-1)/n       none   0       0         1
gather          parts  (n-1)/n       none   1       1         1
scatter         parts  (n-1)/n       none   1       1         1
sendrecv        whole  1             sum    0       0         1"
# table FILE.json SIZE FACTOR REDOP ROOTED INPLACE N: the JSON rows against the above.
table() {
  json "$@" <<'PY'
import json, sys
path, size, factor, redop, rooted, inplace, n = sys.argv[1:8]
rooted, inplace, n = int(rooted), int(inplace), int(n)
f = eval(factor, {"n": n})
rows = json.load(open(path))["results"]
want = []
for root in (range(n) if rooted else [-1]):
    for total in (1024, 4096, 16384):
        count = total // 4
        if size == "parts":
            count = (count // n) & ~3  # 16 bytes of floats
            total = count * n * 4
        want.append((total, count, "float", redop, str(root)))
got = [(r["size"], r["count"], r["type"], r["redop"], r["root"]) for r in rows]
assert got == want, (got, want)
for r in rows:
    assert inplace or r["in_place"] is None, r
    for p in ("out_of_place", "in_place") if inplace else ("out_of_place",):
        x = r[p]
        assert x["nwrong"] == 0, (p, x)
        assert abs(x["alg_bw"] - r["size"] / 1e3 / x["time"]) <= 1e-6 * x["alg_bw"] + 1e-9, x
        assert abs(x["bus_bw"] - f * x["alg_bw"]) <= 1e-6 * x["bus_bw"] + 1e-9, (x, f)
PY
}
header="size count type redop root time algbw busbw #wrong time algbw busbw #wrong"
# table_ok WHAT FILE.json: the text table in $tmp/out and its JSON twin as the spec says.
table_ok() {
  local cols
  cols=$(sed -n 's/^# *\(size .*\)$/\1/p' "$tmp/out" | tr -s ' ')
  if [ "$rc" -eq 0 ] && [ "$cols" = "$header" ] && has "Out of bounds values : 0 OK" &&
    [ "$(rows | awk 'NF != 13' | wc -l)" -eq 0 ] && table "$2" "$size" "$factor" "$redop" "$rooted" "$inplace" "$n" &&
    { [ "$inplace" = 1 ] || [ "$(rows | awk '$10 $11 $12 $13 != "N/AN/AN/AN/A"' | wc -l)" -eq 0 ]; }; then
    ok "$1: nccl-tests' columns, sizes, counts, roots, busbw factor $factor$([ "$inplace" = 0 ] && echo ", no in-place form (N/A)"), right results"
  else bad "$1: exit $rc, columns '$cols'"; fi
}
# weft_checks: the weft benchmark, then the same with a wrong element.
weft_checks() {
  local what="${name}_perf -t $n" wrongs
  timeout 120 "$BUILD/bench/${name}_perf" -t "$n" $flags -J "$tmp/$name.$n.json" >"$tmp/out" 2>&1
  rc=$?
  table_ok "$what" "$tmp/$name.$n.json"
  rows | awk '{ print $1, $2, $3, $4, $5 }' >"$tmp/weft.rows"
  timeout 120 "$BUILD/tests/bench/${name}_perf" -t "$n" $flags >"$tmp/out" 2>&1
  rc=$?
  # The #wrong columns: out of place the 9th, in place the 13th.
  wrongs=$(rows | awk -v inplace="$inplace" '{ print $9; if (inplace) print $13 }' | sort -u | tr '\n' ' ')
  if [ "$rc" -eq 1 ] && [ "$wrongs" = "1 " ] && [ "$(nrows)" -gt 0 ] && has "Out of bounds values : [1-9][0-9]* FAILED"; then
    ok "$what with a wrong element: reported in every row (#wrong 1), exit 1"
  else bad "$what with a wrong element: exit $rc, #wrong '$wrongs'"; fi
}
# mpi_checks: the MPI baseline, as its own table and (where weft's ran) with weft's rows.
mpi_checks() {
  local what="mpi_${name}_perf -np $n"
  timeout 120 $MPIRUN -np "$n" "$BUILD/bench/mpi_${name}_perf" $flags -J "$tmp/mpi.$name.$n.json" >"$tmp/out" 2>&1
  rc=$?
  table_ok "$what" "$tmp/mpi.$name.$n.json"
  if [ -f "$tmp/weft.rows" ]; then
    rows | awk '{ print $1, $2, $3, $4, $5 }' | cmp -s - "$tmp/weft.rows" && ok "$what: weft's rows" ||
      bad "$what: not weft's rows"
  fi
}
flags="-b 1K -e 16K -f 4 -n 2 -w 1 -c 1 -r all"
while read -r name size factor redop rooted inplace weft <&3; do
  for n in 2 3; do
    rm -f "$tmp/weft.rows"
    [ "$weft" = 1 ] && weft_checks
    if command -v mpirun >/dev/null; then mpi_checks; else echo "skip mpi_${name}_perf: no mpirun"; fi
  done
done 3<<<"$colls"

# bench/plot.py on a canned compare.sh output (tests/bench/compare-sample.md): the series it
# reads (size 0 and "-" medians left out; roots told apart where there are several), and one
# PNG per collective, 900 x 550; input without a table is refused. Debian's python3 with
# python3-matplotlib is installed by install-deps.sh, so its absence is a failure.
sample=$(dirname "$0")/compare-sample.md
plot=$(dirname "$0")/../../bench/plot.py
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  bad "plot.py: no matplotlib for /usr/bin/python3 (install-deps.sh installs python3-matplotlib)"
else
  "$plot" "$sample" --list >"$tmp/out" 2>&1
  rc=$?
  cat >"$tmp/want" <<'EOF'
AllGather | 2 ranks | weft | 64:0.01 1024:0.5 1048576:4.37
AllGather | 2 ranks | mpi | 64:0.07 1024:0.48
AllGather | 3 ranks | weft | 48:0.01 1008:0.45
AllGather | 3 ranks | mpi | 48:0.04 1008:0.48
Broadcast | 2 ranks, root 0 | weft | 8:0 4096:1.54
Broadcast | 2 ranks, root 0 | mpi | 8:0.01 4096:1.11
Broadcast | 2 ranks, root 1 | weft | 8:0.01 4096:1.42
Broadcast | 2 ranks, root 1 | mpi | 8:0.04 4096:1.14
EOF
  if [ "$rc" -eq 0 ] && cmp -s "$tmp/out" "$tmp/want"; then ok "plot.py --list: the series of the sample"
  else bad "plot.py --list: exit $rc, $(diff "$tmp/want" "$tmp/out" | head -5)"; fi
  "$plot" "$sample" -o "$tmp/plots" >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ] && [ "$(ls "$tmp/plots" | tr '\n' ' ')" = "allgather.png broadcast.png " ] && json "$tmp/plots" <<'PY'
import os, struct, sys
for name in os.listdir(sys.argv[1]):
    data = open(os.path.join(sys.argv[1], name), "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", name
    assert struct.unpack(">II", data[16:24]) == (900, 550), (name, struct.unpack(">II", data[16:24]))
    assert len(data) > 20000, (name, len(data))  # lines, labels and legend, not a blank canvas
PY
  then ok "plot.py: one 900 x 550 PNG per collective"
  else bad "plot.py -o: exit $rc, $(ls "$tmp/plots" 2>&1 | tr '\n' ' ')"; fi
  printf '# no table here\n' | "$plot" - --list >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && has "no compare.sh table"; then ok "plot.py: input without a table refused (exit $rc)"
  else bad "plot.py on input without a table: exit $rc"; fi
fi

# bench/memcpy_perf, the memory limit compare.sh puts beside every collective: one row per
# size with a positive rate; a bad size refused.
timeout 60 "$BUILD/bench/memcpy_perf" -b 64K -e 1M -f 4 -n 3 -w 1 >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$(awk '$1 ~ /^[0-9]+$/ && NF == 3 && $3 > 0' "$tmp/out" | awk '{print $1}' | tr '\n' ' ')" = "65536 262144 1048576 " ]; then
  ok "memcpy_perf -b 64K -e 1M -f 4: three sizes, positive GB/s"
else bad "memcpy_perf -b 64K -e 1M -f 4: exit $rc"; fi
# -p 3: three processes copy at once; one row, the header says so, no process left behind.
timeout 60 "$BUILD/bench/memcpy_perf" -b 1M -e 1M -n 5 -w 1 -p 3 >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && has "3 processes copying at once" &&
   [ "$(awk '$1 ~ /^[0-9]+$/ && NF == 3 && $3 > 0' "$tmp/out" | awk '{print $1}')" = 1048576 ] &&
   ! pgrep -x memcpy_perf >/dev/null; then
  ok "memcpy_perf -p 3: one batch row, positive GB/s, every process gone"
else bad "memcpy_perf -p 3: exit $rc, $(tr '\n' ' ' <"$tmp/out")"; fi
timeout 60 "$BUILD/bench/memcpy_perf" -p 0 >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && has "1 <= -p <= 1024"; then ok "memcpy_perf -p 0: refused (exit 2)"
else bad "memcpy_perf -p 0: exit $rc"; fi
timeout 60 "$BUILD/bench/memcpy_perf" -b 64Q >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && has "'64Q' is not a size"; then ok "memcpy_perf -b 64Q: refused (exit 2)"
else bad "memcpy_perf -b 64Q: exit $rc"; fi

echo "test-perf-flags: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
