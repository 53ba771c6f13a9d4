/* Primitive steps of a collective on one connection pair (receive from prev, send to next),
 * and the one way every wait in weft is done. Algorithms are short lists of these steps. */
#ifndef WEFT_PRIMS_H_
#define WEFT_PRIMS_H_

#include <stddef.h>
#include <stdint.h>
#include "core.h"

/* A wait: spin a little (not at all when ranks outnumber cores), then yield, then sleep;
 * the deadline is taken the first time the wait stops spinning, so a fast wait never reads
 * the clock. */
struct weftWaiter {
  struct weftComm *comm;
  struct weftConn *conn; /* the one link waited on, whose transport may sleep for it; or NULL */
  uint32_t iter;
  uint32_t spin;    /* the spin phase of this wait */
  int64_t deadlineMs;
  int64_t yieldStartNs; /* when the wait stopped spinning */
  /* Straggler measurement (lib/straggler.h), only while comm->waitNsByPeer is set: when the
   * time since markNs started to count against markPeer; 0 none. */
  int64_t markNs;
  int markPeer;
  /* Absence (weftWaitPause): when the clock was last read for this wait, and how long the
   * pause after that reading asked to sleep. */
  int64_t seenNs;
  int64_t pauseNs;
  int64_t queuedNs; /* the thread's run-queue delay at the last sample; -1 none (set with
                     * the first mark, so a wait that is not timed stores nothing more) */
};

static inline void weftWaitStart(struct weftWaiter *w, struct weftComm *comm) {
  w->comm = comm;
  w->conn = NULL;
  w->iter = 0;
  w->spin = UINT32_MAX; /* set when the wait stops spinning */
  w->deadlineMs = 0;
  w->markNs = 0;
}

/* Called when the awaited condition became true. Spinning adapts to what it buys: a wait that
 * ended soon after it stopped spinning would have been caught by a longer spin (double it, up
 * to spinMax); one that lasted long is a peer busy elsewhere or a host that turned busy (halve
 * it), so such a host stops burning cores and a quiet one keeps spinning. */
void weftWaitAdapt(struct weftWaiter *w);
/* Adds the time since w->markNs to what this collective waited for w->markPeer
 * (comm->waitNsByPeer, comm->opWaitNs), then marks now against `next` (-1: stops). Called
 * only by waits that did not find their data there, and only while the straggler report
 * measures: a wait that needs no pause reads no clock. */
void weftWaitAccount(struct weftWaiter *w, int next);
/* The end of a timed wait: the last pause may have been an absence (lib/wait.c), then the
 * time since the mark is accounted. */
void weftWaitEndMark(struct weftWaiter *w);
static inline void weftWaitDone(struct weftWaiter *w) {
  if (w->iter > w->spin) weftWaitAdapt(w);
  if (w->markNs != 0) weftWaitEndMark(w);
}
/* Called each time the awaited condition is false. Returns weftTimeout (with a message naming
 * what, peer and the operation) once the communicator's timeout has passed. */
weftResult_t weftWaitPause(struct weftWaiter *w, const char *what, int peer);
/* How often a lasting wait calls the algorithms' watch() (see lib/algo.h). */
#define WEFT_WATCH_MS 20

/* Primitive steps on up to WEFT_PRIMS_MAX_PEERS receive and send connections (a ring uses one
 * of each; a tree node its children and its parent). Received pieces are reduced in the order
 * of recv[]; "final" steps apply weftReduceFinal with `divisor` (weftAvg divides by it). */
#define WEFT_PRIMS_MAX_PEERS 3
/* Every slot a prims step posts ends with a 32-byte trailer: the collective's signature
 * (comm->opSig) and the link's slot number (conn->slotSeq). The receiver compares both with
 * its own: ranks that called different collectives (kind, count, datatype, op, root or
 * sequence) fail at
 * their first received piece with weftInvalidUsage, and pass a "poison" slot carrying both
 * signatures downstream before they close their links; a slot that a link lost (or delivered
 * twice) is weftRemoteError at the next slot, where without the number a lost piece of one
 * collective would be replaced by the next piece and reduced into a wrong result. */
#define WEFT_PRIMS_SIG_BYTES 32
struct weftPrims {
  struct weftComm *comm;
  struct weftConn *send[WEFT_PRIMS_MAX_PEERS], *recv[WEFT_PRIMS_MAX_PEERS];
  int nsend, nrecv;
  weftDataType_t type;
  weftRedOp_t op;
  int divisor;
  size_t typeSize;
  size_t pieceCount; /* elements in one slot */
  int streamOut;     /* copies out of slots stream past the cache (lib/copy.h) */
};

