#!/usr/bin/env bash
# Runs inside the rdma-vm guest (tests/rdma/check-rdma.sh boots it): the verbs tests of one
# configuration, as root, with the host's build. CONFIG n2: rxe0 <-> rxe1 over a veth pair
# (the conformance suite over verbs on two devices, the host's make check running it over the
# other transports; 2-rank collectives, QPs, a killed peer, bad values, leaks); n1: one rxe0
# (4-rank collectives, and the UCX transport's tests with UCX on rxe0). Ranks <= 2 per vCPU:
# TCG runs 14-56x slower than the host, so timeouts are generous and nothing is timed.
# WEFT_VERBS_TESTS_FULL=1 (RDMA_FULL=1 make check-rdma): the full sweeps, and hier on 2 ranks.
# Prints each binary's Criterion synthesis; exits 1 if any test failed.
set -u
BUILD=${1:?usage: run-in-vm.sh BUILD CONFIG}
CONFIG=${2:?usage: run-in-vm.sh BUILD CONFIG}
LOGDIR=$BUILD/rdma-logs/$CONFIG
mkdir -p "$LOGDIR"
export TMPDIR=/tmp HOME=/tmp
# UCX in the conformance suite: rxe's address does not fit a connection blob; its sockets do.
export UCX_TLS=tcp,self
rc=0
run() { # name, binary, criterion args...
  local name=$1 bin=$2; shift 2
  local t0=$SECONDS
  timeout -k 10 1500 "$bin" --jobs 1 --verbose "$@" >"$LOGDIR/$name.log" 2>&1
  local r=$?
  grep -E '^\[(FAIL|SKIP)\]' "$LOGDIR/$name.log" | grep -v 'Test is disabled' | head -20
  # A failure's own words (the log stays in the VM's copy of the build only): assertion
  # messages, ranks' errors, UCX's and the harness's complaints.
  [ $r = 0 ] || grep -E '^\[----\] .*(Assertion|:[0-9]+:)|^\[----\]   |^rank [0-9]+:|runRanks:|UCX  ERROR|Caught signal|uct_tcp_iface_progress|failed|timed out' \
    "$LOGDIR/$name.log" | head -40 | sed "s/^/$name: /"
  echo "$name: $(grep Synthesis "$LOGDIR/$name.log" | tail -1 | sed 's/.*Synthesis: //') (exit $r, $((SECONDS - t0)) s)"
  [ $r = 0 ] || rc=1
}
# UCX over rxe: rc_verbs carries the data, tcp only UCX's wireup (its ud_verbs aborts on this
# rxe, and rc_verbs alone cannot reach a peer); the run counts only if rxe0 sent packets.
# UCX 1.13's tcp transport itself crashes now and then while ranks connect (SIGSEGV at
# 0xfffffffffffffff8 in uct_tcp_iface_progress, the signature of its connection handling's
# bug reported against UCX 1.10 in rapidsai/ucx-py#668; about 1 run in 3 to 8 here, more
# under load; serialising every UCX call of weft's on one lock did not change it). A failed
# run whose log shows that crash is said so and run again, up to UCX_TRIES runs in all (2 were
# not enough: one CI run of 2026-12-07 crashed so in both); any other failure, or that crash
# in every run, fails.
UCX_TRIES=4
ucxCrashedInTcp() {
  grep -q 'Caught signal 11 (Segmentation fault: address not mapped to object at address 0xfffffffffffffff8)' "$1" &&
    grep -q 'uct_tcp_iface_progress' "$1"
}
ucxOverRxe() {
  local counter=/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts before after
  local filter='ucx/@(point_to_point_procs_3|every_collective_procs_3|nothing_left_after_destroy)'
  local rcBefore=$rc
  before=$(cat "$counter" 2>/dev/null || echo 0)
  local try=1
  UCX_TLS=rc_verbs,tcp,self run ucx_rxe "$BUILD/tests/transport/test_ucx" --filter "$filter"
  while [ "$rc" != "$rcBefore" ] && [ $try -lt $UCX_TRIES ] && ucxCrashedInTcp "$LOGDIR/ucx_rxe.log"; do
    echo "ucx_rxe: a rank died inside UCX's tcp transport (uct_tcp_iface_progress, UCX's own bug, above); again ($((try + 1)) of $UCX_TRIES)"
    mv "$LOGDIR/ucx_rxe.log" "$LOGDIR/ucx_rxe.$try.log"
    rc=$rcBefore
    try=$((try + 1))
    UCX_TLS=rc_verbs,tcp,self run ucx_rxe "$BUILD/tests/transport/test_ucx" --filter "$filter"
  done
  after=$(cat "$counter" 2>/dev/null || echo 0)
  echo "ucx_rxe: rxe0 sent $((after - before)) packets"
  if [ "$after" -le "$before" ]; then echo "ucx_rxe: FAIL: UCX moved nothing over rxe0"; rc=1; fi
}
ibv_devices | sed -n '3,$p' | awk '{print "device: " $1}'
case $CONFIG in
  n2)
    export WEFT_TEST_TRANSPORT=verbs
    run conformance "$BUILD/tests/transport/test_transport"
    unset WEFT_TEST_TRANSPORT
    run verbs_2 "$BUILD/tests/transport/test_verbs" --filter 'verbs/@(every_collective_procs_2|sleeping_ranks_wake_by_completion|sleeping_p2p_ranks_wake_by_completion|peer_transport_names_the_device|qps_per_connection_3|peer_killed_mid_collective|bad_values_refused|excluded_by_caret|nothing_left_after_destroy_and_abort)'
    # Last: it takes rank 0's interface down (and up again).
    run verbs_port_down "$BUILD/tests/transport/test_verbs" --filter 'verbs/port_down_fails_every_link'
    # hier on 2 ranks needs 2 (emulated) hosts: with the full sweep only (it takes minutes).
    [ -n "${WEFT_VERBS_TESTS_FULL:-}" ] && run verbs_2_hosts "$BUILD/tests/transport/test_verbs" --filter 'verbs/every_collective_hosts_2x1'
    ;;
  n1)
    run verbs_4 "$BUILD/tests/transport/test_verbs" --filter 'verbs/every_collective_@(procs_4|hosts_2x2)'
    ucxOverRxe
    ;;
  *) echo "run-in-vm.sh: unknown configuration $CONFIG"; exit 2 ;;
esac
exit $rc
