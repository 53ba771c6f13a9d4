/* weft-sim: predicts weft's collectives at scales nobody can run here, from weft's own
 * schedules (docs/scale.md).
 * - fabric.c: the fabric description file (hosts of accelerators, scale-up link, NICs, the
 *   network) and fabric_path.c the links a message crosses between two ranks;
 * - sched.c: the schedule of one rank, recorded by running the algorithm's own run() against
 *   a prims tap that records each step instead of moving data (lib/prims.h);
 * - engine.c: an event-driven simulation of those steps over the fabric, exact per rank or
 *   reduced by symmetry (every host simulated as host 0's ranks), and cores.c the cores its
 *   ranks and copies take where the fabric has a cpu line;
 * - table.c: the tables of tools/weft-sim.c. */
#ifndef WEFT_SIM_H_
#define WEFT_SIM_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "algo.h"

struct weftPrimsStep; /* lib/prims.h */

/* ---- fabric (fabric.c, fabric_path.c) ---- */

enum simNet { SIM_NET_FLAT, SIM_NET_LEAFSPINE, SIM_NET_RAIL };
#define SIM_MAX_DEPTH 128

struct simFabric {
  char name[64];
  int hosts, gpus;           /* hosts available, accelerators (= ranks) per host */
  double suGBs, suLatUs;     /* scale-up: each accelerator's port, and one hop */
  int nics;                  /* NICs (rails) per host; accelerator g uses NIC g * nics / gpus */
  double nicGBs, nicLatUs;   /* each NIC's bandwidth; NIC-to-NIC latency through one switch */
  double nicBurstBytes;      /* a token bucket's depth in front of each NIC link (0: none) */
  enum simNet net;
  int hostsPerLeaf;          /* leafspine, rail: hosts below one leaf (rail: per rail leaf) */
  double oversub;            /* a leaf's downlink capacity over its uplink capacity */
  double hopUs;              /* each further switch a message crosses */
  double overheadUs;         /* a rank's time per piece step, beside the transfer */
  double reduceGBs;          /* a rank's reduction speed */
  size_t localSlot, netSlot; /* slot bytes of weft's links within a host and across */
  int localDepth, netDepth;  /* pieces a link holds before its sender waits for a freed slot */
  /* The `cpu` line (0 cores: no CPU model, ranks compute and copy for free beside their
   * links): cores per host, or for every host together when they share one machine (an
   * emulated cluster), and each side's cost of a byte through the network transport; wake is
   * the time a rank that waited for a piece takes to run once it is in (threads outnumbering
   * cores wait for the scheduler). */
  int cpuCores;
  int cpuPoolMachine;
  double cpuCopyGBs;
  double cpuWakeUs;
};

/* Reads a fabric file; 0, or -1 with "file:line: what is wrong" in err. */
int simFabricLoad(const char *path, struct simFabric *f, char *err, size_t errLen);
/* The same from text (tests); name is used in messages. */
int simFabricParse(const char *text, const char *name, struct simFabric *f, char *err,
                   size_t errLen);

/* The links of a fabric for n ranks (the first n / gpus hosts, or one host for n < gpus).
 * With fold set, every host is host 0 (symmetric mode): links are host 0's, and a leaf's
 * uplinks, which in reality carry every host of the leaf alike, keep 1 / hostsPerLeaf of
 * their capacity. */
#define SIM_PATH_MAX 6
struct simPath {
  int nlinks;
  int link[SIM_PATH_MAX];
  double latUs;  /* sum over the path */
  double minGBs; /* the slowest link's */
};
struct simLinks {
  const struct simFabric *f;
  int nranks, nhosts, fold;
  int nleaves, nlinks;
  double *GBs;   /* per link */
  double *burst; /* per link: its token bucket's depth in bytes (0: none) */
};
int simLinksInit(struct simLinks *L, const struct simFabric *f, int nranks, int fold,
                 char *err, size_t errLen);
void simLinksFree(struct simLinks *L);
void simPathOf(const struct simLinks *L, int src, int dst, struct simPath *p);
int simHostOf(const struct simFabric *f, int rank);

/* ---- schedules (sched.c) ---- */

/* One prims step of a rank, as the tap saw it (peers: nrecv receive peers, then nsend send
 * peers). */
#define SIM_STEP_PEERS 4
struct simStep {
  uint32_t bytes, pieceBytes, pieces;
  uint8_t kind, nrecv, nsend;
  uint8_t chans; /* 2 bits per peer: which of the rank pair's links (enum simChan) */
  int32_t peer[SIM_STEP_PEERS];
};
/* The links weft's states hold between two ranks, each its own FIFO: the communicator's ring
 * (hier's call token), each of the two trees, hier's rings (local and inter-host ones never
 * join the same two ranks). A piece is received from the link it was sent on. */
