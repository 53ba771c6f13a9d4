/* Hierarchical Broadcast and Reduce: chains inside each host and a chain of the hosts' leaders
 * between them, all in one pipeline (every link carries the whole buffer once, in pieces).
 * - Broadcast from root r (host kr): a chain from r around its host's ring (ranks ascending,
 *   wrapping) to the rank before it; its host's leader also sends each piece on to the next
 *   host's leader, and so on along the ring of leaders to the host before kr; every other
 *   leader also starts its host's chain (leader, then its ranks in order). One step per rank:
 *   the root sends, the others receive, copy out and pass on to one or two ranks.
 * - Reduce to root r: the mirror. Each host's chain ends at its leader (the root, on the
 *   root's host: the chain starts at the rank after it); the leaders' chain starts at host kr+1
 *   and ends at kr. A leader adds, in this order, its input, its host chain's partial and the
 *   previous leader's partial; the root's last step divides, for avg.
 * Hops in series: d + (h-1) + (m-1) at most, d the hops from the root to its leader (ring:
 * n - 1): the hosts' chains run side by side. Bytes per link: the buffer, as the ring's chain.
 * Each call also passes a token to its ring successor, so that ranks that disagree on the
 * root meet (below).
 * cost() = (network hops on the longest path) * network step + (its local hops) * local step
 *          + (bytes + (hops - 1) * piece) / network bandwidth (the pipeline fills, then
 *          streams at the network's speed). */
#include <string.h>

#include "check.h"
#include "hier.h"
#include "reduce.h"
#include "ring.h"

/* Who this rank receives from and sends to in a rooted schedule. */
struct chainLinks {
  struct weftConn *sends[2], *recvs[2];
  int nsend, nrecv;
};

static void addSend(struct chainLinks *c, struct weftConn *conn) { c->sends[c->nsend++] = conn; }
static void addRecv(struct chainLinks *c, struct weftConn *conn) { c->recvs[c->nrecv++] = conn; }

/* Broadcast: the root's host chain starts at the root, the others' at their leaders. */
static struct chainLinks broadcastLinks(struct hierState *s, int rank, int root) {
  const struct hierLayout *L = &s->L;
  int k = L->hostOf[rank], li = L->localIndex[rank], m = L->size[k];
  int kr = L->hostOf[root], start = k == kr ? L->localIndex[root] : 0;
  struct chainLinks c = {{NULL, NULL}, {NULL, NULL}, 0, 0};
  if (rank != root) addRecv(&c, li == 0 && k != kr ? &s->inter.recv : &s->local.recv);
  if (li == 0 && (k + 1) % L->h != kr) addSend(&c, &s->inter.send);
  if (m > 1 && (li + 1) % m != start) addSend(&c, &s->local.send);
  return c;
}

/* Reduce: the root's host chain ends at the root, the others' at their leaders; the leaders'
 * chain starts at the host after the root's. Received partials in the order local, leader. */
static struct chainLinks reduceLinks(struct hierState *s, int rank, int root) {
  const struct hierLayout *L = &s->L;
  int k = L->hostOf[rank], li = L->localIndex[rank], m = L->size[k];
  int kr = L->hostOf[root], end = k == kr ? L->localIndex[root] : 0;
  struct chainLinks c = {{NULL, NULL}, {NULL, NULL}, 0, 0};
  if (m > 1 && li != (end + 1) % m) addRecv(&c, &s->local.recv);
  if (li == 0 && k != (kr + 1) % L->h) addRecv(&c, &s->inter.recv);
  if (li != end) addSend(&c, &s->local.send);
  else if (k != kr) addSend(&c, &s->inter.send);
  return c;
}

static weftResult_t broadcastSteps(struct hierState *s, struct weftComm *comm,
                                   const struct weftCollArgs *a) {
  struct chainLinks c = broadcastLinks(s, comm->rank, a->root);
  struct weftPrims p;
  weftHierPrims(&p, comm, s, c.sends, c.nsend, c.recvs, c.nrecv, a);
  if (comm->rank == a->root) {
    if (a->recvbuff != a->sendbuff) memcpy(a->recvbuff, a->sendbuff, a->bytes);
    return weftPrimsSend(&p, a->sendbuff, a->count);
  }
  if (c.nsend > 0) return weftPrimsRecvCopySend(&p, a->recvbuff, a->count);
  return weftPrimsRecv(&p, a->recvbuff, a->count);
}

