/* The event-driven engine: every simulated rank walks its recorded schedule piece by piece, as
 * lib/prims.c does. A piece starts when the rank is free and every piece it receives has
 * arrived (pieces of a link arrive in order, as its slots; two links between the same ranks,
 * such as the ring's token beside hier's chain, are two queues); it takes the rank's per-piece
 * overhead (and its reduction time, for a reducing step), then its sends leave: each occupies
 * every link of its path for its bytes over that link's bandwidth, cut through link by link
 * (see sendPiece), and arrives after the path's latency plus its bytes over the slowest link
 * when alone (links shared by several messages serve them one after another: contention). Senders never wait
 * for credit (the FIFO's depth is not modelled). Events are taken in time order from a heap.
 * Exact mode simulates every rank. Symmetric mode simulates host 0's ranks only, for
 * schedules in which every host does what host 0 does (ring, hier): a message to rank r is
 * received by rank r mod gpus, as from the sender's own rank mod gpus, and the links are host
 * 0's (simLinksInit with fold). With several calls (simOptions' calls) every rank's schedule
 * is run that many times back to back, and the time is the last call's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "prims.h"
#include "sim.h"

/* Beyond this many recorded steps in all, exact mode refuses (32 bytes each). */
#define SIM_MAX_STEPS (64u << 20)
#define INBOX_PEERS 8

struct queue {
  double *t;
  size_t head, len, cap;
};

struct inbox {
  int src;  /* simulated rank it comes from, -1: free */
  int chan; /* which of the pair's links (enum simChan) */
  double last; /* arrival of the last piece: a link delivers in order */
  struct queue q;
  size_t consumed;                /* pieces the receiver has taken */
  double freedAt[SIM_MAX_DEPTH];  /* when piece k's slot was freed, at k % depth */
  int blocked;                    /* a sender waiting for a slot (simulated rank), or -1 */
};

struct rankState {
  struct simRankSched sched;
  size_t perCall;    /* steps of one call (the schedule holds o->calls of them) */
  double lastButOne; /* when the call before the last ended (several calls) */
  size_t step;
  uint32_t piece;
  double freeAt, stepStart;
  int waiting, scheduled, done;
  struct inbox in[INBOX_PEERS];
};

struct event {
  double t;
  int rank;
};

struct engine {
  struct simComm *comm;
  const struct simFabric *f;
  const struct simOptions *o;
  struct simLinks links;
  double *linkFree;
  double *tokens, *tokensAt; /* per link with a burst: its bucket's bytes, as of tokensAt */
  struct simCores cores; /* with a cpu line */
  double now;            /* the time of the event being handled */
  struct rankState *ranks;
  int nsim; /* simulated ranks: all, or host 0's */
  struct event *heap;
  int nheap;
  struct simStep *arena; /* every rank's steps, one after another (see packSteps) */
  size_t arenaUsed;
  size_t pieces;
  char *err;
  size_t errLen;
};

static int callsOf(const struct engine *e) { return e->o->calls > 1 ? e->o->calls : 1; }

static int repOf(const struct engine *e, int rank) { return e->o->symmetric ? rank % e->f->gpus : rank; }

static int push(struct queue *q, double t) {
  if (q->head + q->len == q->cap) {
    if (q->head > 0) {
      memmove(q->t, q->t + q->head, q->len * sizeof *q->t);
      q->head = 0;
    } else {
      size_t cap = q->cap ? q->cap * 2 : 16;
      double *grown = realloc(q->t, cap * sizeof *grown);
      if (grown == NULL) return -1;
      q->t = grown;
      q->cap = cap;
    }
  }
  q->t[q->head + q->len++] = t;
  return 0;
}

static struct inbox *inboxOf(struct rankState *r, int src, int chan, int create) {
  for (int i = 0; i < INBOX_PEERS; i++) {
    if (r->in[i].src == src && r->in[i].chan == chan) return &r->in[i];
    if (r->in[i].src < 0) {
      if (!create) return NULL;
      r->in[i].src = src;
      r->in[i].chan = chan;
      r->in[i].blocked = -1;
      return &r->in[i];
    }
  }
  return NULL;
}

