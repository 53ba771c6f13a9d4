#!/bin/bash
# weft-sim's predictions against measured AllReduces on emulated hosts (issue 14, "Validated
# where we can measure"). Root only. Runs bench/multihost.sh grid on H hosts of K ranks with
# every link shaped to RATE (ring, tree, hier forced, and the tuner's choice; the raw TCP rate
# measured in the same cluster), writes a fabric for that cluster from
# tools/sim/fabrics/namespace-4x2.fabric (its hosts, gpus and NIC replaced: the NIC's
# bandwidth is the measured iperf3 rate, its burst the tbf's, cluster.sh tbf-burst RATE; its
# cpu line the machine's cores, shared by every emulated host, with the copy speed at which
# weft-sim's 2-rank ring of 64 MiB over an unlimited link takes what the run's CPU probe took
# (multihost.sh: 2 more emulated hosts, unshaped, in the same run), and its wake the one at
# which the simulated ring at the smallest measured size from 1 KiB, if under 64 KiB, takes its
# measured time: the one number fitted to the grid's own AllReduce times, below the sizes the
# check counts (from 64 KiB; no sizes under 64 KiB or -W: wake 0), runs
# weft-sim on it for the same sizes (3 calls back to back, the last one timed, as the
# benchmark's loop runs them) and prints, per size, predicted / measured time per algorithm
# and both winners.
#
#   bench/sim-validate.sh -g HxK -r RATE [-R N] [-b BYTES] [-E BYTES] [-k DIR] [-T] [-A TOL]
#   -g HxK     hosts x ranks per host (default 4x2)
#   -r RATE    tbf rate of every link, both ends (default 2gbit)
#   -R N       interleaved repetitions (default 3)
#   -b BYTES   the smallest size (default 8, at most 1M; sizes going up by 4 from it)
#   -E BYTES   the largest size (default 64M)
#   -k DIR     raw outputs, the fabric and the table (default /tmp/weft-simval.<pid>)
#   -T         no runs: the table of the outputs already in DIR
#   -C         no cpu line: links only, as if the ranks' cores were free
#   -W         no wake fitted (the cpu line's wake 0)
#   -A TOL     assert: exit 3 unless, at every size from 64 KiB, every algorithm's prediction is
#              within TOL (0.15: 15%) of its measured time and the predicted winner is the
#              measured one or measured within 5% of it (a tie)
# Exit 0 when the table was made (and, with -A, the predictions agree); 1 a failed run.
# Environment: BENCH_DIR, SIM (default build/tools/weft-sim).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SIM=${SIM:-$ROOT/build/tools/weft-sim}
TEMPLATE=$ROOT/tools/sim/fabrics/namespace-4x2.fabric
grid=4x2 rate=2gbit reps=3 smallest=8 largest=64M keep=/tmp/weft-simval.$$ tablesOnly=0 tol="" noCpu=0 noWake=0
while getopts "g:r:R:b:E:k:TA:CW" opt; do
  case $opt in
    g) grid=$OPTARG ;; r) rate=$OPTARG ;; R) reps=$OPTARG ;; E) largest=$OPTARG ;; k) keep=$OPTARG ;;
    b) smallest=$OPTARG ;; T) tablesOnly=1 ;; A) tol=$OPTARG ;; C) noCpu=1 ;; W) noWake=1 ;;
    *) sed -n '2,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
[[ $grid =~ ^([0-9]+)x([0-9]+)$ ]] || { echo "$0: -g $grid: want HOSTSxRANKS" >&2; exit 2; }
nh=${BASH_REMATCH[1]} k=${BASH_REMATCH[2]}
[ -x "$SIM" ] || { echo "$0: no $SIM (make all)" >&2; exit 1; }
mkdir -p "$keep" || exit 1

if [ "$tablesOnly" = 0 ]; then
  "$HERE/multihost.sh" grid -g "$grid" -s "--rate $rate" -R "$reps" -b "$smallest" -E "$largest" -k "$keep" \
    -a "ring tree hier auto" >"$keep/run.md" || { cat "$keep/run.md"; exit 1; }
fi
"$HERE/multihost.sh" grid -g "$grid" -T -a "ring tree hier auto" -k "$keep" >"$keep/measured.md" || exit 1

# "4 MiB" -> 4194304 (the tables' sizes, measured and simulated)
toBytes() { awk '{ v = $1; u = $2; if (u == "") { u = v; sub(/^[0-9.]+/, "", u); sub(/[A-Za-z]+$/, "", v) }
  m = u ~ /^Ki/ ? 1024 : u ~ /^Mi/ ? 1048576 : u ~ /^Gi/ ? 1073741824 : 1; print v * m }'; }
