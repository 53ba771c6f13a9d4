/* Bootstrap: what a rank's listener holds between calls, and serving it. The listener stays
 * open for the communicator's life; every loop that waits on it (weftBootstrapExchange, and
 * the formation of a ring through it at init or in a split) serves all of it, so a message
 * dialed while this rank forms a ring is stored, and a ring hello arriving during an exchange
 * is kept for the ring (boot_internal.h, struct bootServer).
 *
 * A connection goes: accepted and greeted with a nonce (boot_listen.c's pending set) -> its
 * hello is complete -> a message's hello proving b's secret: the message is read, checked,
 * stored (into the exchange's requests, else the stash) and answered -> closing: the dialer,
 * which knows the exchange is complete once it has the answer, resets the connection, and
 * this side closes when it sees that, so neither keeps it in TIME_WAIT. Any other complete
 * hello goes to the loop's own handler (a ring's: boot_ring.c, boot_p2p.c). */
#include "boot_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "log.h"

/* Answered connections held until their dialer resets them; beyond this the oldest is closed
 * at once (with a reset where the dialer has everything, as it then has). */
#define MAX_CLOSING 256
/* Messages one sender may have coming in at once: a rank sends its messages to one peer one
 * after another, so more is a misbehaving rank holding this listener's descriptors. */
#define MAX_INBOUND_PER_SENDER 4

void weftBootServeStart(struct weftBootstrap *b) {
  char name[WEFT_SOCK_NAME_MAX];
  struct bootServer *s = &b->serve;
  weftSockAddrName(&b->listenAddr, name);
  snprintf(s->pending.owner, sizeof s->pending.owner, "rank %d's listener at %s", b->rank, name);
  snprintf(s->ringHellos.owner, sizeof s->ringHellos.owner, "%s", s->pending.owner);
}

/* ---- The requests of the exchange in progress, and the stash ---- */

static int wantsFrom(const struct bootWants *w, int from) {
  for (int j = 0; w != NULL && j < w->nin; j++)
    if (!w->filled[j] && w->in[j].peer == from) return 1;
  return 0;
}

/* Fills the first unfilled request for (from, tag): 1, or 0 when there is none. */
static int wantsFill(struct bootWants *w, int from, uint32_t tag, const uint8_t *data) {
  for (int j = 0; w != NULL && j < w->nin; j++) {
    if (w->filled[j] || w->in[j].peer != from || w->in[j].tag != tag) continue;
    memcpy(w->in[j].data, data, MSG_BYTES);
    w->filled[j] = 1;
    w->left--;
    return 1;
  }
  return 0;
}

int weftBootServeDeliver(struct weftBootstrap *b, int from, uint32_t tag, const uint8_t *data) {
  struct bootServer *s = &b->serve;
  if (wantsFill(s->wants, from, tag, data)) return 0;
  if (s->stashFrom == NULL) s->stashFrom = calloc((size_t)b->nranks, sizeof *s->stashFrom);
  if (s->stashFrom == NULL) return -1;
  if (s->stashFrom[from] >= WEFT_BOOT_STASH_PER_SENDER) return -1;
  if (s->nstash == s->stashCap) {
    size_t cap = s->stashCap ? 2 * s->stashCap : 16;
    struct stashedMsg *stash = realloc(s->stash, cap * sizeof *stash);
    if (stash == NULL) return -1;
    s->stash = stash;
    s->stashCap = cap;
  }
  struct stashedMsg *m = &s->stash[s->nstash++];
  m->from = from;
  m->tag = tag;
  memcpy(m->data, data, MSG_BYTES);
  s->stashFrom[from]++;
  return 0;
}

void weftBootServeTakeStashed(struct weftBootstrap *b, struct bootWants *wants) {
  struct bootServer *s = &b->serve;
  size_t kept = 0;
  for (size_t i = 0; i < s->nstash; i++) {
    struct stashedMsg *m = &s->stash[i];
    if (wantsFill(wants, m->from, m->tag, m->data))
      s->stashFrom[m->from]--;
    else
      s->stash[kept++] = *m; /* in arrival order still */
  }
  s->nstash = kept;
}

/* ---- Connections: answered ones waiting for the dialer's reset ---- */

static void closingRemove(struct bootServer *s, size_t k) {
  weftSocketCloseAbortive(&s->closing[k], 0); /* the dialer closed: a reset, no TIME_WAIT */
  s->closing[k] = s->closing[--s->nclosing];
}

static void closingAdd(struct bootServer *s, int fd) {
  if (s->nclosing == MAX_CLOSING) closingRemove(s, 0);
  if (s->nclosing == s->closingCap) {
    size_t cap = s->closingCap ? 2 * s->closingCap : 16;
    int *closing = realloc(s->closing, cap * sizeof *closing);
    if (closing == NULL) { /* the dialer has its answer: nothing is lost by closing now */
      weftSocketCloseAbortive(&fd, 0);
      return;
    }
    s->closing = closing;
    s->closingCap = cap;
  }
  s->closing[s->nclosing++] = fd;
}

