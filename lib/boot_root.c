/* Bootstrap: the root, a thread that registers every rank of one communicator (each proves
 * the secret with a hello), reports progress, and sends each rank the table of listen
 * addresses; it tells the others when a registered rank leaves, and gives up at its
 * deadline. Its replies are laid out at the top of boot_auth.c. */
#include "boot_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytes.h"
#include "check.h"
#include "log.h"

/* Least time between two progress reports from the root to one rank: they only feed timeout
 * messages, and one per registration would be quadratic in the rank count. */
#define STATUS_INTERVAL_MS 100

/* ---- The root: registers every rank, then sends each the table of listen addresses ---- */

struct rootClient {
  int fd;
  uint8_t serverNonce[NONCE_BYTES], clientNonce[NONCE_BYTES];
  uint32_t seq; /* replies queued so far */
  uint8_t head[REPLY_HEADER_BYTES];
  const uint8_t *body; /* the shared table, never copied per rank, or missing[] */
  uint8_t missing[4 * MISSING_LISTED]; /* this client's copy of a STATUS or ABORT body */
  size_t bodyLen;
  size_t sent; /* of head, then body */
  int reportedCount;
  int64_t lastStatusMs;
  int tableQueued;
  int lostQueued; /* told that a rank was lost */
  char name[WEFT_SOCK_NAME_MAX];
};

struct root {
  int listenFd;
  uint8_t secret[SECRET_BYTES];
  char name[WEFT_SOCK_NAME_MAX];
  int64_t startMs, deadlineMs;
  int nranks; /* 0 until the first authenticated hello sets it */
  int registered;
  int distributing;
  uint8_t *table; /* nranks addresses */
  uint8_t tableDigest[MAC_BYTES];
  struct rootClient **byRank;
  struct pendingSet pending;
  struct pollList polls; /* [listener][registered ranks...][pending...] */
  int *pollRanks;        /* the rank of each registered-rank entry */
  size_t pollClients;
  int lost;                     /* a rank that left before the table, or -1 */
  int toldLost;                 /* ranks told so (their connections then closed) */
  uint8_t lostAddr[ADDR_BYTES]; /* the LOST replies' body */
  uint8_t lostDigest[MAC_BYTES];
  /* The lowest unregistered ranks, kept as ranks come and go (each rank is scanned about
   * once, so no reply pays a scan of all ranks): every unregistered rank below missingScan,
   * ascending, and at most MISSING_LISTED of them. */
  int missingRanks[MISSING_LISTED];
  int nMissing, missingScan;
};

static int clientIdle(const struct rootClient *c) {
  return c->sent == REPLY_HEADER_BYTES + c->bodyLen;
}

static void clientQueue(struct root *r, struct rootClient *c, uint32_t type, uint32_t arg,
                        const uint8_t *body, size_t bodyLen, const uint8_t *digest) {
  weftBootReplyBuild(c->head, r->secret, c->clientNonce, c->serverNonce, c->seq++, type, arg,
                     bodyLen, digest);
  c->body = body;
  c->bodyLen = bodyLen;
  c->sent = 0;
}

static int clientFlush(struct rootClient *c) {
  if (c->sent < REPLY_HEADER_BYTES) {
    int rc = weftSocketSendSome(c->fd, c->head, REPLY_HEADER_BYTES, &c->sent);
    if (rc != 0 || c->sent < REPLY_HEADER_BYTES) return rc;
  }
  size_t bodySent = c->sent - REPLY_HEADER_BYTES;
  int rc = weftSocketSendSome(c->fd, c->body, c->bodyLen, &bodySent);
  c->sent = REPLY_HEADER_BYTES + bodySent;
  return rc;
}

static void rootCloseClient(struct root *r, int rank, int level, const char *why) {
  struct rootClient *c = r->byRank[rank];
  WEFT_LOG(level, WEFT_BOOT, "bootstrap root at %s: closed rank %d's connection (%s): %s", r->name,
           rank, c->name, why);
  close(c->fd);
  free(c);
  r->byRank[rank] = NULL;
}

/* A registered rank left before the table went out: it died, was aborted or gave up, and
 * init cannot complete without it. Every other rank, registered or yet to come, learns it
 * (rootQueueReplies) instead of waiting for its timeout. */
