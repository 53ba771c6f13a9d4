/* Broadcast and Reduce of the tree algorithm: double binary trees rooted at the call's root.
 * How it works: the root r sits above a double binary tree (tree.c's shape) of the other
 * n - 1 ranks, taken in the order r+1, r+2, ..., r-1 (member v is rank (r + 1 + v) mod n, so
 * every root gets the same shape). The two trees have different top members, and each top
 * member is r's only child in its tree: r sends (or receives) half of the buffer to (from)
 * each, and every other rank is interior in at most one tree.
 * - Broadcast: tree t carries half t of the buffer down: the root sends its pieces, interior
 *   ranks copy each piece out as they pass it to their children, leaves copy it out.
 * - Reduce: half t goes up tree t: leaves send their input, interior ranks reduce their own
 *   piece with their children's (own first, then the children in tree order) and send the
 *   result up, the root reduces its own piece with its child's into recvbuff (the final step:
 *   avg divides there). For one root and one n the order of every element's reduction is
 *   fixed, so a call gives the same bits on every run; another root reduces in another order.
 * Both are pipelined in slot-sized pieces, the two trees alternating chunk by chunk
 * (TREE_CHUNK_BYTES), as AllReduce; data flows one way, so any size is deadlock-free.
 * Links: each root's trees join other pairs of ranks, so they run on the point-to-point links
 * (lib/p2p.h), made on first use pairwise as a Send's are (only the two ranks take part: no
 * collective step after init) and shared with Send/Recv and AlltoAll: a rank links to at most
 * 6 peers per root, in the direction the collective needs. Every piece is cut to the tree's
 * agreed piece size (tree.c), which both ends of every link use. Each call also passes a token
 * to its ring successor, so that ranks that disagree on the root meet (below).
 * Steps: hops = 1 + floor(log2(n - 1)) (the ring's chain: n - 1). Bytes per rank: at most B in
 * and B out (the root sends B/2 to each top member; an interior rank passes B/2 to each of
 * two children; every other rank receives B/2 in each tree).
 * cost() = hops * step + (perHost * B + (hops - 1) * piece) / link bandwidth, step = link latency
 * + step overhead (weftTreeStepUs)
 * piece = min(slot, B/2): the first piece of each half fills the hops, then the
 * halves stream; perHost (the most ranks on one host, 1 on one host) as AllReduce's: with
 * ranks numbered host by host nearly every tree link leaves its host, and a host's ranks share
 * its interface, where the host-ordered chain crosses each host's interface once. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "p2p.h"
#include "prims.h"
#include "reduce.h"
#include "ring.h"
#include "tree.h"

/* Rank rank's place in tree t rooted at root, as ranks. */
static void rootedNode(int rank, int root, int t, int n, struct weftTreeNode *node) {
  int m = n - 1;
  if (rank == root) {
    node->parent = -1;
    node->nchildren = 1;
    node->children[0] = (root + 1 + weftTreeRootOf(t, m)) % n;
    return;
  }
  weftTreeNodeOf((rank - root - 1 + n) % n, t, m, node);
  node->parent = node->parent < 0 ? root : (root + 1 + node->parent) % n;
  for (int i = 0; i < node->nchildren; i++) node->children[i] = (root + 1 + node->children[i]) % n;
}

/* One call on this rank: its place in both trees and their links (toward the children and
 * from the parent when the data goes down, the other way when it goes up). */
#define ROOTED_MAX_LINKS (2 * (1 + TREE_MAX_CHILDREN))
struct rootedPlan {
  const struct treeState *s;
  const struct weftCollArgs *a;
  struct weftTreeNode node[2];
  int peers[ROOTED_MAX_LINKS], isSend[ROOTED_MAX_LINKS], nlinks; /* parent, children, per tree */
  struct weftConn *parent[2];
  struct weftConn *child[2][TREE_MAX_CHILDREN];
};

