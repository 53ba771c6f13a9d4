/* The direct algorithm's Broadcast, Reduce, AllGather and ReduceScatter (see direct.c for the
 * segment and direct.h for its rounds). B is the call's bytes (count times the type's size:
 * for AllGather and ReduceScatter one rank's part), n the ranks. Each collective has three
 * paths, chosen by the bytes a rank would put through the segment (staged bytes: B, or n * B
 * for ReduceScatter's input): at most DIRECT_SMALL_BYTES, one round; otherwise in place where
 * peers' buffers can be read where they are (threads of one process, or cross-memory attach
 * from WEFT_DIRECT_CMA_MIN_BYTES) and that path's cost is the lower (weftDirectCollInPlace),
 * else staged, in chunks of the segment.
 * - Broadcast: the root copies a chunk into its staging, every rank posts, the others copy it
 *   out: one synchronisation per chunk, and the root fills the other half while they read
 *   (B copied in, B out, overlapping but for one chunk). In place: the others read the root's
 *   buffer and post `done`; the root waits for every `done` (B copied once).
 * - Reduce: small: every rank stages its input and the root reduces all of them (n B read by
 *   the root). Staged, per chunk: rank i reduces slice i into the result area and posts
 *   `reduced`; the root waits for them and copies the chunk out (~3 B per rank, 2
 *   synchronisations). In place: rank i reduces slice i reading every rank's send buffer and
 *   writes it into the root's receive buffer (pointer, or process_vm_writev); all wait for all
 *   `reduced`, as the others read their send buffers until then.
 * - AllGather: every rank stages its part, posts, copies the others' parts out: one
 *   synchronisation per chunk ((n + 1) B per rank). In place: each rank reads every other
 *   part from its owner's send buffer, posts `done` and waits for all (n - 1) B.
 * - ReduceScatter: a round stages, from every rank, a piece of each of the n parts (chunk / n
 *   bytes each); rank r reduces piece r of every rank's staging straight into its receive
 *   buffer: one synchronisation per round ((2n + 1) B). In place: rank r reduces its part
 *   reading every rank's send buffer (n B), posts `done` and waits for all.
 * Every reduction is in rank order. cost() = rounds x synchronisation + bytes moved / memory
 * bandwidth, with direct_allreduce.c's constants. */
#include <string.h>

#include "check.h"
#include "copy.h"
#include "direct.h"
#include "reduce.h"

/* ---- Broadcast ---- */

static weftResult_t broadcastStaged(struct weftComm *comm, struct directState *s,
                                    const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type), per = s->chunkBytes / ts;
  int isRoot = s->me == a->root;
  for (size_t first = 0; first < a->count; first += per) {
    size_t bytes = weftDirectMin(per, a->count - first) * ts, off = first * ts;
    uint64_t seq = ++s->seq;
    if (isRoot) memcpy(weftDirectStagingOf(s, s->me, seq), (const char *)a->sendbuff + off, bytes);
    WEFTCHECK(weftDirectArrive(comm, s, a, seq, first == 0));
    if (!isRoot) weftCopyOut((char *)a->recvbuff + off, weftDirectStagingOf(s, a->root, seq), bytes, comm->opStreamsOut);
  }
  if (isRoot && a->recvbuff != a->sendbuff) weftCopyOut(a->recvbuff, a->sendbuff, a->bytes, comm->opStreamsOut);
  return weftSuccess;
}

static weftResult_t broadcastInPlace(struct weftComm *comm, struct directState *s,
                                     const struct weftCollArgs *a) {
  uint64_t seq = ++s->seq;
  int isRoot = s->me == a->root;
  if (isRoot) s->ctrl[s->me].sendAddr = (uint64_t)(uintptr_t)a->sendbuff;
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, 1));
  if (!isRoot) {
    WEFTCHECK(weftDirectPeerRead(s, a->root, a->recvbuff, s->ctrl[a->root].sendAddr, a->bytes));
    weftDirectPost(s, FLAG_DONE, seq); /* nobody reads my buffers: I am free to go */
    return weftSuccess;
  }
  if (a->recvbuff != a->sendbuff) memcpy(a->recvbuff, a->sendbuff, a->bytes);
  weftDirectPost(s, FLAG_DONE, seq);
  return weftDirectWaitAll(comm, s, FLAG_DONE, seq);
}

