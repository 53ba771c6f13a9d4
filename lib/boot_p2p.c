/* Bootstrap: weftBootstrapExchange, small messages between any two ranks (bootstrap.h has the
 * contract, boot_auth.c the wire format).
 *
 * How it works: every message has a TCP connection of its own, dialed to the receiver's
 * listener (kept open for the communicator's life): the listener's nonce, the sender's hello
 * (kind P2P, its rank) with the message, the listener's answer once it has stored it. All the
 * dials and everything the listener holds advance in one poll loop, so a rank waiting for its
 * own messages to be stored keeps storing everybody else's: any pattern of messages completes,
 * whatever order each rank lists them in. The messages to one peer leave one after another
 * (the next is dialed once the previous is stored), so those of one sender and tag arrive in
 * order; different peers are dialed at once (up to DIALS_IN_FLIGHT). A message nobody asked
 * for yet is stashed in b (boot_serve.c). While it waits for messages, the listeners of the
 * ranks it waits for are probed every PROBE_INTERVAL_MS: one that refuses connections is gone
 * (each rank's listener outlives its every exchange). A ring hello that arrives meanwhile is
 * kept for the ring a split will form through this listener. */
#include "boot_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "check.h"
#include "log.h"

#define DIALS_IN_FLIGHT 64
#define PROBES_IN_FLIGHT 8
#define PROBE_INTERVAL_MS 250
/* Ring hellos held for the next ring (unchecked: the ring's secret is a split's). */
#define MAX_RING_HELLOS 64
/* Peers a timeout names, of each kind. */
#define TIMEOUT_LISTED 8

/* The messages to one peer: order[next..end) of struct exchange, sent one after another. */
struct sendQueue {
  int peer, next, end;
  int dialing; /* its message order[next] is on a dial */
};

struct p2pDial {
  struct bootDial d;
  int queue;
};

struct p2pProbe {
  int fd, peer;
  int64_t deadlineMs;
};

struct exchange {
  struct weftBootstrap *b;
  const struct weftBootMsg *out;
  int *order; /* indices of out[] to other ranks, by peer, then in the caller's order */
  struct sendQueue *queues;
  int nqueues, nextQueue, sendsLeft;
  struct p2pDial *dials;
  int ndials;
  struct p2pProbe probes[PROBES_IN_FLIGHT];
  int nprobes, probeCursor;
  int64_t nextProbeMs;
  struct bootWants wants;
  struct pollList polls; /* [the listener and what it holds][dials][probes] */
  struct servePolls serve;
  size_t dialPolls, probePolls;
  int64_t startMs, deadlineMs;
};

/* ---- Arguments, and what needs no connection ---- */

static weftResult_t checkPeers(const struct weftBootstrap *b, const struct weftBootMsg *msgs, int n,
                               const char *what) {
  for (int i = 0; i < n; i++)
    if (msgs[i].peer < 0 || msgs[i].peer >= b->nranks)
      return weftSetError(weftInvalidArgument,
                          "bootstrap: exchange: %s[%d].peer = %d is not a rank of this "
                          "communicator (0..%d)",
                          what, i, msgs[i].peer, b->nranks - 1);
  return weftSuccess;
}

static weftResult_t checkArgs(const struct weftBootstrap *b, const struct weftBootMsg *out,
                              int nout, const struct weftBootMsg *in, int nin) {
  if (b == NULL)
    return weftSetError(weftInvalidArgument, "bootstrap: exchange with a NULL bootstrap");
  if (nout < 0 || nin < 0 || (nout > 0 && out == NULL) || (nin > 0 && in == NULL))
    return weftSetError(weftInvalidArgument,
                        "bootstrap: exchange of %d messages out (%s) and %d in (%s)", nout,
                        out ? "given" : "NULL", nin, in ? "given" : "NULL");
  WEFTCHECK(checkPeers(b, out, nout, "out"));
  return checkPeers(b, in, nin, "in");
}

