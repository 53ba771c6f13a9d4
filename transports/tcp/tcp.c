/* TCP transport between ranks on different hosts (or any two ranks, where shm does not win).
 * Each direction of a connection is WEFT_TCP_NSOCKS TCP streams plus a FIFO of slots in local
 * memory on each end. The calling thread fills and drains slots exactly as with shm; a
 * progress thread per communicator (tcp_progress.c) moves posted slots onto the streams and
 * received bytes into free slots, so reductions overlap with the network. The sender dials
 * the receiver's listener; every stream proves the communicator's secret (tcp_wire.c) before
 * it is used. See docs/transports/tcp.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "deadline.h"
#include "param.h"
#include "tcp.h"

/* ---- Parameters and per-communicator state ---- */

static int tcpQuery(char *why, size_t len) {
  (void)why;
  (void)len;
  return 1; /* only sockets are needed, and every Linux host has them */
}

static double tcpParamDouble(const char *env, const char *text, double deflt) {
  char *end = NULL;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0)) {
    WARN("%s=\"%s\" is not a positive number; using %g", env, text, deflt);
    return deflt;
  }
  return v;
}

static weftResult_t tcpReadShape(struct tcpShape *shape) {
  int64_t slotBytes = weftParamTcpSlotBytes(), nslots = weftParamTcpSlots();
  int64_t nsocks = weftParamTcpNsocks(), minStripe = weftParamTcpMinStripeBytes();
  if (slotBytes < 4096 || slotBytes > (1 << 30) || slotBytes % 64 != 0 || nslots < 2 ||
      nslots > TCP_MAX_SLOTS || nsocks < 1 || nsocks > TCP_MAX_SOCKS || minStripe < 4096 ||
      minStripe > (1 << 30))
    return weftSetError(weftInvalidArgument,
                        "WEFT_TCP_SLOT_BYTES=%lld / WEFT_TCP_SLOTS=%lld / WEFT_TCP_NSOCKS=%lld / "
                        "WEFT_TCP_MIN_STRIPE_BYTES=%lld: need a multiple of 64 in 4096..1 GiB, "
                        "2..%d slots, 1..%d sockets and a stripe of 4096..1 GiB",
                        (long long)slotBytes, (long long)nslots, (long long)nsocks,
                        (long long)minStripe, TCP_MAX_SLOTS, TCP_MAX_SOCKS);
  *shape = (struct tcpShape){.slotBytes = (uint64_t)slotBytes,
                             .nslots = (uint32_t)nslots,
                             .nsocks = (uint32_t)nsocks,
                             .minStripe = (uint32_t)minStripe};
  return weftSuccess;
}

/* Whether the topology's NIC may replace the bootstrap's interface: WEFT_NET_DEVICES asks for
 * it; else only a host with several NICs whose locality is known (a multi-rail server), and
 * never over an interface the user named (WEFT_SOCKET_IFNAME). */
static int tcpNicFits(const struct weftComm *comm) {
  if (*weftParamNetDevices() != '\0') return 1;
  if (*weftParamSocketIfname() != '\0') return 0;
  int located = 0;
  for (int i = 0; i < comm->topoHost->ndevs; i++)
    located += comm->topoHost->devs[i].kind == WEFT_TOPO_NIC && comm->topoHost->devs[i].localityKnown;
  return located >= 2;
}

/* The topology's NIC for this rank (lib/topo_decide.c) instead of the bootstrap's interface,
 * where it fits and this machine has an interface of that name up with an address of the
 * same family. The peers dial what the listener published, so both directions follow. */
