#!/bin/bash
# AllReduce across emulated hosts (tests/mpi/cluster.sh: network namespaces on a bridge, ranks
# launched into them by mpirun through tests/mpi/nsagent, as tests/mpi/run-multihost.sh does).
# Root only. Makes the cluster, runs the jobs, keeps every raw output, removes the cluster on
# every exit (including Ctrl-C and timeouts).
#
#   bench/multihost.sh pair  [-s SHAPE] [-R N] [-t S]    2 hosts x 1 rank, 64 MiB .. 256 MiB:
#       raw TCP (iperf3 -P 4, one way and --bidir), weft ring over tcp, Open MPI over btl tcp
#   bench/multihost.sh grid  [-s SHAPE] [-R N] [-t S]    4 hosts x 2 ranks, 8 B .. 256 MiB by 4:
#       WEFT_ALGO=ring, tree, hier, and the tuner's choice (allreduce_perf -A 1; -c another),
#       and per repetition raw TCP from host 1 to host 2 (iperf3 -P 4, 3 s), printed as the
#       "raw TCP" line (the rate weft-sim's fabric takes, bench/sim-validate.sh), and, for
#       allreduce, a CPU probe: a ring AllReduce of 64 MiB between 2 more emulated hosts on a
#       bridge of their own, unshaped (the cores' copies through veth and bridge, no link
#       limit), printed as the "cpu probe" line (the cost of weft-sim's cpu line,
#       bench/sim-validate.sh)
#   -s SHAPE   cluster.sh shaping (default "--rate 2gbit": tbf, as this kernel has no netem)
#   -R N       repetitions, interleaved so load drifts hit every variant alike (default 3)
#   -t S       timeout of one job in seconds (default 300)
#   -k DIR     where the raw outputs go (default /tmp/weft-multihost.<pid>, kept); runs into a
#              DIR that already holds outputs add to them (the medians take every run there)
#   -g HxK     grid: H hosts of K ranks (default 4x2)
#   -a ALGOS   grid: the variants (default "ring tree hier auto"; auto = no WEFT_ALGO)
#   -c COLL    grid: the collective, as its benchmark's name: allreduce (default), broadcast,
#              reduce, all_gather, reduce_scatter (COLL_perf; sizes are its -b/-e sizes)
#   -p PARTS   grid: "small" (8 B .. 1 MiB, -n 100) and/or "large" (4 MiB .. 256 MiB, -n 4)
#   -E BYTES   grid: the largest size (default 256M)
#   -b BYTES   grid: the smallest size (default 8; at most 1M), sizes going up by 4 from it
#   -X FLAGS   grid: more flags for every job's benchmark, e.g. "-z 3 -a 3" (each call timed
#              alone, ranks released together, the slowest rank's time: a rooted collective's
#              latency rather than the rate of calls back to back)
#   -T         no runs: print the tables of the outputs already in -k DIR
# Prints medians as markdown tables (allreduce_perf's out-of-place time and busbw).
# Environment: BENCH_DIR (default build/bench); WEFT_* reach every rank.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CLUSTER=$ROOT/tests/mpi/cluster.sh
AGENT=$ROOT/tests/mpi/nsagent
BENCH=$(cd "${BENCH_DIR:-$ROOT/build/bench}" && pwd) || exit 1
mode=${1:-}
[ $# -gt 0 ] && shift
shape="--rate 2gbit" reps=3 limit=300 keep=/tmp/weft-multihost.$$ algos="ring tree hier auto" parts="small large"
coll=allreduce largest=256M smallest=8 extra="" grid=4x2
tablesOnly=0
while getopts "s:R:t:k:a:p:c:E:b:X:g:T" opt; do
  case $opt in
    s) shape=$OPTARG ;; R) reps=$OPTARG ;; t) limit=$OPTARG ;; k) keep=$OPTARG ;; a) algos=$OPTARG ;; p) parts=$OPTARG ;; T) tablesOnly=1 ;;
    c) coll=$OPTARG ;; E) largest=$OPTARG ;; X) extra=$OPTARG ;; g) grid=$OPTARG ;; b) smallest=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
