/* Connections: pick a transport per link (first registered that says yes), exchange the setup
 * blobs through the bootstrap, connect. One collective call connects any set of links (rings,
 * trees); every rank calls it at the same point, each with its own links. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "deadline.h"
#include "param.h"
#include "prims.h"

/* Whether a comma list holds the name (case-insensitive). */
static int listHolds(const char *list, const char *name) {
  size_t len = strlen(name);
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncasecmp(p, name, n) == 0) return 1;
    p += n + (end ? 1 : 0);
  }
  return 0;
}

/* Whether WEFT_TRANSPORTS (a comma list; empty = all; "^" first: all but those) allows this
 * transport. */
int weftTransportAllowed(const char *list, const char *name) {
  if (*list == '^') return !listHolds(list + 1, name);
  return *list == '\0' || listHolds(list, name);
}

static int transportAllowed(const char *name) {
  return weftTransportAllowed(weftParamTransports(), name);
}

int weftTransportsCheckList(const char *value, char *allowed, size_t len) {
  size_t o = (size_t)snprintf(allowed, len, "a comma list of");
  for (int t = 0; weftTransports[t] != NULL && o < len; t++)
    o += (size_t)snprintf(allowed + o, len - o, " %s", weftTransports[t]->name);
  if (o < len) snprintf(allowed + o, len - o, " (\"^\" first: all but those)");
  if (value == NULL) return 0;
  if (*value == '^') value++;
  for (const char *p = value;; p++) { /* every name is a transport's */
    size_t n = strcspn(p, ",");
    int known = 0;
    for (int t = 0; weftTransports[t] != NULL && !known; t++)
      known = strlen(weftTransports[t]->name) == n && strncasecmp(p, weftTransports[t]->name, n) == 0;
    if (!known) return -1;
    p += n;
    if (*p == '\0') return 0;
  }
}

weftResult_t weftTransportsInit(struct weftComm *comm) {
  for (int t = 0; weftTransports[t] != NULL; t++) {
    const struct weftTransportOps *ops = weftTransports[t];
    char *why = comm->transportWhy[t];
    if (!transportAllowed(ops->name)) {
      snprintf(why, sizeof comm->transportWhy[t], "not in WEFT_TRANSPORTS=\"%s\"",
               weftParamTransports());
      continue;
    }
    if (!ops->query(why, sizeof comm->transportWhy[t])) {
      INFO(WEFT_INIT, "transport %s unavailable: %s", ops->name, why);
      continue;
    }
    WEFTCHECK(ops->init(comm, &comm->transportState[t]));
  }
  return weftSuccess;
}

/* Why no transport connects two ranks: each one's reason, "; "-separated. */
static void describeNoTransport(const struct weftComm *comm, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int t = 0; weftTransports[t] != NULL && o < len; t++) {
    const char *why = comm->transportState[t] != NULL ? "it cannot connect these two ranks"
                                                       : comm->transportWhy[t];
    o += (size_t)snprintf(buf + o, len - o, "%s%s: %s", t ? "; " : "", weftTransports[t]->name, why);
  }
}

void weftTransportsFinalize(struct weftComm *comm) {
  for (int t = 0; weftTransports[t] != NULL; t++)
    if (comm->transportState[t] != NULL) {
      weftTransports[t]->finalize(comm->transportState[t]);
      comm->transportState[t] = NULL;
    }
}

/* See lib/transport.h: the fault-injection tests' way between a link and its transport. */
static _Atomic(weftTransportInterposer) interposer;

void weftTransportInterpose(weftTransportInterposer fn) { atomic_store(&interposer, fn); }