enum simChan { SIM_CHAN_RING, SIM_CHAN_TREE0, SIM_CHAN_TREE1, SIM_CHAN_HIER };
static inline int simStepChan(const struct simStep *s, int i) { return (s->chans >> (2 * i)) & 3; }
struct simRankSched {
  int rank;
  struct simStep *steps; /* the steps that move something (empty ones are left out) */
  size_t nsteps, cap;
  size_t tapped;         /* every step run() took, empty ones too: the work of recording */
};

/* The algorithms weft-sim can simulate: those written on lib/prims (direct works on a shared
 * segment and is not). */
enum simAlgo { SIM_RING, SIM_TREE, SIM_HIER, SIM_ALGOS };
extern const char *const simAlgoNames[SIM_ALGOS];

/* One collective to simulate: kind, total bytes as nccl-tests count them (AllReduce: the
 * buffer; AllGather: the gathered result; ReduceScatter: the input), float32 sum. */
struct simCall {
  weftColl_t coll;
  size_t bytes;
};

/* A communicator of n ranks laid out on f, with the states weft's algorithms would build
 * (ring, double binary tree, hierarchical), so that their own cost() and run() work on it. */
struct simComm;
struct simComm *simCommNew(const struct simFabric *f, int nranks, char *err, size_t errLen);
void simCommFree(struct simComm *c);
int simCommRanks(const struct simComm *c);
const struct simFabric *simCommFabric(const struct simComm *c);
/* Whether algo runs call on this communicator (why not, if not). */
int simAlgoRuns(const struct simComm *c, enum simAlgo algo, weftColl_t coll, char *why,
                size_t len);
/* algo's own cost() of the call, in microseconds. */
double simAlgoCost(struct simComm *c, enum simAlgo algo, const struct simCall *call);
/* The tuner's choice (lib/tune.c's weftTuneChoose) among the simulated algorithms, or -1. */
int simTunerChoice(struct simComm *c, const struct simCall *call);
/* Records rank's schedule for the call by running the algorithm's run() against a
 * record-only prims tap. 0, or -1 with err. */
int simRecord(struct simComm *c, enum simAlgo algo, const struct simCall *call, int rank,
              struct simRankSched *out, char *err, size_t errLen);
void simRankSchedFree(struct simRankSched *s);
/* Appends a tapped step (the tap's callback; also used by tests for real runs). */
/* chans: 2 bits per peer (receive peers, then send peers), as struct simStep holds them. */
int simRankSchedAdd(struct simRankSched *s, const struct weftPrimsStep *step, unsigned chans);

/* ---- cores (cores.c): the fabric's cpu line ---- */

struct simCore;
struct simCores {
  int pools, cores;
  struct simCore *core; /* pools x cores */
};
int simCoresInit(struct simCores *c, int pools, int cores);
void simCoresFree(struct simCores *c);
/* Books `us` of work ready at `ready` on the core of `pool` where it can start first (gaps
 * before later bookings included); `now`, the engine's time, no work can start before; its
 * start (start may be NULL) and end. 0, or -1 out of memory. */
int simCoresTake(struct simCores *c, int pool, double now, double ready, double us, double *start,
                 double *end);

/* ---- engine (engine.c) ---- */

struct simOptions {
  int symmetric;     /* simulate host 0's ranks only, every host alike */
  int slowRank;      /* -1, or a rank whose links run slowFactor times slower */
  double slowFactor;
  int lateRank;      /* -1, or a rank that starts lateUs after the others */
  double lateUs;
  FILE *trace;       /* JSON lines, one per step of every simulated rank, or NULL */
  int calls;         /* the call run this many times back to back, as a benchmark's loop runs
                      * it (0 or 1: once); the time is the last call's, from when every rank
                      * had ended the one before (links' buckets and run-ahead then as in a
                      * loop's steady state) */
};
struct simResult {
  double timeUs;     /* when the last rank finished */
  size_t ranksSimulated, steps, pieces;
};
/* Simulates call with algo on c. 0, or -1 with err. */
int simRun(struct simComm *c, enum simAlgo algo, const struct simCall *call,
           const struct simOptions *o, struct simResult *r, char *err, size_t errLen);
/* Bus bandwidth factor of a collective on n ranks (nccl-tests' definition). */
double simBusFactor(weftColl_t coll, int n);

#endif
