/* The communicator and what every layer of the library shares about it. */
#ifndef WEFT_CORE_H_
#define WEFT_CORE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "weft.h"
#include "transport.h"
#include "algo.h"

struct weftPrimsTap; /* lib/prims.h */

#define WEFT_MAX_TRANSPORTS 8
#define WEFT_MAX_ALGOS 8
#define WEFT_COMM_MAGIC 0x7765667443306d6dULL /* "weftC0mm" */

struct weftBootstrap;
struct weftTask;

/* A ring of connections: send to the next rank, receive from the previous one. */
struct weftRing {
  int prev, next; /* ranks */
  int index;      /* my position in order[] */
  int n;          /* members */
  int *order;     /* ranks in ring order */
  struct weftConn send, recv;
  double latencyUs, bandwidthGBs; /* of its slowest link, the same on every member */
  size_t pieceBytes; /* the smallest slot of any member: both ends of a link cut alike */
  /* What a link between two packages of a host gets of the socket link, GB/s, when the ring
   * crosses there (weftTopoRingCrossGBs over the all-gathered places); 0: it never does */
  double crossGBs;
};

/* What a rank tells the others about the links of one schedule (ring, trees). */
struct weftLinkSummary {
  double latencyUs, bandwidthGBs; /* worst of this rank's links */
  uint64_t slotBytes;             /* smallest slot of this rank's links */
};
void weftLinkSummaryAdd(struct weftLinkSummary *s, const struct weftConn *c);
/* Collective: the worst of every rank's summary (only ranks in members[] when not NULL). */
weftResult_t weftLinkSummaryAgree(struct weftComm *comm, struct weftLinkSummary *mine,
                                  const int *members, int nmembers);

/* One link a rank asks for; tag tells apart several links between the same two ranks. */
#define WEFT_MAX_LINKS 16
enum { WEFT_TAG_RING = 1, WEFT_TAG_LOCAL_RING, WEFT_TAG_INTER_RING, WEFT_TAG_TREE0, WEFT_TAG_TREE1,
       WEFT_TAG_NUMA_RING, WEFT_TAG_CROSS_RING, WEFT_TAG_NUMA_INTER_RING };
struct weftLinkReq {
  int peer, dir, tag;
  struct weftConn *conn;
};

/* One collective in the flight recorder (an always-on ring of the last WEFT_FLIGHT_OPS). */
#define WEFT_FLIGHT_OPS 64
struct weftFlightEntry {
  uint64_t seq;
  const char *coll, *algo;
  size_t count;
  int type, op;
  int64_t startUs, endUs; /* CLOCK_MONOTONIC_COARSE; endUs 0 while running, -1 when it
                             succeeded (it finished before the next start), else when it failed */
  int rc;
};

struct weftComm {
  uint64_t magic;
  int rank, nranks;
  int localRank, nLocalRanks; /* among ranks with my hostHash */
  int *localRanks;            /* ranks of my host, ascending */
  int nHosts;
  struct weftPeerInfo *peers; /* indexed by rank */
  const struct weftTopoHost *topoHost; /* this host's model (lib/topo.h), a reference */
  struct weftTopoNicInfo *nics;        /* indexed by rank: the NIC each uses (lib/topo_job.c) */
  struct weftBootstrap *boot;

  int64_t timeoutMs;
  int spinIters;  /* busy polls before a wait yields now (adapts, see weftWaitDone) */
  int oversubscribed; /* some host has more ranks than CPUs: the same on every rank, for costs */
  /* Some machine (one kernel) runs more ranks than it has CPUs, counting the emulated hosts
   * on it: then the cores, not the links, are what a collective waits for (costs). */
  int cpuBound;
  int spinMax;    /* its ceiling: WEFT_SPIN_ITERS, 0 when ranks outnumber cores */
  int yieldIters; /* yields before a wait sleeps */
  uint64_t opSeq; /* collectives started on this communicator */
  uint64_t opSig[3]; /* the running collective's signature: opSeq; count << 16 | type << 8 | op;
                        weftSigWhat(collective, root) */
  /* The running collective's results outgrow the cache: its copies into user buffers stream
   * (lib/copy.h). Set by lib/coll.c for the call's length, read by prims, p2p and algorithms. */
  int opStreamsOut;
  size_t streamFromBytes; /* results per rank from which copies stream (weftCopyStreamFrom) */
  int64_t lastWatchMs; /* when a wait last called the algorithms' watch() */
  /* What a wait that has lasted calls (weftWaitPause, at most every WEFT_WATCH_MS): every
   * algorithm's watch() (lib/comm.c sets it), which the waits below the algorithms cannot
   * name. NULL: nothing to watch. */
  weftResult_t (*watchAlgos)(struct weftComm *comm);