static void rootReportLost(struct root *r, int lost) {
  if (r->lost >= 0) return; /* the first loss is the news */
  WARN("bootstrap root at %s: rank %d left before all %d ranks had registered; init cannot "
       "complete, telling the others", r->name, lost, r->nranks);
  r->lost = lost;
  memcpy(r->lostAddr, r->table + (size_t)lost * ADDR_BYTES, ADDR_BYTES);
  weftBootBodyDigest(r->secret, r->lostAddr, ADDR_BYTES, r->lostDigest);
}

static void rootFlush(struct root *r, int rank) {
  struct rootClient *c = r->byRank[rank];
  int rc = clientFlush(c);
  char text[128];
  if (rc != 0)
    rootCloseClient(r, rank, r->distributing ? WEFT_LOG_WARN : WEFT_LOG_INFO,
                    weftSockStatusText(rc, text, sizeof text));
  else if (r->distributing && c->tableQueued && clientIdle(c))
    rootCloseClient(r, rank, WEFT_LOG_TRACE, "table delivered");
  else if (c->lostQueued && clientIdle(c)) {
    rootCloseClient(r, rank, WEFT_LOG_TRACE, "told of the lost rank");
    r->toldLost++;
  }
}

/* Lists unregistered ranks from missingScan on, up to MISSING_LISTED. */
static void missingExtend(struct root *r) {
  for (; r->nMissing < MISSING_LISTED && r->missingScan < r->nranks; r->missingScan++)
    if (r->byRank[r->missingScan] == NULL) r->missingRanks[r->nMissing++] = r->missingScan;
}

/* Rank registered: it leaves the list, which takes the next unregistered rank. */
static void missingRegistered(struct root *r, int rank) {
  for (int i = 0; i < r->nMissing; i++)
    if (r->missingRanks[i] == rank) {
      memmove(&r->missingRanks[i], &r->missingRanks[i + 1],
              sizeof(int) * (size_t)(r->nMissing - i - 1));
      r->nMissing--;
      missingExtend(r);
      return;
    }
}

/* Rank is unregistered again (it gave up): back into the list if below the scan. */
static void missingLeft(struct root *r, int rank) {
  if (rank >= r->missingScan) return;
  int i = r->nMissing;
  while (i > 0 && r->missingRanks[i - 1] > rank) i--;
  if (r->nMissing == MISSING_LISTED) { /* the largest goes; the scan resumes there */
    r->missingScan = r->missingRanks[MISSING_LISTED - 1];
    r->nMissing--;
    if (i > r->nMissing) return;
  }
  memmove(&r->missingRanks[i + 1], &r->missingRanks[i], sizeof(int) * (size_t)(r->nMissing - i));
  r->missingRanks[i] = rank;
  r->nMissing++;
}

/* Queues a STATUS or ABORT: the count and the lowest ranks still missing. */
static void rootQueueStatus(struct root *r, struct rootClient *c, uint32_t type) {
  for (int i = 0; i < r->nMissing; i++) weftPutBe32(c->missing + 4 * i, (uint32_t)r->missingRanks[i]);
  size_t bytes = 4 * (size_t)r->nMissing;
  uint8_t digest[MAC_BYTES];
  weftBootBodyDigest(r->secret, c->missing, bytes, digest);
  clientQueue(r, c, type, (uint32_t)r->registered, c->missing, bytes, digest);
}

/* Queues, on every idle connection, the table when it is ready, else a progress report. */
static void rootQueueReplies(struct root *r, int64_t now) {
  size_t tableBytes = (size_t)r->nranks * ADDR_BYTES;
  for (int rank = 0; rank < r->nranks; rank++) {
    struct rootClient *c = r->byRank[rank];
    if (c == NULL || !clientIdle(c)) continue;
    if (r->lost >= 0) {
      clientQueue(r, c, REPLY_LOST, (uint32_t)r->lost, r->lostAddr, ADDR_BYTES, r->lostDigest);
      c->lostQueued = 1;
    } else if (r->distributing && !c->tableQueued) {
      clientQueue(r, c, REPLY_TABLE, (uint32_t)r->nranks, r->table, tableBytes, r->tableDigest);
      c->tableQueued = 1;
    } else if (!r->distributing && c->reportedCount != r->registered &&
               now - c->lastStatusMs >= STATUS_INTERVAL_MS) {
      rootQueueStatus(r, c, REPLY_STATUS);
      c->reportedCount = r->registered;
      c->lastStatusMs = now;
    } else {
      continue;
    }
    rootFlush(r, rank);
  }
}

