/* Bootstrap: the ring of TCP connections between the ranks. Forming it: each rank dials
 * rank+1 and proves the secret with a hello while its listener waits for rank-1's hello and
 * acknowledges it (both MACs: boot_auth.c; the dialing is boot_dial.c's, the listener's
 * serving boot_serve.c's); a rank-1 whose listener refuses connections is dead, and said so
 * at once. Then what travels over it: AllGather, Barrier, and the notes
 * ring neighbours exchange once init is over. */
#include "boot_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytes.h"
#include "check.h"
#include "log.h"

/* While a rank waits for rank-1 to connect, how often it checks that rank-1 is alive. */
#define RING_PROBE_INTERVAL_MS 250

/* ---- A rank: form the ring ---- */

/* Forming the ring: this rank dials rank+1 while the listener waits for rank-1 (and serves
 * whatever else comes to it: boot_serve.c). */
struct ringSetup {
  struct weftBootstrap *b;     /* the bootstrap whose ring forms */
  struct weftBootstrap *owner; /* whose listener it forms through: b at init, a split's parent */
  char listenName[WEFT_SOCK_NAME_MAX];
  struct bootDial dial; /* to rank+1; its connection becomes b->nextFd */
  struct pollList polls; /* [dial][the owner's listener and what it holds] */
  struct servePolls serve;
  int64_t startMs, deadlineMs;
  int64_t nextProbeMs; /* of rank-1's listener, while it has not connected */
};

static weftResult_t dialFailed(struct ringSetup *rs, int rc) {
  char name[WEFT_SOCK_NAME_MAX], text[128];
  const struct weftBootstrap *b = rs->b;
  if (rc == WEFT_SOCK_CLOSED && rs->dial.state == DIAL_AWAIT_ACK)
    return weftSetError(
        weftRemoteError,
        "bootstrap: rank %d (%s) refused rank %d's ring hello (closed the connection): "
        "different secret or nranks?",
        nextRank(b), peerName(b, nextRank(b), name), b->rank);
  return weftSetError(weftRemoteError, "bootstrap: rank %d failed %s rank %d (%s): %s", b->rank,
                      weftBootDialWaitingFor(rs->dial.state), nextRank(b),
                      peerName(b, nextRank(b), name), weftSockStatusText(rc, text, sizeof text));
}

/* Advances the handshake with rank+1 as far as the socket allows. */
static weftResult_t dialProgress(struct ringSetup *rs) {
  struct weftBootstrap *b = rs->b;
  struct bootDial *d = &rs->dial;
  int rc = weftBootDialProgress(d);
  if (rc == 0 && d->state == DIAL_COMPOSE) {
    WEFTCHECK(weftBootDialHello(d, b->secret, HELLO_RING, b->rank, b->nranks,
                                &rs->owner->listenAddr));
    rc = weftBootDialProgress(d);
  }
  if (rc != 0) return dialFailed(rs, rc);
  if (d->state != DIAL_ACKED) return weftSuccess;
  char name[WEFT_SOCK_NAME_MAX];
  if (weftBootstrapCheckAck(b->secret, d->clientNonce, d->serverNonce, d->in) != 0)
    return weftSetError(
        weftRemoteError,
        "bootstrap: the listener at %s (rank %d in the table) sent a wrong acknowledgement MAC",
        peerName(b, nextRank(b), name), nextRank(b));
  b->nextFd = d->fd;
  d->fd = -1;
  return weftSuccess;
}

/* A complete hello that is no message for the owner (boot_serve.c): rank-1's ring hello is
 * acknowledged and becomes b->prevFd; anything else is dropped. */
