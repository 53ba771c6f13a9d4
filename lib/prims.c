#include "prims.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "copy.h"
#include "errors.h"
#include "reduce.h"

void weftPrimsInitMulti(struct weftPrims *p, struct weftComm *comm, struct weftConn *const *sends,
                        int nsend, struct weftConn *const *recvs, int nrecv, weftDataType_t type,
                        weftRedOp_t op, int divisor) {
  memset(p, 0, sizeof *p);
  p->comm = comm;
  p->type = type;
  p->op = op;
  p->divisor = divisor;
  p->typeSize = weftTypeSize(type);
  p->streamOut = comm->opStreamsOut;
  size_t slotBytes = SIZE_MAX;
  for (int i = 0; i < nsend; i++) {
    p->send[p->nsend++] = sends[i];
    if (sends[i]->slotBytes < slotBytes) slotBytes = sends[i]->slotBytes;
  }
  for (int i = 0; i < nrecv; i++) {
    p->recv[p->nrecv++] = recvs[i];
    if (recvs[i]->slotBytes < slotBytes) slotBytes = recvs[i]->slotBytes;
  }
  p->pieceCount = (slotBytes - WEFT_PRIMS_SIG_BYTES) / p->typeSize;
}

void weftPrimsInit(struct weftPrims *p, struct weftComm *comm, struct weftConn *send,
                   struct weftConn *recv, weftDataType_t type, weftRedOp_t op) {
  weftPrimsInitMulti(p, comm, &send, send != NULL, &recv, recv != NULL, type, op, comm->nranks);
}

static weftResult_t waitSendSlot(struct weftPrims *p, struct weftConn *c, void **slot) {
  struct weftWaiter w;
  weftWaitStart(&w, p->comm);
  w.conn = c;
  for (;;) {
    WEFTCHECK(c->ops->sendSlot(c, slot));
    if (*slot != NULL) break;
    WEFTCHECK(weftWaitPause(&w, "waiting for a free send slot of", c->peer));
  }
  weftWaitDone(&w);
  return weftSuccess;
}

/* ---- signatures ---- */

#define SIG_POISON UINT64_MAX
_Static_assert(WEFT_PRIMS_SIG_BYTES == 4 * sizeof(uint64_t), "trailer: signature, slot number");
/* What a poison slot carries before its trailer: the two ranks that disagreed and their
 * signatures. */
struct poison {
  uint64_t sigA[3], sigB[3];
  int32_t rankA, rankB;
};

static void describeSig(char *buf, size_t len, const uint64_t sig[3]) {
  char call[128];
  weftSigDescribe(sig[1], sig[2], call, sizeof call);
  snprintf(buf, len, "%s (its operation %llu)", call, (unsigned long long)sig[0]);
}

static void describeMismatch(char *buf, size_t len, struct weftComm *comm,
                             const struct poison *m, int via) {
  char a[224], b[224];
  describeSig(a, sizeof a, m->sigA);
  describeSig(b, sizeof b, m->sigB);
  char how[64] = "";
  if (via >= 0) snprintf(how, sizeof how, "; rank %d passed it on", via);
  snprintf(buf, len,
           "mismatched collectives at operation %llu: rank %d called %s, rank %d called %s "
           "(rank %d learnt it from the data it received%s)",
           (unsigned long long)comm->opSeq, m->rankA, a, m->rankB, b, comm->rank, how);
}

/* Best effort, never waits: a poison slot on every send link, so that the ranks downstream
 * fail with the same weftInvalidUsage instead of a closed link. */
static void sendPoison(struct weftPrims *p, const struct poison *m) {
  for (int i = 0; i < p->nsend; i++) {
    struct weftConn *c = p->send[i];
    void *slot = NULL;
    if (c->ops->sendSlot(c, &slot) != weftSuccess || slot == NULL) continue;
    uint64_t trailer[4] = {SIG_POISON, (uint64_t)p->comm->rank, 0, c->slotSeq++};
    memcpy(slot, m, sizeof *m);
    memcpy((char *)slot + sizeof *m, trailer, sizeof trailer);
    c->ops->sendPost(c, sizeof *m + sizeof trailer);
  }
}

