/* Collective correctness under a real launcher: mpirun starts the ranks, rank 0 broadcasts
 * the unique id with MPI, and for every collective each registered algorithm that runs it is
 * forced in turn (WEFT_ALGO=<collective>:<algorithm>), then the tuner decides; every result
 * is checked exactly. AllReduce: every datatype and op, in place and out of place, odd counts
 * (below); Broadcast, Reduce, AllGather, ReduceScatter: tests/common/collcases.c's sweep
 * (counts 0, 1, 7, primes, several types, every op where the call reduces, first, middle and
 * last root, in place and out of place); AlltoAll, Gather and Scatter (every root) and
 * grouped Send/Recv patterns (rings, permutations, all to all): collcases.c's point-to-point
 * cases. An algorithm that cannot run on the layout (hosts told apart by hostname, as the
 * emulated hosts of run-multihost.sh have their own) must be refused on every rank: only
 * those combinations are not run (tests/common/harness.c: algoRunsOn). Prints one line per
 * collective and algorithm and a last line "mpi_coll_check: N passed, N failed".
 * Options: --quick drops the largest AllReduce count; --algos LIST runs only these of the
 * algorithms and "tuner", or with a leading ^ all but these (e.g. "^direct" across hosts,
 * where direct, a shared-memory algorithm, is only refused); --colls LIST runs only these of
 * allreduce broadcast reduce allgather reducescatter pairwise (AlltoAll, Gather, Scatter)
 * sendrecv. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo.h"
#include "collcases.h"
#include "core.h"
#include "harness.h"
#include "reduce.h"

static const size_t counts[] = {0, 1, 2, 13, 1021, 65537, 300007};
static size_t nCounts = sizeof counts / sizeof counts[0];

static long allReduceAll(weftComm_t comm, int rank, int nranks, long *cases) {
  size_t maxCount = counts[nCounts - 1];
  char *send = malloc(maxCount * 8), *recv = malloc(maxCount * 8);
  long failures = 0;
  for (size_t c = 0; c < nCounts; c++)
    for (int t = 0; t < weftNumTypes; t++)
      for (int o = 0; o < weftNumOps; o++) {
        if (o == weftAvg && !weftTypeIsFloat((weftDataType_t)t)) continue;
        for (int inPlace = 0; inPlace < 2; inPlace++) {
          fillInput(send, counts[c], (weftDataType_t)t, (weftRedOp_t)o, rank);
          void *out = inPlace ? send : recv;
          weftResult_t rc = weftAllReduce(send, out, counts[c], (weftDataType_t)t, (weftRedOp_t)o, comm, NULL);
          size_t wrong = rc != weftSuccess ? 1 : countWrong(out, counts[c], (weftDataType_t)t, (weftRedOp_t)o, nranks);
          if (wrong)
            fprintf(stderr, "rank %d: %zu wrong, count %zu %s %s %s: %s\n", rank, wrong, counts[c],
                    weftTypeName((weftDataType_t)t), weftOpName((weftRedOp_t)o),
                    inPlace ? "in-place" : "out-of-place", weftGetLastError(comm));
          failures += wrong != 0;
          (*cases)++;
        }
      }
  free(send);
  free(recv);
  return failures;
}

/* Hosts by hostname (and WEFT_HOSTID where set): how many, and ranks on each (0 if uneven). */
struct layout {
  int hosts, perHost;
};

