/* The UCX transport's data path: slots sent whole with tagged sends, credits and closes as
 * control messages. Nothing here waits: an op progresses the worker once, looks at what has
 * completed, and returns (NULL when nothing can move yet). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core.h"
#include "deadline.h"
#include "ucx.h"

const char *weftUcxPeerHost(const struct ucxConn *uc) {
  const struct weftComm *comm = uc->s->comm;
  return comm->peers != NULL ? comm->peers[uc->peer].hostname : "?";
}

int weftUcxPeerPid(const struct ucxConn *uc) {
  const struct weftComm *comm = uc->s->comm;
  return comm->peers != NULL ? comm->peers[uc->peer].pid : -1;
}

void weftUcxFail(struct ucxConn *uc, int rc, const char *fmt, ...) {
  if (atomic_load_explicit(&uc->failed, memory_order_acquire)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(uc->error, sizeof uc->error, fmt, ap);
  va_end(ap);
  uc->failRc = rc;
  atomic_store_explicit(&uc->failed, 1, memory_order_release);
}

static const char *toOrFrom(const struct ucxConn *uc) {
  return uc->dir == WEFT_DIR_SEND ? "to" : "from";
}

void weftUcxEndpointBroken(struct ucxConn *uc, ucs_status_t status) {
  if (atomic_load_explicit(&uc->epFailedMs, memory_order_acquire) != 0) return;
  uc->epStatus = status;
  int64_t now = weftNowMs();
  atomic_store_explicit(&uc->epFailedMs, now > 0 ? now : 1, memory_order_release);
}

/* A broken endpoint becomes the link's failure once the grace is over and no CLOSE came. */
static void failAfterGrace(struct ucxConn *uc) {
  int64_t epFailed = atomic_load_explicit(&uc->epFailedMs, memory_order_acquire);
  if (epFailed != 0 && weftNowMs() - epFailed >= UCX_EP_GRACE_MS)
    weftUcxFail(uc, weftRemoteError,
                "ucx: the link %s " UCX_PEER_FMT " failed: %s (the peer died, or its network "
                "went away)", toOrFrom(uc), UCX_PEER_ARGS(uc), ucs_status_string(uc->epStatus));
}

/* ---- Completions (on whichever thread progresses the worker) ---- */

static void opComplete(struct ucxOp *op, ucs_status_t status, size_t length) {
  op->status = status;
  op->length = length;
  atomic_store_explicit(&op->done, 1, memory_order_release);
}

static void sendCompleted(void *request, ucs_status_t status, void *user) {
  (void)request;
  opComplete(user, status, 0);
}

static void recvCompleted(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                          void *user) {
  (void)request;
  opComplete(user, status, info != NULL ? info->length : 0);
}

int weftUcxOpBusy(struct ucxOp *op) {
  if (op->req == NULL) return 0;
  if (!atomic_load_explicit(&op->done, memory_order_acquire)) return 1;
  ucp_request_free(op->req);
  op->req = NULL;
  return 0;
}
#define opBusy weftUcxOpBusy

/* What a tagged send or receive returned: a request (in flight), NULL (a send done at once)
 * or an error. */
static ucs_status_t opStarted(struct ucxOp *op, ucs_status_ptr_t ret) {
  if (UCS_PTR_IS_ERR(ret)) {
    opComplete(op, UCS_PTR_STATUS(ret), 0);
    return UCS_PTR_STATUS(ret);
  }
  if (ret == NULL) {
    opComplete(op, UCS_OK, 0);
    return UCS_OK;
  }
  op->req = ret;
  return UCS_OK;
}

/* Always completes through the callback (UCX 1.13 leaves recv_info unfilled when a receive
 * matches an unexpected message at once, so an immediate completion would lose the length). */
static ucs_status_t postRecv(struct ucxConn *uc, struct ucxOp *op, void *buf, size_t len,
                             uint64_t tag) {
  ucp_request_param_t p = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
      .cb.recv = recvCompleted,
      .user_data = op};
  if (uc->memh != NULL && buf != uc->ctrlIn) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = uc->memh;
  }
  atomic_store_explicit(&op->done, 0, memory_order_relaxed);
  return opStarted(op, ucp_tag_recv_nbx(uc->s->worker, buf, len, tag, UINT64_MAX, &p));
}

static ucs_status_t postSend(struct ucxConn *uc, struct ucxOp *op, const void *buf, size_t len,
                             uint64_t tag, int registered) {
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                           .cb.send = sendCompleted,
                           .user_data = op};
  if (registered && uc->memh != NULL) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = uc->memh;
  }
  atomic_store_explicit(&op->done, 0, memory_order_relaxed);
  return opStarted(op, ucp_tag_send_nbx(uc->ep, buf, len, tag, &p));
}

