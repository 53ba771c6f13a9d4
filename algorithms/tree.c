/* Double binary tree: AllReduce, for latency-bound sizes at many ranks, and Broadcast and
 * Reduce on trees rooted at the call's root (tree_rooted.c says how those work).
 * The shape: two in-order binary trees span the members; tree 1 is tree 0 shifted by one
 * member, so every member is interior in at most one tree (in-order trees have interior nodes
 * at even positions only), and each tree carries half of the buffer.
 * AllReduce, how it works: the members are the ranks 0..n-1. Up pass: leaves send their chunk
 * to their parent; interior ranks receive from their children, add their own and send up; the
 * root adds its own and holds the result. Down pass: the root sends the result to its children,
 * interior ranks copy it out and pass it on, leaves copy it out. Both passes are pipelined in
 * chunks, alternating the two trees chunk by chunk.
 * Steps: 2 * (depth - 1), depth = ceil(log2(n + 1)) levels, so depth - 1 hops from a leaf to
 * the root. Bytes per rank: ~ bytes up and down in the tree where it is interior, bytes/2 each
 * way where it is a leaf.
 * cost() = 2 * (depth - 1) * (link latency + step overhead) + 2 * bytes * perHost / link
 * bandwidth, perHost = the most ranks on one host: with ranks numbered host by host, nearly every
 * tree link leaves the host, and the links of all of a host's ranks go through its one
 * interface. (Measured on 4 emulated hosts x 2 ranks, docs/performance.md "Several hosts": the
 * tree's large-size time is 3x the ring's, which this factor of 2 approaches; and with 2 * depth
 * steps the tree was predicted slower than hier at every size, while it is the faster of the
 * two up to 32 KiB.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "param.h"
#include "prims.h"
#include "reduce.h"
#include "tree.h"

static int lowBit(int q) { return q & -q; }

/* In-order binary tree over positions 1..m: a position's level is its lowest set bit; its
 * parent is the neighbour at the next level (climbing past positions beyond m). */
static int parentPos(int q, int m) {
  for (;;) {
    int b = lowBit(q);
    int up = (q / (2 * b)) % 2 == 0 ? q + b : q - b;
    if (up <= m) return up;
    q = up;
  }
}

static int rootPos(int m) {
  int r = 1;
  while (r * 2 <= m) r *= 2;
  return r;
}

/* Tree t of m members: member -> position 1..m (tree 1 is shifted by one member). */
static int posOf(int v, int t, int m) { return t == 0 ? v + 1 : (v + 1) % m + 1; }
static int memberAt(int pos, int t, int m) { return t == 0 ? pos - 1 : (pos - 2 + m) % m; }

void weftTreeNodeOf(int v, int t, int m, struct weftTreeNode *node) {
  int q = posOf(v, t, m), b = lowBit(q);
  node->parent = q == rootPos(m) ? -1 : memberAt(parentPos(q, m), t, m);
  node->nchildren = 0;
  if (b == 1) return; /* odd positions are leaves */
  node->children[node->nchildren++] = memberAt(q - b / 2, t, m);
  /* the right child: q + b/2, or where that is past m the first of q + b/4, ..., q + 1 that
   * is not (a position past m hands its subtree to its parent) */
  for (int h = b / 2; h >= 1; h /= 2)
    if (q + h <= m) {
      node->children[node->nchildren++] = memberAt(q + h, t, m);
      break;
    }
}

int weftTreeRootOf(int t, int m) { return memberAt(rootPos(m), t, m); }

/* Position 1 is k hops below the root 2^k, the deepest any position can be. */
int weftTreeHeight(int m) {
  int h = 0;
  while ((2 << h) <= m) h++;
  return h;
}

static void buildSide(struct treeSide *s, int rank, int t, int n) {
  struct weftTreeNode node;
  weftTreeNodeOf(rank, t, n, &node);
  s->parent = node.parent;
  s->nchildren = node.nchildren;
  memcpy(s->children, node.children, sizeof s->children);
}

