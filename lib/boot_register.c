/* Bootstrap: a rank registers with the root (dial with backoff, prove the secret, wait for
 * the table while the root reports who is still missing) and learns every rank's listen
 * address. */
#include "boot_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bytes.h"
#include "check.h"
#include "log.h"

#define CONNECT_BACKOFF_MIN_MS 10
#define CONNECT_BACKOFF_MAX_MS 500

/* ---- A rank: register with the root ---- */

static int rootConnectRetryable(int rc) {
  /* The root may not listen yet (WEFT_COMM_ID), or may have shed us under a flood. */
  return rc == WEFT_SOCK_CLOSED || rc == ECONNREFUSED || rc == ECONNRESET || rc == ECONNABORTED ||
         rc == ETIMEDOUT || rc == EHOSTUNREACH || rc == ENETUNREACH || rc == EAGAIN ||
         rc == EADDRNOTAVAIL;
}

static void sleepMs(int64_t ms) {
  struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

/* Connects to the root and receives its nonce, retrying with backoff until deadlineMs. */
static weftResult_t dialRoot(const struct rendezvous *rv, int rank, int64_t startMs,
                             int64_t deadlineMs, int *fd, uint8_t *serverNonce) {
  int64_t backoffMs = CONNECT_BACKOFF_MIN_MS;
  for (;;) {
    const char *stage = "connecting to";
    int rc = weftSocketConnect(&rv->root, deadlineMs, fd);
    if (rc == 0) {
      stage = "waiting for the nonce of";
      rc = weftSocketRecvAll(*fd, serverNonce, NONCE_BYTES, deadlineMs);
      if (rc == 0) return weftSuccess;
      weftSocketClose(fd);
    }
    char text[128];
    int64_t now = weftNowMs();
    if (weftThreadAbortFlag != NULL && atomic_load(weftThreadAbortFlag))
      return weftSetError(weftRemoteError, "bootstrap: rank %d: init aborted", rank);
    if (rc == WEFT_SOCK_TIMEOUT || (rootConnectRetryable(rc) && now >= deadlineMs))
      return weftSetError(weftTimeout,
                          "bootstrap: rank %d timed out after %lld ms %s the root at %s (last: %s)",
                          rank, (long long)(now - startMs), stage, rv->rootName,
                          weftSockStatusText(rc, text, sizeof text));
    if (!rootConnectRetryable(rc))
      return weftSetSysError(rc, "bootstrap: rank %d %s the root at %s", rank, stage, rv->rootName);
    TRACE(WEFT_BOOT, "bootstrap: rank %d: root at %s not ready (%s); retrying in %lld ms", rank,
          rv->rootName, weftSockStatusText(rc, text, sizeof text), (long long)backoffMs);
    sleepMs(backoffMs < deadlineMs - now ? backoffMs : deadlineMs - now);
    backoffMs = backoffMs * 2 < CONNECT_BACKOFF_MAX_MS ? backoffMs * 2 : CONNECT_BACKOFF_MAX_MS;
  }
}

/* What a rank knows of its registration, for the messages of its failures. */
struct registration {
  const struct rendezvous *rv;
  struct weftBootstrap *b;
  int fd;
  uint8_t serverNonce[NONCE_BYTES], clientNonce[NONCE_BYTES];
  uint32_t seq;   /* replies received */
  int registered; /* the root's highest count; -1 before any */
  char missing[192]; /* the ranks the root listed as missing at that count ("1, 3") */
  int64_t startMs, deadlineMs;
};

/* "N of M ranks had not registered ...: ranks 1, 3". */
static weftResult_t missingError(const struct registration *reg, const char *rootGaveUp,
                                 long long elapsed) {
  int missing = reg->b->nranks - reg->registered, listed = 1;
  for (const char *p = reg->missing; *p; p++) listed += *p == ',';
  return weftSetError(
      weftTimeout, "bootstrap: %s%d of %d ranks had not registered with the root at %s after %lld "
      "ms: rank%s %s%s", rootGaveUp, missing, reg->b->nranks, reg->rv->rootName, elapsed,
      missing > 1 ? "s" : "", reg->missing[0] ? reg->missing : "(not yet listed by the root)",
      reg->missing[0] && missing > listed ? ", ..." : "");
}

static weftResult_t registrationWaitError(const struct registration *reg, int rc,
                                          const char *what) {
  const struct weftBootstrap *b = reg->b;
  long long elapsed = (long long)(weftNowMs() - reg->startMs);
  char text[128];
  if (rc == WEFT_SOCK_CLOSED)
    return weftSetError(weftRemoteError,
                        "bootstrap: the root at %s closed the connection while rank %d was %s: it "
                        "refused the registration (different secret or nranks, or rank %d already "
                        "registered) or it shut down",
                        reg->rv->rootName, b->rank, what, b->rank);
  if (rc != WEFT_SOCK_TIMEOUT)
    return weftSetSysError(rc, "bootstrap: rank %d lost the connection to the root at %s while %s",
                           b->rank, reg->rv->rootName, what);
  if (reg->registered < 0)
    return weftSetError(
        weftTimeout, "bootstrap: rank %d had no answer from the root at %s after %lld ms (%s)",
        b->rank, reg->rv->rootName, elapsed, weftSockStatusText(rc, text, sizeof text));
  if (reg->registered < b->nranks)
    return missingError(reg, "", elapsed);
  return weftSetError(
      weftTimeout,
      "bootstrap: rank %d timed out after %lld ms receiving the rank table from the root at %s",
      b->rank, elapsed, reg->rv->rootName);
}

int weftBootstrapParseTable(const uint8_t *table, int nranks, union weftSockAddr *peers) {
  for (int rank = 0; rank < nranks; rank++) {
    int found = weftBootstrapParseAddr(table + (size_t)rank * ADDR_BYTES, &peers[rank]);
    if (found < 0 || (found == 0 && nranks > 1)) return rank;
  }
  return -1;
}

static weftResult_t decodeTable(const struct registration *reg, const uint8_t *table) {
  struct weftBootstrap *b = reg->b;
  b->peers = calloc((size_t)b->nranks, sizeof *b->peers);
  if (b->peers == NULL)
    return weftSetError(weftSystemError, "bootstrap: out of memory for %d peers", b->nranks);
  int bad = weftBootstrapParseTable(table, b->nranks, b->peers);
  if (bad >= 0)
    return weftSetError(weftRemoteError,
                        "bootstrap: the table from the root at %s has no valid address for rank %d",
                        reg->rv->rootName, bad);
  return weftSuccess;
}

/* "1, 3, 7" from a STATUS body of n bytes. */
static void missingText(const uint8_t *body, size_t n, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i + 4 <= n && o < len; i += 4)
    o += (size_t)snprintf(buf + o, len - o, "%s%u", i ? ", " : "", weftGetBe32(body + i));
}

