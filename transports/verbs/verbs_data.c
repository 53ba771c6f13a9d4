/* The verbs transport's data path: slots written with RDMA WRITE WITH IMM, credits written
 * back into the sender's credit word, CLOSE as a SEND, and the completions of all of it.
 * An op polls the link's CQ once, looks at what has arrived and returns (NULL when nothing
 * can move yet); lib/prims.c's waits spin, yield and sleep, and sleep in weftVerbsBlock, the
 * one call here that waits (on the CQ's completion channel, for at most what the wait asks). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core.h"
#include "deadline.h"
#include "verbs.h"

const char *weftVerbsPeerHost(const struct verbsConn *vc) {
  const struct weftComm *comm = vc->s->comm;
  return comm->peers != NULL ? comm->peers[vc->peer].hostname : "?";
}

int weftVerbsPeerPid(const struct verbsConn *vc) {
  const struct weftComm *comm = vc->s->comm;
  return comm->peers != NULL ? comm->peers[vc->peer].pid : -1;
}

void weftVerbsFail(struct verbsConn *vc, int rc, const char *fmt, ...) {
  if (vc->failed) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(vc->error, sizeof vc->error, fmt, ap);
  va_end(ap);
  vc->failRc = rc;
  vc->failed = 1;
}

static const char *toOrFrom(const struct verbsConn *vc) {
  return vc->dir == WEFT_DIR_SEND ? "to" : "from";
}

static weftResult_t failed(const struct verbsConn *vc) {
  return weftSetError((weftResult_t)vc->failRc, "%s", vc->error);
}

static uint8_t *recvBuffer(struct verbsConn *vc, int q, uint32_t idx) {
  return vc->ctrl + ((size_t)q * vc->nrecv + idx) * VERBS_CTRL_BYTES;
}

static uint8_t *closeBuffer(struct verbsConn *vc) {
  return vc->ctrl + (size_t)vc->shape.nqps * vc->nrecv * VERBS_CTRL_BYTES;
}

static uint8_t *creditSource(struct verbsConn *vc) { return closeBuffer(vc) + VERBS_CTRL_BYTES; }

int weftVerbsPostRecv(struct verbsConn *vc, int q, uint32_t idx) {
  struct ibv_sge sge = {.addr = (uintptr_t)recvBuffer(vc, q, idx),
                        .length = VERBS_CTRL_BYTES,
                        .lkey = vc->ctrlMr->lkey};
  struct ibv_recv_wr wr = {.wr_id = VERBS_WR_ID(VERBS_WR_RECV, q, idx), .sg_list = &sge, .num_sge = 1}, *bad;
  return ibv_post_recv(vc->qp[q], &wr, &bad);
}

/* Posts one signaled work request on QP q; 0 or an errno (the link is failed then). */
static int postSend(struct verbsConn *vc, int q, struct ibv_send_wr *wr, const char *what) {
  struct ibv_send_wr *bad;
  wr->send_flags |= IBV_SEND_SIGNALED;
  int err = ibv_post_send(vc->qp[q], wr, &bad);
  if (err != 0) {
    weftVerbsFail(vc, weftRemoteError, "verbs: posting %s %s " VERBS_PEER_FMT " failed: %s (the "
                  "link's QP is in error state)", what, toOrFrom(vc), VERBS_PEER_ARGS(vc), strerror(err));
    return err;
  }
  vc->sendsOut[q]++;
  return 0;
}

static int sendRoom(const struct verbsConn *vc, int q, int need) {
  return vc->sendsOut[q] + need <= (int)(vc->shape.nslots + VERBS_EXTRA_SENDS);
}

int weftVerbsPostClose(struct verbsConn *vc, uint32_t reason, uint64_t value, const char *note) {
  if (!sendRoom(vc, 0, 1)) return EAGAIN;
  uint8_t *buf = closeBuffer(vc);
  size_t len = weftVerbsCtrlEncode(buf, VERBS_CTRL_CLOSE, reason, value, note);
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = vc->ctrlMr->lkey};
  struct ibv_send_wr wr = {.wr_id = VERBS_WR_ID(VERBS_WR_CLOSE, 0, 0),
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = len <= vc->maxInline ? IBV_SEND_INLINE : 0};
  int err = postSend(vc, 0, &wr, "the close");
  if (err == 0) vc->closeOut = 1;
  return err;
}

/* ---- Completions ---- */

