/* The collective cases of collcases.h. */
#include "collcases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "core.h"
#include "harness.h"
#include "reduce.h"

#define POISON 0xA5

static int reducesColl(weftColl_t c) { return c == weftCollReduce || c == weftCollReduceScatter; }

/* Room for a call's buffers: n parts of count for the gathered side, with slack. */
struct bufs {
  char *send, *recv, *want;
  size_t cap;
};

static int sameBytes(const void *a, const void *b, size_t n) { return n == 0 || memcmp(a, b, n) == 0; }

static int untouched(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)p[i] != POISON) return 0;
  return 1;
}

/* One call and its check; 1 (with a message) when it failed or a value is wrong. */
static long checkCase(weftComm_t comm, int rank, int n, const struct collSweep *m, size_t count,
                      weftDataType_t type, weftRedOp_t op, int root, int inPlace,
                      struct bufs *b) {
  size_t ts = weftTypeSize(type), bytes = count * ts, all = bytes * (size_t)n;
  memset(b->send, POISON, all);
  memset(b->recv, POISON, all);
  const char *what = "wrong result";
  weftResult_t rc;
  int ok = 1;
  switch (m->coll) {
    case weftCollBroadcast: {
      char *out = inPlace && rank == root ? b->send : b->recv;
      if (rank == root) fillInput(b->send, count, type, op, root);
      rc = weftBroadcast(b->send, out, count, type, root, comm, NULL);
      fillInput(b->want, count, type, op, root);
      ok = sameBytes(out, b->want, bytes);
      break;
    }
    case weftCollReduce: {
      char *out = inPlace && rank == root ? b->send : b->recv;
      fillInput(b->send, count, type, op, rank);
      rc = weftReduce(b->send, out, count, type, op, root, comm, NULL);
      if (rank == root) ok = countWrong(out, count, type, op, n) == 0;
      else if (!(ok = untouched(b->recv, bytes))) what = "recvbuff written off the root";
      break;
    }
    case weftCollAllGather: {
      char *in = inPlace ? b->recv + (size_t)rank * bytes : b->send;
      fillInput(in, count, type, op, rank);
      rc = weftAllGather(in, b->recv, count, type, comm, NULL);
      for (int r = 0; r < n && ok; r++) {
        fillInput(b->want, count, type, op, r);
        ok = sameBytes(b->recv + (size_t)r * bytes, b->want, bytes);
      }
      break;
    }
    case weftCollGather: {
      char *in = inPlace && rank == root ? b->recv + (size_t)root * bytes : b->send;
      fillInput(in, count, type, op, rank);
      rc = weftGather(in, b->recv, count, type, root, comm, NULL);
      for (int r = 0; r < n && ok && rank == root; r++) {
        fillInput(b->want, count, type, op, r);
        ok = sameBytes(b->recv + (size_t)r * bytes, b->want, bytes);
      }
      if (rank != root && !(ok = untouched(b->recv, all))) what = "recvbuff written off the root";
      break;
    }
    case weftCollScatter: {
      char *out = inPlace && rank == root ? b->send + (size_t)root * bytes : b->recv;
      if (rank == root)
        for (int r = 0; r < n; r++) fillInput(b->send + (size_t)r * bytes, count, type, op, r);
      rc = weftScatter(b->send, out, count, type, root, comm, NULL);
      fillInput(b->want, count, type, op, rank);
      ok = sameBytes(out, b->want, bytes);
      break;
    }
    case weftCollAlltoAll: /* no in-place form */
      for (int j = 0; j < n; j++)
        fillInput(b->send + (size_t)j * bytes, count, type, op, rank * n + j);
      rc = weftAlltoAll(b->send, b->recv, count, type, comm, NULL);
      for (int j = 0; j < n && ok; j++) {
        fillInput(b->want, count, type, op, j * n + rank);
        ok = sameBytes(b->recv + (size_t)j * bytes, b->want, bytes);
      }
      break;
    case weftCollReduceScatter: {
      char *out = inPlace ? b->send + (size_t)rank * bytes : b->recv;
      fillInput(b->send, count * (size_t)n, type, op, rank);
      rc = weftReduceScatter(b->send, out, count, type, op, comm, NULL);
      const char *want = expectedResult(count * (size_t)n, type, op, n);
      ok = (want && sameBytes(out, want + (size_t)rank * bytes, bytes)) ||
           countWrongFrom(out, (size_t)rank * count, count, type, op, n) == 0;
      break;
    }
    default:
      fprintf(stderr, "rank %d: the sweep has no case for %s\n", rank, weftCollName(m->coll));
      return 1;
  }
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: %s %zu %s %s root %d failed: %s\n", rank, weftCollName(m->coll),
            count, weftTypeName(type), weftOpName(op), root, weftGetLastError(comm));
    return 1;
  }
  if (!ok)
    fprintf(stderr, "rank %d/%d WEFT_ALGO=%s: %s %zu %s %s root %d %s: %s\n", rank, n,
            getenv("WEFT_ALGO"), weftCollName(m->coll), count, weftTypeName(type),
            weftOpName(op), root, inPlace ? "in place" : "out of place", what);
  return !ok;
}

