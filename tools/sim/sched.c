/* Schedules from weft's own code: a communicator laid out on a fabric, with the ring, tree
 * and hierarchical states weft's init would build there, so that the algorithms' own cost()
 * and run() work on it. A rank's schedule is what its run() does against a record-only prims
 * tap (lib/prims.h): every step is reported (kind, peers, bytes, pieces) and moves nothing, so
 * the simulated schedule is the executed one. tests/sim/test_sim.c checks the states built here
 * against a real run: the same steps, peer for peer and byte for byte.
 * The buffers handed to run() are one reserved, inaccessible mapping: any data an algorithm
 * would touch outside prims faults at once instead of going unnoticed (ReduceScatter's own
 * part, which hier copies out of its scratch window, is real memory). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core.h"
#include "hier.h"
#include "param.h"
#include "prims.h"
#include "ring.h"
#include "sim.h"
#include "tree.h"

const char *const simAlgoNames[SIM_ALGOS] = {"ring", "tree", "hier"};

struct simComm {
  const struct simFabric *f;
  struct weftComm comm;       /* comm.rank is the rank being recorded */
  struct weftPeerInfo *peers; /* hostHash = host + 1 */
  int *ringOrder;             /* 0..n-1: hosts are contiguous, so host by host */
  struct treeState tree;
  struct hierState hier;      /* its layout is built once; its rings per rank */
  int *hierLocal, *hierInter;
  int algoIndex[SIM_ALGOS];   /* index in weftAlgos[] */
  const char *why[SIM_ALGOS]; /* NULL where it runs */
};

static int algoIndexOf(const char *name) {
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (strcmp(weftAlgos[a]->name, name) == 0) return a;
  return -1;
}

/* A connection as the algorithms see it: its peer and slot; no transport behind it. */
static void fakeConn(struct weftConn *c, int peer, size_t slot) {
  memset(c, 0, sizeof *c);
  c->peer = peer;
  c->slotBytes = slot;
}

static size_t slotBetween(const struct simFabric *f, int a, int b) {
  return simHostOf(f, a) == simHostOf(f, b) ? f->localSlot : f->netSlot;
}

/* A ring over order[0..n) as weftRingSetup leaves it for rank me, with the worst link of its
 * members (weftLinkSummaryAgree: every member agrees on the slowest); within and crosses say
 * whether it has links within a host and across hosts (the caller knows, in O(1)). */
static void fakeRing(const struct simFabric *f, struct weftRing *r, int *order, int n, int me,
                     int within, int crosses) {
  r->order = order;
  r->n = n;
  r->index = 0;
  if (me < n && order[me] == me) r->index = me; /* the communicator's ring: O(1), not O(n) */
  else
    for (int i = 0; i < n; i++)
      if (order[i] == me) r->index = i;
  r->next = order[(r->index + 1) % n];
  r->prev = order[(r->index + n - 1) % n];
  fakeConn(&r->send, r->next, slotBetween(f, me, r->next));
  fakeConn(&r->recv, r->prev, slotBetween(f, r->prev, me));
  r->pieceBytes = SIZE_MAX;
  if (within) r->pieceBytes = f->localSlot;
  if (crosses && f->netSlot < r->pieceBytes) r->pieceBytes = f->netSlot;
  if (r->pieceBytes == SIZE_MAX) r->pieceBytes = f->localSlot;
  r->latencyUs = crosses ? f->nicLatUs : f->suLatUs;
  r->bandwidthGBs = crosses ? (f->nicGBs < f->suGBs ? f->nicGBs : f->suGBs) : f->suGBs;
}

/* The tree's shape for rank me (weftTreeNodeOf, as treeInit), and the rest of its state as
 * treeInit computes it from the peer table. */
