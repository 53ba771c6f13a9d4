/* Direct shared-memory AllReduce, for communicators whose ranks all share one host.
 * How it works: one segment holds, per rank, three progress flags and a staging area.
 * - small (<= WEFT_DIRECT_SMALL bytes): each rank copies its input into its staging slot and
 *   raises `posted`; once all have posted, every rank reduces all inputs itself, in rank
 *   order (so all get the same bits). One synchronisation.
 * - staged (no way to read peers' memory): per chunk, copy in, post; rank i reduces slice i of
 *   the chunk from all staging slots into a shared result area, raises `reduced`; then every
 *   rank copies the whole result out. Two synchronisations per chunk.
 * - in place (peers are threads of this process, or cross-memory attach works and the buffer is
 *   large): ranks publish their buffer addresses; rank i reduces slice i reading the others'
 *   send buffers where they are (pointer, or process_vm_readv into a cache-sized bounce
 *   buffer), writes it into its own receive buffer, raises `reduced`; then reads the other
 *   slices from the other ranks' receive buffers, raises `done`, and waits for all `done`
 *   since the others read its buffers until then. Three synchronisations, one copy of the
 *   data per rank instead of three.
 * Staging areas alternate between two halves by round parity; a rank can only start round
 * s+2 after all have posted round s+1, which they do only after finishing round s, so a half
 * is never overwritten while read.
 * Bytes moved per rank: in place ~ 2(n-1)/n * bytes of peer reads; staged ~ 3 * bytes copies.
 * cost() = synchronisations * sync latency + bytes moved / memory bandwidth. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "param.h"
#include "prims.h"
#include "reduce.h"
#include "shmseg.h"

#define DIRECT_SMALL_BYTES 16384
#define DIRECT_BOUNCE_BYTES (256 * 1024)

enum { FLAG_POSTED, FLAG_REDUCED, FLAG_DONE, FLAG_COUNT };

struct directCtrl {
  _Alignas(64) _Atomic uint64_t flag[FLAG_COUNT][8]; /* [i][0] used; the rest pads to a line */
  _Alignas(64) uint64_t sendAddr, recvAddr;
};

struct directState {
  char *seg;
  size_t segBytes;
  char name[WEFT_SHM_NAME_BYTES];
  int named;
  int n, me;
  size_t chunkBytes;
  size_t cmaMinBytes;
  int samePid;  /* every rank is a thread of this process */
  int cmaOk;    /* every rank can read every other rank's memory with process_vm_readv */
  int *pids;    /* by rank */
  uint64_t seq; /* rounds done */
  struct directCtrl *ctrl;
  char *staging; /* [rank][2][chunkBytes] */
  char *result;  /* [2][chunkBytes] */
  char *bounce;
};

struct directHello {
  char name[WEFT_SHM_NAME_BYTES];
  int pid;
  int cmaOk;
  uint64_t probeAddr;
};

static size_t segmentBytes(int n, size_t chunk) {
  return sizeof(struct directCtrl) * (size_t)n + (size_t)n * 2 * chunk + 2 * chunk;
}

static void layout(struct directState *s) {
  s->ctrl = (struct directCtrl *)s->seg;
  s->staging = s->seg + sizeof(struct directCtrl) * (size_t)s->n;
  s->result = s->staging + (size_t)s->n * 2 * s->chunkBytes;
}

static volatile uint64_t cmaProbeWord = 0x77656674;

static int cmaReadable(int pid, uint64_t addr) {
  uint64_t v = 0;
  struct iovec local = {&v, sizeof v}, remote = {(void *)(uintptr_t)addr, sizeof v};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof v && v == 0x77656674;
}

static weftResult_t directMapSegment(struct weftComm *comm, struct directState *s,
                                     struct directHello *hello) {
  if (s->me == 0) {
    WEFTCHECK(weftShmCreate(s->segBytes, s->name, (void **)&s->seg));
    s->named = 1;
    memcpy(hello[0].name, s->name, sizeof s->name);
  }
  hello[s->me].pid = (int)getpid();
  hello[s->me].probeAddr = (uint64_t)(uintptr_t)&cmaProbeWord;
  WEFTCHECK(weftBootstrapAllGather(comm->boot, hello, sizeof *hello, weftDeadline(comm)));
  if (s->me != 0) {
    hello[0].name[sizeof hello[0].name - 1] = '\0';
    WEFTCHECK(weftShmOpen(hello[0].name, s->segBytes, (void **)&s->seg));
  }
  layout(s);
  return weftSuccess;
}

