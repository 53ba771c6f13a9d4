/* TCP transport: moving bytes between the FIFOs and the streams, for the progress thread
 * (and, for small slots, a calling thread that finds it idle), always under s->lock.
 * A sender's slot k goes out on stream i as part i of the slot (weftTcpPart), preceded on
 * stream 0 by an 8-byte header (bytes, k); a receiver's stream 0 reads each header into the
 * slot's size, and the other streams read their parts once the size is known. A slot is
 * done when every stream is past it: the least position of the streams is what gets
 * published to the calling thread (freed for a sender, posted for a receiver). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "deadline.h"
#include "tcp.h"

/* ---- Failures: recorded here, reported by the calling thread's next op ---- */

static uint64_t tcpMinPos(const struct tcpConn *tc) {
  uint64_t low = UINT64_MAX;
  for (uint32_t i = 0; i < tc->shape.nsocks; i++)
    if (tc->streams[i].pos < low) low = tc->streams[i].pos;
  return low;
}

/* Publishes what the streams have finished: sent slots to a sender, arrived ones to a
 * receiver (with release, after the slot bytes and sizes). */
static void tcpPublish(struct tcpConn *tc) {
  uint64_t low = tcpMinPos(tc);
  if (low == tc->published) return;
  tc->published = low;
  atomic_store_explicit(tc->dir == WEFT_DIR_SEND ? &tc->freed : &tc->posted, low,
                        memory_order_release);
}

static void tcpFail(struct tcpConn *tc, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void tcpFail(struct tcpConn *tc, int rc, const char *fmt, ...) {
  if (tc->stopped) return;
  tc->stopped = 1;
  for (uint32_t i = 0; i < tc->shape.nsocks; i++) tc->streams[i].closed = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tc->error, sizeof tc->error, fmt, ap);
  va_end(ap);
  tc->failRc = rc;
  /* INFO only: the calling thread warns if it is still using the connection; at teardown a
   * peer's close is expected. */
  INFO(WEFT_TCP, "%s", tc->error);
  tcpPublish(tc);
  atomic_store_explicit(&tc->failed, 1, memory_order_release);
}

/* ---- Close records (the peer's cause, either way on stream 0) ---- */

int weftTcpRecordSend(int fd, struct tcpRecord *r) {
  return weftSocketSendSome(fd, r->buf, r->len, &r->done);
}

int weftTcpRecordRecv(int fd, struct tcpRecord *r) {
  if (r->len == 0) r->len = TCP_RECORD_HEAD_BYTES;
  while (!r->complete) {
    int rc = weftSocketRecvSome(fd, r->buf, r->len, &r->done);
    if (rc != 0) return rc;
    if (r->done < r->len) return 0; /* the rest is still on its way */
    if (r->len == TCP_RECORD_HEAD_BYTES) { /* the head is in: how long is the note? */
      uint32_t reason;
      size_t n;
      if (weftTcpParseRecordHead(r->buf, &reason, &n) != 0) return TCP_RECORD_BAD;
      r->len += n;
      r->complete = n == 0;
    } else {
      r->complete = 1;
    }
  }
  return 0;
}

/* A sender's peer may have said why it left before its sockets closed: read it if it is in. */
static void tcpSendPeekRecord(struct tcpConn *tc) {
  if (tc->dir == WEFT_DIR_SEND && !tc->rxRecord.complete && tc->streams[0].fd >= 0)
    (void)weftTcpRecordRecv(tc->streams[0].fd, &tc->rxRecord);
}

/* The peer closed after a failure of its own, and said which. Only the first cause is passed
 * on along a chain of closes, so the message names the origin however far it travelled. */
static void tcpFailWithRecord(struct tcpConn *tc) {
  char note[TCP_NOTE_BYTES + 1];
  weftResult_t rc = weftTcpRecordNote(&tc->rxRecord, note, sizeof note);
  tcpFail(tc, rc, "tcp: rank %d (host %s, %s)%s%s", tc->peer, tc->peerHost, tc->peerName,
          TCP_CAUSE_MARK, note);
}

static void tcpFailIo(struct tcpConn *tc, int rc, uint32_t stream) {
  char text[128];
  const char *doing = tc->dir == WEFT_DIR_SEND ? "sending" : "receiving";
  if (rc == WEFT_SOCK_CLOSED) tcpSendPeekRecord(tc);
  if (tc->rxRecord.complete)
    tcpFailWithRecord(tc);
  else if (rc == WEFT_SOCK_CLOSED)
    tcpFail(tc, weftRemoteError,
            "tcp: connection to rank %d (host %s, %s) closed by peer (rank %d was %s, stream %u, "
            "%llu slots done)",
            tc->peer, tc->peerHost, tc->peerName, tc->s->rank, doing, stream,
            (unsigned long long)tc->published);
  else
    tcpFail(tc, weftRemoteError,
            "tcp: connection to rank %d (host %s, %s) failed: %s (rank %d was %s, stream %u)",
            tc->peer, tc->peerHost, tc->peerName, weftSockStatusText(rc, text, sizeof text),
            tc->s->rank, doing, stream);
}

