/* The verbs transport's links: setup (CQ, RC QPs in INIT, the receiver's ring or the sender's
 * staging slots and credit word registered, receives posted, the blob), connect (the peer's
 * address and route resolved with rdma_cm on RoCE, then each QP to RTR and RTS from the
 * peer's blob), close (the peer is told why by a SEND, the link lingers on the closing list
 * until its last work completes) and the release of everything a link holds. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "core.h"
#include "deadline.h"
#include "log.h"
#include "verbs.h"

static void resolveDone(struct verbsResolve *r) {
  if (r->id != NULL) rdma_destroy_id(r->id);
  if (r->channel != NULL) rdma_destroy_event_channel(r->channel);
  r->id = r->channel = NULL;
  r->phase = 3;
}

void weftVerbsFreeConn(struct verbsConn *vc) {
  resolveDone(&vc->resolve);
  for (int q = 0; q < VERBS_MAX_QPS; q++)
    if (vc->qp[q] != NULL) ibv_destroy_qp(vc->qp[q]);
  if (vc->cq != NULL) ibv_destroy_cq(vc->cq);
  if (vc->cqChannel != NULL) ibv_destroy_comp_channel(vc->cqChannel); /* every event acked */
  if (vc->slotMr != NULL) ibv_dereg_mr(vc->slotMr);
  if (vc->ctrlMr != NULL) ibv_dereg_mr(vc->ctrlMr);
  if (vc->creditMr != NULL) ibv_dereg_mr(vc->creditMr);
  size_t bytes = (size_t)vc->shape.nslots * vc->shape.slotBytes;
  if (vc->slots != NULL) munmap(vc->slots, bytes);
  free(vc->ctrl);
  free(vc->creditWord);
  free(vc);
}

