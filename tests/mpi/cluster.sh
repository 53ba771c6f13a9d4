#!/bin/bash
# Emulated hosts on one machine for multi-host tests: each "host" is a network namespace with a
# veth (eth0 inside) on a bridge in the root namespace, its own address in a private /24, and
# (through tests/mpi/nsagent) its own hostname. Root only.
#
#   cluster.sh up N [--rate 10gbit] [--delay 25us] [--congctl cubic] [--prefix NAME] [--owner PID]
#       Makes N hosts and prints, on stdout, lines a shell can eval:
#         WEFT_CLUSTER=NAME  WEFT_CLUSTER_DIR=...  WEFT_CLUSTER_SUBNET=10.213.X.0/24
#         WEFT_CLUSTER_BRIDGE_ADDR=10.213.X.254  WEFT_CLUSTER_HOSTS='10.213.X.1 10.213.X.2 ...'
#       (a table of namespace, address, hostname on stderr). Host i is namespace NAME-hI, hostname
#       NAME-hI, address 10.213.X.I on its eth0; the root side is veth NAME-vI on bridge NAME-br
#       (10.213.X.254). --rate/--delay put a netem qdisc on both ends of every host's link (eth0
#       egress and NAME-vI egress), so host to host crosses two shaped links one way. Without
#       netem in the kernel, --rate alone falls back to tbf, and --delay is a skip (77).
#       --congctl: the TCP congestion control of the hosts' subnet route (default cubic, Linux's
#       own default; "system": the machine's, which a namespace inherits). Not the machine's by
#       default: this one runs bbr, and under bbr a tbf-shaped 1gbit link stalled 2-rank ring
#       AllReduces of 512 KiB for ~12 ms in episodes (4.4 ms calls at 17-21 ms in 5 of 18 runs
#       of 100 calls, none past 11.6 ms under cubic, 2026-12-07), which no link model predicts.
#       NAME (default wft<owner pid>): a letter then up to 9 letters/digits. The cluster belongs
#       to --owner (default: the calling process); once the owner is gone it is stale.
#   cluster.sh down [--prefix NAME]      removes exactly what "up" made for NAME (killing what
#                                        still runs inside its namespaces)
#   cluster.sh clean                     removes every stale cluster (owner dead) and leftovers
#                                        of crashed runs (wft<digits>-* namespaces and links that
#                                        no live cluster claims)
#   cluster.sh list                      one line per cluster: name, owner, live/stale, subnet
#   cluster.sh tbf-burst RATE            the tbf burst (bytes) "up" uses for RATE
#
# State lives in $WEFT_CLUSTER_RUNDIR (default /run/weft-cluster), one directory per cluster,
# written before anything is made; nsagent reads the address -> namespace map from there.
# Exit codes: 0 ok; 77 hosts cannot be made on this machine, for a reason outside the project,
# probed before anything is made and printed as "cannot make hosts: [needs CAP] why" (CAP as in
# tests/common/caps.h: root, cmd:ip, cmd:unshare, cmd:flock, cmd:tc, netns: the kernel refuses a
# network namespace holding a bridge and a veth pair, netem): callers report "skipped" with it;
# 1 any other failure, a command of the setup included (a broken setup must fail the tests that
# need it, not skip them); 2 usage.
set -u
RUNDIR=${WEFT_CLUSTER_RUNDIR:-/run/weft-cluster}
SKIP=77
PROG=cluster.sh

