/* The point-to-point engine: moves a set of sends and receives at once. Each pass gives every
 * transfer what its link allows now (free send slots, arrived receive slots), never waiting on
 * one while another could move, so any pattern of transfers among any ranks completes: a
 * rank only waits when none of its transfers can move. Transfers on the same link run in the
 * order given (the order of the calls), as NCCL matches sends and receives.
 * Every slot ends with a 32-byte trailer as the prims' do: three signature words and the
 * link's slot number. A user's Send carries its transfer number on the link, count and
 * type, so a receive that expects another count or type fails (weftInvalidUsage naming both
 * calls) before any byte lands in its buffer; a collective built on these transfers carries
 * the collective's signature instead. */
#include "p2p.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "copy.h"
#include "prims.h"
#include "reduce.h"

/* The third signature word of a user's transfer: no collective has this kind. */
#define P2P_WHAT 0xffffffff00000000ULL
#define P2P_MARK 0xffu

weftResult_t weftP2pConnect(struct weftComm *comm, const struct weftP2pOp *ops, int n);

static struct weftP2pLink *linkOf(struct weftComm *comm, const struct weftP2pOp *op) {
  return op->isSend ? &comm->p2p->send[op->peer] : &comm->p2p->recv[op->peer];
}

static uint64_t countWord(size_t count, weftDataType_t type) {
  return (uint64_t)count << 16 | (uint64_t)type << 8 | P2P_MARK;
}

static void describeTrailer(const uint64_t t[3], char *buf, size_t len) {
  if (t[2] == P2P_WHAT && (t[1] & 0xff) == P2P_MARK) {
    unsigned type = (unsigned)(t[1] >> 8) & 0xff;
    snprintf(buf, len, "transfer %llu of %llu elements of %s", (unsigned long long)t[0],
             (unsigned long long)(t[1] >> 16),
             type < weftNumTypes ? weftTypeName((weftDataType_t)type) : "?");
    return;
  }
  char call[160];
  weftSigDescribe(t[1], t[2], call, sizeof call);
  snprintf(buf, len, "%s (its operation %llu)", call, (unsigned long long)t[0]);
}

/* A send to itself: the buffers may overlap (memmove), else they stream where the run's results
 * outgrow the cache (lib/copy.h). */
static void copySelf(void *dst, const void *src, size_t n, int streaming) {
  const char *d = dst, *s = src;
  if (d < s + n && s < d + n) memmove(dst, src, n);
  else weftCopyOut(dst, src, n, streaming);
}

/* Pairs this rank's sends to itself with its receives from itself, in order; copies them
 * when copy is set, else only checks that they pair up. */
static weftResult_t pairSelf(struct weftComm *comm, struct weftP2pOp *ops, int n, int copy) {
  int r = 0;
  for (int s = 0; s < n; s++) {
    if (!ops[s].isSend || ops[s].peer != comm->rank || ops[s].count == 0) continue;
    while (r < n && (ops[r].isSend || ops[r].peer != comm->rank || ops[r].count == 0)) r++;
    if (r == n)
      return weftSetError(weftInvalidUsage,
                          "rank %d: a send of %zu elements to itself has no matching receive from "
                          "itself in the same group", comm->rank, ops[s].count);
    if (ops[r].count != ops[s].count || ops[r].type != ops[s].type)
      return weftSetError(weftInvalidUsage,
                          "rank %d: a send of %zu elements of %s to itself is matched by a receive "
                          "of %zu elements of %s", comm->rank, ops[s].count,
                          weftTypeName(ops[s].type), ops[r].count, weftTypeName(ops[r].type));
    if (copy && ops[r].recvbuff != ops[s].sendbuff)
      copySelf(ops[r].recvbuff, ops[s].sendbuff, ops[s].count * weftTypeSize(ops[s].type),
               ops[r].streamOut);
    if (copy) ops[s].finished = ops[r].finished = 1;
    r++;
  }
  for (; r < n; r++) /* receives past the last one paired */
    if (!ops[r].isSend && ops[r].peer == comm->rank && ops[r].count > 0)
      return weftSetError(weftInvalidUsage,
                          "rank %d: a receive of %zu elements from itself has no matching send to "
                          "itself in the same group", comm->rank, ops[r].count);
  return weftSuccess;
}

weftResult_t weftP2pCheck(struct weftComm *comm, struct weftP2pOp *ops, int n) {
  return pairSelf(comm, ops, n, 0);
}

