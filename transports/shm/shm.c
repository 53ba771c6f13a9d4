/* Shared-memory transport between ranks of one host.
 * Each connection is one FIFO of slots in a POSIX shared-memory segment that the receiver
 * creates; the sender maps it from the name in the receiver's blob and unlinks it at once,
 * so the name exists only while the two sides meet. head (slots posted) is written only by
 * the sender and tail (slots freed) only by the receiver; each side caches the other's
 * counter and reads it again only when the cached value says "full" or "empty". */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "core.h"
#include "deadline.h"
#include "liveness.h"
#include "param.h"
#include "shm.h"
#include "shmseg.h"
#include "transport.h"

#define SHM_MAX_SLOTS 64
#define SHM_CAUSE_BYTES 400

struct shmFifo {
  _Alignas(64) _Atomic uint64_t head;
  _Alignas(64) _Atomic uint64_t tail;
  _Alignas(64) uint64_t sizes[SHM_MAX_SLOTS]; /* bytes of each posted slot, set before head */
  _Atomic int32_t pid[2];    /* [dir]: the process of each side, to notice it died */
  _Atomic int32_t closed[2]; /* [dir]: that side closed the connection (1 + reason) */
  char cause[2][SHM_CAUSE_BYTES]; /* [dir]: why, written before closed (closeCause) */
};

/* A side that finds the FIFO empty (or full) this many times in a row looks whether its peer
 * still exists, at most every SHM_LIVENESS_MS: cheap on the hot path, and a dead peer is an
 * error within a fraction of a second instead of a wait until the timeout. */
#define SHM_LIVENESS_POLLS 256
#define SHM_LIVENESS_MS 50

struct shmBlob {
  char name[WEFT_SHM_NAME_BYTES];
  uint64_t slotBytes;
  uint32_t nslots;
};

_Static_assert(sizeof(struct shmBlob) <= WEFT_CONN_BLOB_BYTES, "shm blob fits");

int weftShmParseBlob(const void *blob, char name[WEFT_SHM_NAME_BYTES], uint64_t *slotBytes,
                     uint32_t *nslots) {
  struct shmBlob b;
  memcpy(&b, blob, sizeof b);
  b.name[sizeof b.name - 1] = '\0';
  memcpy(name, b.name, WEFT_SHM_NAME_BYTES);
  *slotBytes = b.slotBytes;
  *nslots = b.nslots;
  if (strncmp(b.name, "/weft-", 6) != 0 || strchr(b.name + 1, '/') != NULL) return -1;
  return 0;
}

struct shmState {
  struct weftComm *comm; /* for the cause of a close */
  size_t slotBytes;
  uint32_t nslots;
};

struct shmConn {
  struct shmFifo *fifo;
  char *data;
  size_t mapBytes;
  uint32_t nslots;
  uint64_t mine;   /* head for a sender, tail for a receiver */
  uint64_t theirs; /* cached copy of the other side's counter */
  char name[WEFT_SHM_NAME_BYTES];
  int named; /* this side created the name and has not unlinked it yet */
  uint32_t idlePolls;
  int64_t lastLivenessMs;
};

static size_t fifoBytes(uint32_t nslots, size_t slotBytes) {
  size_t hdr = (sizeof(struct shmFifo) + 4095) & ~(size_t)4095;
  return hdr + (size_t)nslots * slotBytes;
}

static char *fifoData(struct shmFifo *f) {
  return (char *)f + ((sizeof(struct shmFifo) + 4095) & ~(size_t)4095);
}

/* POSIX shared memory lives in /dev/shm on Linux: the segments need it writable. */
static int shmQuery(char *why, size_t len) {
  if (access("/dev/shm", W_OK | X_OK) == 0) return 1;
  snprintf(why, len, "/dev/shm is not writable: %s", strerror(errno));
  return 0;
}

static weftResult_t shmInit(struct weftComm *comm, void **state) {
  int64_t slotBytes = weftParamShmSlotBytes(), nslots = weftParamShmSlots();
  if (slotBytes < 4096 || slotBytes % 64 != 0 || nslots < 2 || nslots > SHM_MAX_SLOTS)
    return weftSetError(weftInvalidArgument,
                        "WEFT_SHM_SLOT_BYTES=%lld / WEFT_SHM_SLOTS=%lld: need a multiple of 64 "
                        ">= 4096 bytes and 2..%d slots",
                        (long long)slotBytes, (long long)nslots, SHM_MAX_SLOTS);
  struct shmState *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "out of memory");
  s->comm = comm;
  s->slotBytes = (size_t)slotBytes;
  s->nslots = (uint32_t)nslots;
  *state = s;
  return weftSuccess;
}

static weftResult_t shmCanConnect(void *state, const struct weftPeerInfo *me,
                                  const struct weftPeerInfo *peer, int *ok,
                                  struct weftLinkCaps *caps) {
  (void)state;
  *ok = me->hostHash == peer->hostHash;
  caps->latencyUs = 0.2;
  caps->bandwidthGBs = 6.0;
  return weftSuccess;
}

