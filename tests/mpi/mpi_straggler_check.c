/* The live straggler report under a real launcher, for a rank slowed by its network link
 * (tests/mpi/run-multihost.sh shapes one emulated host's link with tc): every rank runs
 * --ops AllReduces of --bytes bytes with WEFT_STRAGGLER_REPORT=--window and, after each
 * window, asks weftCommGetStragglers who was consistently last. Prints, on rank 0, every
 * rank's verdicts ("after op N: rank R (last in K, median U us late)") and one closing line:
 *   mpi_straggler_check: PASS rank R named by op N on every rank
 * or FAIL and why. --expect R: the rank that must be named within 100 operations on every
 * rank; --alone: and no other rank named in any window; --algo NAME: WEFT_ALGO for the
 * AllReduces (the tuner's choice by default). Exit 0 on PASS, 1 on FAIL, 2 usage. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#define MAX_NAMED 8

struct options {
  size_t bytes;
  int ops, window, expect, alone;
};

/* What one rank saw: the first op after which `expect` was named, and any other rank named. */
struct verdicts {
  int namedAt, otherAt, otherRank;
  char log[1024];
};

static int parse(int argc, char **argv, struct options *o) {
  *o = (struct options){65536, 200, 50, -1, 0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--alone") == 0) o->alone = 1;
    else if (i + 1 < argc && strcmp(argv[i], "--bytes") == 0) o->bytes = strtoull(argv[++i], NULL, 10);
    else if (i + 1 < argc && strcmp(argv[i], "--ops") == 0) o->ops = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--window") == 0) o->window = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--expect") == 0) o->expect = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--algo") == 0) setenv("WEFT_ALGO", argv[++i], 1);
    else return 0;
  }
  return o->bytes >= 8 && o->ops > 0 && o->window > 0 && o->expect >= 0;
}

static void record(weftComm_t comm, int op, const struct options *o, struct verdicts *v) {
  weftStraggler_t s[MAX_NAMED];
  int n = 0;
  size_t len = strlen(v->log);
  if (weftCommGetStragglers(comm, s, MAX_NAMED, &n) != weftSuccess) {
    snprintf(v->log + len, sizeof v->log - len, " after op %d: %s;", op, weftGetLastError(comm));
    return;
  }
  if (n == 0) snprintf(v->log + len, sizeof v->log - len, " after op %d: none;", op);
  for (int i = 0; i < n && i < MAX_NAMED; i++) {
    len = strlen(v->log);
    snprintf(v->log + len, sizeof v->log - len, " after op %d: rank %d (last in %d, median %.0f us late);",
             op, s[i].rank, s[i].lastOps, s[i].medianLateUs);
    if (s[i].rank == o->expect && v->namedAt == 0) v->namedAt = op;
    if (s[i].rank != o->expect && v->otherAt == 0) v->otherAt = op, v->otherRank = s[i].rank;
  }
}

static int runOps(weftComm_t comm, const struct options *o, struct verdicts *v) {
  size_t count = o->bytes / sizeof(float);
  float *buf = calloc(count, sizeof *buf);
  weftResult_t rc = buf ? weftSuccess : weftSystemError;
  for (int op = 1; rc == weftSuccess && op <= o->ops; op++) {
    rc = weftAllReduce(buf, buf, count, weftFloat32, weftSum, comm, NULL);
    if (rc == weftSuccess && op % o->window == 0) record(comm, op, o, v);
  }
  if (rc != weftSuccess) snprintf(v->log, sizeof v->log, "AllReduce failed: %s", weftGetLastError(comm));
  free(buf);
  return rc == weftSuccess;
}

/* Rank 0 prints every rank's verdicts and the closing line; returns whether all ranks named it. */
static int report(const struct verdicts *v, int named, const struct options *o, int rank, int nranks) {
  struct verdicts *all = rank == 0 ? calloc((size_t)nranks, sizeof *all) : NULL;
  MPI_Gather(v, sizeof *v, MPI_BYTE, all, sizeof *v, MPI_BYTE, 0, MPI_COMM_WORLD);
  int everyone = 0;
  MPI_Allreduce(&named, &everyone, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (rank != 0) return everyone;
  int latest = 0;
  for (int r = 0; r < nranks; r++) {
    printf("rank %d:%s\n", r, all[r].log);
    if (all[r].namedAt > latest) latest = all[r].namedAt;
  }
  if (everyone) printf("mpi_straggler_check: PASS rank %d named by op %d on every rank\n", o->expect, latest);
  else
    printf("mpi_straggler_check: FAIL rank %d not named within 100 operations on every rank%s\n",
           o->expect, o->alone ? " (or another rank named too)" : "");
  free(all);
  return everyone;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  struct options o;
  if (!parse(argc, argv, &o) || o.expect >= nranks) {
    if (rank == 0)
      fprintf(stderr, "usage: mpi_straggler_check --expect RANK [--alone] [--algo NAME] [--bytes N] [--ops N] [--window N]\n");
    MPI_Finalize();
    return 2;
  }
  weftUniqueId id;
  if (rank == 0) weftGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  weftComm_t comm = NULL;
  struct verdicts v = {0};
  int ok = weftCommInitRank(&comm, nranks, id, rank) == weftSuccess;
  if (!ok) snprintf(v.log, sizeof v.log, "init failed: %s", weftGetLastError(NULL));
  else ok = runOps(comm, &o, &v);
  int named = ok && v.namedAt > 0 && v.namedAt <= 100 && !(o.alone && v.otherAt > 0);
  int everyone = report(&v, named, &o, rank, nranks);
  if (comm != NULL) weftCommDestroy(comm);
  MPI_Finalize();
  return everyone ? 0 : 1;
}
