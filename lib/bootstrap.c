/* Bootstrap: ranks meet at a root, learn each other's listen addresses, then form a ring of
 * TCP connections used for the out-of-band allgather and barrier. This file holds the entry
 * points (the unique id, init, close); the rest is in boot_*.c (boot_internal.h lists them)
 * and the wire protocol is described at the top of boot_auth.c.
 *
 * The unique id is magic u32 | version u16 | 0 u16 | root address[24] | secret[16] | zeros
 * (integers big-endian; an address is family u8 (0 none, 4, 6) | 0 u8 | port u16 |
 * address[16] | IPv6 scope u32).
 */
#include "boot_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytes.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* 1: an address, 0: none (family 0), -1: malformed. */
int weftBootstrapParseAddr(const uint8_t *in, union weftSockAddr *addr) {
  return weftSockAddrDecode(in, addr);
}

static void encodeId(weftUniqueId *id, const union weftSockAddr *root, const uint8_t *secret) {
  uint8_t *p = (uint8_t *)id->internal;
  memset(p, 0, WEFT_UNIQUE_ID_BYTES);
  weftPutBe32(p, ID_MAGIC);
  p[4] = 0;
  p[5] = ID_VERSION;
  weftSockAddrEncode(p + 8, root);
  memcpy(p + 32, secret, SECRET_BYTES);
}

weftResult_t weftBootstrapParseId(const weftUniqueId *id, union weftSockAddr *root,
                                  uint8_t *secret) {
  const uint8_t *p = (const uint8_t *)id->internal;
  if (weftGetBe32(p) != ID_MAGIC || p[4] != 0 || p[5] != ID_VERSION)
    return weftSetError(weftInvalidArgument,
                        "bootstrap: the unique id is not one from weftGetUniqueId (bad magic or "
                        "version %u, expected %u)",
                        (unsigned)(p[4] << 8 | p[5]), (unsigned)ID_VERSION);
  if (weftBootstrapParseAddr(p + 8, root) != 1)
    return weftSetError(weftInvalidArgument,
                        "bootstrap: the unique id holds no valid root address");
  memcpy(secret, p + 32, SECRET_BYTES);
  return weftSuccess;
}

/* ---- Where the ranks meet: the unique id, or WEFT_COMM_ID + WEFT_COMM_SECRET ---- */

/* 128 bits from WEFT_COMM_SECRET (weftBootDeriveSecret). */
static void commSecret(const char *commId, uint8_t *secret) {
  const char *text = weftParamCommSecret();
  if (*text == '\0') {
    WARN(
        "bootstrap: the WEFT_COMM_ID=%s rendezvous is not authenticated by a secret: anyone who "
        "can reach it can join; set WEFT_COMM_SECRET (the same on every rank)",
        commId);
    memset(secret, 0, SECRET_BYTES);
    return;
  }
  weftBootDeriveSecret(text, secret);
}

static weftResult_t rendezvousFromCommId(const char *commId, struct rendezvous *rv) {
  WEFTCHECK(weftSockAddrParse("WEFT_COMM_ID", commId, weftSocketFamily(), &rv->root));
  commSecret(commId, rv->secret);
  rv->fromCommId = 1;
  weftSockAddrName(&rv->root, rv->rootName);
  return weftSuccess;
}

/* idOnly: the id names the rendezvous whatever WEFT_COMM_ID says (a grow's id). */
static weftResult_t resolveRendezvous(const weftUniqueId *id, int idOnly, struct rendezvous *rv) {
  memset(rv, 0, sizeof *rv);
  const char *commId = weftParamCommId();
  if (*commId != '\0' && !idOnly) return rendezvousFromCommId(commId, rv);
  if (id == NULL)
    return weftSetError(weftInvalidArgument,
                        "bootstrap: no unique id given and WEFT_COMM_ID unset");
  WEFTCHECK(weftBootstrapParseId(id, &rv->root, rv->secret));
  weftSockAddrName(&rv->root, rv->rootName);
  return weftSuccess;
}

weftResult_t weftBootstrapGetUniqueId(weftUniqueId *id) {
  if (id == NULL) return weftSetError(weftInvalidArgument, "bootstrap: unique id pointer is NULL");
  WEFTCHECK(weftBootstrapCryptoInit());
  const char *commId = weftParamCommId();
  if (*commId != '\0') {
    /* NCCL's convention: with a fixed rendezvous, rank 0 starts the root in its init. */
    struct rendezvous rv;
    WEFTCHECK(rendezvousFromCommId(commId, &rv));
    encodeId(id, &rv.root, rv.secret);
    explicit_bzero(rv.secret, sizeof rv.secret);
    return weftSuccess;
  }
  return weftBootstrapGetFreshId(id);
}

