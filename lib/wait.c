/* The one wait loop of the data path (lib/prims.h: weftWaitStart .. weftWaitDone): spin,
 * then yield, then sleep, with the timeout, the algorithms' watch and, while the straggler
 * report is on, the timing of each wait against the peer it waits for. */
#include "prims.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "deadline.h"
#include "errors.h"

static void cpuRelax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static void sleepMicros(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

/* Sleep grows from 10 us to 1 ms: a peer that took this long is busy elsewhere, and waking
 * costs 40-60 us anyway on an oversubscribed host. */
static long sleepStepUs(uint32_t sleeps) {
  long us = 10L << (sleeps < 7 ? sleeps : 7);
  return us < 1000 ? us : 1000;
}

#define WAIT_SHORT_NS 20000  /* under this past the spin, a longer spin would have caught it */
#define WAIT_LONG_NS 200000  /* over this, spinning more would only have burnt a core */
#define WAIT_MIN_SPIN 16
#define WAIT_MARK_POLLS 64 /* polls (~2 us) a wait may spin before the straggler report times it */
#define WAIT_ABSENT_NS 1000000 /* a pause this much longer than it asked: the rank did not run */
/* A wait samples its run queue from this long past its spin: most waits end sooner, and a read
 * (~1 us) at every wait's first pause doubled a 4-rank 8-byte AllReduce with the report on. */
#define WAIT_SAMPLE_AFTER_NS 100000

void weftWaitAdapt(struct weftWaiter *w) {
  struct weftComm *c = w->comm;
  int64_t waited = weftNowNs() - w->yieldStartNs;
  if (waited < WAIT_SHORT_NS && c->spinIters < c->spinMax)
    c->spinIters = c->spinIters * 2 < c->spinMax ? c->spinIters * 2 : c->spinMax;
  else if (waited > WAIT_LONG_NS && c->spinIters > WAIT_MIN_SPIN)
    c->spinIters = c->spinIters / 2 > WAIT_MIN_SPIN ? c->spinIters / 2 : WAIT_MIN_SPIN;
}

void weftWaitAccount(struct weftWaiter *w, int next) {
  struct weftComm *comm = w->comm;
  int64_t now = weftNowNs();
  if (w->markNs != 0 && comm->waitNsByPeer != NULL) {
    int64_t waited = now - w->markNs;
    comm->opWaitNs += waited;
    if (w->markPeer >= 0 && w->markPeer < comm->nranks) comm->waitNsByPeer[w->markPeer] += waited;
  }
  w->markNs = next >= 0 ? now : 0;
  w->markPeer = next;
  w->seenNs = now;
  w->pauseNs = 0;
}

/* How long the calling thread has been runnable but not running (ns; -1 unreadable): the
 * second field of /proc/thread-self/schedstat, kept open per communicator for the thread
 * that waits. A pause that overran while the thread sat in the run queue was a busy host,
 * not an absent rank. */
static int64_t runqueueNs(struct weftComm *comm) {
  int tid = (int)gettid();
  if (comm->runqueueFd >= 0 && comm->runqueueTid != tid) {
    close(comm->runqueueFd);
    comm->runqueueFd = -1;
  }
  if (comm->runqueueFd < 0) {
    comm->runqueueFd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (comm->runqueueFd < 0) return -1;
    comm->runqueueTid = tid;
  }
  char buf[96];
  ssize_t n = pread(comm->runqueueFd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  uint64_t onCpu = 0, queued = 0;
  if (sscanf(buf, "%" SCNu64 " %" SCNu64, &onCpu, &queued) != 2) return -1;
  return (int64_t)queued;
}

/* While the straggler report times this wait: a pause that ended a millisecond or more later
 * than it asked, and not because the thread sat in the run queue (a busy host: that time
 * still counts as waiting), means this process was stopped or stalled. That time is not
 * waiting for a peer: it is this rank away when its peers needed it, which delays them as
 * arriving late would. So it is left out of the peer's share, and the collective's wait
 * starts again from the return, as if the rank had arrived then; a rank stopped in the middle
 * of a wait is then last, not whoever came after it (docs/stragglers.md). The clock is read
 * every pause past the spin and every 64th poll while spinning; the run queue from 100 us past
 * the spin (WAIT_SAMPLE_AFTER_NS) at every 64th yield and every sleep (w->queuedNs), and after
 * an overrun. Without a sample (the wait's first 100 us, or no schedstat) an overrun counts as
 * waiting. */
static void noteAbsence(struct weftWaiter *w) {
  int64_t now = weftNowNs();
  int64_t away = now - w->seenNs - w->pauseNs;
  w->seenNs = now;
  w->pauseNs = 0;
  if (away < WAIT_ABSENT_NS || w->queuedNs < 0) return;
  int64_t queued = runqueueNs(w->comm);
  if (queued < 0) return;
  away -= queued - w->queuedNs;
  w->queuedNs = queued;
  if (away < WAIT_ABSENT_NS) return;
  w->markNs += away;
  weftWaitAccount(w, w->markPeer);
  w->comm->opWaitNs = 0;
}

void weftWaitEndMark(struct weftWaiter *w) {
  noteAbsence(w);
  weftWaitAccount(w, -1);
}

weftResult_t weftWaitPause(struct weftWaiter *w, const char *what, int peer) {
  struct weftComm *comm = w->comm;
  uint32_t i = w->iter++;
  uint32_t spin = (uint32_t)comm->spinIters;
  /* The straggler report's clock: from the WAIT_MARK_POLLS-th poll (or the end of a shorter
   * spin) on, and again when the peer waited for changes (the direct algorithm's waiter
   * moves on as peers arrive). A wait shorter than that (well under the report's threshold)
   * reads no clock: two reads (~60 ns each here) would double an 8-byte AllReduce. */
  if (comm->waitNsByPeer != NULL && i >= (spin < WAIT_MARK_POLLS ? spin : WAIT_MARK_POLLS)) {
    if (w->markNs == 0) w->queuedNs = -1;
    else if (i >= spin || (i & 63) == 0) noteAbsence(w);
    if (w->markNs == 0 || peer != w->markPeer) weftWaitAccount(w, peer);
    if (i >= spin && w->deadlineMs != 0 && w->seenNs - w->yieldStartNs >= WAIT_SAMPLE_AFTER_NS &&
        (w->queuedNs < 0 || i >= spin + (uint32_t)comm->yieldIters || ((i - spin) & 63) == 0))
      w->queuedNs = runqueueNs(comm);
  }
  if (i < spin) {
    cpuRelax();
    return weftSuccess;
  }
  if (w->deadlineMs == 0) {
    w->deadlineMs = weftNowMs() + comm->timeoutMs;
    w->spin = spin;
    w->yieldStartNs = weftNowNs();
  }
  uint32_t yields = (uint32_t)comm->yieldIters;
  if (i < spin + yields) {
    sched_yield();
    if (((i - spin) & 63) != 63) return weftSuccess;
  } else {
    long us = sleepStepUs(i - spin - yields);
    w->pauseNs = us * 1000L;
    if (w->conn == NULL || w->conn->ops->block == NULL || !w->conn->ops->block(w->conn, us))
      sleepMicros(us);
  }
  if (weftCommAborted(comm)) return weftAbortedError(comm);
  int64_t now = weftNowMs();
  if (now - comm->lastWatchMs >= WEFT_WATCH_MS) {
    comm->lastWatchMs = now;
    if (comm->watchAlgos != NULL) WEFTCHECK(comm->watchAlgos(comm));
    WEFTCHECK(weftSigWatch(comm, peer));
  }
  if (now > w->deadlineMs)
    return weftSetError(weftTimeout,
                        "rank %d: timed out after %lld ms %s rank %d (operation %llu); set "
                        "WEFT_TIMEOUT_MS to wait longer",
                        comm->rank, (long long)comm->timeoutMs, what, peer,
                        (unsigned long long)comm->opSeq);
  return weftSuccess;
}