/* Receives one reply; on success *body holds its body (the caller frees it). */
static weftResult_t receiveReply(struct registration *reg, uint32_t *type, uint32_t *arg,
                                 uint8_t **body, size_t *bodyLenOut) {
  uint8_t head[REPLY_HEADER_BYTES];
  *body = NULL;
  *bodyLenOut = 0;
  int rc = weftSocketRecvAll(reg->fd, head, sizeof head, reg->deadlineMs);
  if (rc != 0) return registrationWaitError(reg, rc, "waiting for the rank table");
  size_t bodyLen = 0;
  if (weftBootstrapParseReplyHeader(head, reg->b->nranks, type, arg, &bodyLen) != 0)
    return weftSetError(weftRemoteError,
                        "bootstrap: malformed reply from the root at %s (type %u, arg %u, %zu body "
                        "bytes)",
                        reg->rv->rootName, *type, *arg, bodyLen);
  if (bodyLen > 0) {
    *body = malloc(bodyLen);
    if (*body == NULL)
      return weftSetError(weftSystemError, "bootstrap: out of memory for the rank table");
    rc = weftSocketRecvAll(reg->fd, *body, bodyLen, reg->deadlineMs);
    if (rc != 0) return registrationWaitError(reg, rc, "receiving the rank table");
  }
  *bodyLenOut = bodyLen;
  if (weftBootstrapCheckReplyMac(reg->rv->secret, reg->clientNonce, reg->serverNonce, reg->seq++,
                                 head, *body, bodyLen) != 0)
    return weftSetError(
        weftRemoteError,
        "bootstrap: reply from %s has a wrong MAC: it is not the root of this communicator",
        reg->rv->rootName);
  return weftSuccess;
}