static weftResult_t registerMemory(struct verbsConn *vc) {
  struct verbsState *s = vc->s;
  size_t bytes = (size_t)vc->shape.nslots * vc->shape.slotBytes;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return weftSetSysError(errno, "verbs: mmap of %zu bytes of slots", bytes);
  vc->slots = p;
  int access = IBV_ACCESS_LOCAL_WRITE | (vc->dir == WEFT_DIR_RECV ? IBV_ACCESS_REMOTE_WRITE : 0);
  if ((vc->slotMr = ibv_reg_mr(s->pd, p, bytes, access)) == NULL)
    return weftSetSysError(errno, "verbs: registering %zu bytes of slots on %s (ulimit -l?)",
                           bytes, s->dev);
  size_t ctrlBytes = ((size_t)vc->shape.nqps * vc->nrecv + 2) * VERBS_CTRL_BYTES;
  if ((vc->ctrl = calloc(1, ctrlBytes)) == NULL) return weftSetError(weftSystemError, "verbs: out of memory");
  if ((vc->ctrlMr = ibv_reg_mr(s->pd, vc->ctrl, ctrlBytes, IBV_ACCESS_LOCAL_WRITE)) == NULL)
    return weftSetSysError(errno, "verbs: registering control buffers on %s", s->dev);
  if (vc->dir == WEFT_DIR_SEND) {
    if (posix_memalign((void **)&vc->creditWord, 64, 64) != 0)
      return weftSetError(weftSystemError, "verbs: out of memory");
    memset(vc->creditWord, 0, 64);
    vc->creditMr = ibv_reg_mr(s->pd, vc->creditWord, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (vc->creditMr == NULL) return weftSetSysError(errno, "verbs: registering the credit word on %s", s->dev);
  }
  return weftSuccess;
}

static struct ibv_qp *createQp(struct verbsConn *vc, uint32_t inlineBytes) {
  struct ibv_qp_init_attr a = {.send_cq = vc->cq,
                               .recv_cq = vc->cq,
                               .qp_type = IBV_QPT_RC,
                               .cap = {.max_send_wr = vc->shape.nslots + VERBS_EXTRA_SENDS,
                                       .max_recv_wr = vc->nrecv,
                                       .max_send_sge = 1,
                                       .max_recv_sge = 1,
                                       .max_inline_data = inlineBytes}};
  struct ibv_qp *qp = ibv_create_qp(vc->s->pd, &a);
  if (qp != NULL && a.cap.max_inline_data < vc->maxInline) vc->maxInline = a.cap.max_inline_data;
  return qp;
}

static weftResult_t createQps(struct verbsConn *vc) {
  struct verbsState *s = vc->s;
  int cqe = (int)(vc->shape.nqps * (vc->shape.nslots + VERBS_EXTRA_SENDS + vc->nrecv) + 16);
  /* Slots and credits both come as WRITE WITH IMM, with a completion each: a waiting rank
   * can sleep on the CQ's channel on either side of a link. */
  if ((vc->cqChannel = ibv_create_comp_channel(s->ctx)) == NULL)
    return weftSetSysError(errno, "verbs: ibv_create_comp_channel on %s", s->dev);
  if (fcntl(vc->cqChannel->fd, F_SETFL, fcntl(vc->cqChannel->fd, F_GETFL) | O_NONBLOCK) != 0)
    return weftSetSysError(errno, "verbs: a non-blocking completion channel on %s", s->dev);
  if ((vc->cq = ibv_create_cq(s->ctx, cqe, NULL, vc->cqChannel, 0)) == NULL)
    return weftSetSysError(errno, "verbs: ibv_create_cq (%d entries) on %s", cqe, s->dev);
  vc->maxInline = VERBS_INLINE_WANT;
  for (uint32_t q = 0; q < vc->shape.nqps; q++) {
    vc->qp[q] = createQp(vc, VERBS_INLINE_WANT);
    if (vc->qp[q] == NULL) vc->qp[q] = createQp(vc, 0); /* a device without inline data */
    if (vc->qp[q] == NULL) return weftSetSysError(errno, "verbs: ibv_create_qp (RC) on %s", s->dev);
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
                             .pkey_index = 0,
                             .port_num = (uint8_t)s->port,
                             .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    int err = ibv_modify_qp(vc->qp[q], &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (err != 0) return weftSetSysError(err, "verbs: a QP of %s to INIT", s->dev);
    vc->psn[q] = randombytes_uniform(1u << 24);
    /* Receives go up now: the peer may write as soon as it is connected. */
    for (uint32_t i = 0; i < vc->nrecv; i++)
      if ((err = weftVerbsPostRecv(vc, (int)q, i)) != 0)
        return weftSetSysError(err, "verbs: ibv_post_recv on %s", s->dev);
  }
  return weftSuccess;
}

weftResult_t weftVerbsSetup(void *state, int peer, int dir, struct weftConn *c, void *blob) {
  struct verbsState *s = state;
  weftVerbsReap(s, 0);
  struct verbsConn *vc = calloc(1, sizeof *vc);
  if (vc == NULL) return weftSetError(weftSystemError, "verbs: out of memory");
  vc->s = s;
  vc->dir = dir;
  vc->peer = peer;
  vc->shape = s->shape;
  /* A receiver's slots spread over its QPs; a sender's credits all come on QP 0, at most one
   * per slot between two of its polls (the receiver frees only slots the sender posted, and
   * the sender posts no more than nslots past the credits it has seen). */
  vc->nrecv = (dir == WEFT_DIR_RECV ? (s->shape.nslots + s->shape.nqps - 1) / s->shape.nqps : s->shape.nslots) +
              VERBS_EXTRA_RECVS;
  c->priv = vc; /* close() undoes what follows, whatever of it was done */
  c->peer = peer;
  c->dir = dir;
  c->slotBytes = s->shape.slotBytes;
  c->caps = s->caps;
  WEFTCHECK(registerMemory(vc));
  WEFTCHECK(createQps(vc));
  struct verbsBlob b = {.dir = (uint32_t)dir,
                        .rank = (uint32_t)s->rank,
                        .shape = s->shape,
                        .lid = s->portAttr.lid,
                        .linkLayer = (uint8_t)s->linkLayer,
                        .mtu = (uint8_t)s->portAttr.active_mtu};
  if (s->gidIndex >= 0) memcpy(b.gid, s->gid.raw, 16);
  if (dir == WEFT_DIR_RECV) {
    b.ringAddr = (uint64_t)(uintptr_t)vc->slots;
    b.ringRkey = vc->slotMr->rkey;
  } else {
    b.creditAddr = (uint64_t)(uintptr_t)vc->creditWord;
    b.creditRkey = vc->creditMr->rkey;
  }
  for (uint32_t q = 0; q < vc->shape.nqps; q++) {
    b.qpn[q] = vc->qp[q]->qp_num;
    b.psn[q] = vc->psn[q];
  }
  weftVerbsEncodeBlob(&b, blob);
  return weftSuccess;
}

static weftResult_t checkBlob(const struct verbsConn *vc, const void *peerBlob, struct verbsBlob *b) {
  uint32_t wantDir = vc->dir == WEFT_DIR_SEND ? WEFT_DIR_RECV : WEFT_DIR_SEND;
  if (weftVerbsDecodeBlob(peerBlob, b) != 0 || b->dir != wantDir || b->rank != (uint32_t)vc->peer)
    return weftSetError(weftInternalError,
                        "verbs: the connection blob from rank %d is not a verbs %s blob of that "
                        "rank (does every rank run the same weft version and WEFT_TRANSPORTS?)",
                        vc->peer, wantDir == WEFT_DIR_RECV ? "receive" : "send");
  if (b->shape.slotBytes != vc->shape.slotBytes || b->shape.nslots != vc->shape.nslots ||
      b->shape.nqps != vc->shape.nqps)
    return weftSetError(weftInvalidUsage,
                        "verbs: rank %d uses %u slots of %llu bytes over %u QP(s), this rank %u of "
                        "%llu over %u (WEFT_IB_SLOTS / WEFT_IB_SLOT_BYTES / "
                        "WEFT_IB_QPS_PER_CONNECTION differ between ranks)",
                        vc->peer, b->shape.nslots, (unsigned long long)b->shape.slotBytes,
                        b->shape.nqps, vc->shape.nslots, (unsigned long long)vc->shape.slotBytes,
                        vc->shape.nqps);
  if (b->linkLayer != vc->s->linkLayer)
    return weftSetError(weftInvalidUsage, "verbs: rank %d's port is %s, this rank's %s: no RC link "
                        "between them", vc->peer, b->linkLayer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                        vc->s->linkLayer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
  return weftSuccess;
}

/* RoCE with IPv4-mapped GIDs on both ends: rdma_cm resolves the peer's address and route from
 * this port's address (no connection, no listener: the QPs are wired from the blobs), so an
 * unreachable peer fails here with the reason rather than as retries on the first write.
 * Never blocks: the event channel is non-blocking. 1 done, 0 call again. */
static weftResult_t resolveStep(struct verbsConn *vc, const struct verbsBlob *b, int *doneOut) {
  struct verbsResolve *r = &vc->resolve;
  struct verbsState *s = vc->s;
  char peerIp[INET_ADDRSTRLEN] = "?";
  uint32_t dst = weftVerbsGidIpv4(b->gid), src = s->gidIndex >= 0 ? weftVerbsGidIpv4(s->gid.raw) : 0;
  inet_ntop(AF_INET, &dst, peerIp, sizeof peerIp);
  *doneOut = 0;
  if (r->phase == 0) {
    if (s->linkLayer != IBV_LINK_LAYER_ETHERNET || dst == 0 || src == 0) {
      r->phase = 3;
    } else if ((r->channel = rdma_create_event_channel()) == NULL ||
               fcntl(((struct rdma_event_channel *)r->channel)->fd, F_SETFL, O_NONBLOCK) != 0 ||
               rdma_create_id(r->channel, (struct rdma_cm_id **)&r->id, NULL, RDMA_PS_TCP) != 0) {
      INFO(WEFT_INIT, "verbs: rdma_cm unavailable (%s): the link to rank %d uses the GIDs of the "
           "blobs alone", strerror(errno), vc->peer);
      resolveDone(r);
    } else {
      struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = src};
      struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = dst};
      if (rdma_resolve_addr(r->id, (struct sockaddr *)&from, (struct sockaddr *)&to, 5000) != 0) {
        int err = errno;
        resolveDone(r);
        return weftSetSysError(err, "verbs: rdma_resolve_addr of " VERBS_PEER_FMT " at %s",
                               VERBS_PEER_ARGS(vc), peerIp);
      }
      r->phase = 1;
      r->deadlineMs = weftNowMs() + 15000;
    }
  }
  while (r->phase == 1 || r->phase == 2) {
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(r->channel, &ev) != 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return weftSetSysError(errno, "verbs: rdma_get_cm_event");
      if (weftNowMs() > r->deadlineMs) {
        resolveDone(r);
        return weftSetError(weftRemoteError, "verbs: no route to " VERBS_PEER_FMT " at %s from "
                            "%s port %d within 15 s", VERBS_PEER_ARGS(vc), peerIp, s->dev, s->port);
      }
      return weftSuccess;
    }
    enum rdma_cm_event_type type = ev->event;
    int status = ev->status;
    rdma_ack_cm_event(ev);
    struct rdma_cm_id *id = r->id;
    if (r->phase == 1 && type == RDMA_CM_EVENT_ADDR_RESOLVED) {
      if (id->verbs != NULL && strcmp(ibv_get_device_name(id->verbs->device), s->dev) != 0)
        INFO(WEFT_INIT, "verbs: rdma_cm reaches rank %d (%s) through %s, this rank uses %s",
             vc->peer, peerIp, ibv_get_device_name(id->verbs->device), s->dev);
      if (rdma_resolve_route(id, 5000) != 0) {
        int err = errno;
        resolveDone(r);
        return weftSetSysError(err, "verbs: rdma_resolve_route to %s", peerIp);
      }
      r->phase = 2;
    } else if (r->phase == 2 && type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
      resolveDone(r);
    } else {
      resolveDone(r);
      return weftSetError(weftRemoteError, "verbs: rdma_cm cannot reach " VERBS_PEER_FMT " at %s "
                          "from %s port %d: %s (status %d)", VERBS_PEER_ARGS(vc), peerIp, s->dev,
                          s->port, rdma_event_str(type), status);
    }
  }
  *doneOut = 1;
  return weftSuccess;
}