static void takeCtrl(struct verbsConn *vc, const uint8_t *buf, size_t len) {
  uint32_t type, reason;
  uint64_t value;
  char note[VERBS_NOTE_BYTES + 1];
  if (weftVerbsCtrlDecode(buf, len, &type, &reason, &value, note) != 0) {
    weftVerbsFail(vc, weftRemoteError, "verbs: " VERBS_PEER_FMT " sent a malformed control "
                  "message (%zu bytes)", VERBS_PEER_ARGS(vc), len);
    return;
  }
  vc->peerClosed = 1;
  vc->peerReason = (int)reason;
  vc->peerPosted = value;
  memcpy(vc->peerNote, note, sizeof vc->peerNote);
}

static const char *kindName(int kind) {
  switch (kind) {
    case VERBS_WR_SLOT: return "a slot's write";
    case VERBS_WR_CREDIT: return "a credit's write";
    case VERBS_WR_KEEPALIVE: return "a keepalive write";
    case VERBS_WR_CLOSE: return "the close";
    default: return "a receive";
  }
}

static void takeCompletion(struct verbsConn *vc, const struct ibv_wc *wc) {
  int kind = VERBS_WR_KIND(wc->wr_id), q = VERBS_WR_QP(wc->wr_id);
  uint32_t idx = VERBS_WR_IDX(wc->wr_id);
  if (q < 0 || q >= VERBS_MAX_QPS) return;
  vc->completions++;
  if (kind == VERBS_WR_RECV) vc->arrivals++;
  if (kind != VERBS_WR_RECV && vc->sendsOut[q] > 0) vc->sendsOut[q]--;
  if (kind == VERBS_WR_SLOT && idx < VERBS_MAX_SLOTS) vc->busy[idx] = 0;
  if (kind == VERBS_WR_KEEPALIVE) vc->keepaliveOut = 0;
  if (kind == VERBS_WR_CLOSE) vc->closeOut = 0;
  if (wc->status != IBV_WC_SUCCESS) {
    weftVerbsFail(vc, weftRemoteError,
                  "verbs: %s on the link %s " VERBS_PEER_FMT " failed: %s (status %d: the peer "
                  "died, closed, or its port went down)", kindName(kind), toOrFrom(vc),
                  VERBS_PEER_ARGS(vc), ibv_wc_status_str(wc->status), (int)wc->status);
    return;
  }
  vc->lastActiveMs = weftNowMs();
  if (kind != VERBS_WR_RECV) return;
  if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && vc->dir == WEFT_DIR_SEND) {
    /* a credit: its count is in the credit word already, which sendSlot reads */
    if (ntohl(wc->imm_data) != VERBS_IMM_CREDIT) {
      weftVerbsFail(vc, weftRemoteError, "verbs: " VERBS_PEER_FMT " wrote immediate %u to a "
                    "sender (only credits come this way)", VERBS_PEER_ARGS(vc), ntohl(wc->imm_data));
      return;
    }
  } else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    uint32_t slot = ntohl(wc->imm_data);
    if (slot >= vc->shape.nslots || vc->arrived[slot]) {
      weftVerbsFail(vc, weftRemoteError, "verbs: " VERBS_PEER_FMT " wrote slot %u out of turn",
                    VERBS_PEER_ARGS(vc), slot);
      return;
    }
    vc->arrived[slot] = 1;
    vc->arrivedBytes[slot] = wc->byte_len;
  } else if (wc->opcode == IBV_WC_RECV) {
    takeCtrl(vc, recvBuffer(vc, q, idx), wc->byte_len);
  }
  if (!vc->failed) {
    int err = weftVerbsPostRecv(vc, q, idx);
    if (err != 0)
      weftVerbsFail(vc, weftRemoteError, "verbs: ibv_post_recv on the link %s " VERBS_PEER_FMT
                    ": %s", toOrFrom(vc), VERBS_PEER_ARGS(vc), strerror(err));
  }
}

void weftVerbsPoll(struct verbsConn *vc) {
  struct ibv_wc wc[16];
  int n;
  weftVerbsWatchEvents(vc->s);
  if (vc->s->deviceError[0] != '\0')
    weftVerbsFail(vc, weftRemoteError, "verbs: the link %s " VERBS_PEER_FMT " cannot carry on: %s",
                  toOrFrom(vc), VERBS_PEER_ARGS(vc), vc->s->deviceError);
  while ((n = ibv_poll_cq(vc->cq, 16, wc)) > 0)
    for (int i = 0; i < n; i++) takeCompletion(vc, &wc[i]);
  if (n < 0)
    weftVerbsFail(vc, weftSystemError, "verbs: ibv_poll_cq on the link %s " VERBS_PEER_FMT " failed",
                  toOrFrom(vc), VERBS_PEER_ARGS(vc));
}