static weftResult_t lostError(const struct registration *reg, uint32_t lost, const uint8_t *addr) {
  union weftSockAddr where;
  char name[WEFT_SOCK_NAME_MAX] = "unknown address";
  if (weftBootstrapParseAddr(addr, &where) == 1) weftSockAddrName(&where, name);
  return weftSetError(weftRemoteError,
                      "bootstrap: rank %u (listening at %s) left before all %d ranks had "
                      "registered with the root at %s (it died, was aborted or gave up); rank %d "
                      "cannot complete init",
                      lost, name, reg->b->nranks, reg->rv->rootName, reg->b->rank);
}

int weftBootstrapParseMissing(const uint8_t *body, size_t bodyLen, int nranks, char *text,
                              size_t textLen) {
  if (bodyLen % 4 != 0 || bodyLen > 4 * MISSING_LISTED) return -1;
  for (size_t i = 0; i < bodyLen; i += 4) {
    uint32_t rank = weftGetBe32(body + i);
    if (rank >= (uint32_t)nranks || (i > 0 && rank <= weftGetBe32(body + i - 4))) return -1;
  }
  missingText(body, bodyLen, text, textLen);
  return 0;
}

/* Keeps the list of a STATUS or ABORT body (a malformed one is ignored: it only feeds a
 * message). */
static void noteMissing(struct registration *reg, const uint8_t *body, size_t bodyLen) {
  char text[sizeof reg->missing];
  if (weftBootstrapParseMissing(body, bodyLen, reg->b->nranks, text, sizeof text) == 0)
    memcpy(reg->missing, text, sizeof text);
}

static weftResult_t awaitTable(struct registration *reg) {
  for (;;) {
    uint32_t type = 0, arg = 0;
    uint8_t *body = NULL;
    size_t bodyLen = 0;
    weftResult_t res = receiveReply(reg, &type, &arg, &body, &bodyLen);
    if (res == weftSuccess && type == REPLY_TABLE) res = decodeTable(reg, body);
    if (res == weftSuccess && type == REPLY_LOST) res = lostError(reg, arg, body);
    if (res != weftSuccess || type == REPLY_TABLE || type == REPLY_LOST) {
      free(body);
      return res;
    }
    /* The peak, not the latest: ranks that give up at their own deadline leave the root just
     * before this one does, and the message should name who never came. */
    if ((int)arg >= reg->registered) {
      reg->registered = (int)arg;
      noteMissing(reg, body, bodyLen);
    }
    free(body);
    if (type == REPLY_ABORT)
      return missingError(reg, "the root gave up (WEFT_TIMEOUT_MS): ",
                          (long long)(weftNowMs() - reg->startMs));
  }
}

/* Registers with the root and fills b->peers with the table it sends. */
weftResult_t weftBootRegister(const struct rendezvous *rv, struct weftBootstrap *b,
                              const union weftSockAddr *listenAddr, int64_t startMs,
                              int64_t deadlineMs) {
  struct registration reg = {
      .rv = rv, .b = b, .fd = -1, .registered = -1, .startMs = startMs, .deadlineMs = deadlineMs};
  WEFTCHECK(dialRoot(rv, b->rank, startMs, deadlineMs, &reg.fd, reg.serverNonce));
  uint8_t addr[ADDR_BYTES], hello[HELLO_BYTES];
  weftSockAddrEncode(addr, listenAddr);
  weftResult_t res = weftBootRandom(reg.clientNonce, NONCE_BYTES);
  if (res == weftSuccess) {
    weftBootHelloBuild(hello, rv->secret, reg.serverNonce, HELLO_REGISTER, b->rank, b->nranks,
                       reg.clientNonce, addr);
    int rc = weftSocketSendAll(reg.fd, hello, sizeof hello, deadlineMs);
    res = rc != 0 ? registrationWaitError(&reg, rc, "sending its hello") : awaitTable(&reg);
  }
  if (res == weftTimeout) {
    /* Leaving at its own deadline is not dying: the root keeps waiting, and the others time
     * out with their own account of who never came. Best effort, never waits. */
    uint8_t notice = GIVE_UP_BYTE;
    size_t sent = 0;
    (void)weftSocketSendSome(reg.fd, &notice, 1, &sent);
  }
  /* With the table, the root has said all it will and needs nothing more from this rank. */
  if (res == weftSuccess) weftSocketCloseAbortive(&reg.fd, 1);
  else weftSocketClose(&reg.fd);
  return res;
}
