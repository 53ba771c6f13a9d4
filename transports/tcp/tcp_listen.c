/* TCP transport: the listener and the accepting side of the handshake, run by the progress
 * thread under s->lock. A fresh connection gets a greeting with a random nonce and has
 * TCP_HANDSHAKE_MS to answer with a hello whose MAC proves the secret and that names a
 * receiving connection of this rank waiting for that stream; anything else is dropped,
 * with its descriptor, and never touches a connection in use. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "deadline.h"
#include "tcp.h"

/* How long an accepted connection may take to prove the secret. */
#define TCP_HANDSHAKE_MS 2000
/* Unauthenticated connections held at once; beyond that the oldest goes, so a flood of
 * strangers cannot exhaust the descriptors real peers need. */
#define TCP_MAX_PENDING 256
/* Accepts per wakeup, so a flood cannot starve the data path. */
#define TCP_MAX_ACCEPTS 64
#define TCP_ACCEPT_PAUSE_MS 10

weftResult_t weftTcpListenLocked(struct tcpState *s) {
  if (s->listenFd >= 0) return weftSuccess;
  WEFTCHECK(weftSocketListen(&s->bindAddr, &s->listenFd, &s->listenAddr));
  /* Accepted sockets inherit these; set before any connection arrives, so the receive
   * window scale is negotiated for the large buffer. */
  weftTcpSetBuffers(s->listenFd, s->sockBufBytes);
  weftSockAddrName(&s->listenAddr, s->listenName);
  s->generation++;
  INFO(WEFT_TCP, "tcp: rank %d listening on %s", s->rank, s->listenName);
  return weftSuccess;
}

void weftTcpCloseListener(struct tcpState *s) {
  /* shutdown first: close() alone leaves the socket listening while the progress thread's
   * poll() still holds it, and the kernel would complete handshakes nobody accepts. */
  if (s->listenFd >= 0) shutdown(s->listenFd, SHUT_RDWR);
  weftSocketClose(&s->listenFd);
}

void weftTcpMaybeUnlistenLocked(struct tcpState *s) {
  if (s->listenFd < 0) return;
  for (const struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next)
    if (tc->dir == WEFT_DIR_RECV &&
        tc->attached < tc->shape.nsocks)
      return;
  weftTcpPendingClear(s, "every connection is established; the listener is closing");
  weftTcpCloseListener(s);
  s->generation++;
  INFO(WEFT_TCP, "tcp: rank %d closed its listener at %s", s->rank, s->listenName);
}

/* ---- Handshakes in progress ---- */

static void tcpPendingDrop(struct tcpState *s, size_t i, int level, const char *why) {
  WEFT_LOG(level, WEFT_TCP, "tcp: rank %d's listener at %s dropped the connection from %s: %s",
           s->rank, s->listenName, s->pending[i].name, why);
  close(s->pending[i].fd);
  s->pending[i] = s->pending[--s->npending];
}

/* Removes handshake i without closing its socket, which the caller now owns. */
static int tcpPendingTake(struct tcpState *s, size_t i) {
  int fd = s->pending[i].fd;
  s->pending[i] = s->pending[--s->npending];
  return fd;
}

void weftTcpPendingClear(struct tcpState *s, const char *why) {
  while (s->npending > 0) tcpPendingDrop(s, s->npending - 1, WEFT_LOG_INFO, why);
}

void weftTcpPendingExpire(struct tcpState *s, int64_t now) {
  for (size_t i = s->npending; i-- > 0;)
    if (now >= s->pending[i].deadlineMs)
      tcpPendingDrop(s, i, WEFT_LOG_INFO, "no complete hello in time");
}

int64_t weftTcpPendingEarliest(const struct tcpState *s, int64_t deadlineMs) {
  for (size_t i = 0; i < s->npending; i++)
    if (s->pending[i].deadlineMs < deadlineMs) deadlineMs = s->pending[i].deadlineMs;
  return deadlineMs;
}

static size_t tcpPendingOldest(const struct tcpState *s) {
  size_t oldest = 0;
  for (size_t i = 1; i < s->npending; i++)
    if (s->pending[i].deadlineMs < s->pending[oldest].deadlineMs) oldest = i;
  return oldest;
}

static int tcpPendingRoom(struct tcpState *s) {
  if (s->npending == TCP_MAX_PENDING)
    tcpPendingDrop(s, tcpPendingOldest(s), WEFT_LOG_WARN,
                   "too many connections that have not proven the secret; dropping the oldest");
  if (s->npending < s->pendingCap) return 0;
  size_t cap = s->pendingCap ? 2 * s->pendingCap : 8;
  struct tcpPending *p = realloc(s->pending, cap * sizeof *p);
  if (p == NULL) return -1;
  s->pending = p;
  s->pendingCap = cap;
  return 0;
}

/* Sends the greeting: a fresh socket always has room for its 20 bytes, so failing means the
 * peer is gone already. */
static int tcpGreet(int fd, uint8_t nonce[TCP_NONCE_BYTES]) {
  if (weftTcpRandom(nonce, TCP_NONCE_BYTES) != weftSuccess) return -1;
  uint8_t greeting[TCP_GREETING_BYTES];
  weftPutBe32(greeting, TCP_GREETING_MAGIC);
  memcpy(greeting + 4, nonce, TCP_NONCE_BYTES);
  size_t sent = 0;
  return weftSocketSendSome(fd, greeting, sizeof greeting, &sent) == 0 && sent == sizeof greeting
             ? 0
             : -1;
}