/* Why hello h cannot register (into why), or 0 when it can. The first authenticated hello
 * fixes nranks. */
static int rootRefuses(struct root *r, const struct weftBootstrapHello *h, char *why,
                       size_t len) {
  if (weftBootstrapCheckHello(h, HELLO_REGISTER, r->nranks, -1, why, len) != 0)
    return 1;
  if (r->nranks != 0 && r->byRank[h->rank] != NULL)
    snprintf(why, len, "rank %u is already registered (from %s)", h->rank,
             r->byRank[h->rank]->name);
  else
    return 0;
  return 1;
}

static int rootSizeFor(struct root *r, int nranks) {
  if (r->nranks != 0) return 0;
  r->byRank = calloc((size_t)nranks, sizeof *r->byRank);
  r->table = calloc((size_t)nranks, ADDR_BYTES);
  r->pollRanks = calloc((size_t)nranks, sizeof *r->pollRanks);
  if (r->byRank == NULL || r->table == NULL || r->pollRanks == NULL) {
    free(r->byRank);
    free(r->table);
    free(r->pollRanks);
    r->byRank = NULL;
    r->table = NULL;
    r->pollRanks = NULL;
    return -1;
  }
  r->nranks = nranks;
  missingExtend(r);
  return 0;
}

/* Handles the complete hello of pending peer i: registers it or drops it. */
static void rootAdmit(struct root *r, size_t i) {
  struct pendingPeer *peer = &r->pending.peers[i];
  struct weftBootstrapHello h;
  char why[160];
  const char *refusal = weftBootstrapParseHello(r->secret, peer->nonce, peer->hello, &h);
  if (refusal == NULL && rootRefuses(r, &h, why, sizeof why)) refusal = why;
  if (refusal == NULL && rootSizeFor(r, (int)h.nranks) != 0) refusal = "out of memory";
  struct rootClient *c = refusal == NULL ? calloc(1, sizeof *c) : NULL;
  if (refusal == NULL && c == NULL) refusal = "out of memory";
  if (refusal != NULL) {
    weftBootPendingDrop(&r->pending, i, WEFT_LOG_WARN, refusal);
    return;
  }
  memcpy(c->serverNonce, peer->nonce, NONCE_BYTES);
  memcpy(c->clientNonce, h.clientNonce, NONCE_BYTES);
  memcpy(c->name, peer->name, sizeof c->name);
  c->sent = REPLY_HEADER_BYTES; /* nothing queued */
  c->lastStatusMs = INT64_MIN / 2;
  c->fd = weftBootPendingTake(&r->pending, i);
  memcpy(r->table + (size_t)h.rank * ADDR_BYTES, h.addr, ADDR_BYTES);
  r->byRank[h.rank] = c;
  r->registered++;
  missingRegistered(r, (int)h.rank);
  INFO(WEFT_BOOT, "bootstrap root at %s: rank %u registered from %s (%d of %d)", r->name, h.rank,
       c->name, r->registered, r->nranks);
}

/* A rank that timed out waiting for the others: it may come back (restarted), so its slot is
 * free again, and the others keep waiting until their own deadline. */
static void rootOnGiveUp(struct root *r, int rank) {
  rootCloseClient(r, rank, WEFT_LOG_INFO, "it gave up at its timeout");
  r->registered--;
  missingLeft(r, rank);
  memset(r->table + (size_t)rank * ADDR_BYTES, 0, ADDR_BYTES);
}

/* A registered rank sends nothing more but, at its timeout, GIVE_UP_BYTE: its socket turning
 * readable otherwise means it left. */