struct peerIndex {
  int peer, index;
};

static int byPeerThenIndex(const void *x, const void *y) {
  const struct peerIndex *a = x, *c = y;
  if (a->peer != c->peer) return a->peer < c->peer ? -1 : 1;
  return (a->index > c->index) - (a->index < c->index);
}

/* The queues of messages to other ranks. */
static weftResult_t buildQueues(struct exchange *ex, int nout) {
  struct peerIndex *sorted = calloc((size_t)nout + 1, sizeof *sorted);
  ex->order = calloc((size_t)nout + 1, sizeof *ex->order);
  ex->queues = calloc((size_t)nout + 1, sizeof *ex->queues);
  ex->dials = calloc(DIALS_IN_FLIGHT, sizeof *ex->dials);
  if (sorted == NULL || ex->order == NULL || ex->queues == NULL || ex->dials == NULL) {
    free(sorted);
    return weftSetError(weftSystemError, "bootstrap: out of memory for an exchange");
  }
  int n = 0;
  for (int i = 0; i < nout; i++)
    if (ex->out[i].peer != ex->b->rank) sorted[n++] = (struct peerIndex){ex->out[i].peer, i};
  qsort(sorted, (size_t)n, sizeof *sorted, byPeerThenIndex);
  for (int i = 0; i < n; i++) {
    ex->order[i] = sorted[i].index;
    if (i == 0 || sorted[i].peer != sorted[i - 1].peer)
      ex->queues[ex->nqueues++] = (struct sendQueue){.peer = sorted[i].peer, .next = i};
    ex->queues[ex->nqueues - 1].end = i + 1;
  }
  ex->sendsLeft = n;
  free(sorted);
  return weftSuccess;
}

/* Messages to this rank itself are copied: after the stashed ones, which came first. */
static weftResult_t deliverLocal(struct exchange *ex, int nout) {
  struct weftBootstrap *b = ex->b;
  weftBootServeTakeStashed(b, &ex->wants);
  for (int i = 0; i < nout; i++) {
    if (ex->out[i].peer != b->rank) continue;
    if (weftBootServeDeliver(b, b->rank, ex->out[i].tag, ex->out[i].data) != 0)
      return weftSetError(weftInvalidUsage,
                          "bootstrap: rank %d holds %d messages to itself it has not asked for "
                          "(or is out of memory); out[%d] (tag %u) is refused",
                          b->rank, WEFT_BOOT_STASH_PER_SENDER, i, ex->out[i].tag);
  }
  for (int j = 0; j < ex->wants.nin; j++)
    if (!ex->wants.filled[j] && ex->wants.in[j].peer == b->rank)
      return weftSetError(weftInvalidUsage,
                          "bootstrap: rank %d asks itself for a message with tag %u (in[%d]) "
                          "that it has not sent, in this call or before",
                          b->rank, ex->wants.in[j].tag, j);
  return weftSuccess;
}

/* ---- Dials: one per message ---- */

static int gone(int rc) { return rc == ECONNREFUSED || rc == EHOSTUNREACH || rc == ENETUNREACH; }

static weftResult_t goneError(const struct exchange *ex, int peer, const char *why) {
  char name[WEFT_SOCK_NAME_MAX];
  return weftSetError(weftRemoteError,
                      "bootstrap: rank %d (%s) is gone: its listener refuses connections, so "
                      "rank %d %s",
                      peer, peerName(ex->b, peer, name), ex->b->rank, why);
}