static weftResult_t checkPiece(const struct treeState *s, struct weftComm *comm,
                               const struct weftConn *c) {
  if (c->slotBytes >= s->rootedPieceBytes) return weftSuccess;
  return weftSetError(weftInternalError,
                      "rank %d: tree: the link %s rank %d (%s) has %zu-byte slots, smaller than "
                      "the %zu-byte pieces of the tree (the smallest slot of the ring and tree "
                      "links): no ring or tree link took that transport",
                      comm->rank, c->dir == WEFT_DIR_SEND ? "to" : "from", c->peer, c->ops->name,
                      c->slotBytes, s->rootedPieceBytes);
}

static void planPeers(const struct treeState *s, const struct weftComm *comm,
                      const struct weftCollArgs *a, int down, struct rootedPlan *plan) {
  int k = 0;
  plan->s = s;
  plan->a = a;
  for (int t = 0; t < 2; t++) {
    const struct weftTreeNode *node = &plan->node[t];
    rootedNode(comm->rank, a->root, t, comm->nranks, &plan->node[t]);
    if (node->parent >= 0) plan->peers[k] = node->parent, plan->isSend[k++] = !down;
    for (int i = 0; i < node->nchildren; i++)
      plan->peers[k] = node->children[i], plan->isSend[k++] = down;
  }
  plan->nlinks = k;
}

/* Makes the links planPeers named that are not up yet. */
static weftResult_t planLinks(struct weftComm *comm, struct rootedPlan *plan) {
  struct weftConn *conns[ROOTED_MAX_LINKS];
  WEFTCHECK(weftP2pLinks(comm, plan->peers, plan->isSend, plan->nlinks, conns));
  for (int i = 0; i < plan->nlinks; i++) WEFTCHECK(checkPiece(plan->s, comm, conns[i]));
  int k = 0;
  for (int t = 0; t < 2; t++) {
    if (plan->node[t].parent >= 0) plan->parent[t] = conns[k++];
    for (int i = 0; i < plan->node[t].nchildren; i++) plan->child[t][i] = conns[k++];
  }
  return weftSuccess;
}

typedef weftResult_t (*rootedStep)(struct weftComm *comm, const struct rootedPlan *plan, int t,
                                   size_t first, size_t n);

/* Half t of the buffer (tree 0 the first count/2 elements, tree 1 the rest) in chunks,
 * alternating the trees. */
static weftResult_t eachChunk(struct weftComm *comm, const struct rootedPlan *plan, rootedStep step) {
  size_t count = plan->a->count, chunk = TREE_CHUNK_BYTES / weftTypeSize(plan->a->type);
  size_t half[2] = {count / 2, count - count / 2}, base[2] = {0, count / 2};
  for (size_t off = 0; off < half[1]; off += chunk)
    for (int t = 0; t < 2; t++) {
      if (off >= half[t]) continue;
      size_t n = half[t] - off < chunk ? half[t] - off : chunk;
      WEFTCHECK(step(comm, plan, t, base[t] + off, n));
    }
  return weftSuccess;
}

static void primsOf(struct weftPrims *p, struct weftComm *comm, const struct rootedPlan *plan,
                    int t, int down) {
  const struct weftTreeNode *node = &plan->node[t];
  struct weftConn *const *toParent = &plan->parent[t], *const *toChildren = plan->child[t];
  int hasParent = node->parent >= 0;
  if (down)
    weftPrimsInitMulti(p, comm, toChildren, node->nchildren, toParent, hasParent, plan->a->type,
                       plan->a->op, comm->nranks);
  else
    weftPrimsInitMulti(p, comm, toParent, hasParent, toChildren, node->nchildren, plan->a->type,
                       plan->a->op, comm->nranks);
  weftPrimsSetPiece(p, plan->s->rootedPieceBytes);
}