static void tcpPreferNic(const struct weftComm *comm, union weftSockAddr *addr) {
  const struct weftTopoDev *nic = weftTopoMyNic(comm);
  if (nic == NULL || !tcpNicFits(comm)) return;
  union weftSockAddr there;
  char name[WEFT_SOCK_NAME_MAX];
  if (weftSocketAddrOfInterface(nic->name, addr->sa.sa_family, &there) != 0) {
    INFO(WEFT_TOPO, "tcp: NIC %s has no usable address here; listening on %s", nic->name,
         weftSockAddrName(addr, name));
    return;
  }
  *addr = there;
  INFO(WEFT_TOPO, "tcp: listening on NIC %s (%s)", nic->name, weftSockAddrName(addr, name));
}

/* The listener binds the interface the bootstrap picked for this rank (WEFT_SOCKET_IFNAME,
 * or the one toward the root), so both kinds of socket take the same network. */
static weftResult_t tcpPickBindAddr(struct weftComm *comm, union weftSockAddr *addr) {
  const union weftSockAddr *boot = weftBootstrapPeerAddr(comm->boot, comm->rank);
  if (boot != NULL) {
    *addr = *boot;
  } else {
    char ifname[64];
    WEFTCHECK(weftSocketPickInterface(weftSocketFamily(), addr, ifname, sizeof ifname));
  }
  tcpPreferNic(comm, addr);
  if (addr->sa.sa_family == AF_INET6)
    addr->sin6.sin6_port = 0;
  else
    addr->sin.sin_port = 0;
  return weftSuccess;
}

static weftResult_t tcpInit(struct weftComm *comm, void **state) {
  struct tcpShape shape;
  WEFTCHECK(tcpReadShape(&shape));
  struct tcpState *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "tcp: out of memory");
  weftResult_t rc;
  s->rank = comm->rank;
  s->comm = comm;
  s->shape = shape;
  int64_t buf = weftParamTcpSockBufBytes();
  s->sockBufBytes = buf > 0 ? (size_t)buf : 0;
  s->spinUs = weftParamTcpSpinUs() > 0 ? weftParamTcpSpinUs() : 0;
  s->lingerMs = weftParamTcpLingerMs() > 0 ? weftParamTcpLingerMs() : 0;
  s->caps.bandwidthGBs = tcpParamDouble("WEFT_TCP_BW_GBPS", weftParamTcpBwGbps(), 1.5);
  s->caps.latencyUs = tcpParamDouble("WEFT_TCP_LAT_US", weftParamTcpLatUs(), 20);
  s->listenFd = -1;
  s->wakeFd = -1;
  memcpy(s->secret, weftBootstrapSecret(comm->boot), TCP_SECRET_BYTES);
  WEFTCHECKGOTO(tcpPickBindAddr(comm, &s->bindAddr), rc, fail);
  WEFTCHECKGOTO(weftTcpRandom(&s->nextConnId, sizeof s->nextConnId), rc, fail);
  if (pthread_mutex_init(&s->lock, NULL) != 0) {
    rc = weftSetError(weftSystemError, "tcp: pthread_mutex_init failed");
    goto fail;
  }
  *state = s;
  return weftSuccess;
fail:
  explicit_bzero(s->secret, sizeof s->secret);
  free(s);
  return rc;
}

/* Joins the progress thread (which first flushes closed connections for up to
 * WEFT_TCP_LINGER_MS), then frees whatever is left. */
static weftResult_t tcpFinalize(void *state) {
  struct tcpState *s = state;
  if (s == NULL) return weftSuccess;
  weftTcpStop(s);
  pthread_mutex_lock(&s->lock);
  while (s->conns != NULL) {
    struct tcpConn *tc = s->conns;
    weftTcpUnlinkLocked(s, tc);
    weftTcpFreeConn(tc);
  }
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_destroy(&s->lock);
  explicit_bzero(s->secret, sizeof s->secret);
  free(s->fds);
  free(s->pending);
  free(s);
  return weftSuccess;
}

static weftResult_t tcpCanConnect(void *state, const struct weftPeerInfo *me,
                                  const struct weftPeerInfo *peer, int *ok,
                                  struct weftLinkCaps *caps) {
  struct tcpState *s = state;
  (void)me;
  (void)peer;
  *ok = 1;
  *caps = s->caps;
  return weftSuccess;
}