/* The slot numbers of a link differ: the transport lost (or repeated) data. Checked before
 * the signature, whose difference would then only say where the stream ended up. */
static weftResult_t lostSlot(struct weftPrims *p, struct weftConn *c, uint64_t theirs) {
  return weftSetError(weftRemoteError,
                      "rank %d: the link from rank %d (%s) delivered its slot %llu where slot %llu "
                      "was due (operation %llu): data was lost or repeated on the way",
                      p->comm->rank, c->peer, c->ops->name, (unsigned long long)theirs,
                      (unsigned long long)c->slotSeq, (unsigned long long)p->comm->opSeq);
}

/* The received slot carries the link's next slot number and my signature, else fail (and
 * tell downstream of a mismatch). */
static weftResult_t checkSig(struct weftPrims *p, struct weftConn *c, const char *slot,
                             size_t bytes, size_t expectBytes) {
  uint64_t theirs[4] = {0, 0, 0, 0};
  const uint64_t *mine = p->comm->opSig;
  if (bytes >= WEFT_PRIMS_SIG_BYTES) {
    memcpy(theirs, slot + bytes - WEFT_PRIMS_SIG_BYTES, sizeof theirs);
    if (theirs[3] != c->slotSeq) return lostSlot(p, c, theirs[3]);
  }
  c->slotSeq++;
  if (bytes == expectBytes + WEFT_PRIMS_SIG_BYTES && theirs[0] == mine[0] && theirs[1] == mine[1] &&
      theirs[2] == mine[2])
    return weftSuccess;
  struct poison m;
  char msg[768];
  if (theirs[0] == SIG_POISON && bytes == sizeof m + WEFT_PRIMS_SIG_BYTES) {
    memcpy(&m, slot, sizeof m);
    describeMismatch(msg, sizeof msg, p->comm, &m, c->peer);
  } else {
    m = (struct poison){{mine[0], mine[1], mine[2]}, {theirs[0], theirs[1], theirs[2]},
                        p->comm->rank, c->peer};
    if (bytes < WEFT_PRIMS_SIG_BYTES) m.sigB[0] = m.sigB[1] = m.sigB[2] = 0;
    describeMismatch(msg, sizeof msg, p->comm, &m, -1);
  }
  sendPoison(p, &m); /* first: a failure on a closed link sets an error this one replaces */
  return weftSetError(weftInvalidUsage, "%s", msg);
}

static weftResult_t waitRecvSlot(struct weftPrims *p, struct weftConn *c, size_t expectBytes,
                                 const void **slot) {
  struct weftWaiter w;
  weftWaitStart(&w, p->comm);
  w.conn = c;
  size_t bytes = 0;
  for (;;) {
    WEFTCHECK(c->ops->recvSlot(c, slot, &bytes));
    if (*slot != NULL) break;
    WEFTCHECK(weftWaitPause(&w, "waiting for data from", c->peer));
  }
  weftWaitDone(&w);
  return checkSig(p, c, *slot, bytes, expectBytes);
}

/* Kinds of step; one loop below serves them all so piece splitting is written once. */
enum stepKind {
  STEP_SEND = WEFT_PRIMS_SEND,
  STEP_RECV = WEFT_PRIMS_RECV,
  STEP_RRS = WEFT_PRIMS_RECV_REDUCE_SEND,
  STEP_RRCS = WEFT_PRIMS_RECV_REDUCE_COPY_SEND,
  STEP_RRC = WEFT_PRIMS_RECV_REDUCE_COPY,
  STEP_RCS = WEFT_PRIMS_RECV_COPY_SEND
};

static int stepReceives(enum stepKind kind) { return kind != STEP_SEND; }
static int stepSends(enum stepKind kind) { return kind != STEP_RECV && kind != STEP_RRC; }