/* ---- Control messages ---- */

weftResult_t weftUcxPostCtrlRecv(struct ucxConn *uc) {
  int fromDir = uc->dir == WEFT_DIR_SEND ? WEFT_DIR_RECV : WEFT_DIR_SEND;
  ucs_status_t st = postRecv(uc, &uc->ctrlRecv, uc->ctrlIn, sizeof uc->ctrlIn,
                             weftUcxCtrlTag(uc->key, fromDir, uc->ctrlInSeq));
  if (st != UCS_OK)
    weftUcxFail(uc, weftSystemError, "ucx: receiving control messages %s rank %d: %s",
                toOrFrom(uc), uc->peer, ucs_status_string(st));
  return weftSuccess;
}

weftResult_t weftUcxSendCtrl(struct ucxConn *uc, uint32_t type, uint32_t reason, uint64_t value,
                             const char *note) {
  unsigned k = (unsigned)(uc->ctrlOutSeq % UCX_CTRL_SENDS);
  if (opBusy(&uc->ctrlSends[k])) {
    if (type == UCX_CTRL_CREDIT) uc->creditOwed = value; /* sent with the next free buffer */
    return weftSuccess;
  }
  size_t len = weftUcxCtrlEncode(uc->ctrlOut[k], type, reason, value, note);
  ucs_status_t st = postSend(uc, &uc->ctrlSends[k], uc->ctrlOut[k], len,
                             weftUcxCtrlTag(uc->key, uc->dir, uc->ctrlOutSeq), 0);
  uc->ctrlOutSeq++;
  if (type == UCX_CTRL_CREDIT) uc->creditOwed = 0;
  if (st != UCS_OK) weftUcxEndpointBroken(uc, st);
  return weftSuccess;
}

static void takeCtrlMessage(struct ucxConn *uc) {
  uint32_t type, reason;
  uint64_t value;
  char note[UCX_NOTE_BYTES + 1];
  if (weftUcxCtrlDecode(uc->ctrlIn, uc->ctrlRecv.length, &type, &reason, &value, note) != 0) {
    weftUcxFail(uc, weftRemoteError,
                "ucx: " UCX_PEER_FMT " sent a malformed control message (%zu bytes)", UCX_PEER_ARGS(uc), uc->ctrlRecv.length);
    return;
  }
  if (type == UCX_CTRL_CREDIT) {
    if (value > uc->credited) uc->credited = value;
    return;
  }
  uc->peerClosed = 1;
  uc->peerReason = (int)reason;
  uc->peerPosted = value;
  memcpy(uc->peerNote, note, sizeof uc->peerNote);
}

/* Takes every control message that has arrived, keeping a receive posted for the next. */
static void takeCtrl(struct ucxConn *uc) {
  while (!uc->peerClosed && !atomic_load_explicit(&uc->failed, memory_order_acquire)) {
    struct ucxOp *op = &uc->ctrlRecv;
    if (opBusy(op) || !atomic_load_explicit(&op->done, memory_order_acquire)) return;
    if (op->status != UCS_OK) {
      weftUcxFail(uc, weftRemoteError,
                  "ucx: the link %s " UCX_PEER_FMT " failed: %s (the peer died, or its network "
                  "went away)", toOrFrom(uc), UCX_PEER_ARGS(uc),
                  ucs_status_string(op->status));
      return;
    }
    takeCtrlMessage(uc);
    uc->ctrlInSeq++;
    if (!uc->peerClosed) weftUcxPostCtrlRecv(uc);
  }
}

/* The peer's close as this link's failure: a close after its own failure passes that cause
 * (and a mismatch or a timeout keeps its code); an orderly one says the peer left. */
static void failFromPeerClose(struct ucxConn *uc) {
  int rc = uc->peerReason == weftInvalidUsage || uc->peerReason == weftTimeout ? uc->peerReason
                                                                               : weftRemoteError;
  if (uc->peerReason == 0)
    weftUcxFail(uc, weftRemoteError,
                "ucx: " UCX_PEER_FMT " closed the connection (it destroyed its communicator or "
                "left the collective)", UCX_PEER_ARGS(uc));
  else
    weftUcxFail(uc, rc, "ucx: " UCX_PEER_FMT "" WEFT_CAUSE_MARK "%s", UCX_PEER_ARGS(uc), uc->peerNote);
}

static weftResult_t failed(const struct ucxConn *uc) {
  return weftSetError((weftResult_t)uc->failRc, "%s", uc->error);
}

/* ---- Sender ---- */

