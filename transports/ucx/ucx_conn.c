/* The UCX transport's links: setup (slots registered with UCX, the receiver's receives posted,
 * the blob), connect (an endpoint to the peer's worker from its blob), close (the peer is
 * told why, the endpoint flushed), and the closing list that keeps a link's memory until
 * UCX has finished with every request that points into it. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "core.h"
#include "deadline.h"
#include "log.h"
#include "ucx.h"

static void freeConn(struct ucxConn *uc) {
  if (uc->memh != NULL) ucp_mem_unmap(uc->s->context, uc->memh);
  if (uc->slots != NULL) munmap(uc->slots, (size_t)uc->shape.nslots * uc->shape.slotBytes);
  free(uc);
}

static weftResult_t allocConn(struct ucxState *s, int peer, int dir, struct ucxConn **out) {
  struct ucxConn *uc = calloc(1, sizeof *uc);
  if (uc == NULL) return weftSetError(weftSystemError, "ucx: out of memory");
  uc->s = s;
  uc->dir = dir;
  uc->peer = peer;
  uc->shape = s->shape;
  size_t bytes = (size_t)s->shape.nslots * s->shape.slotBytes;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    free(uc);
    return weftSetSysError(errno, "ucx: mmap of %zu bytes of slots", bytes);
  }
  uc->slots = p;
  /* Registered once, so sends and receives of whole slots need no registration on the way
   * (zero-copy where the UCX transport has it). */
  ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                           UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                             .address = p,
                             .length = bytes};
  ucs_status_t st = ucp_mem_map(s->context, &mp, &uc->memh);
  if (st != UCS_OK) {
    uc->memh = NULL;
    freeConn(uc);
    return weftSetError(weftSystemError, "ucx: registering %zu bytes of slots: %s", bytes,
                        ucs_status_string(st));
  }
  *out = uc;
  return weftSuccess;
}

/* A receiver posts its receives at once: the sender may send before this rank connects. */
static weftResult_t setupRecv(struct ucxConn *uc) {
  randombytes_buf(uc->key, sizeof uc->key);
  for (uint32_t i = 0; i < uc->shape.nslots; i++) WEFTCHECK(weftUcxPostSlotRecv(uc, i));
  WEFTCHECK(weftUcxPostCtrlRecv(uc));
  if (atomic_load(&uc->failed)) return weftSetError((weftResult_t)uc->failRc, "%s", uc->error);
  return weftSuccess;
}

weftResult_t weftUcxSetup(void *state, int peer, int dir, struct weftConn *c, void *blob) {
  struct ucxState *s = state;
  struct ucxConn *uc = NULL;
  WEFTCHECK(allocConn(s, peer, dir, &uc));
  c->priv = uc;
  c->peer = peer;
  c->dir = dir;
  c->slotBytes = s->shape.slotBytes;
  c->caps = s->caps;
  if (dir == WEFT_DIR_RECV) WEFTCHECK(setupRecv(uc)); /* close() undoes it */
  struct ucxBlob b = {.dir = (uint32_t)dir,
                      .rank = (uint32_t)s->rank,
                      .shape = s->shape,
                      .addrLen = (uint32_t)s->addrLen};
  memcpy(b.key, uc->key, sizeof b.key);
  memcpy(b.addr, s->addr, s->addrLen);
  weftUcxEncodeBlob(&b, blob);
  return weftSuccess;
}

/* The endpoint failed (the peer died, its network went away, or it closed after telling us
 * why): UCX calls this from progress. Not yet the link's failure: the peer's CLOSE, or the
 * sender's last slots, may still come over the other endpoint (ucx.h). */
static void endpointFailed(void *arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  weftUcxEndpointBroken(arg, status);
}

