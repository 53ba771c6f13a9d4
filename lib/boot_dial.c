/* Bootstrap: the dialing side of a handshake with a rank's listener, shared by the ring (a
 * hello, then the ack) and point-to-point messages (a hello and the message, then the
 * answer). It only moves bytes: what to send after the nonce and how to check the answer are
 * the caller's (boot_ring.c, boot_p2p.c), so is how a failure is told. Never blocks. */
#include "boot_internal.h"

#include <string.h>

#include "check.h"

int weftBootDialStart(struct bootDial *d, const union weftSockAddr *to) {
  d->state = DIAL_CONNECTING;
  d->done = 0;
  d->outLen = 0;
  return weftSocketConnectStart(to, &d->fd);
}

short weftBootDialEvents(const struct bootDial *d) {
  return d->state == DIAL_CONNECTING || d->state == DIAL_SEND ? POLLOUT : POLLIN;
}

int weftBootDialProgress(struct bootDial *d) {
  int rc;
  if (d->state == DIAL_CONNECTING) {
    if ((rc = weftSocketConnectResult(d->fd)) != 0) return rc;
    d->state = DIAL_AWAIT_NONCE;
    d->done = 0;
  }
  if (d->state == DIAL_AWAIT_NONCE) {
    if ((rc = weftSocketRecvSome(d->fd, d->in, NONCE_BYTES, &d->done)) != 0) return rc;
    if (d->done < NONCE_BYTES) return 0;
    memcpy(d->serverNonce, d->in, NONCE_BYTES);
    d->state = DIAL_COMPOSE;
    return 0;
  }
  if (d->state == DIAL_SEND) {
    if ((rc = weftSocketSendSome(d->fd, d->out, d->outLen, &d->done)) != 0) return rc;
    if (d->done < d->outLen) return 0;
    d->state = DIAL_AWAIT_ACK;
    d->done = 0;
  }
  if (d->state == DIAL_AWAIT_ACK) {
    if ((rc = weftSocketRecvSome(d->fd, d->in, ACK_BYTES, &d->done)) != 0) return rc;
    if (d->done == ACK_BYTES) d->state = DIAL_ACKED;
  }
  return 0;
}

weftResult_t weftBootDialHello(struct bootDial *d, const uint8_t *secret, uint32_t kind, int rank,
                               int nranks, const union weftSockAddr *listenAddr) {
  uint8_t addr[ADDR_BYTES];
  weftSockAddrEncode(addr, listenAddr);
  WEFTCHECK(weftBootRandom(d->clientNonce, NONCE_BYTES));
  weftBootHelloBuild(d->out, secret, d->serverNonce, kind, rank, nranks, d->clientNonce, addr);
  d->outLen = HELLO_BYTES;
  d->done = 0;
  d->state = DIAL_SEND;
  return weftSuccess;
}

const char *weftBootDialWaitingFor(enum dialState state) {
  switch (state) {
    case DIAL_CONNECTING: return "connecting to";
    case DIAL_AWAIT_NONCE: return "waiting for the nonce of";
    case DIAL_COMPOSE:
    case DIAL_SEND: return "sending its hello to";
    case DIAL_AWAIT_ACK: return "waiting for the acknowledgement of";
    default: return "done with";
  }
}
