#!/usr/bin/env bash
# Compares weft's collectives with Open MPI's on this host: for each rank count, runs each
# collective's <name>_perf and mpi_<name>_perf R times, alternating (so drifts in machine load
# hit both alike), and prints per collective and size the medians as a markdown table for
# docs/performance.md (bench/plot.py draws them).
#
#   bench/compare.sh                                  # AllReduce, ranks 2 4 8, 8 B .. 256 MiB, float sum
#   bench/compare.sh -r "2 4" -e 64M -R 5
#   bench/compare.sh -C "broadcast all_gather" -- -r all   # two collectives, every root
#   WEFT_ALGO=ring bench/compare.sh -r 4              # WEFT_* variables reach every rank
#   bench/compare.sh -B self,tcp -- -a 3              # MPI over TCP; after --: benchmark flags
#
# Environment: BENCH_DIR (binaries, default build/bench), MPIRUN (default mpirun),
# MPIRUN_ARGS (extra mpirun flags, e.g. "--bind-to core").
set -u

usage() {
  cat <<EOF
usage: $0 [options] [-- extra benchmark flags]
  -C "C1 C2 .."  collectives: allreduce broadcast reduce all_gather reduce_scatter
                 alltoall gather scatter sendrecv, or all     default allreduce
  -r "P1 P2 .."  rank counts (processes)           default "2 4 8"
  -R N           runs of each benchmark per count   default 3
  -b SIZE        min size                           default 8
  -e SIZE        max size                           default 256M
  -f F           size step factor                   default 2
  -n N           timed iterations                   default 20
  -w N           warmup iterations                  default 5
  -c 0|1         validate results (untimed)         default 1
  -d TYPE        datatype                           default float
  -o OP          reduction (collectives that reduce) default sum
  -p out|in      report out-of-place or in-place    default out
  -B BTLS        Open MPI btl list                  default self,vader (shared memory)
  -k DIR         keep the raw outputs in DIR        default: a temporary directory, removed
EOF
  exit "${1:-0}"
}

colls=allreduce ranks="2 4 8" reps=3 minb=8 maxb=256M factor=2 iters=20 warmup=5 check=1
dtype=float op=sum place=out btl=self,vader keep=
while getopts "C:r:R:b:e:f:n:w:c:d:o:p:B:k:h" opt; do
  case $opt in
    C) colls=$OPTARG ;; r) ranks=$OPTARG ;; R) reps=$OPTARG ;; b) minb=$OPTARG ;; e) maxb=$OPTARG ;;
    f) factor=$OPTARG ;; n) iters=$OPTARG ;; w) warmup=$OPTARG ;; c) check=$OPTARG ;;
    d) dtype=$OPTARG ;; o) op=$OPTARG ;; p) place=$OPTARG ;; B) btl=$OPTARG ;; k) keep=$OPTARG ;;
    h) usage 0 ;; *) usage 1 ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
extra=("$@")
case $place in out|in) ;; *) echo "$0: -p takes out or in" >&2; exit 1 ;; esac

# Each collective's name in the tables, and whether it takes -o.
declare -A title=([allreduce]=AllReduce [broadcast]=Broadcast [reduce]=Reduce [all_gather]=AllGather
  [reduce_scatter]=ReduceScatter [alltoall]=AlltoAll [gather]=Gather [scatter]=Scatter [sendrecv]=SendRecv)
