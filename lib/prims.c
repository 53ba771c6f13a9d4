#include "prims.h"

#include <sched.h>
#include <string.h>
#include <time.h>

#include "bootstrap.h"
#include "check.h"
#include "reduce.h"

static void cpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void sleepMicros(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

/* Sleep grows from 10 us to 1 ms: a peer that took this long is busy elsewhere, and waking
 * costs 40-60 us anyway on an oversubscribed host. */
static long sleepStepUs(uint32_t sleeps) {
  long us = 10L << (sleeps < 7 ? sleeps : 7);
  return us < 1000 ? us : 1000;
}

weftResult_t weftWaitPause(struct weftWaiter *w, const char *what, int peer) {
  struct weftComm *comm = w->comm;
  uint32_t i = w->iter++;
  uint32_t spin = (uint32_t)comm->spinIters;
  if (i < spin) {
    cpuRelax();
    return weftSuccess;
  }
  if (w->deadlineMs == 0) {
    w->deadlineMs = weftNowMs() + comm->timeoutMs;
    if (spin > 0) comm->spinIters = (int)(spin / 2 > 16 ? spin / 2 : 16);
  }
  uint32_t yields = (uint32_t)comm->yieldIters;
  if (i < spin + yields) {
    sched_yield();
    if (((i - spin) & 63) != 63) return weftSuccess;
  } else {
    sleepMicros(sleepStepUs(i - spin - yields));
  }
  if (weftNowMs() > w->deadlineMs)
    return weftSetError(weftTimeout,
                        "rank %d: timed out after %lld ms %s rank %d (operation %llu); set "
                        "WEFT_TIMEOUT_MS to wait longer",
                        comm->rank, (long long)comm->timeoutMs, what, peer,
                        (unsigned long long)comm->opSeq);
  return weftSuccess;
}

void weftPrimsInit(struct weftPrims *p, struct weftComm *comm, struct weftConn *send,
                   struct weftConn *recv, weftDataType_t type, weftRedOp_t op) {
  p->comm = comm;
  p->send = send;
  p->recv = recv;
  p->type = type;
  p->op = op;
  p->typeSize = weftTypeSize(type);
  size_t slotBytes = send != NULL ? send->slotBytes : recv->slotBytes;
  if (send != NULL && recv != NULL && recv->slotBytes < slotBytes) slotBytes = recv->slotBytes;
  p->pieceCount = slotBytes / p->typeSize;
}

static weftResult_t waitSendSlot(struct weftPrims *p, void **slot) {
  struct weftConn *c = p->send;
  struct weftWaiter w;
  weftWaitStart(&w, p->comm);
  for (;;) {
    WEFTCHECK(c->ops->sendSlot(c, slot));
    if (*slot != NULL) break;
    WEFTCHECK(weftWaitPause(&w, "waiting for a free send slot of", c->peer));
  }
  weftWaitDone(&w);
  return weftSuccess;
}

static weftResult_t waitRecvSlot(struct weftPrims *p, size_t expectBytes, const void **slot) {
  struct weftConn *c = p->recv;
  struct weftWaiter w;
  weftWaitStart(&w, p->comm);
  size_t bytes = 0;
  for (;;) {
    WEFTCHECK(c->ops->recvSlot(c, slot, &bytes));
    if (*slot != NULL) break;
    WEFTCHECK(weftWaitPause(&w, "waiting for data from", c->peer));
  }
  weftWaitDone(&w);
  if (bytes != expectBytes)
    return weftSetError(weftInvalidUsage,
                        "rank %d: received %zu bytes from rank %d where %zu were expected: the "
                        "ranks called mismatched collectives (count or datatype differ)",
                        p->comm->rank, bytes, c->peer, expectBytes);
  return weftSuccess;
}

/* Kinds of step; one loop below serves them all so piece splitting is written once. */
enum stepKind { STEP_SEND, STEP_RECV, STEP_RRS, STEP_RRCS, STEP_RRC, STEP_RCS };

static weftResult_t stepPiece(struct weftPrims *p, enum stepKind kind, const char *src, char *dst,
                              size_t n) {
  size_t bytes = n * p->typeSize;
  int nranks = p->comm->nranks;
  const void *in = NULL;
  void *out = NULL;
  if (kind != STEP_SEND) WEFTCHECK(waitRecvSlot(p, bytes, &in));
  if (kind == STEP_SEND || kind == STEP_RRS || kind == STEP_RRCS || kind == STEP_RCS)
    WEFTCHECK(waitSendSlot(p, &out));
  switch (kind) {
    case STEP_SEND: memcpy(out, src, bytes); break;
    case STEP_RECV: memcpy(dst, in, bytes); break;
    case STEP_RRS: weftReduce(out, in, src, n, p->type, p->op); break;
    case STEP_RRCS:
      weftReduceFinal(dst, in, src, n, p->type, p->op, nranks);
      memcpy(out, dst, bytes);
      break;
    case STEP_RRC: weftReduceFinal(dst, in, src, n, p->type, p->op, nranks); break;
    case STEP_RCS:
      memcpy(out, in, bytes);
      if (dst != NULL) memcpy(dst, in, bytes);
      break;
  }
  if (out != NULL) WEFTCHECK(p->send->ops->sendPost(p->send, bytes));
  if (in != NULL) WEFTCHECK(p->recv->ops->recvDone(p->recv));
  return weftSuccess;
}

static weftResult_t step(struct weftPrims *p, enum stepKind kind, const void *src, void *dst,
                         size_t count) {
  const char *s = src;
  char *d = dst;
  for (size_t done = 0; done < count; done += p->pieceCount) {
    size_t n = count - done < p->pieceCount ? count - done : p->pieceCount;
    size_t off = done * p->typeSize;
    WEFTCHECK(stepPiece(p, kind, s ? s + off : NULL, d ? d + off : NULL, n));
  }
  return weftSuccess;
}

weftResult_t weftPrimsSend(struct weftPrims *p, const void *src, size_t count) {
  return step(p, STEP_SEND, src, NULL, count);
}
weftResult_t weftPrimsRecv(struct weftPrims *p, void *dst, size_t count) {
  return step(p, STEP_RECV, NULL, dst, count);
}
weftResult_t weftPrimsRecvReduceSend(struct weftPrims *p, const void *src, size_t count) {
  return step(p, STEP_RRS, src, NULL, count);
}
weftResult_t weftPrimsRecvReduceCopySend(struct weftPrims *p, const void *src, void *dst,
                                         size_t count) {
  return step(p, STEP_RRCS, src, dst, count);
}
weftResult_t weftPrimsRecvReduceCopy(struct weftPrims *p, const void *src, void *dst,
                                     size_t count) {
  return step(p, STEP_RRC, src, dst, count);
}
weftResult_t weftPrimsRecvCopySend(struct weftPrims *p, void *dst, size_t count) {
  return step(p, STEP_RCS, NULL, dst, count);
}