weftResult_t weftUcxSendSlot(struct weftConn *c, void **slot) {
  struct ucxConn *uc = c->priv;
  *slot = NULL;
  ucp_worker_progress(uc->s->worker);
  takeCtrl(uc);
  if (uc->peerClosed) failFromPeerClose(uc);
  failAfterGrace(uc);
  if (atomic_load_explicit(&uc->failed, memory_order_acquire)) return failed(uc);
  if (atomic_load_explicit(&uc->epFailedMs, memory_order_acquire) != 0) return weftSuccess;
  if (uc->posted - uc->credited >= uc->shape.nslots) return weftSuccess;
  struct ucxOp *op = &uc->slotOps[uc->posted % uc->shape.nslots];
  if (opBusy(op)) return weftSuccess;
  if (op->status != UCS_OK) { /* UCX fails a broken endpoint's sends before it calls us */
    weftUcxEndpointBroken(uc, op->status);
    return weftSuccess;
  }
  *slot = uc->slots + (uc->posted % uc->shape.nslots) * uc->shape.slotBytes;
  return weftSuccess;
}

weftResult_t weftUcxSendPost(struct weftConn *c, size_t bytes) {
  struct ucxConn *uc = c->priv;
  uint32_t i = (uint32_t)(uc->posted % uc->shape.nslots);
  ucs_status_t st = postSend(uc, &uc->slotOps[i], uc->slots + i * uc->shape.slotBytes, bytes,
                             weftUcxSlotTag(uc->key, uc->posted), 1);
  uc->posted++;
  if (st != UCS_OK) weftUcxEndpointBroken(uc, st); /* the next sendSlot says more */
  return weftSuccess;
}

/* ---- Receiver ---- */

weftResult_t weftUcxPostSlotRecv(struct ucxConn *uc, uint64_t seq) {
  uint32_t i = (uint32_t)(seq % uc->shape.nslots);
  ucs_status_t st = postRecv(uc, &uc->slotOps[i], uc->slots + i * uc->shape.slotBytes,
                             uc->shape.slotBytes, weftUcxSlotTag(uc->key, seq));
  if (st != UCS_OK)
    weftUcxFail(uc, weftSystemError, "ucx: posting a receive from rank %d: %s", uc->peer,
                ucs_status_string(st));
  return weftSuccess;
}

weftResult_t weftUcxRecvSlot(struct weftConn *c, const void **slot, size_t *bytes) {
  struct ucxConn *uc = c->priv;
  *slot = NULL;
  ucp_worker_progress(uc->s->worker);
  takeCtrl(uc);
  uint32_t i = (uint32_t)(uc->posted % uc->shape.nslots);
  struct ucxOp *op = &uc->slotOps[i];
  /* Data that arrived is handed out even after a failure: a sender's last slots come before
   * the close or the death that follows them. */
  if (!opBusy(op) && atomic_load_explicit(&op->done, memory_order_acquire) &&
      op->status == UCS_OK) {
    *slot = uc->slots + i * uc->shape.slotBytes;
    *bytes = op->length;
    uc->holding = 1;
    return weftSuccess;
  }
  if (uc->peerClosed && uc->posted >= uc->peerPosted) failFromPeerClose(uc);
  if (!opBusy(op) && op->status != UCS_OK && op->status != UCS_ERR_CANCELED)
    weftUcxFail(uc, weftRemoteError, "ucx: a receive from " UCX_PEER_FMT " failed: %s",
                UCX_PEER_ARGS(uc), ucs_status_string(op->status));
  failAfterGrace(uc);
  if (atomic_load_explicit(&uc->failed, memory_order_acquire)) return failed(uc);
  if (uc->creditOwed > 0 && atomic_load(&uc->epFailedMs) == 0)
    WEFTCHECK(weftUcxSendCtrl(uc, UCX_CTRL_CREDIT, 0, uc->creditOwed, NULL));
  return weftSuccess;
}

weftResult_t weftUcxRecvDone(struct weftConn *c) {
  struct ucxConn *uc = c->priv;
  if (!uc->holding)
    return weftSetError(weftInternalError, "ucx: recvDone from rank %d without a slot", uc->peer);
  uc->holding = 0;
  uint64_t seq = uc->posted++;
  WEFTCHECK(weftUcxPostSlotRecv(uc, seq + uc->shape.nslots));
  /* No credit over an endpoint that failed: it would fail the link, and the sender is gone. */
  if (atomic_load_explicit(&uc->epFailedMs, memory_order_acquire) != 0) return weftSuccess;
  return weftUcxSendCtrl(uc, UCX_CTRL_CREDIT, 0, uc->posted, NULL);
}