/* The FIFO's pages on the NUMA node of its reader (this rank, which creates it): the sender
 * writes each slot once, the reader reads it and then copies or reduces from it, and polls
 * head. Only where the host has several NUMA nodes and this rank's binding lies in one; set
 * before the pages are allocated (weftShmCreatePlaced), so they go there whoever runs. */
static void shmBindToReader(void *p, size_t bytes, void *arg) {
  const struct weftComm *comm = arg;
  int node = comm->topoHost != NULL ? weftTopoMemNode(comm->topoHost, &comm->peers[comm->rank].place) : -1;
  int err = weftTopoBindMemory(p, bytes, node);
  if (node >= 0)
    INFO(WEFT_TOPO, "shm FIFO of %zu bytes on NUMA node %d%s%s", bytes, node, err ? ": mbind failed, " : "",
         err ? strerror(err) : "");
}

static weftResult_t shmSetup(void *state, int peer, int dir, struct weftConn *c, void *blob) {
  struct shmState *s = state;
  struct shmConn *sc = calloc(1, sizeof *sc);
  if (sc == NULL) return weftSetError(weftSystemError, "out of memory");
  c->priv = sc;
  c->peer = peer;
  c->dir = dir;
  c->slotBytes = s->slotBytes;
  sc->nslots = s->nslots;
  memset(blob, 0, WEFT_CONN_BLOB_BYTES);
  if (dir == WEFT_DIR_SEND) return weftSuccess; /* the receiver owns the FIFO */
  sc->mapBytes = fifoBytes(s->nslots, s->slotBytes);
  void *p = NULL;
  WEFTCHECK(weftShmCreatePlaced(sc->mapBytes, sc->name, &p, shmBindToReader, s->comm));
  sc->named = 1;
  sc->fifo = p;
  sc->data = fifoData(p);
  atomic_store(&sc->fifo->pid[WEFT_DIR_RECV], (int32_t)getpid());
  struct shmBlob b = {.slotBytes = s->slotBytes, .nslots = s->nslots};
  memcpy(b.name, sc->name, sizeof b.name);
  memcpy(blob, &b, sizeof b);
  return weftSuccess;
}

static weftResult_t shmConnect(struct weftConn *c, const void *peerBlob, int *done) {
  struct shmConn *sc = c->priv;
  *done = 1;
  if (c->dir == WEFT_DIR_RECV) return weftSuccess;
  struct shmBlob b;
  if (weftShmParseBlob(peerBlob, b.name, &b.slotBytes, &b.nslots) != 0)
    return weftSetError(weftInternalError,
                        "shm: the connection blob from rank %d names no weft segment (\"%s\"): "
                        "does every rank run the same weft version and WEFT_TRANSPORTS?",
                        c->peer, b.name);
  if (b.slotBytes != c->slotBytes || b.nslots != sc->nslots)
    return weftSetError(weftInvalidUsage,
                        "shm: rank %d uses %llu-byte x %u slots, this rank %zu x %u: set "
                        "WEFT_SHM_SLOT_BYTES and WEFT_SHM_SLOTS alike on every rank",
                        c->peer, (unsigned long long)b.slotBytes, b.nslots, c->slotBytes,
                        sc->nslots);
  sc->mapBytes = fifoBytes(sc->nslots, c->slotBytes);
  void *p = NULL;
  WEFTCHECK(weftShmOpen(b.name, sc->mapBytes, &p));
  weftShmUnlink(b.name); /* both sides have it mapped now */
  sc->fifo = p;
  sc->data = fifoData(p);
  atomic_store(&sc->fifo->pid[WEFT_DIR_SEND], (int32_t)getpid());
  return weftSuccess;
}

static weftResult_t shmConnected(struct weftConn *c) {
  struct shmConn *sc = c->priv;
  if (sc->named) weftShmUnlink(sc->name);
  sc->named = 0;
  return weftSuccess;
}


/* Receiver: whether the sender has posted slots this side has not taken. */
static int slotsWaiting(const struct shmConn *sc) {
  return atomic_load_explicit(&sc->fifo->head, memory_order_acquire) != sc->mine;
}

/* Called when the FIFO is empty (receiver) or full (sender): an error if the peer closed its
 * side or its process died. */