static weftResult_t checkBlob(const struct ucxConn *uc, const void *peerBlob, struct ucxBlob *b) {
  uint32_t wantDir = uc->dir == WEFT_DIR_SEND ? WEFT_DIR_RECV : WEFT_DIR_SEND;
  if (weftUcxDecodeBlob(peerBlob, b) != 0 || b->dir != wantDir || b->rank != (uint32_t)uc->peer)
    return weftSetError(weftInternalError,
                        "ucx: the connection blob from rank %d is not a ucx %s blob of that rank "
                        "(does every rank run the same weft version and WEFT_TRANSPORTS?)",
                        uc->peer, wantDir == WEFT_DIR_RECV ? "receive" : "send");
  if (b->shape.slotBytes != uc->shape.slotBytes || b->shape.nslots != uc->shape.nslots)
    return weftSetError(weftInvalidUsage,
                        "ucx: rank %d uses %u slots of %llu bytes, this rank %u of %llu "
                        "(WEFT_UCX_SLOTS / WEFT_UCX_SLOT_BYTES differ between ranks)",
                        uc->peer, b->shape.nslots, (unsigned long long)b->shape.slotBytes,
                        uc->shape.nslots, (unsigned long long)uc->shape.slotBytes);
  return weftSuccess;
}

weftResult_t weftUcxConnect(struct weftConn *c, const void *peerBlob, int *done) {
  struct ucxConn *uc = c->priv;
  struct ucxBlob b;
  WEFTCHECK(checkBlob(uc, peerBlob, &b));
  ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
                        .address = (const ucp_address_t *)b.addr,
                        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                        .err_handler = {.cb = endpointFailed, .arg = uc}};
  ucs_status_t st = ucp_ep_create(uc->s->worker, &ep, &uc->ep);
  if (st != UCS_OK) {
    uc->ep = NULL;
    return weftSetError(weftSystemError, "ucx: an endpoint %s " UCX_PEER_FMT ": %s",
                        uc->dir == WEFT_DIR_SEND ? "to" : "from", UCX_PEER_ARGS(uc),
                        ucs_status_string(st));
  }
  if (uc->dir == WEFT_DIR_SEND) {
    memcpy(uc->key, b.key, sizeof uc->key);
    WEFTCHECK(weftUcxPostCtrlRecv(uc));
  } else {
    /* A first credit (nothing freed yet) wires the way back now, so a sender that dies before
     * its first slot is still noticed by this endpoint. */
    WEFTCHECK(weftUcxSendCtrl(uc, UCX_CTRL_CREDIT, 0, 0, NULL));
  }
  if (atomic_load(&uc->failed)) return weftSetError((weftResult_t)uc->failRc, "%s", uc->error);
  *done = 1;
  return weftSuccess;
}

/* ---- Closing ---- */


static void closeDone(void *request, ucs_status_t status, void *user) {
  (void)status;
  (void)request;
  struct ucxConn *uc = user;
  atomic_store_explicit(&uc->closing, 0, memory_order_release);
}

static void cancelOp(struct ucxConn *uc, struct ucxOp *op) {
  if (op->req != NULL && !atomic_load_explicit(&op->done, memory_order_acquire))
    ucp_request_cancel(uc->s->worker, op->req);
}

/* Under progressLock: the progress thread completes none of them meanwhile (ucx.h). */
static void cancelReceives(struct ucxConn *uc) {
  pthread_mutex_lock(&uc->s->progressLock);
  if (uc->dir == WEFT_DIR_RECV)
    for (uint32_t i = 0; i < uc->shape.nslots; i++) cancelOp(uc, &uc->slotOps[i]);
  cancelOp(uc, &uc->ctrlRecv);
  pthread_mutex_unlock(&uc->s->progressLock);
}