static void ringOnHello(void *ctx, struct pendingSet *set, size_t i) {
  struct ringSetup *rs = ctx;
  struct weftBootstrap *b = rs->b;
  struct pendingPeer *peer = &set->peers[i];
  struct weftBootstrapHello h;
  char why[160];
  const char *refusal = weftBootstrapParseHello(b->secret, peer->nonce, peer->hello, &h);
  if (refusal == NULL &&
      weftBootstrapCheckHello(&h, HELLO_RING, b->nranks, prevRank(b), why, sizeof why) != 0)
    refusal = why;
  if (refusal == NULL && b->prevFd >= 0) refusal = "a second ring hello of rank-1";
  if (refusal != NULL) {
    weftBootPendingDrop(set, i, WEFT_LOG_WARN, refusal);
    return;
  }
  uint8_t ack[ACK_BYTES];
  weftBootAckBuild(ack, b->secret, h.clientNonce, peer->nonce);
  char name[WEFT_SOCK_NAME_MAX];
  snprintf(name, sizeof name, "%s", peer->name);
  int fd = weftBootPendingTake(set, i);
  /* 16 bytes after the 16-byte nonce always fit a fresh socket's buffer: this never waits. */
  int rc = weftSocketSendAll(fd, ack, sizeof ack, rs->deadlineMs);
  if (rc != 0) {
    char text[128];
    WARN("bootstrap: rank %d could not acknowledge rank %d (%s): %s", b->rank, prevRank(b), name,
         weftSockStatusText(rc, text, sizeof text));
    close(fd);
    return;
  }
  b->prevFd = fd;
}

static weftResult_t ringTimeout(const struct ringSetup *rs) {
  const struct weftBootstrap *b = rs->b;
  char name[WEFT_SOCK_NAME_MAX];
  long long elapsed = (long long)(weftNowMs() - rs->startMs);
  const char *doing = weftBootDialWaitingFor(rs->dial.state);
  if (b->nextFd < 0 && b->prevFd < 0)
    return weftSetError(weftTimeout,
                        "bootstrap: rank %d timed out after %lld ms %s rank %d (%s); rank %d had "
                        "not connected to it either",
                        b->rank, elapsed, doing, nextRank(b), peerName(b, nextRank(b), name),
                        prevRank(b));
  if (b->nextFd < 0)
    return weftSetError(weftTimeout, "bootstrap: rank %d timed out after %lld ms %s rank %d (%s)",
                        b->rank, elapsed, doing, nextRank(b), peerName(b, nextRank(b), name));
  return weftSetError(weftTimeout,
                      "bootstrap: rank %d timed out after %lld ms waiting for rank %d (%s) to "
                      "connect to its listener at %s",
                      b->rank, elapsed, prevRank(b), peerName(b, prevRank(b), name),
                      rs->listenName);
}

static weftResult_t ringPoll(struct ringSetup *rs) {
  struct pollList *polls = &rs->polls;
  polls->count = 0;
  int dialing = rs->b->nextFd < 0;
  if (weftBootPollAdd(polls, dialing ? rs->dial.fd : -1, weftBootDialEvents(&rs->dial)) != 0 ||
      weftBootServePolls(rs->owner, polls, &rs->serve) != 0)
    return weftSetError(weftSystemError, "bootstrap: out of memory forming the ring");
  int64_t wake = weftBootServeEarliest(rs->owner, rs->deadlineMs);
  if (rs->b->prevFd < 0 && rs->nextProbeMs < wake) wake = rs->nextProbeMs;
  if (weftPollUntil(polls->fds, polls->count, wake) < 0)
    return weftSetSysError(errno, "bootstrap: poll while rank %d formed the ring", rs->b->rank);
  return weftSuccess;
}

/* rank-1 has not connected yet: if its listener refuses connections, it died (every rank
 * opens its listener before anyone learns its address), and waiting for the timeout would
 * only delay the error; the probe's connection is one the listener drops as silent. */
