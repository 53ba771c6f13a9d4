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
  uint32_t iter;
  int64_t deadlineMs;
};

static inline void weftWaitStart(struct weftWaiter *w, struct weftComm *comm) {
  w->comm = comm;
  w->iter = 0;
  w->deadlineMs = 0;
}

/* Called when the awaited condition became true. Spinning adapts: a wait that ends within
 * the spin phase lets the next ones spin a little longer (up to spinMax); one that outlasts it
 * halves the spin (in weftWaitPause), so a host that turns busy stops burning cores. */
static inline void weftWaitDone(struct weftWaiter *w) {
  struct weftComm *c = w->comm;
  if (w->iter > 0 && w->iter < (uint32_t)c->spinIters && c->spinIters < c->spinMax)
    c->spinIters += c->spinIters / 8 + 1;
}
/* Called each time the awaited condition is false. Returns weftTimeout (with a message naming
 * what, peer and the operation) once the communicator's timeout has passed. */
weftResult_t weftWaitPause(struct weftWaiter *w, const char *what, int peer);

struct weftPrims {
  struct weftComm *comm;
  struct weftConn *send, *recv;
  weftDataType_t type;
  weftRedOp_t op;
  size_t typeSize;
  size_t pieceCount; /* elements in one slot */
};

void weftPrimsInit(struct weftPrims *p, struct weftComm *comm, struct weftConn *send,
                   struct weftConn *recv, weftDataType_t type, weftRedOp_t op);

/* Each step moves count elements, split into slot-sized pieces both sides agree on. */
weftResult_t weftPrimsSend(struct weftPrims *p, const void *src, size_t count);
weftResult_t weftPrimsRecv(struct weftPrims *p, void *dst, size_t count);
/* send = recv op src */
weftResult_t weftPrimsRecvReduceSend(struct weftPrims *p, const void *src, size_t count);
/* dst = final(recv op src); send = dst */
weftResult_t weftPrimsRecvReduceCopySend(struct weftPrims *p, const void *src, void *dst,
                                         size_t count);
/* dst = final(recv op src) */
weftResult_t weftPrimsRecvReduceCopy(struct weftPrims *p, const void *src, void *dst,
                                     size_t count);
/* dst = recv; send = recv */
weftResult_t weftPrimsRecvCopySend(struct weftPrims *p, void *dst, size_t count);

#endif
