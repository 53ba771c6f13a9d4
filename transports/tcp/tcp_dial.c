/* TCP transport: the dialing side of the handshake, run by a sender's connect() calls on the
 * calling thread, one non-blocking step per call: connect, read the listener's greeting
 * (magic, server nonce), send the hello (its MAC over the server nonce proves the secret),
 * read the acknowledgement (a MAC over both nonces proves the listener's). */
#include <string.h>

#include "bootstrap.h"
#include "check.h"
#include "tcp.h"

/* A listener closes a handshake it refuses, and a rank's listener goes when its process does:
 * both read as a closed connection here. */
static weftResult_t tcpDialError(struct tcpConn *tc, uint32_t i, int rc, const char *doing) {
  char text[128];
  return weftSetError(
      weftRemoteError, "tcp: rank %d could not connect stream %u to rank %d (host %s, %s) %s: %s%s",
      tc->s->rank, i, tc->peer, tc->peerHost, tc->peerName, doing,
      weftSockStatusText(rc, text, sizeof text),
      rc == WEFT_SOCK_CLOSED ? " (rank exited or failed, or refused the handshake: another "
                               "secret or other WEFT_TCP_* settings)"
                             : "");
}

static weftResult_t tcpDialStartOne(struct tcpConn *tc, uint32_t i) {
  struct tcpStream *st = &tc->streams[i];
  int rc = weftSocketConnectStart(&tc->peerAddr, &st->fd);
  if (rc != 0) return tcpDialError(tc, i, rc, "starting the connection");
  weftTcpSetBuffers(st->fd, tc->s->sockBufBytes);
  st->dial = TCP_DIAL_CONNECTING;
  return weftSuccess;
}

static weftResult_t tcpDialConnecting(struct tcpConn *tc, uint32_t i) {
  struct tcpStream *st = &tc->streams[i];
  struct pollfd pfd = {.fd = st->fd, .events = POLLOUT};
  if (poll(&pfd, 1, 0) <= 0) return weftSuccess;
  int rc = weftSocketConnectResult(st->fd);
  if (rc != 0) return tcpDialError(tc, i, rc, "connecting");
  st->dial = TCP_DIAL_GREETING;
  st->dialDone = 0;
  return weftSuccess;
}

static weftResult_t tcpDialGreeting(struct tcpConn *tc, uint32_t i) {
  struct tcpStream *st = &tc->streams[i];
  int rc = weftSocketRecvSome(st->fd, st->dialBuf, TCP_GREETING_BYTES, &st->dialDone);
  if (rc != 0) return tcpDialError(tc, i, rc, "awaiting its greeting");
  if (st->dialDone < TCP_GREETING_BYTES) return weftSuccess;
  if (weftGetBe32(st->dialBuf) != TCP_GREETING_MAGIC)
    return weftSetError(weftRemoteError,
                        "tcp: %s, where rank %d (host %s) should listen, is not a weft tcp "
                        "listener",
                        tc->peerName, tc->peer, tc->peerHost);
  memcpy(st->serverNonce, st->dialBuf + 4, TCP_NONCE_BYTES);
  WEFTCHECK(weftTcpRandom(st->clientNonce, TCP_NONCE_BYTES));
  struct tcpHello h = {.connId = tc->connId,
                       .fromRank = (uint32_t)tc->s->rank,
                       .toRank = (uint32_t)tc->peer,
                       .stream = i,
                       .shape = tc->shape};
  memcpy(h.clientNonce, st->clientNonce, TCP_NONCE_BYTES);
  weftTcpBuildHello(st->dialBuf, tc->s->secret, st->serverNonce, &h);
  st->dial = TCP_DIAL_HELLO;
  st->dialDone = 0;
  return weftSuccess;
}

static weftResult_t tcpDialHello(struct tcpConn *tc, uint32_t i) {
  struct tcpStream *st = &tc->streams[i];
  int rc = weftSocketSendSome(st->fd, st->dialBuf, TCP_HELLO_BYTES, &st->dialDone);
  if (rc != 0) return tcpDialError(tc, i, rc, "sending its hello");
  if (st->dialDone < TCP_HELLO_BYTES) return weftSuccess;
  st->dial = TCP_DIAL_ACK;
  st->dialDone = 0;
  return weftSuccess;
}

static weftResult_t tcpDialAck(struct tcpConn *tc, uint32_t i) {
  struct tcpStream *st = &tc->streams[i];
  int rc = weftSocketRecvSome(st->fd, st->dialBuf, TCP_ACK_BYTES, &st->dialDone);
  if (rc != 0) return tcpDialError(tc, i, rc, "awaiting its acknowledgement");
  if (st->dialDone < TCP_ACK_BYTES) return weftSuccess;
  uint8_t want[TCP_ACK_BYTES];
  weftTcpAckMac(want, tc->s->secret, st->clientNonce, st->serverNonce, tc->connId, i);
  if (!weftBootstrapMacEqual(st->dialBuf, want))
    return weftSetError(weftRemoteError,
                        "tcp: rank %d (host %s, %s) sent a wrong acknowledgement MAC: it does "
                        "not hold this communicator's secret",
                        tc->peer, tc->peerHost, tc->peerName);
  st->dial = TCP_DIAL_DONE;
  st->ready = 1;
  return weftSuccess;
}

static weftResult_t tcpDialStep(struct tcpConn *tc, uint32_t i) {
  switch (tc->streams[i].dial) {
    case TCP_DIAL_CONNECTING: return tcpDialConnecting(tc, i);
    case TCP_DIAL_GREETING: return tcpDialGreeting(tc, i);
    case TCP_DIAL_HELLO: return tcpDialHello(tc, i);
    case TCP_DIAL_ACK: return tcpDialAck(tc, i);
    case TCP_DIAL_DONE: return weftSuccess;
  }
  return weftSuccess;
}

weftResult_t weftTcpDialStart(struct tcpConn *tc) {
  for (uint32_t i = 0; i < tc->shape.nsocks; i++) WEFTCHECK(tcpDialStartOne(tc, i));
  return weftSuccess;
}

weftResult_t weftTcpDialProgress(struct tcpConn *tc, int *done) {
  int all = 1;
  for (uint32_t i = 0; i < tc->shape.nsocks; i++) {
    WEFTCHECK(tcpDialStep(tc, i));
    all = all && tc->streams[i].dial == TCP_DIAL_DONE;
  }
  *done = all;
  return weftSuccess;
}