/* Sizes, trailers and the order on each link: op i may move once prev[i] (the previous
 * transfer on its link, -1 none) has finished. */
static weftResult_t prepare(struct weftComm *comm, struct weftP2pOp *ops, int n, int *prev) {
  size_t recvBytes = 0;
  for (int i = 0; i < n; i++) {
    struct weftP2pOp *op = &ops[i];
    op->bytes = op->count * weftTypeSize(op->type);
    op->moved = 0;
    op->finished = op->count == 0;
    prev[i] = -1;
    if (!op->isSend) recvBytes += op->bytes;
  }
  /* A collective decided for its whole result (lib/coll.c); Send/Recv by what this run receives. */
  int stream = comm->opStreamsOut || weftCommStreamsOut(comm, recvBytes);
  for (int i = 0; i < n; i++) ops[i].streamOut = stream;
  WEFTCHECK(pairSelf(comm, ops, n, 1));
  for (int i = 0; i < n; i++)
    if (!ops[i].finished && ops[i].peer != comm->rank) linkOf(comm, &ops[i])->lastOp = -1;
  for (int i = 0; i < n; i++) {
    struct weftP2pOp *op = &ops[i];
    if (op->finished || op->peer == comm->rank) continue;
    struct weftP2pLink *l = linkOf(comm, op);
    prev[i] = l->lastOp; /* one pass: a link remembers its latest transfer of this run */
    l->lastOp = i;
    l->opsDone++;
    if (op->sig != NULL) memcpy(op->trailer, op->sig, sizeof op->trailer);
    else {
      op->trailer[0] = l->opsDone;
      op->trailer[1] = countWord(op->count, op->type);
      op->trailer[2] = P2P_WHAT;
    }
  }
  return weftSuccess;
}

static size_t pieceBytes(const struct weftConn *c) { return c->slotBytes - WEFT_PRIMS_SIG_BYTES; }

/* Posts as many pieces as the link has free slots; *moved set when one went. */
static weftResult_t sendSome(struct weftComm *comm, struct weftP2pOp *op, int *moved) {
  struct weftConn *c = &linkOf(comm, op)->conn;
  while (op->moved < op->bytes) {
    void *slot = NULL;
    WEFTCHECK(c->ops->sendSlot(c, &slot));
    if (slot == NULL) return weftSuccess;
    size_t n = op->bytes - op->moved < pieceBytes(c) ? op->bytes - op->moved : pieceBytes(c);
    uint64_t trailer[4] = {op->trailer[0], op->trailer[1], op->trailer[2], c->slotSeq++};
    memcpy(slot, (const char *)op->sendbuff + op->moved, n);
    memcpy((char *)slot + n, trailer, sizeof trailer);
    WEFTCHECK(c->ops->sendPost(c, n + sizeof trailer));
    op->moved += n;
    *moved = 1;
  }
  op->finished = 1;
  return weftSuccess;
}

static weftResult_t recvMismatch(struct weftComm *comm, const struct weftP2pOp *op,
                                 const uint64_t theirs[3]) {
  char a[192], b[192];
  describeTrailer(theirs, a, sizeof a);
  describeTrailer(op->trailer, b, sizeof b);
  return weftSetError(weftInvalidUsage,
                      "mismatched point-to-point calls: rank %d sent rank %d its %s, where rank %d "
                      "expected its %s", op->peer, comm->rank, a, comm->rank, b);
}

/* Checks one arrived slot against what this receive expects. */
static weftResult_t checkSlot(struct weftComm *comm, struct weftP2pOp *op, struct weftConn *c,
                              const char *slot, size_t bytes) {
  uint64_t t[4] = {0, 0, 0, 0};
  if (bytes < WEFT_PRIMS_SIG_BYTES)
    return weftSetError(weftRemoteError, "rank %d: rank %d sent a %zu-byte slot, shorter than its "
                        "trailer", comm->rank, op->peer, bytes);
  memcpy(t, slot + bytes - WEFT_PRIMS_SIG_BYTES, sizeof t);
  if (t[3] != c->slotSeq)
    return weftSetError(weftRemoteError,
                        "rank %d: the point-to-point link from rank %d (%s) delivered its slot %llu "
                        "where slot %llu was due: data was lost or repeated on the way", comm->rank,
                        op->peer, c->ops->name, (unsigned long long)t[3],
                        (unsigned long long)c->slotSeq);
  if (memcmp(t, op->trailer, sizeof op->trailer) != 0) return recvMismatch(comm, op, t);
  if (bytes - WEFT_PRIMS_SIG_BYTES > op->bytes - op->moved)
    return weftSetError(weftInvalidUsage, "rank %d: rank %d sent more than the %zu bytes it "
                        "announced", comm->rank, op->peer, op->bytes);
  return weftSuccess;
}