weftResult_t weftDirectBroadcast(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a) {
  if (weftDirectCollInPlace(s, comm, a)) return broadcastInPlace(comm, s, a);
  return broadcastStaged(comm, s, a);
}

/* ---- Reduce ---- */

static weftResult_t reduceSmall(struct weftComm *comm, struct directState *s,
                                const struct weftCollArgs *a) {
  uint64_t seq = ++s->seq;
  memcpy(weftDirectStagingOf(s, s->me, seq), a->sendbuff, a->bytes);
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, 1));
  if (s->me != a->root) return weftSuccess; /* the root reads my staging before round seq + 2 */
  for (int r = 0; r < s->n; r++) s->inputs[r] = weftDirectStagingOf(s, r, seq);
  weftDirectReduceAll(a->recvbuff, s->inputs, s->n, a->count, a);
  return weftSuccess;
}

static weftResult_t reduceStagedChunk(struct weftComm *comm, struct directState *s,
                                      const struct weftCollArgs *a, size_t first, size_t count) {
  size_t ts = weftTypeSize(a->type), sFirst, sLen;
  uint64_t seq = ++s->seq;
  memcpy(weftDirectStagingOf(s, s->me, seq), (const char *)a->sendbuff + first * ts, count * ts);
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, first == 0));
  weftDirectSliceOf(count, ts, s->n, s->me, &sFirst, &sLen);
  char *result = s->result + (seq & 1) * s->chunkBytes;
  if (sLen > 0) {
    for (int r = 0; r < s->n; r++) s->inputs[r] = weftDirectStagingOf(s, r, seq) + sFirst * ts;
    weftDirectReduceAll(result + sFirst * ts, s->inputs, s->n, sLen, a);
  }
  weftDirectPost(s, FLAG_REDUCED, seq);
  if (s->me != a->root) return weftSuccess;
  WEFTCHECK(weftDirectWaitAll(comm, s, FLAG_REDUCED, seq));
  memcpy((char *)a->recvbuff + first * ts, result, count * ts);
  return weftSuccess;
}

/* My slice of the root's receive buffer, in bounce-sized pieces: reduced where it lies when
 * the root is a thread of this process, else aside and written with process_vm_writev. */
static weftResult_t reduceSliceToRoot(struct directState *s, const struct weftCollArgs *a,
                                      size_t first, size_t len) {
  size_t ts = weftTypeSize(a->type), piece = DIRECT_BOUNCE_BYTES / ts;
  int local = weftDirectIsLocal(s, a->root);
  uint64_t rootRecv = s->ctrl[a->root].recvAddr;
  for (size_t done = 0; done < len; done += piece) {
    size_t count = weftDirectMin(piece, len - done), off = (first + done) * ts;
    for (int r = 0; r < s->n; r++) s->addrs[r] = s->ctrl[r].sendAddr + off;
    char *dst = local ? (char *)(uintptr_t)(rootRecv + off) : s->accum;
    WEFTCHECK(weftDirectReducePeers(s, a, s->addrs, count, dst));
    if (!local) WEFTCHECK(weftDirectPeerWrite(s, a->root, rootRecv + off, dst, count * ts));
  }
  return weftSuccess;
}

static weftResult_t reduceInPlace(struct weftComm *comm, struct directState *s,
                                  const struct weftCollArgs *a) {
  size_t first, len;
  uint64_t seq = ++s->seq;
  s->ctrl[s->me].sendAddr = (uint64_t)(uintptr_t)a->sendbuff;
  if (s->me == a->root) s->ctrl[s->me].recvAddr = (uint64_t)(uintptr_t)a->recvbuff;
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, 1));
  weftDirectSliceOf(a->count, weftTypeSize(a->type), s->n, s->me, &first, &len);
  WEFTCHECK(reduceSliceToRoot(s, a, first, len));
  weftDirectPost(s, FLAG_REDUCED, seq);
  return weftDirectWaitAll(comm, s, FLAG_REDUCED, seq);
}