static weftResult_t reduceSteps(struct hierState *s, struct weftComm *comm,
                                const struct weftCollArgs *a) {
  struct chainLinks c = reduceLinks(s, comm->rank, a->root);
  struct weftPrims p;
  weftHierPrims(&p, comm, s, c.sends, c.nsend, c.recvs, c.nrecv, a);
  if (comm->rank == a->root) return weftPrimsRecvReduceCopy(&p, a->sendbuff, a->recvbuff, a->count);
  if (c.nrecv == 0) return weftPrimsSend(&p, a->sendbuff, a->count);
  return weftPrimsRecvReduceSend(&p, a->sendbuff, a->count);
}

/* ---- ranks that disagree on the root ----
 * The chains are shaped by the root, so ranks that disagree on it can each meet only ranks of
 * their own opinion: 2 hosts of 1 rank both take themselves for the root and only send, and
 * where the one that disagrees ends a host's chain, the others finish that call and the next.
 * So every call also passes a token to its successor on the communicator's ring
 * (weftRingCallToken, algorithms/ring.h): wherever two ranks next to each other on that ring
 * disagree, the later one fails with weftInvalidUsage naming both calls, and closing its
 * links fails the ranks that wait on it with the same. Sent at the start, received at the
 * end: no wait where the ranks agree. */

weftResult_t weftHierBroadcast(struct hierState *s, struct weftComm *comm,
                               const struct weftCollArgs *a) {
  WEFTCHECK(weftRingCallToken(comm, a, 1));
  WEFTCHECK(broadcastSteps(s, comm, a));
  return weftRingCallToken(comm, a, 0);
}

weftResult_t weftHierReduce(struct hierState *s, struct weftComm *comm,
                            const struct weftCollArgs *a) {
  WEFTCHECK(weftRingCallToken(comm, a, 1));
  WEFTCHECK(reduceSteps(s, comm, a));
  return weftRingCallToken(comm, a, 0);
}

/* ---- costs ---- */

/* The longest path of a chain schedule: its local and network hops. */
struct hops {
  int local, net;
};

static double pathCost(const struct hierState *s, const struct weftComm *comm, struct hops hp,
                       size_t bytes) {
  double b = (double)bytes, piece = (double)s->pieceBytes < b ? (double)s->pieceBytes : b;
  int all = hp.local + hp.net;
  return hp.net * weftHierNetStep(s, comm) + hp.local * weftHierLocalStep(s, comm) +
         (b + (all > 1 ? all - 1 : 0) * piece) / (s->netBandwidthGBs * 1e3);
}

static struct hops longer(struct hops a, int local, int net, const struct hierState *s,
                          const struct weftComm *comm) {
  double ta = a.local * weftHierLocalStep(s, comm) + a.net * weftHierNetStep(s, comm);
  double tb = local * weftHierLocalStep(s, comm) + net * weftHierNetStep(s, comm);
  return tb > ta ? (struct hops){local, net} : a;
}

/* Broadcast: to the root's leader (d hops), then j leaders on and down that host's chain. */
double weftHierBroadcastCost(const struct hierState *s, const struct weftComm *comm, size_t bytes,
                             int root) {
  const struct hierLayout *L = &s->L;
  int kr = L->hostOf[root], mr = L->size[kr], d = (mr - L->localIndex[root]) % mr;
  struct hops hp = {mr - 1, 0};
  for (int j = 1; j < L->h; j++) hp = longer(hp, d + L->size[(kr + j) % L->h] - 1, j, s, comm);
  return pathCost(s, comm, hp, bytes);
}

/* Reduce: up host kr+j's chain to its leader, h - j leaders on, then to the root. */
double weftHierReduceCost(const struct hierState *s, const struct weftComm *comm, size_t bytes,
                          int root) {
  const struct hierLayout *L = &s->L;
  int kr = L->hostOf[root], lr = L->localIndex[root];
  struct hops hp = {L->size[kr] - 1, 0};
  for (int j = 1; j < L->h; j++) hp = longer(hp, L->size[(kr + j) % L->h] - 1 + lr, L->h - j, s, comm);
  return pathCost(s, comm, hp, bytes);
}