die() { echo "$PROG: $*" >&2; exit 1; }
badArg() { echo "$PROG: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//' >&2; exit 2; }
skip() { # CAP why...
  local cap=$1; shift
  echo "$PROG: cannot make hosts: [needs $cap] $*" >&2; exit $SKIP
}

# "pid starttime" of a process (start time in clock ticks since boot, field 22 of stat), to
# tell a live owner from a reused pid.
procId() { # pid
  local pid=$1 stat
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  stat=${stat##*) }  # fields from 3 on (the command name may hold spaces)
  set -- $stat
  [ "$1" != Z ] && [ "$1" != X ] || return 1 # exited, not yet reaped
  echo "$pid ${20}"
}
# Whether the owner recorded in a cluster directory is still the same running process.
ownerAlive() { # dir
  local rec cur
  rec=$(cat "$1/owner" 2>/dev/null) || return 1
  cur=$(procId "${rec%% *}") || return 1
  [ "$cur" = "$rec" ]
}

# The congestion control "up" sets (stdout): NAME where the kernel has it; "system" as asked, or
# (said on stderr) where the default cubic is not in this kernel; a NAME it lacks is refused.
pickCongctl() { # name
  local have
  have=" $(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null) "
  if [ "$1" = system ] || [[ "$have" == *" $1 "* ]]; then echo "$1"
  elif [ "$1" = cubic ]; then
    echo "$PROG: this kernel has no cubic (available:$have); the hosts keep the machine's congestion control" >&2
    echo system
  else echo "$PROG: up: --congctl $1: not in this kernel (available:$have)" >&2; return 1; fi
}

# A tbf burst for a tc rate: 1 ms at that rate, at least 128 KiB (one GSO packet and then some).
tbfBurst() { # rate
  awk -v r="$1" 'BEGIN {
    n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
    m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9
    b = (u in m) ? n * m[u] / 8 / 1000 : 0
    if (b < 131072) b = 131072
    printf "%d", b }'
}

lock() {
  mkdir -p "$RUNDIR" 2>/dev/null || return 1
  exec 9>"$RUNDIR/.lock" || return 1
  flock 9
}

# Kills whatever runs in a namespace: TERM, then KILL after up to 3 s.
killInNs() { # ns
  local pids i
  pids=$(ip netns pids "$1" 2>/dev/null)
  [ -n "$pids" ] || return 0
  kill -TERM $pids 2>/dev/null
  for i in $(seq 30); do
    sleep 0.1
    pids=$(ip netns pids "$1" 2>/dev/null)
    [ -n "$pids" ] || return 0
  done
  kill -KILL $pids 2>/dev/null
  sleep 0.2
}

# Removes a cluster from its state directory's "made" log (lock held). Idempotent.
removeCluster() { # dir
  local dir=$1 kind name
  [ -d "$dir" ] || return 0
  if [ -f "$dir/made" ]; then
    while read -r kind name; do [ "$kind" = ns ] && killInNs "$name"; done <"$dir/made"
    # veths first (deleting the root end deletes the pair), then namespaces, then the bridge
    while read -r kind name; do
      [ "$kind" = veth ] && ip link show "$name" >/dev/null 2>&1 && ip link del "$name"
    done <"$dir/made"
    while read -r kind name; do
      [ "$kind" = ns ] && [ -e "/run/netns/$name" ] && ip netns del "$name"
    done <"$dir/made"
    while read -r kind name; do
      [ "$kind" = bridge ] && ip link show "$name" >/dev/null 2>&1 && ip link del "$name"
    done <"$dir/made"
  fi
  rm -rf "$dir"
}

# Namespaces and links named like PREFIX-hN / PREFIX-vN / PREFIX-br (made by a run that lost its
# state directory). Prints "ns NAME" / "veth NAME" / "bridge NAME" lines.
namedLike() { # prefix-regex
  local re=$1
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^($re)-h[0-9]+$" | sed 's/^/ns /'
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^($re)-(v[0-9]+|br)$" | sed -e 's/^\(.*-br\)$/bridge \1/' -e 's/^\([^ ]*-v[0-9]*\)$/veth \1/'
}

removeNamed() { # lines from namedLike
  local lines=$1 tmp
  [ -n "$lines" ] || return 0
  tmp=$(mktemp -d "$RUNDIR/.orphan.XXXXXX")
  echo "$lines" >"$tmp/made"
  removeCluster "$tmp"
}

# What this machine cannot do is a skip, not a failure; once these pass, nothing is.
prereqs() {
  [ "$(id -u)" -eq 0 ] || skip root "not root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN)"
  command -v ip >/dev/null || skip cmd:ip "no 'ip' binary (package iproute2, listed in install-deps.sh)"
  command -v unshare >/dev/null || skip cmd:unshare "no 'unshare' binary (util-linux)"
  command -v flock >/dev/null || skip cmd:flock "no 'flock' binary (util-linux)"
  # Whether the kernel lets us make what "up" makes, tried in a throwaway namespace that
  # vanishes with the probe, so nothing of this machine's is touched.
  local err
  err=$(unshare --net --uts sh -c 'ip link add wftprobebr type bridge &&
    ip link add wftprobev0 type veth peer name wftprobev1' 2>&1) ||
    skip netns "the kernel refuses a network namespace with a bridge and a veth pair: ${err:-exit $?}"
}

cmdUp() {
  local n="" rate="" delay="" prefix="" owner=$PPID congctl=cubic
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --delay) delay=${2:?--delay needs a value}; shift 2 ;;
      --congctl) congctl=${2:?--congctl needs a value}; shift 2 ;;
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      --owner) owner=${2:?--owner needs a pid}; shift 2 ;;
      -h|--help) usage ;;
      -*) echo "$PROG: unknown option $1" >&2; usage ;;
      *) [ -z "$n" ] || usage; n=$1; shift ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 99 ] || badArg "up: N must be 1..99"
  [ -n "$prefix" ] || prefix=wft$owner
  [[ "$prefix" =~ ^[a-z][a-z0-9]{0,9}$ ]] ||
    badArg "up: prefix '$prefix' must be a lowercase letter then up to 9 lowercase letters/digits"
  local ownerId
  ownerId=$(procId "$owner") || die "up: owner pid $owner is not running"
  congctl=$(pickCongctl "$congctl") || exit 2

  prereqs
  if [ -n "$rate$delay" ]; then command -v tc >/dev/null || skip cmd:tc "no 'tc' binary (iproute2) for --rate/--delay"; fi
  lock || die "up: cannot lock $RUNDIR/.lock"

  local dir=$RUNDIR/$prefix
  if [ -d "$dir" ]; then
    ownerAlive "$dir" && die "up: cluster $prefix is already up (owner $(cut -d' ' -f1 "$dir/owner")); use another --prefix"
    echo "$PROG: removing stale cluster $prefix left by a crashed run" >&2
    removeCluster "$dir"
  fi
  removeNamed "$(namedLike "$prefix")"

  # Subnet 10.213.X.0/24: X from a hash of the name, then the next one that no live cluster
  # claims and no address or route of this machine touches.
  local x0 x used i
  x0=$(( $(printf %s "$prefix" | cksum | cut -d' ' -f1) % 250 + 1 ))
  used=" $(cat "$RUNDIR"/*/subnet 2>/dev/null | tr '\n' ' ') "
  used+=$(ip -4 -o addr show 2>/dev/null; ip -4 route show table all 2>/dev/null)
  for ((i = 0; i < 250; i++)); do
    x=$(( (x0 - 1 + i) % 250 + 1 ))
    if ! grep -qF " 10.213.$x " <<<"$used" && ! grep -qF "10.213.$x." <<<"$used"; then break; fi
    x=""
  done
  [ -n "$x" ] || die "up: no free subnet left in 10.213.1-250.0/24"

  mkdir -p "$dir" || die "up: cannot create $dir"
  echo "$ownerId" >"$dir/owner"
  echo "10.213.$x" >"$dir/subnet"
  : >"$dir/made"
  : >"$dir/hosts"

  local err
  fail() { # what, error text
    echo "$PROG: up: $1 failed: $2" >&2
    removeCluster "$dir"
    exit 1
  }
  run() { # what, command...
    local what=$1; shift
    err=$("$@" 2>&1) || fail "$what" "${err:-exit $?}"
  }
  local br=$prefix-br
  echo "bridge $br" >>"$dir/made"
  run "ip link add $br type bridge" ip link add "$br" type bridge
  run "address on $br" ip addr add "10.213.$x.254/24" dev "$br"
  run "$br up" ip link set "$br" up
  # Shaping: netem (delay and rate); kernels without netem can still limit the rate with tbf.
  local ns veth shape=""
  [ -n "$delay" ] && shape+=" delay $delay"
  [ -n "$rate" ] && shape+=" rate $rate"
  if [ -n "$shape" ]; then
    err=$(tc qdisc add dev "$br" root netem $shape 2>&1)
    if [ $? -eq 0 ]; then
      tc qdisc del dev "$br" root 2>/dev/null
      shape="netem$shape"
    elif [[ "$err" == *"qdisc kind is unknown"* ]] && [ -z "$delay" ]; then
      shape="tbf rate $rate burst $(tbfBurst "$rate") latency 10ms"
      echo "$PROG: this kernel has no netem qdisc; limiting the rate with $shape" >&2
    elif [[ "$err" == *"qdisc kind is unknown"* ]]; then
      removeCluster "$dir"
      skip netem "--delay $delay: this kernel has no netem qdisc (sch_netem), which delays need"
    else
      fail "tc qdisc add ... netem$shape" "$err"
    fi
  fi
  for ((i = 1; i <= n; i++)); do
    ns=$prefix-h$i veth=$prefix-v$i
    echo "ns $ns" >>"$dir/made"
    run "ip netns add $ns" ip netns add "$ns"
    echo "veth $veth" >>"$dir/made"
    run "veth $veth" ip link add "$veth" type veth peer name eth0 netns "$ns"
    run "$veth on $br" ip link set "$veth" master "$br" up
    run "address in $ns" ip -n "$ns" addr add "10.213.$x.$i/24" dev eth0
    run "eth0 up in $ns" ip -n "$ns" link set eth0 up
    run "lo up in $ns" ip -n "$ns" link set lo up
    [ "$congctl" = system ] ||
      run "congctl $congctl in $ns" ip -n "$ns" route replace "10.213.$x.0/24" dev eth0 proto kernel \
        scope link src "10.213.$x.$i" congctl "$congctl"
    if [ -n "$shape" ]; then
      run "tc on $veth ($shape)" tc qdisc add dev "$veth" root $shape
      run "tc on eth0 in $ns ($shape)" tc -n "$ns" qdisc add dev eth0 root $shape
    fi
    echo "10.213.$x.$i $ns" >>"$dir/hosts"
  done
  echo "$n" >"$dir/n"
  echo "$shape" >"$dir/shape"
  echo "$congctl" >"$dir/congctl"
  exec 9>&-

  {
    printf '%-16s %-14s %s\n' namespace/hostname address "interface (shaping: ${shape:-none}; tcp: $congctl)"
    while read -r a s; do printf '%-16s %-14s eth0\n' "$s" "$a"; done <"$dir/hosts"
    printf '%-16s %-14s bridge (mpirun side)\n' "$br" "10.213.$x.254"
  } >&2
  echo "WEFT_CLUSTER=$prefix"
  echo "WEFT_CLUSTER_DIR=$dir"
  echo "WEFT_CLUSTER_SUBNET=10.213.$x.0/24"
  echo "WEFT_CLUSTER_BRIDGE_ADDR=10.213.$x.254"
  echo "WEFT_CLUSTER_HOSTS='$(cut -d' ' -f1 "$dir/hosts" | tr '\n' ' ' | sed 's/ $//')'"
}