weftResult_t weftDirectReduce(struct weftComm *comm, struct directState *s,
                              const struct weftCollArgs *a) {
  if (a->bytes <= DIRECT_SMALL_BYTES) return reduceSmall(comm, s, a);
  if (weftDirectCollInPlace(s, comm, a)) return reduceInPlace(comm, s, a);
  size_t per = s->chunkBytes / weftTypeSize(a->type);
  for (size_t first = 0; first < a->count; first += per)
    WEFTCHECK(reduceStagedChunk(comm, s, a, first, weftDirectMin(per, a->count - first)));
  return weftSuccess;
}

/* ---- AllGather ---- */

static void copyOwnPart(const struct weftComm *comm, struct directState *s, const struct weftCollArgs *a) {
  char *own = (char *)a->recvbuff + (size_t)s->me * a->bytes;
  if (own != a->sendbuff) weftCopyOut(own, a->sendbuff, a->bytes, comm->opStreamsOut);
}

static weftResult_t allGatherStaged(struct weftComm *comm, struct directState *s,
                                    const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type), per = s->chunkBytes / ts;
  for (size_t first = 0; first < a->count; first += per) {
    size_t bytes = weftDirectMin(per, a->count - first) * ts, off = first * ts;
    uint64_t seq = ++s->seq;
    memcpy(weftDirectStagingOf(s, s->me, seq), (const char *)a->sendbuff + off, bytes);
    WEFTCHECK(weftDirectArrive(comm, s, a, seq, first == 0));
    for (int r = 0; r < s->n; r++)
      if (r != s->me)
        weftCopyOut((char *)a->recvbuff + (size_t)r * a->bytes + off, weftDirectStagingOf(s, r, seq),
                    bytes, comm->opStreamsOut);
  }
  copyOwnPart(comm, s, a);
  return weftSuccess;
}

static weftResult_t allGatherInPlace(struct weftComm *comm, struct directState *s,
                                     const struct weftCollArgs *a) {
  uint64_t seq = ++s->seq;
  s->ctrl[s->me].sendAddr = (uint64_t)(uintptr_t)a->sendbuff;
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, 1));
  for (int r = 0; r < s->n; r++)
    if (r != s->me)
      WEFTCHECK(weftDirectPeerRead(s, r, (char *)a->recvbuff + (size_t)r * a->bytes,
                                   s->ctrl[r].sendAddr, a->bytes));
  copyOwnPart(comm, s, a);
  weftDirectPost(s, FLAG_DONE, seq);
  return weftDirectWaitAll(comm, s, FLAG_DONE, seq);
}

weftResult_t weftDirectAllGather(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a) {
  if (weftDirectCollInPlace(s, comm, a)) return allGatherInPlace(comm, s, a);
  return allGatherStaged(comm, s, a);
}

/* ---- ReduceScatter ---- */

static weftResult_t reduceScatterRound(struct weftComm *comm, struct directState *s,
                                       const struct weftCollArgs *a, size_t first, size_t count) {
  size_t ts = weftTypeSize(a->type), bytes = count * ts;
  uint64_t seq = ++s->seq;
  char *stage = weftDirectStagingOf(s, s->me, seq);
  for (int p = 0; p < s->n; p++)
    memcpy(stage + (size_t)p * bytes, (const char *)a->sendbuff + ((size_t)p * a->count + first) * ts, bytes);
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, first == 0));
  for (int r = 0; r < s->n; r++) s->inputs[r] = weftDirectStagingOf(s, r, seq) + (size_t)s->me * bytes;
  weftDirectReduceAll((char *)a->recvbuff + first * ts, s->inputs, s->n, count, a);
  return weftSuccess;
}