  void *transportState[WEFT_MAX_TRANSPORTS];
  char transportWhy[WEFT_MAX_TRANSPORTS][192]; /* why a transport whose state is NULL is not used */
  struct weftRing ring;
  struct weftP2pLinks *p2p; /* links made by Send/Recv on first use (lib/p2p.c), or NULL */

  void *algoState[WEFT_MAX_ALGOS];
  char algoWhy[WEFT_MAX_ALGOS][192]; /* why an algorithm whose state is NULL cannot run */
  unsigned algoAllowed[weftNumColls]; /* per collective, bit a: WEFT_ALGO lets weftAlgos[a] run it */
  /* per collective, the tuner's last choice and what it was for (lib/tune.c): costs are pure,
   * so a call like the last one gets the same answer without costing every algorithm again */
  struct weftTuneMemo {
    size_t bytes;
    int type, op, root, algo; /* algo -1: none yet */
    unsigned runnable;        /* the algorithms with a state then */
  } tuneMemo[weftNumColls];

  char lastError[1024];

  /* Fault handling (lib/comm.c, lib/commfail.c). abortFlag is read by every wait
   * (weftWaitPause, socket polls of init); busy counts API calls inside the library so abort
   * frees nothing under them; asyncError is weftInProgress during a non-blocking init, then
   * the sticky error. */
  _Atomic int abortFlag;
  _Atomic int busy;
  _Atomic int asyncError;
  int finalized;
  _Atomic int initThreadStarted; /* exchanged to 0 by whoever joins it */
  pthread_t initThread;
  weftUniqueId initId;
  /* A non-blocking communicator (config.blocking = 0) runs each collective in a thread of its
   * own (lib/coll.c): the call returns weftInProgress, weftCommGetAsyncError reports it until
   * the operation is done. One at a time, as with NCCL's non-blocking mode. */
  int nonblocking;
  _Atomic int opInFlight;
  _Atomic int opThreadStarted; /* exchanged to 0 by whoever joins it */
  pthread_t opThread;
  struct weftTask *opTasks; /* what the operation thread runs (lib/group.c) */
  int nOpTasks;

  struct weftFlightEntry flight[WEFT_FLIGHT_OPS];
  uint64_t flightNext; /* entries ever written */

  /* Shrink and recover (lib/shrink.c). split: how a communicator made by them finds its
   * members (NULL for one made from a unique id); splitsBegun: splits of this communicator
   * so far, the epoch of the next, the same on every rank that makes the same calls. */
  struct weftSplit *split;
  uint64_t splitsBegun;

  /* Signature notes over the bootstrap ring (lib/sigwatch.c): the operation last announced,
   * where each rank was last heard of (operation and signature, 2 per rank, allocated at the
   * first lasting wait). */
  uint64_t watchSentSeq, *watchSeen;
  uint32_t watchSentWait, watchWaitFor; /* 1 + the rank a lasting wait waits for, 0: none */
  uint64_t watchBeat;   /* notes this rank sent about itself */
  int64_t watchSentMs;  /* when the last one went */
  int initDone; /* the bootstrap ring is free for notes only once init no longer uses it */

  /* Straggler report (lib/straggler.c, WEFT_STRAGGLER_REPORT): NULL when off. While a
   * collective runs with it on, waitNsByPeer points at its per-peer sums and every wait that
   * pauses adds what it waited to waitNsByPeer[peer] and opWaitNs (weftWaitAccount); NULL
   * otherwise, so waits outside collectives (and the report's own exchange) do not count. */
  struct weftStragglers *stragglers;
  int64_t *waitNsByPeer;
  /* Per peer, what transports that can measure it (tcp) received and how long it trickled
   * in (lib/transport.h); set once at init when the report is on, NULL otherwise. */
  struct weftLinkMeter *_Atomic linkMeters;
  int64_t opWaitNs;
  /* While the report is on: /proc/thread-self/schedstat of the thread that waits (lib/wait.c
   * reads its run-queue delay), opened for thread runqueueTid; -1 none. */
  int runqueueFd;
  int runqueueTid;

  struct weftDevQueue *devQueue; /* calls on device buffers (lib/devcoll.c), NULL: none yet */
  struct weftRedOps *redOps; /* PreMulSum ops and their scratch (lib/redop.c), NULL: none yet */
  const struct weftPrimsTap *primsTap; /* lib/prims.h: NULL, or what sees every prims step */
};

/* Waits for a non-blocking call's thread to end and reaps it (lib/group.c). */
void weftJoinOpThread(struct weftComm *comm);

/* Whether a call that receives `bytes` into this rank's buffers streams its copies there
 * (lib/copy.h): comm->streamFromBytes is at least 1 (SIZE_MAX: never), so 0 bytes never do. */
