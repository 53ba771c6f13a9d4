/* The ranks of a benchmark: the world (MPI processes, or one process without MPI), the team
 * (nThreads threads in each of them), their barriers and reductions; fatal errors and clocks.
 * Barriers and reductions go through a pthread barrier, and MPI on thread 0 only, so MPI needs
 * no more than MPI_THREAD_FUNNELED (thread 0 is the main thread). */
#ifndef WEFT_BENCH_PERF_TEAM_H_
#define WEFT_BENCH_PERF_TEAM_H_

#include <mpi.h>
#include <pthread.h>

extern int perfUseMpi; /* set once MPI_Init has run: errors then abort the whole job */

/* Prints "host:pid: error: ..." on stderr and ends the job (exit status 1). */
void perfFatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

double perfNow(void);    /* seconds, monotonic */
double perfCpuNow(void); /* CPU seconds used by the calling thread */

/* Rank from the launcher's environment, before MPI_Init: lets only one process print usage
 * errors instead of every one of them. */
int perfEnvRank(void);
/* True when started by mpirun/srun: only then may MPI_Init run (a singleton MPI_Init would
 * need a launcher daemon and is not wanted for plain thread runs). */
int perfEnvUnderMpi(void);

typedef struct {
  int rank, size;
} perfWorld;

void perfWorldInit(perfWorld *w, int useMpi, int *argc, char ***argv);
void perfWorldFinalize(void);

typedef struct {
  pthread_barrier_t bar;
  int nThreads, nRanks, useMpi, worldRank, worldSize;
  double *vals; /* one per thread */
  double result;
  int maxVec;    /* longest vector perfTeamMaxVec takes */
  double *vecs;  /* nThreads x maxVec */
  double *vecOut;  /* maxVec */
  double *rowsOut; /* worldSize x maxVec: each process's row, on world rank 0 */
  char *text;      /* nThreads lines of perfTeamGatherText, during a call */
} perfTeam;

void perfTeamInit(perfTeam *t, int nThreads, const perfWorld *w, int useMpi, int maxVec);
void perfTeamFree(perfTeam *t);
void perfTeamBarrier(perfTeam *t, int tid);

enum { PERF_AGG_RANK0, PERF_AGG_AVG, PERF_AGG_MIN, PERF_AGG_MAX, PERF_AGG_SUM };

/* Combines v over all ranks (mode: -a's 0..3, or PERF_AGG_SUM); every rank gets the result. */
double perfTeamReduce(perfTeam *t, int tid, double v, int mode);

/* Element-wise max of v[0..n) over all ranks, n <= maxVec. Returns the job's maximum (valid on
 * every rank until the next call); *rows (world rank 0, else NULL) gets each process's maximum
 * over its threads, worldSize rows of n. */
const double *perfTeamMaxVec(perfTeam *t, int tid, const double *v, int n, const double **rows);

/* Every rank's line (len bytes each, NUL-terminated, truncated) in rank order: on world rank
 * 0's thread 0 a buffer of nRanks * len bytes for the caller to free; NULL on the others. */
char *perfTeamGatherText(perfTeam *t, int tid, const char *line, size_t len);

#endif
