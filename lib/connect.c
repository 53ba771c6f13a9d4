/* Ring connections: pick a transport per link (first registered that says yes), exchange the
 * setup blobs through the bootstrap, connect. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "param.h"
#include "prims.h"

/* Whether WEFT_TRANSPORTS (a comma list; empty = all) allows this transport. */
static int transportAllowed(const char *name) {
  const char *list = weftParamTransports();
  if (*list == '\0') return 1;
  size_t len = strlen(name);
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncasecmp(p, name, n) == 0) return 1;
    p += n + (end ? 1 : 0);
  }
  return 0;
}

weftResult_t weftTransportsInit(struct weftComm *comm) {
  for (int t = 0; weftTransports[t] != NULL; t++) {
    const struct weftTransportOps *ops = weftTransports[t];
    char why[256] = "";
    if (!transportAllowed(ops->name)) continue;
    if (!ops->query(why, sizeof why)) {
      INFO(WEFT_INIT, "transport %s unavailable: %s", ops->name, why);
      continue;
    }
    WEFTCHECK(ops->init(comm, &comm->transportState[t]));
  }
  return weftSuccess;
}

void weftTransportsFinalize(struct weftComm *comm) {
  for (int t = 0; weftTransports[t] != NULL; t++)
    if (comm->transportState[t] != NULL) {
      weftTransports[t]->finalize(comm->transportState[t]);
      comm->transportState[t] = NULL;
    }
}

static weftResult_t selectTransport(struct weftComm *comm, int peer, struct weftConn *c) {
  for (int t = 0; weftTransports[t] != NULL; t++) {
    if (comm->transportState[t] == NULL) continue;
    int ok = 0;
    WEFTCHECK(weftTransports[t]->canConnect(comm->transportState[t], &comm->peers[comm->rank],
                                            &comm->peers[peer], &ok, &c->caps));
    if (ok) {
      c->ops = weftTransports[t];
      c->state = comm->transportState[t];
      INFO(WEFT_INIT, "rank %d <-> rank %d via %s (%.2f us, %.1f GB/s)", comm->rank, peer,
           c->ops->name, c->caps.latencyUs, c->caps.bandwidthGBs);
      return weftSuccess;
    }
  }
  return weftSetError(weftSystemError,
                      "no transport can connect rank %d (%s) to rank %d (%s); WEFT_TRANSPORTS=\"%s\"",
                      comm->rank, comm->peers[comm->rank].hostname, peer,
                      comm->peers[peer].hostname, weftParamTransports());
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

static weftResult_t ringOrder(struct weftComm *comm) {
  struct weftRing *ring = &comm->ring;
  ring->order = malloc(sizeof(int) * (size_t)comm->nranks);
  if (ring->order == NULL) return weftSetError(weftSystemError, "out of memory");
  for (int i = 0; i < comm->nranks; i++) ring->order[i] = i;
  ring->index = comm->rank;
  ring->next = ring->order[(ring->index + 1) % comm->nranks];
  ring->prev = ring->order[(ring->index + comm->nranks - 1) % comm->nranks];
  return weftSuccess;
}

weftResult_t weftRingConnect(struct weftComm *comm) {
  struct weftRing *ring = &comm->ring;
  WEFTCHECK(ringOrder(comm));
  if (comm->nranks == 1) return weftSuccess;
  size_t per = 2 * WEFT_CONN_BLOB_BYTES; /* [send blob][recv blob] of each rank */
  char *blobs = calloc((size_t)comm->nranks, per);
  if (blobs == NULL) return weftSetError(weftSystemError, "out of memory");
  char *mine = blobs + per * (size_t)comm->rank;
  weftResult_t rc;
  WEFTCHECKGOTO(selectTransport(comm, ring->next, &ring->send), rc, out);
  WEFTCHECKGOTO(selectTransport(comm, ring->prev, &ring->recv), rc, out);
  WEFTCHECKGOTO(ring->send.ops->setup(ring->send.state, ring->next, WEFT_DIR_SEND, &ring->send, mine),
                rc, out);
  WEFTCHECKGOTO(ring->recv.ops->setup(ring->recv.state, ring->prev, WEFT_DIR_RECV, &ring->recv,
                                      mine + WEFT_CONN_BLOB_BYTES),
                rc, out);
  WEFTCHECKGOTO(weftBootstrapAllGather(comm->boot, blobs, per, weftDeadline(comm)), rc, out);
  WEFTCHECKGOTO(connectUntilDone(comm, &ring->send,
                                 blobs + per * (size_t)ring->next + WEFT_CONN_BLOB_BYTES),
                rc, out);
  WEFTCHECKGOTO(connectUntilDone(comm, &ring->recv, blobs + per * (size_t)ring->prev), rc, out);
  WEFTCHECKGOTO(weftBootstrapBarrier(comm->boot, weftDeadline(comm)), rc, out);
  if (ring->send.ops->connected) WEFTCHECKGOTO(ring->send.ops->connected(&ring->send), rc, out);
  if (ring->recv.ops->connected) WEFTCHECKGOTO(ring->recv.ops->connected(&ring->recv), rc, out);
out:
  free(blobs);
  return rc;
}

void weftRingClose(struct weftComm *comm) {
  struct weftRing *ring = &comm->ring;
  if (ring->send.ops != NULL) ring->send.ops->close(&ring->send);
  if (ring->recv.ops != NULL) ring->recv.ops->close(&ring->recv);
  memset(&ring->send, 0, sizeof ring->send);
  memset(&ring->recv, 0, sizeof ring->recv);
  free(ring->order);
  ring->order = NULL;
}