/* An idle link writes 0 bytes to the peer now and then: toward a peer that vanished, the
 * write's retries run out and the completion's error fails the link. */
static void keepalive(struct verbsConn *vc) {
  if (vc->keepaliveOut || vc->failed || !sendRoom(vc, 0, 2)) return;
  int64_t now = weftNowMs();
  if (now - vc->lastActiveMs < VERBS_KEEPALIVE_MS) return;
  vc->lastActiveMs = now;
  struct ibv_send_wr wr = {.wr_id = VERBS_WR_ID(VERBS_WR_KEEPALIVE, 0, 0),
                           .num_sge = 0,
                           .opcode = IBV_WR_RDMA_WRITE,
                           .wr.rdma = {.remote_addr = vc->remoteAddr, .rkey = vc->rkey}};
  if (postSend(vc, 0, &wr, "a keepalive") == 0) vc->keepaliveOut = 1;
}

/* The peer's close as this link's failure: a close after its own failure passes that cause
 * (and a mismatch or a timeout keeps its code); an orderly one says the peer left. */
static void failFromPeerClose(struct verbsConn *vc) {
  int rc = vc->peerReason == weftInvalidUsage || vc->peerReason == weftTimeout ? vc->peerReason
                                                                               : weftRemoteError;
  if (vc->peerReason == 0)
    weftVerbsFail(vc, weftRemoteError, "verbs: " VERBS_PEER_FMT " closed the connection (it "
                  "destroyed its communicator or left the collective)", VERBS_PEER_ARGS(vc));
  else
    weftVerbsFail(vc, rc, "verbs: " VERBS_PEER_FMT "" WEFT_CAUSE_MARK "%s", VERBS_PEER_ARGS(vc),
                  vc->peerNote);
}

/* ---- Sender ---- */

weftResult_t weftVerbsSendSlot(struct weftConn *c, void **slot) {
  struct verbsConn *vc = c->priv;
  *slot = NULL;
  weftVerbsPoll(vc);
  uint64_t credit = __atomic_load_n(vc->creditWord, __ATOMIC_ACQUIRE);
  if (credit > vc->credited && credit <= vc->posted) {
    vc->credited = credit;
    vc->lastActiveMs = weftNowMs();
  }
  if (vc->peerClosed) failFromPeerClose(vc);
  if (vc->failed) return failed(vc);
  uint32_t i = (uint32_t)(vc->posted % vc->shape.nslots);
  if (vc->posted - vc->credited >= vc->shape.nslots || vc->busy[i] ||
      !sendRoom(vc, (int)(vc->posted % vc->shape.nqps), 3)) {
    keepalive(vc);
    return weftSuccess;
  }
  *slot = vc->slots + (size_t)i * vc->shape.slotBytes;
  return weftSuccess;
}

weftResult_t weftVerbsSendPost(struct weftConn *c, size_t bytes) {
  struct verbsConn *vc = c->priv;
  uint32_t i = (uint32_t)(vc->posted % vc->shape.nslots);
  int q = (int)(vc->posted % vc->shape.nqps);
  struct ibv_sge sge = {.addr = (uintptr_t)(vc->slots + (size_t)i * vc->shape.slotBytes),
                        .length = (uint32_t)bytes,
                        .lkey = vc->slotMr->lkey};
  struct ibv_send_wr wr = {.wr_id = VERBS_WR_ID(VERBS_WR_SLOT, q, i),
                           .sg_list = bytes > 0 ? &sge : NULL,
                           .num_sge = bytes > 0,
                           .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                           .send_flags = bytes > 0 && bytes <= vc->maxInline ? IBV_SEND_INLINE : 0,
                           .imm_data = htonl(i),
                           .wr.rdma = {.remote_addr = vc->remoteAddr + (uint64_t)i * vc->shape.slotBytes,
                                       .rkey = vc->rkey}};
  if (postSend(vc, q, &wr, "a slot's write") != 0) return failed(vc);
  vc->busy[i] = 1;
  vc->posted++;
  return weftSuccess;
}