static weftResult_t broadcastStep(struct weftComm *comm, const struct rootedPlan *plan, int t,
                                  size_t first, size_t n) {
  struct weftPrims p;
  primsOf(&p, comm, plan, t, 1);
  size_t at = first * p.typeSize;
  if (plan->node[t].parent < 0) return weftPrimsSend(&p, (const char *)plan->a->sendbuff + at, n);
  if (plan->node[t].nchildren > 0) return weftPrimsRecvCopySend(&p, (char *)plan->a->recvbuff + at, n);
  return weftPrimsRecv(&p, (char *)plan->a->recvbuff + at, n);
}

static weftResult_t reduceStep(struct weftComm *comm, const struct rootedPlan *plan, int t,
                               size_t first, size_t n) {
  struct weftPrims p;
  primsOf(&p, comm, plan, t, 0);
  size_t at = first * p.typeSize;
  const char *src = (const char *)plan->a->sendbuff + at;
  if (plan->node[t].parent < 0) return weftPrimsRecvReduceCopy(&p, src, (char *)plan->a->recvbuff + at, n);
  if (plan->node[t].nchildren == 0) return weftPrimsSend(&p, src, n);
  return weftPrimsRecvReduceSend(&p, src, n);
}

/* ---- ranks that disagree on the root ----
 * Each root's trees join other pairs of ranks, so ranks that disagree on the root read and
 * write different links: a rank can wait on a link nobody writes, ask for a link its peer never
 * makes (the pairwise exchange waits for the peer's half), or, where it only sends (Broadcast's
 * root, Reduce's leaves), finish without meeting anybody's signature. So every call also
 * passes a token to the ring successor (weftRingCallToken, algorithms/ring.h), on links that
 * are the same whatever the root: wherever two ranks next to each other on the ring disagree,
 * the later one fails with weftInvalidUsage naming both calls, and closing its links fails
 * the ranks that wait on it with the same. Sent at the start, received at the end: no wait
 * where the ranks agree. When one of the call's links is not up yet it is received before
 * the links are made instead, so that a disagreement fails before any rank waits in the
 * exchange for a peer that will never ask for its link (a root's first calls only: links
 * stay up). */
static weftResult_t runRooted(struct treeState *s, struct weftComm *comm,
                              const struct weftCollArgs *a, int down, rootedStep step) {
  struct rootedPlan plan;
  planPeers(s, comm, a, down, &plan);
  WEFTCHECK(weftRingCallToken(comm, a, 1));
  int early = !weftP2pLinksUp(comm, plan.peers, plan.isSend, plan.nlinks);
  if (early) WEFTCHECK(weftRingCallToken(comm, a, 0));
  WEFTCHECK(planLinks(comm, &plan));
  WEFTCHECK(eachChunk(comm, &plan, step));
  return early ? weftSuccess : weftRingCallToken(comm, a, 0);
}

weftResult_t weftTreeBroadcast(struct treeState *s, struct weftComm *comm,
                               const struct weftCollArgs *a) {
  if (comm->rank == a->root && a->recvbuff != a->sendbuff) memcpy(a->recvbuff, a->sendbuff, a->bytes);
  if (comm->nranks == 1) return weftSuccess;
  return runRooted(s, comm, a, 1, broadcastStep);
}

weftResult_t weftTreeReduce(struct treeState *s, struct weftComm *comm, const struct weftCollArgs *a) {
  if (comm->nranks == 1) {
    weftReduceFinalCopy(a->recvbuff, a->sendbuff, a->count, a->type, a->op, 1);
    return weftSuccess;
  }
  return runRooted(s, comm, a, 0, reduceStep);
}

double weftTreeRootedCost(const struct treeState *s, const struct weftComm *comm,
                          const struct weftCollArgs *a) {
  double bytes = (double)a->bytes;
  if (comm->nranks == 1) return 0.1 + bytes / 8e3; /* a copy, as the ring's */
  double stepUs = weftTreeStepUs(s, comm);
  double piece = (double)s->rootedPieceBytes < bytes / 2 ? (double)s->rootedPieceBytes : bytes / 2;
  double wire = s->perHost * bytes + (s->rootedHops - 1) * piece;
  return s->rootedHops * stepUs + wire / (s->bandwidthGBs * 1e3);
}