static weftResult_t dialFailed(const struct exchange *ex, const struct p2pDial *pd, int rc) {
  const struct sendQueue *q = &ex->queues[pd->queue];
  uint32_t tag = ex->out[ex->order[q->next]].tag;
  char name[WEFT_SOCK_NAME_MAX], text[160];
  if (gone(rc)) {
    snprintf(text, sizeof text, "cannot deliver its message with tag %u", tag);
    return goneError(ex, q->peer, text);
  }
  if (rc == WEFT_SOCK_CLOSED && pd->d.state == DIAL_AWAIT_ACK)
    return weftSetError(weftRemoteError,
                        "bootstrap: rank %d (%s) refused rank %d's message with tag %u (closed "
                        "the connection): different secret or nranks?",
                        q->peer, peerName(ex->b, q->peer, name), ex->b->rank, tag);
  return weftSetError(weftRemoteError,
                      "bootstrap: rank %d failed %s rank %d (%s) with its message with tag %u: %s",
                      ex->b->rank, weftBootDialWaitingFor(pd->d.state), q->peer,
                      peerName(ex->b, q->peer, name), tag,
                      weftSockStatusText(rc, text, sizeof text));
}

/* Starts a dial for every queue that has a message to send and none on a dial, in turn. */
static weftResult_t dialsStart(struct exchange *ex) {
  for (int n = 0; n < ex->nqueues && ex->ndials < DIALS_IN_FLIGHT; n++) {
    int qi = ex->nextQueue;
    ex->nextQueue = (ex->nextQueue + 1) % ex->nqueues;
    struct sendQueue *q = &ex->queues[qi];
    if (q->dialing || q->next == q->end) continue;
    struct p2pDial *pd = &ex->dials[ex->ndials];
    pd->queue = qi;
    int rc = weftBootDialStart(&pd->d, &ex->b->peers[q->peer]);
    if (rc != 0) return dialFailed(ex, pd, rc);
    q->dialing = 1;
    ex->ndials++;
  }
  return weftSuccess;
}

static void dialRemove(struct exchange *ex, int k) {
  ex->queues[ex->dials[k].queue].dialing = 0;
  ex->dials[k] = ex->dials[--ex->ndials];
}

/* The answer is in: the message is stored (the next to that peer may go), or refused. */
static weftResult_t dialAnswered(struct exchange *ex, int k) {
  struct weftBootstrap *b = ex->b;
  struct p2pDial *pd = &ex->dials[k];
  struct sendQueue *q = &ex->queues[pd->queue];
  uint32_t tag = ex->out[ex->order[q->next]].tag;
  char name[WEFT_SOCK_NAME_MAX];
  int verdict = weftBootstrapCheckMsgReply(b->secret, pd->d.clientNonce, pd->d.serverNonce, tag,
                                           pd->d.in);
  if (verdict < 0)
    return weftSetError(weftRemoteError,
                        "bootstrap: rank %d (%s) answered rank %d's message with tag %u with a "
                        "wrong MAC",
                        q->peer, peerName(b, q->peer, name), b->rank, tag);
  if (verdict == 0)
    return weftSetError(weftRemoteError,
                        "bootstrap: rank %d (%s) refused rank %d's message with tag %u: it holds "
                        "%d messages of rank %d that it has not asked for",
                        q->peer, peerName(b, q->peer, name), b->rank, tag,
                        WEFT_BOOT_STASH_PER_SENDER, b->rank);
  /* This side knows the exchange is complete: a reset, so neither side keeps TIME_WAIT. */
  weftSocketCloseAbortive(&pd->d.fd, 1);
  q->next++;
  ex->sendsLeft--;
  dialRemove(ex, k);
  return weftSuccess;
}

static weftResult_t dialStep(struct exchange *ex, int k) {
  struct weftBootstrap *b = ex->b;
  struct p2pDial *pd = &ex->dials[k];
  struct bootDial *d = &pd->d;
  int rc = weftBootDialProgress(d);
  if (rc == 0 && d->state == DIAL_COMPOSE) {
    const struct weftBootMsg *m = &ex->out[ex->order[ex->queues[pd->queue].next]];
    WEFTCHECK(weftBootDialHello(d, b->secret, HELLO_P2P, b->rank, b->nranks, &b->listenAddr));
    weftBootMsgBuild(d->out + d->outLen, b->secret, d->clientNonce, d->serverNonce, m->tag,
                     m->data);
    d->outLen += MSG_WIRE_BYTES;
    rc = weftBootDialProgress(d);
  }
  if (rc != 0) return dialFailed(ex, pd, rc);
  return d->state == DIAL_ACKED ? dialAnswered(ex, k) : weftSuccess;
}