/* Every rank tries to read every other process; all agree on the AND of the answers. */
static weftResult_t directProbeCma(struct weftComm *comm, struct directState *s,
                                   struct directHello *hello) {
  int ok = weftParamDirectCma() != 0;
  s->samePid = 1;
  for (int r = 0; r < s->n; r++) {
    s->pids[r] = hello[r].pid;
    if (hello[r].pid == (int)getpid()) continue;
    s->samePid = 0;
    if (ok && !cmaReadable(hello[r].pid, hello[r].probeAddr)) {
      INFO(WEFT_SHM, "direct: process_vm_readv of rank %d (pid %d) refused; staging instead", r,
           hello[r].pid);
      ok = 0;
    }
  }
  hello[s->me].cmaOk = ok;
  WEFTCHECK(weftBootstrapAllGather(comm->boot, hello, sizeof *hello, weftDeadline(comm)));
  s->cmaOk = 1;
  for (int r = 0; r < s->n; r++) s->cmaOk &= hello[r].cmaOk;
  return weftSuccess;
}

static weftResult_t directFinalize(void *state);

static weftResult_t directInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  *state = NULL;
  if (comm->nLocalRanks != comm->nranks) {
    snprintf(why, whyLen, "ranks span %d hosts", comm->nHosts);
    return weftSuccess;
  }
  int64_t chunk = weftParamDirectChunkBytes();
  if (chunk < DIRECT_SMALL_BYTES || chunk % 4096 != 0) chunk = 1 << 20;
  struct directState *s = calloc(1, sizeof *s);
  struct directHello *hello = calloc((size_t)comm->nranks, sizeof *hello);
  weftResult_t rc = weftSuccess;
  if (s == NULL || hello == NULL || (s->pids = calloc((size_t)comm->nranks, sizeof(int))) == NULL ||
      (s->bounce = aligned_alloc(64, DIRECT_BOUNCE_BYTES)) == NULL) {
    rc = weftSetError(weftSystemError, "out of memory");
    goto fail;
  }
  s->n = comm->nranks;
  s->me = comm->rank;
  s->chunkBytes = (size_t)chunk;
  s->segBytes = segmentBytes(s->n, s->chunkBytes);
  int64_t cmaMin = weftParamDirectCmaMinBytes();
  s->cmaMinBytes = cmaMin > DIRECT_SMALL_BYTES ? (size_t)cmaMin : DIRECT_SMALL_BYTES + 1;
  WEFTCHECKGOTO(directMapSegment(comm, s, hello), rc, fail);
  WEFTCHECKGOTO(directProbeCma(comm, s, hello), rc, fail); /* also: everyone has mapped */
  if (s->named) weftShmUnlink(s->name);
  s->named = 0;
  INFO(WEFT_SHM, "direct: %d ranks, %s, chunk %zu bytes", s->n,
       s->samePid ? "threads of one process" : s->cmaOk ? "cross-memory attach" : "staging only",
       s->chunkBytes);
  free(hello);
  *state = s;
  return weftSuccess;
fail:
  free(hello);
  if (s != NULL) directFinalize(s);
  return rc;
}

static void post(struct directState *s, int flag, uint64_t seq) {
  atomic_store_explicit(&s->ctrl[s->me].flag[flag][0], seq, memory_order_release);
}

static weftResult_t waitAll(struct weftComm *comm, struct directState *s, int flag, uint64_t seq) {
  static const char *const what[] = {"waiting for the input of", "waiting for the reduction of",
                                     "waiting for the end of"};
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    struct weftWaiter w;
    weftWaitStart(&w, comm);
    while (atomic_load_explicit(&s->ctrl[r].flag[flag][0], memory_order_acquire) < seq)
      WEFTCHECK(weftWaitPause(&w, what[flag], r));
    weftWaitDone(&w);
  }
  return weftSuccess;
}

static char *stagingOf(struct directState *s, int rank, uint64_t seq) {
  return s->staging + ((size_t)rank * 2 + (seq & 1)) * s->chunkBytes;
}