/* ---- Sending: posted slots onto the streams ---- */

/* Sends the rest of [header (hdr bytes)][data (len bytes)]: 1 when all is sent, 0 when the
 * socket is full, -1 with *err = WEFT_SOCK_CLOSED or an errno. */
static int tcpSendPart(struct tcpStream *st, const char *data, size_t len, size_t hdr, int *err) {
  while (st->done < hdr + len) {
    struct iovec iov[2];
    int n = 0;
    if (st->done < hdr) {
      iov[n++] = (struct iovec){st->header + st->done, hdr - st->done};
      if (len > 0) iov[n++] = (struct iovec){(void *)(uintptr_t)data, len};
    } else {
      iov[n++] =
          (struct iovec){(void *)(uintptr_t)(data + (st->done - hdr)), len - (st->done - hdr)};
    }
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t sent = sendmsg(st->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      st->done += (size_t)sent;
    } else if (sent < 0 && errno == EINTR) {
      continue;
    } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      st->ready = 0;
      return 0;
    } else {
      *err = (sent == 0 || errno == EPIPE || errno == ECONNRESET) ? WEFT_SOCK_CLOSED : errno;
      return -1;
    }
  }
  return 1;
}

static int tcpSendStream(struct tcpConn *tc, uint32_t i) {
  struct tcpStream *st = &tc->streams[i];
  int moved = 0;
  while (!st->closed && st->pos < tc->seenPosted) {
    uint64_t k = st->pos;
    size_t bytes = tc->sizes[k % tc->shape.nslots], off, len;
    weftTcpPart(&tc->shape, bytes, i, &off, &len);
    size_t hdr = i == 0 ? TCP_SLOT_HEADER_BYTES : 0;
    if (hdr + len > 0) {
      if (!st->ready) break;
      if (hdr > 0 && st->done == 0) {
        weftPutBe32(st->header, (uint32_t)bytes);
        weftPutBe32(st->header + 4, (uint32_t)k);
      }
      size_t before = st->done;
      int err = 0;
      int rc = tcpSendPart(st, tc->slots + (k % tc->shape.nslots) * tc->shape.slotBytes + off, len,
                           hdr, &err);
      moved |= st->done != before;
      if (rc < 0) {
        tcpFailIo(tc, err, i);
        return 1;
      }
      if (rc == 0) break;
    }
    st->pos++;
    st->done = 0;
    moved = 1;
  }
  return moved;
}

int weftTcpSendProgress(struct tcpConn *tc) {
  tc->seenPosted = atomic_load_explicit(&tc->posted, memory_order_acquire);
  int moved = 0;
  for (uint32_t i = 0; i < tc->shape.nsocks && !tc->stopped; i++) moved |= tcpSendStream(tc, i);
  if (!tc->stopped) tcpPublish(tc);
  return moved;
}

void weftTcpSendInline(struct tcpConn *tc) {
  struct tcpState *s = tc->s;
  if (pthread_mutex_trylock(&s->lock) != 0) {
    weftTcpWake(s);
    return;
  }
  if (!tc->stopped) weftTcpSendProgress(tc);
  int left = !tc->stopped && tc->published != tc->seenPosted;
  pthread_mutex_unlock(&s->lock);
  if (left) weftTcpWake(s); /* the socket was full: the thread must poll it */
}

/* Nothing arrives on a sender's stream but, on stream 0, its receiver's close record: readable
 * means the peer left (or misbehaves). */
static void tcpSendCheckPeer(struct tcpConn *tc, uint32_t i) {
  if (i == 0) {
    int rc = weftTcpRecordRecv(tc->streams[0].fd, &tc->rxRecord);
    if (rc == TCP_RECORD_BAD)
      tcpFail(tc, weftRemoteError, "tcp: rank %d (host %s, %s) sent unexpected bytes to its sender, rank %d",
              tc->peer, tc->peerHost, tc->peerName, tc->s->rank);
    else if (rc != 0 || tc->rxRecord.complete)
      tcpFailIo(tc, rc != 0 ? rc : WEFT_SOCK_CLOSED, 0);
    return;
  }
  uint8_t byte;
  size_t got = 0;
  int rc = weftSocketRecvSome(tc->streams[i].fd, &byte, 1, &got);
  if (rc != 0)
    tcpFailIo(tc, rc, i);
  else if (got > 0)
    tcpFail(tc, weftRemoteError, "tcp: rank %d (host %s, %s) sent unexpected bytes to its sender, rank %d",
            tc->peer, tc->peerHost, tc->peerName, tc->s->rank);
}