reduces=" allreduce reduce reduce_scatter "
[ "$colls" = all ] && colls="allreduce broadcast reduce all_gather reduce_scatter alltoall gather scatter sendrecv"
bindir=${BENCH_DIR:-build/bench}
for c in $colls; do
  [ -n "${title[$c]:-}" ] || { echo "$0: -C: unknown collective '$c' (-h lists them)" >&2; exit 1; }
  for b in "${c}_perf" "mpi_${c}_perf" memcpy_perf; do
    [ -x "$bindir/$b" ] || { echo "$0: $bindir/$b not found (make benches, or set BENCH_DIR)" >&2; exit 1; }
  done
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
benchflags=(-b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" -c "$check" -d "$dtype")

failed=0
# run COLL TOOL P REP: one benchmark run, its output kept as $logdir/TOOL.P.REP
run() {
  local log="$logdir/$2.$3.$4" flags=("${benchflags[@]}")
  [[ $reduces == *" $1 "* ]] && flags+=(-o "$op")
  echo "# np $3 run $4/$reps: $2" >&2
  if ! "${MPIRUN:-mpirun}" "${mpiflags[@]}" -np "$3" "$bindir/$2" "${flags[@]}" "${extra[@]}" >"$log" 2>&1; then
    echo "$0: $2 -np $3 failed (or found wrong results), see $log:" >&2
    tail -n 5 "$log" >&2
    failed=1
  fi
}

# The memory limit, in the same run: one core's memcpy at the same sizes (bench/memcpy_perf),
# and the same copy made by as many processes as ranks at once (-p: what each rank can move
# when all share the host's cores and memory), once per rank count and repetition, between
# the collectives' runs.
memcpy_run() {
  echo "# np $1 run $2/$reps: memcpy_perf, alone and -p $1" >&2
  "$bindir/memcpy_perf" -b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" \
    >"$logdir/memcpy_perf.$1.$2" 2>&1 || { echo "$0: memcpy_perf failed" >&2; failed=1; }
  "$bindir/memcpy_perf" -b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" -p "$1" \
    >"$logdir/memcpy_perf_all.$1.$2" 2>&1 || { echo "$0: memcpy_perf -p $1 failed" >&2; failed=1; }
}

for p in $ranks; do
  for ((k = 1; k <= reps; k++)); do
    memcpy_run "$p" "$k"
    for c in $colls; do
      run "$c" "${c}_perf" "$p" "$k"
      run "$c" "mpi_${c}_perf" "$p" "$k"
    done
  done
done

# Rows "memcpy memcpy ranks size -1 time GB/s" from the memcpy logs, then rows "collective
# side ranks size root time busbw" from every log, in the order run (side:
# weft or mpi); time and busbw of the chosen placement. The columns are found from the table's
# header (the first "time" is out of place, the second in place: -I and -S add columns), so
# extra flags after -- keep working. Only table rows (not mpirun's messages) whose results
# were right (#wrong 0, or N/A without -c) count; a placement a collective has no form of
# (in place for AlltoAll, SendRecv: N/A) gives no row.
rows() {
  local p k c side tool
  for p in $ranks; do
    for ((k = 1; k <= reps; k++)); do
      [ -f "$logdir/memcpy_perf.$p.$k" ] &&
        awk -v np="$p" '$1 ~ /^[0-9]+$/ && NF == 3 { print "memcpy", "memcpy", np, $1, -1, $2, $3 }' \
          "$logdir/memcpy_perf.$p.$k"
      [ -f "$logdir/memcpy_perf_all.$p.$k" ] &&
        awk -v np="$p" '$1 ~ /^[0-9]+$/ && NF == 3 { print "memcpyall", "memcpy", np, $1, -1, $2, $3 }' \
          "$logdir/memcpy_perf_all.$p.$k"
    done
  done
  for c in $colls; do
    for p in $ranks; do
      for ((k = 1; k <= reps; k++)); do
        for side in weft mpi; do
          tool=${c}_perf
          [ "$side" = mpi ] && tool=mpi_$tool
          [ -f "$logdir/$tool.$p.$k" ] || continue
          awk -v coll="${title[$c]}" -v side="$side" -v np="$p" -v place="$place" '
            /^# +size +count / { n = 0; for (i = 2; i <= NF; i++) if ($i == "time" || $i == "cputime") t[++n] = i - 1
                                 col = place == "in" ? t[2] : t[1]; next }
            col && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= col + 3 && $col != "N/A" &&
              ($(col + 3) == "0" || $(col + 3) == "N/A") {
              print coll, side, np, $1, $5, $col, $(col + 2) }' "$logdir/$tool.$p.$k"
        done
      done
    done
  done
}

echo "<!-- bench/compare.sh: $(hostname), $(nproc) cpus, $(date -u +%Y-%m-%d); ranks $ranks; $dtype $op, $([ "$place" = in ] && echo in-place || echo out-of-place);" \
  "medians of $reps runs of $iters iterations; Open MPI btl $btl${weftenv[*]:+; ${weftenv[*]}}${extra[*]:+; flags ${extra[*]}} -->"
# One table per collective ("### Name"); a root column where the collective has one.
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
  $1 == "memcpy" { mem[$3, $4] = mem[$3, $4] " " $7; next } # GB/s by ranks and size
  $1 == "memcpyall" { all[$3, $4] = all[$3, $4] " " $7; next } # ... with every rank copying
  {
    if (!($1 in nkeys)) { colls[++nc] = $1; nkeys[$1] = 0 }
    if ($5 != "-1") rooted[$1] = 1
    key = $3 SUBSEP $4 SUBSEP $5 # first seen first: rank counts as run, sizes ascending within
    if (!(($1, key) in seen)) { seen[$1, key] = 1; keys[$1, ++nkeys[$1]] = key }
    t[$1, $2, key] = t[$1, $2, key] " " $6
    bw[$1, $2, key] = bw[$1, $2, key] " " $7
  }
  END {
    for (c = 1; c <= nc; c++) {
      name = colls[c]; r = name in rooted
      if (c > 1) print ""
      print "### " name
      print ""
      print "| ranks | size |" (r ? " root |" : "") " weft time (us) | MPI time (us) | time weft/MPI | weft busbw (GB/s) | MPI busbw (GB/s) | busbw weft/MPI | memcpy (GB/s) | weft/memcpy | memcpy, all ranks (GB/s) | weft/all | MPI/all |"
      print "|------:|-----:|" (r ? "-----:|" : "") "---------------:|--------------:|--------------:|------------------:|-----------------:|---------------:|--------------:|------------:|-------------------------:|---------:|--------:|"
      for (i = 1; i <= nkeys[name]; i++) {
        k = keys[name, i]; split(k, a, SUBSEP)
        wt = median(t[name, "weft", k]); mt = median(t[name, "mpi", k])
        wb = median(bw[name, "weft", k]); mb = median(bw[name, "mpi", k])
        mc = median(mem[a[1], a[2]]); ma = median(all[a[1], a[2]])
        printf "| %d | %s |%s %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", a[1], human(a[2]), (r ? " " a[3] " |" : ""),
          num(wt, "%.2f"), num(mt, "%.2f"), ratio(wt, mt), num(wb, "%.2f"), num(mb, "%.2f"), ratio(wb, mb),
          num(mc, "%.2f"), ratio(wb, mc), num(ma, "%.2f"), ratio(wb, ma), ratio(mb, ma)
      }
    }
  }'
exit $failed