static weftResult_t wireQps(struct verbsConn *vc, const struct verbsBlob *b) {
  struct verbsState *s = vc->s;
  enum ibv_mtu mtu = s->portAttr.active_mtu < b->mtu ? s->portAttr.active_mtu : (enum ibv_mtu)b->mtu;
  for (uint32_t q = 0; q < vc->shape.nqps; q++) {
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTR,
                             .path_mtu = mtu,
                             .dest_qp_num = b->qpn[q],
                             .rq_psn = b->psn[q],
                             .max_dest_rd_atomic = 1,
                             .min_rnr_timer = 12,
                             .ah_attr = {.dlid = b->lid, .sl = 0, .port_num = (uint8_t)s->port}};
    if (s->gidIndex >= 0) {
      at.ah_attr.is_global = 1;
      memcpy(at.ah_attr.grh.dgid.raw, b->gid, 16);
      at.ah_attr.grh.sgid_index = (uint8_t)s->gidIndex;
      at.ah_attr.grh.hop_limit = 64;
    }
    int err = ibv_modify_qp(vc->qp[q], &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                                IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (err != 0)
      return weftSetSysError(err, "verbs: a QP to " VERBS_PEER_FMT " to RTR", VERBS_PEER_ARGS(vc));
    /* 6 retries, not 7: rxe (Soft-RoCE) takes 7 as "retry for ever", so a vanished peer
     * would never fail the link there. */
    struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS,
                              .timeout = (uint8_t)s->timeout,
                              .retry_cnt = 6,
                              .rnr_retry = 7,
                              .sq_psn = vc->psn[q],
                              .max_rd_atomic = 1};
    err = ibv_modify_qp(vc->qp[q], &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                             IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (err != 0)
      return weftSetSysError(err, "verbs: a QP to " VERBS_PEER_FMT " to RTS", VERBS_PEER_ARGS(vc));
  }
  return weftSuccess;
}

