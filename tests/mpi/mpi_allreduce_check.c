/* Collective correctness under a real launcher: mpirun starts the ranks, rank 0 broadcasts
 * the unique id with MPI, every algorithm is forced in turn (then the tuner decides), every
 * datatype and op, in-place and out-of-place, odd counts. Prints "N passed, N failed".
 * Options: --quick drops the largest count (every datatype, op, in-place/out-of-place and odd
 * count stays); --algos LIST runs only these of the forced algorithms and "tuner", or with a
 * leading ^ all but these (e.g. "^direct" across hosts, where direct, a shared-memory
 * algorithm, cannot run). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  static const char *const algos[] = {"ring", "direct", "tree", "hier", NULL}; /* NULL: the tuner decides */
  enum { nAlgos = sizeof algos / sizeof algos[0] };
  int runAlgo[nAlgos];
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
  for (int a = 0; a < nAlgos; a++) {
    if (!runAlgo[a]) continue;
    if (algos[a]) setenv("WEFT_ALGO", algos[a], 1);
    else unsetenv("WEFT_ALGO");
    weftUniqueId id;
    if (rank == 0 && weftGetUniqueId(&id) != weftSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    weftComm_t comm;
    long cases = 0, fails = 0;
    if (weftCommInitRank(&comm, nranks, id, rank) != weftSuccess) {
      /* an algorithm that cannot run on this layout (direct across hosts, hier with one rank
       * per host) is refused the same way on every rank: not a failure of this test */
      if (strstr(weftGetLastError(NULL), "cannot run on this communicator") != NULL) {
        if (rank == 0) printf("WEFT_ALGO=%s: skipped (cannot run on this layout)\n", algos[a]);
        continue;
      }
      fprintf(stderr, "rank %d: init failed: %s\n", rank, weftGetLastError(NULL));
      fails = 1;
      cases = 1;
    } else {
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