static weftResult_t shmCheckPeer(struct weftConn *c) {
  struct shmConn *sc = c->priv;
  int other = c->dir == WEFT_DIR_SEND ? WEFT_DIR_RECV : WEFT_DIR_SEND;
  int32_t closed = atomic_load_explicit(&sc->fifo->closed[other], memory_order_acquire);
  /* A sender posts its last slots, then closes (release): between the receiver's look at head
   * and this look at closed it may have done both, and those slots are still to be read. */
  if (closed && c->dir == WEFT_DIR_RECV && slotsWaiting(sc)) return weftSuccess;
  if (closed > 1) { /* after a failure of its own, which it wrote down */
    char cause[SHM_CAUSE_BYTES];
    memcpy(cause, sc->fifo->cause[other], sizeof cause);
    cause[sizeof cause - 1] = '\0';
    weftResult_t rc = closed - 1 == weftInvalidUsage || closed - 1 == weftTimeout
                          ? (weftResult_t)(closed - 1) : weftRemoteError;
    return weftSetError(rc, "shm: rank %d%s%s", c->peer, WEFT_CAUSE_MARK, cause);
  }
  if (closed)
    return weftSetError(weftRemoteError, "shm: rank %d closed its %s side of the connection",
                        c->peer, other == WEFT_DIR_SEND ? "sending" : "receiving");
  if (++sc->idlePolls % SHM_LIVENESS_POLLS != 0) return weftSuccess;
  int64_t now = weftNowMs();
  if (now - sc->lastLivenessMs < SHM_LIVENESS_MS) return weftSuccess;
  sc->lastLivenessMs = now;
  int pid = atomic_load_explicit(&sc->fifo->pid[other], memory_order_relaxed);
  if (pid > 0 && pid != getpid() && weftProcessGone(pid) &&
      !(c->dir == WEFT_DIR_RECV && slotsWaiting(sc))) /* what it posted before it died */
    return weftSetError(weftRemoteError, "shm: rank %d (pid %d) exited", c->peer, pid);
  return weftSuccess;
}

static weftResult_t shmSendSlot(struct weftConn *c, void **slot) {
  struct shmConn *sc = c->priv;
  if (sc->mine - sc->theirs >= sc->nslots) {
    sc->theirs = atomic_load_explicit(&sc->fifo->tail, memory_order_acquire);
    if (sc->mine - sc->theirs >= sc->nslots) {
      *slot = NULL;
      return shmCheckPeer(c);
    }
  }
  if (atomic_load_explicit(&sc->fifo->closed[WEFT_DIR_RECV], memory_order_relaxed))
    return shmCheckPeer(c); /* data sent now would never be read */
  sc->idlePolls = 0;
  *slot = sc->data + (sc->mine % sc->nslots) * c->slotBytes;
  return weftSuccess;
}

static weftResult_t shmSendPost(struct weftConn *c, size_t bytes) {
  struct shmConn *sc = c->priv;
  sc->fifo->sizes[sc->mine % sc->nslots] = bytes;
  atomic_store_explicit(&sc->fifo->head, ++sc->mine, memory_order_release);
  return weftSuccess;
}

static weftResult_t shmRecvSlot(struct weftConn *c, const void **slot, size_t *bytes) {
  struct shmConn *sc = c->priv;
  if (sc->mine == sc->theirs) {
    sc->theirs = atomic_load_explicit(&sc->fifo->head, memory_order_acquire);
    if (sc->mine == sc->theirs) {
      *slot = NULL;
      return shmCheckPeer(c);
    }
  }
  sc->idlePolls = 0;
  uint32_t i = (uint32_t)(sc->mine % sc->nslots);
  *slot = sc->data + (size_t)i * c->slotBytes;
  *bytes = sc->fifo->sizes[i];
  return weftSuccess;
}

static weftResult_t shmRecvDone(struct weftConn *c) {
  struct shmConn *sc = c->priv;
  atomic_store_explicit(&sc->fifo->tail, ++sc->mine, memory_order_release);
  return weftSuccess;
}

static weftResult_t shmClose(struct weftConn *c) {
  struct shmConn *sc = c->priv;
  if (sc == NULL) return weftSuccess;
  if (sc->named) weftShmUnlink(sc->name);
  if (sc->fifo != NULL) {
    int reason = c->closeCause != NULL ? c->closeReason : 0;
    if (reason != 0) snprintf(sc->fifo->cause[c->dir], SHM_CAUSE_BYTES, "%s", c->closeCause);
    atomic_store_explicit(&sc->fifo->closed[c->dir], 1 + reason, memory_order_release);
  }
  weftShmUnmap(sc->fifo, sc->mapBytes);
  free(sc);
  c->priv = NULL;
  return weftSuccess;
}

static weftResult_t shmFinalize(void *state) {
  free(state);
  return weftSuccess;
}

const struct weftTransportOps weftTransportShm = {
  .size = sizeof(struct weftTransportOps),
  .name = "shm",
  .query = shmQuery,
  .init = shmInit,
  .canConnect = shmCanConnect,
  .setup = shmSetup,
  .connect = shmConnect,
  .connected = shmConnected,
  .sendSlot = shmSendSlot,
  .sendPost = shmSendPost,
  .recvSlot = shmRecvSlot,
  .recvDone = shmRecvDone,
  .progress = NULL,
  .close = shmClose,
  .finalize = shmFinalize,
};
