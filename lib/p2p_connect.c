/* Point-to-point links, made when two ranks first exchange data: both ends pick the transport
 * (the same rule as the rings: the first that can connect them), write their setup blobs,
 * swap them through the bootstrap's pairwise exchange (only the two ranks take part: nobody
 * else is in a call), connect, then swap a second message saying "connected" before the
 * transports may drop the names strangers could attach by (shm unlinks its segment): the
 * other end may not have mapped it until then. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "check.h"
#include "deadline.h"
#include "log.h"
#include "p2p.h"
#include "prims.h"

/* Message tags of the exchange: the blob of the sending or receiving end of the link from the
 * message's sender to its receiver (or back), then each end's "connected". */
enum { TAG_SENDER_BLOB = 1, TAG_RECEIVER_BLOB = 2, TAG_SENDER_UP = 3, TAG_RECEIVER_UP = 4 };

_Static_assert(WEFT_CONN_BLOB_BYTES <= WEFT_BOOT_MSG_BYTES, "a blob fits one bootstrap message");

static weftResult_t linksAlloc(struct weftComm *comm) {
  if (comm->p2p != NULL) return weftSuccess;
  struct weftP2pLinks *l = calloc(1, sizeof *l);
  if (l != NULL) {
    l->send = calloc((size_t)comm->nranks, sizeof *l->send);
    l->recv = calloc((size_t)comm->nranks, sizeof *l->recv);
  }
  if (l == NULL || l->send == NULL || l->recv == NULL) {
    if (l != NULL) free(l->send);
    free(l);
    return weftSetError(weftSystemError, "out of memory for point-to-point links");
  }
  comm->p2p = l;
  return weftSuccess;
}

static struct weftP2pLink *linkOf(struct weftComm *comm, int isSend, int peer) {
  return isSend ? &comm->p2p->send[peer] : &comm->p2p->recv[peer];
}

/* The links ops need that are not up yet, each once (ops to self need none). */
static int missingLinks(struct weftComm *comm, const struct weftP2pOp *ops, int n,
                        struct weftP2pLink **need, int *needSend, int *needPeer) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (ops[i].peer == comm->rank || ops[i].count == 0) continue;
    struct weftP2pLink *l = linkOf(comm, ops[i].isSend, ops[i].peer);
    int seen = l->up;
    for (int j = 0; j < k && !seen; j++) seen = need[j] == l;
    if (seen) continue;
    need[k] = l;
    needSend[k] = ops[i].isSend;
    needPeer[k++] = ops[i].peer;
  }
  return k;
}

static weftResult_t setupEnds(struct weftComm *comm, struct weftP2pLink **need, const int *isSend,
                              const int *peer, int k, struct weftBootMsg *out,
                              struct weftBootMsg *in) {
  for (int i = 0; i < k; i++) {
    struct weftConn *c = &need[i]->conn;
    memset(c, 0, sizeof *c);
    c->dir = isSend[i] ? WEFT_DIR_SEND : WEFT_DIR_RECV;
    WEFTCHECK(weftSelectTransport(comm, peer[i], c));
    memset(&out[i], 0, sizeof out[i]);
    out[i].peer = in[i].peer = peer[i];
    out[i].tag = isSend[i] ? TAG_SENDER_BLOB : TAG_RECEIVER_BLOB;
    in[i].tag = isSend[i] ? TAG_RECEIVER_BLOB : TAG_SENDER_BLOB;
    WEFTCHECK(c->ops->setup(c->state, peer[i], c->dir, c, out[i].data));
  }
  return weftSuccess;
}

/* Every end connects at once (round-robin): a transport's connect may wait on its peer's. */
static weftResult_t connectEnds(struct weftComm *comm, struct weftP2pLink **need, int k,
                                const struct weftBootMsg *in) {
  char *done = calloc((size_t)k, 1);
  if (done == NULL) return weftSetError(weftSystemError, "out of memory");
  struct weftWaiter w;
  weftWaitStart(&w, comm);
  weftResult_t rc = weftSuccess;
  for (int left = k; left > 0 && rc == weftSuccess;) {
    int waitFor = -1;
    for (int i = 0; i < k && rc == weftSuccess; i++) {
      int d = 0;
      if (done[i]) continue;
      rc = need[i]->conn.ops->connect(&need[i]->conn, in[i].data, &d);
      if (d) done[i] = 1, left--;
      else waitFor = need[i]->conn.peer;
    }
    if (rc == weftSuccess && left > 0) rc = weftWaitPause(&w, "connecting a point-to-point link to", waitFor);
  }
  free(done);
  return rc;
}