static void fakeTree(struct simComm *c, int me) {
  const struct simFabric *f = c->f;
  struct treeState *s = &c->tree;
  int n = c->comm.nranks;
  for (int t = 0; t < 2; t++) {
    struct weftTreeNode node;
    struct treeSide *side = &s->tree[t];
    weftTreeNodeOf(me, t, n, &node);
    side->parent = node.parent;
    side->nchildren = node.nchildren;
    memcpy(side->children, node.children, sizeof side->children);
    if (node.parent >= 0) {
      fakeConn(&side->upSend, node.parent, slotBetween(f, me, node.parent));
      fakeConn(&side->downRecv, node.parent, slotBetween(f, me, node.parent));
    }
    for (int i = 0; i < node.nchildren; i++) {
      fakeConn(&side->upRecv[i], node.children[i], slotBetween(f, me, node.children[i]));
      fakeConn(&side->downSend[i], node.children[i], slotBetween(f, me, node.children[i]));
    }
  }
}

static void fakeTreeShared(struct simComm *c) {
  const struct simFabric *f = c->f;
  struct treeState *s = &c->tree;
  int n = c->comm.nranks, hosts = c->comm.nHosts;
  for (s->depth = 0; (1 << s->depth) <= n; s->depth++) {}
  s->rootedHops = n > 1 ? 1 + weftTreeHeight(n - 1) : 0;
  s->perHost = hosts > 1 ? (n < f->gpus ? n : f->gpus) : 1;
  s->ranksPerCpu = 1.0 / 64;
  /* every tree of more than a host's ranks has links both within and across hosts */
  s->pieceBytes = hosts > 1 ? (f->localSlot < f->netSlot && f->gpus > 1 ? f->localSlot : f->netSlot)
                            : f->localSlot;
  s->rootedPieceBytes = s->pieceBytes;
  s->latencyUs = hosts > 1 ? f->nicLatUs : f->suLatUs;
  s->bandwidthGBs = hosts > 1 ? (f->nicGBs < f->suGBs ? f->nicGBs : f->suGBs) : f->suGBs;
}

/* hier's layout for contiguous hosts of `gpus` ranks (weftHierLayoutInit's result for that
 * peer table, built in O(n): weftHierLayoutInit compares every rank with every host). */
static int fakeHierLayout(struct simComm *c) {
  struct hierLayout *L = &c->hier.L;
  int n = c->comm.nranks, g = c->f->gpus < n ? c->f->gpus : n, h = (n + g - 1) / g;
  memset(L, 0, sizeof *L);
  L->nranks = n;
  L->h = h;
  L->hostOf = malloc(sizeof(int) * (size_t)n);
  L->localIndex = malloc(sizeof(int) * (size_t)n);
  L->size = malloc(sizeof(int) * (size_t)h);
  L->leader = malloc(sizeof(int) * (size_t)h);
  L->byHost = malloc(sizeof(int) * (size_t)n);
  L->hostFirst = malloc(sizeof(int) * (size_t)h);
  L->runStart = malloc(sizeof(int) * (size_t)(h + 1));
  L->runs = malloc(sizeof(struct hierRun) * (size_t)h);
  if (!L->hostOf || !L->localIndex || !L->size || !L->leader || !L->byHost || !L->hostFirst ||
      !L->runStart || !L->runs)
    return -1;
  for (int r = 0; r < n; r++) {
    L->hostOf[r] = r / g;
    L->localIndex[r] = r % g;
    L->byHost[r] = r;
  }
  for (int k = 0; k < h; k++) {
    L->leader[k] = L->hostFirst[k] = k * g;
    L->size[k] = (k + 1) * g <= n ? g : n - k * g;
    L->runStart[k] = k;
    L->runs[k] = (struct hierRun){k * g, L->size[k]};
  }
  L->runStart[h] = h;
  L->minSize = L->size[h - 1];
  L->maxSize = L->size[0];
  return 0;
}

static int fakeHierShared(struct simComm *c) {
  const struct simFabric *f = c->f;
  struct hierState *s = &c->hier;
  if (fakeHierLayout(c) != 0) return -1;
  s->slices = s->L.minSize == s->L.maxSize && s->L.minSize >= 2;
  int64_t slots = weftParamRingChunkSlots();
  s->slots = (size_t)(slots < 1 ? 1 : slots);
  s->pieceBytes = s->L.maxSize > 1 && f->localSlot < f->netSlot ? f->localSlot : f->netSlot;
  s->netLatencyUs = f->nicLatUs;
  s->netBandwidthGBs = f->nicGBs < f->suGBs ? f->nicGBs : f->suGBs;
  s->localBandwidthGBs = s->L.maxSize > 1 ? f->suGBs : s->netBandwidthGBs;
  s->scratch = malloc(s->slots * s->pieceBytes);
  c->hierLocal = malloc(sizeof(int) * (size_t)s->L.maxSize);
  c->hierInter = malloc(sizeof(int) * (size_t)s->L.h);
  return s->scratch && c->hierLocal && c->hierInter ? 0 : -1;
}

