#!/usr/bin/env bash
# Compares weft's AllReduce with Open MPI's on this host: for each rank count, runs
# allreduce_perf and mpi_allreduce_perf R times, alternating (so drifts in machine load hit both
# alike), and prints per size the medians as a markdown table for docs/performance.md.
#
#   bench/compare.sh                                  # ranks 2 4 8, 8 B .. 256 MiB, float sum
#   bench/compare.sh -r "2 4" -e 64M -R 5
#   WEFT_ALGO=ring bench/compare.sh -r 4              # WEFT_* variables reach every rank
#   bench/compare.sh -B self,tcp -- -a 3              # MPI over TCP; after --: benchmark flags
#
# Environment: BENCH_DIR (binaries, default build/bench), MPIRUN (default mpirun),
# MPIRUN_ARGS (extra mpirun flags, e.g. "--bind-to core").
set -u

usage() {
  cat <<EOF
usage: $0 [options] [-- extra benchmark flags]
  -r "P1 P2 .."  rank counts (processes)           default "2 4 8"
  -R N           runs of each benchmark per count   default 3
  -b SIZE        min size                           default 8
  -e SIZE        max size                           default 256M
  -f F           size step factor                   default 2
  -n N           timed iterations                   default 20
  -w N           warmup iterations                  default 5
  -c 0|1         validate results (untimed)         default 1
  -d TYPE        datatype                           default float
  -o OP          reduction                          default sum
  -p out|in      report out-of-place or in-place    default out
  -B BTLS        Open MPI btl list                  default self,vader (shared memory)
  -k DIR         keep the raw outputs in DIR        default: a temporary directory, removed
EOF
  exit "${1:-0}"
}

ranks="2 4 8" reps=3 minb=8 maxb=256M factor=2 iters=20 warmup=5 check=1
dtype=float op=sum place=out btl=self,vader keep=
while getopts "r:R:b:e:f:n:w:c:d:o:p:B:k:h" opt; do
  case $opt in
    r) ranks=$OPTARG ;; R) reps=$OPTARG ;; b) minb=$OPTARG ;; e) maxb=$OPTARG ;;
    f) factor=$OPTARG ;; n) iters=$OPTARG ;; w) warmup=$OPTARG ;; c) check=$OPTARG ;;
    d) dtype=$OPTARG ;; o) op=$OPTARG ;; p) place=$OPTARG ;; B) btl=$OPTARG ;; k) keep=$OPTARG ;;
    h) usage 0 ;; *) usage 1 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
extra=("$@")
case $place in out|in) ;; *) echo "$0: -p takes out or in" >&2; exit 1 ;; esac

bindir=${BENCH_DIR:-build/bench}
for b in allreduce_perf mpi_allreduce_perf; do
  [ -x "$bindir/$b" ] || { echo "$0: $bindir/$b not found (make benches, or set BENCH_DIR)" >&2; exit 1; }
done

if [ -n "$keep" ]; then
  logdir=$keep
  mkdir -p "$logdir" || exit 1
else
  logdir=$(mktemp -d) || exit 1
  trap 'rm -rf "$logdir"' EXIT
fi

