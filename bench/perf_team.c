/* The world, the team of ranks, fatal errors and clocks (see perf_team.h). */
#include "perf_team.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int perfUseMpi;

void perfFatal(const char *fmt, ...) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  fprintf(stderr, "%s:%d: error: ", host, (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(NULL);
  if (perfUseMpi) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

double perfNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double perfCpuNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int perfEnvRank(void) {
  const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const char *v = getenv(names[i]);
    if (v) return atoi(v);
  }
  return 0;
}

int perfEnvUnderMpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

void perfWorldInit(perfWorld *w, int useMpi, int *argc, char ***argv) {
  w->rank = 0;
  w->size = 1;
  if (!useMpi) return;
  int provided;
  /* Thread 0 of each process is its main thread and the only one that calls MPI. */
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    perfFatal("MPI_Init_thread failed");
  perfUseMpi = 1;
  if (provided < MPI_THREAD_FUNNELED) perfFatal("MPI does not provide MPI_THREAD_FUNNELED");
  MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w->size);
}

void perfWorldFinalize(void) {
  if (perfUseMpi) MPI_Finalize();
  perfUseMpi = 0;
}

void perfTeamInit(perfTeam *t, int nThreads, const perfWorld *w, int useMpi, int maxVec) {
  memset(t, 0, sizeof(*t));
  t->nThreads = nThreads;
  t->nRanks = nThreads * w->size;
  t->useMpi = useMpi;
  t->worldRank = w->rank;
  t->worldSize = w->size;
  t->maxVec = maxVec;
  t->vals = calloc((size_t)nThreads, sizeof(double));
  size_t vec = maxVec > 0 ? (size_t)maxVec : 1;
  t->vecs = calloc((size_t)nThreads * vec, sizeof(double));
  t->vecOut = calloc(vec, sizeof(double));
  t->rowsOut = calloc((size_t)(w->rank == 0 ? w->size : 1) * vec, sizeof(double));
  if (!t->vals || !t->vecs || !t->vecOut || !t->rowsOut ||
      pthread_barrier_init(&t->bar, NULL, (unsigned)nThreads) != 0)
    perfFatal("cannot set up the thread team");
}

void perfTeamFree(perfTeam *t) {
  pthread_barrier_destroy(&t->bar);
  free(t->vals);
  free(t->vecs);
  free(t->vecOut);
  free(t->rowsOut);
}

void perfTeamBarrier(perfTeam *t, int tid) {
  pthread_barrier_wait(&t->bar);
  if (tid == 0 && t->useMpi) MPI_Barrier(MPI_COMM_WORLD);
  pthread_barrier_wait(&t->bar);
}

static double perfAggregate(int mode, double a, double b) {
  switch (mode) {
  case PERF_AGG_RANK0: return a;
  case PERF_AGG_MIN: return fmin(a, b);
  case PERF_AGG_MAX: return fmax(a, b);
  default: return a + b;
  }
}

/* Two barriers suffice: a thread cannot write vals for the next call before all have read
 * this call's result, since thread 0 publishes it only after the next first barrier. */
double perfTeamReduce(perfTeam *t, int tid, double v, int mode) {
  t->vals[tid] = v;
  pthread_barrier_wait(&t->bar);
  if (tid == 0) {
    double acc = t->vals[0];
    for (int i = 1; i < t->nThreads; i++) acc = perfAggregate(mode, acc, t->vals[i]);
    if (t->useMpi && mode == PERF_AGG_RANK0) {
      MPI_Bcast(&acc, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    } else if (t->useMpi) {
      MPI_Op op = mode == PERF_AGG_MIN ? MPI_MIN : mode == PERF_AGG_MAX ? MPI_MAX : MPI_SUM;
      MPI_Allreduce(MPI_IN_PLACE, &acc, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    }
    t->result = mode == PERF_AGG_AVG ? acc / t->nRanks : acc;
  }
  pthread_barrier_wait(&t->bar);
  return t->result;
}

/* The result stays valid after return: the next call's thread 0 overwrites it only after its
 * first barrier, which no thread passes before every thread has returned from this one. */
const double *perfTeamMaxVec(perfTeam *t, int tid, const double *v, int n, const double **rows) {
  if (n > t->maxVec) perfFatal("perfTeamMaxVec: %d values, room for %d", n, t->maxVec);
  memcpy(t->vecs + (size_t)tid * (size_t)n, v, (size_t)n * sizeof(double));
  pthread_barrier_wait(&t->bar);
  if (tid == 0) {
    double *mine = t->worldRank == 0 ? t->rowsOut : t->vecOut; /* this process's row */
    for (int i = 0; i < n; i++) {
      double m = t->vecs[i];
      for (int k = 1; k < t->nThreads; k++) m = fmax(m, t->vecs[(size_t)k * (size_t)n + i]);
      mine[i] = m;
    }
    if (t->useMpi) {
      MPI_Gather(t->worldRank == 0 ? MPI_IN_PLACE : mine, n, MPI_DOUBLE, t->rowsOut, n, MPI_DOUBLE, 0,
                 MPI_COMM_WORLD);
    }
    if (t->worldRank == 0) {
      for (int i = 0; i < n; i++) {
        double m = t->rowsOut[i];
        for (int p = 1; p < t->worldSize; p++) m = fmax(m, t->rowsOut[(size_t)p * (size_t)n + i]);
        t->vecOut[i] = m;
      }
    }
    if (t->useMpi) MPI_Bcast(t->vecOut, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  pthread_barrier_wait(&t->bar);
  if (rows) *rows = t->worldRank == 0 && tid == 0 ? t->rowsOut : NULL;
  return t->vecOut;
}

char *perfTeamGatherText(perfTeam *t, int tid, const char *line, size_t len) {
  pthread_barrier_wait(&t->bar);
  if (tid == 0 && !(t->text = calloc((size_t)t->nThreads, len))) perfFatal("out of memory");
  pthread_barrier_wait(&t->bar);
  snprintf(t->text + (size_t)tid * len, len, "%s", line);
  pthread_barrier_wait(&t->bar);
  char *all = NULL;
  if (tid == 0) {
    size_t mine = (size_t)t->nThreads * len;
    if (t->worldRank == 0 && !(all = malloc(mine * (size_t)t->worldSize))) perfFatal("out of memory");
    if (t->worldRank == 0) memcpy(all, t->text, mine);
    if (t->useMpi)
      MPI_Gather(t->worldRank == 0 ? MPI_IN_PLACE : t->text, (int)mine, MPI_BYTE, all, (int)mine,
                 MPI_BYTE, 0, MPI_COMM_WORLD);
    free(t->text);
    t->text = NULL;
  }
  pthread_barrier_wait(&t->bar);
  return all;
}
