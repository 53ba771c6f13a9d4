/* Hierarchical AllGather and ReduceScatter: the ring of the hosts' leaders moves host blocks
 * (a host's block: its ranks' parts, wherever they sit in the buffer of parts placed by rank),
 * and each host's own chain (leader, then its ranks ascending) carries what the leader passes
 * on, in the same pipeline.
 * - AllGather: an all-gather on each host's ring, so every rank holds its host's parts; then
 *   the leaders' ring all-gather of the blocks (h - 1 steps: send the own block, then receive,
 *   copy out and pass on each block), each received block also going down the host's chain.
 * - ReduceScatter: the leaders' ring reduce-scatter of the blocks: step j handles block
 *   k - 1 - j, reduced up the host's chain (its second rank to its last, then the leader) and
 *   at the leader with the previous leader's partial; the last step's block is the host's own,
 *   complete at the leader, which sends it (divided, for avg) down the chain, each rank keeping
 *   its part. A leader adds its input, its chain's partial and the previous leader's, in that
 *   order.
 * Both run in loops of one window per block (hier.h: at most WEFT_RING_CHUNK_SLOTS slots per
 * step, the ring's rule against deadlock, whatever the placement).
 * Steps: (m-1) local + (h-1) across hosts + (m-1) down the chain (ring: n - 1). Bytes through
 * the busiest host interface: (n - smallest m) parts (ring: n - 1).
 * cost() = (h-1) network steps + 2(m-1) local steps + (n - smallest m) * part / network
 *          bandwidth (what the chains carry inside a host goes at memory speed, alongside). */
#include <string.h>

#include "check.h"
#include "copy.h"
#include "hier.h"
#include "reduce.h"
#include "ring.h"

/* A step of few pieces is a store and forward of each piece at every hop, so pieces shrink
 * (to HIER_MIN_PIECE_BYTES at least) until the largest block fills a window: a 128 KiB block
 * crosses each host in four 32 KiB pieces, not one. */
#define HIER_MIN_PIECE_BYTES 16384

static struct hierCut cutFor(const struct hierState *s, const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type), slot = (s->pieceBytes - WEFT_PRIMS_SIG_BYTES) / ts;
  size_t block = (size_t)s->L.maxSize * a->count, fill = (block + s->slots - 1) / s->slots;
  size_t least = HIER_MIN_PIECE_BYTES / ts < slot ? HIER_MIN_PIECE_BYTES / ts : slot;
  size_t piece = fill < least ? least : fill < slot ? fill : slot;
  return (struct hierCut){a->count, piece, s->slots};
}

/* Prims over links of s, cut at the pieces of cut (every rank cuts every block alike). */
static void cutPrims(struct weftPrims *p, struct weftComm *comm, const struct hierState *s,
                     struct weftConn *const *sends, int nsend, struct weftConn *const *recvs,
                     int nrecv, const struct weftCollArgs *a, const struct hierCut *cut) {
  weftHierPrims(p, comm, s, sends, nsend, recvs, nrecv, a);
  weftPrimsSetPiece(p, cut->pieceCount * p->typeSize + WEFT_PRIMS_SIG_BYTES);
}

static size_t loopsFor(const struct hierLayout *L, const struct hierCut *cut) {
  size_t loops = 0;
  for (int k = 0; k < L->h; k++) {
    size_t w = weftHierWindows(L, cut, k);
    if (w > loops) loops = w;
  }
  return loops;
}

/* ---- AllGather ---- */