/* ---- the heap of events ---- */

static void heapPush(struct engine *e, double t, int rank) {
  int i = e->nheap++;
  while (i > 0) {
    int up = (i - 1) / 2;
    if (e->heap[up].t <= t) break;
    e->heap[i] = e->heap[up];
    i = up;
  }
  e->heap[i] = (struct event){t, rank};
}

static struct event heapPop(struct engine *e) {
  struct event top = e->heap[0], last = e->heap[--e->nheap];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= e->nheap) break;
    if (c + 1 < e->nheap && e->heap[c + 1].t < e->heap[c].t) c++;
    if (e->heap[c].t >= last.t) break;
    e->heap[i] = e->heap[c];
    i = c;
  }
  if (e->nheap > 0) e->heap[i] = last;
  return top;
}

static void wake(struct engine *e, int rank, double t) {
  struct rankState *r = &e->ranks[rank];
  if (r->scheduled || r->done) return;
  r->scheduled = 1;
  r->waiting = 0;
  heapPush(e, t, rank);
}

/* ---- one piece ---- */

static size_t pieceBytes(const struct simStep *s, uint32_t piece) {
  if (s->bytes == 0) return 0; /* a token */
  size_t done = (size_t)piece * s->pieceBytes;
  return s->bytes - done < s->pieceBytes ? s->bytes - done : s->pieceBytes;
}

/* How long link l serves a piece of `wire` bytes entering at `enter`: its bytes over its
 * bandwidth, less what its token bucket holds (a tbf: the bucket refills at the link's rate up
 * to its burst, and bytes covered by tokens pass at once). */
static double linkBusyUs(struct engine *e, int l, double wire, double enter, double slow) {
  double bytesPerUs = e->links.GBs[l] * 1e3 / slow, burst = e->links.burst[l];
  if (burst <= 0) return wire / bytesPerUs;
  double held = e->tokens[l] + (enter - e->tokensAt[l]) * bytesPerUs;
  if (held > burst) held = burst;
  double busy = wire > held ? (wire - held) / bytesPerUs : 0;
  e->tokens[l] = wire > held ? 0 : held - wire;
  e->tokensAt[l] = enter + busy;
  return busy;
}

/* Whether a piece from a to b crosses a NIC (else it stays in a host: shared memory). */
static int crossesHosts(const struct engine *e, int a, int b) { return simHostOf(e->f, a) != simHostOf(e->f, b); }

/* The pieces the link from a to b holds before its sender waits for a freed slot. */
static size_t depthOf(const struct engine *e, int a, int b) {
  return (size_t)(crossesHosts(e, a, b) ? e->f->netDepth : e->f->localDepth);
}

/* ---- cores (the fabric's cpu line) ---- */

/* Work of `us` for rank's pool, ready at `ready`, on whichever core of the pool can run it
 * first (ranks and progress threads go to any free core): when it starts (if start is not
 * NULL) and ends. */
static int onCore(struct engine *e, int rank, double ready, double us, double *start, double *end) {
  int pool = e->f->cpuPoolMachine ? 0 : simHostOf(e->f, repOf(e, rank));
  return simCoresTake(&e->cores, pool, e->now, ready, us, start, end);
}

/* The piece leaves src at time t for dst on link chan; it lands in dst's representative's
 * inbox of that link. With a cpu line, a piece crossing a NIC is copied through the network
 * transport by a core on each side (the sender's progress thread into the socket, the
 * receiver's out of it), cut through with the links: the links start with the sender's copy
 * and the receiver's copy with the first bytes in; a piece between ranks of a host is copied
 * into the shared slot by a core of the sender's at the scale-up link's speed. */
