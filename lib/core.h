/* The communicator and what every layer of the library shares about it. */
#ifndef WEFT_CORE_H_
#define WEFT_CORE_H_

#include <stdint.h>
#include "weft.h"
#include "transport.h"
#include "algo.h"

#define WEFT_MAX_TRANSPORTS 8
#define WEFT_MAX_ALGOS 8
#define WEFT_COMM_MAGIC 0x7765667443306d6dULL /* "weftC0mm" */

struct weftBootstrap;

/* A ring of connections: send to the next rank, receive from the previous one. */
struct weftRing {
  int prev, next; /* ranks */
  int index;      /* my position in order[] */
  int n;          /* members */
  int *order;     /* ranks in ring order */
  struct weftConn send, recv;
  double latencyUs, bandwidthGBs; /* of its slowest link, the same on every member */
  size_t pieceBytes; /* the smallest slot of any member: both ends of a link cut alike */
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
enum { WEFT_TAG_RING = 1, WEFT_TAG_LOCAL_RING, WEFT_TAG_INTER_RING, WEFT_TAG_TREE0, WEFT_TAG_TREE1 };
struct weftLinkReq {
  int peer, dir, tag;
  struct weftConn *conn;
};

struct weftComm {
  uint64_t magic;
  int rank, nranks;
  int localRank, nLocalRanks; /* among ranks with my hostHash */
  int *localRanks;            /* ranks of my host, ascending */
  int nHosts;
  struct weftPeerInfo *peers; /* indexed by rank */
  struct weftBootstrap *boot;

  int64_t timeoutMs;
  int spinIters;  /* busy polls before a wait yields now (adapts, see weftWaitDone) */
  int spinMax;    /* its ceiling: WEFT_SPIN_ITERS, 0 when ranks outnumber cores */
  int yieldIters; /* yields before a wait sleeps */
  uint64_t opSeq; /* collectives started on this communicator */

  void *transportState[WEFT_MAX_TRANSPORTS];
  struct weftRing ring;

  void *algoState[WEFT_MAX_ALGOS];
  int forcedAlgo; /* index in weftAlgos, -1 = the tuner decides */

  char lastError[1024];
};

/* The number of entries in the NULL-terminated registries. */
int weftTransportCount(void);
int weftAlgoCount(void);

/* Topology (lib/topo.c). */
weftResult_t weftTopoFillPeerInfo(struct weftPeerInfo *me, int rank);
int weftTopoCpuCount(void);

/* Transports of a communicator, and ring setup and teardown (lib/connect.c). */
weftResult_t weftTransportsInit(struct weftComm *comm);
void weftTransportsFinalize(struct weftComm *comm);
/* Collective: every rank calls it at the same point with its own links (possibly none). */
weftResult_t weftConnectLinks(struct weftComm *comm, struct weftLinkReq *reqs, int nreqs);
void weftConnClose(struct weftConn *c);
/* Collective: connects a ring over order[0..n) (which must contain this rank). */
weftResult_t weftRingSetup(struct weftComm *comm, struct weftRing *ring, const int *order, int n, int tag);
void weftRingClose(struct weftRing *ring);
/* The communicator's ring over all ranks, grouped by host. */
weftResult_t weftRingConnect(struct weftComm *comm);

/* Tuner (lib/tune.c): the algorithm for one AllReduce of `bytes`. */
int weftTuneChoose(struct weftComm *comm, size_t bytes);
weftResult_t weftTuneInit(struct weftComm *comm);

/* Argument checks at the API boundary (lib/argcheck.c). Each fills the thread's last error. */
weftResult_t weftCheckComm(const struct weftComm *comm, const char *api);
weftResult_t weftCheckCollArgs(const void *sendbuff, const void *recvbuff, size_t count,
                               weftDataType_t type, weftRedOp_t op, size_t *bytes);
weftResult_t weftCommRegisterLive(const struct weftComm *comm);
void weftCommUnregisterLive(const struct weftComm *comm);
/* Whether comm is a live communicator of this process (use-after-destroy detection). */
int weftCommIsLive(const struct weftComm *comm);

/* Copies this thread's last error into comm (if live) for weftGetLastError(comm); returns rc. */
weftResult_t weftReportTo(struct weftComm *comm, weftResult_t rc);

/* Deadline of a wait that starts now, in CLOCK_MONOTONIC ms. */
int64_t weftDeadline(const struct weftComm *comm);

#endif