/* dst = inputs[0] op inputs[1] op ... op inputs[n-1], in that order; the last step final. */
static void reduceAll(char *dst, const char *const *inputs, int n, size_t count,
                      const struct weftCollArgs *a) {
  if (n == 1) {
    weftReduceFinalCopy(dst, inputs[0], count, a->type, a->op, 1);
    return;
  }
  const char *acc = inputs[0];
  for (int i = 1; i < n - 1; i++) {
    weftReduce(dst, acc, inputs[i], count, a->type, a->op);
    acc = dst;
  }
  weftReduceFinal(dst, acc, inputs[n - 1], count, a->type, a->op, n);
}

/* Elements [*first, *first + *len) of `count` that rank `who` of n owns; 64-byte aligned. */
static void sliceOf(size_t count, size_t typeSize, int n, int who, size_t *first, size_t *len) {
  size_t align = 64 / typeSize;
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  per = (per + align - 1) / align * align;
  size_t start = per * (size_t)who;
  *first = start < count ? start : count;
  *len = start < count ? (count - start < per ? count - start : per) : 0;
}

static weftResult_t directSmall(struct weftComm *comm, struct directState *s,
                                const struct weftCollArgs *a) {
  uint64_t seq = ++s->seq;
  memcpy(stagingOf(s, s->me, seq), a->sendbuff, a->bytes);
  post(s, FLAG_POSTED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_POSTED, seq));
  const char *inputs[64];
  char *scratch = NULL;
  const char **in = s->n <= 64 ? inputs : (const char **)(scratch = malloc(sizeof(char *) * (size_t)s->n));
  if (in == NULL) return weftSetError(weftSystemError, "out of memory");
  for (int r = 0; r < s->n; r++) in[r] = stagingOf(s, r, seq);
  reduceAll(a->recvbuff, in, s->n, a->count, a);
  free(scratch);
  return weftSuccess;
}

static weftResult_t directStagedChunk(struct weftComm *comm, struct directState *s,
                                      const struct weftCollArgs *a, size_t first, size_t count,
                                      const char **in) {
  size_t ts = weftTypeSize(a->type);
  uint64_t seq = ++s->seq;
  memcpy(stagingOf(s, s->me, seq), (const char *)a->sendbuff + first * ts, count * ts);
  post(s, FLAG_POSTED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_POSTED, seq));
  size_t sFirst, sLen;
  sliceOf(count, ts, s->n, s->me, &sFirst, &sLen);
  char *result = s->result + (seq & 1) * s->chunkBytes;
  if (sLen > 0) {
    for (int r = 0; r < s->n; r++) in[r] = stagingOf(s, r, seq) + sFirst * ts;
    reduceAll(result + sFirst * ts, in, s->n, sLen, a);
  }
  post(s, FLAG_REDUCED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_REDUCED, seq));
  memcpy((char *)a->recvbuff + first * ts, result, count * ts);
  return weftSuccess;
}

static weftResult_t directStaged(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type);
  size_t perChunk = s->chunkBytes / ts;
  const char **in = malloc(sizeof(char *) * (size_t)s->n);
  if (in == NULL) return weftSetError(weftSystemError, "out of memory");
  weftResult_t rc = weftSuccess;
  for (size_t first = 0; first < a->count && rc == weftSuccess; first += perChunk) {
    size_t count = a->count - first < perChunk ? a->count - first : perChunk;
    rc = directStagedChunk(comm, s, a, first, count, in);
  }
  free(in);
  return rc;
}

/* Copies bytes at a peer's address into dst: memcpy for a thread of this process,
 * process_vm_readv otherwise (it may move fewer bytes than asked: loop). */
static weftResult_t peerRead(struct directState *s, int rank, void *dst, uint64_t addr,
                             size_t bytes) {
  if (s->pids[rank] == (int)getpid()) {
    memcpy(dst, (const void *)(uintptr_t)addr, bytes);
    return weftSuccess;
  }
  size_t done = 0;
  while (done < bytes) {
    struct iovec local = {(char *)dst + done, bytes - done};
    struct iovec remote = {(void *)(uintptr_t)(addr + done), bytes - done};
    ssize_t got = process_vm_readv(s->pids[rank], &local, 1, &remote, 1, 0);
    if (got <= 0)
      return weftSetSysError(errno, "direct: process_vm_readv of %zu bytes from rank %d (pid %d)",
                             bytes - done, rank, s->pids[rank]);
    done += (size_t)got;
  }
  return weftSuccess;
}

/* Where a peer's bytes can be read from: in place for a thread of this process, else after a
 * copy into the bounce buffer. */