weftResult_t weftSelectTransport(struct weftComm *comm, int peer, struct weftConn *c) {
  for (int t = 0; weftTransports[t] != NULL; t++) {
    if (comm->transportState[t] == NULL) continue;
    int ok = 0;
    WEFTCHECK(weftTransports[t]->canConnect(comm->transportState[t], &comm->peers[comm->rank],
                                            &comm->peers[peer], &ok, &c->caps));
    if (ok) {
      weftTransportInterposer wrap = atomic_load(&interposer);
      c->peer = peer;
      c->comm = comm;
      c->ops = wrap != NULL ? wrap(comm->rank, c, weftTransports[t]) : weftTransports[t];
      c->state = comm->transportState[t];
      INFO(WEFT_INIT, "rank %d %s rank %d via %s (%.2f us, %.1f GB/s)", comm->rank,
           c->dir == WEFT_DIR_SEND ? "->" : "<-", peer, c->ops->name, c->caps.latencyUs,
           c->caps.bandwidthGBs);
      return weftSuccess;
    }
  }
  char why[512];
  describeNoTransport(comm, why, sizeof why);
  return weftSetError(*weftParamTransports() ? weftInvalidArgument : weftSystemError,
                      "no transport can connect rank %d (host %s) to rank %d (host %s): %s",
                      comm->rank, comm->peers[comm->rank].hostname, peer,
                      comm->peers[peer].hostname, why);
}

static weftResult_t connectUntilDone(struct weftComm *comm, struct weftConn *c, const void *blob) {
  struct weftWaiter w;
  weftWaitStart(&w, comm);
  for (;;) {
    int done = 0;
    WEFTCHECK(c->ops->connect(c, blob, &done));
    if (done) return weftSuccess;
    WEFTCHECK(weftWaitPause(&w, "connecting to", c->peer));
  }
}

/* What a rank publishes about one of its links. */
struct linkRecord {
  int32_t used, peer, dir, tag;
  char blob[WEFT_CONN_BLOB_BYTES];
};

static const struct linkRecord *findRecord(const struct linkRecord *table, int rank, int me,
                                           int dir, int tag) {
  const struct linkRecord *recs = table + (size_t)rank * WEFT_MAX_LINKS;
  for (int i = 0; i < WEFT_MAX_LINKS; i++)
    if (recs[i].used && recs[i].peer == me && recs[i].dir == dir && recs[i].tag == tag) return &recs[i];
  return NULL;
}

static weftResult_t setupLinks(struct weftComm *comm, struct weftLinkReq *reqs, int nreqs,
                               struct linkRecord *mine) {
  for (int i = 0; i < nreqs; i++) {
    struct weftConn *c = reqs[i].conn;
    memset(c, 0, sizeof *c);
    c->dir = reqs[i].dir;
    WEFTCHECK(weftSelectTransport(comm, reqs[i].peer, c));
    mine[i] = (struct linkRecord){.used = 1, .peer = reqs[i].peer, .dir = reqs[i].dir, .tag = reqs[i].tag};
    WEFTCHECK(c->ops->setup(c->state, reqs[i].peer, reqs[i].dir, c, mine[i].blob));
  }
  return weftSuccess;
}

static weftResult_t connectLinks(struct weftComm *comm, struct weftLinkReq *reqs, int nreqs,
                                 const struct linkRecord *table) {
  for (int i = 0; i < nreqs; i++) {
    int otherDir = reqs[i].dir == WEFT_DIR_SEND ? WEFT_DIR_RECV : WEFT_DIR_SEND;
    const struct linkRecord *rec = findRecord(table, reqs[i].peer, comm->rank, otherDir, reqs[i].tag);
    if (rec == NULL)
      return weftSetError(weftInternalError, "rank %d published no link %d for rank %d",
                          reqs[i].peer, reqs[i].tag, comm->rank);
    WEFTCHECK(connectUntilDone(comm, reqs[i].conn, rec->blob));
  }
  return weftSuccess;
}

weftResult_t weftConnectLinks(struct weftComm *comm, struct weftLinkReq *reqs, int nreqs) {
  if (nreqs > WEFT_MAX_LINKS)
    return weftSetError(weftInternalError, "%d links requested, at most %d", nreqs, WEFT_MAX_LINKS);
  struct linkRecord *table = calloc((size_t)comm->nranks * WEFT_MAX_LINKS, sizeof *table);
  if (table == NULL) return weftSetError(weftSystemError, "out of memory");
  weftResult_t rc;
  WEFTCHECKGOTO(setupLinks(comm, reqs, nreqs, table + (size_t)comm->rank * WEFT_MAX_LINKS), rc, out);
  WEFTCHECKGOTO(weftBootstrapAllGather(comm->boot, table, sizeof *table * WEFT_MAX_LINKS,
                                       weftDeadline(comm)),
                rc, out);
  WEFTCHECKGOTO(connectLinks(comm, reqs, nreqs, table), rc, out);
  WEFTCHECKGOTO(weftBootstrapBarrier(comm->boot, weftDeadline(comm)), rc, out);
  for (int i = 0; i < nreqs; i++)
    if (reqs[i].conn->ops->connected) WEFTCHECKGOTO(reqs[i].conn->ops->connected(reqs[i].conn), rc, out);
out:
  free(table);
  return rc;
}