/* One send and one receive connection (either may be NULL); final steps divide by nranks. */
void weftPrimsInit(struct weftPrims *p, struct weftComm *comm, struct weftConn *send,
                   struct weftConn *recv, weftDataType_t type, weftRedOp_t op);
void weftPrimsInitMulti(struct weftPrims *p, struct weftComm *comm, struct weftConn *const *sends,
                        int nsend, struct weftConn *const *recvs, int nrecv, weftDataType_t type,
                        weftRedOp_t op, int divisor);

/* Cuts steps into pieces of at most pieceBytes (both ends of every link must use the same). */
static inline void weftPrimsSetPiece(struct weftPrims *p, size_t pieceBytes) {
  if (pieceBytes >= p->typeSize + WEFT_PRIMS_SIG_BYTES)
    p->pieceCount = (pieceBytes - WEFT_PRIMS_SIG_BYTES) / p->typeSize;
}

/* Each step moves count elements, split into slot-sized pieces both sides agree on. */
weftResult_t weftPrimsSend(struct weftPrims *p, const void *src, size_t count);
weftResult_t weftPrimsRecv(struct weftPrims *p, void *dst, size_t count);
/* send = src op recv... */
weftResult_t weftPrimsRecvReduceSend(struct weftPrims *p, const void *src, size_t count);
/* dst = final(src op recv...); send = dst */
weftResult_t weftPrimsRecvReduceCopySend(struct weftPrims *p, const void *src, void *dst,
                                         size_t count);
/* dst = final(src op recv...) */
weftResult_t weftPrimsRecvReduceCopy(struct weftPrims *p, const void *src, void *dst,
                                     size_t count);
/* dst = recv; send = recv (dst may be NULL) */
weftResult_t weftPrimsRecvCopySend(struct weftPrims *p, void *dst, size_t count);
/* A slot with no data, only the trailer: the receiver checks the sender's signature. A chain's
 * ends use it where data flows one way only (a ring Broadcast's root only sends), and the
 * schedules shaped by the root pass one along the ring (weftRingCallToken, algorithms/ring.h),
 * so ranks that disagree on the call (its root) meet a signature that is not theirs. */
weftResult_t weftPrimsSendToken(struct weftPrims *p);
weftResult_t weftPrimsRecvToken(struct weftPrims *p);

/* A tap on the steps above (comm->primsTap, NULL in normal runs). Each step call reports what
 * it moves: its kind, the peers it receives from and sends to, its data bytes and the pieces
 * they are cut into (a token: 0 bytes in 1 piece; an empty step: 0 pieces, no message).
 * With recordOnly the step then returns at once, touching neither transports nor data: weft-sim
 * (tools/sim) runs an algorithm's own run() for one rank this way to get the schedule it would
 * execute; tests/sim counts the steps of a real run (recordOnly 0) and compares. */
enum weftPrimsKind {
  WEFT_PRIMS_SEND,
  WEFT_PRIMS_RECV,
  WEFT_PRIMS_RECV_REDUCE_SEND,
  WEFT_PRIMS_RECV_REDUCE_COPY_SEND,
  WEFT_PRIMS_RECV_REDUCE_COPY,
  WEFT_PRIMS_RECV_COPY_SEND,
  WEFT_PRIMS_KINDS
};
struct weftPrimsStep {
  enum weftPrimsKind kind;
  size_t bytes;      /* data bytes of the whole step */
  size_t pieceBytes; /* data bytes of a full piece (each piece also carries the trailer) */
  size_t pieces;
  int nrecv, nsend;
  int recvPeer[WEFT_PRIMS_MAX_PEERS], sendPeer[WEFT_PRIMS_MAX_PEERS];
  /* the links themselves: two links between the same ranks are two FIFOs (weft-sim tells
   * them apart, e.g. the communicator ring's token beside hier's chain) */
  const struct weftConn *recvConn[WEFT_PRIMS_MAX_PEERS], *sendConn[WEFT_PRIMS_MAX_PEERS];
};
struct weftPrimsTap {
  void (*step)(void *ctx, const struct weftPrimsStep *s);
  void *ctx;
  int recordOnly;
};

#endif