static int addSideLinks(struct treeSide *s, int tag, struct weftLinkReq *reqs) {
  int k = 0;
  if (s->parent >= 0) {
    reqs[k++] = (struct weftLinkReq){s->parent, WEFT_DIR_SEND, tag, &s->upSend};
    reqs[k++] = (struct weftLinkReq){s->parent, WEFT_DIR_RECV, tag, &s->downRecv};
  }
  for (int i = 0; i < s->nchildren; i++) {
    reqs[k++] = (struct weftLinkReq){s->children[i], WEFT_DIR_RECV, tag, &s->upRecv[i]};
    reqs[k++] = (struct weftLinkReq){s->children[i], WEFT_DIR_SEND, tag, &s->downSend[i]};
  }
  return k;
}

static void summarize(const struct treeSide *t, struct weftLinkSummary *sum) {
  weftLinkSummaryAdd(sum, &t->upSend);
  weftLinkSummaryAdd(sum, &t->downRecv);
  for (int i = 0; i < t->nchildren; i++) {
    weftLinkSummaryAdd(sum, &t->upRecv[i]);
    weftLinkSummaryAdd(sum, &t->downSend[i]);
  }
}

static weftResult_t agreeOnCaps(struct weftComm *comm, struct treeState *s) {
  struct weftLinkSummary sum = {0, 0, 0};
  summarize(&s->tree[0], &sum);
  summarize(&s->tree[1], &sum);
  WEFTCHECK(weftLinkSummaryAgree(comm, &sum, NULL, 0));
  s->latencyUs = sum.latencyUs;
  s->bandwidthGBs = sum.bandwidthGBs;
  s->pieceBytes = sum.slotBytes;
  /* The rooted trees' links are made by the rule every link is (the first transport that can
   * connect the two ranks), and the ring has a link of each kind a pair can be: within a host
   * wherever a host has two ranks, between hosts wherever there are two hosts. So the smallest
   * slot of the ring and the trees, which every rank agreed on, fits every rooted link
   * (tree_rooted.c checks it when a link comes up). */
  s->rootedPieceBytes = s->pieceBytes;
  if (comm->ring.pieceBytes > 0 && comm->ring.pieceBytes < s->rootedPieceBytes)
    s->rootedPieceBytes = comm->ring.pieceBytes;
  return weftSuccess;
}

static weftResult_t treeFinalize(void *state);

static weftResult_t treeInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  (void)why;
  (void)whyLen;
  *state = NULL;
  struct treeState *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "out of memory");
  struct weftLinkReq reqs[WEFT_MAX_LINKS];
  int k = 0;
  for (int t = 0; t < 2; t++) {
    buildSide(&s->tree[t], comm->rank, t, comm->nranks);
    k += addSideLinks(&s->tree[t], t == 0 ? WEFT_TAG_TREE0 : WEFT_TAG_TREE1, reqs + k);
  }
  for (s->depth = 0; (1 << s->depth) <= comm->nranks; s->depth++) {}
  s->rootedHops = comm->nranks > 1 ? 1 + weftTreeHeight(comm->nranks - 1) : 0;
  for (int r = 0; r < comm->nranks; r++) {
    int here = 0;
    for (int q = 0; q < comm->nranks; q++) here += comm->peers[q].hostHash == comm->peers[r].hostHash;
    if (here > s->perHost) s->perHost = here;
    double perCpu = comm->peers[r].cpus > 0 ? (double)here / comm->peers[r].cpus : 1.0;
    if (perCpu > s->ranksPerCpu) s->ranksPerCpu = perCpu;
  }
  if (s->perHost == comm->nranks) s->perHost = 1; /* one host: no shared interface */
  weftResult_t rc = weftConnectLinks(comm, reqs, k);
  if (rc == weftSuccess) rc = agreeOnCaps(comm, s);
  if (rc != weftSuccess) {
    treeFinalize(s);
    return rc;
  }
  *state = s;
  return weftSuccess;
}

/* Up pass of one chunk: leaves send, interior nodes reduce and send, the root reduces into dst. */
static weftResult_t upChunk(struct weftComm *comm, const struct treeState *s, struct treeSide *t,
                            const char *src, char *dst, size_t n, weftDataType_t type,
                            weftRedOp_t op) {
  struct weftConn *recvs[TREE_MAX_CHILDREN];
  for (int i = 0; i < t->nchildren; i++) recvs[i] = &t->upRecv[i];
  struct weftConn *send = &t->upSend;
  struct weftPrims p;
  weftPrimsInitMulti(&p, comm, &send, t->parent >= 0, recvs, t->nchildren, type, op, comm->nranks);
  weftPrimsSetPiece(&p, s->pieceBytes);
  if (t->nchildren == 0) return weftPrimsSend(&p, src, n);
  if (t->parent >= 0) return weftPrimsRecvReduceSend(&p, src, n);
  return weftPrimsRecvReduceCopy(&p, src, dst, n);
}