# mpirun forwards the environment to local ranks anyway; -x makes WEFT_* explicit (and reach
# remote hosts too).
mpiflags=(--allow-run-as-root --oversubscribe --mca btl "$btl")
weftenv=()
for v in $(compgen -e | grep '^WEFT_'); do mpiflags+=(-x "$v"); weftenv+=("$v=${!v}"); done
# shellcheck disable=SC2206 # MPIRUN_ARGS is a list of flags
mpiflags+=(${MPIRUN_ARGS:-})
benchflags=(-b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" -c "$check" -d "$dtype" -o "$op" "${extra[@]}")

failed=0
# run TOOL P REP: one benchmark run, its output kept as $logdir/TOOL.P.REP
run() {
  local log="$logdir/$1.$2.$3"
  echo "# np $2 run $3/$reps: $1" >&2
  if ! "${MPIRUN:-mpirun}" "${mpiflags[@]}" -np "$2" "$bindir/$1" "${benchflags[@]}" >"$log" 2>&1; then
    echo "$0: $1 -np $2 failed (or found wrong results), see $log:" >&2
    tail -n 5 "$log" >&2
    failed=1
  fi
}

for p in $ranks; do
  for ((k = 1; k <= reps; k++)); do
    run allreduce_perf "$p" "$k"
    run mpi_allreduce_perf "$p" "$k"
  done
done

# Rows "tool ranks size time busbw" from every log, in the order run; time and busbw of the
# chosen placement. The columns are found from the table's header (the first "time" is out of
# place, the second in place: -I and -S add columns), so extra flags after -- keep working.
# Only table rows (not mpirun's messages) whose results were right (#wrong 0, or N/A without
# -c) count.
rows() {
  local p k tool
  for p in $ranks; do
    for ((k = 1; k <= reps; k++)); do
      for tool in allreduce_perf mpi_allreduce_perf; do
        [ -f "$logdir/$tool.$p.$k" ] || continue
        awk -v tool="$tool" -v np="$p" -v place="$place" '
          /^# +size +count / { n = 0; for (i = 2; i <= NF; i++) if ($i == "time" || $i == "cputime") t[++n] = i - 1
                               col = place == "in" ? t[2] : t[1]; next }
          col && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= col + 3 && ($(col + 3) == "0" || $(col + 3) == "N/A") {
            print tool, np, $1, $col, $(col + 2) }' "$logdir/$tool.$p.$k"
      done
    done
  done
}

echo "<!-- bench/compare.sh: $(hostname), $(nproc) cpus, $(date -u +%Y-%m-%d); ranks $ranks; $dtype $op, $([ "$place" = in ] && echo in-place || echo out-of-place);" \
  "medians of $reps runs of $iters iterations; Open MPI btl $btl${weftenv[*]:+; ${weftenv[*]}}${extra[*]:+; flags ${extra[*]}} -->"
rows | awk '
  function median(list,   v, n, i, j, t) {
    n = split(list, v, " ")
    if (n == 0) return ""
    for (i = 2; i <= n; i++) { t = v[i] + 0; for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    return n % 2 ? v[(n + 1) / 2] + 0 : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  function human(b) {
    if (b >= 1073741824 && b % 1073741824 == 0) return b / 1073741824 " GiB"
    if (b >= 1048576 && b % 1048576 == 0) return b / 1048576 " MiB"
    if (b >= 1024 && b % 1024 == 0) return b / 1024 " KiB"
    return b " B"
  }
  function ratio(a, b) { return (a == "" || b == "" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b) }
  function num(x, fmt) { return x == "" ? "-" : sprintf(fmt, x) }
  {
    key = $2 SUBSEP $3 # first seen first: rank counts as run, sizes ascending within
    if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
    t[$1, key] = t[$1, key] " " $4
    bw[$1, key] = bw[$1, key] " " $5
  }
  END {
    print "| ranks | size | weft time (us) | MPI time (us) | time weft/MPI | weft busbw (GB/s) | MPI busbw (GB/s) | busbw weft/MPI |"
    print "|------:|-----:|---------------:|--------------:|--------------:|------------------:|-----------------:|---------------:|"
    for (i = 1; i <= nk; i++) {
      k = keys[i]; split(k, a, SUBSEP)
      wt = median(t["allreduce_perf", k]); mt = median(t["mpi_allreduce_perf", k])
      wb = median(bw["allreduce_perf", k]); mb = median(bw["mpi_allreduce_perf", k])
      printf "| %d | %s | %s | %s | %s | %s | %s | %s |\n", a[1], human(a[2]), num(wt, "%.2f"), num(mt, "%.2f"),
        ratio(wt, mt), num(wb, "%.2f"), num(mb, "%.2f"), ratio(wb, mb)
    }
  }'
exit $failed
