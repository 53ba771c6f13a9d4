/* Collective correctness under a real launcher: mpirun starts the ranks, rank 0 broadcasts
 * the unique id with MPI, every registered algorithm is forced in turn (then the tuner
 * decides), every datatype and op, in-place and out-of-place, odd counts, each result checked
 * exactly. An algorithm that cannot run on the layout (hosts told apart by hostname, as the
 * emulated hosts of run-multihost.sh have their own) must be refused on every rank: only those
 * combinations are not run (tests/common/harness.c: algoRunsOn). Prints "N passed, N failed".
 * Options: --quick drops the largest count (every datatype, op, in-place/out-of-place and odd
 * count stays); --algos LIST runs only these of the algorithms and "tuner", or with a leading ^
 * all but these (e.g. "^direct" across hosts, where direct, a shared-memory algorithm, is only
 * refused). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo.h"
#include "core.h"
#include "harness.h"
#include "reduce.h"

static const size_t counts[] = {0, 1, 2, 13, 1021, 65537, 300007};
static size_t nCounts = sizeof counts / sizeof counts[0];

static long runAll(weftComm_t comm, int rank, int nranks, long *cases) {
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

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  /* the registry, then NULL: the tuner decides */
  const char *algos[WEFT_MAX_ALGOS + 1];
  int nAlgos = 0;
  for (; weftAlgos[nAlgos] != NULL; nAlgos++) algos[nAlgos] = weftAlgos[nAlgos]->name;
  algos[nAlgos++] = NULL;
  int runAlgo[WEFT_MAX_ALGOS + 1];
  for (int a = 0; a < nAlgos; a++) runAlgo[a] = 1;
  for (int i = 1; i < argc; i++) {
    const char *bad = NULL;
    if (strcmp(argv[i], "--quick") == 0) {
      nCounts = sizeof counts / sizeof counts[0] - 1; /* all but 300007 */
    } else if (strcmp(argv[i], "--algos") == 0 && i + 1 < argc) {
      char list[256];
      snprintf(list, sizeof list, "%s", argv[++i]);
      int exclude = list[0] == '^';
      for (int a = 0; a < nAlgos; a++) runAlgo[a] = exclude;
      for (char *save = NULL, *tok = strtok_r(list + exclude, ",", &save); tok && !bad;
           tok = strtok_r(NULL, ",", &save)) {
        int a = 0;
        while (a < nAlgos && strcmp(tok, algos[a] ? algos[a] : "tuner") != 0) a++;
        if (a == nAlgos) bad = tok;
        else runAlgo[a] = !exclude;
      }
    } else {
      bad = argv[i];
    }
    if (bad) {
      if (rank == 0) {
        fprintf(stderr, "mpi_allreduce_check: unknown '%s'\nusage: mpi_allreduce_check [--quick] [--algos [^]LIST]"
                        " (LIST: comma list of", bad);
        for (int a = 0; a < nAlgos; a++) fprintf(stderr, " %s", algos[a] ? algos[a] : "tuner");
        fprintf(stderr, ")\n");
      }
      MPI_Finalize();
      return 2;
    }
  }
  long passed = 0, failed = 0;
  struct layout layout = hostLayout(nranks);
  for (int a = 0; a < nAlgos; a++) {
    if (!runAlgo[a]) continue;
    if (algos[a]) setenv("WEFT_ALGO", algos[a], 1);
    else unsetenv("WEFT_ALGO");
    weftUniqueId id;
    if (rank == 0 && weftGetUniqueId(&id) != weftSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    weftComm_t comm;
    long cases = 1, fails = 0;
    char why[160] = "";
    int mustRun = algos[a] == NULL || algoRunsOn(algos[a], layout.hosts, layout.perHost, why, sizeof why);
    weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
    if (!mustRun) {
      fails = !refusedAsExpected(rc, comm, rank, algos[a]);
      if (rank == 0 && !fails) printf("WEFT_ALGO=%s: refused, as expected: %s\n", algos[a], why);
    } else if (rc != weftSuccess) {
      fprintf(stderr, "rank %d: init failed: %s\n", rank, weftGetLastError(NULL));
      fails = 1;
    } else {
      cases = 0;
      fails = runAll(comm, rank, nranks, &cases);
      weftCommDestroy(comm);
    }
    long all[2] = {cases - fails, fails}, sum[2];
    MPI_Allreduce(all, sum, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
      printf("WEFT_ALGO=%s: %ld rank-cases passed, %ld failed on %d ranks\n", algos[a] ? algos[a] : "(tuner)",
             sum[0], sum[1], nranks);
    passed += sum[0];
    failed += sum[1];
  }
  if (rank == 0) printf("mpi_allreduce_check: %ld passed, %ld failed\n", passed, failed);
  MPI_Finalize();
  return failed != 0;
}