/* ---- Probes of the ranks this call waits for ---- */

static int probing(const struct exchange *ex, int peer) {
  for (int k = 0; k < ex->nprobes; k++)
    if (ex->probes[k].peer == peer) return 1;
  return 0;
}

static weftResult_t probeGone(const struct exchange *ex, int peer) {
  char why[160];
  for (int j = 0; j < ex->wants.nin; j++)
    if (!ex->wants.filled[j] && ex->wants.in[j].peer == peer) {
      snprintf(why, sizeof why, "will never get the message with tag %u it waits for from it",
               ex->wants.in[j].tag);
      break;
    }
  return goneError(ex, peer, why);
}

/* Every PROBE_INTERVAL_MS, probes of the next few ranks this call still waits for. */
static weftResult_t probesStart(struct exchange *ex, int64_t now) {
  const struct bootWants *w = &ex->wants;
  if (w->left == 0 || now < ex->nextProbeMs) return weftSuccess;
  ex->nextProbeMs = now + PROBE_INTERVAL_MS;
  for (int n = 0; n < w->nin && ex->nprobes < PROBES_IN_FLIGHT; n++) {
    int j = ex->probeCursor;
    ex->probeCursor = (ex->probeCursor + 1) % w->nin;
    int peer = w->in[j].peer;
    if (w->filled[j] || peer == ex->b->rank || probing(ex, peer)) continue;
    struct p2pProbe *p = &ex->probes[ex->nprobes];
    int rc = weftSocketConnectStart(&ex->b->peers[peer], &p->fd);
    if (gone(rc)) return probeGone(ex, peer);
    if (rc != 0) continue; /* no verdict (out of descriptors, ...): the next round tries again */
    p->peer = peer;
    p->deadlineMs = now + RING_PROBE_TIMEOUT_MS;
    ex->nprobes++;
  }
  return weftSuccess;
}

static void probeRemove(struct exchange *ex, int k) {
  /* Nothing was sent: a reset leaves no TIME_WAIT, and the listener drops it at once. */
  weftSocketCloseAbortive(&ex->probes[k].fd, 1);
  ex->probes[k] = ex->probes[--ex->nprobes];
}

static weftResult_t probeStep(struct exchange *ex, int k) {
  int peer = ex->probes[k].peer;
  int rc = weftSocketConnectResult(ex->probes[k].fd);
  probeRemove(ex, k);
  return gone(rc) ? probeGone(ex, peer) : weftSuccess;
}

/* A probe without an answer says nothing: only a refusal means the rank is gone. */
static void probesExpire(struct exchange *ex, int64_t now) {
  for (int k = ex->nprobes; k-- > 0;)
    if (now >= ex->probes[k].deadlineMs) probeRemove(ex, k);
}

/* ---- The loop ---- */

/* A complete hello that is no message for b: a ring's is kept for the next ring formed
 * through this listener (a split, whose secret is not b's, checks it); others are dropped. */
static void exchangeOnHello(void *ctx, struct pendingSet *set, size_t i) {
  struct exchange *ex = ctx;
  struct weftBootstrap *b = ex->b;
  const struct pendingPeer *peer = &set->peers[i];
  uint32_t kind = weftGetBe32(peer->hello + HELLO_PAYLOAD_OFFSET);
  if (kind == HELLO_RING) {
    INFO(WEFT_BOOT, "bootstrap: %s keeps the ring hello of %s for the next ring", set->owner,
         peer->name);
    weftBootPendingMove(set, i, &b->serve.ringHellos, MAX_RING_HELLOS);
    return;
  }
  struct weftBootstrapHello h;
  char why[160];
  const char *refusal = weftBootstrapParseHello(b->secret, peer->nonce, peer->hello, &h);
  if (refusal == NULL) {
    snprintf(why, sizeof why, "a hello of kind %u, which no exchange takes", h.kind);
    refusal = why;
  }
  weftBootPendingDrop(set, i, WEFT_LOG_WARN, refusal);
}