[[ $grid =~ ^([2-9]|1[0-6])x([1-8])$ ]] || { echo "$0: -g $grid: want HOSTSxRANKS, 2-16 hosts of 1-8 ranks" >&2; exit 2; }
case $mode in pair) nh=2 k=1 ;; grid) nh=${BASH_REMATCH[1]} k=${BASH_REMATCH[2]} ;; *) echo "usage: $0 pair|grid [-s SHAPE] [-R N] [-t S] [-k DIR]" >&2; exit 2 ;; esac
mkdir -p "$keep/bin" || exit 1
# A private copy of the binaries: a concurrent rebuild must not swap them mid-run.
if [ "$mode" = pair ]; then bins=(allreduce_perf mpi_allreduce_perf); else bins=("${coll}_perf"); fi
for b in "${bins[@]}"; do cp "$BENCH/$b" "$keep/bin/" || exit 1; done
BENCH=$keep/bin
PREFIX=wmh$$ PROBE_PREFIX=wmp$$
up=0 probeDir="" probeHostList="" probeSubnet=""
[ "$tablesOnly" = 1 ] && reps=0
cleanup() {
  trap - EXIT INT TERM HUP
  [ "$up" = 1 ] && "$CLUSTER" down --prefix "$PREFIX"
  [ -n "$probeDir" ] && "$CLUSTER" down --prefix "$PROBE_PREFIX"
  exit "${1:-0}"
}
trap 'cleanup $?' EXIT
trap 'cleanup 130' INT TERM HUP

if [ "$tablesOnly" = 0 ]; then
"$CLUSTER" clean 2>/dev/null
# shellcheck disable=SC2086 # shape is a list of flags
out=$("$CLUSTER" up "$nh" --prefix "$PREFIX" --owner $$ $shape 2>"$keep/cluster.txt") || { cat "$keep/cluster.txt"; exit 1; }
up=1
cat "$keep/cluster.txt" >&2
eval "$out"
if [ "$mode" = grid ] && [ "$coll" = allreduce ]; then
  probeOut=$("$CLUSTER" up 2 --prefix "$PROBE_PREFIX" --owner $$ 2>>"$keep/cluster.txt") || { cat "$keep/cluster.txt"; exit 1; }
  probeDir=$(eval "$probeOut"; echo "$WEFT_CLUSTER_DIR")
  probeSubnet=$(eval "$probeOut"; echo "$WEFT_CLUSTER_SUBNET")
  probeHostList=$(eval "$probeOut"; echo "$WEFT_CLUSTER_HOSTS")
fi
else
  WEFT_CLUSTER_DIR=/nonexistent WEFT_CLUSTER_HOSTS="" WEFT_CLUSTER_SUBNET=""
fi
export WEFT_CLUSTER_DIR
read -r -a HOSTS <<<"$WEFT_CLUSTER_HOSTS"
hostList=""
[ "$tablesOnly" = 1 ] || for ((i = 0; i < nh; i++)); do hostList+=${hostList:+,}${HOSTS[i]}:$k; done

MPIRUN=(timeout -k 10 "$limit" mpirun --allow-run-as-root --oversubscribe --bind-to none
  --mca plm_rsh_agent "$AGENT"
  --mca oob_tcp_if_include "$WEFT_CLUSTER_SUBNET" --mca btl_tcp_if_include "$WEFT_CLUSTER_SUBNET"
  --mca btl self,tcp --mca mpi_yield_when_idle 1
  -x WEFT_SOCKET_IFNAME=eth0 -np $((nh * k)) --host "$hostList")
# the CPU probe's launcher: 1 rank on each host of the probe's cluster
PROBE=()
if [ -n "$probeDir" ]; then
  read -r -a probeHosts <<<"$probeHostList"
  PROBE=(timeout -k 10 "$limit" env WEFT_CLUSTER_DIR="$probeDir" mpirun --allow-run-as-root --oversubscribe
    --bind-to none --mca plm_rsh_agent "$AGENT"
    --mca oob_tcp_if_include "$probeSubnet" --mca btl_tcp_if_include "$probeSubnet"
    --mca btl self,tcp --mca mpi_yield_when_idle 1
    -x WEFT_SOCKET_IFNAME=eth0 -np 2 --host "${probeHosts[0]}:1,${probeHosts[1]}:1")
fi
for v in $(compgen -e | grep '^WEFT_' | grep -v -e '^WEFT_CLUSTER' -e '^WEFT_SOCKET_IFNAME$'); do
  MPIRUN+=(-x "$v")
  PROBE+=(-x "$v")
