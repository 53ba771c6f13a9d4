/* TCP transport: the progress thread. It holds s->lock except while it sleeps in poll(), so
 * the calling thread's set-up and close never race with its I/O; the data path itself takes
 * no lock (the FIFO counters of struct tcpConn). One pass moves every stream as far as its
 * socket and its FIFO allow, then the thread polls: the sockets that would block, the
 * listener, handshakes in progress, and an eventfd that a caller writes only after seeing
 * `sleeping` set, so a busy FIFO costs no system call to wake anyone. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "tcp.h"

/* The longest the thread sleeps without a reason to wake: a safety net, not a timer. */
#define TCP_IDLE_POLL_MS 100

static int64_t tcpNowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void weftTcpKick(struct tcpState *s) {
  uint64_t one = 1;
  ssize_t n = write(s->wakeFd, &one, sizeof one);
  (void)n; /* EAGAIN: the counter is full, so the thread wakes anyway */
}

void weftTcpWake(struct tcpState *s) {
  if (atomic_load_explicit(&s->sleeping, memory_order_seq_cst) &&
      atomic_exchange_explicit(&s->sleeping, 0, memory_order_seq_cst))
    weftTcpKick(s);
}

/* ---- Failures: recorded by the thread, reported by the calling thread's next op ---- */

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

static void tcpFail(struct tcpConn *tc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tcpFail(struct tcpConn *tc, const char *fmt, ...) {
  if (tc->stopped) return;
  tc->stopped = 1;
  for (uint32_t i = 0; i < tc->shape.nsocks; i++) tc->streams[i].closed = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tc->error, sizeof tc->error, fmt, ap);
  va_end(ap);
  /* INFO only: the calling thread warns if it is still using the connection; at teardown a
   * peer's close is expected. */
  INFO(WEFT_TCP, "%s", tc->error);
  tcpPublish(tc);
  atomic_store_explicit(&tc->failed, 1, memory_order_release);
}

static void tcpFailIo(struct tcpConn *tc, int rc, uint32_t stream) {
  char text[128];
  const char *doing = tc->dir == WEFT_DIR_SEND ? "sending" : "receiving";
  if (rc == WEFT_SOCK_CLOSED)
    tcpFail(tc, "tcp: connection to rank %d (%s) closed by peer (rank %d was %s, stream %u, %llu slots done)",
            tc->peer, tc->peerName, tc->s->rank, doing, stream,
            (unsigned long long)tc->published);
  else
    tcpFail(tc, "tcp: connection to rank %d (%s) failed: %s (rank %d was %s, stream %u)", tc->peer,
            tc->peerName, weftSockStatusText(rc, text, sizeof text), tc->s->rank, doing, stream);
}

/* ---- Sending: posted slots onto the streams ---- */

/* Sends the rest of [header (hdr bytes)][data (len bytes)]: 1 when done, 0 when the socket is
 * full, or a WEFT_SOCK_CLOSED / errno (as a negative number's opposite, see tcpFailIo). */
