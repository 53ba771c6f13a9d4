/* Calls on device buffers: staging, the stream's side and the device worker (lib/devcoll.h
 * says how they fit together).
 *
 * Jobs. A job is one call, or one communicator's share of a group, with one ticket: the
 * value the worker writes into the flag word when the job has run, which every stream of the
 * job waits for (tickets rise by one per job and jobs run in order, so a stream waiting for
 * ticket t is released by t or any later one; the runtime's compare is cyclic, so the 32
 * bits may wrap). Jobs live in one list, in order: the worker runs them from `next`; the
 * caller's thread, at its next device call (or the communicator's end), frees those at the
 * head that have run and whose streams have copied their output out of the staging.
 *
 * Staging. Pinned host memory (cudaHostAlloc: the runtime's copies reach it at full speed,
 * and the worker's host algorithms read and write it in place), in blocks kept for reuse; a
 * block is free again when its job is freed. The list is touched by the caller's thread only
 * (NCCL's rule: one thread at a time calls a communicator), the worker reads jobs it was
 * given under the lock. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "collname.h"
#include "commfail.h"
#include "core.h"
#include "devcoll.h"
#include "device.h"
#include "errors.h"
#include "log.h"

struct stageBlock {
  struct stageBlock *next;
  void *host;
  size_t bytes;
  int inUse;
};

struct devTask {
  struct weftTask run; /* the call, on staging */
  void *stream;
  void *ready; /* the input is in the staging */
  void *done;  /* the output has left it */
  void *dsend, *drecv;
  size_t inBytes, outBytes;
  int readsSend, writesRecv; /* the rank uses its buffer in this call (weftDevTaskBytes) */
};

struct weftDevJob {
  struct weftDevJob *next;
  struct devTask *tasks;
  int n;
  uint32_t ticket;
  struct stageBlock *block;
  int ran; /* under the queue's lock */
};

struct weftDevQueue {
  const struct weftDeviceOps *ops;
  struct weftComm *comm;
  pthread_mutex_t lock;
  pthread_cond_t wake, idle;
  struct weftDevJob *head, *tail, *next; /* next: the first job not yet run */
  int stop;
  uint32_t ticket;                   /* the last one handed out */
  uint32_t *flag;                    /* host view of the flag word */
  void *flagDev;                     /* the device's view */
  pthread_t worker;
  int device; /* the device of the thread that made the queue; the worker's too */
  struct stageBlock *blocks;
};

/* ---- The worker ---- */

/* Until the event fires: spins briefly, then yields, then sleeps (ranks oversubscribe cores).
 * An abort ends the wait; so does an error of the runtime. 0 when the event fired. */