static int sendPiece(struct engine *e, int src, int dst, int chan, size_t bytes, double t) {
  struct simPath p;
  simPathOf(&e->links, src, dst, &p);
  double slow = 1;
  if (e->o->slowRank >= 0 && (src == e->o->slowRank || dst == e->o->slowRank)) slow = e->o->slowFactor;
  /* Cut through, link by link: the piece enters a link once it is free and the piece has
   * entered the one before, and leaves it no earlier than it left the one before. Alone on
   * its path it arrives after latency + bytes over the slowest link. */
  double wire = (double)(bytes + WEFT_PRIMS_SIG_BYTES), enter = t, leave = t;
  int cpu = e->f->cpuCores > 0, net = crossesHosts(e, src, dst);
  if (cpu && onCore(e, src, t, wire / ((net ? e->f->cpuCopyGBs : e->f->suGBs) * 1e3), &enter, &leave) != 0)
    return -1;
  for (int i = 0; i < p.nlinks; i++) {
    int l = p.link[i];
    double *free = &e->linkFree[l];
    if (*free > enter) enter = *free;
    double out = enter + linkBusyUs(e, l, wire, enter, slow);
    leave = out > leave ? out : leave;
    *free = leave;
  }
  double arrival = leave + p.latUs;
  if (cpu && net) {
    double copied;
    if (onCore(e, dst, enter + p.latUs, wire / (e->f->cpuCopyGBs * 1e3), NULL, &copied) != 0) return -1;
    if (copied > arrival) arrival = copied;
  }
  int to = repOf(e, dst);
  struct inbox *in = inboxOf(&e->ranks[to], repOf(e, src), chan, 1);
  if (in == NULL) return -1;
  if (arrival < in->last) arrival = in->last;
  in->last = arrival;
  if (push(&in->q, arrival) != 0) return -1;
  if (e->ranks[to].waiting) wake(e, to, t > arrival ? t : arrival);
  return 0;
}

static const char *const kindNames[WEFT_PRIMS_KINDS] = {
  "send", "recv", "recvReduceSend", "recvReduceCopySend", "recvReduceCopy", "recvCopySend"};

static void traceStep(const struct engine *e, const struct rankState *r, const struct simStep *s,
                      double end) {
  FILE *out = e->o->trace;
  fprintf(out, "{\"rank\":%d,\"step\":%zu,\"op\":\"%s\",\"recv\":[", r->sched.rank, r->step,
          kindNames[s->kind]);
  for (int i = 0; i < s->nrecv; i++) fprintf(out, "%s%d", i ? "," : "", s->peer[i]);
  fprintf(out, "],\"send\":[");
  for (int i = 0; i < s->nsend; i++) fprintf(out, "%s%d", i ? "," : "", s->peer[s->nrecv + i]);
  fprintf(out, "],\"bytes\":%u,\"pieces\":%u,\"start_us\":%.3f,\"end_us\":%.3f}\n", s->bytes,
          s->pieces, r->stepStart, end);
}

static int isReduce(uint8_t kind) {
  return kind == WEFT_PRIMS_RECV_REDUCE_SEND || kind == WEFT_PRIMS_RECV_REDUCE_COPY_SEND ||
         kind == WEFT_PRIMS_RECV_REDUCE_COPY;
}

/* Credit: a link holds `depth` pieces its receiver has not taken; the sender of the next one
 * waits until the slot of the piece `depth` before it is freed, and the word of it has come
 * back (the link's latency). 1: every send of the step has a slot, `*need` raised to when;
 * 0: one has none yet (the rank waits; the receiver wakes it when it frees one); -1: out of
 * room for peers. */