static void rootOnClient(struct root *r, int rank, short revents) {
  struct rootClient *c = r->byRank[rank];
  if (c == NULL) return;
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    uint8_t byte = 0;
    size_t got = 0;
    int rc = weftSocketRecvSome(c->fd, &byte, 1, &got);
    char text[128];
    if (got == 1 && byte == GIVE_UP_BYTE && !r->distributing) {
      rootOnGiveUp(r, rank);
      return;
    }
    if (rc != 0 || got > 0) {
      rootCloseClient(r, rank, WEFT_LOG_INFO,
                      rc == WEFT_SOCK_CLOSED ? "it disconnected"
                      : rc != 0              ? weftSockStatusText(rc, text, sizeof text)
                                             : "it sent unexpected bytes");
      if (!r->distributing) rootReportLost(r, rank);
      return;
    }
  }
  if (revents & POLLOUT) rootFlush(r, rank);
}

static void rootOnPending(struct root *r, size_t i) {
  if (weftBootPendingReceive(&r->pending, i) == 1) rootAdmit(r, i);
}

static int rootPoll(struct root *r) {
  struct pollList *polls = &r->polls;
  polls->count = 0;
  r->pollClients = 0;
  if (weftBootPollAdd(polls, r->distributing ? -1 : r->listenFd, POLLIN) != 0) return -1;
  for (int rank = 0; rank < r->nranks; rank++) {
    struct rootClient *c = r->byRank[rank];
    if (c == NULL) continue;
    if (weftBootPollAdd(polls, c->fd, (short)(POLLIN | (clientIdle(c) ? 0 : POLLOUT))) != 0)
      return -1;
    r->pollRanks[r->pollClients++] = rank;
  }
  for (size_t i = 0; i < r->pending.count; i++)
    if (weftBootPollAdd(polls, r->pending.peers[i].fd, POLLIN) != 0) return -1;
  int64_t wake = weftBootPendingEarliest(&r->pending, r->deadlineMs);
  for (int rank = 0; rank < r->nranks && !r->distributing; rank++) {
    struct rootClient *c = r->byRank[rank];
    if (c != NULL && clientIdle(c) && c->reportedCount != r->registered &&
        c->lastStatusMs + STATUS_INTERVAL_MS < wake)
      wake = c->lastStatusMs + STATUS_INTERVAL_MS;
  }
  return weftPollUntil(polls->fds, polls->count, wake) < 0 ? -1 : 0;
}

static void rootHandleEvents(struct root *r) {
  struct pollfd *fds = r->polls.fds;
  size_t firstPending = 1 + r->pollClients;
  /* Pending peers last to first: dropping one moves the last peer into its place. */
  for (size_t k = r->polls.count; k-- > firstPending;)
    if (fds[k].revents != 0) rootOnPending(r, k - firstPending);
  for (size_t k = 1; k < firstPending; k++)
    if (fds[k].revents != 0) rootOnClient(r, r->pollRanks[k - 1], fds[k].revents);
  if (fds[0].revents != 0 && !r->distributing) weftBootPendingAcceptAll(&r->pending, r->listenFd);
}

static void rootStartDistribution(struct root *r) {
  r->distributing = 1;
  weftSocketClose(&r->listenFd);
  weftBootPendingClear(&r->pending, "every rank has registered");
  weftBootBodyDigest(r->secret, r->table, (size_t)r->nranks * ADDR_BYTES, r->tableDigest);
  INFO(WEFT_BOOT, "bootstrap root at %s: all %d ranks registered after %lld ms; sending the table",
       r->name, r->nranks, (long long)(weftNowMs() - r->startMs));
}

static int rootOpenClients(const struct root *r) {
  int open = 0;
  for (int rank = 0; rank < r->nranks; rank++) open += r->byRank[rank] != NULL;
  return open;
}