/* ---- Receiver ---- */

/* Writes the freed count into the sender's credit word (inline where the QP allows, so a
 * later count cannot change the bytes in flight), with an immediate so that the sender gets
 * a completion to wake by; owed until the send queue has room. */
static void writeCredit(struct verbsConn *vc) {
  if (vc->creditSent >= vc->posted || vc->failed || !sendRoom(vc, 0, 2)) return;
  uint64_t value = vc->posted;
  uint8_t *src = creditSource(vc);
  memcpy(src, &value, sizeof value);
  struct ibv_sge sge = {.addr = (uintptr_t)src, .length = sizeof value, .lkey = vc->ctrlMr->lkey};
  struct ibv_send_wr wr = {.wr_id = VERBS_WR_ID(VERBS_WR_CREDIT, 0, 0),
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                           .send_flags = vc->maxInline >= sizeof value ? IBV_SEND_INLINE : 0,
                           .imm_data = htonl(VERBS_IMM_CREDIT),
                           .wr.rdma = {.remote_addr = vc->remoteAddr, .rkey = vc->rkey}};
  if (postSend(vc, 0, &wr, "a credit's write") == 0) vc->creditSent = value;
}

weftResult_t weftVerbsRecvSlot(struct weftConn *c, const void **slot, size_t *bytes) {
  struct verbsConn *vc = c->priv;
  *slot = NULL;
  weftVerbsPoll(vc);
  uint32_t i = (uint32_t)(vc->posted % vc->shape.nslots);
  /* Data that arrived is handed out even after a failure: a sender's last slots come before
   * the close or the death that follows them. */
  if (vc->arrived[i]) {
    *slot = vc->slots + (size_t)i * vc->shape.slotBytes;
    *bytes = vc->arrivedBytes[i];
    vc->holding = 1;
    return weftSuccess;
  }
  if (vc->peerClosed && vc->posted >= vc->peerPosted) failFromPeerClose(vc);
  if (vc->failed) return failed(vc);
  writeCredit(vc);
  keepalive(vc);
  return weftSuccess;
}

weftResult_t weftVerbsRecvDone(struct weftConn *c) {
  struct verbsConn *vc = c->priv;
  if (!vc->holding)
    return weftSetError(weftInternalError, "verbs: recvDone from rank %d without a slot", vc->peer);
  vc->holding = 0;
  vc->arrived[vc->posted % vc->shape.nslots] = 0;
  vc->posted++;
  writeCredit(vc);
  return weftSuccess;
}

/* A wait's sleep (struct weftTransportOps.block). The link arms its CQ, takes what came
 * before the arming (no event will tell of that), and sleeps on the completion channel: a
 * slot's WRITE WITH IMM wakes a receiver, a credit's a sender, at once instead of at the end
 * of its sleep. Spurious wakes (its own writes' completions) only cost the wait one more
 * look. A link that cannot be armed (failed, no channel) leaves the sleep to the wait. */
int weftVerbsBlock(struct weftConn *c, long maxUs) {
  struct verbsConn *vc = c->priv;
  if (vc->cqChannel == NULL || vc->failed || ibv_req_notify_cq(vc->cq, 0) != 0) return 0;
  uint64_t before = vc->completions;
  weftVerbsPoll(vc);
  if (vc->completions != before || vc->failed) return 1;
  struct pollfd p = {.fd = vc->cqChannel->fd, .events = POLLIN};
  struct timespec ts = {maxUs / 1000000, (maxUs % 1000000) * 1000L};
  if (ppoll(&p, 1, &ts, NULL) == 1 && (p.revents & POLLIN)) {
    struct ibv_cq *cq;
    void *context;
    if (ibv_get_cq_event(vc->cqChannel, &cq, &context) == 0) {
      ibv_ack_cq_events(cq, 1); /* at once: ibv_destroy_cq waits for every event acked */
      uint64_t arrived = vc->arrivals;
      weftVerbsPoll(vc);
      if (vc->arrivals != arrived) vc->channelWakes++; /* not only its own writes' completions */
    }
  }
  return 1;
}

uint64_t weftVerbsChannelWakes(const struct weftConn *c) {
  if (c->ops == NULL || strcmp(c->ops->name, "verbs") != 0 || c->priv == NULL) return 0;
  return ((const struct verbsConn *)c->priv)->channelWakes;
}