_Thread_local int weftConnCloseReason;

static const char *causeOrigin(const char *why) {
  const char *origin = why;
  for (const char *p = strstr(why, WEFT_CAUSE_MARK); p != NULL; p = strstr(p + 1, WEFT_CAUSE_MARK))
    origin = p + strlen(WEFT_CAUSE_MARK);
  return origin;
}

/* Why this rank closes a link of comm (closeReason: weftConnCloseReason's), as struct
 * weftConn's closeReason and closeCause say. */
static int closeCause(struct weftComm *comm, int closeReason, char *buf, size_t len) {
  if (weftCommAborted(comm)) {
    snprintf(buf, len, "rank %d aborted its communicator (weftCommAbort)", comm->rank);
    return weftRemoteError;
  }
  int err = atomic_load(&comm->asyncError);
  if (err == weftSuccess || err == weftInProgress) return 0;
  /* weftCommFail closes the links as soon as a collective fails, when the failure is still
   * this thread's last error; after a timeout they stay until destroy, and the message is the
   * communicator's by then. */
  const char *why = err == weftTimeout ? comm->lastError : weftThreadLastError();
  if (*why == '\0') why = weftGetErrorString((weftResult_t)err);
  snprintf(buf, len, "%s", causeOrigin(why));
  return closeReason == weftInvalidUsage ? weftInvalidUsage : err;
}

/* The transport gets the text handed down: it never asks the communicator why. */
void weftConnClose(struct weftConn *c) {
  char cause[WEFT_CLOSE_CAUSE_BYTES] = "";
  if (c->ops != NULL) {
    c->closeReason = c->comm != NULL ? closeCause(c->comm, weftConnCloseReason, cause, sizeof cause) : 0;
    c->closeCause = cause;
    c->ops->close(c);
  }
  memset(c, 0, sizeof *c);
}

void weftLinkSummaryAdd(struct weftLinkSummary *s, const struct weftConn *c) {
  if (c->ops == NULL) return;
  if (c->caps.latencyUs > s->latencyUs) s->latencyUs = c->caps.latencyUs;
  if (s->bandwidthGBs == 0 || c->caps.bandwidthGBs < s->bandwidthGBs) s->bandwidthGBs = c->caps.bandwidthGBs;
  if (s->slotBytes == 0 || c->slotBytes < s->slotBytes) s->slotBytes = c->slotBytes;
}

/* A schedule is as slow as its slowest link, and both ends of a link must cut data into the
 * same pieces: every member learns the worst, so every member computes the same cost and
 * piece size. */
weftResult_t weftLinkSummaryAgree(struct weftComm *comm, struct weftLinkSummary *mine,
                                  const int *members, int nmembers) {
  struct weftLinkSummary *all = calloc((size_t)comm->nranks, sizeof *all);
  if (all == NULL) return weftSetError(weftSystemError, "out of memory");
  all[comm->rank] = *mine;
  weftResult_t rc = weftBootstrapAllGather(comm->boot, all, sizeof *all, weftDeadline(comm));
  struct weftLinkSummary worst = {0, 0, 0};
  int n = members != NULL ? nmembers : comm->nranks;
  for (int i = 0; rc == weftSuccess && i < n; i++) {
    const struct weftLinkSummary *s = &all[members != NULL ? members[i] : i];
    if (s->latencyUs > worst.latencyUs) worst.latencyUs = s->latencyUs;
    if (s->bandwidthGBs > 0 && (worst.bandwidthGBs == 0 || s->bandwidthGBs < worst.bandwidthGBs))
      worst.bandwidthGBs = s->bandwidthGBs;
    if (s->slotBytes > 0 && (worst.slotBytes == 0 || s->slotBytes < worst.slotBytes))
      worst.slotBytes = s->slotBytes;
  }
  *mine = worst;
  free(all);
  return rc;
}

