/* The direct algorithm's AlltoAll (see direct.c for the segment and direct.h for its rounds).
 * B is one block (count times the type's size), n the ranks: rank r sends block j of its send
 * buffer to rank j and receives rank j's block r into block j of its receive buffer. Send and
 * receive buffers never overlap (docs/collectives.md). Two paths:
 * - Staged: a round stages, from every rank, a piece of each block it sends to another rank
 *   (chunk / n bytes each, 64-byte aligned, as ReduceScatter's rounds), posts, and copies
 *   piece r of every other rank's staging into its receive buffer: one synchronisation per
 *   round, 2 (n - 1) B copied per rank. Unlike the point-to-point engine's n (n - 1) FIFOs,
 *   which all fill at once, the bytes in flight are the segment's n x 2 chunks, so with many
 *   ranks they stay in the cache between the copy in and the copy out.
 * - In place (threads of one process, or cross-memory attach): each rank publishes its send
 *   buffer, reads block r of every other rank's straight into its receive buffer, posts
 *   `done` and waits for every rank's (its own send buffer is read until then): (n - 1) B
 *   copied once per rank.
 * Each rank reads its peers starting from r + 1, so at any moment the ranks read different
 * peers' buffers. Its own block is one copy. cost() = rounds x synchronisation + bytes moved /
 * memory bandwidth, with direct_coll.c's constants. */
#include <string.h>

#include "check.h"
#include "copy.h"
#include "direct.h"
#include "reduce.h"

static void copyOwnBlock(const struct weftComm *comm, struct directState *s, const struct weftCollArgs *a) {
  size_t at = (size_t)s->me * a->bytes;
  weftCopyOut((char *)a->recvbuff + at, (const char *)a->sendbuff + at, a->bytes, comm->opStreamsOut);
}

static weftResult_t alltoAllRound(struct weftComm *comm, struct directState *s,
                                  const struct weftCollArgs *a, size_t first, size_t count) {
  size_t ts = weftTypeSize(a->type), bytes = count * ts, off = first * ts;
  size_t pieceBytes = weftDirectScatterPiece(s, ts) * ts;
  uint64_t seq = ++s->seq;
  char *stage = weftDirectStagingOf(s, s->me, seq);
  for (int p = 0; p < s->n; p++)
    if (p != s->me)
      memcpy(stage + (size_t)p * pieceBytes, (const char *)a->sendbuff + (size_t)p * a->bytes + off, bytes);
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, first == 0));
  for (int k = 1; k < s->n; k++) {
    int r = (s->me + k) % s->n;
    weftCopyOut((char *)a->recvbuff + (size_t)r * a->bytes + off,
                weftDirectStagingOf(s, r, seq) + (size_t)s->me * pieceBytes, bytes, comm->opStreamsOut);
  }
  return weftSuccess;
}

static weftResult_t alltoAllStaged(struct weftComm *comm, struct directState *s,
                                   const struct weftCollArgs *a) {
  size_t per = weftDirectScatterPiece(s, weftTypeSize(a->type));
  for (size_t first = 0; first < a->count; first += per)
    WEFTCHECK(alltoAllRound(comm, s, a, first, weftDirectMin(per, a->count - first)));
  copyOwnBlock(comm, s, a);
  return weftSuccess;
}

static weftResult_t alltoAllInPlace(struct weftComm *comm, struct directState *s,
                                    const struct weftCollArgs *a) {
  uint64_t seq = ++s->seq;
  s->ctrl[s->me].sendAddr = (uint64_t)(uintptr_t)a->sendbuff;
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, 1));
  for (int k = 1; k < s->n; k++) {
    int r = (s->me + k) % s->n;
    WEFTCHECK(weftDirectPeerRead(s, r, (char *)a->recvbuff + (size_t)r * a->bytes,
                                 s->ctrl[r].sendAddr + (uint64_t)s->me * a->bytes, a->bytes));
  }
  copyOwnBlock(comm, s, a);
  weftDirectPost(s, FLAG_DONE, seq);
  return weftDirectWaitAll(comm, s, FLAG_DONE, seq);
}

static double alltoAllStagedCost(const struct directState *s, const struct weftComm *comm,
                                 const struct weftCollArgs *a) {
  size_t piece = weftDirectScatterPiece(s, weftTypeSize(a->type)) * weftTypeSize(a->type);
  double rounds = (double)((a->bytes + piece - 1) / piece), b = (double)a->bytes;
  double bw = a->bytes * (size_t)s->n <= DIRECT_SMALL_BYTES ? 10e3 : 8e3; /* small ones are cached */
  return rounds * weftDirectSyncUs(comm, s->n) + b * (2.0 * (s->n - 1) + 1) / bw;
}

static double alltoAllInPlaceCost(const struct directState *s, const struct weftComm *comm,
                                  const struct weftCollArgs *a) {
  double b = (double)a->bytes;
  return 2 * weftDirectSyncUs(comm, s->n) + 2.0 + b * (s->n - 1) / weftDirectPeerBw(s) + b / 8e3;
}

/* The bytes a rank stages are its n - 1 blocks. */
static size_t stagedBytes(const struct directState *s, const struct weftCollArgs *a) {
  return (size_t)(s->n - 1) * a->bytes;
}

weftResult_t weftDirectAlltoAll(struct weftComm *comm, struct directState *s,
                                const struct weftCollArgs *a) {
  if (weftDirectRunsInPlace(s, a, stagedBytes(s, a), alltoAllInPlaceCost(s, comm, a),
                            alltoAllStagedCost(s, comm, a)))
    return alltoAllInPlace(comm, s, a);
  return alltoAllStaged(comm, s, a);
}

double weftDirectAlltoAllCost(const struct directState *s, const struct weftComm *comm,
                              const struct weftCollArgs *a) {
  double inPlace = alltoAllInPlaceCost(s, comm, a), staged = alltoAllStagedCost(s, comm, a);
  return weftDirectTakesInPlace(s, stagedBytes(s, a), inPlace, staged) ? inPlace : staged;
}