gbps=$(awk '/^raw TCP/ { print $NF }' "$keep/measured.md")
[ -n "$gbps" ] || { echo "$0: no raw TCP rate in $keep/measured.md" >&2; exit 1; }
# measured rows: bytes ring tree hier tuner choice
awk -F'|' '$2 ~ /[0-9] (B|KiB|MiB)/ { gsub(/ /, "", $3); gsub(/ /, "", $4); gsub(/ /, "", $5); gsub(/ /, "", $6); gsub(/ /, "", $7)
  print $2 "|" $3, $4, $5, $6, $7 }' "$keep/measured.md" |
  while IFS='|' read -r size rest; do echo "$(echo "$size" | toBytes) $rest"; done | sort -n >"$keep/measured.txt"
[ -s "$keep/measured.txt" ] || { echo "$0: no measured rows in $keep/measured.md" >&2; exit 1; }

# The copy speed (GB/s) at which the simulated probe (2 hosts of 1 rank on an unlimited link,
# the machine's cores, ring AllReduce of 64 MiB) takes the measured probe's time: bisection on
# a log scale (the time falls as the speed grows).
fitCopy() { # probe-us
  local lo=0.01 hi=1000 mid t i probeFabric=$keep/probe.fabric base
  base=$(sed -e '/^#/d' -e '/^cpu /d' -e "s/^name .*/name      cpu-probe/" -e "s/^hosts .*/hosts     2/" \
    -e "s/^gpus .*/gpus      1/" -e "s/^nic .*/nic       count 1 bw 1000GB\/s lat 25us/" "$TEMPLATE")
  for ((i = 0; i < 40; i++)); do
    mid=$(awk -v a="$lo" -v b="$hi" 'BEGIN { printf "%.6g", sqrt(a * b) }')
    printf '%s\ncpu       cores %s copy %sGB/s pool machine\n' "$base" "$(nproc)" "$mid" >"$probeFabric"
    t=$("$SIM" "$probeFabric" --coll allreduce --ranks 2 --sizes 64MiB --algo ring --calls 3 | awk '$1 == 2 && $2 == "64MiB" { print $3 }')
    [ -n "$t" ] || return 1
    if awk -v t="$t" -v m="$1" 'BEGIN { exit !(t > m) }'; then lo=$mid; else hi=$mid; fi
  done
  echo "$mid"
}
probeUs=$(awk '/^cpu probe/ { print $NF }' "$keep/measured.md")
cpuLine="" copyGBs=""
if [ "$noCpu" = 1 ]; then
  probeUs=""
elif [ -n "$probeUs" ]; then
  copyGBs=$(fitCopy "$probeUs") || { echo "$0: weft-sim failed on the probe's fabric" >&2; exit 1; }
  cpuLine="cpu       cores $(nproc) copy ${copyGBs}GB/s pool machine"
else
  echo "$0: no cpu probe in $keep/measured.md (a run before the probe): no cpu line" >&2
fi
burst=$("$ROOT/tests/mpi/cluster.sh" tbf-burst "$rate") || exit 1
fabric=$keep/namespace-$grid.fabric
{
  echo "# bench/sim-validate.sh: $TEMPLATE with $nh hosts of $k ranks, each link shaped to"
  echo "# $rate (tbf, burst $burst bytes: the NIC's token bucket), the NIC at the iperf3 rate"
  echo "# measured in the same cluster ($gbps Gbit/s)."
  sed -e '/^#/d' -e '/^cpu /d' -e "s/^name .*/name      namespace-$grid-$rate/" -e "s/^hosts .*/hosts     $nh/" \
    -e "s/^gpus .*/gpus      $k/" -e "s/^nic .*/nic       count 1 bw ${gbps}Gbps lat 25us burst $burst/" "$TEMPLATE"
  [ -z "$cpuLine" ] || { echo "# the cpu probe took $probeUs us"; echo "$cpuLine"; }
} >"$fabric"