weftResult_t weftBootstrapGetFreshId(weftUniqueId *id) {
  WEFTCHECK(weftBootstrapCryptoInit());
  uint8_t secret[SECRET_BYTES];
  union weftSockAddr local, bound;
  char ifname[64] = "";
  WEFTCHECK(weftBootRandom(secret, sizeof secret));
  WEFTCHECK(weftSocketPickInterface(weftSocketFamily(), &local, ifname, sizeof ifname));
  weftResult_t res = weftBootRootStart(&local, secret, weftNowMs() + weftParamTimeoutMs(), &bound);
  if (res == weftSuccess) {
    char name[WEFT_SOCK_NAME_MAX];
    encodeId(id, &bound, secret);
    INFO(WEFT_BOOT, "bootstrap: unique id for the root at %s (interface %s)",
         weftSockAddrName(&bound, name), ifname);
  }
  explicit_bzero(secret, sizeof secret);
  return res;
}

static weftResult_t openRingListener(const struct rendezvous *rv, int rank, int *fd,
                                     union weftSockAddr *bound) {
  union weftSockAddr local;
  char ifname[64] = "", name[WEFT_SOCK_NAME_MAX];
  WEFTCHECK(weftSocketPickInterfaceToward(&rv->root, &local, ifname, sizeof ifname));
  WEFTCHECK(weftSocketListen(&local, fd, bound));
  INFO(WEFT_BOOT, "bootstrap: rank %d listening on %s (interface %s)", rank,
       weftSockAddrName(bound, name), ifname);
  return weftSuccess;
}

static weftResult_t bootstrapInit(const weftUniqueId *id, int idOnly, int rank, int nranks,
                                   int64_t deadlineMs, struct weftBootstrap **out) {
  if (out == NULL) return weftSetError(weftInvalidArgument, "bootstrap: output pointer is NULL");
  *out = NULL;
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
    return weftSetError(weftInvalidArgument,
                        "bootstrap: rank %d of %d ranks is out of range (1..%d ranks)", rank,
                        nranks, MAX_RANKS);
  WEFTCHECK(weftBootstrapCryptoInit());
  int64_t startMs = weftNowMs();
  struct rendezvous rv;
  WEFTCHECK(resolveRendezvous(id, idOnly, &rv));
  weftResult_t res = weftSuccess;
  struct weftBootstrap *b = calloc(1, sizeof *b);
  if (b == NULL) {
    res = weftSetError(weftSystemError, "bootstrap: out of memory");
    goto done;
  }
  *b = (struct weftBootstrap){
      .rank = rank, .nranks = nranks, .nextFd = -1, .prevFd = -1, .listenFd = -1};
  if (rv.fromCommId && rank == 0)
    WEFTCHECKGOTO(weftBootRootStart(&rv.root, rv.secret, deadlineMs, NULL), res, done);
  memcpy(b->secret, rv.secret, SECRET_BYTES);
  if (nranks > 1) {
    WEFTCHECKGOTO(openRingListener(&rv, rank, &b->listenFd, &b->listenAddr), res, done);
    weftBootServeStart(b);
  }
  WEFTCHECKGOTO(weftBootRegister(&rv, b, &b->listenAddr, startMs, deadlineMs), res, done);
  if (nranks > 1) WEFTCHECKGOTO(weftBootFormRing(b, b, startMs, deadlineMs), res, done);
  INFO(WEFT_BOOT, "bootstrap: rank %d of %d connected through %s in %lld ms", rank, nranks,
       rv.rootName, (long long)(weftNowMs() - startMs));
done:
  explicit_bzero(rv.secret, sizeof rv.secret);
  if (res == weftRemoteError && b != NULL) weftBootNameGoneRanks(b);
  if (res != weftSuccess) {
    weftBootstrapClose(b);
    return res;
  }
  *out = b;
  return weftSuccess;
}

weftResult_t weftBootstrapInit(const weftUniqueId *id, int rank, int nranks, int64_t deadlineMs,
                               struct weftBootstrap **out) {
  return bootstrapInit(id, 0, rank, nranks, deadlineMs, out);
}

weftResult_t weftBootstrapInitFromId(const weftUniqueId *id, int rank, int nranks,
                                     int64_t deadlineMs, struct weftBootstrap **out) {
  return bootstrapInit(id, 1, rank, nranks, deadlineMs, out);
}

weftResult_t weftBootstrapClose(struct weftBootstrap *b) {
  if (b == NULL) return weftSuccess;
  explicit_bzero(b->secret, sizeof b->secret);
  weftSocketClose(&b->nextFd);
  weftSocketClose(&b->prevFd);
  weftBootServeFree(b);
  weftSocketClose(&b->listenFd);
  free(b->peers);
  free(b);
  return weftSuccess;
}

const uint8_t *weftBootstrapSecret(const struct weftBootstrap *b) { return b->secret; }

const union weftSockAddr *weftBootstrapPeerAddr(const struct weftBootstrap *b, int rank) {
  if (b == NULL || b->peers == NULL || rank < 0 || rank >= b->nranks) return NULL;
  return b->peers[rank].sa.sa_family != 0 ? &b->peers[rank] : NULL;
}
