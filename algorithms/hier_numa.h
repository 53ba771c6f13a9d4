/* The hierarchical AllReduce with a NUMA level (algorithms/hier_numa.c): its layout and state,
 * shared with weft-topo, which prices it for a job it only describes. */
#ifndef WEFT_ALGO_HIER_NUMA_H_
#define WEFT_ALGO_HIER_NUMA_H_

#include <stddef.h>

#include "core.h"

/* Every host holds g >= 2 NUMA nodes with ranks, and each of those holds m >= 2 ranks (h hosts,
 * n = h * g * m). rankAt[(k * g + j) * m + i] is the i-th rank (core order) of the j-th NUMA
 * node (package, then node order) of host k (hosts in order of their first rank). The same on
 * every rank: it is computed from the all-gathered peer table. */
struct numaLayout {
  int h, g, m;
  int *rankAt;
  int *hostOf; /* rank -> host, as weftTopoRingCrossGBs counts */
};

/* Parses comm's peer table (hostHash, place.numa, place.core) into L. Returns 0, or -1 with
 * the reason in why when the layout is not of that shape (L is then empty), or -2 when out
 * of memory. */
int weftNumaLayoutInit(const struct weftComm *comm, struct numaLayout *L, char *why,
                       size_t whyLen);
void weftNumaLayoutFree(struct numaLayout *L);

struct numaState {
  struct numaLayout L;
  /* My NUMA node's ranks; the ranks of my host with my index in their NUMA node, one per node;
   * the ranks with my NUMA node's place and my index on every host (a ring of one on one
   * host). Figures agreed on every rank; cross.crossGBs is what each cross link gets of the
   * link between two NUMA nodes or packages, all m cross rings of a host sharing it. */
  struct weftRing numa, cross, inter;
};

/* The cross rings of every host laid end to end (m rings of g ranks per host), so that
 * weftTopoRingCrossGBs counts the links they share: order has n entries. */
void weftNumaCrossOrder(const struct numaLayout *L, int *order);

#endif