/* What the tap sees of a step: the same peers stepPiece() waits on and posts to. */
static void tapStep(const struct weftPrims *p, enum stepKind kind, size_t count, size_t pieces) {
  struct weftPrimsStep s = {(enum weftPrimsKind)kind, count * p->typeSize,
                            p->pieceCount * p->typeSize, pieces, 0, 0, {0}, {0}, {0}, {0}};
  if (stepReceives(kind))
    for (int i = 0; i < p->nrecv; i++) s.recvConn[s.nrecv] = p->recv[i], s.recvPeer[s.nrecv++] = p->recv[i]->peer;
  if (stepSends(kind))
    for (int i = 0; i < p->nsend; i++) s.sendConn[s.nsend] = p->send[i], s.sendPeer[s.nsend++] = p->send[i]->peer;
  p->comm->primsTap->step(p->comm->primsTap->ctx, &s);
}

/* out = src op in[0] op in[1] ...; the last reduction final when asked. */
static void reduceInputs(struct weftPrims *p, void *out, const char *src, const void *const *in,
                         size_t n, int final) {
  const void *acc = src;
  for (int i = 0; i < p->nrecv; i++) {
    if (final && i == p->nrecv - 1) weftReduceFinal(out, acc, in[i], n, p->type, p->op, p->divisor);
    else weftReduceApply(out, acc, in[i], n, p->type, p->op);
    acc = out;
  }
}

static weftResult_t stepPiece(struct weftPrims *p, enum stepKind kind, const char *src, char *dst,
                              size_t n) {
  size_t bytes = n * p->typeSize;
  const void *in[WEFT_PRIMS_MAX_PEERS];
  void *out[WEFT_PRIMS_MAX_PEERS];
  int nin = stepReceives(kind) ? p->nrecv : 0;
  int nout = stepSends(kind) ? p->nsend : 0;
  for (int i = 0; i < nin; i++) WEFTCHECK(waitRecvSlot(p, p->recv[i], bytes, &in[i]));
  for (int i = 0; i < nout; i++) WEFTCHECK(waitSendSlot(p, p->send[i], &out[i]));
  const char *first = NULL; /* what every send slot gets */
  switch (kind) {
    case STEP_SEND: first = src; break;
    case STEP_RECV:
      weftCopyOut(dst, in[0], bytes, p->streamOut);
      break;
    case STEP_RRS:
      reduceInputs(p, out[0], src, in, n, 0);
      first = out[0];
      break;
    case STEP_RRCS:
    case STEP_RRC:
      reduceInputs(p, dst, src, in, n, 1);
      first = dst;
      break;
    case STEP_RCS:
      if (dst != NULL) weftCopyOut(dst, in[0], bytes, p->streamOut);
      first = in[0];
      break;
  }
  for (int i = 0; i < nout; i++) {
    uint64_t trailer[4] = {p->comm->opSig[0], p->comm->opSig[1], p->comm->opSig[2],
                           p->send[i]->slotSeq++};
    if (out[i] != first && bytes > 0) memcpy(out[i], first, bytes);
    memcpy((char *)out[i] + bytes, trailer, sizeof trailer);
  }
  for (int i = 0; i < nout; i++)
    WEFTCHECK(p->send[i]->ops->sendPost(p->send[i], bytes + WEFT_PRIMS_SIG_BYTES));
  for (int i = 0; i < nin; i++) WEFTCHECK(p->recv[i]->ops->recvDone(p->recv[i]));
  return weftSuccess;
}

static weftResult_t step(struct weftPrims *p, enum stepKind kind, const void *src, void *dst,
                         size_t count) {
  if (p->comm->primsTap != NULL) {
    tapStep(p, kind, count, (count + p->pieceCount - 1) / p->pieceCount);
    if (p->comm->primsTap->recordOnly) return weftSuccess;
  }
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
static weftResult_t token(struct weftPrims *p, enum stepKind kind) {
  if (p->comm->primsTap != NULL) {
    tapStep(p, kind, 0, 1);
    if (p->comm->primsTap->recordOnly) return weftSuccess;
  }
  return stepPiece(p, kind, NULL, NULL, 0);
}
weftResult_t weftPrimsSendToken(struct weftPrims *p) { return token(p, STEP_SEND); }
weftResult_t weftPrimsRecvToken(struct weftPrims *p) { return token(p, STEP_RECV); }
