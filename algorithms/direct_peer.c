/* The direct algorithm's access to peers' memory and its reductions (see direct.c). A thread
 * of this process is read and written where its buffers are; another process through
 * process_vm_readv / process_vm_writev (cross-memory attach), in pieces of at most a bounce
 * buffer when the bytes are reduced, so they are still in the cache when they are. Every
 * reduction combines the ranks' inputs in rank order, as the reference does, whatever the path:
 * each element is computed once, by one rank, so every rank gets the same bits. */
#include <string.h>
#include <sys/uio.h>

#include "check.h"
#include "direct.h"
#include "reduce.h"

/* process_vm_readv or process_vm_writev may move fewer bytes than asked: loop. */
static weftResult_t peerCopy(struct directState *s, int rank, char *local, uint64_t addr,
                             size_t bytes, int write) {
  size_t done = 0;
  while (done < bytes) {
    struct iovec here = {local + done, bytes - done};
    struct iovec there = {(void *)(uintptr_t)(addr + done), bytes - done};
    ssize_t got = write ? process_vm_writev(s->pids[rank], &here, 1, &there, 1, 0)
                        : process_vm_readv(s->pids[rank], &here, 1, &there, 1, 0);
    if (got <= 0)
      return weftSetSysError(errno, "direct: %s of %zu bytes %s rank %d (pid %d)",
                             write ? "process_vm_writev" : "process_vm_readv", bytes - done,
                             write ? "to" : "from", rank, s->pids[rank]);
    done += (size_t)got;
  }
  return weftSuccess;
}

weftResult_t weftDirectPeerRead(struct directState *s, int rank, void *dst, uint64_t addr,
                                size_t bytes) {
  if (weftDirectIsLocal(s, rank)) {
    memcpy(dst, (const void *)(uintptr_t)addr, bytes);
    return weftSuccess;
  }
  return peerCopy(s, rank, dst, addr, bytes, 0);
}

weftResult_t weftDirectPeerWrite(struct directState *s, int rank, uint64_t addr, const void *src,
                                 size_t bytes) {
  if (weftDirectIsLocal(s, rank)) {
    memcpy((void *)(uintptr_t)addr, src, bytes);
    return weftSuccess;
  }
  return peerCopy(s, rank, (char *)(uintptr_t)src, addr, bytes, 1);
}

void weftDirectReduceAll(char *dst, const char *const *inputs, int n, size_t count,
                         const struct weftCollArgs *a) {
  if (n == 1) {
    weftReduceFinalCopy(dst, inputs[0], count, a->type, a->op, 1);
    return;
  }
  const char *acc = inputs[0];
  for (int i = 1; i < n - 1; i++) {
    weftReduceApply(dst, acc, inputs[i], count, a->type, a->op);
    acc = dst;
  }
  weftReduceFinal(dst, acc, inputs[n - 1], count, a->type, a->op, n);
}

/* Where rank r's bytes at addr can be read: in place for a thread of this process, else after
 * a copy into buf. */
static weftResult_t peerView(struct directState *s, int r, uint64_t addr, size_t bytes, char *buf,
                             const char **view) {
  if (weftDirectIsLocal(s, r)) {
    *view = (const char *)(uintptr_t)addr;
    return weftSuccess;
  }
  WEFTCHECK(peerCopy(s, r, buf, addr, bytes, 0));
  *view = buf;
  return weftSuccess;
}

/* Whether writing dst would destroy an input still to be read: one of ranks 1..n-1 (rank 0's
 * is read before the first write). */
static int overwritesInput(const struct directState *s, const uint64_t *addrs, const char *dst) {
  for (int r = 1; r < s->n; r++)
    if (weftDirectIsLocal(s, r) && addrs[r] == (uint64_t)(uintptr_t)dst) return 1;
  return 0;
}

weftResult_t weftDirectReducePeers(struct directState *s, const struct weftCollArgs *a,
                                   const uint64_t *addrs, size_t count, char *dst) {
  size_t bytes = count * weftTypeSize(a->type);
  char *acc = overwritesInput(s, addrs, dst) ? s->accum : dst;
  const char *first, *in;
  /* rank 0's piece, read straight into the accumulator when it comes from another process */
  WEFTCHECK(peerView(s, 0, addrs[0], bytes, acc, &first));
  if (s->n == 1 && first != acc) memcpy(acc, first, bytes); /* avg of one: itself */
  for (int r = 1; r < s->n; r++) {
    WEFTCHECK(peerView(s, r, addrs[r], bytes, s->bounce, &in));
    if (r == s->n - 1) weftReduceFinal(acc, first, in, count, a->type, a->op, s->n);
    else weftReduceApply(acc, first, in, count, a->type, a->op);
    first = acc;
  }
  if (acc != dst) memcpy(dst, acc, bytes);
  return weftSuccess;
}

void weftDirectSliceOf(size_t count, size_t typeSize, int n, int who, size_t *first, size_t *len) {
  size_t align = 64 / typeSize;
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  per = (per + align - 1) / align * align;
  size_t start = per * (size_t)who;
  *first = start < count ? start : count;
  *len = start < count ? (count - start < per ? count - start : per) : 0;
}