void collSweepPrepare(const struct collSweep *m, int n) {
  size_t parts = m->coll == weftCollReduceScatter ? (size_t)n : 1;
  for (int c = 0; c < m->nCounts; c++)
    for (int t = 0; t < m->nTypes; t++)
      for (int o = 0; o < (reducesColl(m->coll) ? weftNumOps : 1); o++)
        patternPrepare(m->counts[c] * parts, m->types[t], (weftRedOp_t)o, n);
}

long collSweepBody(weftComm_t comm, int rank, int n, void *arg) {
  const struct collSweep *m = arg;
  size_t maxCount = 0;
  for (int c = 0; c < m->nCounts; c++) maxCount = m->counts[c] > maxCount ? m->counts[c] : maxCount;
  struct bufs b;
  b.cap = maxCount * 8 * (size_t)n + 64;
  b.send = malloc(b.cap), b.recv = malloc(b.cap), b.want = malloc(b.cap);
  int rooted = m->coll == weftCollBroadcast || m->coll == weftCollReduce ||
               m->coll == weftCollGather || m->coll == weftCollScatter;
  int roots[3] = {0, n - 1, n / 2}, nRoots = !rooted ? 1 : m->everyRoot ? n : 3;
  long failures = 0;
  for (int c = 0; c < m->nCounts; c++)
    for (int t = 0; t < m->nTypes; t++)
      for (int o = 0; o < (reducesColl(m->coll) ? weftNumOps : 1); o++) {
        weftRedOp_t op = (weftRedOp_t)o;
        if (op == weftAvg && !weftTypeIsFloat(m->types[t])) continue;
        for (int k = 0; k < nRoots; k++)
          for (int inPlace = 0; inPlace < (m->coll == weftCollAlltoAll ? 1 : 2); inPlace++)
            failures += checkCase(comm, rank, n, m, m->counts[c], m->types[t], op,
                                  m->everyRoot ? k : roots[k], inPlace, &b);
      }
  free(b.send), free(b.recv), free(b.want);
  return failures;
}


/* ---- point to point ---- */

static const size_t p2pCounts[] = {0, 1, 7, 1021, 40009, 300007};
#define NCOUNTS (sizeof p2pCounts / sizeof p2pCounts[0])
static const weftDataType_t p2pTypes[] = {weftUint8, weftFloat16, weftInt32, weftFloat64};
#define NTYPES (sizeof p2pTypes / sizeof p2pTypes[0])

/* The pattern of what rank `from` sends rank `to`. */
int p2pSeedOf(int from, int to) { return from * 1000 + to + 1; }