static inline int weftCommStreamsOut(const struct weftComm *comm, size_t bytes) {
  return bytes >= comm->streamFromBytes;
}
/* Whether weftCommAbort was called on comm. */
static inline int weftCommAborted(const struct weftComm *comm) {
  return atomic_load_explicit(&((struct weftComm *)comm)->abortFlag, memory_order_relaxed);
}
/* Across hosts, a wait that lasts tells rank+1 its collective's signature and compares
 * rank-1's (lib/sigwatch.c): weftInvalidUsage on a mismatch. Called with the algorithms'
 * watch; never blocks. */
weftResult_t weftSigWatch(struct weftComm *comm, int peer);
/* A signature note as it travels (parsers of bytes from another process, exposed for
 * tests/fuzz): decode is 0 for a well-formed note. */
#define WEFT_SIG_NOTE_BYTES 48
struct weftSigNote {
  uint32_t kind;
  uint64_t seq;
  uint32_t rankA, rankB; /* a note of where the sender is: rankA is the sender */
  uint64_t sigA, sigB;   /* in a note, sigB is the sender's note number */
  uint64_t whatA, whatB; /* the collective and root of sigA's (and sigB's) call */
};
int weftSigNoteDecode(const uint8_t in[WEFT_SIG_NOTE_BYTES], struct weftSigNote *n);
/* The third word of a signature: which collective, and its root (-1: none). */
static inline uint64_t weftSigWhat(weftColl_t coll, int root) {
  return (uint64_t)coll << 32 | (uint32_t)(root + 1);
}
/* "Broadcast(count 5, float, root 1)" from a signature's count/type/op word and its weftSigWhat
 * word, whatever their fields hold (they may come from a peer). */
void weftSigDescribe(uint64_t sig, uint64_t what, char *buf, size_t len);
/* For a collective that timed out: the chain of waits the notes show, from this rank to the
 * one not at this operation. */
weftResult_t weftSigWatchOnTimeout(struct weftComm *comm, weftResult_t rc);
/* Prints this rank's flight recorder (to the log file, or stderr). */
void weftFlightDump(struct weftComm *comm, const char *why);
/* The thread's abort flag for waits that do not see a communicator (bootstrap sockets). */
extern _Thread_local _Atomic int *weftThreadAbortFlag;

/* The number of entries in the NULL-terminated registries. */
int weftTransportCount(void);
int weftAlgoCount(void);

/* Life cycle pieces shared by init and shrink (lib/comm.c). */
struct weftComm *weftCommAlloc(int rank, int nranks, int64_t timeoutMs);
/* Runs init (bootstrap or split, then transports, rings, algorithms), on return when
 * blocking, else in a background thread (weftInProgress). Frees comm on failure. */
weftResult_t weftCommStartInit(struct weftComm *comm, int blocking, weftComm_t *out);
/* Validates config and applies its fields over the defaults given. */
weftResult_t weftConfigRead(const weftConfig_t *config, int *blocking, int64_t *timeoutMs);
/* The bootstrap of a shrunk or recovered communicator, and what it owns (lib/shrink.c). */
weftResult_t weftSplitBootstrap(struct weftComm *comm);
void weftSplitFree(struct weftSplit *split);

/* Topology (lib/topo.c). host: this host's model, for me->place. */
weftResult_t weftTopoFillPeerInfo(struct weftPeerInfo *me, int rank, const struct weftTopoHost *host);
/* Parsers of bytes from outside (internal; exposed for tests/fuzz). A peer's info as received
 * from the bootstrap: terminates its strings so they can be printed. The first line of the
 * boot id file's textLen bytes, NUL-terminated in out (len bytes). */
void weftTopoParsePeerInfo(struct weftPeerInfo *peer);
void weftTopoParseBootId(const char *text, size_t textLen, char *out, size_t len);
int weftTopoCpuCount(void);

/* The job's topology (lib/topo_job.c), after the peer info is exchanged: each rank's NIC,
 * chosen on every host from its ranks' places, then all-gathered so every rank holds all. */
struct weftTopoNicInfo {
  char name[WEFT_TOPO_NAME_BYTES]; /* "" none */
  int32_t dev;                      /* index in its host's model, -1 none */
  int32_t speedMbps;                /* -1 unknown */
  int32_t dist;                     /* enum weftTopoDist from the rank's cores or GPU */
};
weftResult_t weftTopoJobInit(struct weftComm *comm);
/* The NIC device of this rank in its host's model, NULL none. */
const struct weftTopoDev *weftTopoMyNic(const struct weftComm *comm);
/* WEFT_GRAPH_DUMP_FILE (lib/topo_graph.c): rank 0 writes rings, trees and NICs as JSON. */
weftResult_t weftTopoGraphDump(struct weftComm *comm);
/* What the graph dump shows, as plain arrays of n entries each (weft-topo fills it without a
 * communicator): each rank's host (0..), place and NIC, and the ring's order. */
