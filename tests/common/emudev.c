/* The emulated accelerator of emudev.h. */
#include "emudev.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "reduce.h"

/* ---- Device memory: a PROT_NONE view for the program, a read-write one for the emulator ---- */

struct emuAlloc {
  char *base, *shadow;
  size_t bytes;
  struct emuAlloc *next;
};
static struct emuAlloc *allocs;
static pthread_mutex_t allocLock = PTHREAD_MUTEX_INITIALIZER;

static struct emuAlloc *findAlloc(const void *p) {
  for (struct emuAlloc *a = allocs; a != NULL; a = a->next)
    if ((const char *)p >= a->base && (const char *)p < a->base + a->bytes) return a;
  return NULL;
}

/* The emulator's view of p (p itself for host memory). */
static void *shadowOf(const void *p) {
  pthread_mutex_lock(&allocLock);
  struct emuAlloc *a = findAlloc(p);
  void *s = a != NULL ? a->shadow + ((const char *)p - a->base) : (void *)p;
  pthread_mutex_unlock(&allocLock);
  return s;
}

static weftResult_t emuAllocDev(void **p, size_t bytes) {
  size_t size = (bytes + 4095) / 4096 * 4096;
  if (size == 0) size = 4096;
  int fd = memfd_create("weft-emudev", MFD_CLOEXEC);
  if (fd < 0) return weftSetSysError(errno, "emudev: memfd_create");
  struct emuAlloc *a = calloc(1, sizeof *a);
  if (a == NULL || ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    free(a);
    return weftSetError(weftSystemError, "emudev: no memory for %zu bytes", bytes);
  }
  a->base = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
  a->shadow = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (a->base == MAP_FAILED || a->shadow == MAP_FAILED) {
    if (a->base != MAP_FAILED) munmap(a->base, size);
    if (a->shadow != MAP_FAILED) munmap(a->shadow, size);
    free(a);
    return weftSetError(weftSystemError, "emudev: mmap of %zu bytes failed", bytes);
  }
  a->bytes = size;
  pthread_mutex_lock(&allocLock);
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&allocLock);
  *p = a->base;
  return weftSuccess;
}

static weftResult_t emuFreeDev(void *p) {
  pthread_mutex_lock(&allocLock);
  struct emuAlloc **at = &allocs;
  while (*at != NULL && (*at)->base != p) at = &(*at)->next;
  struct emuAlloc *a = *at;
  if (a != NULL) *at = a->next;
  pthread_mutex_unlock(&allocLock);
  if (a == NULL) return weftSetError(weftInvalidArgument, "emudev: free of %p, not an allocation", p);
  munmap(a->base, a->bytes);
  munmap(a->shadow, a->bytes);
  free(a);
  return weftSuccess;
}

int emuLiveAllocations(void) {
  int n = 0;
  pthread_mutex_lock(&allocLock);
  for (struct emuAlloc *a = allocs; a != NULL; a = a->next) n++;
  pthread_mutex_unlock(&allocLock);
  return n;
}

static weftResult_t emuHostAlloc(void **p, void **devp, size_t bytes) {
  *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (*p == NULL) return weftSetError(weftSystemError, "emudev: no host memory for %zu bytes", bytes);
  *devp = *p;
  return weftSuccess;
}
static weftResult_t emuHostFree(void *p) {
  free(p);
  return weftSuccess;
}

static int emuCount(char *why, size_t len) {
  (void)why, (void)len;
  return 1;
}

static weftResult_t emuPointerKind(const void *p, enum weftMemKind *kind, int *device) {
  pthread_mutex_lock(&allocLock);
  int dev = findAlloc(p) != NULL;
  pthread_mutex_unlock(&allocLock);
  *kind = dev ? WEFT_MEM_DEVICE : WEFT_MEM_HOST;
  *device = dev ? 0 : -1;
  return weftSuccess;
}

static weftResult_t emuGetDevice(int *device) {
  *device = 0;
  return weftSuccess;
}
static weftResult_t emuSetDevice(int device) {
  return device == 0 ? weftSuccess : weftSetError(weftInvalidArgument, "emudev: no device %d", device);
}

/* ---- Streams: a queue of work and a thread that runs it in order ---- */

struct emuEvent {
  _Atomic uint64_t recorded, reached;
};

struct emuHold {
  _Atomic int released;
};