/* ---- Connection set-up ---- */

static weftResult_t tcpAllocConn(struct tcpState *s, int peer, int dir, struct tcpConn **out) {
  struct tcpConn *tc = calloc(1, sizeof *tc);
  if (tc == NULL) return weftSetError(weftSystemError, "tcp: out of memory");
  tc->s = s;
  tc->dir = dir;
  tc->peer = peer;
  tc->shape = s->shape;
  for (int i = 0; i < TCP_MAX_SOCKS; i++)
    tc->streams[i] = (struct tcpStream){.fd = -1, .pollIdx = -1};
  /* Whole pages from mmap: slot memory is touched only when used, and page-aligned slots
   * let the kernel copy in and out at full speed. */
  tc->slotsMapBytes = (size_t)s->shape.nslots * s->shape.slotBytes;
  void *p =
      mmap(NULL, tc->slotsMapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    free(tc);
    return weftSetSysError(errno, "tcp: mmap of %zu bytes of slots",
                           (size_t)s->shape.nslots * s->shape.slotBytes);
  }
  tc->slots = p;
  snprintf(tc->peerName, sizeof tc->peerName, "(not connected)");
  snprintf(tc->peerHost, sizeof tc->peerHost, "%s",
           s->comm->peers != NULL ? s->comm->peers[peer].hostname : "?");
  *out = tc;
  return weftSuccess;
}

void weftTcpFreeConn(struct tcpConn *tc) {
  for (uint32_t i = 0; i < TCP_MAX_SOCKS; i++)
    if (tc->closeAbortive) weftSocketCloseAbortive(&tc->streams[i].fd, 1);
    else weftSocketClose(&tc->streams[i].fd);
  if (tc->slots != NULL) munmap(tc->slots, tc->slotsMapBytes);
  free(tc);
}

/* A receiver registers at once: the progress thread must find it by connId when the
 * sender's streams arrive, which may be before this rank calls connect(). */
static weftResult_t tcpSetupRecv(struct tcpState *s, struct tcpConn *tc, struct tcpBlob *b) {
  weftResult_t rc;
  pthread_mutex_lock(&s->lock);
  tc->connId = s->nextConnId++;
  rc = weftTcpListenLocked(s);
  if (rc == weftSuccess) {
    tc->next = s->conns;
    s->conns = tc;
    tc->registered = 1;
    s->generation++;
    b->connId = tc->connId;
    b->listen = s->listenAddr;
  }
  pthread_mutex_unlock(&s->lock);
  /* The progress thread may be asleep in a poll() that does not hold the listener yet (it
   * opens with the first receiver): without a kick the sender's first connection would wait
   * for the idle timeout, 100 ms of every init. */
  if (rc == weftSuccess) weftTcpKick(s);
  return rc;
}

static weftResult_t tcpSetup(void *state, int peer, int dir, struct weftConn *c, void *blob) {
  struct tcpState *s = state;
  struct tcpConn *tc = NULL;
  WEFTCHECK(weftTcpStart(s));
  WEFTCHECK(tcpAllocConn(s, peer, dir, &tc));
  struct tcpBlob b = {.dir = (uint32_t)dir, .rank = (uint32_t)s->rank, .shape = s->shape};
  if (dir == WEFT_DIR_RECV) {
    weftResult_t rc = tcpSetupRecv(s, tc, &b);
    if (rc != weftSuccess) {
      weftTcpFreeConn(tc);
      return rc;
    }
  }
  c->priv = tc;
  c->peer = peer;
  c->dir = dir;
  c->slotBytes = s->shape.slotBytes;
  c->caps = s->caps;
  weftTcpEncodeBlob(&b, blob);
  return weftSuccess;
}