static int waitEvent(struct weftDevQueue *q, void *event) {
  for (long i = 0;; i++) {
    int done = q->ops->eventQuery(event);
    if (done != 0) return done > 0 ? 0 : -1;
    if (weftCommAborted(q->comm)) return -1;
    if (i < 1000) continue;
    if (i < 2000) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

/* The job's calls, once their inputs are staged, as weftRunTasks runs a group: collectives in
 * order, then Send/Recv together. */
static void runJob(struct weftDevQueue *q, struct weftDevJob *job) {
  struct weftComm *comm = q->comm;
  for (int i = 0; i < job->n; i++)
    if (waitEvent(q, job->tasks[i].ready) != 0) {
      if (!weftCommAborted(comm))
        weftCommFail(comm, weftSetError(weftUnhandledCudaError, "rank %d: a device call's input "
                                        "copy failed: %s", comm->rank, weftThreadLastError()));
      return;
    }
  struct weftTask *tasks = malloc(sizeof *tasks * (size_t)job->n);
  if (tasks == NULL) {
    weftCommFail(comm, weftSetError(weftSystemError, "rank %d: out of memory for a device job",
                                    comm->rank));
    return;
  }
  for (int i = 0; i < job->n; i++) tasks[i] = job->tasks[i].run;
  const char *api = job->n > 1         ? "weftGroupEnd"
                    : tasks[0].isColl ? weftCollName(tasks[0].coll.coll)
                                      : "weftSend/weftRecv";
  if (weftCheckUsable(comm, api) == weftSuccess)
    (void)weftRunTasks(comm, tasks, job->n); /* a failure is the communicator's sticky error */
  free(tasks);
}

static void *workerMain(void *arg) {
  struct weftDevQueue *q = arg;
  weftLogSetRank(q->comm->rank);
  /* Its event queries then run in the rank's device's context, not in one the runtime would
   * make on device 0 for a thread that has none. */
  if (q->device >= 0) (void)q->ops->setDevice(q->device);
  pthread_mutex_lock(&q->lock);
  for (;;) {
    while (q->next == NULL && !q->stop) pthread_cond_wait(&q->wake, &q->lock);
    if (q->next == NULL) break;
    struct weftDevJob *job = q->next;
    pthread_mutex_unlock(&q->lock);
    weftClearThreadError();
    if (!weftCommAborted(q->comm)) runJob(q, job); /* a failure is the sticky error */
    /* The staging's output is written before the flag rises: the stream's copy out reads
     * it after it sees the flag. */
    __atomic_store_n(q->flag, job->ticket, __ATOMIC_RELEASE);
    pthread_mutex_lock(&q->lock);
    job->ran = 1;
    q->next = job->next;
    if (q->next == NULL) pthread_cond_broadcast(&q->idle);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

/* ---- Staging and jobs ---- */

static void freeJobEvents(const struct weftDeviceOps *ops, struct weftDevJob *job) {
  for (int i = 0; i < job->n; i++) {
    if (job->tasks[i].ready != NULL) ops->eventDestroy(job->tasks[i].ready);
    if (job->tasks[i].done != NULL) ops->eventDestroy(job->tasks[i].done);
  }
}

/* Frees the jobs at the head that have run and whose output copies are done; with wait, waits
 * for those copies (the end of the communicator). */
static void reapJobs(struct weftDevQueue *q, int wait) {
  for (;;) {
    pthread_mutex_lock(&q->lock);
    struct weftDevJob *job = q->head;
    int ran = job != NULL && job->ran;
    pthread_mutex_unlock(&q->lock);
    if (!ran) return;
    for (int i = 0; i < job->n; i++) {
      void *done = job->tasks[i].done;
      if (done == NULL) continue;
      if (wait) q->ops->eventSync(done);
      else if (q->ops->eventQuery(done) == 0) return;
    }
    pthread_mutex_lock(&q->lock);
    q->head = job->next;
    if (q->head == NULL) q->tail = NULL;
    pthread_mutex_unlock(&q->lock);
    if (job->block != NULL) job->block->inUse = 0;
    freeJobEvents(q->ops, job);
    free(job->tasks);
    free(job);
  }
}

/* A free block of at least bytes (64 KiB at least, a power of two, so that sizes that vary a
 * little reuse one). */
static struct stageBlock *takeBlock(struct weftDevQueue *q, size_t bytes) {
  for (struct stageBlock *b = q->blocks; b != NULL; b = b->next)
    if (!b->inUse && b->bytes >= bytes) {
      b->inUse = 1;
      return b;
    }
  size_t size = 65536;
  while (size < bytes) size *= 2;
  struct stageBlock *b = calloc(1, sizeof *b);
  void *devView;
  if (b == NULL) {
    weftSetError(weftSystemError, "out of memory");
    return NULL;
  }
  if (q->ops->hostAlloc(&b->host, &devView, size) != weftSuccess) {
    free(b);
    return NULL;
  }
  b->bytes = size;
  b->inUse = 1;
  b->next = q->blocks;
  q->blocks = b;
  return b;
}

static void freeQueue(struct weftDevQueue *q) {
  for (struct stageBlock *b = q->blocks, *next; b != NULL; b = next) {
    next = b->next;
    q->ops->hostFree(b->host);
    free(b);
  }
  if (q->flag != NULL) q->ops->hostFree(q->flag);
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->wake);
  pthread_cond_destroy(&q->idle);
  free(q);
}

static weftResult_t openQueue(struct weftComm *comm, const char *api) {
  struct weftDevQueue *q = calloc(1, sizeof *q);
  if (q == NULL) return weftSetError(weftSystemError, "%s: out of memory", api);
  q->ops = weftDeviceRuntime();
  q->comm = comm;
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->wake, NULL);
  pthread_cond_init(&q->idle, NULL);
  void *flag;
  if (q->ops->hostAlloc(&flag, &q->flagDev, sizeof(uint32_t)) != weftSuccess) {
    freeQueue(q);
    return weftUnhandledCudaError;
  }
  q->flag = flag;
  *q->flag = 0;
  if (q->ops->getDevice(&q->device) != weftSuccess) q->device = -1;
  int err = pthread_create(&q->worker, NULL, workerMain, q);
  if (err != 0) {
    freeQueue(q);
    return weftSetSysError(err, "%s: pthread_create (device worker)", api);
  }
  comm->devQueue = q;
  return weftSuccess;
}

/* The job's staging: each task's input, then its output, 64-byte aligned, in one block; the
 * task run on it points at them (a buffer the rank does not use gets the other one, which is
 * never read or written there). */
static weftResult_t stageJob(struct weftDevQueue *q, struct weftDevJob *job) {
  size_t total = 0;
  for (int i = 0; i < job->n; i++)
    total += (job->tasks[i].inBytes + 63) / 64 * 64 + (job->tasks[i].outBytes + 63) / 64 * 64;
  job->block = takeBlock(q, total);
  if (job->block == NULL) return weftUnhandledCudaError;
  char *at = job->block->host;
  for (int i = 0; i < job->n; i++) {
    struct devTask *t = &job->tasks[i];
    char *in = at, *out = at + (t->inBytes + 63) / 64 * 64;
    at = out + (t->outBytes + 63) / 64 * 64;
    if (t->run.isColl) {
      t->run.coll.sendbuff = t->inBytes > 0 ? (const void *)in : out;
      t->run.coll.recvbuff = t->outBytes > 0 ? out : in;
    } else if (t->run.p2p.isSend) {
      t->run.p2p.sendbuff = in;
    } else {
      t->run.p2p.recvbuff = out;
    }
    t->run.onDevice = 0;
  }
  return weftSuccess;
}

/* On the task's stream, first (every task of the job, before any waits, since tasks of a job
 * may share a stream): its input in, and the mark that it is there. */
static weftResult_t enqueueInput(struct weftDevQueue *q, struct devTask *t) {
  const struct weftDeviceOps *ops = q->ops;
  const void *in = t->run.isColl ? t->run.coll.sendbuff : t->run.p2p.sendbuff;
  WEFTCHECK(ops->eventCreate(&t->ready));
  WEFTCHECK(ops->eventCreate(&t->done));
  if (t->readsSend && t->inBytes > 0)
    WEFTCHECK(ops->copyAsync((void *)in, t->dsend, t->inBytes, t->stream));
  return ops->eventRecord(t->ready, t->stream);
}

/* Then: the wait for the job's ticket, its output out, and the mark that it is out. */
static weftResult_t enqueueOutput(struct weftDevQueue *q, struct devTask *t, uint32_t ticket) {
  const struct weftDeviceOps *ops = q->ops;
  void *out = t->run.isColl ? t->run.coll.recvbuff : t->run.p2p.recvbuff;
  WEFTCHECK(ops->streamWaitFlag(t->stream, q->flagDev, ticket));
  if (t->writesRecv && t->outBytes > 0)
    WEFTCHECK(ops->copyAsync(t->drecv, out, t->outBytes, t->stream));
  return ops->eventRecord(t->done, t->stream);
}

static struct weftDevJob *newJob(const struct weftComm *comm, const struct weftTask *tasks, int n) {
  struct weftDevJob *job = calloc(1, sizeof *job);
  if (job == NULL || (job->tasks = calloc((size_t)n, sizeof *job->tasks)) == NULL) {
    free(job);
    weftSetError(weftSystemError, "out of memory");
    return NULL;
  }
  job->n = n;
  for (int i = 0; i < n; i++) {
    struct devTask *t = &job->tasks[i];
    t->run = tasks[i];
    t->stream = tasks[i].stream;
    t->dsend = (void *)(tasks[i].isColl ? tasks[i].coll.sendbuff : tasks[i].p2p.sendbuff);
    t->drecv = tasks[i].isColl ? tasks[i].coll.recvbuff : tasks[i].p2p.recvbuff;
    weftDevTaskBytes(comm, &tasks[i], &t->inBytes, &t->outBytes, &t->readsSend, &t->writesRecv);
  }
  return job;
}

static void dropJob(struct weftDevQueue *q, struct weftDevJob *job) {
  if (job->block != NULL) job->block->inUse = 0;
  freeJobEvents(q->ops, job);
  free(job->tasks);
  free(job);
}

weftResult_t weftDevPrepare(struct weftComm *comm, const struct weftTask *tasks, int n,
                            const char *api, struct weftDevJob **out) {
  *out = NULL;
  if (comm->devQueue == NULL) WEFTCHECK(openQueue(comm, api));
  struct weftDevQueue *q = comm->devQueue;
  reapJobs(q, 0);
  struct weftDevJob *job = newJob(comm, tasks, n);
  if (job == NULL) return weftSetError(weftSystemError, "%s: out of memory", api);
  weftResult_t rc = stageJob(q, job);
  for (int i = 0; i < n && rc == weftSuccess; i++) rc = enqueueInput(q, &job->tasks[i]);
  if (rc != weftSuccess) {
    dropJob(q, job);
    return weftCommFail(comm, rc);
  }
  *out = job;
  return weftSuccess;
}

weftResult_t weftDevLaunch(struct weftComm *comm, struct weftDevJob *job) {
  struct weftDevQueue *q = comm->devQueue;
  job->ticket = q->ticket + 1;
  weftResult_t rc = weftSuccess;
  for (int i = 0; i < job->n && rc == weftSuccess; i++)
    rc = enqueueOutput(q, &job->tasks[i], job->ticket);
  if (rc != weftSuccess) {
    /* Streams that already wait for this ticket are let go by the next job's, or by the
     * flag raised when the communicator ends; the communicator is failed, as after a
     * collective that failed. */
    dropJob(q, job);
    return weftCommFail(comm, rc);
  }
  q->ticket = job->ticket;
  pthread_mutex_lock(&q->lock);
  if (q->tail != NULL) q->tail->next = job;
  else q->head = job;
  q->tail = job;
  if (q->next == NULL) q->next = job;
  pthread_cond_signal(&q->wake);
  pthread_mutex_unlock(&q->lock);
  return weftSuccess;
}

weftResult_t weftDevSubmit(struct weftComm *comm, const struct weftTask *tasks, int n,
                           const char *api) {
  struct weftDevJob *job;
  WEFTCHECK(weftDevPrepare(comm, tasks, n, api, &job));
  return weftDevLaunch(comm, job);
}

void weftDevDrain(struct weftComm *comm) {
  struct weftDevQueue *q = comm->devQueue;
  if (q == NULL) return;
  pthread_mutex_lock(&q->lock);
  while (q->next != NULL) pthread_cond_wait(&q->idle, &q->lock);
  pthread_mutex_unlock(&q->lock);
}

void weftDevClose(struct weftComm *comm) {
  struct weftDevQueue *q = comm->devQueue;
  if (q == NULL) return;
  pthread_mutex_lock(&q->lock);
  q->stop = 1;
  pthread_cond_signal(&q->wake);
  pthread_mutex_unlock(&q->lock);
  pthread_join(q->worker, NULL); /* it runs (or, aborted, skips) what it was given first */
  /* A stream that waits for a ticket whose job failed to enqueue is let go. */
  __atomic_store_n(q->flag, q->ticket + 1, __ATOMIC_RELEASE);
  reapJobs(q, 1);
  freeQueue(q);
  comm->devQueue = NULL;
}