static weftResult_t ringAgreeOnCaps(struct weftComm *comm, struct weftRing *ring) {
  struct weftLinkSummary s = {0, 0, 0};
  weftLinkSummaryAdd(&s, &ring->send);
  weftLinkSummaryAdd(&s, &ring->recv);
  WEFTCHECK(weftLinkSummaryAgree(comm, &s, ring->order, ring->n));
  ring->latencyUs = s.latencyUs;
  ring->bandwidthGBs = s.bandwidthGBs;
  ring->pieceBytes = s.slotBytes;
  return weftSuccess;
}

weftResult_t weftRingSetup(struct weftComm *comm, struct weftRing *ring, const int *order, int n,
                           int tag) {
  ring->order = malloc(sizeof(int) * (size_t)n);
  if (ring->order == NULL) return weftSetError(weftSystemError, "out of memory");
  memcpy(ring->order, order, sizeof(int) * (size_t)n);
  ring->n = n;
  ring->index = -1;
  for (int i = 0; i < n; i++)
    if (order[i] == comm->rank) ring->index = i;
  if (ring->index < 0) return weftSetError(weftInternalError, "rank %d is not in its ring", comm->rank);
  ring->next = order[(ring->index + 1) % n];
  ring->prev = order[(ring->index + n - 1) % n];
  struct weftLinkReq reqs[2] = {{ring->next, WEFT_DIR_SEND, tag, &ring->send},
                                {ring->prev, WEFT_DIR_RECV, tag, &ring->recv}};
  WEFTCHECK(weftConnectLinks(comm, reqs, n > 1 ? 2 : 0));
  return ringAgreeOnCaps(comm, ring);
}

void weftRingClose(struct weftRing *ring) {
  weftConnClose(&ring->send);
  weftConnClose(&ring->recv);
  free(ring->order);
  ring->order = NULL;
}

/* The ring's share of the socket links it crosses, from every rank's place: the same on all. */
static double ringCrossGBs(const struct weftComm *comm, const struct weftTopoPlace *places,
                           const int *order) {
  int n = comm->nranks, *hostOf = malloc(sizeof(int) * (size_t)n);
  if (hostOf == NULL) return 0; /* the cost then ignores the crossings; nothing runs differently */
  for (int r = 0; r < n; r++) {
    hostOf[r] = r;
    for (int q = 0; q < r; q++)
      if (comm->peers[q].hostHash == comm->peers[r].hostHash) {
        hostOf[r] = hostOf[q];
        break;
      }
  }
  double gbs = weftTopoRingCrossGBs(places, hostOf, order, n);
  free(hostOf);
  return gbs;
}

/* Ranks grouped by host (hosts in order of their first rank), so the ring crosses between
 * hosts once per host instead of once per rank; inside a host, ordered by package, NUMA node
 * and core from the all-gathered places (lib/topo_place.c), so it crosses between packages
 * once per package boundary. Every rank derives the same order from the same peer table. */
weftResult_t weftRingConnect(struct weftComm *comm) {
  int n = comm->nranks, k = 0;
  int *order = malloc(sizeof(int) * (size_t)n);
  char *placed = calloc((size_t)n, 1);
  struct weftTopoPlace *places = malloc(sizeof *places * (size_t)n);
  if (order == NULL || placed == NULL || places == NULL) {
    free(order);
    free(placed);
    free(places);
    return weftSetError(weftSystemError, "out of memory");
  }
  for (int r = 0; r < n; r++) places[r] = comm->peers[r].place;
  for (int r = 0; r < n; r++) {
    if (placed[r]) continue;
    int first = k;
    for (int q = r; q < n; q++)
      if (!placed[q] && comm->peers[q].hostHash == comm->peers[r].hostHash) {
        order[k++] = q;
        placed[q] = 1;
      }
    weftTopoOrderHost(places, order + first, k - first);
  }
  weftResult_t rc = weftRingSetup(comm, &comm->ring, order, n, WEFT_TAG_RING);
  if (rc == weftSuccess) comm->ring.crossGBs = ringCrossGBs(comm, places, order);
  free(places);
  free(order);
  free(placed);
  return rc;
}