/* Down pass of one chunk: the root sends dst, interior nodes copy and forward, leaves copy. */
static weftResult_t downChunk(struct weftComm *comm, const struct treeState *s, struct treeSide *t,
                              char *dst, size_t n, weftDataType_t type, weftRedOp_t op) {
  struct weftConn *sends[TREE_MAX_CHILDREN];
  for (int i = 0; i < t->nchildren; i++) sends[i] = &t->downSend[i];
  struct weftConn *recv = &t->downRecv;
  struct weftPrims p;
  weftPrimsInitMulti(&p, comm, sends, t->nchildren, &recv, t->parent >= 0, type, op, comm->nranks);
  weftPrimsSetPiece(&p, s->pieceBytes);
  if (t->parent < 0) return weftPrimsSend(&p, dst, n);
  if (t->nchildren > 0) return weftPrimsRecvCopySend(&p, dst, n);
  return weftPrimsRecv(&p, dst, n);
}

static weftResult_t treeAllReduce(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  struct treeState *s = state;
  size_t ts = weftTypeSize(a->type);
  if (comm->nranks == 1) {
    weftReduceFinalCopy(a->recvbuff, a->sendbuff, a->count, a->type, a->op, 1);
    return weftSuccess;
  }
  size_t half[2] = {a->count / 2, a->count - a->count / 2}, base[2] = {0, a->count / 2};
  size_t chunk = TREE_CHUNK_BYTES / ts;
  const char *send = a->sendbuff;
  char *recv = a->recvbuff;
  for (size_t off = 0; off < half[1]; off += chunk)
    for (int t = 0; t < 2; t++) {
      if (off >= half[t]) continue;
      size_t n = half[t] - off < chunk ? half[t] - off : chunk, at = (base[t] + off) * ts;
      WEFTCHECK(upChunk(comm, s, &s->tree[t], send + at, recv + at, n, a->type, a->op));
    }
  for (size_t off = 0; off < half[1]; off += chunk)
    for (int t = 0; t < 2; t++) {
      if (off >= half[t]) continue;
      size_t n = half[t] - off < chunk ? half[t] - off : chunk, at = (base[t] + off) * ts;
      WEFTCHECK(downChunk(comm, s, &s->tree[t], recv + at, n, a->type, a->op));
    }
  return weftSuccess;
}

static double treeCost(void *state, const struct weftComm *comm, const struct weftCollArgs *args) {
  const struct treeState *s = state;
  if (args->coll != weftCollAllReduce) return weftTreeRootedCost(s, comm, args);
  size_t bytes = args->bytes;
  double stepUs = weftTreeStepUs(s, comm);
  return 2.0 * (s->depth - 1) * stepUs + 2.0 * s->perHost * (double)bytes / (s->bandwidthGBs * 1e3);
}

static weftResult_t treeRun(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  switch (a->coll) {
    case weftCollBroadcast: return weftTreeBroadcast(state, comm, a);
    case weftCollReduce: return weftTreeReduce(state, comm, a);
    default: return treeAllReduce(state, comm, a);
  }
}

static weftResult_t treeFinalize(void *state) {
  struct treeState *s = state;
  for (int t = 0; t < 2; t++) {
    weftConnClose(&s->tree[t].upSend);
    weftConnClose(&s->tree[t].downRecv);
    for (int i = 0; i < s->tree[t].nchildren; i++) {
      weftConnClose(&s->tree[t].upRecv[i]);
      weftConnClose(&s->tree[t].downSend[i]);
    }
  }
  free(s);
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoTree = {
  .size = sizeof(struct weftAlgoOps),
  .name = "tree",
  .colls = WEFT_COLL_BIT(weftCollAllReduce) | WEFT_COLL_BIT(weftCollBroadcast) |
           WEFT_COLL_BIT(weftCollReduce),
  .init = treeInit,
  .cost = treeCost,
  .run = treeRun,
  .finalize = treeFinalize,
};