enum workKind { W_COPY, W_RECORD, W_WAITFLAG, W_HOLD, W_REDUCE, W_STOP };
struct work {
  enum workKind kind;
  void *dst;
  const void *a, *b;
  size_t bytes, count;
  struct emuEvent *event;
  uint64_t mark;
  const uint32_t *flag;
  uint32_t value;
  struct emuHold *hold;
  weftDataType_t type;
  weftRedOp_t op;
  int final, nranks, scaled;
  unsigned char scale[8];
  struct work *next;
};

struct emuStream {
  pthread_mutex_t lock;
  pthread_cond_t more;
  struct work *head, *tail;
  pthread_t thread;
};

static void pause20us(void) {
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

static void runReduce(const struct work *w) {
  void *dst = shadowOf(w->dst);
  const void *a = shadowOf(w->a), *b = w->b != NULL ? shadowOf(w->b) : NULL;
  if (w->scaled) weftReduceScale(dst, a, w->scale, w->count, w->type);
  else if (w->final) weftReduceFinal(dst, a, b, w->count, w->type, w->op, w->nranks);
  else weftReduceApply(dst, a, b, w->count, w->type, w->op);
}

/* One piece of work; 0 when the stream's thread is to end. */
static int runWork(const struct work *w) {
  switch (w->kind) {
  case W_COPY: memmove(shadowOf(w->dst), shadowOf(w->a), w->bytes); break;
  case W_RECORD: atomic_store(&w->event->reached, w->mark); break;
  case W_WAITFLAG:
    while ((int32_t)(__atomic_load_n(w->flag, __ATOMIC_ACQUIRE) - w->value) < 0) pause20us();
    break;
  case W_HOLD:
    while (!atomic_load(&w->hold->released)) pause20us();
    free(w->hold);
    break;
  case W_REDUCE: runReduce(w); break;
  case W_STOP: return 0;
  }
  return 1;
}

static void *streamMain(void *arg) {
  struct emuStream *s = arg;
  for (int go = 1; go;) {
    pthread_mutex_lock(&s->lock);
    while (s->head == NULL) pthread_cond_wait(&s->more, &s->lock);
    struct work *w = s->head;
    s->head = w->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    go = runWork(w);
    free(w);
  }
  return NULL;
}

static weftResult_t emuStreamCreate(void **stream) {
  struct emuStream *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "emudev: out of memory");
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->more, NULL);
  int err = pthread_create(&s->thread, NULL, streamMain, s);
  if (err != 0) {
    free(s);
    return weftSetSysError(err, "emudev: pthread_create");
  }
  *stream = s;
  return weftSuccess;
}

/* The NULL stream: one per process, made on first use (a forked child makes its own). */
static struct emuStream *defaultStream;
static pthread_mutex_t defaultLock = PTHREAD_MUTEX_INITIALIZER;
static void forgetDefaultInChild(void) { defaultStream = NULL; }
static pthread_once_t atforkOnce = PTHREAD_ONCE_INIT;
static void registerAtfork(void) { pthread_atfork(NULL, NULL, forgetDefaultInChild); }

static struct emuStream *streamOf(void *stream) {
  if (stream != NULL) return stream;
  pthread_once(&atforkOnce, registerAtfork);
  pthread_mutex_lock(&defaultLock);
  if (defaultStream == NULL) {
    void *s;
    if (emuStreamCreate(&s) == weftSuccess) defaultStream = s;
  }
  pthread_mutex_unlock(&defaultLock);
  return defaultStream;
}

static weftResult_t push(void *stream, const struct work *w) {
  struct emuStream *s = streamOf(stream);
  struct work *copy = malloc(sizeof *copy);
  if (s == NULL || copy == NULL) {
    free(copy);
    return weftSetError(weftSystemError, "emudev: out of memory");
  }
  *copy = *w;
  copy->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->tail != NULL) s->tail->next = copy;
  else s->head = copy;
  s->tail = copy;
  pthread_cond_signal(&s->more);
  pthread_mutex_unlock(&s->lock);
  return weftSuccess;
}