void weftBootServeSweep(struct weftBootstrap *b) {
  struct bootServer *s = &b->serve;
  for (size_t k = s->nclosing; k-- > 0;) {
    struct pollfd p = {.fd = s->closing[k], .events = POLLIN};
    if (poll(&p, 1, 0) == 1) closingRemove(s, k);
  }
}

/* ---- Connections: messages coming in ---- */

static void inboundDrop(struct bootServer *s, size_t k, int level, const char *why) {
  struct inboundMsg *in = &s->inbound[k];
  WEFT_LOG(level, WEFT_BOOT, "bootstrap: %s dropped the message from rank %d (%s): %s",
           s->pending.owner, in->from, in->name, why);
  weftSocketClose(&in->fd);
  s->inbound[k] = s->inbound[--s->ninbound];
}

/* Pending peer i sent the hello of a message from rank h->rank: read the message next. */
static void inboundStart(struct weftBootstrap *b, size_t i, const struct weftBootstrapHello *h) {
  struct bootServer *s = &b->serve;
  int already = 0;
  for (size_t k = 0; k < s->ninbound; k++) already += s->inbound[k].from == (int)h->rank;
  if (already >= MAX_INBOUND_PER_SENDER) {
    weftBootPendingDrop(&s->pending, i, WEFT_LOG_WARN,
                        "its rank has too many messages coming in at once");
    return;
  }
  if (s->ninbound == s->inboundCap) {
    size_t cap = s->inboundCap ? 2 * s->inboundCap : 8;
    struct inboundMsg *inbound = realloc(s->inbound, cap * sizeof *inbound);
    if (inbound == NULL) {
      weftBootPendingDrop(&s->pending, i, WEFT_LOG_WARN, "out of memory for its message");
      return;
    }
    s->inbound = inbound;
    s->inboundCap = cap;
  }
  const struct pendingPeer *peer = &s->pending.peers[i];
  struct inboundMsg *in = &s->inbound[s->ninbound++];
  memset(in, 0, sizeof *in);
  in->from = (int)h->rank;
  in->deadlineMs = weftNowMs() + weftBootstrapHandshakeMs;
  memcpy(in->clientNonce, h->clientNonce, NONCE_BYTES);
  memcpy(in->serverNonce, peer->nonce, NONCE_BYTES);
  snprintf(in->name, sizeof in->name, "%s", peer->name);
  in->fd = weftBootPendingTake(&s->pending, i);
}

/* The whole message is in: check it, store it, and compose the answer. 0, or -1 dropped. */
static int inboundOpen(struct weftBootstrap *b, size_t k) {
  struct bootServer *s = &b->serve;
  struct inboundMsg *in = &s->inbound[k];
  uint32_t tag;
  uint8_t data[MSG_BYTES];
  const char *why =
      weftBootstrapParseMsg(b->secret, in->clientNonce, in->serverNonce, in->wire, &tag, data);
  if (why != NULL) {
    if (wantsFrom(s->wants, in->from)) s->wants->badFrom = in->from;
    inboundDrop(s, k, WEFT_LOG_WARN, why);
    return -1;
  }
  int stored = weftBootServeDeliver(b, in->from, tag, data) == 0;
  if (!stored)
    WARN("bootstrap: %s refused the message with tag %u from rank %d: it holds %d messages of "
         "that rank it was not asked for (or is out of memory)",
         s->pending.owner, tag, in->from, WEFT_BOOT_STASH_PER_SENDER);
  weftBootMsgReplyBuild(in->reply, b->secret, in->clientNonce, in->serverNonce, tag, stored);
  in->replying = 1;
  return 0;
}

static void inboundServe(struct weftBootstrap *b, size_t k) {
  struct bootServer *s = &b->serve;
  struct inboundMsg *in = &s->inbound[k];
  char text[128];
  if (!in->replying) {
    int rc = weftSocketRecvSome(in->fd, in->wire, MSG_WIRE_BYTES, &in->got);
    if (rc != 0) {
      inboundDrop(s, k, WEFT_LOG_INFO,
                  rc == WEFT_SOCK_CLOSED ? "closed before its message was complete"
                                         : weftSockStatusText(rc, text, sizeof text));
      return;
    }
    if (in->got >= 4 && weftGetBe32(in->wire) != MSG_MAGIC) {
      inboundDrop(s, k, WEFT_LOG_WARN, "sent bytes that are not a weft message (wrong magic)");
      return;
    }
    if (in->got < MSG_WIRE_BYTES || inboundOpen(b, k) != 0) return;
  }
  int rc = weftSocketSendSome(in->fd, in->reply, ACK_BYTES, &in->replySent);
  if (rc != 0) {
    inboundDrop(s, k, WEFT_LOG_INFO, weftSockStatusText(rc, text, sizeof text));
    return;
  }
  if (in->replySent < ACK_BYTES) return;
  closingAdd(s, in->fd);
  s->inbound[k] = s->inbound[--s->ninbound];
}