static weftResult_t tcpCheckBlob(const struct tcpConn *tc, const void *peerBlob,
                                 struct tcpBlob *b) {
  int wantDir = tc->dir == WEFT_DIR_SEND ? WEFT_DIR_RECV : WEFT_DIR_SEND;
  if (weftTcpDecodeBlob(peerBlob, b) != 0 || b->dir != (uint32_t)wantDir ||
      b->rank != (uint32_t)tc->peer)
    return weftSetError(weftInternalError,
                        "tcp: the connection blob from rank %d is not a tcp %s blob of that rank "
                        "(does every rank run the same weft version and WEFT_TRANSPORTS?)",
                        tc->peer, wantDir == WEFT_DIR_RECV ? "receive" : "send");
  if (!weftTcpSameShape(&b->shape, &tc->shape))
    return weftSetError(weftInvalidUsage,
                        "tcp: rank %d uses %llu-byte x %u slots on %u sockets (stripe %u), this "
                        "rank %llu x %u on %u (stripe %u): set WEFT_TCP_SLOT_BYTES, "
                        "WEFT_TCP_SLOTS, WEFT_TCP_NSOCKS and WEFT_TCP_MIN_STRIPE_BYTES alike on "
                        "every rank",
                        tc->peer, (unsigned long long)b->shape.slotBytes, b->shape.nslots,
                        b->shape.nsocks, b->shape.minStripe,
                        (unsigned long long)tc->shape.slotBytes, tc->shape.nslots, tc->shape.nsocks,
                        tc->shape.minStripe);
  return weftSuccess;
}

static weftResult_t tcpFailure(const struct tcpConn *tc) {
  return weftSetError(tc->failRc != 0 ? (weftResult_t)tc->failRc : weftRemoteError, "%s",
                      tc->error);
}

/* Hands a sender whose streams are all authenticated to the progress thread. */
static void tcpRegisterSend(struct tcpConn *tc) {
  struct tcpState *s = tc->s;
  pthread_mutex_lock(&s->lock);
  tc->next = s->conns;
  s->conns = tc;
  tc->registered = 1;
  s->generation++;
  pthread_mutex_unlock(&s->lock);
  weftTcpWake(s);
  INFO(WEFT_TCP, "tcp: rank %d -> rank %d (%s) connected, %u streams", s->rank, tc->peer,
       tc->peerName, tc->shape.nsocks);
}

static weftResult_t tcpConnectSend(struct tcpConn *tc, const void *peerBlob, int *done) {
  if (!tc->dialing) {
    struct tcpBlob b;
    WEFTCHECK(tcpCheckBlob(tc, peerBlob, &b));
    tc->connId = b.connId;
    tc->peerAddr = b.listen;
    weftSockAddrName(&tc->peerAddr, tc->peerName);
    tc->dialing = 1;
    WEFTCHECK(weftTcpDialStart(tc));
  }
  WEFTCHECK(weftTcpDialProgress(tc, done));
  if (*done) tcpRegisterSend(tc);
  return weftSuccess;
}

/* Done at once: the progress thread attaches the sender's streams whenever they arrive, and
 * until then the FIFO is simply empty. Waiting here would deadlock two ranks that each
 * connect their receiving link to the other first. */
static weftResult_t tcpConnectRecv(struct tcpConn *tc, const void *peerBlob, int *done) {
  struct tcpBlob b;
  WEFTCHECK(tcpCheckBlob(tc, peerBlob, &b));
  if (atomic_load_explicit(&tc->failed, memory_order_acquire)) return tcpFailure(tc);
  *done = 1;
  return weftSuccess;
}

static weftResult_t tcpConnect(struct weftConn *c, const void *peerBlob, int *done) {
  struct tcpConn *tc = c->priv;
  *done = 0;
  if (tc->registered && tc->dir == WEFT_DIR_SEND) {
    *done = 1;
    return weftSuccess;
  }
  if (tc->dir == WEFT_DIR_SEND) return tcpConnectSend(tc, peerBlob, done);
  return tcpConnectRecv(tc, peerBlob, done);
}