static weftResult_t emuEventCreate(void **event) {
  struct emuEvent *e = calloc(1, sizeof *e);
  if (e == NULL) return weftSetError(weftSystemError, "emudev: out of memory");
  *event = e;
  return weftSuccess;
}
static weftResult_t emuEventDestroy(void *event) {
  free(event);
  return weftSuccess;
}
static weftResult_t emuEventRecord(void *event, void *stream) {
  struct emuEvent *e = event;
  uint64_t mark = atomic_fetch_add(&e->recorded, 1) + 1;
  return push(stream, &(struct work){.kind = W_RECORD, .event = e, .mark = mark});
}
static int emuEventQuery(void *event) {
  struct emuEvent *e = event;
  return atomic_load(&e->reached) >= atomic_load(&e->recorded);
}
static weftResult_t emuEventSync(void *event) {
  while (!emuEventQuery(event)) pause20us();
  return weftSuccess;
}

static weftResult_t emuStreamSync(void *stream) {
  struct emuEvent e = {0};
  weftResult_t rc = emuEventRecord(&e, stream);
  if (rc == weftSuccess) emuEventSync(&e);
  return rc;
}

static weftResult_t emuStreamDestroy(void *stream) {
  struct emuStream *s = stream;
  if (s == NULL) return weftSuccess;
  weftResult_t rc = push(s, &(struct work){.kind = W_STOP});
  if (rc != weftSuccess) return rc;
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->more);
  free(s);
  return weftSuccess;
}

static weftResult_t emuCopyAsync(void *dst, const void *src, size_t bytes, void *stream) {
  return push(stream, &(struct work){.kind = W_COPY, .dst = dst, .a = src, .bytes = bytes});
}

static weftResult_t emuStreamWaitFlag(void *stream, void *flagDev, uint32_t value) {
  return push(stream, &(struct work){.kind = W_WAITFLAG, .flag = flagDev, .value = value});
}

static weftResult_t emuReduceAsync(void *dst, const void *a, const void *b, size_t count,
                                   weftDataType_t type, weftRedOp_t op, int final, int nranks,
                                   const void *scale, void *stream) {
  struct work w = {.kind = W_REDUCE, .dst = dst, .a = a, .b = b, .count = count, .type = type,
                   .op = op, .final = final, .nranks = nranks, .scaled = scale != NULL};
  if (scale != NULL) memcpy(w.scale, scale, weftTypeSize(type)); /* read at enqueue */
  return push(stream, &w);
}

struct emuHold *emuStreamHold(void *stream) {
  struct emuHold *h = calloc(1, sizeof *h);
  if (h != NULL && push(stream, &(struct work){.kind = W_HOLD, .hold = h}) != weftSuccess) {
    free(h);
    h = NULL;
  }
  return h;
}
void emuStreamRelease(struct emuHold *hold) { atomic_store(&hold->released, 1); }

/* ---- IPC (one process) and peers ---- */

static weftResult_t emuIpcGet(void *p, struct weftDeviceIpc *handle) {
  memset(handle, 0, sizeof *handle);
  memcpy(handle->bytes, &p, sizeof p);
  return weftSuccess;
}
static weftResult_t emuIpcOpen(const struct weftDeviceIpc *handle, void **p) {
  memcpy(p, handle->bytes, sizeof *p);
  return weftSuccess;
}
static weftResult_t emuIpcClose(void *p) {
  (void)p;
  return weftSuccess;
}
static int emuEnablePeer(int peer) { return peer == 0 ? 0 : 1; }

const struct weftDeviceOps emuDevice = {
    .name = "emulated",
    .count = emuCount,
    .pointerKind = emuPointerKind,
    .getDevice = emuGetDevice,
    .setDevice = emuSetDevice,
    .alloc = emuAllocDev,
    .free = emuFreeDev,
    .hostAlloc = emuHostAlloc,
    .hostFree = emuHostFree,
    .streamCreate = emuStreamCreate,
    .streamDestroy = emuStreamDestroy,
    .streamSync = emuStreamSync,
    .copyAsync = emuCopyAsync,
    .eventCreate = emuEventCreate,
    .eventDestroy = emuEventDestroy,
    .eventRecord = emuEventRecord,
    .eventQuery = emuEventQuery,
    .eventSync = emuEventSync,
    .streamWaitFlag = emuStreamWaitFlag,
    .reduceAsync = emuReduceAsync,
    .ipcGet = emuIpcGet,
    .ipcOpen = emuIpcOpen,
    .ipcClose = emuIpcClose,
    .enablePeer = emuEnablePeer,
};

void emuInstall(void) { weftDeviceSetRuntime(&emuDevice); }
