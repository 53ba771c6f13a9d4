/* weft-sim's fabric parser, and its engine against what can be known without it: the
 * closed-form alpha-beta time of a ring on a uniform fabric, and the exact mode against the
 * symmetric one where both run. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan.h"
#include "sim.h"

static const char *const good =
    "# a comment line\n"
    "name t\n"
    "hosts 16   # trailing comment\n"
    "gpus 1\n"
    "scaleup bw 100GB/s lat 1us\n"
    "nic count 1 bw 100Gbps lat 5us\n"
    "network flat hop 0us\n"
    "rank overhead 0.5us reduce 50GB/s\n"
    "slots local 131072 net 512KiB\n";

Test(fabric, parses_units, .timeout = 10) {
  struct simFabric f;
  char err[256] = "";
  cr_assert_eq(simFabricParse(good, "good", &f, err, sizeof err), 0, "%s", err);
  cr_expect_eq(f.hosts, 16);
  cr_expect_eq(f.gpus, 1);
  cr_expect_float_eq(f.nicGBs, 12.5, 1e-12);
  cr_expect_float_eq(f.nicLatUs, 5, 1e-12);
  cr_expect_eq(f.netSlot, 524288u);
  cr_expect_eq(f.net, SIM_NET_FLAT);
  cr_expect(f.localDepth == 8 && f.netDepth == 16, "default depths %d, %d", f.localDepth, f.netDepth);
  struct simFabric d;
  cr_assert_eq(simFabricParse("name d\nhosts 2\ngpus 1\nscaleup bw 1GB/s lat 1us\nnic count 1 bw 1Gbps lat 1us\n"
                              "network flat\nslots local 4096 net 8192 net_depth 4 local_depth 3\n",
                              "d", &d, err, sizeof err), 0, "%s", err);
  cr_expect(d.netDepth == 4 && d.localDepth == 3 && d.netSlot == 8192, "depths %d, %d", d.netDepth, d.localDepth);
}

/* Each bad text is refused with the line and the cause. */
Test(fabric, refuses_with_line_and_cause, .timeout = 10) {
  static const struct { const char *text, *expect; } bad[] = {
    {"name a\nhosts 2\ngpus 1\nscaleup bw 1GB/s lat 1us\nnic count 1 bw 1Gbps lat 1us\n", "no 'network' line"},
    {"name a\nhosts x\n", "bad:2: 'hosts' needs a value such as 8, not 'x'"},
    {"name a\nhosts 2\ngpus 1\nscaleup bw 1GB lat 1us\n", "bad:4: 'bw' needs a value such as 900GB/s: '1GB' has no unit"},
    {"name a\nhosts 2\nhosts 3\n", "bad:3: 'hosts' given twice"},
    {"name a\nwidgets 3\n", "bad:2: unknown directive 'widgets'"},
    {"name a\nnic count 1 bw 1Gbps\n", "bad:2: 'nic' needs 'lat'"},
    {"name a\nnic count 1 bw 1Gbps lat 1us speed 3\n", "bad:2: 'nic' has no key 'speed'"},
    {"name a\nnic count 1 bw 1Gbps lat 1us burst 100.5\n", "'burst' needs a whole number"},
    {"name a\nnic count 1 bw 1Gbps lat\n", "bad:2: 'nic': 'lat' has no value"},
    {"name a\nnetwork torus\n", "bad:2: 'network' kind 'torus' is not flat, leafspine or rail"},
    {"name a\nnetwork flat hosts_per_leaf 3 hop 1us\n", "only 'hop'"},
    {"name a\nnetwork rail oversub 0.5 hosts_per_leaf 4 hop 1us\n", "'oversub' 0.5 is out of range"},
    {"name a\ngpus 2.5\n", "'gpus' needs a whole number"},
    {"name a\nscaleup bw -3GB/s lat 1us\n", "'bw' -3GB/s is out of range"},
    {"name a\ncpu cores 2 copy 1GB/s pool rack\n", "bad:2: 'cpu' pool 'rack' is not host or machine"},
    {"name a\ncpu cores 2\n", "bad:2: 'cpu' needs 'copy'"},
    {"name a\ncpu cores 0 copy 1GB/s\n", "'cores' 0 is out of range"},
    {"name a\ncpu cores 2 copy 1GB/s wake -3us\n", "'wake' -3us is out of range"},
    {"name a\ncpu cores 2 copy 1GB/s wake 5GB/s\n", "'wake' needs a value such as 50us"},
    {"name a\nslots local 4096 net 4096 net_depth 0\n", "'net_depth' 0 is out of range"},
    {"name a\nslots local 4096 net 4096 local_depth 2.5\n", "'local_depth' needs a whole number"},
    {"name a\nhosts 2\ngpus 8\nscaleup bw 1GB/s lat 1us\nnic count 3 bw 1Gbps lat 1us\nnetwork flat\n",
     "3 NICs cannot be shared evenly by 8 accelerators"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    struct simFabric f;
    char err[256] = "";
    cr_expect_eq(simFabricParse(bad[i].text, "bad", &f, err, sizeof err), -1, "case %zu accepted", i);
    cr_expect(strstr(err, bad[i].expect) != NULL, "case %zu: '%s' does not say '%s'", i, err,
              bad[i].expect);
  }
  char err[256];
  struct simFabric f;
  cr_expect_eq(simFabricLoad("/nonexistent/fabric", &f, err, sizeof err), -1);
  cr_expect(strstr(err, "cannot open") != NULL, "%s", err);
}

static struct simFabric load(const char *text) {
  struct simFabric f;
  char err[256] = "";
  cr_assert_eq(simFabricParse(text, "test", &f, err, sizeof err), 0, "%s", err);
  return f;
}

static double simulateCalls(const struct simFabric *f, int n, enum simAlgo algo, weftColl_t coll,
                            size_t bytes, int symmetric, int calls) {
  char err[512] = "";
  struct simComm *c = simCommNew(f, n, err, sizeof err);
  cr_assert_not_null(c, "%s", err);
  struct simCall call = {coll, bytes};
  struct simOptions o = {symmetric, -1, 1, -1, 0, NULL, calls};
  struct simResult r;
  int rc = simRun(c, algo, &call, &o, &r, err, sizeof err);
  simCommFree(c);
  cr_assert_eq(rc, 0, "%s", err);
  return r.timeUs;
}

static double simulate(const struct simFabric *f, int n, enum simAlgo algo, weftColl_t coll,
                       size_t bytes, int symmetric) {
  return simulateCalls(f, n, algo, coll, bytes, symmetric, 1);
}

/* 2 hosts of 1 rank at 1 Gbit/s, each NIC behind a tbf-like bucket of 128 KiB. */
static const char *const bucketed2x1 =
    "name b\nhosts 2\ngpus 1\nscaleup bw 4GB/s lat 1us\nnic count 1 bw 1Gbps lat 25us burst 128KiB\n"
    "network flat hop 0us\nrank overhead 1us reduce 4GB/s\nslots local 131072 net 524288\n";

/* One rank per host on one switch, every chunk one piece: each of the ring's 2(n-1) steps
 * after the first waits for the previous rank's piece (latency + bytes over bandwidth), then
 * takes the overhead, plus the reduction for the n-1 reducing steps:
 * T = o + 2(n-1)(L + W + o) + (n-1) b / R, W = (b + trailer) / bw. */
Test(engine, ring_matches_closed_form, .timeout = 30) {
  struct simFabric f = load(good);
  int n = 16;
  size_t bytes = 16 * 4096; /* chunks of 4 KiB */
  double b = (double)bytes / n, W = (b + 32) / (f.nicGBs * 1e3), L = f.nicLatUs, o = f.overheadUs;
  double expect = o + 2.0 * (n - 1) * (L + W + o) + (n - 1) * b / (f.reduceGBs * 1e3);
  double got = simulate(&f, n, SIM_RING, weftCollAllReduce, bytes, 0);
  cr_expect(fabs(got - expect) < 1e-6 * expect, "ring AllReduce: simulated %.6f us, closed form %.6f", got, expect);
  double expectAg = o + (n - 1) * (L + W + o);
  double gotAg = simulate(&f, n, SIM_RING, weftCollAllGather, bytes, 0);
  cr_expect(fabs(gotAg - expectAg) < 1e-6 * expectAg, "ring AllGather: simulated %.6f us, closed form %.6f",
            gotAg, expectAg);
  /* bandwidth-bound: 64 MiB in pieces, the busiest link carries 2(n-1)/n of it */
  size_t big = 64u << 20;
  double wire = 2.0 * (n - 1) / n * (double)big / (f.nicGBs * 1e3);
  double gotBig = simulate(&f, n, SIM_RING, weftCollAllReduce, big, 0);
  cr_expect(gotBig > wire && gotBig < 1.1 * wire, "ring AllReduce of 64 MiB: %.1f us, wire time %.1f", gotBig, wire);
}

/* A NIC behind a token bucket (an emulated cluster's tbf): the tree's chain of dependent
 * messages between 2 hosts (a half up, the result down, one after the other on each link)
 * waits for every hop's bytes on a plain link, but on a bucketed one the tokens saved while a
 * link idles carry the next message at once, so it takes what the ring takes, the bytes each
 * way over the rate (measured: 1.1 ms for both at 128 KiB and 1 Gbit/s, docs/scale.md). No
 * bucket lets a call beat its bytes over the rate. */
Test(engine, token_bucket_hides_dependency_chains, .timeout = 30) {
  static const char *const plain =
      "name p\nhosts 2\ngpus 1\nscaleup bw 4GB/s lat 1us\nnic count 1 bw 1Gbps lat 25us\n"
      "network flat hop 0us\nrank overhead 1us reduce 4GB/s\nslots local 131072 net 524288\n";
  struct simFabric p = load(plain), b = load(bucketed2x1);
  cr_expect_float_eq(b.nicBurstBytes, 131072.0, 1e-9);
  cr_expect_float_eq(p.nicBurstBytes, 0.0, 1e-9);
  size_t bytes = 128 * 1024;
  double wire = (double)bytes / (p.nicGBs * 1e3); /* each way, ring and tree alike */
  double ringP = simulate(&p, 2, SIM_RING, weftCollAllReduce, bytes, 0);
  double treeP = simulate(&p, 2, SIM_TREE, weftCollAllReduce, bytes, 0);
  double ringB = simulate(&b, 2, SIM_RING, weftCollAllReduce, bytes, 0);
  double treeB = simulate(&b, 2, SIM_TREE, weftCollAllReduce, bytes, 0);
  cr_expect(treeP > 1.9 * wire, "plain link: the tree's chain takes %.1f us, 4 hops of %.1f", treeP, wire / 2);
  cr_expect(treeB < 1.1 * ringB, "bucketed link: tree %.1f us, ring %.1f", treeB, ringB);
  const double all[] = {ringP, ringB, treeB};
  for (int i = 0; i < 3; i++) cr_expect(all[i] >= wire, "%.1f us beats the rate (%.1f us)", all[i], wire);
}

/* Calls back to back, as a benchmark's loop runs them: hier with one rank per host sends its
 * Reduce up one link and its Broadcast down the other, so each link idles half of a call and
 * its bucket refills for the next call (measured on 2 x 1 at 1 Gbit/s, 256 KiB: 2.7 ms; from
 * empty buckets the model said 3.4). A ring keeps both links busy: its time hardly moves. */
Test(engine, calls_back_to_back_refill_idle_buckets, .timeout = 30) {
  struct simFabric b = load(bucketed2x1);
  size_t mid = 256 * 1024, big = 64u << 20;
  double hierOnce = simulate(&b, 2, SIM_HIER, weftCollAllReduce, mid, 0);
  double hierLoop = simulateCalls(&b, 2, SIM_HIER, weftCollAllReduce, mid, 0, 3);
  cr_expect(hierLoop < 0.8 * hierOnce, "hier 256 KiB: %.1f us in a loop, %.1f once", hierLoop, hierOnce);
  cr_expect(hierLoop >= (double)mid / (b.nicGBs * 1e3), "hier in a loop beats the rate: %.1f us", hierLoop);
  double ringOnce = simulate(&b, 2, SIM_RING, weftCollAllReduce, big, 0);
  double ringLoop = simulateCalls(&b, 2, SIM_RING, weftCollAllReduce, big, 0, 3);
  cr_expect(fabs(ringLoop - ringOnce) < 0.01 * ringOnce, "ring 64 MiB: %.1f us in a loop, %.1f once", ringLoop, ringOnce);
}

/* hier's AllReduce with one rank per host is a chained Reduce to rank 0, then its Broadcast,
 * beside a token each rank passes to its successor on the communicator's ring: another link
 * between the same two ranks. A piece of 512 KiB is forwarded only once it has arrived, so
 * each chain's 3 hops wait for it in turn: at least 6 times its wire time. (When the token's
 * link and the chain's were one queue, ranks forwarded the data on the token's arrival: 2.) */
Test(engine, hier_chain_waits_for_its_data, .timeout = 30) {
  struct simFabric f = load(good);
  size_t bytes = 512 * 1024;
  double wire = (double)bytes / (f.nicGBs * 1e3);
  double got = simulate(&f, 4, SIM_HIER, weftCollAllReduce, bytes, 0);
  cr_expect(got >= 6 * wire, "hier on 4 hosts x 1: %.1f us, under 6 pieces' wire time (%.1f us)", got, 6 * wire);
}

/* With a cpu line, a byte crossing a NIC costs a core its copy time on each side. On NICs far
 * faster than the copies, a 2-rank ring of 64 MiB sends 64 MiB each way: 4 copies of 64 MiB
 * in all, shared by the cores that run them (both hosts' 2 cores, or the one machine's 2 when
 * the hosts share it), within 20% of that bound: the ring runs in segments of 2 MiB a rank,
 * each a send, a reduce-and-send and a receive of 4 pieces, and each segment fills and drains
 * its pipeline (a host's 2 cores idle for 0.6 of its 4.8 ms); one pool for both hosts fills
 * those gaps with the other host's copies. */
Test(engine, cpu_copies_bound_a_fast_network, .timeout = 30) {
#define FAST_NICS "name c\nhosts 2\ngpus 1\nscaleup bw 4GB/s lat 1us\nnic count 1 bw 1000GB/s lat 25us\n" \
                  "network flat hop 0us\nrank overhead 1us reduce 100GB/s\n"
  static const char *const hostPool = FAST_NICS "cpu cores 2 copy 1GB/s\n";
  static const char *const machinePool = FAST_NICS "cpu cores 2 copy 1GB/s pool machine\n";
#undef FAST_NICS
  struct simFabric h = load(hostPool), m = load(machinePool);
  cr_expect(h.cpuCores == 2 && !h.cpuPoolMachine && m.cpuPoolMachine, "cpu lines misread");
  cr_expect_float_eq(h.cpuCopyGBs, 1.0, 1e-12);
  size_t bytes = 64u << 20;
  double copies = 4.0 * (double)bytes / 1e3; /* us of one core at 1 GB/s */
  double perHost = simulate(&h, 2, SIM_RING, weftCollAllReduce, bytes, 0);
  double shared = simulate(&m, 2, SIM_RING, weftCollAllReduce, bytes, 0);
  cr_expect(perHost >= copies / 4 && perHost < 1.2 * copies / 4, "2 cores per host: %.0f us, bound %.0f", perHost, copies / 4);
  cr_expect(shared >= copies / 2 && shared < 1.1 * copies / 2, "2 cores in all: %.0f us, bound %.0f", shared, copies / 2);
}

/* The cpu line's wake: a rank that waited for its piece runs `wake` after the piece is in. An
 * 8-byte ring AllReduce on 4 hosts of 1 rank waits at each of its 2 (n - 1) steps after the
 * first (each needs its predecessor's piece, sent as the predecessor got its own): 6 steps, of
 * which every one but the first of rank 0's waits, so the time grows by 6 wakes, as the
 * critical path runs through one step per hop. Without the key the wake is 0. */
Test(engine, cpu_wake_delays_each_waited_piece, .timeout = 30) {
#define WAKE_NICS "name w\nhosts 4\ngpus 1\nscaleup bw 4GB/s lat 1us\nnic count 1 bw 10GB/s lat 25us\n" \
                  "network flat hop 0us\nrank overhead 1us reduce 100GB/s\n"
  struct simFabric none = load(WAKE_NICS "cpu cores 8 copy 10GB/s\n");
  struct simFabric woken = load(WAKE_NICS "cpu cores 8 copy 10GB/s wake 100us\n");
#undef WAKE_NICS
  cr_expect(none.cpuWakeUs == 0 && woken.cpuWakeUs == 100, "wake misread: %g, %g", none.cpuWakeUs, woken.cpuWakeUs);
  double base = simulate(&none, 4, SIM_RING, weftCollAllReduce, 64, 0);
  double slow = simulate(&woken, 4, SIM_RING, weftCollAllReduce, 64, 0);
  cr_expect(slow - base > 5.5 * 100 && slow - base < 6.5 * 100, "6 waited steps: %.1f us against %.1f", slow, base);
}

/* A core booked ahead (a copy waiting for its bytes) still runs earlier work in the gap
 * before that booking, if it fits; otherwise the work goes to the core free first. */
Test(cores, fill_gaps_before_later_bookings, .timeout = 10) {
  struct simCores c;
  cr_assert_eq(simCoresInit(&c, 1, 1), 0);
  double s, e;
  cr_assert_eq(simCoresTake(&c, 0, 0, 10, 10, &s, &e), 0);
  cr_expect(s == 10 && e == 20, "[%g, %g]", s, e);
  cr_assert_eq(simCoresTake(&c, 0, 0, 0, 5, &s, &e), 0);
  cr_expect(s == 0 && e == 5, "before the booking: [%g, %g]", s, e);
  cr_assert_eq(simCoresTake(&c, 0, 0, 0, 8, &s, &e), 0);
  cr_expect(s == 20 && e == 28, "too long for the gap [5, 10]: [%g, %g]", s, e);
  cr_assert_eq(simCoresTake(&c, 0, 0, 6, 4, &s, &e), 0);
  cr_expect(s == 6 && e == 10, "fits the gap: [%g, %g]", s, e);
  cr_assert_eq(simCoresTake(&c, 0, 25, 25, 1, &s, &e), 0);
  cr_expect(s == 28 && e == 29, "after what is booked at now: [%g, %g]", s, e);
  simCoresFree(&c);
  struct simCores two;
  cr_assert_eq(simCoresInit(&two, 2, 2), 0);
  cr_assert_eq(simCoresTake(&two, 1, 0, 0, 10, &s, &e), 0);
  cr_assert_eq(simCoresTake(&two, 1, 0, 0, 10, &s, &e), 0);
  cr_expect(s == 0, "the pool's second core: [%g, %g]", s, e);
  cr_assert_eq(simCoresTake(&two, 1, 0, 0, 10, &s, &e), 0);
  cr_expect(s == 10, "both busy: [%g, %g]", s, e);
  cr_assert_eq(simCoresTake(&two, 0, 0, 0, 10, &s, &e), 0);
  cr_expect(s == 0, "another pool is free: [%g, %g]", s, e);
  simCoresFree(&two);
}

static const char *const railed =
    "name r\nhosts 8\ngpus 4\nscaleup bw 200GB/s lat 1us\nnic count 4 bw 100Gbps lat 4us\n"
    "network rail hosts_per_leaf 8 oversub 2 hop 1us\nrank overhead 0.5us reduce 100GB/s\n";
static const char *const flat =
    "name f\nhosts 8\ngpus 4\nscaleup bw 200GB/s lat 1us\nnic count 2 bw 100Gbps lat 4us\n"
    "network flat hop 0us\nrank overhead 0.5us reduce 100GB/s\n";

/* Where every host does what host 0 does, simulating host 0's ranks gives every rank's time:
 * on one switch exactly; on rails oversubscribed 2:1, where every host's boundary piece
 * crosses the spines, within 1% (the folded leaf gives host 0 1/8 of its capacity, as if the
 * eight hosts' pieces came at once; the exact ones queue). */
Test(engine, symmetric_matches_exact, .timeout = 60) {
  const char *fabrics[] = {flat, railed};
  const weftColl_t colls[] = {weftCollAllReduce, weftCollAllGather, weftCollReduceScatter};
  const size_t sizes[] = {32 * 1024, 32u << 20};
  for (int k = 0; k < 2; k++) {
    struct simFabric f = load(fabrics[k]);
    for (int a = 0; a < 3; a++)
      for (int c = 0; c < 3; c++)
        for (int s = 0; s < 2; s++) {
          enum simAlgo algo = a == 0 ? SIM_RING : SIM_HIER;
          if (a == 2) continue;
          double exact = simulate(&f, 32, algo, colls[c], sizes[s], 0);
          double sym = simulate(&f, 32, algo, colls[c], sizes[s], 1);
          cr_expect(fabs(exact - sym) <= (k == 0 ? 1e-9 : 1e-2) * exact, "%s %s %s of %zu bytes: exact %.3f us, symmetric %.3f",
                    f.name, simAlgoNames[algo], weftCollName(colls[c]), sizes[s], exact, sym);
        }
  }
}

/* The symmetric mode is refused where ranks are not alike, with the reason. */
Test(engine, symmetric_refusals, .timeout = 10) {
  struct simFabric f = load(flat);
  char err[512] = "";
  struct simComm *c = simCommNew(&f, 32, err, sizeof err);
  cr_assert_not_null(c, "%s", err);
  struct simOptions o = {1, -1, 1, -1, 0, NULL, 1};
  struct simResult r;
  struct simCall call = {weftCollAllReduce, 1u << 20};
  cr_expect_eq(simRun(c, SIM_TREE, &call, &o, &r, err, sizeof err), -1);
  cr_expect(strstr(err, "double binary tree") != NULL, "%s", err);
  struct simCall tiny = {weftCollAllReduce, 64};
  cr_expect_eq(simRun(c, SIM_RING, &tiny, &o, &r, err, sizeof err), -1);
  cr_expect(strstr(err, "not a multiple of the ranks") != NULL, "%s", err);
  o.slowRank = 3, o.slowFactor = 2;
  cr_expect_eq(simRun(c, SIM_RING, &call, &o, &r, err, sizeof err), -1);
  cr_expect(strstr(err, "straggler") != NULL, "%s", err);
  simCommFree(c);
  cr_expect_null(simCommNew(&f, 33, err, sizeof err));
  cr_expect(strstr(err, "whole hosts of 4") != NULL, "%s", err);
}

/* A rank whose links are 4x slower slows a ring by about that much at large sizes (every
 * piece crosses it), and a rank 100 us late delays a latency-bound collective by about
 * 100 us (at large sizes the model's senders, never short of credit, run ahead and hide
 * part of it: docs/scale.md). */
Test(engine, straggler_costs, .timeout = 30) {
  struct simFabric f = load(flat);
  char err[512] = "";
  struct simComm *c = simCommNew(&f, 32, err, sizeof err);
  cr_assert_not_null(c, "%s", err);
  struct simCall call = {weftCollAllReduce, 32u << 20};
  struct simOptions o = {0, -1, 1, -1, 0, NULL, 1};
  struct simResult alone, slow, alone2, late;
  cr_assert_eq(simRun(c, SIM_RING, &call, &o, &alone, err, sizeof err), 0, "%s", err);
  o.slowRank = 7, o.slowFactor = 4;
  cr_assert_eq(simRun(c, SIM_RING, &call, &o, &slow, err, sizeof err), 0, "%s", err);
  /* latency-bound: the late rank's first piece holds up every chunk that passes it */
  struct simCall small = {weftCollAllReduce, 4096};
  o.slowRank = -1;
  cr_assert_eq(simRun(c, SIM_RING, &small, &o, &alone2, err, sizeof err), 0, "%s", err);
  o.lateRank = 5, o.lateUs = 100;
  cr_assert_eq(simRun(c, SIM_RING, &small, &o, &late, err, sizeof err), 0, "%s", err);
  simCommFree(c);
  cr_expect(slow.timeUs > 2.5 * alone.timeUs, "slow links: %.1f us against %.1f", slow.timeUs, alone.timeUs);
  cr_expect(late.timeUs > alone2.timeUs + 90 && late.timeUs < alone2.timeUs + 110,
            "late by 100 us: %.1f us against %.1f", late.timeUs, alone2.timeUs);
}

/* The goodput model's limits: with a huge MTBF only the checkpoints' cost remains; more cards
 * fail more often and lose more; shrink-and-continue loses only recoveries and missing cards. */
Test(plan, goodput_limits, .timeout = 10) {
  struct simGoodput g = {1e12, 1800, 30, 600, 10};
  cr_expect_float_eq(simGoodputCheckpoint(&g, 1024), 1 - 30.0 / 1800, 1e-6);
  cr_expect_float_eq(simGoodputShrink(&g, 1024, 1.0), 1.0, 1e-6);
  g.mtbfHours = 10000;
  double prevC = 2, prevS = 2; /* checkpoint/restart reaches 0: failures come faster than restarts */
  for (int n = 1024; n <= 262144; n *= 4) {
    double c = simGoodputCheckpoint(&g, n), s = simGoodputShrink(&g, n, 1.0);
    cr_expect((c < prevC || (c == 0 && prevC == 0)) && c >= 0 && s < prevS && s > 0, "%d cards: %g, %g", n, c, s);
    prevC = c, prevS = s;
  }
  struct simTrain t = {70e9, 4e6, 1000, 0.5};
  cr_expect_float_eq(simStepComputeUs(&t, 1000), 6 * 70e9 * 4e6 / (1000 * 1e15 * 0.5) * 1e6, 1e-3);
}

/* The tuner's cost model against the schedule it would run: for small AllReduces across many
 * hosts (a core per rank), its choice is the simulated best. The ring's discount for buffers
 * of fewer elements than ranks once made it pick the ring for 8 B from 64 ranks up (cost() 13
 * us) where the simulated ring took 332 us at 64 ranks and the tree 60 us. */
Test(plan, tuner_small_allreduce_across_hosts, .timeout = 60) {
  struct simFabric f = load(railed);
  f.hosts = 64;
  const int ranks[] = {64, 256};
  const size_t sizes[] = {8, 4096};
  for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
    for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
      char err[512] = "";
      struct simComm *c = simCommNew(&f, ranks[i], err, sizeof err);
      cr_assert_not_null(c, "%s", err);
      struct simCall call = {weftCollAllReduce, sizes[j]};
      int tuner = simTunerChoice(c, &call);
      simCommFree(c);
      cr_assert(tuner >= 0, "no tuner choice at %d ranks, %zu B", ranks[i], sizes[j]);
      double chosen = simulate(&f, ranks[i], (enum simAlgo)tuner, weftCollAllReduce, sizes[j], 0);
      double ring = simulate(&f, ranks[i], SIM_RING, weftCollAllReduce, sizes[j], 0);
      double tree = simulate(&f, ranks[i], SIM_TREE, weftCollAllReduce, sizes[j], 0);
      double hier = simulate(&f, ranks[i], SIM_HIER, weftCollAllReduce, sizes[j], 0);
      double best = fmin(ring, fmin(tree, hier));
      cr_expect(chosen <= 1.5 * best,
                "%d ranks, %zu B: the tuner chose %s (simulated %.1f us); ring %.1f, tree %.1f, hier %.1f",
                ranks[i], sizes[j], simAlgoNames[tuner], chosen, ring, tree, hier);
    }
  }
}
