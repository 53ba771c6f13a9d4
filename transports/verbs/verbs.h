/* Verbs transport internals shared by the transports/verbs files. The design, the wire blob
 * and the parameters are described in docs/transports/verbs.md. */
#ifndef WEFT_VERBS_H_
#define WEFT_VERBS_H_

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define VERBS_MAX_SLOTS 64
#define VERBS_MAX_QPS 8
#define VERBS_ERROR_BYTES 640
#define VERBS_NOTE_BYTES 400
#define VERBS_NAME_BYTES 64
/* Each posted receive has a buffer this large: a CLOSE control message fits; the RDMA WRITE
 * WITH IMM of a slot consumes a receive but writes nothing into its buffer. */
#define VERBS_CTRL_BYTES 512
/* Receives kept posted on each QP beyond what the slots need (the peer's CLOSE). */
#define VERBS_EXTRA_RECVS 4
/* Work requests of a QP's send queue beyond one per slot: credits owed, a keepalive, CLOSE. */
#define VERBS_EXTRA_SENDS 8
/* An idle link writes 0 bytes to its peer this often, so a peer that vanished is noticed by
 * the retries running out rather than never. */
#define VERBS_KEEPALIVE_MS 200
/* How often links' polls read the device's asynchronous events (verbs_events.c). */
#define VERBS_ASYNC_CHECK_MS 10
/* A closed link keeps its QPs (for its last writes and CLOSE) at most this long. */
#define VERBS_LINGER_MS 1000
/* Inline data asked of each QP (the device may give less, or none). */
#define VERBS_INLINE_WANT 256

/* Wire constants; integers are big-endian. */
#define VERBS_BLOB_MAGIC 0x57494256u /* "WIBV": a connection blob */
#define VERBS_BLOB_VERSION 2 /* 2: credits as WRITE WITH IMM (a receive per credit) */
#define VERBS_BLOB_BYTES 140
/* The immediate of a credit's write (a slot's is its number, below VERBS_MAX_SLOTS). */
#define VERBS_IMM_CREDIT 0xffffffffu

/* A control message: type u32 | reason u32 | value u64 | note length u32 | note. CLOSE's
 * value is the closing sender's count of posted slots (0 from a receiver). */
enum { VERBS_CTRL_CLOSE = 2 };
#define VERBS_CTRL_HEAD_BYTES 20
_Static_assert(VERBS_CTRL_HEAD_BYTES + VERBS_NOTE_BYTES <= VERBS_CTRL_BYTES, "a CLOSE fits");

/* What both ends of a link must agree on; carried by both blobs. */
struct verbsShape {
  uint64_t slotBytes;
  uint32_t nslots, nqps;
};

struct verbsBlob {
  uint32_t dir, rank;
  struct verbsShape shape;
  uint8_t gid[16];
  uint16_t lid;
  uint8_t linkLayer; /* IBV_LINK_LAYER_* */
  uint8_t mtu;       /* enum ibv_mtu */
  uint64_t ringAddr; /* receiver: its slot ring; sender: 0 */
  uint32_t ringRkey;
  uint64_t creditAddr; /* sender: its credit word; receiver: 0 */
  uint32_t creditRkey;
  uint32_t qpn[VERBS_MAX_QPS], psn[VERBS_MAX_QPS];
};

/* Kinds of work request, in the top bits of wr_id; the low bits index a slot or buffer. */
enum { VERBS_WR_SLOT = 1, VERBS_WR_CREDIT, VERBS_WR_KEEPALIVE, VERBS_WR_CLOSE, VERBS_WR_RECV };
#define VERBS_WR_ID(kind, qp, idx) (((uint64_t)(kind) << 48) | ((uint64_t)(qp) << 32) | (uint32_t)(idx))
#define VERBS_WR_KIND(id) ((int)((id) >> 48))
#define VERBS_WR_QP(id) ((int)(((id) >> 32) & 0xffff))
#define VERBS_WR_IDX(id) ((uint32_t)(id))

struct verbsState;

/* The rdma_cm address and route resolution of a RoCE link (verbs_conn.c). */
struct verbsResolve {
  int phase; /* 0 not started, 1 address, 2 route, 3 done (or skipped) */
  void *channel, *id; /* struct rdma_event_channel *, struct rdma_cm_id * */
  int64_t deadlineMs;
};

/* One direction of a link. The receiver's slots are a registered ring the sender writes into
 * (RDMA WRITE WITH IMM, the immediate naming the slot); the sender's are staging slots of
 * its own; the receiver returns credits by an inline RDMA WRITE of its freed count into the
 * sender's credit word. */
