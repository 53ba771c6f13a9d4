/* Bootstrap: splits (the bootstrap of a communicator of some of the ranks: weftCommShrink,
 * weftCommRecover, weftCommSplit), agreements (one all-gather over every rank on a ring of
 * its own: the colors of a split, the id of a grow) and liveness: probing a rank's listener,
 * naming the ranks that are gone, closing the ring after a failure. */
#include "boot_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bytes.h"
#include "check.h"
#include "log.h"

/* A killed process's descriptors do not all close at once: its peers can see one connection
 * end while its listener still accepts. Probes wait this long after a failure. */
#define GONE_SETTLE_MS 30

/* ---- Splits: the bootstrap of a communicator of some of the ranks ---- */

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

/* Members are distinct ranks of the parent, this rank among them, in the new communicator's
 * order (ascending for a shrink, by key for a split). */
static weftResult_t checkMembers(const struct weftBootstrap *parent, const int *members, int n,
                                 int *me) {
  *me = -1;
  char *seen = calloc((size_t)parent->nranks, 1);
  if (seen == NULL) return weftSetError(weftSystemError, "bootstrap: out of memory");
  weftResult_t res = weftSuccess;
  for (int i = 0; i < n && res == weftSuccess; i++) {
    if (members[i] < 0 || members[i] >= parent->nranks || seen[members[i]])
      res = weftSetError(weftInternalError, "bootstrap: split member %d repeated or outside [0, %d)",
                         members[i], parent->nranks);
    else
      seen[members[i]] = 1;
    if (members[i] == parent->rank) *me = i;
  }
  free(seen);
  if (res != weftSuccess) return res;
  if (*me < 0) return weftSetError(weftInternalError, "bootstrap: rank %d splits without itself", parent->rank);
  if (n > 1 && parent->listenFd < 0)
    return weftSetError(weftInternalError, "bootstrap: rank %d has no listener to split", parent->rank);
  return weftSuccess;
}

/* The ring of members[0..n) of parent, formed through the parent's listeners and
 * authenticated with secret; no listener of its own yet. */
static weftResult_t splitRing(struct weftBootstrap *parent, const int *members, int n,
                              const uint8_t *secret, int64_t startMs, int64_t deadlineMs,
                              struct weftBootstrap **out) {
  *out = NULL;
  int me;
  WEFTCHECK(checkMembers(parent, members, n, &me));
  WEFTCHECK(weftBootstrapCryptoInit());
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
  memcpy(b->secret, secret, SECRET_BYTES);
  weftResult_t res = weftSuccess;
  if (n > 1)
    res = weftBootFormRing(b, parent, startMs, deadlineMs);
  if (res != weftSuccess) {
    weftBootstrapClose(b);
    return res;
  }
  *out = b;
  return weftSuccess;
}

weftResult_t weftBootstrapSplit(struct weftBootstrap *parent, const int *members, int n,
                                uint64_t epoch, int64_t deadlineMs, struct weftBootstrap **out) {
  *out = NULL;
  int64_t startMs = weftNowMs();
  uint8_t secret[SECRET_BYTES];
  weftBootSplitSecret(parent->secret, epoch, members, n, secret);
  struct weftBootstrap *b;
  weftResult_t res = splitRing(parent, members, n, secret, startMs, deadlineMs, &b);
  explicit_bzero(secret, sizeof secret);
  if (res != weftSuccess) return res;
  if (n > 1) res = splitListener(b, &parent->listenAddr, deadlineMs);
  if (res != weftSuccess) {
    weftBootstrapClose(b);
    return res;
  }
  INFO(WEFT_BOOT, "bootstrap: rank %d is rank %d of %d after a split (epoch %llu) in %lld ms",
       parent->rank, b->rank, n, (unsigned long long)epoch, (long long)(weftNowMs() - startMs));
  *out = b;
  return weftSuccess;
}

/* ---- Agreements: one all-gather over every rank of a communicator, on a ring of its own ---- */

/* The secret of an agreement: the split secret of every rank at this epoch, bound in turn to
 * what the agreement is for and its size, so that ranks making different calls (a split here,
 * a grow or a shrink there) refuse each other's hellos instead of exchanging bytes each would
 * misread. */
static void agreeSecret(const struct weftBootstrap *parent, const int *all, uint64_t epoch,
                        uint32_t purpose, size_t bytesPerRank, uint8_t *out) {
  uint8_t base[SECRET_BYTES], msg[24] = "weft agreement";
  weftBootSplitSecret(parent->secret, epoch, all, parent->nranks, base);
  weftPutBe32(msg + 14, purpose);
  weftPutBe32(msg + 18, (uint32_t)bytesPerRank);
  weftBootstrapMac(base, msg, sizeof msg, out);
  explicit_bzero(base, sizeof base);
}

weftResult_t weftBootstrapAgree(struct weftBootstrap *parent, uint64_t epoch, uint32_t purpose,
                                void *data, size_t bytesPerRank, int64_t deadlineMs) {
  if (parent->nranks == 1) return weftSuccess;
  int64_t startMs = weftNowMs();
  int *all = malloc(sizeof(int) * (size_t)parent->nranks);
  if (all == NULL) return weftSetError(weftSystemError, "bootstrap: out of memory");
  for (int r = 0; r < parent->nranks; r++) all[r] = r;
  uint8_t secret[SECRET_BYTES];
  agreeSecret(parent, all, epoch, purpose, bytesPerRank, secret);
  struct weftBootstrap *b;
  weftResult_t res = splitRing(parent, all, parent->nranks, secret, startMs, deadlineMs, &b);
  explicit_bzero(secret, sizeof secret);
  free(all);
  if (res != weftSuccess) return res;
  res = weftBootstrapAllGather(b, data, bytesPerRank, deadlineMs);
  /* Done: every byte this rank sent has reached its peer's kernel or will before a reset, and
   * nothing more comes; no TIME_WAIT per agreement. A failure closes in order, so the
   * neighbours see who left (and fail in turn). */
  if (res == weftSuccess) weftBootstrapCloseRingQuietly(b);
  weftBootstrapClose(b);
  if (res == weftSuccess)
    INFO(WEFT_BOOT, "bootstrap: rank %d: agreement %u of %d ranks (epoch %llu) in %lld ms",
         parent->rank, purpose, parent->nranks, (unsigned long long)epoch,
         (long long)(weftNowMs() - startMs));
  return res;
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
