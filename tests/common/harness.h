/* Test harness: run a function on N ranks as threads of this process, as forked processes,
 * or both (P processes x T threads), harness.c; the data pattern every collective test checks
 * and its expected results, pattern.c; what a process holds, resources.c. */
#ifndef WEFT_TEST_HARNESS_H_
#define WEFT_TEST_HARNESS_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "weft.h"

/* Body run by every rank on its own communicator; returns the number of failures. */
typedef long (*rankBody)(weftComm_t comm, int rank, int nranks, void *arg);

/* Runs body on procs * threads ranks; returns the total number of failures (init failures
 * count as one per rank), or -1 if a process crashed or the run exceeded timeoutSec (ranks as
 * threads of this process included). */
long runRanks(int procs, int threads, rankBody body, void *arg, int timeoutSec);

/* As runRanks, but process p believes it is on host p / procsPerHost (WEFT_HOSTID), so ranks
 * of different "hosts" talk over the network transports although they share this machine. */
long runRanksOnHosts(int hosts, int procsPerHost, rankBody body, void *arg, int timeoutSec);
/* The same with rank r (a process) on host hostOf[r]: hosts of different sizes, and ranks of a
 * host that are not contiguous. */
long runRanksOnHostMap(int nranks, const int *hostOf, rankBody body, void *arg, int timeoutSec);
/* The same with one process per host and its ranks as threads of it. */
long runThreadsOnHosts(int hosts, int threadsPerHost, rankBody body, void *arg, int timeoutSec);

/* WEFT_TEST_BIND_ROUND_ROBIN=N (tests that inject a topology): process p binds itself to CPU
 * p % N before its ranks start, so a host's ranks sit on different packages (or NUMA nodes)
 * of the model. The runs above call it in each rank process; others may. Unset: nothing. */
void bindRoundRobin(int p);

/* While on, the runs above expect every rank's init to be refused (WEFT_ALGO forcing an
 * algorithm that cannot run on the communicator) and count anything else as a failure; the
 * body is not run. */
void expectRefusal(int on);
/* Whether algorithm algo must be able to run on hosts x perHost ranks (0: why not, in why).
 * The tests' own knowledge, not the library's answer. */
int algoRunsOn(const char *algo, int hosts, int perHost, char *why, size_t len);

/* Fills count elements of buf with rank's deterministic input for op. */
void fillInput(void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int rank);
/* Number of elements of buf that differ from the AllReduce result of every rank's fillInput.
 * Every result is exact: integers bit for bit, floats too (inputs are small integers or
 * powers of two, so no sum or product rounds; an average rounds once, its division, which
 * the reference does the same way). See pattern.c. */
size_t countWrong(const void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int nranks);
/* The same for elements first .. first + count - 1 of the AllReduce result, held in buf from
 * its start (a ReduceScatter's part). */
size_t countWrongFrom(const void *buf, size_t first, size_t count, weftDataType_t type,
                      weftRedOp_t op, int nranks);

/* A 64-bit mixing function (a hash of x), for inputs both ends of a test derive alike. */
uint64_t testMix(uint64_t x);
/* Element i of rank's input whose sums and products round at every step (full significands,
 * either sign, over 16 binades; for prod, factors in [0.75, 1.25)), as a double; and count of
 * them from element first on, stored as a floating-point type (rounded to it). */
double roundingInput(size_t i, int rank, weftRedOp_t op);
void fillRoundingFrom(void *buf, size_t first, size_t count, weftDataType_t type, weftRedOp_t op,
                      int rank);

/* PreMulSum (weftRedOpCreatePreMulSum): the scalar of a case (a value of type written into
 * scalar, 8 bytes of room), each rank's input, and the number of elements of buf that differ
 * from elements first .. first + count - 1 of the sum over nranks ranks of round(scalar *
 * input); what (may be NULL) describes the first. Every result is exact (pattern.c says how);
 * PREMUL_WITNESS also tells products rounded to the type before the sum from wider ones. */
enum premulKind { PREMUL_DYADIC, PREMUL_WITNESS };
void premulScalar(weftDataType_t type, enum premulKind kind, void *scalar);
void fillPreMulInput(void *buf, size_t count, weftDataType_t type, enum premulKind kind,
                     int rank, int nranks);
size_t countWrongPreMul(const void *buf, size_t first, size_t count, weftDataType_t type,
                        enum premulKind kind, int nranks, const void *scalar, char *what,
                        size_t len);

/* A matrix of AllReduce cases: every count x type x op (avg on floats only) x in-place and
 * out-of-place, each checked with countWrong. */
struct collMatrix {
  const size_t *counts;
  int nCounts;
  const weftDataType_t *types;
  int nTypes;
  const weftRedOp_t *ops;
  int nOps;
};

/* One case; returns 1 (and says why on stderr) if the call failed or any element is wrong. */
long checkAllReduce(weftComm_t comm, int rank, int nranks, size_t count, weftDataType_t type,
                    weftRedOp_t op, int inPlace, void *send, void *recv);
/* A rankBody running every case of the struct collMatrix in arg; returns the failures. */
long collMatrixBody(weftComm_t comm, int rank, int nranks, void *arg);
/* Computes the matrix's expected results for nranks once, before the ranks are forked, so
 * every rank and algorithm compares against them instead of recomputing them. */
void collMatrixPrepare(const struct collMatrix *m, int nranks);
/* The same for one case: every rank's input and the AllReduce result of nranks; and that
 * result's bytes (NULL for count 0 or when out of memory). */
void patternPrepare(size_t count, weftDataType_t type, weftRedOp_t op, int nranks);
const void *expectedResult(size_t count, weftDataType_t type, weftRedOp_t op, int nranks);

/* Bit-identical results on every rank: identicalBitsBody runs every case of a matrix (float
 * types only, out-of-place) on inputs that round at every step, and records a hash of each
 * rank's result on a board in memory shared with the rank processes; bitsBoardCheck counts
 * the cases where ranks disagree, describing them in msg. */
struct bitsBoard;
struct bitsRun {
  const struct collMatrix *matrix;
  struct bitsBoard *board;
};
struct bitsBoard *bitsBoardNew(int nranks, int ncases);
void bitsBoardFree(struct bitsBoard *b);
int bitsBoardCases(const struct collMatrix *m);
int bitsBoardCheck(const struct bitsBoard *b, const struct collMatrix *m, char *msg, size_t len);
long identicalBitsBody(weftComm_t comm, int rank, int nranks, void *arg);

int countOpenFds(void);
/* Removes the /dev/shm weft segments created by these processes (the name holds the creator's
 * pid, lib/shmseg.c), listing them in names; returns how many there were. Unlike a count of
 * every weft segment, other weft jobs on the machine do not disturb it. */
int takeSegmentsOf(const pid_t *pids, int n, char *names, size_t len);
/* Records a rank process this test forked (the harness's and forked.c's forks do). */
void noteChild(pid_t pid);
/* takeSegmentsOf this process and every child noted since the last call; forgets them. */
int segmentsLeft(char *names, size_t len);
/* Regions of this process that map a weft shared-memory segment. */
int countWeftMappings(void);
/* Threads of this process; regions in its address space (/proc/self/maps lines); its resident
 * set in KiB (VmRSS). -1 when /proc cannot be read. */
int countThreads(void);
/* countThreads once it is at most atMost, or after waitMs (threads joined a moment ago may
 * still be listed). */
int countThreadsSettled(int atMost, int waitMs);
int countMappings(void);
long residentKb(void);

#endif