static weftResult_t exchangePoll(struct exchange *ex) {
  struct pollList *polls = &ex->polls;
  polls->count = 0;
  int ok = weftBootServePolls(ex->b, polls, &ex->serve) == 0;
  ex->dialPolls = polls->count;
  for (int k = 0; ok && k < ex->ndials; k++)
    ok = weftBootPollAdd(polls, ex->dials[k].d.fd, weftBootDialEvents(&ex->dials[k].d)) == 0;
  ex->probePolls = polls->count;
  for (int k = 0; ok && k < ex->nprobes; k++)
    ok = weftBootPollAdd(polls, ex->probes[k].fd, POLLOUT) == 0;
  if (!ok) return weftSetError(weftSystemError, "bootstrap: out of memory in an exchange");
  int64_t wake = weftBootServeEarliest(ex->b, ex->deadlineMs);
  if (ex->wants.left > 0 && ex->nextProbeMs < wake) wake = ex->nextProbeMs;
  for (int k = 0; k < ex->nprobes; k++)
    if (ex->probes[k].deadlineMs < wake) wake = ex->probes[k].deadlineMs;
  if (weftPollUntil(polls->fds, polls->count, wake) < 0)
    return weftSetSysError(errno, "bootstrap: poll during rank %d's exchange", ex->b->rank);
  return weftSuccess;
}