/* Greets a fresh connection and starts its handshake clock. */
static void tcpPendingAdd(struct tcpState *s, int fd, const union weftSockAddr *from) {
  struct tcpPending p = {
      .fd = fd, .pollIdx = -1, .deadlineMs = weftNowMs() + TCP_HANDSHAKE_MS, .from = *from};
  weftSockAddrName(from, p.name);
  if (tcpGreet(fd, p.nonce) != 0 || tcpPendingRoom(s) != 0) {
    INFO(WEFT_TCP, "tcp: rank %d could not greet %s; closed", s->rank, p.name);
    close(fd);
    return;
  }
  s->pending[s->npending++] = p;
}

void weftTcpAccept(struct tcpState *s) {
  for (int n = 0; n < TCP_MAX_ACCEPTS; n++) {
    int fd;
    union weftSockAddr from;
    int rc = weftSocketAccept(s->listenFd, &fd, &from);
    if (rc == EAGAIN) return;
    if (rc == ECONNABORTED || rc == EPROTO) continue; /* the client left before the accept */
    if (rc != 0) {
      WARN("tcp: rank %d's listener at %s cannot accept: %s", s->rank, s->listenName, strerror(rc));
      /* Out of descriptors: make room at a stranger's expense, and never spin hot. */
      if (s->npending > 0)
        tcpPendingDrop(s, tcpPendingOldest(s), WEFT_LOG_WARN, "freeing a descriptor");
      s->acceptPauseUntilMs = weftNowMs() + TCP_ACCEPT_PAUSE_MS;
      return;
    }
    tcpPendingAdd(s, fd, &from);
  }
}

/* ---- Attaching an authenticated stream to its connection ---- */

static struct tcpConn *tcpFindRecv(struct tcpState *s, uint64_t connId) {
  for (struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next)
    if (tc->dir == WEFT_DIR_RECV && tc->connId == connId && !tc->closing) return tc;
  return NULL;
}

/* NULL when hello h may attach to tc, else why not (into why). */
static const char *tcpRefusal(struct tcpState *s, const struct tcpConn *tc,
                              const struct tcpHello *h, char *why, size_t len) {
  if (tc == NULL)
    snprintf(why, len, "rank %u names connection %llu, which rank %d does not wait for",
             h->fromRank, (unsigned long long)h->connId, s->rank);
  else if (h->fromRank != (uint32_t)tc->peer || h->toRank != (uint32_t)s->rank)
    snprintf(why, len, "hello from rank %u to rank %u on a connection from rank %d to rank %d",
             h->fromRank, h->toRank, tc->peer, s->rank);
  else if (h->stream >= tc->shape.nsocks || tc->streams[h->stream].fd >= 0)
    snprintf(why, len, "stream %u of rank %u is out of range or already connected", h->stream,
             h->fromRank);
  else if (!weftTcpSameShape(&h->shape, &tc->shape))
    snprintf(why, len, "rank %u has other WEFT_TCP_* slot settings", h->fromRank);
  else
    return NULL;
  return why;
}

static void tcpAttach(struct tcpState *s, struct tcpConn *tc, const struct tcpHello *h, int fd,
                      const struct tcpPending *p) {
  struct tcpStream *st = &tc->streams[h->stream];
  st->fd = fd;
  st->ready = 1;
  if (tc->attached == 0) {
    tc->peerAddr = p->from;
    memcpy(tc->peerName, p->name, sizeof tc->peerName);
  }
  s->generation++;
  uint32_t n = ++tc->attached;
  if (n == tc->shape.nsocks)
    INFO(WEFT_TCP, "tcp: rank %d <- rank %d (%s) connected, %u streams", s->rank, tc->peer,
         tc->peerName, n);
}

void weftTcpPendingEvent(struct tcpState *s, size_t i) {
  struct tcpPending *p = &s->pending[i];
  int rc = weftSocketRecvSome(p->fd, p->hello, TCP_HELLO_BYTES, &p->helloLen);
  if (rc != 0) {
    char text[128];
    tcpPendingDrop(s, i, WEFT_LOG_INFO,
                   rc == WEFT_SOCK_CLOSED ? "closed before completing its hello"
                                          : weftSockStatusText(rc, text, sizeof text));
    return;
  }
  if (p->helloLen >= 4 && weftGetBe32(p->hello) != TCP_HELLO_MAGIC) {
    tcpPendingDrop(s, i, WEFT_LOG_WARN, "sent bytes that are not a weft tcp hello");
    return;
  }
  if (p->helloLen < TCP_HELLO_BYTES) return;
  struct tcpHello h;
  char why[200];
  const char *refusal = weftTcpOpenHello(p->hello, s->secret, p->nonce, &h);
  struct tcpConn *tc = refusal == NULL ? tcpFindRecv(s, h.connId) : NULL;
  if (refusal == NULL) refusal = tcpRefusal(s, tc, &h, why, sizeof why);
  if (refusal != NULL) {
    tcpPendingDrop(s, i, WEFT_LOG_WARN, refusal);
    return;
  }
  uint8_t ack[TCP_ACK_BYTES];
  weftTcpAckMac(ack, s->secret, h.clientNonce, p->nonce, h.connId, h.stream);
  size_t sent = 0;
  /* 16 bytes after the 20-byte greeting always fit a fresh socket's buffer: this never waits. */
  rc = weftSocketSendSome(p->fd, ack, sizeof ack, &sent);
  if (rc != 0 || sent != sizeof ack) {
    tcpPendingDrop(s, i, WEFT_LOG_INFO, "left before its acknowledgement");
    return;
  }
  struct tcpPending copy = *p;
  tcpAttach(s, tc, &h, tcpPendingTake(s, i), &copy);
}