static weftResult_t ringCheckPrev(struct ringSetup *rs, int64_t now) {
  if (rs->b->prevFd >= 0 || now < rs->nextProbeMs) return weftSuccess;
  rs->nextProbeMs = now + RING_PROBE_INTERVAL_MS;
  const struct weftBootstrap *b = rs->b;
  if (weftBootstrapProbe(b, prevRank(b), RING_PROBE_TIMEOUT_MS)) return weftSuccess;
  char name[WEFT_SOCK_NAME_MAX];
  return weftSetError(weftRemoteError,
                      "bootstrap: rank %d (%s) is gone: its listener refuses connections, so it "
                      "will never connect to rank %d (it died during init)",
                      prevRank(b), peerName(b, prevRank(b), name), b->rank);
}

static weftResult_t ringLoop(struct ringSetup *rs) {
  struct weftBootstrap *b = rs->b;
  int rc = weftBootDialStart(&rs->dial, &b->peers[nextRank(b)]);
  if (rc != 0) return dialFailed(rs, rc);
  /* Ring hellos that came while this rank was exchanging messages (boot_p2p.c): complete,
   * so no poll will report them. */
  struct pendingSet *held = &rs->owner->serve.ringHellos;
  for (size_t i = held->count; i-- > 0;) ringOnHello(rs, held, i);
  rs->nextProbeMs = weftNowMs() + RING_PROBE_INTERVAL_MS;
  while (b->nextFd < 0 || b->prevFd < 0) {
    int64_t now = weftNowMs();
    if (now >= rs->deadlineMs) return ringTimeout(rs);
    WEFTCHECK(ringCheckPrev(rs, now));
    WEFTCHECK(ringPoll(rs));
    if (rs->polls.fds[0].revents != 0) WEFTCHECK(dialProgress(rs));
    weftBootServeHandle(rs->owner, &rs->polls, &rs->serve, ringOnHello, rs);
    /* After handling: what arrived while nobody served the listener is read before its
     * deadline is judged. */
    weftBootServeExpire(rs->owner, weftNowMs());
  }
  return weftSuccess;
}

weftResult_t weftBootFormRing(struct weftBootstrap *b, struct weftBootstrap *owner, int64_t startMs,
                              int64_t deadlineMs) {
  struct ringSetup rs = {
      .b = b, .owner = owner, .dial = {.fd = -1}, .startMs = startMs, .deadlineMs = deadlineMs};
  weftSockAddrName(&owner->listenAddr, rs.listenName);
  weftResult_t res = ringLoop(&rs);
  weftSocketClose(&rs.dial.fd); /* after a failure; on success it is b->nextFd */
  weftBootServeSweep(owner);
  free(rs.polls.fds);
  return res;
}

/* ---- Ring allgather ---- */

/* Progress of one allgather: the bytes this rank sends to rank+1 and receives from rank-1,
 * each a stream of nranks-1 blocks. Step s sends block rank-s and receives block rank-s-1. */
struct ringTransfer {
  struct weftBootstrap *b;
  uint8_t *data;
  size_t blockBytes, total, sent, received;
  int64_t startMs;
};

static size_t ringBlock(const struct weftBootstrap *b, size_t step, int behind) {
  size_t n = (size_t)b->nranks;
  return ((size_t)b->rank + 2 * n - step - (size_t)behind) % n;
}

/* Bytes that may be sent now: step s forwards the block received in step s-1. */
static size_t ringSendable(const struct ringTransfer *t) {
  size_t limit = t->blockBytes + t->received;
  return limit < t->total ? limit : t->total;
}

static weftResult_t ringFailed(const struct ringTransfer *t, int rc, int peer, const char *doing) {
  const struct weftBootstrap *b = t->b;
  char name[WEFT_SOCK_NAME_MAX];
  if (rc == WEFT_SOCK_CLOSED)
    return weftSetError(weftRemoteError,
                        "bootstrap: rank %d (%s) closed its ring connection with rank %d during "
                        "allgather (%zu of %zu bytes received, %zu of %zu sent)",
                        peer, peerName(b, peer, name), b->rank, t->received, t->total, t->sent,
                        t->total);
  return weftSetSysError(rc, "bootstrap: rank %d %s rank %d (%s) during allgather", b->rank, doing,
                         peer, peerName(b, peer, name));
}