static int creditWait(struct engine *e, int rank, const struct simStep *s, double *need) {
  int me = e->ranks[rank].sched.rank;
  for (int i = 0; i < s->nsend; i++) {
    int dst = s->peer[s->nrecv + i];
    struct inbox *in = inboxOf(&e->ranks[repOf(e, dst)], repOf(e, me), simStepChan(s, s->nrecv + i), 1);
    if (in == NULL) return -1;
    size_t depth = depthOf(e, me, dst), sent = in->consumed + in->q.len;
    if (sent < depth) continue;
    if (sent - depth >= in->consumed) { /* that piece is not taken yet */
      in->blocked = rank;
      e->ranks[rank].waiting = 1;
      return 0;
    }
    double back = in->freedAt[(sent - depth) % depth] + (crossesHosts(e, me, dst) ? e->f->nicLatUs : e->f->suLatUs);
    if (back > *need) *need = back;
  }
  return 1;
}

/* The receiver took a piece from `in` (its slot free at `at`); a sender waiting for a slot
 * tries again. */
static void freeSlot(struct engine *e, int rank, struct inbox *in, int src, double at) {
  size_t depth = depthOf(e, src, e->ranks[rank].sched.rank);
  in->q.head++, in->q.len--;
  in->freedAt[in->consumed % depth] = at;
  in->consumed++;
  if (in->blocked >= 0) {
    int sender = in->blocked;
    in->blocked = -1;
    wake(e, sender, at);
  }
}

/* Runs the rank's next piece at `now` if it can; else waits (for a piece) or retries later. */
static int attempt(struct engine *e, int rank, double now) {
  struct rankState *r = &e->ranks[rank];
  if (r->step == r->sched.nsteps) {
    r->done = 1;
    return 0;
  }
  const struct simStep *s = &r->sched.steps[r->step];
  double need = r->freeAt, arrived = 0;
  struct inbox *from[SIM_STEP_PEERS];
  for (int i = 0; i < s->nrecv; i++) {
    from[i] = inboxOf(r, repOf(e, s->peer[i]), simStepChan(s, i), 0);
    if (from[i] == NULL || from[i]->q.len == 0) {
      r->waiting = 1;
      return 0;
    }
    double t = from[i]->q.t[from[i]->q.head];
    if (t > arrived) arrived = t;
  }
  /* A rank that waited for its piece runs a wake-up after it arrives (the cpu line's wake). */
  if (arrived > need) need = arrived + e->f->cpuWakeUs;
  int me = r->sched.rank;
  int credit = creditWait(e, rank, s, &need);
  if (credit <= 0) return credit;
  if (need > now) {
    wake(e, rank, need);
    return 0;
  }
  double work = e->f->overheadUs + (isReduce(s->kind) ? (double)pieceBytes(s, r->piece) / (e->f->reduceGBs * 1e3) : 0);
  double end = now + work;
  if (e->f->cpuCores > 0 && onCore(e, me, now, work, NULL, &end) != 0) return -1;
  for (int i = 0; i < s->nrecv; i++) freeSlot(e, rank, from[i], s->peer[i], end);
  if (r->piece == 0) r->stepStart = now;
  size_t bytes = pieceBytes(s, r->piece);
  for (int i = 0; i < s->nsend; i++)
    if (sendPiece(e, me, s->peer[s->nrecv + i], simStepChan(s, s->nrecv + i), bytes, end) != 0)
      return -1;
  e->pieces++;
  r->freeAt = end;
  if (++r->piece == s->pieces) {
    if (e->o->trace != NULL) traceStep(e, r, s, end);
    r->piece = 0;
    r->step++;
    if (callsOf(e) > 1 && r->step == r->perCall * (size_t)(callsOf(e) - 1)) r->lastButOne = end;
  }
  wake(e, rank, end);
  return 0;
}

/* ---- set up and run ---- */

/* The ranks progress nearly in step, so each piece reads another rank's schedule: spread over
 * thousands of allocations that is a TLB miss a piece (3x slower at 4,096 ranks). One
 * reservation with huge pages holds them all. */
