/* What every weft benchmark shares: weft's names of the datatypes and ops, the library line,
 * the communicator of each rank (world rank 0 makes the id, MPI hands it to the others), and
 * errors of a call as one message. A benchmark is then its call and its shape:
 *   static const perfBench bench = {.tool = "broadcast_perf", .shape = &perfShapeBroadcast,
 *                                   .run = myBroadcast, PERF_WEFT_RANKS, .algoName = myAlgo}; */
#ifndef WEFT_BENCH_PERF_WEFT_H_
#define WEFT_BENCH_PERF_WEFT_H_

#include "perf_run.h"
#include "weft.h"

/* perf_data's type and op indices, in weft's terms. */
extern const weftDataType_t perfWeftTypes[PERF_NTYPES];
extern const weftRedOp_t perfWeftOps[PERF_NOPS];

const char *perfWeftLibrary(void);
void *perfWeftSetup(const perfWorld *w);
void *perfWeftRankInit(void *shared, int rank, int nRanks);
void perfWeftRankFini(void *ctx);
/* The "# Links" line of a rank: each transport its peers are reached over, how many, and what
 * this rank uses for it (weftCommGetPeerTransport). */
void perfWeftLinks(void *ctx, char *line, size_t len);
/* -m N: weftGroupStart / weftGroupEnd around an iteration's N collectives. */
void perfWeftGroupStart(void *ctx);
void perfWeftGroupEnd(void *ctx);

/* perfBench fields of a weft benchmark that runs one communicator per rank. */
#define PERF_WEFT_RANKS                                                                       \
  .library = perfWeftLibrary, .setup = perfWeftSetup, .rankInit = perfWeftRankInit,          \
  .rankFini = perfWeftRankFini, .links = perfWeftLinks, .groupStart = perfWeftGroupStart, .groupEnd = perfWeftGroupEnd

/* weft reduces avg for floating-point types only (weftInvalidArgument otherwise): -o all skips
 * it for the others. */
int perfWeftSupportedReduce(int type, int op);

/* perfFatal unless res is weftSuccess: "weftBroadcast(count 5, float, root 1): <error string>:
 * <last error>"; op < 0 or root < 0: not part of the call. */
void perfWeftCheck(weftResult_t res, weftComm_t comm, const char *call, size_t count, int type, int op,
                   int root);

/* -A 1: the algorithm coll runs for count elements of type (weftCommGetCollAlgorithm). */
const char *perfWeftAlgo(weftComm_t comm, weftColl_t coll, size_t count, int type);

#endif