int p2pCheckBlock(const void *got, size_t count, weftDataType_t type, int from, int to,
                  char *scratch, const char *what, int rank) {
  fillInput(scratch, count, type, weftSum, p2pSeedOf(from, to));
  size_t bytes = count * weftTypeSize(type);
  if (bytes == 0 || memcmp(got, scratch, bytes) == 0) return 0;
  fprintf(stderr, "rank %d: %s: the %zu %s from rank %d are wrong\n", rank, what, count,
          weftTypeName(type), from);
  return 1;
}

int p2pCalled(weftComm_t comm, int rank, weftResult_t rc, const char *what) {
  if (rc == weftSuccess) return 0;
  fprintf(stderr, "rank %d: %s failed (%d): %s\n", rank, what, rc, weftGetLastError(comm));
  return 1;
}

/* A pattern: rank r sends to to[r] and receives from from[r] (to[from[r]] == r). */
struct pattern {
  int kind; /* 0 ring, 1 random permutation, 2 all to all */
};

static void permutation(int n, unsigned seed, int *to) {
  for (int i = 0; i < n; i++) to[i] = i;
  for (int i = n - 1; i > 0; i--) {
    seed = seed * 1103515245u + 12345u;
    int j = (int)((seed >> 8) % (unsigned)(i + 1));
    int t = to[i];
    to[i] = to[j], to[j] = t;
  }
}

/* One group of Send/Recv of the pattern; every rank lists its calls in its own order. */
static long patternCase(weftComm_t comm, int rank, int n, int kind, size_t count,
                        weftDataType_t type, char *send, char *recv, char *scratch) {
  size_t bytes = count * weftTypeSize(type);
  int to[64], from[64], npeers = 0;
  if (kind == 0) to[0] = (rank + 1) % n, from[0] = (rank + n - 1) % n, npeers = 1;
  if (kind == 1) {
    int perm[64];
    permutation(n, (unsigned)(count * 31 + type), perm);
    to[0] = perm[rank];
    for (int r = 0; r < n; r++)
      if (perm[r] == rank) from[0] = r;
    npeers = 1;
  }
  if (kind == 2) { /* every rank, itself included, in a rank-dependent order */
    permutation(n, (unsigned)rank * 7919u + (unsigned)count, to);
    for (int i = 0; i < n; i++) from[i] = to[(i + 1) % n];
    npeers = n;
  }
  for (int i = 0; i < npeers; i++) fillInput(send + (size_t)i * bytes, count, type, weftSum, p2pSeedOf(rank, to[i]));
  memset(recv, 0xA5, bytes * (size_t)npeers);
  long bad = p2pCalled(comm, rank, weftGroupStart(), "weftGroupStart");
  for (int i = 0; i < npeers; i++) {
    /* receives first on odd ranks, sends first on even ones: the order must not matter */
    if (rank % 2) bad += p2pCalled(comm, rank, weftRecv(recv + (size_t)i * bytes, count, type, from[i], comm, NULL), "weftRecv");
    bad += p2pCalled(comm, rank, weftSend(send + (size_t)i * bytes, count, type, to[i], comm, NULL), "weftSend");
    if (rank % 2 == 0) bad += p2pCalled(comm, rank, weftRecv(recv + (size_t)i * bytes, count, type, from[i], comm, NULL), "weftRecv");
  }
  bad += p2pCalled(comm, rank, weftGroupEnd(), "weftGroupEnd");
  for (int i = 0; i < npeers && bad == 0; i++)
    bad += p2pCheckBlock(recv + (size_t)i * bytes, count, type, from[i], rank, scratch, "group Send/Recv", rank);
  return bad;
}

long p2pPatternsBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  size_t cap = p2pCounts[NCOUNTS - 1] * 8 * (size_t)n + 64;
  char *send = malloc(cap), *recv = malloc(cap), *scratch = malloc(cap);
  long bad = 0;
  for (int kind = 0; kind < 3; kind++)
    for (size_t c = 0; c < NCOUNTS; c++)
      for (size_t t = 0; t < NTYPES; t++) {
        if (kind == 2 && p2pCounts[c] > 40009 && n > 4) continue; /* keep the all-to-all small */
        bad += patternCase(comm, rank, n, kind, p2pCounts[c], p2pTypes[t], send, recv, scratch);
      }
  free(send), free(recv), free(scratch);
  return bad;
}

