/* Mismatched collectives across hosts (emulated with WEFT_HOSTID, so ranks of different hosts
 * talk over TCP): rank 1 calls AllReduce with another count, datatype or op at the same
 * operation. Where the difference makes the tuner pick another algorithm for rank 1, the ranks
 * wait on different links and only the signature notes of the bootstrap ring can tell
 * (lib/sigwatch.c); otherwise the slots' signature trailers do. Either way every rank must
 * fail with weftInvalidUsage and a message with both signatures, long before the timeout.
 * The cases meant to change the algorithm must change it (each rank asks the tuner). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "forked.h"
#include "reduce.h"

#define NRANKS 4
#define HOSTS 2
#define BIG (1 << 20) /* floats: the tuner picks a bandwidth algorithm; for 100 a latency one */
#define TIMEOUT_MS 20000

enum change { COUNT_AND_ALGORITHM, TYPE_AND_ALGORITHM, OP_ONLY, COUNT_ONLY };

struct report {
  volatile int done, rc;
  volatile int64_t ms; /* of the mismatched call */
  char algo[16], msg[768];
  char sig[96]; /* "AllReduce(count N, type, op)", as the library's message writes it */
};
struct shared {
  struct report r[NRANKS];
  enum change change;
};

/* A count at which the tuner picks one algorithm for floats and another for doubles (the
 * same on every rank: the tuner is a pure function of the communicator's shape). */
static size_t typeChangesAlgorithm(weftComm_t comm) {
  for (size_t count = 64; count <= BIG; count *= 2) {
    const char *f = NULL, *d = NULL;
    weftCommGetAlgorithm(comm, count, weftFloat32, &f);
    weftCommGetAlgorithm(comm, count, weftFloat64, &d);
    if (f != NULL && d != NULL && strcmp(f, d) != 0) return count;
  }
  return BIG;
}

static void rankMain(void *shared, weftUniqueId id, int rank, int nranks) {
  struct shared *sh = shared;
  struct report *me = &sh->r[rank];
  char host[32];
  snprintf(host, sizeof host, "mmhost%d", rank % HOSTS);
  setenv("WEFT_HOSTID", host, 1);
  weftComm_t comm;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  float *buf = calloc(BIG, sizeof(double));
  for (int i = 0; i < 5 && rc == weftSuccess; i++)
    rc = weftAllReduce(buf, buf, 100, weftFloat32, weftSum, comm, NULL);
  size_t count = sh->change == COUNT_AND_ALGORITHM ? BIG : 1000;
  if (sh->change == TYPE_AND_ALGORITHM && rc == weftSuccess) count = typeChangesAlgorithm(comm);
  weftDataType_t type = weftFloat32;
  weftRedOp_t op = weftSum;
  if (rank == 1) {
    if (sh->change == COUNT_AND_ALGORITHM) count = 100;
    if (sh->change == COUNT_ONLY) count = 1001;
    if (sh->change == TYPE_AND_ALGORITHM) type = weftFloat64;
    if (sh->change == OP_ONLY) op = weftMax;
  }
  const char *algo = "?";
  if (rc == weftSuccess) weftCommGetAlgorithm(comm, count, type, &algo);
  snprintf(me->algo, sizeof me->algo, "%s", algo);
  snprintf(me->sig, sizeof me->sig, "AllReduce(count %zu, %s, %s)", count, weftTypeName(type), weftOpName(op));
  int64_t start = forkedNowMs();
  if (rc == weftSuccess) rc = weftAllReduce(buf, buf, count, type, op, comm, NULL);
  me->ms = forkedNowMs() - start;
  snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(comm));
  me->rc = rc;
  me->done = 1;
  weftCommDestroy(comm);
  free(buf);
  _exit(0);
}

static void mismatch(enum change change, int differentAlgorithms) {
  char timeout[16];
  snprintf(timeout, sizeof timeout, "%d", TIMEOUT_MS);
  setenv("WEFT_TIMEOUT_MS", timeout, 1);
  struct shared *sh = forkedShared(sizeof *sh);
  sh->change = change;
  pid_t pids[NRANKS];
  forkedLaunch(NRANKS, rankMain, sh, pids);
  forkedReap(pids, NRANKS, TIMEOUT_MS + 10000);
  unsetenv("WEFT_TIMEOUT_MS");
  if (differentAlgorithms)
    cr_expect_str_neq(sh->r[1].algo, sh->r[0].algo, "the change should change rank 1's algorithm");
  for (int r = 0; r < NRANKS; r++) {
    const struct report *rep = &sh->r[r];
    if (getenv("WEFT_TEST_VERBOSE"))
      fprintf(stderr, "change %d: rank %d (%s): rc %d after %lld ms: %s\n", (int)change, r,
              rep->algo, rep->rc, (long long)rep->ms, rep->msg);
    cr_expect(rep->done, "rank %d never returned", r);
    cr_expect_eq(rep->rc, weftInvalidUsage, "rank %d (%s) got %d after %lld ms: %s", r, rep->algo,
                 rep->rc, (long long)rep->ms, rep->msg);
    cr_expect(strstr(rep->msg, "mismatched collectives") != NULL, "rank %d: %s", r, rep->msg);
    cr_expect(strstr(rep->msg, sh->r[0].sig) != NULL && strstr(rep->msg, sh->r[1].sig) != NULL,
              "rank %d's message lacks \"%s\" or \"%s\": %s", r, sh->r[0].sig, sh->r[1].sig, rep->msg);
    /* found in ms (docs/performance.md); the timeout is 20 s */
    cr_expect_lt(rep->ms, 10000, "rank %d took %lld ms", r, (long long)rep->ms);
  }
  munmap(sh, sizeof *sh);
}

Test(mismatch_hosts, count_changes_algorithm, .timeout = 60) { mismatch(COUNT_AND_ALGORITHM, 1); }
Test(mismatch_hosts, type_changes_algorithm, .timeout = 60) { mismatch(TYPE_AND_ALGORITHM, 1); }
Test(mismatch_hosts, op, .timeout = 60) { mismatch(OP_ONLY, 0); }
Test(mismatch_hosts, count, .timeout = 60) { mismatch(COUNT_ONLY, 0); }