# The wake (us) at which the simulated ring at the given size takes its measured time:
# bisection (the time grows with the wake); 0 where the ring is slower without it.
fitWake() { # bytes measured-us
  local lo=0 hi=5000 mid t i wakeFabric=$keep/wake.fabric
  for ((i = 0; i < 30; i++)); do
    mid=$(awk -v a="$lo" -v b="$hi" 'BEGIN { printf "%.6g", (a + b) / 2 }')
    sed -e "s|^cpu .*|$cpuLine wake ${mid}us|" "$fabric" >"$wakeFabric"
    t=$("$SIM" "$wakeFabric" --coll allreduce --ranks $((nh * k)) --sizes "$1" --algo ring --calls 3 | awk '$1 ~ /^[0-9]+$/ && $2 ~ /B$/ { print $3 }')
    [ -n "$t" ] || return 1
    if awk -v t="$t" -v m="$2" 'BEGIN { exit !(t < m) }'; then lo=$mid; else hi=$mid; fi
  done
  awk -v w="$lo" 'BEGIN { printf "%.1f", w }'
}
wakeUs="" wakeBytes=""
if [ -n "$cpuLine" ] && [ "$noWake" = 0 ]; then
  read -r wakeBytes wakeMeasured < <(awk '$1 >= 1024 && $1 < 65536 { print $1, $2; exit }' "$keep/measured.txt")
  if [ -n "$wakeBytes" ]; then
    wakeUs=$(fitWake "$wakeBytes" "$wakeMeasured") || { echo "$0: weft-sim failed fitting the wake" >&2; exit 1; }
    sed -i -e "s|^cpu .*|$cpuLine wake ${wakeUs}us|" \
      -e "s/^# the cpu probe took .*/&; the wake fitted to the ring at $wakeBytes B ($wakeMeasured us)/" "$fabric"
  fi
fi
sizes=$(awk '{ printf "%s%s", (NR > 1 ? "," : ""), $1 }' "$keep/measured.txt")
"$SIM" "$fabric" --coll allreduce --ranks $((nh * k)) --sizes "$sizes" --algo ring,tree,hier --calls 3 >"$keep/sim.txt" 2>&1 ||
  { cat "$keep/sim.txt"; exit 1; }
# simulated rows: bytes ring tree hier tuner
awk '$1 ~ /^[0-9]+$/ && $2 ~ /B$/ { print $2, $3, $5, $7, $9 }' "$keep/sim.txt" |
  while read -r size rest; do echo "$(echo "$size" | toBytes) $rest"; done | sort -n >"$keep/sim.rows"

echo "<!-- bench/sim-validate.sh -g $grid -r $rate: $(grep -h -m1 '^<!--' "$keep/run.md" 2>/dev/null | sed 's/<!-- //; s/ -->//'); fabric $fabric -->"
echo "$nh hosts x $k ranks, every link at $rate (tbf); raw TCP one way $gbps Gbit/s; ${copyGBs:+cpu probe $probeUs us (copy ${copyGBs} GB/s a core and side). }${wakeUs:+wake $wakeUs us (fitted to the ring at $wakeBytes B). }Time in us; predicted / measured:"
echo
echo "| size | ring sim | ring meas | ratio | tree sim | tree meas | ratio | hier sim | hier meas | ratio | winner sim / meas | tuner picks (sim / run) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:--|:--|"
join "$keep/sim.rows" "$keep/measured.txt" | awk -v tol="${tol:-0.15}" -v assert="${tol:+1}" '
  function win(r, t, h) { return r <= t && r <= h ? "ring" : t <= h ? "tree" : "hier" }
  function human(b) { return b >= 1048576 ? b / 1048576 " MiB" : b >= 1024 ? b / 1024 " KiB" : b " B" }
  { # bytes, sim ring tree hier tuner, measured ring tree hier tunerTime tunerChoice
    ws = win($2, $3, $4); wm = win($6, $7, $8); same = ws == wm
    best = $6 < $7 ? $6 : $7; best = best < $8 ? best : $8
    picked = ws == "ring" ? $6 : ws == "tree" ? $7 : $8
    tie = !same && picked <= 1.05 * best
    ok = 1; for (i = 0; i < 3; i++) { q = $(2 + i) / $(6 + i); if (q < 1 - tol || q > 1 + tol) ok = 0 }
    if ($1 >= 65536) { big++; if (ok) good++; if (!same && !tie) bigWrong++ }
    if ($1 >= 4194304) { large++; if (ok) goodLarge++ }
    n++; if (same) agree++; if (tie) ties++
    printf "| %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %s / %s%s | %s / %s |\n", human($1),
      $2, $6, $2 / $6, $3, $7, $3 / $7, $4, $8, $4 / $8, ws, wm,
      same ? "" : tie ? sprintf(" (tie: %.2f)", picked / best) : sprintf(" (differ: %.2f)", picked / best), $5, $10 }
  END { printf "\nFrom 64 KiB, sizes with every algorithm within %d%%: %d of %d; same winner: %d of %d sizes", 100 * tol, good, big, agree, n
        printf " (%d more where the predicted winner was measured within 5%% of the best).\n", ties
        if (large) printf "From 4 MiB: %d of %d sizes with every algorithm within %d%%.\n", goodLarge, large, 100 * tol
        if (assert && (good < big || bigWrong > 0)) { print "sim-validate: the predictions do not agree (-A " tol ")"; exit 3 } }'