/* AlltoAll, Gather and Scatter, every root, in place where the call has a form of it. */
static long rootedCase(weftComm_t comm, int rank, int n, weftColl_t coll, size_t count,
                       weftDataType_t type, int root, int inPlace, char *send, char *recv,
                       char *scratch) {
  size_t bytes = count * weftTypeSize(type);
  memset(recv, 0xA5, bytes * (size_t)n);
  weftResult_t rc;
  long bad = 0;
  if (coll == weftCollAlltoAll) {
    for (int j = 0; j < n; j++) fillInput(send + (size_t)j * bytes, count, type, weftSum, p2pSeedOf(rank, j));
    rc = weftAlltoAll(send, recv, count, type, comm, NULL);
    for (int j = 0; j < n && rc == weftSuccess; j++)
      bad += p2pCheckBlock(recv + (size_t)j * bytes, count, type, j, rank, scratch, "AlltoAll", rank);
  } else if (coll == weftCollGather) {
    char *in = inPlace && rank == root ? recv + (size_t)root * bytes : send;
    fillInput(in, count, type, weftSum, p2pSeedOf(rank, root));
    rc = weftGather(in, recv, count, type, root, comm, NULL);
    for (int j = 0; j < n && rc == weftSuccess && rank == root; j++)
      bad += p2pCheckBlock(recv + (size_t)j * bytes, count, type, j, root, scratch, "Gather", rank);
  } else {
    char *out = inPlace && rank == root ? send + (size_t)root * bytes : recv;
    if (rank == root)
      for (int j = 0; j < n; j++) fillInput(send + (size_t)j * bytes, count, type, weftSum, p2pSeedOf(root, j));
    rc = weftScatter(send, out, count, type, root, comm, NULL);
    if (rc == weftSuccess) bad += p2pCheckBlock(out, count, type, root, rank, scratch, "Scatter", rank);
  }
  return bad + p2pCalled(comm, rank, rc, weftCollName(coll));
}

long p2pRootedBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  size_t cap = p2pCounts[NCOUNTS - 1] * 8 * (size_t)n + 64;
  char *send = malloc(cap), *recv = malloc(cap), *scratch = malloc(cap);
  static const weftColl_t colls[] = {weftCollAlltoAll, weftCollGather, weftCollScatter};
  long bad = 0;
  for (int k = 0; k < 3; k++)
    for (size_t c = 0; c < NCOUNTS; c++)
      for (size_t t = 0; t < NTYPES; t++)
        for (int root = 0; root < (k == 0 ? 1 : n); root++)
          for (int inPlace = 0; inPlace < (k == 0 ? 1 : 2); inPlace++)
            bad += rootedCase(comm, rank, n, colls[k], p2pCounts[c], p2pTypes[t], root, inPlace, send,
                              recv, scratch);
  free(send), free(recv), free(scratch);
  return bad;
}

weftResult_t rootDisagreeingCall(weftComm_t comm, int rank, int n, weftColl_t coll,
                                 const float send[64], float recv[64], int *root, int *named) {
  *root = rank == n - 1 ? 1 : 0;
  weftResult_t rc = coll == weftCollBroadcast
                        ? weftBroadcast(send, recv, 64, weftFloat32, *root, comm, NULL)
                        : weftReduce(send, recv, 64, weftFloat32, weftSum, *root, comm, NULL);
  const char *name = weftCollName(coll), *op = coll == weftCollBroadcast ? "" : ", sum";
  char call0[96], call1[96];
  snprintf(call0, sizeof call0, "%s(count 64, float%s, root 0)", name, op);
  snprintf(call1, sizeof call1, "%s(count 64, float%s, root 1)", name, op);
  const char *msg = weftGetLastError(comm);
  *named = rc == weftInvalidUsage && strstr(msg, call0) != NULL && strstr(msg, call1) != NULL;
  return rc;
}