static int tcpSendPart(struct tcpStream *st, const char *data, size_t len, size_t hdr, int *err) {
  while (st->done < hdr + len) {
    struct iovec iov[2];
    int n = 0;
    if (st->done < hdr) {
      iov[n++] = (struct iovec){st->header + st->done, hdr - st->done};
      if (len > 0) iov[n++] = (struct iovec){(void *)(uintptr_t)data, len};
    } else {
      iov[n++] = (struct iovec){(void *)(uintptr_t)(data + (st->done - hdr)), len - (st->done - hdr)};
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
        weftTcpPutBe32(st->header, (uint32_t)bytes);
        weftTcpPutBe32(st->header + 4, (uint32_t)k);
      }
      size_t before = st->done;
      int err = 0;
      int rc = tcpSendPart(st, tc->slots + (k % tc->shape.nslots) * tc->shape.slotBytes + off, len, hdr, &err);
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

static int tcpSendProgress(struct tcpConn *tc) {
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
  if (!tc->stopped) tcpSendProgress(tc);
  int left = !tc->stopped && tc->published != tc->seenPosted;
  pthread_mutex_unlock(&s->lock);
  if (left) weftTcpWake(s); /* the socket was full: the thread must poll it */
}

/* Nothing ever arrives on a sender's stream: readable means the peer left (or misbehaves). */
static void tcpSendCheckPeer(struct tcpConn *tc, uint32_t i) {
  uint8_t byte;
  size_t got = 0;
  int rc = weftSocketRecvSome(tc->streams[i].fd, &byte, 1, &got);
  if (rc != 0)
    tcpFailIo(tc, rc, i);
  else if (got > 0)
    tcpFail(tc, "tcp: rank %d (%s) sent unexpected bytes to its sender, rank %d", tc->peer,
            tc->peerName, tc->s->rank);
}

/* ---- Receiving: streams into free slots ---- */

/* Whether stream i may read now: its slot is free and (past stream 0) its size is known. */
static int tcpRecvCanWork(struct tcpConn *tc, uint32_t i) {
  uint64_t k = tc->streams[i].pos;
  if (k - tc->seenFreed >= tc->shape.nslots) {
    tc->seenFreed = atomic_load_explicit(&tc->freed, memory_order_acquire);
    if (k - tc->seenFreed >= tc->shape.nslots) return 0;
  }
  return i == 0 || k < tc->headers;
}

/* Stream 0 announces each slot: 1 once slot k's header is in, 0 while it is not. */
static int tcpRecvHeader(struct tcpConn *tc, struct tcpStream *st, uint64_t k) {
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
  uint32_t bytes = weftTcpGetBe32(st->header), seq = weftTcpGetBe32(st->header + 4);
  if (bytes > tc->shape.slotBytes || seq != (uint32_t)k) {
    tcpFail(tc, "tcp: rank %d (%s) broke the protocol: slot %u of %u bytes where slot %u of at "
            "most %llu was due", tc->peer, tc->peerName, seq, bytes, (uint32_t)k,
            (unsigned long long)tc->shape.slotBytes);
    return 0;
  }
  tc->sizes[k % tc->shape.nslots] = bytes;
  tc->headers = k + 1;
  return 1;
}

static int tcpRecvStream(struct tcpConn *tc, uint32_t i, int *starved) {
  struct tcpStream *st = &tc->streams[i];
  int moved = 0;
  while (!tc->stopped) {
    uint64_t k = st->pos;
    if (!tcpRecvCanWork(tc, i)) {
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
      size_t got = st->done - hdr;
      int rc = weftSocketRecvSome(st->fd, tc->slots + (k % tc->shape.nslots) * tc->shape.slotBytes + off, len, &got);
      moved |= hdr + got != st->done;
      st->done = hdr + got;
      if (rc != 0) {
        tcpFailIo(tc, rc, i);
        return 1;
      }
      if (got < len) {
        st->ready = 0;
        break;
      }
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

static int tcpRecvProgress(struct tcpConn *tc) {
  if (atomic_load_explicit(&tc->attached, memory_order_relaxed) < tc->shape.nsocks) return 0;
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
    tcpRecvProgress(tc);
    tc->inlineOnly = 0;
  }
  pthread_mutex_unlock(&s->lock);
}

static int tcpProgressAll(struct tcpState *s) {
  int any = 0, moved;
  do {
    moved = 0;
    for (struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next)
      if (!tc->stopped) moved |= tc->dir == WEFT_DIR_SEND ? tcpSendProgress(tc) : tcpRecvProgress(tc);
    any |= moved;
  } while (moved);
  return any;
}

/* After `sleeping` is set: whether a caller published something the last pass did not see. */
static int tcpNewWork(struct tcpState *s) {
  for (struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next) {
    if (tc->stopped) continue;
    if (tc->dir == WEFT_DIR_SEND &&
        atomic_load_explicit(&tc->posted, memory_order_seq_cst) != tc->seenPosted)
      return 1;
    if (tc->dir == WEFT_DIR_RECV && atomic_load_explicit(&tc->starved, memory_order_relaxed) &&
        atomic_load_explicit(&tc->freed, memory_order_seq_cst) != tc->seenFreed)
      return 1;
  }
  return 0;
}

/* ---- Closing senders ---- */

void weftTcpUnlinkLocked(struct tcpState *s, struct tcpConn *tc) {
  for (struct tcpConn **p = &s->conns; *p != NULL; p = &(*p)->next)
    if (*p == tc) {
      *p = tc->next;
      break;
    }
  s->generation++;
}

void weftTcpFreeConnLocked(struct tcpState *s, struct tcpConn *tc) {
  weftTcpUnlinkLocked(s, tc);
  weftTcpFreeConn(tc);
}

/* A closed sender goes once its posted slots are with the kernel, which delivers them after
 * close() (no unread bytes ever sit on a sender's socket, so close sends FIN, not RST). */
static void tcpReapClosing(struct tcpState *s, int64_t now) {
  for (struct tcpConn *tc = s->conns, *next; tc != NULL; tc = next) {
    next = tc->next;
    if (!tc->closing) continue;
    int flushed = tc->published == atomic_load_explicit(&tc->posted, memory_order_acquire);
    int expired = now >= tc->lingerUntilMs || (s->stop && now >= s->stopUntilMs);
    if (!flushed && !tc->stopped && !expired) continue;
    if (!flushed && !tc->stopped)
      INFO(WEFT_TCP, "tcp: dropped %llu unsent slots to rank %d (%s) after %lld ms",
           (unsigned long long)(atomic_load(&tc->posted) - tc->published), tc->peer,
           tc->peerName, (long long)s->lingerMs);
    weftTcpFreeConnLocked(s, tc);
  }
}

static int tcpAnyClosing(const struct tcpState *s) {
  for (const struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next)
    if (tc->closing) return 1;
  return 0;
}

/* ---- poll() ---- */

static int tcpPollAdd(struct tcpState *s, size_t *n, int fd, short events) {
  if (*n == s->fdsCap) {
    size_t cap = s->fdsCap ? 2 * s->fdsCap : 32;
    struct pollfd *fds = realloc(s->fds, cap * sizeof *fds);
    if (fds == NULL) return -1;
    s->fds = fds;
    s->fdsCap = cap;
  }
  s->fds[*n] = (struct pollfd){.fd = fd, .events = events};
  return (int)(*n)++;
}

static short tcpStreamEvents(struct tcpConn *tc, uint32_t i) {
  const struct tcpStream *st = &tc->streams[i];
  if (tc->dir == WEFT_DIR_SEND)
    return (short)(POLLIN | (!st->ready && st->pos < tc->seenPosted ? POLLOUT : 0));
  /* 0 still reports POLLERR and POLLHUP: a reset is noticed even while the FIFO is full. */
  return tcpRecvCanWork(tc, i) ? POLLIN : 0;
}

/* [eventfd][listener][handshakes...][streams...]; -1 entries are skipped by poll(). */
static size_t tcpBuildPoll(struct tcpState *s, int64_t now) {
  size_t n = 0;
  int ok = tcpPollAdd(s, &n, s->wakeFd, POLLIN) >= 0;
  int listening = s->listenFd >= 0 && now >= s->acceptPauseUntilMs;
  ok = ok && tcpPollAdd(s, &n, listening ? s->listenFd : -1, POLLIN) >= 0;
  for (size_t i = 0; ok && i < s->npending; i++)
    ok = (s->pending[i].pollIdx = tcpPollAdd(s, &n, s->pending[i].fd, POLLIN)) >= 0;
  for (struct tcpConn *tc = s->conns; ok && tc != NULL; tc = tc->next)
    for (uint32_t i = 0; ok && i < tc->shape.nsocks; i++) {
      struct tcpStream *st = &tc->streams[i];
      st->pollIdx = -1;
      if (tc->stopped || st->closed || st->fd < 0) continue;
      ok = (st->pollIdx = tcpPollAdd(s, &n, st->fd, tcpStreamEvents(tc, i))) >= 0;
    }
  if (!ok) {
    /* Out of memory: poll the eventfd alone, with the short timeout, and try again. */
    WARN("tcp: rank %d: out of memory for the poll list", s->rank);
    return 1;
  }
  return n;
}

static int tcpPollTimeout(const struct tcpState *s, int64_t now) {
  int64_t until = weftTcpPendingEarliest(s, now + TCP_IDLE_POLL_MS);
  if (s->listenFd >= 0 && s->acceptPauseUntilMs > now && s->acceptPauseUntilMs < until)
    until = s->acceptPauseUntilMs;
  for (const struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next)
    if (tc->closing && tc->lingerUntilMs < until) until = tc->lingerUntilMs;
  if (s->stop && s->stopUntilMs < until) until = s->stopUntilMs;
  return until <= now ? 0 : (int)(until - now);
}

static void tcpStreamEvent(struct tcpConn *tc, uint32_t i, short revents) {
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

static void tcpHandleEvents(struct tcpState *s, size_t n) {
  if (s->fds[0].revents & POLLIN) {
    uint64_t count;
    ssize_t n = read(s->wakeFd, &count, sizeof count);
    (void)n; /* EAGAIN: another wake already drained it */
  }
  for (struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next)
    for (uint32_t i = 0; i < tc->shape.nsocks && !tc->stopped; i++) {
      int idx = tc->streams[i].pollIdx;
      if (idx >= 0 && (size_t)idx < n && s->fds[idx].revents != 0) tcpStreamEvent(tc, i, s->fds[idx].revents);
    }
  /* Last to first: dropping a handshake moves the last one into its place. */
  for (size_t i = s->npending; i-- > 0;) {
    int idx = s->pending[i].pollIdx;
    if (idx >= 0 && (size_t)idx < n && s->fds[idx].revents != 0) weftTcpPendingEvent(s, i);
  }
  if (n > 1 && s->fds[1].fd >= 0 && (s->fds[1].revents & POLLIN)) weftTcpAccept(s);
}

/* ---- The thread ---- */

/* Sleeps in poll() with the lock released; returns with it held. */
static void tcpWait(struct tcpState *s, int64_t now, int spinning) {
  size_t n = tcpBuildPoll(s, now);
  int timeout = spinning ? 0 : tcpPollTimeout(s, now);
  if (!spinning) {
    atomic_store_explicit(&s->sleeping, 1, memory_order_seq_cst);
    if (tcpNewWork(s)) {
      atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
      return;
    }
  }
  uint64_t generation = s->generation;
  pthread_mutex_unlock(&s->lock);
  int ready = poll(s->fds, n, timeout);
  pthread_mutex_lock(&s->lock);
  atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
  /* A changed generation means a descriptor may have been closed (and its number reused)
   * while we slept: drop these results, the next pass rebuilds the list. */
  if (ready > 0 && generation == s->generation) tcpHandleEvents(s, n);
}

static void *tcpThreadMain(void *arg) {
  struct tcpState *s = arg;
  weftLogSetRank(s->rank);
  int64_t lastWorkUs = 0;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    int64_t now = weftNowMs();
    weftTcpPendingExpire(s, now);
    int64_t nowUs = s->spinUs > 0 ? tcpNowUs() : 0;
    if (tcpProgressAll(s)) lastWorkUs = nowUs;
    tcpReapClosing(s, now);
    if (s->stop && (!tcpAnyClosing(s) || now >= s->stopUntilMs)) break;
    tcpWait(s, now, s->spinUs > 0 && nowUs - lastWorkUs < s->spinUs);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

weftResult_t weftTcpStart(struct tcpState *s) {
  if (s->started) return weftSuccess;
  s->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wakeFd < 0) return weftSetSysError(errno, "tcp: eventfd for the progress thread");
  /* Signals stay with the application's threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&s->thread, NULL, tcpThreadMain, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    weftSocketClose(&s->wakeFd);
    return weftSetSysError(rc, "tcp: cannot start the progress thread");
  }
  pthread_setname_np(s->thread, "weft-tcp");
  s->started = 1;
  return weftSuccess;
}

void weftTcpStop(struct tcpState *s) {
  if (!s->started) return;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  s->stopUntilMs = weftNowMs() + s->lingerMs;
  pthread_mutex_unlock(&s->lock);
  weftTcpKick(s);
  pthread_join(s->thread, NULL);
  s->started = 0;
  pthread_mutex_lock(&s->lock);
  weftTcpPendingClear(s, "the communicator is closing");
  weftSocketClose(&s->listenFd);
  pthread_mutex_unlock(&s->lock);
  weftSocketClose(&s->wakeFd);
}
