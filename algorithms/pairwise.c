/* Pairwise exchange: AlltoAll, Gather and Scatter as one group of point-to-point transfers
 * (lib/p2p.c), over links made on first use between the ranks that exchange data, whichever
 * transport links them.
 * - AlltoAll: every rank sends block j of sendbuff to rank j and receives rank j's block into
 *   block j of recvbuff. Rank r lists its sends from r+1 upwards and its receives from r-1
 *   downwards, so at any moment the ranks' first transfers pair up instead of all aiming at
 *   rank 0; the engine moves all of them as their links allow.
 * - Gather: every rank sends its buffer to the root, which receives each into its block.
 * - Scatter: the root sends block j to rank j.
 * Transfers to the rank itself are copies (none in place). Every slot carries the
 * collective's signature, so a rank that called another collective, count, type or root
 * fails at its first slot.
 * cost() = link latency + (n-1) * bytes per peer / link bandwidth: the root's (or every
 * rank's, for AlltoAll) n-1 transfers share its link bandwidth, and their latencies overlap.
 * The link figures are the ring's (its slowest link), the same on every rank. An AlltoAll
 * adds its own block's copy and, on one host, the copies out of the FIFOs and (ranks
 * outnumbering cores) a scheduling round: there the direct algorithm's AlltoAll, which makes
 * the same copies through far fewer bytes of shared memory, is measured faster
 * (docs/performance.md) and costs less. */
#include <stdlib.h>

#include "check.h"
#include "core.h"
#include "p2p.h"

static weftResult_t pairwiseInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  (void)why;
  (void)whyLen;
  *state = comm; /* no state of its own: the links live in comm->p2p */
  return weftSuccess;
}

static double pairwiseCost(void *state, const struct weftComm *comm,
                           const struct weftCollArgs *args) {
  (void)state;
  int n = comm->nranks;
  double lat = comm->ring.latencyUs > 0 ? comm->ring.latencyUs : 1.0;
  double bw = comm->ring.bandwidthGBs > 0 ? comm->ring.bandwidthGBs : 1.0;
  double b = (double)args->bytes, us = lat + (double)(n - 1) * b / (bw * 1e3);
  if (args->coll != weftCollAlltoAll) return us;
  us += b / 8e3; /* its own block, copied (memcpy's rate, as direct's costs) */
  if (comm->nHosts > 1) return us;
  /* On one host every rank also copies each of its n - 1 blocks out of a shared-memory FIFO,
   * on the core that copied its own sends in, and the engine's passes take ~0.1 us per
   * transfer (a 2-rank AlltoAll of 64-byte blocks: 0.39 us measured against the link's 0.2);
   * with ranks outnumbering cores its transfers wait for their peers to be scheduled, a
   * round of the host's run queue (as direct's). */
  us += (double)(n - 1) * (b / (bw * 1e3) + 2 * 0.1);
  return comm->oversubscribed ? us + 0.7 * n : us;
}

static char *blockOf(const void *buf, size_t bytes, int j) {
  return (char *)buf + (size_t)j * bytes;
}

static int listAlltoAll(struct weftComm *comm, const struct weftCollArgs *a, struct weftP2pOp *ops) {
  int n = comm->nranks, me = comm->rank, k = 0;
  for (int s = 0; s < n; s++) {
    int to = (me + s) % n, from = (me + n - s) % n;
    ops[k++] = (struct weftP2pOp){.isSend = 1, .peer = to, .sendbuff = blockOf(a->sendbuff, a->bytes, to),
                                  .count = a->count, .type = a->type, .sig = comm->opSig};
    ops[k++] = (struct weftP2pOp){.isSend = 0, .peer = from, .recvbuff = blockOf(a->recvbuff, a->bytes, from),
                                  .count = a->count, .type = a->type, .sig = comm->opSig};
  }
  return k;
}

/* Gather (toRoot) or Scatter: the root exchanges with every rank, the others with the root. */
static int listRooted(struct weftComm *comm, const struct weftCollArgs *a, struct weftP2pOp *ops,
                      int toRoot) {
  int n = comm->nranks, me = comm->rank, root = a->root, k = 0;
  struct weftP2pOp base = {.count = a->count, .type = a->type, .sig = comm->opSig};
  if (me != root || toRoot) { /* every rank's own block (the root's to itself) */
    ops[k] = base;
    ops[k].isSend = toRoot;
    ops[k].peer = root;
    if (toRoot) ops[k].sendbuff = a->sendbuff;
    else ops[k].recvbuff = a->recvbuff;
    k++;
  }
  if (me != root) return k;
  for (int s = 0; s < n; s++) {
    int j = (root + s) % n;
    if (j == root && toRoot) {
      ops[k] = base;
      ops[k].isSend = 0, ops[k].peer = root, ops[k].recvbuff = blockOf(a->recvbuff, a->bytes, root);
      k++;
      continue;
    }
    ops[k] = base;
    ops[k].isSend = !toRoot, ops[k].peer = j;
    if (toRoot) ops[k].recvbuff = blockOf(a->recvbuff, a->bytes, j);
    else ops[k].sendbuff = blockOf(a->sendbuff, a->bytes, j);
    k++;
    if (j == root) { /* scatter: the root's block to itself */
      ops[k] = base;
      ops[k].isSend = 0, ops[k].peer = root, ops[k].recvbuff = a->recvbuff;
      k++;
    }
  }
  return k;
}

static weftResult_t pairwiseRun(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  (void)state;
  struct weftP2pOp *ops = calloc(2 * (size_t)comm->nranks, sizeof *ops);
  if (ops == NULL) return weftSetError(weftSystemError, "pairwise: out of memory");
  int n = a->coll == weftCollAlltoAll ? listAlltoAll(comm, a, ops)
                                      : listRooted(comm, a, ops, a->coll == weftCollGather);
  weftResult_t rc = weftP2pRun(comm, ops, n);
  free(ops);
  return rc;
}

static weftResult_t pairwiseFinalize(void *state) {
  (void)state;
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoPairwise = {
  .size = sizeof(struct weftAlgoOps),
  .name = "pairwise",
  .colls = WEFT_COLL_BIT(weftCollAlltoAll) | WEFT_COLL_BIT(weftCollGather) |
           WEFT_COLL_BIT(weftCollScatter),
  .init = pairwiseInit,
  .cost = pairwiseCost,
  .run = pairwiseRun,
  .finalize = pairwiseFinalize,
};
