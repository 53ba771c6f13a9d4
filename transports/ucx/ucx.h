/* UCX transport internals shared by the transports/ucx files. The design, the wire protocol
 * and the parameters are described in docs/transports/ucx.md. */
#ifndef WEFT_UCX_H_
#define WEFT_UCX_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "transport.h"

#define UCX_MAX_SLOTS 64
#define UCX_KEY_BYTES 16 /* crypto_shorthash_KEYBYTES: SipHash-2-4's key */
#define UCX_ERROR_BYTES 640
/* How long a receiver whose endpoint failed keeps taking what the sender had sent: the
 * sender's data and CLOSE come over its own endpoint, and may be behind the failure of ours
 * (the one our credits go back on) when the sender finished and destroyed its worker. */
#define UCX_EP_GRACE_MS 500
#define UCX_NOTE_BYTES 400

/* Wire constants; integers are big-endian. */
#define UCX_BLOB_MAGIC 0x57554342u /* "WUCB": a connection blob */
#define UCX_BLOB_VERSION 1
#define UCX_BLOB_HEAD_BYTES 48
/* The worker address (UCX's own encoding) fills the rest of the blob. */
#define UCX_ADDR_MAX_BYTES (WEFT_CONN_BLOB_BYTES - UCX_BLOB_HEAD_BYTES)

/* A control message, one way or the other on a link: its type, then a value (CREDIT: the
 * receiver's count of freed slots; CLOSE: the sender's count of posted slots, so the receiver
 * hands out every slot posted before it reports the close), the closing side's reason (a
 * weftResult_t, 0 for an orderly close) and its note. type u32 | reason u32 | value u64 |
 * note length u32 | note. */
enum { UCX_CTRL_CREDIT = 1, UCX_CTRL_CLOSE = 2 };
#define UCX_CTRL_HEAD_BYTES 20
#define UCX_CTRL_BYTES (UCX_CTRL_HEAD_BYTES + UCX_NOTE_BYTES)
/* Control messages of one link in flight at once: credits are sent one per freed slot at
 * most, and one more for the close. */
#define UCX_CTRL_SENDS (UCX_MAX_SLOTS + 1)

/* What both ends of a link must agree on; carried by both blobs. */
struct ucxShape {
  uint64_t slotBytes;
  uint32_t nslots;
};

struct ucxBlob {
  uint32_t dir, rank;
  struct ucxShape shape;
  uint8_t key[UCX_KEY_BYTES]; /* receiver: the link's tag key */
  uint32_t addrLen;
  uint8_t addr[UCX_ADDR_MAX_BYTES];
};

struct ucxConn;

/* One outstanding UCX request and what it completes: a slot's send or receive, a control
 * message's send or the posted control receive. Requests hold a pointer to their ucxOp, so
 * a connection stays allocated (on the state's closing list) until every op is idle. The
 * callback (on whichever thread progresses the worker) only marks the op done; the link's
 * owner frees the request when it sees that, so a request it cancels is never one another
 * thread has freed. */
struct ucxOp {
  struct ucxConn *conn;
  void *req;          /* the UCX request while in flight, else NULL */
  _Atomic int done;   /* completed (set by the callback, or at once) */
  ucs_status_t status;
  size_t length;      /* receives: the bytes that arrived */
};

struct ucxState;

/* One direction of a link. The sender's slots are its own memory, each sent whole to the
 * receiver's slot of the same number with a tag only the two ends can compute; the receiver
 * keeps a receive posted on each free slot and returns a credit for each it frees. */
struct ucxConn {
  struct ucxState *s;
  int dir, peer;
  struct ucxShape shape;
  uint8_t key[UCX_KEY_BYTES];
  char *slots;
  ucp_mem_h memh;
  ucp_ep_h ep; /* to the peer's worker: data (sender) or control (receiver) */
  struct ucxOp slotOps[UCX_MAX_SLOTS];
  struct ucxOp ctrlRecv;
  uint8_t ctrlIn[UCX_CTRL_BYTES];
  uint64_t ctrlInSeq;  /* control messages taken from the peer */
  struct ucxOp ctrlSends[UCX_CTRL_SENDS];
  uint8_t ctrlOut[UCX_CTRL_SENDS][UCX_CTRL_BYTES];
  uint64_t ctrlOutSeq; /* control messages sent to the peer */
  uint64_t posted;     /* sender: slots sent; receiver: slots taken by the caller */
  uint64_t credited;   /* sender: slots the receiver has freed */
  uint64_t creditOwed; /* receiver: a freed count not sent yet (no free control buffer) */
  int holding;         /* receiver: the caller holds slot posted % nslots (recvSlot..recvDone) */
  /* The peer's close, once its control message arrived: its reason and note, and for a
   * sender's close the slots it had posted. */
  int peerClosed;
  int peerReason;
  uint64_t peerPosted;
  char peerNote[UCX_NOTE_BYTES + 1];
  _Atomic int failed; /* set once, after error and failRc are written */
  /* When UCX reported this link's endpoint failed, or an op on it did (0: it has not), and
   * with what; the link fails UCX_EP_GRACE_MS later unless the peer's CLOSE has come to say
   * more (a mismatch, a timeout) or, on a receiver, the sender's last slots. */
  _Atomic int64_t epFailedMs;
  ucs_status_t epStatus;
  char error[UCX_ERROR_BYTES];
  int failRc;
  void *closeReq;      /* ucp_ep_close_nbx's request, freed once `closing` clears */
  _Atomic int closing; /* ucp_ep_close_nbx started and not yet completed */
  int abandoned;       /* requests released unfinished: freed only after the worker */
  struct ucxConn *next; /* on the closing list */
};

