/* Bootstrap: splits (the bootstrap of a communicator of some of the ranks, weftCommShrink)
 * and liveness: probing a rank's listener, naming the ranks that are gone, closing the ring
 * after a failure. */
#include "boot_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "log.h"

/* A killed process's descriptors do not all close at once: its peers can see one connection
 * end while its listener still accepts. Probes wait this long after a failure. */
#define GONE_SETTLE_MS 30

/* ---- Splits: the bootstrap of a communicator of some of the ranks (weftCommShrink) ---- */

/* A listener of its own, so the new communicator can be split in turn after its parent is
 * gone; its address travels over the new ring. */
static weftResult_t splitListener(struct weftBootstrap *b, const union weftSockAddr *like,
                                  int64_t deadlineMs) {
  union weftSockAddr local = *like;
  if (local.sa.sa_family == AF_INET6)
    local.sin6.sin6_port = 0;
  else
    local.sin.sin_port = 0;
  WEFTCHECK(weftSocketListen(&local, &b->listenFd, &b->listenAddr));
  weftBootServeStart(b);
  uint8_t *table = calloc((size_t)b->nranks, ADDR_BYTES);
  if (table == NULL) return weftSetError(weftSystemError, "bootstrap: out of memory");
  weftSockAddrEncode(table + (size_t)b->rank * ADDR_BYTES, &b->listenAddr);
  weftResult_t res = weftBootstrapAllGather(b, table, ADDR_BYTES, deadlineMs);
  int bad = res == weftSuccess ? weftBootstrapParseTable(table, b->nranks, b->peers) : -1;
  if (bad >= 0)
    res = weftSetError(weftRemoteError, "bootstrap: rank %d sent an invalid listen address", bad);
  free(table);
  return res;
}

static weftResult_t checkMembers(const struct weftBootstrap *parent, const int *members, int n,
                                 int *me) {
  *me = -1;
  for (int i = 0; i < n; i++) {
    if (members[i] < 0 || members[i] >= parent->nranks || (i > 0 && members[i] <= members[i - 1]))
      return weftSetError(weftInternalError, "bootstrap: split members not ascending in range");
    if (members[i] == parent->rank) *me = i;
  }
  if (*me < 0) return weftSetError(weftInternalError, "bootstrap: rank %d splits without itself", parent->rank);
  if (n > 1 && parent->listenFd < 0)
    return weftSetError(weftInternalError, "bootstrap: rank %d has no listener to split", parent->rank);
  return weftSuccess;
}

weftResult_t weftBootstrapSplit(struct weftBootstrap *parent, const int *members, int n,
                                uint64_t epoch, int64_t deadlineMs, struct weftBootstrap **out) {
  *out = NULL;
  int me;
  WEFTCHECK(checkMembers(parent, members, n, &me));
  WEFTCHECK(weftBootstrapCryptoInit());
  int64_t startMs = weftNowMs();
  struct weftBootstrap *b = calloc(1, sizeof *b);
  union weftSockAddr *peers = calloc((size_t)n, sizeof *peers);
  if (b == NULL || peers == NULL) {
    free(b);
    free(peers);
    return weftSetError(weftSystemError, "bootstrap: out of memory");
  }
  *b = (struct weftBootstrap){
      .rank = me, .nranks = n, .nextFd = -1, .prevFd = -1, .listenFd = -1, .peers = peers};
  for (int i = 0; i < n && parent->peers != NULL; i++) peers[i] = parent->peers[members[i]];
  weftBootSplitSecret(parent->secret, epoch, members, n, b->secret);
  weftResult_t res = weftSuccess;
  if (n > 1)
    res = weftBootFormRing(b, parent, startMs, deadlineMs);
  if (res == weftSuccess && n > 1) res = splitListener(b, &parent->listenAddr, deadlineMs);
  if (res != weftSuccess) {
    weftBootstrapClose(b);
    return res;
  }
  INFO(WEFT_BOOT, "bootstrap: rank %d is rank %d of %d after a split (epoch %llu) in %lld ms",
       parent->rank, me, n, (unsigned long long)epoch, (long long)(weftNowMs() - startMs));
  *out = b;
  return weftSuccess;
}

int weftBootstrapProbe(const struct weftBootstrap *b, int rank, int64_t timeoutMs) {
  const union weftSockAddr *addr = weftBootstrapPeerAddr(b, rank);
  if (addr == NULL || rank == b->rank) return 1;
  int fd = -1;
  int rc = weftSocketConnect(addr, weftNowMs() + timeoutMs, &fd);
  weftSocketCloseAbortive(&fd, 1); /* it sent nothing: a reset, so no TIME_WAIT on either side */
  return !(rc == ECONNREFUSED || rc == EHOSTUNREACH || rc == ENETUNREACH || rc == WEFT_SOCK_TIMEOUT);
}

/* "rank 3 (addr), ..." for the other ranks whose listener refuses connections; their number. */
static int describeGone(const struct weftBootstrap *b, char *buf, size_t len) {
  size_t o = 0;
  int found = 0;
  buf[0] = '\0';
  for (int r = 0; r < b->nranks && b->peers != NULL; r++) {
    if (r == b->rank || weftBootstrapProbe(b, r, RING_PROBE_TIMEOUT_MS))
      continue;
    char name[WEFT_SOCK_NAME_MAX];
    if (o < len)
      o += (size_t)snprintf(buf + o, len - o, "%srank %d (%s)", found ? ", " : "", r,
                            peerName(b, r, name));
    found++;
  }
  return found;
}

void weftBootstrapCloseRing(struct weftBootstrap *b) {
  weftSocketClose(&b->nextFd);
  weftSocketClose(&b->prevFd);
}

void weftBootstrapCloseRingQuietly(struct weftBootstrap *b) {
  weftSocketCloseAbortive(&b->nextFd, 0);
  weftSocketCloseAbortive(&b->prevFd, 0);
}

void weftBootstrapSettle(void) {
  struct timespec pause = {0, GONE_SETTLE_MS * 1000000L};
  nanosleep(&pause, NULL);
}

/* A peer failing during init is often a neighbour of the rank that died, not that rank: the
 * ranks whose listeners refuse connections are the dead one and those that failed since. The
 * ring goes first, so the failure spreads while this rank looks. */
void weftBootNameGoneRanks(struct weftBootstrap *b) {
  char gone[512];
  weftBootstrapCloseRing(b);
  weftBootstrapSettle();
  if (describeGone(b, gone, sizeof gone) == 0) return;
  char was[1024];
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  weftSetError(weftRemoteError, "%s; ranks whose bootstrap listener is closed (dead, or failed "
               "since): %s", was, gone);
}