/* Step j of a loop on a leader: block k - j, sent on (j < h-1) and down the chain (j > 0). */
static weftResult_t gatherStep(struct hierState *s, struct weftComm *comm,
                               const struct weftCollArgs *a, const struct hierCut *cut, size_t w,
                               int j) {
  const struct hierLayout *L = &s->L;
  int k = L->hostOf[comm->rank], li = L->localIndex[comm->rank], m = L->size[k];
  struct weftConn *sends[2], *recvs[1];
  int ns = 0, nr = 0;
  if (li == 0) {
    if (j > 0) recvs[nr++] = &s->inter.recv;
    if (j < L->h - 1) sends[ns++] = &s->inter.send;
    if (j > 0 && m > 1) sends[ns++] = &s->local.send;
  } else {
    recvs[nr++] = &s->local.recv;
    if (li < m - 1) sends[ns++] = &s->local.send;
  }
  struct weftPrims p;
  cutPrims(&p, comm, s, sends, ns, recvs, nr, a, cut);
  struct hierSeg segs[HIER_MAX_SEGS];
  int nsegs = weftHierWindowSegs(L, cut, (k - j + L->h) % L->h, w, segs);
  size_t ts = weftTypeSize(a->type);
  for (int i = 0; i < nsegs; i++) {
    char *at = (char *)a->recvbuff + segs[i].at * ts;
    if (nr == 0) WEFTCHECK(weftPrimsSend(&p, at, segs[i].count));
    else if (ns > 0) WEFTCHECK(weftPrimsRecvCopySend(&p, at, segs[i].count));
    else WEFTCHECK(weftPrimsRecv(&p, at, segs[i].count));
  }
  return weftSuccess;
}

weftResult_t weftHierAllGather(struct hierState *s, struct weftComm *comm,
                               const struct weftCollArgs *a) {
  const struct hierLayout *L = &s->L;
  int k = L->hostOf[comm->rank], li = L->localIndex[comm->rank];
  char *own = (char *)a->recvbuff + (size_t)comm->rank * a->bytes;
  if (own != a->sendbuff) weftCopyOut(own, a->sendbuff, a->bytes, comm->opStreamsOut);
  if (L->size[k] > 1) {
    struct weftPrims p;
    struct weftConn *send = &s->local.send, *recv = &s->local.recv;
    weftHierPrims(&p, comm, s, &send, 1, &recv, 1, a);
    struct weftRingParts host = {a->count, (size_t)comm->nranks, s->local.order};
    WEFTCHECK(weftRingAllGatherParts(&p, &s->local, a->recvbuff, &host, weftRingMaxChunk(&p)));
  }
  struct hierCut cut = cutFor(s, a);
  size_t loops = loopsFor(L, &cut);
  for (size_t w = 0; w < loops; w++)
    for (int j = li == 0 ? 0 : 1; j < L->h; j++) WEFTCHECK(gatherStep(s, comm, a, &cut, w, j));
  return weftSuccess;
}

/* ---- ReduceScatter ---- */

/* Step j of a loop, up the chain: block k - 1 - j; the leader's last step (its own block)
 * reduces into the scratch window and, on a host of several ranks, sends it down. */
static weftResult_t scatterStep(struct hierState *s, struct weftComm *comm,
                                const struct weftCollArgs *a, const struct hierCut *cut, size_t w,
                                int j) {
  const struct hierLayout *L = &s->L;
  int k = L->hostOf[comm->rank], li = L->localIndex[comm->rank], m = L->size[k];
  int last = j == L->h - 1;
  struct weftConn *sends[1], *recvs[2];
  int ns = 0, nr = 0;
  if ((li == 0 && m > 1) || li > 1) recvs[nr++] = &s->local.recv;
  if (li == 0 && j > 0) recvs[nr++] = &s->inter.recv;
  if (li != 0) sends[ns++] = &s->local.send;
  else if (!last) sends[ns++] = &s->inter.send;
  else if (m > 1) sends[ns++] = &s->local.send;
  struct weftPrims p;
  cutPrims(&p, comm, s, sends, ns, recvs, nr, a, cut);
  struct hierSeg segs[HIER_MAX_SEGS];
  int nsegs = weftHierWindowSegs(L, cut, (k - 1 - j + 2 * L->h) % L->h, w, segs);
  size_t ts = weftTypeSize(a->type);
  for (int i = 0; i < nsegs; i++) {
    const char *in = (const char *)a->sendbuff + segs[i].at * ts;
    char *dst = s->scratch + segs[i].pos * ts;
    if (nr == 0) WEFTCHECK(weftPrimsSend(&p, in, segs[i].count));
    else if (li != 0 || !last) WEFTCHECK(weftPrimsRecvReduceSend(&p, in, segs[i].count));
    else if (ns > 0) WEFTCHECK(weftPrimsRecvReduceCopySend(&p, in, dst, segs[i].count));
    else WEFTCHECK(weftPrimsRecvReduceCopy(&p, in, dst, segs[i].count));
  }
  return weftSuccess;
}

