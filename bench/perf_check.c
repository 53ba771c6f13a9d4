/* The check of a collective's result (see perf_check.h). */
#include "perf_check.h"

#include <stdlib.h>
#include <string.h>

#include "perf_team.h"

void perfCaseOf(const perfShape *s, int type, int op, int root, size_t count, int rank, int nRanks,
                perfCase *k) {
  perfCounts *c = &k->c;
  k->esize = perfTypes[type].size;
  s->counts(count, k->esize, nRanks, c);
  k->type = type;
  k->op = op;
  k->root = root;
  k->count = c->paramCount;
  k->sendBytes = c->sendCount * k->esize;
  k->recvBytes = c->recvCount * k->esize;
  k->rowBytes = k->sendBytes > k->recvBytes ? k->sendBytes : k->recvBytes;
  k->sendInplace = c->sendInplaceOffset * k->esize * (size_t)rank;
  k->recvInplace = c->recvInplaceOffset * k->esize * (size_t)rank;
  size_t sendEnd = k->sendInplace + k->sendBytes, recvEnd = k->recvInplace + k->recvBytes;
  k->extentBytes = sendEnd > recvEnd ? sendEnd : recvEnd;
}

/* Where the receive buffer's elements sit, from the buffer's (in place: the extent's) start. */
typedef struct {
  size_t result, resultEnd; /* the result */
  size_t input, inputEnd;   /* this rank's input before the call (in place: the send part) */
  size_t end;               /* the guard starts here */
} perfLayout;

static perfLayout perfLayoutOf(const perfCase *k, int inPlace) {
  size_t es = k->esize;
  perfLayout l = {0, k->c.recvCount, 0, 0, k->c.recvCount};
  if (!inPlace) return l;
  l.result = k->recvInplace / es;
  l.resultEnd = l.result + k->c.recvCount;
  l.input = k->sendInplace / es;
  l.inputEnd = l.input + k->c.sendCount;
  l.end = k->extentBytes / es;
  return l;
}

void perfCheckPrepare(const perfData *d, const perfCase *k, char *send, char *recv, int inPlace) {
  perfLayout l = perfLayoutOf(k, inPlace);
  size_t es = d->esize;
  memset(recv, PERF_SENTINEL, l.end * es + PERF_GUARD);
  if (inPlace) perfFill(recv + l.input * es, d->input, 0, l.inputEnd - l.input, es);
  else perfFill(send, d->input, 0, k->c.sendCount, es);
}

/* Elements [from, to) of recv that no longer hold what they held before the call. */
static long long perfCountChanged(const perfData *d, const perfLayout *l, const char *recv, size_t from,
                                  size_t to) {
  size_t es = d->esize, in = from > l->input ? from : l->input, inEnd = to < l->inputEnd ? to : l->inputEnd;
  if (in >= inEnd) return perfCountNotSentinel(recv + from * es, to - from, es);
  return perfCountNotSentinel(recv + from * es, in - from, es) +
         perfCountWrong(d, recv + in * es, d->input, in - l->input, inEnd - in, 1) +
         perfCountNotSentinel(recv + inEnd * es, to - inEnd, es);
}

static long long perfCountPartWrong(perfData *d, const perfLayout *l, const char *recv, size_t at,
                                    const perfPart *p) {
  const char *buf = recv + at * d->esize;
  switch (p->what) {
  case PERF_PART_INPUT: return perfCountWrong(d, buf, perfDataInputOf(d, p->rank), p->first, p->count, 1);
  case PERF_PART_REDUCED: return perfCountWrong(d, buf, d->expect, p->first, p->count, 0);
  default: return perfCountChanged(d, l, recv, at, at + p->count);
  }
}

long long perfCheckResult(perfData *d, const perfShape *s, const perfCase *k, const char *send,
                          const char *recv, int inPlace, int rank, int nRanks) {
  perfLayout l = perfLayoutOf(k, inPlace);
  perfPart *parts = malloc((size_t)nRanks * sizeof(*parts));
  if (!parts) perfFatal("out of memory");
  int n = s->result(&k->c, rank, nRanks, k->root, parts);
  long long wrong = 0;
  size_t at = l.result;
  for (int i = 0; i < n; i++) {
    wrong += perfCountPartWrong(d, &l, recv, at, &parts[i]);
    at += parts[i].count;
  }
  free(parts);
  if (at != l.resultEnd) perfFatal("%s: the result's parts cover %zu of %zu elements", s->name, at - l.result,
                                   l.resultEnd - l.result);
  wrong += perfCountNotSentinel(recv + l.end * d->esize, PERF_GUARD / d->esize, d->esize);
  if (!inPlace) wrong += perfCountWrong(d, send, d->input, 0, k->c.sendCount, 1);
  return wrong;
}

size_t perfCheckRecvBytes(const perfCase *k, int inPlace) {
  return perfLayoutOf(k, inPlace).end * k->esize + PERF_GUARD;
}

void perfCheckRestore(const perfData *d, const perfCase *k, char *recv, int inPlace) {
  perfLayout l = perfLayoutOf(k, inPlace);
  perfFill(recv, d->input, 0, l.end + PERF_GUARD / d->esize, d->esize);
}