/* Per-communicator state: one context and one worker (multi-threaded: the calling thread
 * progresses it in every op, the progress thread whenever it signals, so sends and receives
 * advance while the caller is away from weft). */
struct ucxState {
  int rank;
  struct weftComm *comm;
  struct ucxShape shape;
  struct weftLinkCaps caps;
  int asked;   /* WEFT_TRANSPORTS names ucx: link every pair of ranks */
  int fastNet; /* UCX has a network device other than TCP sockets: link ranks of other hosts */
  ucp_context_h context;
  ucp_worker_h worker;
  uint8_t addr[UCX_ADDR_MAX_BYTES];
  size_t addrLen;
  int efd, wakeFd;
  pthread_t thread;
  int threadStarted;
  _Atomic int stop;
  pthread_mutex_t lock; /* the closing list */
  /* Held by the progress thread while it progresses the worker, and by a closing link while
   * it cancels its receives: UCX 1.13's ucp_request_cancel reads a request's completion
   * before it takes the worker's lock, so a cancel on the calling thread racing that
   * request's completion on the progress thread trips UCX's assertion (tag_match.c:92,
   * seen in test_ucx's nothing_left_after_destroy). */
  pthread_mutex_t progressLock;
  struct ucxConn *closing;
};

#pragma GCC visibility push(hidden)

/* ---- ucx_wire.c: blobs, control messages, tags ---- */
void weftUcxEncodeBlob(const struct ucxBlob *b, void *out);
/* 0, or -1 when the bytes are not a blob of this version. */
int weftUcxDecodeBlob(const void *in, struct ucxBlob *b);
/* The tag of slot message `seq`, or of control message `seq` sent by the end `fromDir`:
 * SipHash-2-4 of (kind, sequence) under the link's key, so only the two ends can name a
 * message of the link (a stranger that reaches the worker cannot inject one). */
uint64_t weftUcxSlotTag(const uint8_t key[UCX_KEY_BYTES], uint64_t seq);
uint64_t weftUcxCtrlTag(const uint8_t key[UCX_KEY_BYTES], int fromDir, uint64_t seq);
size_t weftUcxCtrlEncode(uint8_t out[UCX_CTRL_BYTES], uint32_t type, uint32_t reason,
                         uint64_t value, const char *note);
/* 0 with the fields (note NUL-terminated, non-printable bytes replaced), or -1. */
int weftUcxCtrlDecode(const uint8_t *in, size_t len, uint32_t *type, uint32_t *reason,
                      uint64_t *value, char note[UCX_NOTE_BYTES + 1]);

/* ---- ucx_conn.c: links ---- */
weftResult_t weftUcxSetup(void *state, int peer, int dir, struct weftConn *c, void *blob);
weftResult_t weftUcxConnect(struct weftConn *c, const void *peerBlob, int *done);
weftResult_t weftUcxClose(struct weftConn *c);
/* Frees the closing connections whose requests have all completed; with `force`, cancels
 * what is left first. Returns how many are still closing. */
int weftUcxReap(struct ucxState *s, int force);
/* After the worker is destroyed: frees every closing connection as it is. */
void weftUcxFreeClosing(struct ucxState *s);

/* ---- ucx_data.c: the data path ---- */
weftResult_t weftUcxSendSlot(struct weftConn *c, void **slot);
weftResult_t weftUcxSendPost(struct weftConn *c, size_t bytes);
weftResult_t weftUcxRecvSlot(struct weftConn *c, const void **slot, size_t *bytes);
weftResult_t weftUcxRecvDone(struct weftConn *c);
/* Whether op has a request in flight; a completed one is freed (its status kept). */
int weftUcxOpBusy(struct ucxOp *op);
/* Posts the receive of slot message seq into its slot. */
weftResult_t weftUcxPostSlotRecv(struct ucxConn *uc, uint64_t seq);
/* Posts the receive of the next control message from the peer. */
weftResult_t weftUcxPostCtrlRecv(struct ucxConn *uc);
/* Sends a control message; a refusal marks the endpoint broken (weftUcxEndpointBroken). */
weftResult_t weftUcxSendCtrl(struct ucxConn *uc, uint32_t type, uint32_t reason, uint64_t value,
                             const char *note);
/* Marks the link failed (once) with the message and code the caller will return. */
void weftUcxFail(struct ucxConn *uc, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Records that the link's endpoint (or an op on it) failed with `status`: the link fails
 * UCX_EP_GRACE_MS later unless the peer's CLOSE comes first to say why. */
void weftUcxEndpointBroken(struct ucxConn *uc, ucs_status_t status);
/* The peer's host name and pid, for messages. */
const char *weftUcxPeerHost(const struct ucxConn *uc);
int weftUcxPeerPid(const struct ucxConn *uc);
#define UCX_PEER_FMT "rank %d (pid %d on host %s)"
#define UCX_PEER_ARGS(uc) (uc)->peer, weftUcxPeerPid(uc), weftUcxPeerHost(uc)

#pragma GCC visibility pop

#endif
