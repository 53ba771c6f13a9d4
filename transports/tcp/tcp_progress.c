/* TCP transport: the progress thread. It holds s->lock except while it sleeps in poll(), so
 * the calling thread's set-up and close never race with its I/O (tcp_io.c); the data path
 * of the calling thread takes no lock (the FIFO counters of struct tcpConn). One pass moves every
 * stream as far as its socket and its FIFO allow, then the thread polls: the sockets that would
 * block, the listener, handshakes in progress, and an eventfd that a caller writes only after
 * seeing `sleeping` set, so a busy FIFO costs no system call to wake anyone. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "deadline.h"
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

static int tcpProgressAll(struct tcpState *s) {
  int any = 0, moved;
  do {
    moved = 0;
    for (struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next)
      if (!tc->stopped)
        moved |= tc->dir == WEFT_DIR_SEND ? weftTcpSendProgress(tc) : weftTcpRecvProgress(tc);
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

/* A closing sender's record goes after its last slot, on stream 0 (tcp.h). */
static void tcpSendCloseRecord(struct tcpConn *tc) {
  struct tcpStream *st = &tc->streams[0];
  if (!weftTcpRecordPending(&tc->txRecord) || !st->ready || st->fd < 0) return;
  int rc = weftTcpRecordSend(st->fd, &tc->txRecord);
  if (rc != 0) tc->txRecord.done = tc->txRecord.len; /* the peer is gone: nobody to tell */
  else if (weftTcpRecordPending(&tc->txRecord)) st->ready = 0;
}

/* A closed sender goes once its posted slots (and its close record) are with the kernel,
 * which delivers them after close() (no unread bytes ever sit on a sender's socket, so close
 * sends FIN, not RST). */
static void tcpReapClosing(struct tcpState *s, int64_t now) {
  for (struct tcpConn *tc = s->conns, *next; tc != NULL; tc = next) {
    next = tc->next;
    if (!tc->closing) continue;
    int flushed = tc->published == atomic_load_explicit(&tc->posted, memory_order_acquire);
    if (flushed && !tc->stopped) tcpSendCloseRecord(tc);
    int said = !weftTcpRecordPending(&tc->txRecord);
    int expired = now >= tc->lingerUntilMs || (s->stop && now >= s->stopUntilMs);
    if (!(flushed && said) && !tc->stopped && !expired) continue;
    if (!flushed && !tc->stopped)
      INFO(WEFT_TCP, "tcp: dropped %llu unsent slots to rank %d (%s) after %lld ms",
           (unsigned long long)(atomic_load(&tc->posted) - tc->published), tc->peer, tc->peerName,
           (long long)s->lingerMs);
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
      ok = (st->pollIdx = tcpPollAdd(s, &n, st->fd, weftTcpStreamEvents(tc, i))) >= 0;
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

static void tcpHandleEvents(struct tcpState *s, size_t n) {
  if (s->fds[0].revents & POLLIN) {
    uint64_t count;
    ssize_t n = read(s->wakeFd, &count, sizeof count);
    (void)n; /* EAGAIN: another wake already drained it */
  }
  for (struct tcpConn *tc = s->conns; tc != NULL; tc = tc->next)
    for (uint32_t i = 0; i < tc->shape.nsocks && !tc->stopped; i++) {
      int idx = tc->streams[i].pollIdx;
      if (idx >= 0 && (size_t)idx < n && s->fds[idx].revents != 0)
        weftTcpStreamEvent(tc, i, s->fds[idx].revents);
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

/* The progress thread on the cores local to this rank's NIC, when the model is this machine's
 * and the process is not bound (a user's or launcher's binding is never overridden). */
static void bindNearNic(struct tcpState *s) {
  const struct weftComm *comm = s->comm;
  const struct weftTopoDev *nic = weftTopoMyNic(comm);
  uint8_t cpus[WEFT_TOPO_CPUSET_BYTES];
  if (nic == NULL || comm->topoHost->fromFile ||
      weftTopoDevCpus(comm->topoHost, &comm->peers[comm->rank].place, nic, cpus, sizeof cpus) == 0)
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int p = 0; p < (int)sizeof cpus * 8 && p < CPU_SETSIZE; p++)
    if ((cpus[p / 8] >> (p % 8)) & 1) CPU_SET(p, &set);
  int rc = pthread_setaffinity_np(s->thread, sizeof set, &set);
  INFO(WEFT_TOPO, "tcp progress thread bound to the %d PUs near %s%s", CPU_COUNT(&set), nic->name,
       rc ? " failed" : "");
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
  bindNearNic(s);
  s->started = 1;
  return weftSuccess;
}

void weftTcpStop(struct tcpState *s) {
  if (!s->started) return;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  /* An aborted communicator talks to nobody: no flushing either. */
  s->stopUntilMs = weftNowMs() + (weftCommAborted(s->comm) ? 0 : s->lingerMs);
  pthread_mutex_unlock(&s->lock);
  weftTcpKick(s);
  pthread_join(s->thread, NULL);
  s->started = 0;
  pthread_mutex_lock(&s->lock);
  weftTcpPendingClear(s, "the communicator is closing");
  weftTcpCloseListener(s);
  pthread_mutex_unlock(&s->lock);
  weftSocketClose(&s->wakeFd);
}