weftResult_t weftVerbsConnect(struct weftConn *c, const void *peerBlob, int *done) {
  struct verbsConn *vc = c->priv;
  struct verbsBlob b;
  *done = 0;
  WEFTCHECK(checkBlob(vc, peerBlob, &b));
  int resolved = 0;
  WEFTCHECK(resolveStep(vc, &b, &resolved));
  if (!resolved) return weftSuccess;
  WEFTCHECK(wireQps(vc, &b));
  vc->remoteAddr = vc->dir == WEFT_DIR_SEND ? b.ringAddr : b.creditAddr;
  vc->rkey = vc->dir == WEFT_DIR_SEND ? b.ringRkey : b.creditRkey;
  vc->connected = 1;
  vc->lastActiveMs = weftNowMs();
  *done = 1;
  return weftSuccess;
}

/* ---- Closing ---- */


weftResult_t weftVerbsClose(struct weftConn *c) {
  struct verbsConn *vc = c->priv;
  if (vc == NULL) return weftSuccess;
  c->priv = NULL;
  struct verbsState *s = vc->s;
  if (vc->connected && !vc->failed && !vc->peerClosed)
    weftVerbsPostClose(vc, (uint32_t)c->closeReason, vc->dir == WEFT_DIR_SEND ? vc->posted : 0,
                       c->closeCause /* cut to its origin by lib/connect.c */);
  vc->lingerUntilMs = weftNowMs() + VERBS_LINGER_MS;
  vc->next = s->closing;
  s->closing = vc;
  weftVerbsReap(s, 0);
  return weftSuccess;
}

int weftVerbsReap(struct verbsState *s, int force) {
  int left = 0;
  int64_t now = weftNowMs();
  for (struct verbsConn **at = &s->closing; *at != NULL;) {
    struct verbsConn *vc = *at;
    int out = 0;
    if (vc->cq != NULL) weftVerbsPoll(vc);
    for (int q = 0; q < VERBS_MAX_QPS; q++) out += vc->sendsOut[q];
    if (out > 0 && !force && now < vc->lingerUntilMs) {
      left++;
      at = &vc->next;
      continue;
    }
    *at = vc->next;
    weftVerbsFreeConn(vc);
  }
  return left;
}