/* Appends to text[*o..len) what it can of a formatted piece. */
static void appendf(char *text, size_t len, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void appendf(char *text, size_t len, size_t *o, const char *fmt, ...) {
  if (*o >= len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text + *o, len - *o, fmt, ap);
  va_end(ap);
  if (n > 0) *o += (size_t)n < len - *o ? (size_t)n : len - *o;
}

static void describeUnheard(const struct exchange *ex, char *text, size_t len, size_t *o) {
  int listed = 0, more = 0;
  for (int j = 0; j < ex->wants.nin; j++) {
    if (ex->wants.filled[j]) continue;
    if (listed == TIMEOUT_LISTED) {
      more++;
      continue;
    }
    appendf(text, len, o, "%s rank %d (tag %u)", listed++ ? "," : "; not yet heard from",
            ex->wants.in[j].peer, ex->wants.in[j].tag);
  }
  if (more > 0) appendf(text, len, o, " and %d more", more);
}

static void describeUnsent(const struct exchange *ex, char *text, size_t len, size_t *o) {
  int listed = 0, more = 0;
  for (int qi = 0; qi < ex->nqueues; qi++) {
    const struct sendQueue *q = &ex->queues[qi];
    if (q->next == q->end) continue;
    if (listed == TIMEOUT_LISTED) {
      more += q->end - q->next;
      continue;
    }
    const char *doing = NULL;
    for (int k = 0; k < ex->ndials; k++)
      if (ex->dials[k].queue == qi) doing = weftBootDialWaitingFor(ex->dials[k].d.state);
    appendf(text, len, o, "%s rank %d (tag %u: %s%s", listed++ ? "," : "; not yet reached",
            q->peer, ex->out[ex->order[q->next]].tag,
            doing ? doing : "queued behind this rank's other dials", doing ? " it" : "");
    if (q->end - q->next > 1) appendf(text, len, o, ", %d more after it", q->end - q->next - 1);
    appendf(text, len, o, ")");
  }
  if (more > 0) appendf(text, len, o, " and %d more messages", more);
}

static weftResult_t exchangeTimeout(const struct exchange *ex) {
  char text[900];
  size_t o = 0;
  appendf(text, sizeof text, &o, "bootstrap: rank %d's exchange timed out after %lld ms",
          ex->b->rank, (long long)(weftNowMs() - ex->startMs));
  describeUnheard(ex, text, sizeof text, &o);
  describeUnsent(ex, text, sizeof text, &o);
  return weftSetError(weftTimeout, "%s", text);
}

static weftResult_t exchangeBadMac(const struct exchange *ex) {
  char name[WEFT_SOCK_NAME_MAX];
  int from = ex->wants.badFrom;
  return weftSetError(weftRemoteError,
                      "bootstrap: rank %d (%s) sent rank %d a message with a wrong MAC (refused)",
                      from, peerName(ex->b, from, name), ex->b->rank);
}

static weftResult_t exchangeLoop(struct exchange *ex) {
  struct weftBootstrap *b = ex->b;
  ex->nextProbeMs = ex->startMs + PROBE_INTERVAL_MS;
  while (ex->sendsLeft > 0 || ex->wants.left > 0) {
    int64_t now = weftNowMs();
    if (now >= ex->deadlineMs) return exchangeTimeout(ex);
    WEFTCHECK(dialsStart(ex));
    WEFTCHECK(probesStart(ex, now));
    WEFTCHECK(exchangePoll(ex));
    const struct pollfd *fds = ex->polls.fds;
    weftBootServeHandle(b, &ex->polls, &ex->serve, exchangeOnHello, ex);
    if (ex->wants.badFrom >= 0) return exchangeBadMac(ex);
    /* Last to first: removing one moves the last into its place. */
    for (int k = ex->ndials; k-- > 0;)
      if (fds[ex->dialPolls + (size_t)k].revents != 0) WEFTCHECK(dialStep(ex, k));
    for (int k = ex->nprobes; k-- > 0;)
      if (fds[ex->probePolls + (size_t)k].revents != 0) WEFTCHECK(probeStep(ex, k));
    now = weftNowMs();
    probesExpire(ex, now);
    weftBootServeExpire(b, now);
  }
  return weftSuccess;
}

static void exchangeFree(struct exchange *ex) {
  /* Only after a failure are dials left: closed in order, so their listeners see who left. */
  while (ex->ndials > 0) {
    weftSocketClose(&ex->dials[ex->ndials - 1].d.fd);
    dialRemove(ex, ex->ndials - 1);
  }
  while (ex->nprobes > 0) probeRemove(ex, ex->nprobes - 1);
  ex->b->serve.wants = NULL;
  weftBootServeSweep(ex->b);
  free(ex->wants.filled);
  free(ex->order);
  free(ex->queues);
  free(ex->dials);
  free(ex->polls.fds);
}

weftResult_t weftBootstrapExchange(struct weftBootstrap *b, const struct weftBootMsg *out, int nout,
                                   struct weftBootMsg *in, int nin, int64_t deadlineMs) {
  WEFTCHECK(checkArgs(b, out, nout, in, nin));
  struct exchange ex = {.b = b,
                        .out = out,
                        .wants = {.in = in, .nin = nin, .left = nin, .badFrom = -1},
                        .startMs = weftNowMs(),
                        .deadlineMs = deadlineMs};
  weftResult_t res = weftSuccess;
  ex.wants.filled = calloc((size_t)nin + 1, 1);
  if (ex.wants.filled == NULL)
    res = weftSetError(weftSystemError, "bootstrap: out of memory for an exchange");
  else
    res = buildQueues(&ex, nout);
  if (res == weftSuccess) {
    b->serve.wants = &ex.wants;
    res = deliverLocal(&ex, nout);
  }
  if (res == weftSuccess) res = exchangeLoop(&ex);
  exchangeFree(&ex);
  return res;
}