/* ---- Connections: hellos ---- */

/* Pending peer i may have completed its hello: a message's hello for b starts an inbound
 * message; any other goes to the loop's handler. */
static void pendingServe(struct weftBootstrap *b, size_t i, bootHelloFn other, void *ctx) {
  struct bootServer *s = &b->serve;
  if (weftBootPendingReceive(&s->pending, i) != 1) return;
  const struct pendingPeer *peer = &s->pending.peers[i];
  struct weftBootstrapHello h;
  if (weftBootstrapParseHello(b->secret, peer->nonce, peer->hello, &h) != NULL ||
      h.kind != HELLO_P2P) {
    other(ctx, &s->pending, i);
    return;
  }
  char why[160];
  if (weftBootstrapCheckHello(&h, HELLO_P2P, b->nranks, -1, why, sizeof why) != 0)
    weftBootPendingDrop(&s->pending, i, WEFT_LOG_WARN, why);
  else if (h.rank == (uint32_t)b->rank)
    weftBootPendingDrop(&s->pending, i, WEFT_LOG_WARN,
                        "a message's hello from this rank's own number (rank messages to itself "
                        "are copied, never sent)");
  else
    inboundStart(b, i, &h);
}

/* ---- The loop's side: polls, handling, deadlines ---- */

int weftBootServePolls(struct weftBootstrap *b, struct pollList *polls, struct servePolls *p) {
  struct bootServer *s = &b->serve;
  int ok = 1;
  p->listen = polls->count;
  ok = weftBootPollAdd(polls, b->listenFd, POLLIN) == 0;
  p->pending = polls->count;
  p->npending = s->pending.count;
  for (size_t i = 0; ok && i < s->pending.count; i++)
    ok = weftBootPollAdd(polls, s->pending.peers[i].fd, POLLIN) == 0;
  p->inbound = polls->count;
  p->ninbound = s->ninbound;
  for (size_t i = 0; ok && i < s->ninbound; i++)
    ok = weftBootPollAdd(polls, s->inbound[i].fd, s->inbound[i].replying ? POLLOUT : POLLIN) == 0;
  p->closing = polls->count;
  p->nclosing = s->nclosing;
  for (size_t i = 0; ok && i < s->nclosing; i++)
    ok = weftBootPollAdd(polls, s->closing[i], POLLIN) == 0;
  return ok ? 0 : -1;
}

void weftBootServeHandle(struct weftBootstrap *b, const struct pollList *polls,
                         const struct servePolls *p, bootHelloFn other, void *ctx) {
  const struct pollfd *fds = polls->fds;
  /* Each kind last to first: removing one moves the last into its place. Each step below may
   * add to the kinds above it only, past the entries polled. */
  for (size_t k = p->nclosing; k-- > 0;)
    if (fds[p->closing + k].revents != 0) closingRemove(&b->serve, k);
  for (size_t k = p->ninbound; k-- > 0;)
    if (fds[p->inbound + k].revents != 0) inboundServe(b, k);
  for (size_t k = p->npending; k-- > 0;)
    if (fds[p->pending + k].revents != 0) pendingServe(b, k, other, ctx);
  if (fds[p->listen].revents != 0) weftBootPendingAcceptAll(&b->serve.pending, b->listenFd);
}

int64_t weftBootServeEarliest(const struct weftBootstrap *b, int64_t deadlineMs) {
  const struct bootServer *s = &b->serve;
  deadlineMs = weftBootPendingEarliest(&s->pending, deadlineMs);
  for (size_t k = 0; k < s->ninbound; k++)
    if (s->inbound[k].deadlineMs < deadlineMs) deadlineMs = s->inbound[k].deadlineMs;
  return deadlineMs;
}

void weftBootServeExpire(struct weftBootstrap *b, int64_t now) {
  struct bootServer *s = &b->serve;
  weftBootPendingExpire(&s->pending, now);
  char why[64];
  snprintf(why, sizeof why, "no complete message within %d ms", weftBootstrapHandshakeMs);
  for (size_t k = s->ninbound; k-- > 0;)
    if (now >= s->inbound[k].deadlineMs) inboundDrop(s, k, WEFT_LOG_INFO, why);
}

void weftBootServeFree(struct weftBootstrap *b) {
  struct bootServer *s = &b->serve;
  weftBootPendingFree(&s->pending);
  weftBootPendingFree(&s->ringHellos);
  while (s->ninbound > 0) inboundDrop(s, s->ninbound - 1, WEFT_LOG_INFO, "the bootstrap closes");
  while (s->nclosing > 0) closingRemove(s, s->nclosing - 1);
  free(s->inbound);
  free(s->closing);
  free(s->stash);
  free(s->stashFrom);
  memset(s, 0, sizeof *s);
}