/* Every rank has connected: nobody else may attach, so the listener can go. */
static weftResult_t tcpConnected(struct weftConn *c) {
  struct tcpConn *tc = c->priv;
  if (tc == NULL || tc->dir != WEFT_DIR_RECV) return weftSuccess;
  pthread_mutex_lock(&tc->s->lock);
  weftTcpMaybeUnlistenLocked(tc->s);
  pthread_mutex_unlock(&tc->s->lock);
  weftTcpKick(tc->s); /* to drop the closed listener from its poll list */
  return weftSuccess;
}

/* ---- Data path: the calling thread's side of the FIFOs ---- */

static weftResult_t tcpSendSlot(struct weftConn *c, void **slot) {
  struct tcpConn *tc = c->priv;
  if (atomic_load_explicit(&tc->failed, memory_order_acquire)) return tcpFailure(tc);
  if (tc->mine - tc->theirs >= tc->shape.nslots) {
    tc->theirs = atomic_load_explicit(&tc->freed, memory_order_acquire);
    if (tc->mine - tc->theirs >= tc->shape.nslots) {
      *slot = NULL;
      return weftSuccess;
    }
  }
  *slot = tc->slots + (tc->mine % tc->shape.nslots) * tc->shape.slotBytes;
  return weftSuccess;
}

static weftResult_t tcpSendPost(struct weftConn *c, size_t bytes) {
  struct tcpConn *tc = c->priv;
  if (atomic_load_explicit(&tc->failed, memory_order_acquire)) return tcpFailure(tc);
  if (bytes > tc->shape.slotBytes || tc->mine - tc->theirs >= tc->shape.nslots)
    return weftSetError(weftInternalError,
                        "tcp: sendPost of %zu bytes to rank %d without a free slot of %llu bytes",
                        bytes, tc->peer, (unsigned long long)tc->shape.slotBytes);
  tc->sizes[tc->mine % tc->shape.nslots] = bytes;
  /* seq_cst, not just release: with the thread's store to `sleeping` and its reload of
   * `posted`, this is a Dekker pair, so either the thread sees the slot or we see it sleep. */
  atomic_store_explicit(&tc->posted, ++tc->mine, memory_order_seq_cst);
  if (bytes <= tc->shape.minStripe &&
      atomic_load_explicit(&tc->freed, memory_order_acquire) == tc->mine - 1)
    weftTcpSendInline(tc);
  else
    weftTcpWake(tc->s);
  return weftSuccess;
}

static weftResult_t tcpRecvSlot(struct weftConn *c, const void **slot, size_t *bytes) {
  struct tcpConn *tc = c->priv;
  if (tc->mine == tc->theirs) {
    tc->theirs = atomic_load_explicit(&tc->posted, memory_order_acquire);
    if (tc->mine == tc->theirs) {
      weftTcpRecvInline(tc);
      tc->theirs = atomic_load_explicit(&tc->posted, memory_order_acquire);
    }
    if (tc->mine == tc->theirs && atomic_load_explicit(&tc->failed, memory_order_acquire)) {
      /* The thread publishes its last slots before `failed`: read `posted` once more. */
      tc->theirs = atomic_load_explicit(&tc->posted, memory_order_acquire);
      if (tc->mine == tc->theirs) return tcpFailure(tc);
    }
    if (tc->mine == tc->theirs) {
      *slot = NULL;
      return weftSuccess;
    }
  }
  uint32_t i = (uint32_t)(tc->mine % tc->shape.nslots);
  *slot = tc->slots + (size_t)i * tc->shape.slotBytes;
  *bytes = tc->sizes[i];
  return weftSuccess;
}

static weftResult_t tcpRecvDone(struct weftConn *c) {
  struct tcpConn *tc = c->priv;
  if (tc->mine == tc->theirs)
    return weftSetError(weftInternalError, "tcp: recvDone from rank %d without a slot", tc->peer);
  /* seq_cst for the same Dekker pairing as sendPost, with `starved` and `sleeping`. */
  atomic_store_explicit(&tc->freed, ++tc->mine, memory_order_seq_cst);
  if (atomic_load_explicit(&tc->starved, memory_order_seq_cst)) weftTcpWake(tc->s);
  return weftSuccess;
}

