/* The direct algorithm's AllReduce (see direct.c for the segment and its rounds).
 * - small (<= DIRECT_SMALL_BYTES): each rank copies its input into its staging slot and
 *   posts; once all have posted, every rank reduces all inputs itself, in rank order (so all
 *   get the same bits). One round, one synchronisation.
 * - staged (no way to read peers' memory): per chunk, copy in, post; rank i reduces slice i of
 *   the chunk from all staging slots into a shared result area, raises `reduced`; then every
 *   rank copies the whole result out. Two synchronisations per chunk.
 * - in place (peers are threads of this process, or cross-memory attach works, the buffer is
 *   large and this path's cost, at the peer copy speed, is below the staged one's): ranks
 *   publish their buffer addresses; rank i reduces slice i reading the others' send buffers
 *   where they are (pointer, or process_vm_readv into a cache-sized bounce buffer), writes it
 *   into its own receive buffer, raises `reduced`; then reads the other slices from the other
 *   ranks' receive buffers, raises `done`, and waits for all `done` since the others read its
 *   buffers until then. Three synchronisations, one copy of the data per rank instead of
 *   three.
 * Bytes moved per rank: small n * bytes read; in place ~ 2(n-1)/n * bytes of peer reads;
 * staged ~ 3 * bytes copies. cost() = synchronisations * sync latency + bytes moved / memory
 * bandwidth. */
#include <string.h>

#include "check.h"
#include "copy.h"
#include "direct.h"
#include "reduce.h"

static weftResult_t allReduceSmall(struct weftComm *comm, struct directState *s,
                                   const struct weftCollArgs *a) {
  uint64_t seq = ++s->seq;
  memcpy(weftDirectStagingOf(s, s->me, seq), a->sendbuff, a->bytes);
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, 1));
  for (int r = 0; r < s->n; r++) s->inputs[r] = weftDirectStagingOf(s, r, seq);
  weftDirectReduceAll(a->recvbuff, s->inputs, s->n, a->count, a);
  return weftSuccess;
}

static weftResult_t stagedChunk(struct weftComm *comm, struct directState *s,
                                const struct weftCollArgs *a, size_t first, size_t count) {
  size_t ts = weftTypeSize(a->type);
  uint64_t seq = ++s->seq;
  memcpy(weftDirectStagingOf(s, s->me, seq), (const char *)a->sendbuff + first * ts, count * ts);
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, first == 0));
  size_t sFirst, sLen;
  weftDirectSliceOf(count, ts, s->n, s->me, &sFirst, &sLen);
  char *result = s->result + (seq & 1) * s->chunkBytes;
  if (sLen > 0) {
    for (int r = 0; r < s->n; r++) s->inputs[r] = weftDirectStagingOf(s, r, seq) + sFirst * ts;
    weftDirectReduceAll(result + sFirst * ts, s->inputs, s->n, sLen, a);
  }
  weftDirectPost(s, FLAG_REDUCED, seq);
  WEFTCHECK(weftDirectWaitAll(comm, s, FLAG_REDUCED, seq));
  weftCopyOut((char *)a->recvbuff + first * ts, result, count * ts, comm->opStreamsOut);
  return weftSuccess;
}

static weftResult_t allReduceStaged(struct weftComm *comm, struct directState *s,
                                    const struct weftCollArgs *a) {
  size_t perChunk = s->chunkBytes / weftTypeSize(a->type);
  for (size_t first = 0; first < a->count; first += perChunk)
    WEFTCHECK(stagedChunk(comm, s, a, first, a->count - first < perChunk ? a->count - first : perChunk));
  return weftSuccess;
}

/* My slice: recv = send(0) op send(1) ... op send(n-1), in bounce-sized pieces. */
static weftResult_t reduceMySlice(struct directState *s, const struct weftCollArgs *a,
                                  size_t first, size_t len) {
  size_t ts = weftTypeSize(a->type);
  size_t piece = DIRECT_BOUNCE_BYTES / ts;
  for (size_t done = 0; done < len; done += piece) {
    size_t n = len - done < piece ? len - done : piece;
    size_t off = (first + done) * ts;
    for (int r = 0; r < s->n; r++) s->addrs[r] = s->ctrl[r].sendAddr + off;
    WEFTCHECK(weftDirectReducePeers(s, a, s->addrs, n, (char *)a->recvbuff + off));
  }
  return weftSuccess;
}

static weftResult_t allReduceInPlace(struct weftComm *comm, struct directState *s,
                                     const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type);
  uint64_t seq = ++s->seq;
  s->ctrl[s->me].sendAddr = (uint64_t)(uintptr_t)a->sendbuff;
  s->ctrl[s->me].recvAddr = (uint64_t)(uintptr_t)a->recvbuff;
  WEFTCHECK(weftDirectArrive(comm, s, a, seq, 1));
  size_t first, len;
  weftDirectSliceOf(a->count, ts, s->n, s->me, &first, &len);
  WEFTCHECK(reduceMySlice(s, a, first, len));
  weftDirectPost(s, FLAG_REDUCED, seq);
  WEFTCHECK(weftDirectWaitAll(comm, s, FLAG_REDUCED, seq));
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    weftDirectSliceOf(a->count, ts, s->n, r, &first, &len);
    if (len > 0)
      WEFTCHECK(weftDirectPeerRead(s, r, (char *)a->recvbuff + first * ts,
                                   s->ctrl[r].recvAddr + first * ts, len * ts));
  }
  weftDirectPost(s, FLAG_DONE, seq);
  return weftDirectWaitAll(comm, s, FLAG_DONE, seq);
}

static double stagedCost(const struct directState *s, double sync, double b) {
  double chunks = (double)((((size_t)b) + s->chunkBytes - 1) / s->chunkBytes);
  return chunks * 2 * sync + b * 3.0 / 8e3;
}

static double inPlaceCost(const struct directState *s, double sync, double b) {
  return 3 * sync + 2.0 + b * 2.5 / weftDirectPeerBw(s);
}

weftResult_t weftDirectAllReduce(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a) {
  if (a->bytes <= DIRECT_SMALL_BYTES) return allReduceSmall(comm, s, a);
  double sync = weftDirectSyncUs(comm, s->n), b = (double)a->bytes;
  if (weftDirectRunsInPlace(s, a, a->bytes, inPlaceCost(s, sync, b), stagedCost(s, sync, b)))
    return allReduceInPlace(comm, s, a);
  return allReduceStaged(comm, s, a);
}

double weftDirectAllReduceCost(const struct directState *s, const struct weftComm *comm,
                               const struct weftCollArgs *a) {
  double sync = weftDirectSyncUs(comm, s->n), b = (double)a->bytes;
  if (a->bytes <= DIRECT_SMALL_BYTES) return sync + b * (2.0 + s->n) / 10e3;
  double inPlace = inPlaceCost(s, sync, b), staged = stagedCost(s, sync, b);
  return weftDirectTakesInPlace(s, a->bytes, inPlace, staged) ? inPlace : staged;
}