/* ---- Receiving: streams into free slots ---- */

/* Whether stream i may read now: its slot is free and (past stream 0) its size is known. */
int weftTcpRecvCanWork(struct tcpConn *tc, uint32_t i) {
  uint64_t k = tc->streams[i].pos;
  if (k - tc->seenFreed >= tc->shape.nslots) {
    tc->seenFreed = atomic_load_explicit(&tc->freed, memory_order_acquire);
    if (k - tc->seenFreed >= tc->shape.nslots) return 0;
  }
  return i == 0 || k < tc->headers;
}

/* Stream 0 carries the sender's close record in place of a slot header: read the rest of
 * it; no slot comes after it, so the connection ends (tcpRecvCheckEnd) once the other streams
 * have finished the slots before. */
static void tcpRecvRecord(struct tcpConn *tc, struct tcpStream *st) {
  int rc = weftTcpRecordRecv(st->fd, &tc->rxRecord);
  if (rc == TCP_RECORD_BAD) {
    tcpFail(tc, weftRemoteError, "tcp: rank %d (host %s, %s) broke the protocol: a bad close record",
            tc->peer, tc->peerHost, tc->peerName);
  } else if (rc != 0) {
    st->closed = 1;
    tcpFailIo(tc, rc, 0);
  } else if (tc->rxRecord.complete) {
    st->closed = 1;
  } else {
    st->ready = 0;
  }
}

/* Stream 0 announces each slot: 1 once slot k's header is in, 0 while it is not. */
static int tcpRecvHeader(struct tcpConn *tc, struct tcpStream *st, uint64_t k) {
  if (tc->rxRecord.len != 0) { /* a close record is coming in */
    if (st->ready) tcpRecvRecord(tc, st);
    return 0;
  }
  if (st->done >= TCP_SLOT_HEADER_BYTES) return 1;
  if (!st->ready) return 0;
  int rc = weftSocketRecvSome(st->fd, st->header, TCP_SLOT_HEADER_BYTES, &st->done);
  if (rc != 0) {
    st->closed = 1;
    if (rc != WEFT_SOCK_CLOSED || st->done > 0) tcpFailIo(tc, rc, 0);
    return 0;
  }
  if (st->done < TCP_SLOT_HEADER_BYTES) {
    st->ready = 0;
    return 0;
  }
  uint32_t bytes = weftGetBe32(st->header), seq = weftGetBe32(st->header + 4);
  if (bytes == TCP_CLOSE_MARK) {
    memcpy(tc->rxRecord.buf, st->header, TCP_SLOT_HEADER_BYTES);
    tc->rxRecord.done = TCP_SLOT_HEADER_BYTES;
    tc->rxRecord.len = TCP_RECORD_HEAD_BYTES;
    st->done = 0;
    tcpRecvRecord(tc, st);
    return 0;
  }
  if (bytes > tc->shape.slotBytes || seq != (uint32_t)k) {
    tcpFail(tc, weftRemoteError,
            "tcp: rank %d (host %s, %s) broke the protocol: slot %u of %u bytes where slot %u of "
            "at most %llu was due",
            tc->peer, tc->peerHost, tc->peerName, seq, bytes, (uint32_t)k,
            (unsigned long long)tc->shape.slotBytes);
    return 0;
  }
  tc->sizes[k % tc->shape.nslots] = bytes;
  tc->headers = k + 1;
  return 1;
}

/* ---- The straggler report's link meter (lib/transport.h): only while the report is on ---- */

/* A part came in short: the first short read starts its trickle. */
static void tcpMeterShort(struct tcpConn *tc, struct tcpStream *st, size_t had, size_t got) {
  if (had != 0 || got == 0 || st->trickleFromNs != 0) return;
  if (atomic_load_explicit(&tc->s->comm->linkMeters, memory_order_acquire) != NULL)
    st->trickleFromNs = weftNowNs();
}

static void tcpMeterDone(struct tcpConn *tc, struct tcpStream *st, size_t len) {
  struct weftLinkMeter *m = atomic_load_explicit(&tc->s->comm->linkMeters, memory_order_acquire);
  if (m != NULL && tc->peer >= 0 && tc->peer < tc->s->comm->nranks) {
    int64_t ns = st->trickleFromNs != 0 ? weftNowNs() - st->trickleFromNs : 0;
    if (ns > 0) atomic_fetch_add_explicit(&m[tc->peer].trickleNs, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&m[tc->peer].bytes, (int64_t)len, memory_order_relaxed);
  }
  st->trickleFromNs = 0;
}