done

job() { # log, then the command (after mpirun's flags; PROBE's where PROBE_RUN is set)
  local log=$1
  shift
  echo "# $(date +%T) $log" >&2
  local -a run=("${MPIRUN[@]}")
  [ -n "${PROBE_RUN:-}" ] && run=("${PROBE[@]}")
  "${run[@]}" "$@" >"$keep/$log" 2>&1 || echo "# $log failed (exit $?): $(tail -2 "$keep/$log")" >&2
}
iperf() { # log, iperf3 flags: server in host 2, client in host 1; Gbit/s per direction
  local log=$1
  shift
  ip netns exec "$PREFIX-h2" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  sleep 0.5
  echo "# $(date +%T) $log" >&2
  timeout 30 ip netns exec "$PREFIX-h1" iperf3 -c "${HOSTS[1]}" -p 5201 -t 5 -O 1 "$@" >"$keep/$log" 2>&1
  wait
}
# medians of column COL (nccl-tests row, out-of-place time 6, busbw 8) per size, over files
medians() { # col files...
  local col=$1
  shift
  awk -v col="$col" '(NF == 13 || NF == 14) && $1 ~ /^[0-9]+$/ { v[$1] = v[$1] " " $col; if (!($1 in s)) { s[$1] = 1; k[++n] = $1 } }
    END { for (i = 1; i <= n; i++) { m = split(v[k[i]], a, " ")
            for (x = 2; x <= m; x++) { t = a[x] + 0; for (y = x - 1; y >= 1 && a[y] + 0 > t; y--) a[y + 1] = a[y]; a[y + 1] = t }
            print k[i], (m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2) } }' "$@"
}
# the median one-way Gbit/s of the iperf3 runs kept (receiver's SUM line)
uniRate() {
  for f in "$keep"/iperf.uni.*; do gbits '/SUM.*receiver/' "$f"; done | sort -g | awk '{ a[++n] = $1 } END { print a[int((n + 1) / 2)] }'
}
# iperf3's rate ($6, in its unit $7) of the lines matching PATTERN, in Gbit/s
gbits() { # pattern file
  awk "$1"' { r = $6; u = $7; if (u ~ /^Mbits/) r /= 1000; else if (u ~ /^Kbits/) r /= 1e6; else if (u ~ /^bits/) r /= 1e9; print r }' "$2"
}
rawTcp() {
  local u
  u=$(uniRate)
  [ -n "$u" ] && echo "raw TCP, iperf3 -P 4, host 1 to host 2, receiver's Gbit/s (median): one way $u" && echo
  compgen -G "$keep/probe.*" >/dev/null || return 0
  u=$(medians 6 "$keep"/probe.* | awk '$1 == 67108864 { print $2 }')
  [ -n "$u" ] && echo "cpu probe, 2 unshaped hosts of 1 rank, ring AllReduce of 64 MiB, us (median): $u" && echo
}
human() { awk '{ b = $1; u = b >= 1048576 ? sprintf("%d MiB", b / 1048576) : b >= 1024 ? sprintf("%d KiB", b / 1024) : b " B"; $1 = u; print }' OFS='|'; }

