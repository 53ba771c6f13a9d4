/* The benchmark driver shared by every *_perf benchmark: nccl-tests' options, header, table and
 * JSON, the team of ranks (threads x MPI processes), verifiable data, and the timing loop
 * (nccl-tests' TimeTest / BenchTime). A benchmark supplies only what differs: its collective
 * call, its shape (perf_shape.h: counts, busbw factor, where its result comes from), and how
 * a rank gets ready for it. So the numbers of any two benchmarks are comparable line by line.
 *
 *   static const perfBench bench = {.tool = "allreduce_perf", .shape = &perfShapeAllReduce,
 *                                   .run = myAllReduce, ...};
 *   int main(int argc, char **argv) { return perfMain(argc, argv, &bench); } */
#ifndef WEFT_BENCH_PERF_RUN_H_
#define WEFT_BENCH_PERF_RUN_H_

#include "perf_data.h"
#include "perf_opts.h"
#include "perf_shape.h"
#include "perf_team.h"

/* The collective under test, on one rank; returns when recv holds the result (device buffers:
 * once it is enqueued on stream; NULL for host buffers), and reports its own errors through
 * perfFatal. root is -1 for collectives without one; op is 0 (sum) for
 * those without one. */
typedef void (*perfCollFn)(void *ctx, const void *send, void *recv, size_t count, int type, int op,
                           int root, void *stream);

typedef struct {
  const char *tool;       /* "allreduce_perf": usage and messages */
  const perfShape *shape; /* counts, busbw factor, result */
  perfCollFn run;
  /* 1: host buffers only (the MPI baselines): -B device is refused, auto means host. */
  int hostOnly;
  /* 1: MPI_Init even without a launcher (a benchmark of MPI itself); 0: only under mpirun. */
  int alwaysMpi;
  /* The first header line and the JSON "library": "weft version 0.1.0". Called after MPI_Init. */
  const char *(*library)(void);
  const char *note; /* NULL, or a second header line */
  /* NULL, or a message refusing options this benchmark cannot honour (printed before MPI_Init). */
  const char *(*checkOpts)(const perfOpts *o);
  /* NULL, or called once per process before its ranks start (on its main thread, where MPI may
   * be used); returns what rankInit gets. */
  void *(*setup)(const perfWorld *w);
  /* NULL, or called by each rank (its own thread) before its first collective: returns the ctx
   * of every call; rankFini (NULL, or) undoes it. Ranks initialize concurrently. */
  void *(*rankInit)(void *shared, int rank, int nRanks);
  void (*rankFini)(void *ctx);
  /* NULL, or (each rank, after rankInit) one line saying what this rank's links to the others
   * run over, printed by world rank 0 under "# Links" before the table. */
  void (*links)(void *ctx, char *line, size_t len);
  /* What -d all / -o all iterate over (NULL: everything). A pair named by both -d and -o always
   * runs, so that asking for an unsupported one fails with the collective's own message. */
  int (*supported)(int type, int op);
  /* -A 1: the algorithm the collective runs for count elements of type (NULL: "-"). */
  const char *(*algoName)(void *ctx, size_t count, int type);
  /* NULL, or (both) what brackets the -m collectives of one iteration, as nccl-tests puts
   * them in one group (not with -z 1, whose barrier after each call would wait inside it). */
  void (*groupStart)(void *ctx);
  void (*groupEnd)(void *ctx);
} perfBench;

/* Parses the options, runs the benchmark, returns main's exit status: 0, 1 on wrong results or
 * a usage error; exits with 4 when a collective outlasts -T. */
int perfMain(int argc, char **argv, const perfBench *b);

#endif