/* WEFT_TIMEOUT_MS passed: tell the waiting ranks (best effort, never blocking) and stop. */
static void rootGiveUp(struct root *r) {
  long long elapsed = (long long)(weftNowMs() - r->startMs);
  if (r->nranks == 0) {
    WARN("bootstrap root at %s: no rank registered within %lld ms (WEFT_TIMEOUT_MS); giving up",
         r->name, elapsed);
    return;
  }
  if (r->distributing) {
    WARN("bootstrap root at %s: timed out after %lld ms sending the table to %d ranks", r->name,
         elapsed, rootOpenClients(r));
    return;
  }
  char missing[256] = "";
  for (int i = 0, o = 0; i < r->nMissing && o < (int)sizeof missing; i++)
    o += snprintf(missing + o, sizeof missing - (size_t)o, "%s%d", i ? ", " : "", r->missingRanks[i]);
  int unlisted = r->nranks - r->registered - r->nMissing;
  WARN("bootstrap root at %s: %d of %d ranks had not registered after %lld ms (WEFT_TIMEOUT_MS): "
       "rank%s %s%s; giving up", r->name, r->nranks - r->registered, r->nranks, elapsed,
       r->nranks - r->registered > 1 ? "s" : "", missing, unlisted > 0 ? ", ..." : "");
  for (int rank = 0; rank < r->nranks; rank++) {
    struct rootClient *c = r->byRank[rank];
    if (c == NULL || !clientIdle(c)) continue;
    rootQueueStatus(r, c, REPLY_ABORT);
    (void)clientFlush(c);
  }
}

static void rootFree(struct root *r) {
  weftSocketClose(&r->listenFd);
  weftBootPendingFree(&r->pending);
  for (int rank = 0; rank < r->nranks; rank++) {
    if (r->byRank[rank] == NULL) continue;
    close(r->byRank[rank]->fd);
    free(r->byRank[rank]);
  }
  free(r->byRank);
  free(r->table);
  free(r->polls.fds);
  free(r->pollRanks);
  explicit_bzero(r->secret, sizeof r->secret);
  free(r);
}

static int rootDelivered(const struct root *r) {
  if (!r->distributing || rootOpenClients(r) != 0) return 0;
  INFO(WEFT_BOOT, "bootstrap root at %s: table delivered to all %d ranks", r->name, r->nranks);
  return 1;
}

static void rootServe(struct root *r) {
  for (;;) {
    int64_t now = weftNowMs();
    if (rootDelivered(r) || (r->lost >= 0 && r->toldLost >= r->nranks - 1)) return;
    if (now >= r->deadlineMs) {
      rootGiveUp(r);
      return;
    }
    weftBootPendingExpire(&r->pending, now);
    rootQueueReplies(r, now);
    if (rootDelivered(r)) return; /* the last table may have gone out just now */
    if (rootPoll(r) != 0) {
      WARN("bootstrap root at %s: poll failed: %s; giving up", r->name, strerror(errno));
      return;
    }
    rootHandleEvents(r);
    if (!r->distributing && r->lost < 0 && r->nranks > 0 && r->registered == r->nranks)
      rootStartDistribution(r);
  }
}

static void *rootMain(void *arg) {
  struct root *r = arg;
  pthread_setname_np(pthread_self(), "weft-boot-root");
  INFO(WEFT_BOOT, "bootstrap root listening on %s for %lld ms", r->name,
       (long long)(r->deadlineMs - r->startMs));
  rootServe(r);
  rootFree(r);
  return NULL;
}

/* Binds the root's listener at addr (port 0: ephemeral) and starts its detached thread. */
weftResult_t weftBootRootStart(const union weftSockAddr *addr, const uint8_t *secret,
                               int64_t deadlineMs, union weftSockAddr *bound) {
  struct root *r = calloc(1, sizeof *r);
  if (r == NULL) return weftSetError(weftSystemError, "bootstrap: out of memory for the root");
  union weftSockAddr local;
  weftResult_t res = weftSocketListen(addr, &r->listenFd, &local);
  if (res != weftSuccess) {
    free(r);
    return res;
  }
  memcpy(r->secret, secret, SECRET_BYTES);
  weftSockAddrName(&local, r->name);
  snprintf(r->pending.owner, sizeof r->pending.owner, "root at %s", r->name);
  r->startMs = weftNowMs();
  r->deadlineMs = deadlineMs;
  r->lost = -1;
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&thread, &attr, rootMain, r);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    char name[WEFT_SOCK_NAME_MAX];
    snprintf(name, sizeof name, "%s", r->name);
    rootFree(r);
    return weftSetSysError(err, "bootstrap: cannot start the root thread for %s", name);
  }
  if (bound != NULL) *bound = local;
  return weftSuccess;
}