/* hier's two rings for rank me, as its buildRings() makes them. */
static void fakeHier(struct simComm *c, int me) {
  struct hierState *s = &c->hier;
  const struct hierLayout *L = &s->L;
  int k = L->hostOf[me], li = L->localIndex[me], nl = L->size[k], ni = L->h;
  memcpy(c->hierLocal, L->byHost + L->hostFirst[k], sizeof(int) * (size_t)nl);
  for (int j = 0; j < L->h; j++) c->hierInter[j] = L->byHost[L->hostFirst[j] + (s->slices ? li : 0)];
  if (!s->slices && li != 0) c->hierInter[0] = me, ni = 1;
  fakeRing(c->f, &s->local, c->hierLocal, nl, me, nl > 1, 0);
  fakeRing(c->f, &s->inter, c->hierInter, ni, me, 0, ni > 1);
}

static void setRank(struct simComm *c, int me) {
  c->comm.rank = me;
  c->comm.localRank = me % c->f->gpus;
  fakeRing(c->f, &c->comm.ring, c->ringOrder, c->comm.nranks, me, c->comm.nLocalRanks > 1,
           c->comm.nHosts > 1);
  fakeTree(c, me);
  if (c->why[SIM_HIER] == NULL) fakeHier(c, me);
}

static int initComm(struct simComm *c, int n) {
  struct weftComm *comm = &c->comm;
  const struct simFabric *f = c->f;
  comm->nranks = n;
  comm->nHosts = (n + f->gpus - 1) / f->gpus;
  comm->nLocalRanks = n < f->gpus ? n : f->gpus;
  comm->peers = c->peers;
  comm->timeoutMs = 1;
  for (int r = 0; r < n; r++) {
    c->peers[r].rank = r;
    c->peers[r].hostHash = (uint64_t)simHostOf(f, r) + 1;
    c->peers[r].cpus = 64;
    c->ringOrder[r] = r;
  }
  fakeTreeShared(c);
  c->why[SIM_HIER] = comm->nHosts < 2 ? "it needs 2 or more hosts" : NULL;
  if (c->why[SIM_HIER] == NULL && fakeHierShared(c) != 0) return -1;
  const char *names[SIM_ALGOS] = {"ring", "tree", "hier"};
  for (int a = 0; a < SIM_ALGOS; a++) {
    c->algoIndex[a] = algoIndexOf(names[a]);
    if (c->algoIndex[a] < 0) return -1;
  }
  setRank(c, 0);
  void *states[SIM_ALGOS] = {&comm->ring, &c->tree, &c->hier};
  for (int a = 0; a < SIM_ALGOS; a++)
    if (c->why[a] == NULL) comm->algoState[c->algoIndex[a]] = states[a];
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (comm->algoState[a] == NULL)
      snprintf(comm->algoWhy[a], sizeof comm->algoWhy[a], "not simulated by weft-sim");
  for (int k = 0; k < weftNumColls; k++) comm->algoAllowed[k] = ~0u;
  return 0;
}

struct simComm *simCommNew(const struct simFabric *f, int nranks, char *err, size_t errLen) {
  int most = f->hosts * f->gpus;
  if (nranks < 2 || nranks > most || (nranks > f->gpus && nranks % f->gpus != 0)) {
    snprintf(err, errLen,
             "%d ranks do not fit fabric %s: from 2 to %d, whole hosts of %d beyond one host",
             nranks, f->name, most, f->gpus);
    return NULL;
  }
  struct simComm *c = calloc(1, sizeof *c);
  if (c == NULL) goto oom;
  c->f = f;
  c->peers = calloc((size_t)nranks, sizeof *c->peers);
  c->ringOrder = malloc(sizeof(int) * (size_t)nranks);
  if (c->peers == NULL || c->ringOrder == NULL || initComm(c, nranks) != 0) goto oom;
  return c;
oom:
  simCommFree(c);
  snprintf(err, errLen, "out of memory for a communicator of %d ranks", nranks);
  return NULL;
}