/* Flushes the endpoint (the close message goes out first), or drops it after a failure. */
static void closeEndpoint(struct ucxConn *uc, int force) {
  if (uc->ep == NULL) return;
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                           UCP_OP_ATTR_FIELD_FLAGS,
                           .cb.send = closeDone,
                           .user_data = uc,
                           .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
  atomic_store(&uc->closing, 1);
  ucs_status_ptr_t ret = ucp_ep_close_nbx(uc->ep, &p);
  uc->ep = NULL;
  if (ret == NULL || UCS_PTR_IS_ERR(ret))
    atomic_store(&uc->closing, 0); /* no callback comes */
  else
    uc->closeReq = ret;
}

weftResult_t weftUcxClose(struct weftConn *c) {
  struct ucxConn *uc = c->priv;
  if (uc == NULL) return weftSuccess;
  c->priv = NULL;
  struct ucxState *s = uc->s;
  int broken = atomic_load(&uc->failed) || uc->peerClosed || atomic_load(&uc->epFailedMs) != 0;
  if (uc->ep != NULL && !broken)
    weftUcxSendCtrl(uc, UCX_CTRL_CLOSE, (uint32_t)c->closeReason,
                    uc->dir == WEFT_DIR_SEND ? uc->posted : 0, c->closeCause /* cut to its origin by lib/connect.c */);
  cancelReceives(uc);
  closeEndpoint(uc, broken);
  pthread_mutex_lock(&s->lock);
  uc->next = s->closing;
  s->closing = uc;
  pthread_mutex_unlock(&s->lock);
  return weftSuccess;
}

/* Whether UCX has finished with every request of the link (those done are freed). */
static int connIdle(struct ucxConn *uc) {
  if (uc->abandoned) return 0; /* freed after the worker */
  if (atomic_load_explicit(&uc->closing, memory_order_acquire)) return 0;
  if (uc->closeReq != NULL) ucp_request_free(uc->closeReq);
  uc->closeReq = NULL;
  int busy = weftUcxOpBusy(&uc->ctrlRecv);
  for (uint32_t i = 0; i < uc->shape.nslots; i++) busy |= weftUcxOpBusy(&uc->slotOps[i]);
  for (int i = 0; i < UCX_CTRL_SENDS; i++) busy |= weftUcxOpBusy(&uc->ctrlSends[i]);
  return !busy;
}

/* Gives up on what UCX has not finished (a flush toward a stopped peer, a send it never
 * took): receives are cancelled and every request is released to UCX, which completes it when
 * the worker goes. The link stays on the closing list until then: the callbacks still write
 * into it. */
static void abandonOp(struct ucxConn *uc, struct ucxOp *op) {
  if (!weftUcxOpBusy(op)) return;
  uc->abandoned = 1;
  ucp_request_cancel(uc->s->worker, op->req);
  ucp_request_free(op->req);
  op->req = NULL;
}

static void forceOps(struct ucxConn *uc) {
  for (uint32_t i = 0; i < uc->shape.nslots; i++) abandonOp(uc, &uc->slotOps[i]);
  for (int i = 0; i < UCX_CTRL_SENDS; i++) abandonOp(uc, &uc->ctrlSends[i]);
  abandonOp(uc, &uc->ctrlRecv);
  if (uc->closeReq != NULL && atomic_load(&uc->closing)) {
    uc->abandoned = 1;
    ucp_request_free(uc->closeReq);
    uc->closeReq = NULL;
  }
}

int weftUcxReap(struct ucxState *s, int force) {
  int left = 0;
  pthread_mutex_lock(&s->lock);
  for (struct ucxConn **at = &s->closing; *at != NULL;) {
    struct ucxConn *uc = *at;
    if (force) forceOps(uc);
    if (!connIdle(uc)) {
      left++;
      at = &uc->next;
      continue;
    }
    *at = uc->next;
    freeConn(uc);
  }
  pthread_mutex_unlock(&s->lock);
  return left;
}

/* After the worker is gone no request can complete: what is left is freed as it is. */
void weftUcxFreeClosing(struct ucxState *s) {
  while (s->closing != NULL) {
    struct ucxConn *uc = s->closing;
    s->closing = uc->next;
    freeConn(uc);
  }
}