cmdDown() {
  local prefix="" owner=$PPID
  while [ $# -gt 0 ]; do
    case $1 in
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      -h|--help) usage ;;
      *) echo "$PROG: unknown argument $1" >&2; usage ;;
    esac
  done
  [ -n "$prefix" ] || prefix=wft$owner
  [[ "$prefix" =~ ^[a-z][a-z0-9]{0,9}$ ]] || badArg "down: bad prefix '$prefix'"
  [ -d "$RUNDIR/$prefix" ] || { echo "$PROG: no cluster $prefix" >&2; return 0; }
  lock || die "cannot lock $RUNDIR"
  removeCluster "$RUNDIR/$prefix"
  local left
  left=$(namedLike "$prefix")
  [ -z "$left" ] || die "down: still present after removing cluster $prefix: $(echo $left)"
  echo "$PROG: cluster $prefix removed" >&2
}

cmdClean() {
  prereqs
  [ -d "$RUNDIR" ] || mkdir -p "$RUNDIR" || die "cannot create $RUNDIR"
  lock || die "cannot lock $RUNDIR"
  local dir name count=0 live="" orphans
  for dir in "$RUNDIR"/*/; do
    [ -d "$dir" ] || continue
    dir=${dir%/}; name=${dir##*/}
    if ownerAlive "$dir"; then live+="|$name"; continue; fi
    echo "$PROG: removing stale cluster $name (owner $(cut -d' ' -f1 "$dir/owner" 2>/dev/null) is gone)" >&2
    removeCluster "$dir"; count=$((count + 1))
  done
  # Leftovers with the default naming that no live cluster claims.
  orphans=$(namedLike 'wft[0-9]+' | while read -r kind obj; do
    [[ "$obj" =~ ^(wft[0-9]+)- ]] && [[ "|${live#|}|" == *"|${BASH_REMATCH[1]}|"* ]] && continue
    echo "$kind $obj"
  done)
  if [ -n "$orphans" ]; then
    echo "$PROG: removing leftovers:" $orphans >&2
    removeNamed "$orphans"; count=$((count + 1))
  fi
  echo "$PROG: clean: $count stale cluster(s)/leftover set(s) removed" >&2
}

cmdList() {
  local dir name state
  for dir in "$RUNDIR"/*/; do
    [ -d "$dir" ] || continue
    dir=${dir%/}; name=${dir##*/}
    if ownerAlive "$dir"; then state=live; else state=stale; fi
    printf '%-12s owner %-8s %-5s 10.213.%s.0/24 %s hosts\n' "$name" "$(cut -d' ' -f1 "$dir/owner" 2>/dev/null)" \
      "$state" "$(cat "$dir/subnet" 2>/dev/null | sed 's/^10\.213\.//')" "$(wc -l <"$dir/hosts" 2>/dev/null)"
  done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) cmdUp "$@" ;;
  down) cmdDown "$@" ;;
  clean) cmdClean "$@" ;;
  list) cmdList "$@" ;;
  tbf-burst) tbfBurst "${1:?tbf-burst needs a rate}"; echo ;;
  *) usage ;;
esac
