/* The direct algorithm's Gather and Scatter beyond one eager slot (direct_eager.c has the
 * small ones), staged through the segment in rounds as AllGather and ReduceScatter are
 * (direct.h): B is a rank's block, n the ranks.
 * - Gather: per chunk, every rank but the root stages its block's piece and posts; the root
 *   copies every piece out into its block of the receive buffer ((n - 1) B copied by the
 *   root, B by each other rank). The root posts the next round only after it copied this one,
 *   so a rank staging round s + 2 into the same half knows the root read round s.
 * - Scatter: per round the root stages a piece of every rank's block (chunk / n bytes each,
 *   64-byte aligned, as ReduceScatter's rounds), posts, and each rank copies its own piece out
 *   ((n - 1) B staged by the root, B copied out by each other rank).
 * cost() = rounds x synchronisation + the root's bytes / memory bandwidth. */
#include <string.h>

#include "check.h"
#include "copy.h"
#include "direct.h"
#include "reduce.h"

weftResult_t weftDirectGather(struct weftComm *comm, struct directState *s,
                              const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type), per = s->chunkBytes / ts;
  int isRoot = s->me == a->root;
  for (size_t first = 0; first < a->count; first += per) {
    size_t bytes = weftDirectMin(per, a->count - first) * ts, off = first * ts;
    uint64_t seq = ++s->seq;
    if (!isRoot) memcpy(weftDirectStagingOf(s, s->me, seq), (const char *)a->sendbuff + off, bytes);
    WEFTCHECK(weftDirectArrive(comm, s, a, seq, first == 0));
    for (int r = 0; r < s->n && isRoot; r++)
      if (r != s->me)
        weftCopyOut((char *)a->recvbuff + (size_t)r * a->bytes + off, weftDirectStagingOf(s, r, seq),
                    bytes, comm->opStreamsOut);
  }
  char *own = (char *)a->recvbuff + (size_t)s->me * a->bytes;
  if (isRoot && own != a->sendbuff) weftCopyOut(own, a->sendbuff, a->bytes, comm->opStreamsOut);
  return weftSuccess;
}

weftResult_t weftDirectScatter(struct weftComm *comm, struct directState *s,
                               const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type), per = weftDirectScatterPiece(s, ts), pieceBytes = per * ts;
  int isRoot = s->me == a->root;
  for (size_t first = 0; first < a->count; first += per) {
    size_t bytes = weftDirectMin(per, a->count - first) * ts, off = first * ts;
    uint64_t seq = ++s->seq;
    char *stage = weftDirectStagingOf(s, s->me, seq);
    for (int p = 0; p < s->n && isRoot; p++)
      if (p != s->me)
        memcpy(stage + (size_t)p * pieceBytes, (const char *)a->sendbuff + (size_t)p * a->bytes + off, bytes);
    WEFTCHECK(weftDirectArrive(comm, s, a, seq, first == 0));
    if (!isRoot)
      weftCopyOut((char *)a->recvbuff + off, weftDirectStagingOf(s, a->root, seq) + (size_t)s->me * pieceBytes,
                  bytes, comm->opStreamsOut);
  }
  const char *own = (const char *)a->sendbuff + (size_t)s->me * a->bytes;
  if (isRoot && own != a->recvbuff) weftCopyOut(a->recvbuff, own, a->bytes, comm->opStreamsOut);
  return weftSuccess;
}

double weftDirectGatherCost(const struct directState *s, const struct weftComm *comm,
                            const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type);
  size_t per = a->coll == weftCollScatter ? weftDirectScatterPiece(s, ts) * ts : s->chunkBytes;
  double rounds = (double)((a->bytes + per - 1) / per), b = (double)a->bytes;
  double bw = a->bytes * (size_t)s->n <= DIRECT_SMALL_BYTES ? 10e3 : 8e3; /* small ones are cached */
  return rounds * weftDirectSyncUs(comm, s->n) + b * (double)s->n / bw;
}