/* The host's own block on its way down the chain, into the scratch window. */
static weftResult_t scatterDown(struct hierState *s, struct weftComm *comm,
                                const struct weftCollArgs *a, const struct hierCut *cut,
                                const struct hierSeg *segs, int nsegs) {
  const struct hierLayout *L = &s->L;
  int k = L->hostOf[comm->rank], li = L->localIndex[comm->rank], m = L->size[k];
  struct weftConn *send = &s->local.send, *recv = &s->local.recv;
  struct weftPrims p;
  cutPrims(&p, comm, s, &send, li < m - 1, &recv, 1, a, cut);
  size_t ts = weftTypeSize(a->type);
  for (int i = 0; i < nsegs; i++) {
    char *dst = s->scratch + segs[i].pos * ts;
    if (li < m - 1) WEFTCHECK(weftPrimsRecvCopySend(&p, dst, segs[i].count));
    else WEFTCHECK(weftPrimsRecv(&p, dst, segs[i].count));
  }
  return weftSuccess;
}

/* This rank's part of the scratch window into recvbuff. */
static void keepOwn(const struct hierState *s, int rank, const struct weftCollArgs *a,
                    const struct hierSeg *segs, int nsegs) {
  size_t ts = weftTypeSize(a->type), lo = (size_t)rank * a->count, hi = lo + a->count;
  for (int i = 0; i < nsegs; i++) {
    size_t from = segs[i].at > lo ? segs[i].at : lo;
    size_t to = segs[i].at + segs[i].count < hi ? segs[i].at + segs[i].count : hi;
    if (from < to)
      memcpy((char *)a->recvbuff + (from - lo) * ts, s->scratch + (segs[i].pos + from - segs[i].at) * ts,
             (to - from) * ts);
  }
}

weftResult_t weftHierReduceScatter(struct hierState *s, struct weftComm *comm,
                                   const struct weftCollArgs *a) {
  const struct hierLayout *L = &s->L;
  int k = L->hostOf[comm->rank], li = L->localIndex[comm->rank];
  struct hierCut cut = cutFor(s, a);
  size_t loops = loopsFor(L, &cut);
  struct hierSeg segs[HIER_MAX_SEGS];
  for (size_t w = 0; w < loops; w++) {
    for (int j = 0; j < L->h; j++) WEFTCHECK(scatterStep(s, comm, a, &cut, w, j));
    int nsegs = weftHierWindowSegs(L, &cut, k, w, segs);
    if (li != 0) WEFTCHECK(scatterDown(s, comm, a, &cut, segs, nsegs));
    keepOwn(s, comm->rank, a, segs, nsegs);
  }
  return weftSuccess;
}

/* ---- costs ---- */

static double blockCost(const struct hierState *s, const struct weftComm *comm, size_t bytes,
                        int localSteps, double localParts) {
  const struct hierLayout *L = &s->L;
  double part = (double)bytes;
  double net = (double)(L->nranks - L->minSize) * part / (s->netBandwidthGBs * 1e3);
  double local = localParts * part / (s->localBandwidthGBs * 1e3);
  return (L->h - 1) * weftHierNetStep(s, comm) + localSteps * weftHierLocalStep(s, comm) +
         (net > local ? net : local);
}

/* The host ring's all-gather ((m-1) steps, (m-1) parts) before the leaders' ring, whose
 * blocks then go down the chain ((m-1) more hops at its end, alongside the network). */
double weftHierAllGatherCost(const struct hierState *s, const struct weftComm *comm, size_t bytes) {
  int m = s->L.maxSize;
  double first = (m - 1) * (double)bytes / (s->localBandwidthGBs * 1e3);
  double down = m > 1 ? (double)(s->L.nranks - s->L.minSize) : 0;
  return first + blockCost(s, comm, bytes, 2 * (m - 1), down);
}

/* The chain up carries every part (n parts through the leader's link), alongside the
 * network; the own block comes back down ((m-1) hops). With one rank per host there is no
 * chain: the ring's schedule, and its cost. */
double weftHierReduceScatterCost(const struct hierState *s, const struct weftComm *comm,
                                 size_t bytes) {
  int m = s->L.maxSize;
  return blockCost(s, comm, bytes, 2 * (m - 1), m > 1 ? (double)s->L.nranks : 0);
}
