/* What the files of the tree algorithm share: the double binary tree's shape and the state.
 * - tree.c: the shape, init, finalize, dispatch, AllReduce and the ops table;
 * - tree_rooted.c: Broadcast and Reduce on trees rooted at the call's root. */
#ifndef WEFT_ALGO_TREE_H_
#define WEFT_ALGO_TREE_H_

#include "core.h"

#define TREE_MAX_CHILDREN 2
/* Pipeline unit: the two trees alternate chunk by chunk; data flows one way in each pass, so
 * any size is deadlock-free. */
#define TREE_CHUNK_BYTES (512 * 1024)

/* A member's place in one tree: members are numbered 0..m-1; parent -1 at the tree's root;
 * children in ascending order of position (the order their pieces are reduced in). */
struct weftTreeNode {
  int parent;
  int nchildren;
  int children[TREE_MAX_CHILDREN];
};

/* Member v's node in tree t (0 or 1) of the double binary tree over m members. */
void weftTreeNodeOf(int v, int t, int m, struct weftTreeNode *node);
/* Member at the root of tree t over m members. */
int weftTreeRootOf(int t, int m);
/* Hops from the root of a tree over m members to its deepest member. */
int weftTreeHeight(int m);

struct treeSide {
  int parent; /* rank, -1 at the root */
  int nchildren;
  int children[TREE_MAX_CHILDREN];
  struct weftConn upSend, downRecv;                       /* with the parent */
  struct weftConn upRecv[TREE_MAX_CHILDREN], downSend[TREE_MAX_CHILDREN]; /* with children */
};

struct treeState {
  struct treeSide tree[2]; /* AllReduce's trees, over ranks 0..n-1 */
  int depth;               /* levels of AllReduce's trees */
  int rootedHops;          /* hops from the root to the deepest rank of a rooted tree */
  int perHost; /* the most ranks on one host (from the peer table: the same on every rank) */
  double ranksPerCpu; /* the most ranks per CPU of a host (the same on every rank) */
  double latencyUs, bandwidthGBs; /* slowest link of either tree, the same on every rank */
  size_t pieceBytes;               /* smallest slot of any tree link, ditto */
  size_t rootedPieceBytes; /* smallest slot of any ring or AllReduce tree link of any rank */
};

/* Broadcast and Reduce (tree_rooted.c): the call's root above the double binary tree of the
 * other ranks, over point-to-point links made on first use. */
weftResult_t weftTreeBroadcast(struct treeState *s, struct weftComm *comm,
                               const struct weftCollArgs *a);
weftResult_t weftTreeReduce(struct treeState *s, struct weftComm *comm,
                            const struct weftCollArgs *a);
double weftTreeRootedCost(const struct treeState *s, const struct weftComm *comm,
                          const struct weftCollArgs *a);

/* One hop's time in cost(): link latency + step overhead; where ranks outnumber cores a hop
 * also waits for its receiver to be scheduled behind the other ranks of its core, in both
 * trees: times 2 x ranks per CPU (measured, 8 B on one host of 2 cores: Broadcast 12 us for 2
 * hops with 4 ranks, 29-46 us for 3 hops with 8, AllReduce 78 us with 8, against 1.4 us a hop
 * without this factor). */
static inline double weftTreeStepUs(const struct treeState *s, const struct weftComm *comm) {
  double stepUs = s->latencyUs + 0.3 * (comm->oversubscribed ? 4 : 1);
  return comm->oversubscribed ? stepUs * 2 * s->ranksPerCpu : stepUs;
}

#endif