/* ---- Teardown ---- */

/* Why this side closes (handed down in c->closeReason, c->closeCause), as a close record for
 * the peer; 0 for an orderly close. */
static int tcpCloseCause(const struct weftConn *c, struct tcpRecord *r) {
  if (c->closeReason == 0 || c->closeCause == NULL) return 0;
  weftTcpRecordEncode(r, (uint32_t)c->closeReason, c->closeCause);
  return 1;
}

/* A receiver's record goes back on stream 0, whose way back carries nothing else: the socket
 * has room, so one non-blocking send delivers it (best effort: the peer may be gone). */
static void tcpTellSender(struct tcpConn *tc) {
  struct tcpStream *st = &tc->streams[0];
  if (st->fd >= 0 && !tc->stopped) (void)weftTcpRecordSend(st->fd, &tc->txRecord);
}

/* A sender's posted slots may still be on their way out: the progress thread keeps it until
 * they are with the kernel, followed by its close record if it has one (or until
 * WEFT_TCP_LINGER_MS passes; at once after an abort, which talks to nobody), as shm's
 * receiver keeps reading a segment its sender has unmapped. Everything else is freed here. */
static weftResult_t tcpClose(struct weftConn *c) {
  struct tcpConn *tc = c->priv;
  if (tc == NULL) return weftSuccess;
  c->priv = NULL;
  struct tcpState *s = tc->s;
  if (!tc->registered) {
    weftTcpFreeConn(tc);
    return weftSuccess;
  }
  struct tcpRecord record = {.len = 0};
  int cause = tcpCloseCause(c, &record);
  pthread_mutex_lock(&s->lock);
  if (cause) tc->txRecord = record;
  if (tc->dir == WEFT_DIR_SEND) {
    tc->closing = 1;
    tc->lingerUntilMs = weftNowMs() + (weftCommAborted(s->comm) ? 0 : s->lingerMs);
  } else {
    if (cause) tcpTellSender(tc);
    /* A receiver of a healthy communicator has taken all it needs (its collectives are
     * complete), and its sender has read all it sent (the handshake's acknowledgement, before
     * init could end): its streams end with a reset, which leaves no TIME_WAIT on either
     * side. */
    tc->closeAbortive = !cause && atomic_load(&s->comm->asyncError) == weftSuccess;
    weftTcpFreeConnLocked(s, tc);
  }
  pthread_mutex_unlock(&s->lock);
  weftTcpKick(s);
  return weftSuccess;
}

/* The interface and address this rank's listener binds (every link of this rank uses it). */
static void tcpDescribe(void *state, int peer, char *buf, size_t len) {
  const struct tcpState *s = state;
  char ifname[64] = "?", addr[WEFT_SOCK_NAME_MAX];
  (void)peer;
  if (weftSocketInterfaceOf(&s->bindAddr, ifname, sizeof ifname) != 0) snprintf(ifname, sizeof ifname, "?");
  snprintf(buf, len, "%s %s", ifname, weftSockAddrName(&s->bindAddr, addr));
}

const struct weftTransportOps weftTransportTcp = {
    .size = sizeof(struct weftTransportOps),
    .name = "tcp",
    .query = tcpQuery,
    .init = tcpInit,
    .canConnect = tcpCanConnect,
    .setup = tcpSetup,
    .connect = tcpConnect,
    .connected = tcpConnected,
    .sendSlot = tcpSendSlot,
    .sendPost = tcpSendPost,
    .recvSlot = tcpRecvSlot,
    .recvDone = tcpRecvDone,
    .progress = NULL,
    .close = tcpClose,
    .finalize = tcpFinalize,
    .describe = tcpDescribe,
};
