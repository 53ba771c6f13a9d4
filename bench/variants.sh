#!/usr/bin/env bash
# Interleaved A/B of weft settings at one size: runs <coll>_perf once per variant and
# repetition, the variants alternating (a drift in the machine's speed weighs on all alike),
# and prints each variant's median time and every run's.
#
#   bench/variants.sh -np 8 -R 7 -s 4M -C alltoall "est=WEFT_DIRECT_CMA_TRIALS=0" "learn=" mpi
#
# A variant is NAME=VAR=VALUE[,VAR=VALUE...] (NAME= alone: the defaults); "mpi" runs Open
# MPI's mpi_<coll>_perf. -n/-w: timed and warm-up iterations (default 20 and 10). Environment:
# BENCH_DIR (binaries, default build/bench), MPIRUN_ARGS (extra mpirun flags).
set -u
np=2 reps=5 size=4M coll=allreduce iters=20 warm=10
while [ $# -gt 0 ]; do
  case $1 in
    -np) np=$2; shift 2 ;; -R) reps=$2; shift 2 ;; -s) size=$2; shift 2 ;;
    -C) coll=$2; shift 2 ;; -n) iters=$2; shift 2 ;; -w) warm=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "$0: unknown flag $1 (-h for help)" >&2; exit 1 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "$0: no variants (-h for help)" >&2; exit 1; }
bindir=${BENCH_DIR:-build/bench}
declare -A times

for _ in $(seq 1 "$reps"); do
  for v in "$@"; do
    name=${v%%=*} envs=${v#*=} xs=() bin=$bindir/${coll}_perf
    if [ "$v" = mpi ]; then name=mpi envs="" bin=$bindir/mpi_${coll}_perf; fi
    [ -x "$bin" ] || { echo "$0: $bin not found (make benches)" >&2; exit 1; }
    if [ -n "$envs" ]; then
      IFS=, read -ra kv <<<"$envs"
      for e in "${kv[@]}"; do xs+=(-x "$e"); done
    fi
    # shellcheck disable=SC2086 # MPIRUN_ARGS is a list of flags
    t=$(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader ${MPIRUN_ARGS:-} -np "$np" \
          "${xs[@]}" "$bin" -b "$size" -e "$size" -n "$iters" -w "$warm" -c 0 2>&1 |
        awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $6; exit }')
    [ -n "$t" ] || { echo "$0: $name: $bin -np $np printed no result" >&2; exit 1; }
    times[$name]="${times[$name]:-} $t"
  done
done
for v in "$@"; do
  name=${v%%=*}
  [ "$v" = mpi ] && name=mpi
  # shellcheck disable=SC2086 # one time per word
  med=$(printf '%s\n' ${times[$name]} | sort -g |
        awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
  echo "$coll np $np size $size $name: median $med us (runs:${times[$name]})"
done