void simCommFree(struct simComm *c) {
  if (c == NULL) return;
  weftHierLayoutFree(&c->hier.L);
  free(c->hier.scratch);
  free(c->hierLocal);
  free(c->hierInter);
  free(c->peers);
  free(c->ringOrder);
  free(c);
}

int simCommRanks(const struct simComm *c) { return c->comm.nranks; }
const struct simFabric *simCommFabric(const struct simComm *c) { return c->f; }

int simAlgoRuns(const struct simComm *c, enum simAlgo algo, weftColl_t coll, char *why,
                size_t len) {
  if (c->why[algo] != NULL) {
    snprintf(why, len, "%s", c->why[algo]);
    return 0;
  }
  if (!(weftAlgos[c->algoIndex[algo]]->colls & WEFT_COLL_BIT(coll))) {
    snprintf(why, len, "weft's %s does not run %s", simAlgoNames[algo], weftCollName(coll));
    return 0;
  }
  return 1;
}

/* The call's arguments as the algorithms get them (float32 sum; count per NCCL's call). */
static struct weftCollArgs argsOf(const struct simComm *c, const struct simCall *call) {
  size_t n = (size_t)c->comm.nranks, elems = call->bytes / sizeof(float);
  size_t count = call->coll == weftCollAllReduce ? elems : elems / n;
  return (struct weftCollArgs){call->coll, NULL, NULL, count, count * sizeof(float),
                               weftFloat32, weftSum, -1, 0, {0}};
}

double simAlgoCost(struct simComm *c, enum simAlgo algo, const struct simCall *call) {
  struct weftCollArgs a = argsOf(c, call);
  int idx = c->algoIndex[algo];
  return weftAlgos[idx]->cost(c->comm.algoState[idx], &c->comm, &a);
}

int simTunerChoice(struct simComm *c, const struct simCall *call) {
  struct weftCollArgs a = argsOf(c, call);
  int best = weftTuneChoose(&c->comm, &a);
  for (int s = 0; s < SIM_ALGOS; s++)
    if (best >= 0 && c->algoIndex[s] == best) return s;
  return -1;
}

/* ---- recording ---- */

int simRankSchedAdd(struct simRankSched *s, const struct weftPrimsStep *step, unsigned chans) {
  if (step->nrecv + step->nsend > SIM_STEP_PEERS || step->bytes > UINT32_MAX ||
      step->pieceBytes > UINT32_MAX || step->pieces > UINT32_MAX)
    return -1;
  s->tapped++;
  if (step->pieces == 0) return 0; /* an empty chunk: prims sends and waits for nothing */
  if (s->nsteps == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    struct simStep *grown = realloc(s->steps, cap * sizeof *grown);
    if (grown == NULL) return -1;
    s->steps = grown;
    s->cap = cap;
  }
  struct simStep *d = &s->steps[s->nsteps++];
  memset(d, 0, sizeof *d);
  d->bytes = (uint32_t)step->bytes;
  d->pieceBytes = (uint32_t)step->pieceBytes;
  d->pieces = (uint32_t)step->pieces;
  d->kind = (uint8_t)step->kind;
  d->nrecv = (uint8_t)step->nrecv;
  d->nsend = (uint8_t)step->nsend;
  d->chans = (uint8_t)chans;
  for (int i = 0; i < step->nrecv; i++) d->peer[i] = step->recvPeer[i];
  for (int i = 0; i < step->nsend; i++) d->peer[step->nrecv + i] = step->sendPeer[i];
  return 0;
}

void simRankSchedFree(struct simRankSched *s) {
  free(s->steps);
  memset(s, 0, sizeof *s);
}

struct recorder {
  const struct simComm *c;
  struct simRankSched *out;
  int failed;
};

static int inside(const struct weftConn *conn, const void *obj, size_t size) {
  const char *p = (const char *)conn, *o = obj;
  return p >= o && p < o + size;
}