static weftResult_t confirmEnds(struct weftComm *comm, struct weftP2pLink **need, const int *isSend,
                                int k, struct weftBootMsg *out, struct weftBootMsg *in) {
  for (int i = 0; i < k; i++) {
    memset(out[i].data, 0, sizeof out[i].data);
    out[i].tag = isSend[i] ? TAG_SENDER_UP : TAG_RECEIVER_UP;
    in[i].tag = isSend[i] ? TAG_RECEIVER_UP : TAG_SENDER_UP;
  }
  WEFTCHECK(weftBootstrapExchange(comm->boot, out, k, in, k, weftDeadline(comm)));
  for (int i = 0; i < k; i++) {
    struct weftConn *c = &need[i]->conn;
    if (c->ops->connected != NULL) WEFTCHECK(c->ops->connected(c));
    need[i]->up = 1;
    INFO(WEFT_P2P, "rank %d %s rank %d: point-to-point link up via %s", comm->rank,
         isSend[i] ? "->" : "<-", c->peer, c->ops->name);
  }
  return weftSuccess;
}

static weftResult_t connectMissing(struct weftComm *comm, struct weftP2pLink **need,
                                   const int *isSend, const int *peer, int k) {
  struct weftBootMsg *out = calloc((size_t)k, sizeof *out), *in = calloc((size_t)k, sizeof *in);
  weftResult_t rc = weftSuccess;
  if (out == NULL || in == NULL) rc = weftSetError(weftSystemError, "out of memory");
  if (rc == weftSuccess) rc = setupEnds(comm, need, isSend, peer, k, out, in);
  if (rc == weftSuccess) rc = weftBootstrapExchange(comm->boot, out, k, in, k, weftDeadline(comm));
  if (rc == weftSuccess) rc = connectEnds(comm, need, k, in);
  if (rc == weftSuccess) rc = confirmEnds(comm, need, isSend, k, out, in);
  free(out);
  free(in);
  return rc;
}

/* Whether every link ops need is up already (the steady state: no allocation). */
static int allUp(struct weftComm *comm, const struct weftP2pOp *ops, int n) {
  for (int i = 0; i < n; i++)
    if (ops[i].peer != comm->rank && ops[i].count != 0 && !linkOf(comm, ops[i].isSend, ops[i].peer)->up)
      return 0;
  return 1;
}

weftResult_t weftP2pConnect(struct weftComm *comm, const struct weftP2pOp *ops, int n) {
  WEFTCHECK(linksAlloc(comm));
  if (allUp(comm, ops, n)) return weftSuccess;
  struct weftP2pLink **need = malloc(sizeof *need * (size_t)(n > 0 ? n : 1));
  int *isSend = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  int *peer = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  weftResult_t rc = weftSuccess;
  if (need == NULL || isSend == NULL || peer == NULL) rc = weftSetError(weftSystemError, "out of memory");
  int k = rc == weftSuccess ? missingLinks(comm, ops, n, need, isSend, peer) : 0;
  if (k > 0) {
    rc = connectMissing(comm, need, isSend, peer, k);
    /* A link that did not come up is closed again: a later call may not use half of one. */
    for (int i = 0; rc != weftSuccess && i < k; i++)
      if (!need[i]->up && need[i]->conn.ops != NULL) weftConnClose(&need[i]->conn);
  }
  free(need);
  free(isSend);
  free(peer);
  return rc;
}

int weftP2pLinksUp(const struct weftComm *comm, const int *peers, const int *isSend, int n) {
  const struct weftP2pLinks *l = comm->p2p;
  for (int i = 0; i < n; i++)
    if (l == NULL || !(isSend[i] ? &l->send[peers[i]] : &l->recv[peers[i]])->up) return 0;
  return 1;
}

weftResult_t weftP2pLinks(struct weftComm *comm, const int *peers, const int *isSend, int n,
                          struct weftConn **conns) {
  WEFTCHECK(linksAlloc(comm));
  if (!weftP2pLinksUp(comm, peers, isSend, n)) { /* connecting needs transfers: one element each */
    struct weftP2pOp *ops = calloc((size_t)n, sizeof *ops);
    if (ops == NULL) return weftSetError(weftSystemError, "out of memory");
    for (int i = 0; i < n; i++) ops[i] = (struct weftP2pOp){.isSend = isSend[i], .peer = peers[i], .count = 1};
    weftResult_t rc = weftP2pConnect(comm, ops, n);
    free(ops);
    WEFTCHECK(rc);
  }
  for (int i = 0; i < n; i++) conns[i] = &linkOf(comm, isSend[i], peers[i])->conn;
  return weftSuccess;
}

void weftP2pClose(struct weftComm *comm) {
  struct weftP2pLinks *l = comm->p2p;
  if (l == NULL) return;
  for (int r = 0; r < comm->nranks; r++) {
    if (l->send[r].conn.ops != NULL) weftConnClose(&l->send[r].conn);
    if (l->recv[r].conn.ops != NULL) weftConnClose(&l->recv[r].conn);
  }
  free(l->send);
  free(l->recv);
  free(l);
  comm->p2p = NULL;
}
