/* The hierarchical algorithm's state and the pieces its files share (algorithms/hier*.c):
 * hier.c init, costs and the AllReduce; hier_layout.c where the ranks are; hier_rooted.c
 * Broadcast and Reduce; hier_blocks.c AllGather and ReduceScatter. */
#ifndef WEFT_ALGO_HIER_H_
#define WEFT_ALGO_HIER_H_

#include <stddef.h>

#include "core.h"
#include "prims.h"

/* Ranks first .. first + nparts - 1, all on one host: in a buffer of parts placed by rank
 * (AllGather's output, ReduceScatter's input) their parts are one contiguous piece of memory. */
struct hierRun {
  int first, nparts;
};

/* Where the ranks are, the same on every rank (from the all-gathered peer table): hosts are
 * numbered in order of their first rank, and a host's leader is its first (lowest) rank. The
 * ranks of a host need not be contiguous, and hosts may hold different numbers of them. */
struct hierLayout {
  int nranks, h;
  int *hostOf;     /* rank -> host */
  /* Inside a host, ranks go in the ring's order (package, NUMA node, core, then rank:
   * weftTopoOrderHost), rank order where places are alike. */
  int *localIndex; /* rank -> its index among its host's ranks, in that order */
  int *size;       /* host -> its number of ranks */
  int *leader;     /* host -> its first rank in that order */
  int *byHost;     /* every rank, host after host, in that order within a host */
  int *hostFirst;  /* host -> the index in byHost of its first rank */
  int *runStart;   /* host -> its first run in runs[]; runStart[h] = runs in all */
  struct hierRun *runs; /* each host's ranks as runs of consecutive ranks, ascending */
  int minSize, maxSize;
};

/* Parses the peer table into L; NULL-safe free. */
weftResult_t weftHierLayoutInit(const struct weftComm *comm, struct hierLayout *L);
void weftHierLayoutFree(struct hierLayout *L);

/* A host's block of a buffer of parts placed by rank (its ranks' parts, run after run) is cut
 * into pieces of at most pieceCount elements that never straddle two runs, and the pieces into
 * windows of `slots` pieces: window w is what a step of loop w moves for that host, so a step
 * never needs more than `slots` free slots (the ring's rule against deadlock) whatever the
 * placement. A segment is the part of a window inside one run. */
#define HIER_MAX_SEGS 64 /* WEFT_RING_CHUNK_SLOTS' largest value: a segment holds 1+ pieces */
struct hierSeg {
  size_t at;    /* element offset in the buffer of parts */
  size_t count; /* elements */
  size_t pos;   /* element offset within the window (for a window-sized scratch buffer) */
};
struct hierCut {
  size_t partCount, pieceCount, slots;
};
/* Windows of host k's block. */
size_t weftHierWindows(const struct hierLayout *L, const struct hierCut *cut, int k);
/* The segments of window w of host k's block (at most cut->slots of them); their number. */
int weftHierWindowSegs(const struct hierLayout *L, const struct hierCut *cut, int k, size_t w,
                       struct hierSeg *segs);

struct hierState {
  struct hierLayout L;
  struct weftRing local; /* the ranks of my host, in L's order (a ring of one on a host of one) */
  /* Across hosts, one rank per host in host order: on layouts where every host holds m >= 2
   * ranks, the ranks with my local index (the AllReduce's slices); elsewhere the hosts'
   * leaders, and a ring of myself on the other ranks. Either way a leader's is the ring of the
   * leaders. */
  struct weftRing inter;
  int slices; /* the AllReduce over slices runs here (the same m >= 2 on every host) */
  /* The other schedules mix local and inter-host links in one step, so they cut every link at
   * one piece size: the smallest slot of all of them, on every rank. */
  size_t pieceBytes;
  double netLatencyUs, netBandwidthGBs; /* the slowest link between leaders, on every rank */
  double localBandwidthGBs;             /* the slowest link inside any host, on every rank */
  size_t slots;  /* pieces per window: WEFT_RING_CHUNK_SLOTS at init */
  char *scratch; /* a window (ReduceScatter's results on their way down the host) */
};

/* A local step waits for the slowest rank of the host, which on a busy host is a scheduler
 * round trip behind the network progress threads. Measured on 4 emulated hosts x 2 (medians
 * of 3, docs/performance.md): hier's small-size AllReduce time is 1.7x the tree's 6 network
 * steps, i.e. ~10 steps for its 2(m-1) + 2(h-1) = 8: a local step costs about two network
 * steps (a round trip through the scheduler on each side). This puts the tree/hier crossover
 * at ~54 KiB, between the measured 32 KiB and 128 KiB. */
#define HIER_LOCAL_STEP_WEIGHT 2.0

/* Prims over the given links of s, cut at s->pieceBytes; final steps divide by nranks. */
void weftHierPrims(struct weftPrims *p, struct weftComm *comm, const struct hierState *s,
                   struct weftConn *const *sends, int nsend, struct weftConn *const *recvs,
                   int nrecv, const struct weftCollArgs *a);
/* One step of the time model: a network hop (the ring's: link latency + the calling thread's
 * overhead), and a hop between ranks of a host, charged HIER_LOCAL_STEP_WEIGHT of those. */
double weftHierNetStep(const struct hierState *s, const struct weftComm *comm);
double weftHierLocalStep(const struct hierState *s, const struct weftComm *comm);

weftResult_t weftHierBroadcast(struct hierState *s, struct weftComm *comm,
                               const struct weftCollArgs *a);
weftResult_t weftHierReduce(struct hierState *s, struct weftComm *comm,
                            const struct weftCollArgs *a);
weftResult_t weftHierAllGather(struct hierState *s, struct weftComm *comm,
                               const struct weftCollArgs *a);
weftResult_t weftHierReduceScatter(struct hierState *s, struct weftComm *comm,
                                   const struct weftCollArgs *a);
double weftHierBroadcastCost(const struct hierState *s, const struct weftComm *comm, size_t bytes,
                             int root);
double weftHierReduceCost(const struct hierState *s, const struct weftComm *comm, size_t bytes,
                          int root);
double weftHierAllGatherCost(const struct hierState *s, const struct weftComm *comm, size_t bytes);
double weftHierReduceScatterCost(const struct hierState *s, const struct weftComm *comm,
                                 size_t bytes);

#endif