static weftResult_t ringSend(struct ringTransfer *t) {
  size_t step = t->sent / t->blockBytes, offset = t->sent % t->blockBytes;
  size_t len = t->blockBytes - offset;
  if (len > ringSendable(t) - t->sent) len = ringSendable(t) - t->sent;
  uint8_t *from = t->data + ringBlock(t->b, step, 0) * t->blockBytes + offset;
  size_t done = 0;
  int rc = weftSocketSendSome(t->b->nextFd, from, len, &done);
  t->sent += done;
  return rc == 0 ? weftSuccess : ringFailed(t, rc, nextRank(t->b), "sending to");
}

static weftResult_t ringReceive(struct ringTransfer *t) {
  size_t step = t->received / t->blockBytes, offset = t->received % t->blockBytes;
  uint8_t *into = t->data + ringBlock(t->b, step, 1) * t->blockBytes + offset;
  size_t done = 0;
  int rc = weftSocketRecvSome(t->b->prevFd, into, t->blockBytes - offset, &done);
  t->received += done;
  return rc == 0 ? weftSuccess : ringFailed(t, rc, prevRank(t->b), "receiving from");
}

/* Nothing ever arrives on the connection to rank+1: readable means rank+1 left. */
static weftResult_t ringCheckNext(struct ringTransfer *t) {
  uint8_t byte;
  size_t got = 0;
  int rc = weftSocketRecvSome(t->b->nextFd, &byte, 1, &got);
  if (rc == 0 && got == 0) return weftSuccess;
  char name[WEFT_SOCK_NAME_MAX];
  if (rc == 0)
    return weftSetError(
        weftRemoteError,
        "bootstrap: rank %d (%s) sent unexpected bytes on the ring during allgather",
        nextRank(t->b), peerName(t->b, nextRank(t->b), name));
  return ringFailed(t, rc, nextRank(t->b), "sending to");
}

static weftResult_t ringTimedOut(const struct ringTransfer *t) {
  const struct weftBootstrap *b = t->b;
  char prevName[WEFT_SOCK_NAME_MAX], nextName[WEFT_SOCK_NAME_MAX];
  return weftSetError(
      weftTimeout,
      "bootstrap: allgather on rank %d timed out after %lld ms: received %zu of %zu "
      "bytes from rank %d (%s), sent %zu of %zu bytes to rank %d (%s)",
      b->rank, (long long)(weftNowMs() - t->startMs), t->received, t->total, prevRank(b),
      peerName(b, prevRank(b), prevName), t->sent, t->total, nextRank(b),
      peerName(b, nextRank(b), nextName));
}

weftResult_t weftBootstrapAllGather(struct weftBootstrap *b, void *data, size_t bytesPerRank,
                                    int64_t deadlineMs) {
  if (b == NULL || (data == NULL && bytesPerRank > 0))
    return weftSetError(weftInvalidArgument, "bootstrap: allgather with a NULL %s",
                        b ? "buffer" : "bootstrap");
  if (b->nranks == 1 || bytesPerRank == 0) return weftSuccess;
  if (bytesPerRank > SIZE_MAX / (size_t)b->nranks)
    return weftSetError(weftInvalidArgument, "bootstrap: allgather of %zu bytes per rank overflows",
                        bytesPerRank);
  struct ringTransfer t = {.b = b,
                           .data = data,
                           .blockBytes = bytesPerRank,
                           .total = (size_t)(b->nranks - 1) * bytesPerRank,
                           .startMs = weftNowMs()};
  while (t.sent < t.total || t.received < t.total) {
    /* Both directions in one poll: a big block can fill the socket buffers only if the
     * receiving side drains them at the same time. */
    int sending = t.sent < t.total;
    struct pollfd fds[2] = {
        {.fd = sending ? b->nextFd : -1,
         .events = (short)(POLLIN | (t.sent < ringSendable(&t) ? POLLOUT : 0))},
        {.fd = t.received < t.total ? b->prevFd : -1, .events = POLLIN},
    };
    int ready = weftPollUntil(fds, 2, deadlineMs);
    if (ready == 0) return ringTimedOut(&t);
    if (ready < 0)
      return weftSetSysError(errno, "bootstrap: poll during allgather on rank %d", b->rank);
    if (fds[1].revents != 0) WEFTCHECK(ringReceive(&t));
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) WEFTCHECK(ringCheckNext(&t));
    if (fds[0].revents & POLLOUT) WEFTCHECK(ringSend(&t));
  }
  return weftSuccess;
}