static weftResult_t peerView(struct directState *s, int rank, uint64_t addr, size_t bytes,
                             const char **view) {
  if (s->pids[rank] == (int)getpid()) {
    *view = (const char *)(uintptr_t)addr;
    return weftSuccess;
  }
  WEFTCHECK(peerRead(s, rank, s->bounce, addr, bytes));
  *view = s->bounce;
  return weftSuccess;
}

/* My slice: recv = send(me) op send(others...), in bounce-sized pieces. */
static weftResult_t reduceMySlice(struct directState *s, const struct weftCollArgs *a,
                                  size_t first, size_t len) {
  size_t ts = weftTypeSize(a->type);
  size_t piece = DIRECT_BOUNCE_BYTES / ts;
  for (size_t done = 0; done < len; done += piece) {
    size_t n = len - done < piece ? len - done : piece;
    size_t off = (first + done) * ts;
    char *dst = (char *)a->recvbuff + off;
    const char *acc = (const char *)a->sendbuff + off;
    int left = s->n - 1;
    if (left == 0) weftReduceFinalCopy(dst, acc, n, a->type, a->op, 1);
    for (int r = 0; r < s->n; r++) {
      if (r == s->me) continue;
      const char *peer;
      WEFTCHECK(peerView(s, r, s->ctrl[r].sendAddr + off, n * ts, &peer));
      if (--left == 0) weftReduceFinal(dst, acc, peer, n, a->type, a->op, s->n);
      else weftReduce(dst, acc, peer, n, a->type, a->op);
      acc = dst;
    }
  }
  return weftSuccess;
}

static weftResult_t directInPlace(struct weftComm *comm, struct directState *s,
                                  const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type);
  uint64_t seq = ++s->seq;
  s->ctrl[s->me].sendAddr = (uint64_t)(uintptr_t)a->sendbuff;
  s->ctrl[s->me].recvAddr = (uint64_t)(uintptr_t)a->recvbuff;
  post(s, FLAG_POSTED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_POSTED, seq));
  size_t first, len;
  sliceOf(a->count, ts, s->n, s->me, &first, &len);
  WEFTCHECK(reduceMySlice(s, a, first, len));
  post(s, FLAG_REDUCED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_REDUCED, seq));
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    sliceOf(a->count, ts, s->n, r, &first, &len);
    if (len > 0)
      WEFTCHECK(peerRead(s, r, (char *)a->recvbuff + first * ts, s->ctrl[r].recvAddr + first * ts,
                         len * ts));
  }
  post(s, FLAG_DONE, seq);
  return waitAll(comm, s, FLAG_DONE, seq);
}

static int useInPlace(const struct directState *s, size_t bytes) {
  return s->samePid || (s->cmaOk && bytes >= s->cmaMinBytes);
}

static weftResult_t directAllReduce(void *state, struct weftComm *comm,
                                    const struct weftCollArgs *a) {
  struct directState *s = state;
  if (a->bytes <= DIRECT_SMALL_BYTES) return directSmall(comm, s, a);
  if (useInPlace(s, a->bytes)) return directInPlace(comm, s, a);
  return directStaged(comm, s, a);
}

/* Calibrated on a 2-core x86 host: a flag round costs ~0.2 us per peer when every rank has a
 * core, a scheduler round trip (~0.7 us per rank) when ranks outnumber cores. */
static double directCost(void *state, const struct weftComm *comm, size_t bytes) {
  const struct directState *s = state;
  int n = s->n;
  double sync = comm->nLocalRanks > weftTopoCpuCount() ? 0.7 * n : 0.2 * (n - 1) + 0.1;
  double b = (double)bytes;
  if (bytes <= DIRECT_SMALL_BYTES) return sync + b * (2.0 + n) / 10e3;
  if (useInPlace(s, bytes)) return 3 * sync + 2.0 + b * 2.5 / 8e3;
  double chunks = (double)((bytes + s->chunkBytes - 1) / s->chunkBytes);
  return chunks * 2 * sync + b * 3.0 / 8e3;
}

static weftResult_t directFinalize(void *state) {
  struct directState *s = state;
  if (s == NULL) return weftSuccess;
  if (s->named) weftShmUnlink(s->name);
  weftShmUnmap(s->seg, s->segBytes);
  free(s->pids);
  free(s->bounce);
  free(s);
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoDirect = {
  .size = sizeof(struct weftAlgoOps),
  .name = "direct",
  .init = directInit,
  .cost = directCost,
  .allReduce = directAllReduce,
  .finalize = directFinalize,
};