static int tcpRecvStream(struct tcpConn *tc, uint32_t i, int *starved) {
  struct tcpStream *st = &tc->streams[i];
  int moved = 0;
  while (!tc->stopped) {
    uint64_t k = st->pos;
    if (!weftTcpRecvCanWork(tc, i)) {
      *starved |= k - tc->seenFreed >= tc->shape.nslots;
      break;
    }
    size_t before = st->done;
    if (i == 0 && (st->closed || !tcpRecvHeader(tc, st, k))) {
      moved |= st->done != before;
      break;
    }
    size_t off, len, hdr = i == 0 ? TCP_SLOT_HEADER_BYTES : 0;
    size_t bytes = tc->sizes[k % tc->shape.nslots];
    weftTcpPart(&tc->shape, bytes, i, &off, &len);
    if (len > 0) {
      if (tc->inlineOnly && bytes > tc->shape.minStripe) break; /* big: the thread's job */
      if (st->closed) {
        tcpFailIo(tc, WEFT_SOCK_CLOSED, i);
        return 1;
      }
      if (!st->ready) break;
      size_t got = st->done - hdr, had = got;
      int rc = weftSocketRecvSome(
          st->fd, tc->slots + (k % tc->shape.nslots) * tc->shape.slotBytes + off, len, &got);
      moved |= hdr + got != st->done;
      st->done = hdr + got;
      if (rc != 0) {
        tcpFailIo(tc, rc, i);
        return 1;
      }
      if (got < len) {
        tcpMeterShort(tc, st, had, got);
        st->ready = 0;
        break;
      }
      tcpMeterDone(tc, st, len);
    }
    st->pos++;
    st->done = 0;
    moved = 1;
  }
  return moved;
}

/* Stream 0 closed between slots: once the others have finished every announced slot, no
 * more can come. */
static void tcpRecvCheckEnd(struct tcpConn *tc) {
  if (tc->stopped || !tc->streams[0].closed) return;
  for (uint32_t i = 1; i < tc->shape.nsocks; i++)
    if (tc->streams[i].pos < tc->headers && !tc->streams[i].closed) return;
  tcpFailIo(tc, WEFT_SOCK_CLOSED, 0);
}

int weftTcpRecvProgress(struct tcpConn *tc) {
  if (tc->attached < tc->shape.nsocks) return 0;
  int moved = 0, starved = 0;
  for (uint32_t i = 0; i < tc->shape.nsocks && !tc->stopped; i++)
    moved |= tcpRecvStream(tc, i, &starved);
  if (tc->stopped) return moved;
  tcpPublish(tc);
  tcpRecvCheckEnd(tc);
  if (atomic_load_explicit(&tc->starved, memory_order_relaxed) != starved)
    atomic_store_explicit(&tc->starved, starved, memory_order_seq_cst);
  return moved;
}

void weftTcpRecvInline(struct tcpConn *tc) {
  struct tcpState *s = tc->s;
  if (pthread_mutex_trylock(&s->lock) != 0) return;
  if (!tc->stopped) {
    /* The thread's readiness flags only change when it polls; this caller tries anyway. */
    tc->streams[0].ready = 1;
    tc->inlineOnly = 1;
    weftTcpRecvProgress(tc);
    tc->inlineOnly = 0;
  }
  pthread_mutex_unlock(&s->lock);
}

short weftTcpStreamEvents(struct tcpConn *tc, uint32_t i) {
  const struct tcpStream *st = &tc->streams[i];
  if (tc->dir == WEFT_DIR_SEND) {
    int more = st->pos < tc->seenPosted ||
               (i == 0 && tc->closing && weftTcpRecordPending(&tc->txRecord));
    return (short)(POLLIN | (!st->ready && more ? POLLOUT : 0));
  }
  /* 0 still reports POLLERR and POLLHUP: a reset is noticed even while the FIFO is full. */
  return weftTcpRecvCanWork(tc, i) ? POLLIN : 0;
}

void weftTcpStreamEvent(struct tcpConn *tc, uint32_t i, short revents) {
  struct tcpStream *st = &tc->streams[i];
  if (tc->dir == WEFT_DIR_SEND) {
    if (revents & POLLOUT) st->ready = 1;
    if (revents & (POLLIN | POLLERR | POLLHUP)) tcpSendCheckPeer(tc, i);
    return;
  }
  if (revents & POLLIN) st->ready = 1;
  if (revents & POLLERR) {
    int err = weftSocketConnectResult(st->fd);
    tcpFailIo(tc, err != 0 ? err : ECONNRESET, i);
  } else if ((revents & POLLHUP) && !(revents & POLLIN)) {
    tcpFailIo(tc, WEFT_SOCK_CLOSED, i);
  }
}