[ "$tablesOnly" = 1 ] || echo "<!-- bench/multihost.sh $mode: $(hostname), $(nproc) cpus, $(date -u '+%Y-%m-%d %H:%M'); $nh hosts x $k; shaping: $(cat "$WEFT_CLUSTER_DIR/shape"); tcp congestion control: $(cat "$WEFT_CLUSTER_DIR/congctl"); $reps runs; raw outputs in $keep -->"
if [ "$mode" = pair ]; then
  flags=(-b 64M -e 256M -f 2 -n 10 -w 2 -c 0)
  for ((r = 1; r <= reps; r++)); do
    iperf "iperf.uni.$$.$r" -P 4
    iperf "iperf.bidir.$$.$r" -P 4 --bidir
    job "weft.$$.$r" -x WEFT_TRANSPORTS=tcp -x WEFT_ALGO=ring "$BENCH/allreduce_perf" "${flags[@]}"
    job "mpi.$$.$r" "$BENCH/mpi_allreduce_perf" "${flags[@]}"
  done
  # Gbit/s of the receiver's SUM lines: one way, and each direction of --bidir (TX-C, RX-C)
  uni=$(uniRate)
  bidir=$(for f in "$keep"/iperf.bidir.*; do gbits '/SUM.*(TX|RX)-C.*receiver/' "$f" | awk '{ s += $1; n++ } END { if (n) print s / n }'; done | sort -g | awk '{ a[++n] = $1 } END { print a[int((n + 1) / 2)] }')
  echo "raw TCP, iperf3 -P 4, receiver's Gbit/s (median): one way $uni; each direction of --bidir $bidir (= $(awk -v g="$bidir" 'BEGIN { printf "%.3f", g / 8 }') GB/s)"
  echo
  echo "| size | weft ring busbw (GB/s) | Open MPI busbw (GB/s) | weft / raw bidir | weft / MPI |"
  echo "|-----:|----------------------:|----------------------:|-----------------:|-----------:|"
  # busbw from the median time (2 ranks: busbw = algbw = bytes / time), 3 digits
  join --nocheck-order <(medians 6 "$keep"/weft.*) <(medians 6 "$keep"/mpi.*) |
    awk -v raw="$bidir" '{ w = $1 / $2 / 1e3; m = $1 / $3 / 1e3
      printf "%s %.3f %.3f %.0f%% %.2f\n", $1, w, m, 100 * w / (raw / 8), w / m }' | human | sed 's/|/ | /g; s/^/| /; s/$/ |/'
else
  flags=(-b "$smallest" -e "$largest" -f 4 -c 0)
  small=(-e 1M -n 100 -w 10)
  large=(-b 4M -n 4 -w 1)
  for ((r = 1; r <= reps; r++)); do
    iperf "iperf.uni.$$.$r" -P 4 -t 3
    [ -n "$probeDir" ] && PROBE_RUN=1 job "probe.$$.$r" -x WEFT_TRANSPORTS=tcp -x WEFT_ALGO=ring \
      "$BENCH/allreduce_perf" -b 64M -e 64M -n 4 -w 1 -c 0
    for a in $algos; do
      env=()
      [ $a = auto ] || env=(-x WEFT_ALGO=$a)
      for part in $parts; do
        [ $part = small ] && sizes=("${small[@]}") || sizes=("${large[@]}")
        # shellcheck disable=SC2086 # extra is a list of flags
        job "$a.$part.$$.$r" "${env[@]}" "$BENCH/${coll}_perf" "${flags[@]}" "${sizes[@]}" $extra -A 1
      done
    done
  done
  rawTcp
  # the tuner's choice per size (the same in every run: it is a pure function of the size)
  algo() { awk '(NF == 14) && $1 ~ /^[0-9]+$/ { print $1, $14 }' "$keep"/auto.* | sort -n -u; }
  forced=$(for a in $algos; do [ "$a" = auto ] || printf '%s ' "$a"; done)
  header="| size |" rule="|-----:|"
  for a in $forced; do header+=" $a (us) |" rule+="-----:|"; done
  # rows: size, tuner's time and choice (or "- -" without an auto variant), each forced variant
  if [[ " $algos " == *" auto "* ]]; then
    echo "$header tuner (us) | tuner's choice | best forced | tuner / best |"
    echo "$rule-----:|:---|:---|-----:|"
    table=$(medians 6 "$keep"/auto.* | sort -n | join --nocheck-order - <(algo))
  else
    echo "$header best forced |"
    echo "$rule:---|"
    table=$(medians 6 "$keep"/${forced%% *}.* | sort -n | awk '{ print $1, "-", "-" }')
  fi
  for a in $forced; do table=$(join --nocheck-order <(echo "$table") <(medians 6 "$keep"/$a.* | sort -n)); done
  echo "$table" | sort -n | awk -v names="$forced" '{ k = split(names, nm, " "); b = $4; n = nm[1]
      for (i = 2; i <= k; i++) if ($(i + 3) < b) { b = $(i + 3); n = nm[i] }
      line = $1; for (i = 1; i <= k; i++) line = line " " $(i + 3)
      if ($2 == "-") printf "%s %s\n", line, n
      else printf "%s %s %s %s %.2f\n", line, $2, $3, n, $2 / b }' | human | sed 's/|/ | /g; s/^/| /; s/$/ |/'
fi