struct verbsConn {
  struct verbsState *s;
  int dir, peer;
  struct verbsShape shape;
  struct ibv_cq *cq;
  /* The CQ's completion channel, on which a sleeping wait blocks (weftVerbsBlock); the
   * completions taken (the wait's test that something came), the receives among them (the
   * peer's writes: slots for a receiver, credits for a sender), and the wakes by an event
   * that brought one of those. */
  struct ibv_comp_channel *cqChannel;
  uint64_t completions, arrivals, channelWakes;
  struct ibv_qp *qp[VERBS_MAX_QPS];
  uint32_t psn[VERBS_MAX_QPS];
  int sendsOut[VERBS_MAX_QPS]; /* signaled work requests not completed, per QP */
  uint32_t maxInline;
  char *slots;
  struct ibv_mr *slotMr;
  uint8_t *ctrl; /* receive buffers, then CLOSE's send buffer, then the credit's source */
  uint32_t nrecv; /* receive buffers per QP */
  struct ibv_mr *ctrlMr;
  uint64_t *creditWord; /* sender: the receiver writes its freed count here */
  struct ibv_mr *creditMr;
  uint64_t remoteAddr; /* sender: the peer's ring; receiver: the peer's credit word */
  uint32_t rkey;
  struct verbsResolve resolve;
  int connected;
  uint64_t posted;   /* sender: slots posted; receiver: slots taken by the caller */
  uint64_t credited; /* sender: slots the receiver has freed */
  uint64_t creditSent; /* receiver: the freed count last written */
  uint8_t busy[VERBS_MAX_SLOTS];    /* sender: the slot's write not completed */
  uint8_t arrived[VERBS_MAX_SLOTS]; /* receiver: the slot's write has come */
  uint32_t arrivedBytes[VERBS_MAX_SLOTS];
  int holding;
  int keepaliveOut;
  int64_t lastActiveMs;
  int closeOut; /* CLOSE posted, not completed */
  int peerClosed, peerReason;
  uint64_t peerPosted;
  char peerNote[VERBS_NOTE_BYTES + 1];
  int failed, failRc;
  char error[VERBS_ERROR_BYTES];
  int64_t lingerUntilMs;
  struct verbsConn *next; /* on the closing list */
};

/* Per-communicator state: the chosen device and port, its PD, and the links closing. */
struct verbsState {
  int rank;
  struct weftComm *comm;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  char dev[VERBS_NAME_BYTES];
  int port, gidIndex, linkLayer;
  union ibv_gid gid;
  struct ibv_port_attr portAttr;
  struct verbsShape shape;
  struct weftLinkCaps caps;
  int asked; /* WEFT_TRANSPORTS names verbs: link every pair of ranks */
  int timeout;
  struct verbsConn *closing;
  /* A port that went down or a failed device (verbs_events.c): "" while none; then every
   * link's poll fails the link with it. */
  char deviceError[VERBS_ERROR_BYTES / 2];
  int64_t eventsDueMs;
};

#pragma GCC visibility push(hidden)

/* ---- verbs_wire.c: blobs and control messages ---- */
void weftVerbsEncodeBlob(const struct verbsBlob *b, void *out);
/* 0, or -1 when the bytes are not a blob of this version. */
int weftVerbsDecodeBlob(const void *in, struct verbsBlob *b);
size_t weftVerbsCtrlEncode(uint8_t *out, uint32_t type, uint32_t reason, uint64_t value,
                           const char *note);
/* 0 with the fields (note NUL-terminated, non-printable bytes replaced), or -1. */
int weftVerbsCtrlDecode(const uint8_t *in, size_t len, uint32_t *type, uint32_t *reason,
                        uint64_t *value, char note[VERBS_NOTE_BYTES + 1]);
/* The IPv4 address of an IPv4-mapped GID (network order), or 0. */
uint32_t weftVerbsGidIpv4(const uint8_t gid[16]);

/* ---- verbs_conn.c: links ---- */
weftResult_t weftVerbsSetup(void *state, int peer, int dir, struct weftConn *c, void *blob);
weftResult_t weftVerbsConnect(struct weftConn *c, const void *peerBlob, int *done);
weftResult_t weftVerbsClose(struct weftConn *c);
/* Frees closing links whose last work has completed (all of them with force). Returns how
 * many are left. */
int weftVerbsReap(struct verbsState *s, int force);
/* Destroys what a link holds (QPs, CQ, MRs, memory). */
void weftVerbsFreeConn(struct verbsConn *vc);

/* ---- verbs_data.c: the data path ---- */
weftResult_t weftVerbsSendSlot(struct weftConn *c, void **slot);
weftResult_t weftVerbsSendPost(struct weftConn *c, size_t bytes);
weftResult_t weftVerbsRecvSlot(struct weftConn *c, const void **slot, size_t *bytes);
weftResult_t weftVerbsRecvDone(struct weftConn *c);
int weftVerbsBlock(struct weftConn *c, long maxUs);
/* Tests: how often a wait on the verbs link c woke by its completion channel with the peer's
 * write (a slot, or a credit) in hand (0 for other transports). */
__attribute__((visibility("hidden"))) uint64_t weftVerbsChannelWakes(const struct weftConn *c);
/* Posts receive buffer idx of QP q. 0, or an errno. */
int weftVerbsPostRecv(struct verbsConn *vc, int q, uint32_t idx);
/* Takes every completion of the link's CQ (slot arrivals, sends done, control messages);
 * errors fail the link. */
void weftVerbsPoll(struct verbsConn *vc);

/* ---- verbs_events.c: the device's asynchronous events ---- */
/* Makes the context's event descriptor non-blocking; 0 or an errno. */
int weftVerbsEventsInit(struct verbsState *s);
/* Reads the events that came (at most every VERBS_ASYNC_CHECK_MS), noting in
 * s->deviceError a port of this state that went down or a fatal device error. */
void weftVerbsWatchEvents(struct verbsState *s);
/* Posts the CLOSE control message on QP 0; 0 or an errno. */
int weftVerbsPostClose(struct verbsConn *vc, uint32_t reason, uint64_t value, const char *note);
/* Marks the link failed (once) with the message and code the caller will return. */
void weftVerbsFail(struct verbsConn *vc, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *weftVerbsPeerHost(const struct verbsConn *vc);
int weftVerbsPeerPid(const struct verbsConn *vc);
#define VERBS_PEER_FMT "rank %d (pid %d on host %s)"
#define VERBS_PEER_ARGS(vc) (vc)->peer, weftVerbsPeerPid(vc), weftVerbsPeerHost(vc)

#pragma GCC visibility pop

#endif