static int arenaInit(struct engine *e) {
  e->arena = mmap(NULL, (size_t)SIM_MAX_STEPS * sizeof *e->arena, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (e->arena == MAP_FAILED) {
    e->arena = NULL;
    snprintf(e->err, e->errLen, "cannot reserve room for %u steps", SIM_MAX_STEPS);
    return -1;
  }
  madvise(e->arena, (size_t)SIM_MAX_STEPS * sizeof *e->arena, MADV_HUGEPAGE); /* a hint */
  return 0;
}

/* Moves the rank's steps into the arena, once for each call run back to back. */
static void packSteps(struct engine *e, struct simRankSched *s) {
  struct simStep *at = e->arena + e->arenaUsed;
  for (int k = 0; k < callsOf(e); k++) memcpy(at + (size_t)k * s->nsteps, s->steps, s->nsteps * sizeof *at);
  free(s->steps);
  s->steps = at;
  s->cap = 0; /* not its own: engineFree leaves it */
  s->nsteps *= (size_t)callsOf(e);
  e->arenaUsed += s->nsteps;
}

static int recordAll(struct engine *e, enum simAlgo algo, const struct simCall *call) {
  if (arenaInit(e) != 0) return -1;
  for (int i = 0; i < e->nsim; i++) {
    struct rankState *r = &e->ranks[i];
    for (int k = 0; k < INBOX_PEERS; k++) r->in[k].src = -1;
    if (simRecord(e->comm, algo, call, i, &r->sched, e->err, e->errLen) != 0) return -1;
    r->perCall = r->sched.nsteps;
    if (e->arenaUsed + r->sched.nsteps * (size_t)callsOf(e) > SIM_MAX_STEPS) {
      snprintf(e->err, e->errLen, "%s %s of %zu bytes on %d ranks: more than the %u steps a run "
               "holds", simAlgoNames[algo], weftCollName(call->coll), call->bytes, e->nsim,
               SIM_MAX_STEPS);
      return -1;
    }
    packSteps(e, &r->sched);
    if (i == 0 && r->sched.tapped * (size_t)e->nsim * (size_t)callsOf(e) > SIM_MAX_STEPS) {
      snprintf(e->err, e->errLen,
               "%s %s of %zu bytes on %d ranks: about %zu steps to record, more than a run "
               "holds (%u)", simAlgoNames[algo], weftCollName(call->coll), call->bytes, e->nsim,
               r->sched.tapped * (size_t)e->nsim * (size_t)callsOf(e), SIM_MAX_STEPS);
      return -1;
    }
  }
  return 0;
}

static int symmetricRefusal(const struct engine *e, enum simAlgo algo, const struct simCall *call) {
  const char *why = NULL;
  size_t elems = call->bytes / sizeof(float);
  if (call->coll == weftCollAllReduce && elems % (size_t)simCommRanks(e->comm) != 0)
    why = "the elements are not a multiple of the ranks: ranks differ in their chunks";
  else if (algo == SIM_TREE) why = "the double binary tree's ranks differ from host to host";
  else if (algo == SIM_HIER && e->f->gpus < 2 && call->coll == weftCollAllReduce)
    why = "hier's AllReduce with one rank per host is a Reduce and a Broadcast from rank 0";
  else if (e->o->slowRank >= 0 || e->o->lateRank >= 0) why = "a straggler makes one host unlike the others";
  else if (simCommRanks(e->comm) % e->f->gpus != 0) why = "the ranks do not fill whole hosts";
  else if (e->f->cpuCores > 0 && e->f->cpuPoolMachine) why = "the hosts share one machine's cores";
  if (why == NULL) return 0;
  snprintf(e->err, e->errLen, "%s %s: no symmetric mode: %s (run it exact)", simAlgoNames[algo],
           weftCollName(call->coll), why);
  return -1;
}

static void engineFree(struct engine *e) {
  if (e->ranks != NULL)
    for (int i = 0; i < e->nsim; i++) {
      if (e->ranks[i].sched.cap > 0) simRankSchedFree(&e->ranks[i].sched);
      for (int k = 0; k < INBOX_PEERS; k++) free(e->ranks[i].in[k].q.t);
    }
  free(e->ranks);
  free(e->heap);
  free(e->linkFree);
  free(e->tokens);
  free(e->tokensAt);
  simCoresFree(&e->cores);
  if (e->arena != NULL) munmap(e->arena, (size_t)SIM_MAX_STEPS * sizeof *e->arena);
  simLinksFree(&e->links);
}

static int simulate(struct engine *e, struct simResult *res) {
  for (int i = 0; i < e->nsim; i++) {
    struct rankState *r = &e->ranks[i];
    r->freeAt = r->sched.rank == e->o->lateRank ? e->o->lateUs : 0;
    wake(e, i, r->freeAt);
  }
  while (e->nheap > 0) {
    struct event ev = heapPop(e);
    e->ranks[ev.rank].scheduled = 0;
    e->now = ev.t;
    if (attempt(e, ev.rank, ev.t) != 0) {
      snprintf(e->err, e->errLen, "out of memory (or a rank with more than %d peers)", INBOX_PEERS);
      return -1;
    }
  }
  res->timeUs = 0;
  double before = 0; /* when every rank had ended the call before the last */
  for (int i = 0; i < e->nsim; i++) {
    struct rankState *r = &e->ranks[i];
    if (!r->done) {
      snprintf(e->err, e->errLen, "rank %d stopped at its step %zu of %zu, waiting for a piece "
               "no rank sends or for a slot no rank frees: the schedules do not pair, or the "
               "links hold too few pieces (slots local_depth, net_depth)", r->sched.rank, r->step,
               r->sched.nsteps);
      return -1;
    }
    if (r->freeAt > res->timeUs) res->timeUs = r->freeAt;
    if (r->lastButOne > before) before = r->lastButOne;
    res->steps += r->sched.nsteps;
  }
  res->timeUs -= before;
  res->pieces = e->pieces;
  res->ranksSimulated = (size_t)e->nsim;
  return 0;
}

int simRun(struct simComm *c, enum simAlgo algo, const struct simCall *call,
           const struct simOptions *o, struct simResult *res, char *err, size_t errLen) {
  struct engine e = {.comm = c, .f = simCommFabric(c), .o = o, .err = err, .errLen = errLen};
  int n = simCommRanks(c);
  memset(res, 0, sizeof *res);
  if (o->symmetric && symmetricRefusal(&e, algo, call) != 0) return -1;
  e.nsim = o->symmetric ? e.f->gpus : n;
  if (simLinksInit(&e.links, e.f, n, o->symmetric, err, errLen) != 0) return -1;
  e.linkFree = calloc((size_t)e.links.nlinks, sizeof *e.linkFree);
  /* buckets start empty: a call run back to back with others finds the link's tokens spent */
  e.tokens = calloc((size_t)e.links.nlinks, sizeof *e.tokens);
  e.tokensAt = calloc((size_t)e.links.nlinks, sizeof *e.tokensAt);
  int pools = e.f->cpuPoolMachine || o->symmetric ? 1 : e.links.nhosts;
  int coresRc = simCoresInit(&e.cores, pools, e.f->cpuCores > 0 ? e.f->cpuCores : 1);
  e.ranks = calloc((size_t)e.nsim, sizeof *e.ranks);
  e.heap = malloc(sizeof *e.heap * (size_t)e.nsim);
  int rc = -1;
  if (e.linkFree == NULL || e.tokens == NULL || e.tokensAt == NULL || coresRc != 0 || e.ranks == NULL || e.heap == NULL)
    snprintf(err, errLen, "out of memory for %d ranks", e.nsim);
  else if (recordAll(&e, algo, call) == 0)
    rc = simulate(&e, res);
  engineFree(&e);
  return rc;
}

double simBusFactor(weftColl_t coll, int n) {
  if (coll == weftCollAllReduce) return 2.0 * (n - 1) / n;
  return (double)(n - 1) / n;
}