weftResult_t weftBootstrapBarrier(struct weftBootstrap *b, int64_t deadlineMs) {
  if (b == NULL)
    return weftSetError(weftInvalidArgument, "bootstrap: barrier with a NULL bootstrap");
  uint8_t *bytes = calloc((size_t)b->nranks, 1);
  if (bytes == NULL) return weftSetError(weftSystemError, "bootstrap: out of memory for a barrier");
  weftResult_t res = weftBootstrapAllGather(b, bytes, 1, deadlineMs);
  free(bytes);
  return res;
}

/* ---- Notes: fixed-size records between ring neighbours after init ---- */

static int noteFd(const struct weftBootstrap *b, int dir) {
  return dir == WEFT_NOTE_NEXT ? b->nextFd : b->prevFd;
}

/* Pushes what is left of the note being sent; 1 when none is left, 0 when it would block. */
static int noteFlush(struct weftBootstrap *b, int dir) {
  struct weftBootstrapNotes *q = &b->notes[dir];
  if (q->outSent == q->outLen) return 1;
  size_t done = q->outSent;
  int rc = weftSocketSendSome(noteFd(b, dir), q->out, q->outLen, &done);
  q->outSent = done;
  if (rc != 0) return -1;
  return q->outSent == q->outLen;
}

int weftBootstrapNoteSend(struct weftBootstrap *b, int dir, const uint8_t note[WEFT_BOOT_NOTE_BYTES]) {
  if (b == NULL || noteFd(b, dir) < 0) return -1;
  int rc = noteFlush(b, dir);
  if (rc != 1) return rc;
  struct weftBootstrapNotes *q = &b->notes[dir];
  memcpy(q->out, note, WEFT_BOOT_NOTE_BYTES);
  q->outLen = WEFT_BOOT_NOTE_BYTES;
  q->outSent = 0;
  return noteFlush(b, dir) < 0 ? -1 : 1;
}

int weftBootstrapNoteRecv(struct weftBootstrap *b, int dir, uint8_t note[WEFT_BOOT_NOTE_BYTES]) {
  if (b == NULL || noteFd(b, dir) < 0) return -1;
  (void)noteFlush(b, dir);
  struct weftBootstrapNotes *q = &b->notes[dir];
  size_t done = q->inLen;
  int rc = weftSocketRecvSome(noteFd(b, dir), q->in, WEFT_BOOT_NOTE_BYTES, &done);
  q->inLen = done;
  if (rc != 0) return -1;
  if (q->inLen < WEFT_BOOT_NOTE_BYTES) return 0;
  memcpy(note, q->in, WEFT_BOOT_NOTE_BYTES);
  q->inLen = 0;
  return 1;
}

int weftBootstrapNoteWait(struct weftBootstrap *b, int64_t deadlineMs) {
  if (b == NULL || (b->prevFd < 0 && b->nextFd < 0)) return -1;
  struct pollfd pfd[2] = {{.fd = b->nextFd, .events = POLLIN}, {.fd = b->prevFd, .events = POLLIN}};
  return weftPollUntil(pfd, 2, deadlineMs) > 0;
}