/* Takes every piece that has arrived; *moved set when one did. */
static weftResult_t recvSome(struct weftComm *comm, struct weftP2pOp *op, int *moved) {
  struct weftConn *c = &linkOf(comm, op)->conn;
  while (op->moved < op->bytes) {
    const void *slot = NULL;
    size_t bytes = 0;
    WEFTCHECK(c->ops->recvSlot(c, &slot, &bytes));
    if (slot == NULL) return weftSuccess;
    WEFTCHECK(checkSlot(comm, op, c, slot, bytes));
    c->slotSeq++;
    size_t n = bytes - WEFT_PRIMS_SIG_BYTES;
    /* Not streamed, unlike prims' copies out of slots: measured here with 2 ranks, streaming
     * these made the engine (which drains every arrived slot at once) slower: a 64 MiB
     * AlltoAll 9.0 and 10.0 ms against 8.0 and 8.8 with only the self copy streamed, a 64 MiB
     * SendRecv 13.2 against 10.5 (medians of interleaved runs; why, not known). With 4 ranks
     * on the 2 cores it was faster (AlltoAll 17.5 against 20.2 ms), with 8 no different. */
    memcpy((char *)op->recvbuff + op->moved, slot, n);
    WEFTCHECK(c->ops->recvDone(c));
    op->moved += n;
    *moved = 1;
  }
  op->finished = 1;
  return weftSuccess;
}

/* One pass over the transfers; *left = those not finished, *waitOn one of their peers. */
static weftResult_t pass(struct weftComm *comm, struct weftP2pOp *ops, int n, const int *prev,
                         int *moved, int *left, int *waitOn) {
  *left = 0;
  for (int i = 0; i < n; i++) {
    struct weftP2pOp *op = &ops[i];
    if (op->finished) continue;
    if (prev[i] < 0 || ops[prev[i]].finished)
      WEFTCHECK(op->isSend ? sendSome(comm, op, moved) : recvSome(comm, op, moved));
    if (!op->finished) {
      if (*left == 0) *waitOn = i;
      (*left)++;
    }
  }
  return weftSuccess;
}

static weftResult_t moveAll(struct weftComm *comm, struct weftP2pOp *ops, int n, const int *prev) {
  struct weftWaiter w;
  weftWaitStart(&w, comm);
  for (;;) {
    int moved = 0, left = 0, waitOn = 0;
    WEFTCHECK(pass(comm, ops, n, prev, &moved, &left, &waitOn));
    if (left == 0) break;
    if (moved) { /* the timeout counts time without progress */
      weftWaitDone(&w);
      weftWaitStart(&w, comm);
      continue;
    }
    const struct weftP2pOp *op = &ops[waitOn];
    /* A transport that can sleep until its link moves (verbs' completion channel) does so for
     * this transfer's link; the others are looked at again when the wait's step ends, as a
     * sleep on the clock would. */
    w.conn = &linkOf(comm, op)->conn;
    WEFTCHECK(weftWaitPause(&w, op->isSend ? "waiting for free slots to send to"
                                           : "waiting for data from", op->peer));
  }
  weftWaitDone(&w);
  return weftSuccess;
}

weftResult_t weftP2pRun(struct weftComm *comm, struct weftP2pOp *ops, int n) {
  if (n <= 0) return weftSuccess;
  WEFTCHECK(weftP2pConnect(comm, ops, n));
  int few[WEFT_P2P_INLINE_OPS]; /* a SendRecv pair or a few: no malloc */
  int *prev = n <= WEFT_P2P_INLINE_OPS ? few : malloc(sizeof(int) * (size_t)n);
  if (prev == NULL) return weftSetError(weftSystemError, "out of memory");
  weftResult_t rc = prepare(comm, ops, n, prev);
  if (rc == weftSuccess) rc = moveAll(comm, ops, n, prev);
  if (prev != few) free(prev);
  return rc;
}