/* Which of the rank pair's links conn is (enum simChan): the object of this communicator's
 * states it lies in. */
static unsigned channelOf(const struct simComm *c, const struct weftConn *conn) {
  if (inside(conn, &c->comm.ring, sizeof c->comm.ring)) return SIM_CHAN_RING;
  if (inside(conn, &c->tree.tree[0], sizeof c->tree.tree[0])) return SIM_CHAN_TREE0;
  if (inside(conn, &c->tree.tree[1], sizeof c->tree.tree[1])) return SIM_CHAN_TREE1;
  return SIM_CHAN_HIER;
}

static void recordStep(void *ctx, const struct weftPrimsStep *step) {
  struct recorder *r = ctx;
  unsigned chans = 0;
  for (int i = 0; i < step->nrecv; i++) chans |= channelOf(r->c, step->recvConn[i]) << (2 * i);
  for (int i = 0; i < step->nsend; i++)
    chans |= channelOf(r->c, step->sendConn[i]) << (2 * (step->nrecv + i));
  if (simRankSchedAdd(r->out, step, chans) != 0) r->failed = 1;
}

/* Buffers for run(): one inaccessible reservation large enough for the call's buffers (send
 * and receive the same, in place), and ReduceScatter's own part in real memory. */
struct simBuffers {
  void *reserved, *own;
  size_t reservedBytes, ownBytes;
};

static int buffersFor(struct simBuffers *b, const struct weftCollArgs *a, int n) {
  memset(b, 0, sizeof *b);
  size_t total = a->coll == weftCollAllReduce ? a->bytes : a->bytes * (size_t)n;
  b->reservedBytes = total + 4096;
  b->reserved = mmap(NULL, b->reservedBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
  if (b->reserved == MAP_FAILED) return -1;
  if (a->coll == weftCollReduceScatter) {
    b->ownBytes = a->bytes + 64;
    b->own = malloc(b->ownBytes);
    if (b->own == NULL) return -1;
  }
  return 0;
}

static void buffersFree(struct simBuffers *b) {
  if (b->reserved != NULL && b->reserved != MAP_FAILED) munmap(b->reserved, b->reservedBytes);
  free(b->own);
}

int simRecord(struct simComm *c, enum simAlgo algo, const struct simCall *call, int rank,
              struct simRankSched *out, char *err, size_t errLen) {
  char why[160];
  if (!simAlgoRuns(c, algo, call->coll, why, sizeof why)) {
    snprintf(err, errLen, "%s: %s", simAlgoNames[algo], why);
    return -1;
  }
  struct weftCollArgs a = argsOf(c, call);
  struct simBuffers b;
  if (buffersFor(&b, &a, c->comm.nranks) != 0) {
    buffersFree(&b);
    snprintf(err, errLen, "cannot reserve %zu bytes of buffers: %s", b.reservedBytes,
             strerror(errno));
    return -1;
  }
  char *base = b.reserved;
  a.recvbuff = base;
  a.sendbuff = base;
  if (call->coll == weftCollAllGather) a.sendbuff = base + (size_t)rank * a.bytes; /* in place */
  if (call->coll == weftCollReduceScatter) a.recvbuff = b.own;
  setRank(c, rank);
  memset(out, 0, sizeof *out);
  out->rank = rank;
  struct recorder rec = {c, out, 0};
  struct weftPrimsTap tap = {recordStep, &rec, 1};
  c->comm.primsTap = &tap;
  int idx = c->algoIndex[algo];
  weftResult_t rc = weftAlgos[idx]->run(c->comm.algoState[idx], &c->comm, &a);
  c->comm.primsTap = NULL;
  buffersFree(&b);
  if (rc != weftSuccess || rec.failed) {
    snprintf(err, errLen, "%s %s on %d ranks: recording rank %d failed (%s)", simAlgoNames[algo],
             weftCollName(call->coll), c->comm.nranks, rank,
             rec.failed ? "a step beyond what a schedule step holds, or out of memory"
                        : "the algorithm returned an error");
    simRankSchedFree(out);
    return -1;
  }
  return 0;
}