static struct layout hostLayout(int nranks) {
  char mine[128] = "", *all = calloc((size_t)nranks, sizeof mine);
  gethostname(mine, 63);
  const char *hostId = getenv("WEFT_HOSTID");
  if (hostId != NULL) snprintf(mine + 64, 64, "%s", hostId);
  MPI_Allgather(mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  struct layout l = {0, 0};
  int first = 1;
  for (int r = 0; r < nranks; r++) {
    int seen = 0, same = 0;
    for (int q = 0; q < nranks; q++) {
      int eq = memcmp(all + q * sizeof mine, all + r * sizeof mine, sizeof mine) == 0;
      seen |= eq && q < r;
      same += eq;
    }
    if (seen) continue;
    l.hosts++;
    if (first) l.perHost = same;
    else if (same != l.perHost) l.perHost = 0;
    first = 0;
  }
  free(all);
  return l;
}

/* An algorithm forced where it cannot run: init must fail on this rank with the refusal. */
static int refusedAsExpected(weftResult_t rc, weftComm_t comm, int rank, const char *algo) {
  if (rc == weftInvalidArgument && strstr(weftGetLastError(NULL), "cannot run on this communicator") != NULL)
    return 1;
  if (rc == weftSuccess) {
    fprintf(stderr, "rank %d: WEFT_ALGO=%s was accepted on a layout where it cannot run\n", rank, algo);
    weftCommDestroy(comm);
  } else {
    fprintf(stderr, "rank %d: WEFT_ALGO=%s: init failed, but not with the refusal expected: %s\n", rank,
            algo, weftGetLastError(NULL));
  }
  return 0;
}

/* One line of the sweep: a collective (or grouped Send/Recv, which has no algorithm to
 * choose) and the rank body that checks it. */
struct item {
  const char *name;
  int coll; /* a weftColl_t, or -1 for Send/Recv (tuner only) */
  const char *forced; /* WEFT_ALGO for an algorithm: the collectives it is forced for */
  rankBody body;
  void *arg;
};

static const size_t sweepCounts[] = {0, 1, 7, 1021, 40009};
static const weftDataType_t sweepTypes[] = {weftInt8, weftFloat16, weftFloat32, weftBfloat16,
                                            weftFloat8e5m2, weftUint64};
#define SWEEP(c) {c, sweepCounts, 5, sweepTypes, 6, 0}
static struct collSweep sweeps[] = {SWEEP(weftCollBroadcast), SWEEP(weftCollReduce),
                                    SWEEP(weftCollAllGather), SWEEP(weftCollReduceScatter)};

static long allReduceBody(weftComm_t comm, int rank, int n, void *arg) {
  return allReduceAll(comm, rank, n, arg);
}

static long casesOf;
static const struct item items[] = {
    {"allreduce", weftCollAllReduce, "allreduce:%s", allReduceBody, &casesOf},
    {"broadcast", weftCollBroadcast, "broadcast:%s", collSweepBody, &sweeps[0]},
    {"reduce", weftCollReduce, "reduce:%s", collSweepBody, &sweeps[1]},
    {"allgather", weftCollAllGather, "allgather:%s", collSweepBody, &sweeps[2]},
    {"reducescatter", weftCollReduceScatter, "reducescatter:%s", collSweepBody, &sweeps[3]},
    {"pairwise", weftCollAlltoAll, "alltoall:%1$s;gather:%1$s;scatter:%1$s", p2pRootedBody, NULL},
    {"sendrecv", -1, NULL, p2pPatternsBody, NULL},
};
#define NITEMS (int)(sizeof items / sizeof items[0])

struct options {
  int runAlgo[WEFT_MAX_ALGOS + 1]; /* the registry's, then the tuner's */
  int runItem[NITEMS];
};

/* Marks the names of a comma list (^ first: all but those) in on[]; the unknown one, or NULL. */
static const char *pickList(const char *arg, const char *const *names, int n, int *on) {
  static char list[256], bad[64];
  snprintf(list, sizeof list, "%s", arg);
  int exclude = list[0] == '^';
  for (int a = 0; a < n; a++) on[a] = exclude;
  for (char *save = NULL, *tok = strtok_r(list + exclude, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    int a = 0;
    while (a < n && strcmp(tok, names[a]) != 0) a++;
    if (a == n) return snprintf(bad, sizeof bad, "%s", tok), bad;
    on[a] = !exclude;
  }
  return NULL;
}

static int parseOptions(int argc, char **argv, int rank, struct options *o) {
  const char *algoNames[WEFT_MAX_ALGOS + 1], *itemNames[NITEMS];
  int nAlgos = 0;
  for (; weftAlgos[nAlgos] != NULL; nAlgos++) algoNames[nAlgos] = weftAlgos[nAlgos]->name;
  algoNames[nAlgos++] = "tuner";
  for (int a = 0; a < nAlgos; a++) o->runAlgo[a] = 1;
  for (int k = 0; k < NITEMS; k++) o->runItem[k] = 1, itemNames[k] = items[k].name;
  for (int i = 1; i < argc; i++) {
    const char *bad = NULL;
    if (strcmp(argv[i], "--quick") == 0) nCounts = sizeof counts / sizeof counts[0] - 1;
    else if (strcmp(argv[i], "--algos") == 0 && i + 1 < argc) bad = pickList(argv[++i], algoNames, nAlgos, o->runAlgo);
    else if (strcmp(argv[i], "--colls") == 0 && i + 1 < argc) bad = pickList(argv[++i], itemNames, NITEMS, o->runItem);
    else bad = argv[i];
    if (bad == NULL) continue;
    if (rank == 0) {
      fprintf(stderr, "mpi_coll_check: unknown '%s'\nusage: mpi_coll_check [--quick] [--algos [^]LIST]"
                      " [--colls [^]LIST]\n  algorithms:", bad);
      for (int a = 0; a < nAlgos; a++) fprintf(stderr, " %s", algoNames[a]);
      fprintf(stderr, "\n  collectives:");
      for (int k = 0; k < NITEMS; k++) fprintf(stderr, " %s", itemNames[k]);
      fprintf(stderr, "\n");
    }
    return 0;
  }
  return 1;
}

/* One communicator with algo forced for item (NULL: the tuner), its cases run or its refusal
 * checked; adds the job's rank-cases to passed and failed. */
static void runOne(const struct item *it, const char *algo, const struct layout *layout, int rank,
                   int nranks, long *passed, long *failed) {
  char spec[160];
  if (algo != NULL) {
    snprintf(spec, sizeof spec, it->forced, algo);
    setenv("WEFT_ALGO", spec, 1);
  } else {
    unsetenv("WEFT_ALGO");
    snprintf(spec, sizeof spec, "(tuner)");
  }
  weftUniqueId id;
  if (rank == 0 && weftGetUniqueId(&id) != weftSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  weftComm_t comm;
  long cases = 1, fails = 0;
  char why[160] = "";
  int mustRun = algo == NULL || algoRunsOn(algo, layout->hosts, layout->perHost, why, sizeof why);
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  if (!mustRun) {
    fails = !refusedAsExpected(rc, comm, rank, spec);
    if (rank == 0 && !fails) printf("%s WEFT_ALGO=%s: refused, as expected: %s\n", it->name, spec, why);
  } else if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, weftGetLastError(NULL));
    fails = 1;
  } else {
    casesOf = 0;
    fails = it->body(comm, rank, nranks, it->arg);
    if (it->coll == weftCollAllReduce) cases = casesOf;
    weftCommDestroy(comm);
  }
  long mine[2] = {cases - fails, fails}, sum[2];
  MPI_Allreduce(mine, sum, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s WEFT_ALGO=%s: %ld %s passed, %ld failed on %d ranks\n", it->name, spec, sum[0],
           it->coll == weftCollAllReduce ? "rank-cases" : "ranks' sweeps", sum[1], nranks);
  *passed += sum[0];
  *failed += sum[1];
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  struct options o;
  if (!parseOptions(argc, argv, rank, &o)) {
    MPI_Finalize();
    return 2;
  }
  long passed = 0, failed = 0;
  struct layout layout = hostLayout(nranks);
  for (int k = 0; k < NITEMS; k++) {
    if (!o.runItem[k]) continue;
    int a = 0;
    for (; weftAlgos[a] != NULL; a++)
      if (items[k].coll >= 0 && o.runAlgo[a] && (weftAlgos[a]->colls & WEFT_COLL_BIT(items[k].coll)))
        runOne(&items[k], weftAlgos[a]->name, &layout, rank, nranks, &passed, &failed);
    if (o.runAlgo[a]) runOne(&items[k], NULL, &layout, rank, nranks, &passed, &failed);
  }
  if (rank == 0) printf("mpi_coll_check: %ld passed, %ld failed\n", passed, failed);
  MPI_Finalize();
  return failed != 0;
}
