/* Bootstrap: what a listener (the root's, a rank's ring listener) does with the connections
 * it accepts until they prove the secret: greet each with a fresh nonce, collect its hello,
 * drop the silent, the garbage and, under a flood, the oldest. The caller checks the hello
 * (boot_auth.c) and takes the connection or drops it. */
#include "boot_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bytes.h"
#include "log.h"

/* How long an accepted connection may take to prove the secret before it is dropped (a
 * variable only so that tests can tell a listener that waits on a silent stranger from one
 * that does not without racing the 2 s: bootstrap.h). */
int weftBootstrapHandshakeMs = 2000;
/* Unauthenticated connections one listener holds at once; beyond that the oldest goes, so a
 * flood of strangers cannot exhaust the descriptors the real ranks need. */
#define MAX_PENDING 256
/* Accepts per wakeup, so a flood of connections cannot starve the handshakes in progress. */
#define MAX_ACCEPTS_PER_WAKE 64

/* ---- poll() lists ---- */

int weftBootPollAdd(struct pollList *list, int fd, short events) {
  if (list->count == list->cap) {
    size_t cap = list->cap ? 2 * list->cap : 16;
    struct pollfd *fds = realloc(list->fds, cap * sizeof *fds);
    if (fds == NULL) return -1;
    list->fds = fds;
    list->cap = cap;
  }
  list->fds[list->count++] = (struct pollfd){.fd = fd, .events = events};
  return 0;
}

/* ---- Connections accepted by a listener that have not yet proven the secret ---- */

void weftBootPendingDrop(struct pendingSet *set, size_t i, int level, const char *why) {
  WEFT_LOG(level, WEFT_BOOT, "bootstrap: %s dropped the connection from %s: %s", set->owner,
           set->peers[i].name, why);
  close(set->peers[i].fd);
  set->peers[i] = set->peers[--set->count];
}

/* Removes peer i from the set without closing its connection, which the caller now owns. */
int weftBootPendingTake(struct pendingSet *set, size_t i) {
  int fd = set->peers[i].fd;
  set->peers[i] = set->peers[--set->count];
  return fd;
}

void weftBootPendingClear(struct pendingSet *set, const char *why) {
  while (set->count > 0) weftBootPendingDrop(set, set->count - 1, WEFT_LOG_INFO, why);
}

void weftBootPendingFree(struct pendingSet *set) {
  weftBootPendingClear(set, "the listener is closing");
  free(set->peers);
  set->peers = NULL;
  set->cap = 0;
}

static size_t pendingOldest(const struct pendingSet *set) {
  size_t oldest = 0;
  for (size_t i = 1; i < set->count; i++)
    if (set->peers[i].deadlineMs < set->peers[oldest].deadlineMs) oldest = i;
  return oldest;
}

void weftBootPendingExpire(struct pendingSet *set, int64_t now) {
  char why[64];
  snprintf(why, sizeof why, "no complete hello within %d ms", weftBootstrapHandshakeMs);
  for (size_t i = set->count; i-- > 0;)
    if (now >= set->peers[i].deadlineMs) weftBootPendingDrop(set, i, WEFT_LOG_INFO, why);
}

int64_t weftBootPendingEarliest(const struct pendingSet *set, int64_t deadlineMs) {
  for (size_t i = 0; i < set->count; i++)
    if (set->peers[i].deadlineMs < deadlineMs) deadlineMs = set->peers[i].deadlineMs;
  return deadlineMs;
}

/* Room for one more peer; 0, or -1 out of memory. */
static int pendingReserve(struct pendingSet *set) {
  if (set->count < set->cap) return 0;
  size_t cap = set->cap ? 2 * set->cap : 8;
  struct pendingPeer *peers = realloc(set->peers, cap * sizeof *peers);
  if (peers == NULL) return -1;
  set->peers = peers;
  set->cap = cap;
  return 0;
}

void weftBootPendingMove(struct pendingSet *from, size_t i, struct pendingSet *to, size_t max) {
  if (to->count >= max && to->count > 0)
    weftBootPendingDrop(to, pendingOldest(to), WEFT_LOG_WARN,
                        "too many hellos held for a ring; dropping the oldest");
  if (pendingReserve(to) != 0) {
    weftBootPendingDrop(from, i, WEFT_LOG_WARN, "out of memory to hold its hello");
    return;
  }
  to->peers[to->count++] = from->peers[i];
  (void)weftBootPendingTake(from, i);
}

/* Greets a fresh connection with its nonce and starts its handshake clock. */
static void pendingAdd(struct pendingSet *set, int fd, const union weftSockAddr *from) {
  struct pendingPeer peer = {.fd = fd, .deadlineMs = weftNowMs() + weftBootstrapHandshakeMs};
  weftSockAddrName(from, peer.name);
  size_t sent = 0;
  /* A fresh socket's send buffer always has room for the nonce; failing here means the
   * peer is already gone, and waiting for it to drain would only help a stalling stranger. */
  if (weftBootRandom(peer.nonce, NONCE_BYTES) != weftSuccess ||
      weftSocketSendSome(fd, peer.nonce, NONCE_BYTES, &sent) != 0 || sent != NONCE_BYTES) {
    INFO(WEFT_BOOT, "bootstrap: %s could not greet %s; closed", set->owner, peer.name);
    close(fd);
    return;
  }
  if (set->count == MAX_PENDING)
    weftBootPendingDrop(
        set, pendingOldest(set), WEFT_LOG_WARN,
        "too many connections that have not proven the secret; dropping the oldest");
  if (pendingReserve(set) != 0) {
    WARN("bootstrap: %s is out of memory; closed the connection from %s", set->owner, peer.name);
    close(fd);
    return;
  }
  set->peers[set->count++] = peer;
}

void weftBootPendingAcceptAll(struct pendingSet *set, int listenFd) {
  for (int n = 0; n < MAX_ACCEPTS_PER_WAKE; n++) {
    int fd;
    union weftSockAddr from;
    int rc = weftSocketAccept(listenFd, &fd, &from);
    if (rc == EAGAIN) return;
    if (rc == ECONNABORTED || rc == EPROTO) continue; /* the client left before the accept */
    if (rc != 0) {
      WARN("bootstrap: %s cannot accept: %s", set->owner, strerror(rc));
      /* Out of descriptors: make room at a stranger's expense, and never spin hot. */
      if (set->count > 0)
        weftBootPendingDrop(set, pendingOldest(set), WEFT_LOG_WARN, "freeing a descriptor");
      struct timespec pause = {0, 10 * 1000 * 1000};
      nanosleep(&pause, NULL);
      return;
    }
    pendingAdd(set, fd, &from);
  }
}

/* Reads what peer i sent: 1 once a whole hello is in, 0 while incomplete, -1 when dropped. */
int weftBootPendingReceive(struct pendingSet *set, size_t i) {
  struct pendingPeer *peer = &set->peers[i];
  int rc = weftSocketRecvSome(peer->fd, peer->hello, HELLO_BYTES, &peer->helloLen);
  if (rc != 0) {
    char text[128];
    weftBootPendingDrop(set, i, WEFT_LOG_INFO,
                        rc == WEFT_SOCK_CLOSED ? "closed before completing its hello"
                                               : weftSockStatusText(rc, text, sizeof text));
    return -1;
  }
  if (peer->helloLen >= 4 && weftGetBe32(peer->hello) != HELLO_MAGIC) {
    weftBootPendingDrop(set, i, WEFT_LOG_WARN,
                        "sent bytes that are not a weft hello (wrong magic)");
    return -1;
  }
  return peer->helloLen == HELLO_BYTES;
}