struct weftTopoGraph {
  int n;
  const int *hostOf;
  const struct weftTopoPlace *places;
  const struct weftTopoNicInfo *nics;
  const int *ring;
};
/* The graph as JSON into f (a FILE *): ranks, the ring (and its package crossings), the
 * tree algorithm's two trees (parent of each rank). */
void weftTopoGraphWrite(const struct weftTopoGraph *g, void *f);

/* Transports of a communicator, and ring setup and teardown (lib/connect.c). */
weftResult_t weftTransportsInit(struct weftComm *comm);
/* The check of WEFT_TRANSPORTS (weftParamCheckFn, param.h): a comma list of transports' names. */
int weftTransportsCheckList(const char *value, char *allowed, size_t len);
/* Whether a WEFT_TRANSPORTS value (a comma list, "^" first excludes, "" all) allows name. */
int weftTransportAllowed(const char *list, const char *name);
void weftTransportsFinalize(struct weftComm *comm);
/* The first allowed transport that can link this rank to peer, in c (c->dir set): c->ops,
 * c->state, c->peer, c->comm and c->caps; an error naming every transport's reason when none
 * can. */
weftResult_t weftSelectTransport(struct weftComm *comm, int peer, struct weftConn *c);
/* Collective: every rank calls it at the same point with its own links (possibly none). */
weftResult_t weftConnectLinks(struct weftComm *comm, struct weftLinkReq *reqs, int nreqs);
/* Closes c: hands the transport why this rank closes (struct weftConn's closeReason and
 * closeCause, from c->comm's state and weftConnCloseReason), then calls its close. */
void weftConnClose(struct weftConn *c);
/* weftInvalidUsage while weftCommCloseLinks closes after a mismatch (the peers then read the
 * close as one), else 0. */
extern _Thread_local int weftConnCloseReason;
/* Collective: connects a ring over order[0..n) (which must contain this rank). */
weftResult_t weftRingSetup(struct weftComm *comm, struct weftRing *ring, const int *order, int n, int tag);
void weftRingClose(struct weftRing *ring);
/* The communicator's ring over all ranks, grouped by host. */
weftResult_t weftRingConnect(struct weftComm *comm);

/* Tuner (lib/tune.c): the index in weftAlgos of the algorithm for one call, -1 when none
 * can run it (weftTuneNoAlgorithm then says why). */
int weftTuneChoose(struct weftComm *comm, const struct weftCollArgs *args);
weftResult_t weftTuneNoAlgorithm(const struct weftComm *comm, weftColl_t coll);
/* WEFT_ALGO: what it allows must be able to run on comm, else weftInvalidArgument, with the
 * reason. */
weftResult_t weftTuneInit(struct weftComm *comm);

/* Argument checks at the API boundary (lib/argcheck.c). Each fills the thread's last error. */
weftResult_t weftCheckComm(const struct weftComm *comm, const char *api);
/* A collective's count, datatype and op (op only where it reduces) on nranks ranks: *bytes =
 * count times the type's size (lib/collcheck.c). */
weftResult_t weftCheckCount(weftColl_t coll, size_t count, weftDataType_t type, weftRedOp_t op,
                            int nranks, size_t *bytes);
/* A whole call (args->coll, buffers, count, type, op, root) for comm, as NCCL documents it:
 * buffers each rank needs, the in-place forms; sets args->bytes (and root -1 where unused). */
weftResult_t weftCheckCall(const struct weftComm *comm, struct weftCollArgs *args);
/* The buffers of one call on rank (args->bytes set, as weftCheckCall sets it): which it uses
 * there, and their bytes (NCCL's layouts); the in-place form's offset (lib/collcheck.c). */
struct weftCallBuffers {
  int needSend, needRecv;
  size_t sendBytes, recvBytes;
  /* The in-place form: recv + inPlaceAt == send (AllGather, Gather: send inside recv), or
   * send + inPlaceAt == recv (ReduceScatter, Scatter: recv inside send); -1: equal pointers. */
  ptrdiff_t inPlaceAt;
  int recvInsideSend;
};
struct weftCallBuffers weftCallBuffersOf(const struct weftCollArgs *args, int rank, int nranks);
weftResult_t weftCommRegisterLive(const struct weftComm *comm);
void weftCommUnregisterLive(const struct weftComm *comm);
/* Whether comm is a live communicator of this process (use-after-destroy detection). */
int weftCommIsLive(const struct weftComm *comm);

#endif