static weftResult_t reduceScatterInPlace(struct weftComm *comm, struct directState *s,
                                         const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type), piece = DIRECT_BOUNCE_BYTES / ts;
  uint64_t seq = ++s->seq;
  s->ctrl[s->me].sendAddr = (uint64_t)(uintptr_t)a->sendbuff;
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, 1));
  for (size_t done = 0; done < a->count; done += piece) {
    size_t off = ((size_t)s->me * a->count + done) * ts;
    for (int r = 0; r < s->n; r++) s->addrs[r] = s->ctrl[r].sendAddr + off;
    WEFTCHECK(weftDirectReducePeers(s, a, s->addrs, weftDirectMin(piece, a->count - done),
                                    (char *)a->recvbuff + done * ts));
  }
  weftDirectPost(s, FLAG_DONE, seq);
  return weftDirectWaitAll(comm, s, FLAG_DONE, seq);
}

weftResult_t weftDirectReduceScatter(struct weftComm *comm, struct directState *s,
                                     const struct weftCollArgs *a) {
  if (weftDirectCollInPlace(s, comm, a)) return reduceScatterInPlace(comm, s, a);
  size_t per = weftDirectScatterPiece(s, weftTypeSize(a->type));
  for (size_t first = 0; first < a->count; first += per)
    WEFTCHECK(reduceScatterRound(comm, s, a, first, weftDirectMin(per, a->count - first)));
  return weftSuccess;
}

/* ---- costs ---- */

/* Rounds of `per` bytes that carry `bytes`. */
static double rounds(size_t bytes, size_t per) { return (double)((bytes + per - 1) / per); }

/* The bytes a rank puts through the segment on the staged path. */
static size_t stagedBytes(const struct directState *s, const struct weftCollArgs *a) {
  return a->coll == weftCollReduceScatter ? (size_t)s->n * a->bytes : a->bytes;
}

static double stagedCost(const struct directState *s, const struct weftComm *comm,
                         const struct weftCollArgs *a) {
  int n = s->n;
  double sync = weftDirectSyncUs(comm, n), b = (double)a->bytes;
  double bw = stagedBytes(s, a) <= DIRECT_SMALL_BYTES ? 10e3 : 8e3; /* small ones are cached */
  switch (a->coll) {
    case weftCollBroadcast: /* the root fills one chunk ahead of the readers: they overlap */
      return rounds(a->bytes, s->chunkBytes) * sync + (b + (double)weftDirectMin(a->bytes, s->chunkBytes)) / bw;
    case weftCollReduce:
      if (a->bytes <= DIRECT_SMALL_BYTES) return sync + b * (1.0 + n) / bw;
      return rounds(a->bytes, s->chunkBytes) * 2 * sync + b * 3.0 / 8e3;
    case weftCollAllGather: return rounds(a->bytes, s->chunkBytes) * sync + b * (1.0 + n) / bw;
    default: /* ReduceScatter */
      return rounds(a->bytes, weftDirectScatterPiece(s, weftTypeSize(a->type)) * weftTypeSize(a->type)) * sync +
             b * (2.0 * n + 1) / bw;
  }
}

/* Reading peers where they are: fewer copies, each at the peer copy speed. */
static double inPlaceCost(const struct directState *s, const struct weftComm *comm,
                          const struct weftCollArgs *a) {
  int n = s->n;
  double fixed = 2 * weftDirectSyncUs(comm, n) + 2.0, b = (double)a->bytes, bw = weftDirectPeerBw(s);
  switch (a->coll) {
    case weftCollBroadcast: return fixed + b / bw;
    case weftCollReduce: return fixed + b * 1.5 / bw;
    case weftCollAllGather: return fixed + b * n / bw;
    default: return fixed + b * (1.0 + n) / bw; /* ReduceScatter */
  }
}

int weftDirectCollInPlace(struct directState *s, const struct weftComm *comm,
                          const struct weftCollArgs *a) {
  return weftDirectRunsInPlace(s, a, stagedBytes(s, a), inPlaceCost(s, comm, a), stagedCost(s, comm, a));
}

double weftDirectCollCost(const struct directState *s, const struct weftComm *comm,
                          const struct weftCollArgs *a) {
  double inPlace = inPlaceCost(s, comm, a), staged = stagedCost(s, comm, a);
  return weftDirectTakesInPlace(s, stagedBytes(s, a), inPlace, staged) ? inPlace : staged;
}
