/* Small AllReduces queued together in a group run as one (lib/fuse.c): every result is still
 * each call's own (packed in, reduced, unpacked to its recvbuff), in place and out of place,
 * whatever the counts; calls of another type or op, a call that reads an earlier call's
 * result, one over WEFT_GROUP_FUSE_BYTES, and other collectives between them split the runs;
 * WEFT_GROUP_FUSE_BYTES=0 fuses nothing; a run is at most 256 calls. How many operations ran is the communicator's
 * sequence number (white-box: core.h), the same on every rank. Ranks as processes, threads
 * and on emulated hosts (TCP). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "harness.h"
#include "reduce.h"

TestSuite(group_fuse, .timeout = 120);

#define NCALLS 9
/* Counts of the calls (bytes of int32 / float: 4 each); the last one alone is 160 KB, over
 * the default 64 KiB, so it runs by itself. */
static const size_t counts[NCALLS] = {1, 7, 13, 1021, 2, 3, 5, 1, 40009};

struct fuseCase {
  int expectOps; /* operations the group must take (-1: do not check) */
  int mixTypes;  /* call 4 is float (the others int32): it splits the run */
  int chained;   /* call 2 reads call 1's recvbuff: it starts a new run */
  int inPlace;   /* every call in place */
};

static weftDataType_t typeOf(const struct fuseCase *c, int i) {
  return c->mixTypes && i == 4 ? weftFloat32 : weftInt32;
}

static long fuseBody(weftComm_t comm, int rank, int n, void *arg) {
  const struct fuseCase *c = arg;
  char *send[NCALLS], *recv[NCALLS], *want = malloc(counts[NCALLS - 1] * 8);
  for (int i = 0; i < NCALLS; i++) {
    send[i] = malloc(counts[i] * 4), recv[i] = malloc(counts[i] * 4);
    fillInput(send[i], counts[i], typeOf(c, i), weftSum, rank);
    memset(recv[i], 0x5a, counts[i] * 4);
  }
  uint64_t before = comm->opSeq;
  long bad = weftGroupStart() != weftSuccess;
  for (int i = 0; i < NCALLS; i++) {
    /* call 2: call 1's result (in place, call 1's result is in its send buffer) */
    const void *in = c->chained && i == 2 ? (c->inPlace ? send[1] : recv[1]) : send[i];
    size_t count = c->chained && i == 2 ? counts[1] : counts[i];
    void *out = c->inPlace ? (void *)in : recv[i];
    bad += weftAllReduce(in, out, count, typeOf(c, i), weftSum, comm, NULL) != weftSuccess;
  }
  bad += weftGroupEnd() != weftSuccess;
  if (bad) fprintf(stderr, "rank %d: a call failed: %s\n", rank, weftGetLastError(comm));
  int ops = (int)(comm->opSeq - before);
  if (c->expectOps >= 0 && ops != c->expectOps) {
    fprintf(stderr, "rank %d: the group took %d operations, not %d\n", rank, ops, c->expectOps);
    bad++;
  }
  for (int i = 0; i < NCALLS && !bad; i++) {
    if (c->chained && c->inPlace && i == 1) continue; /* call 2 reduced it again, in place */
    const char *got = c->inPlace ? (c->chained && i == 2 ? send[1] : send[i]) : recv[i];
    size_t wrong;
    if (c->chained && i == 2) { /* the sum over ranks of call 1's result: n times it */
      fillInput(want, counts[1], weftInt32, weftSum, 0);
      int32_t *w = (int32_t *)want;
      wrong = 0;
      for (size_t j = 0; j < counts[1]; j++) {
        int64_t sum = 0;
        for (int r = 0; r < n; r++) {
          fillInput(want, counts[1], weftInt32, weftSum, r);
          sum += w[j];
        }
        wrong += ((const int32_t *)got)[j] != (int32_t)((uint32_t)sum * (uint32_t)n);
      }
    } else {
      wrong = countWrong(got, counts[i], typeOf(c, i), weftSum, n);
    }
    if (wrong) fprintf(stderr, "rank %d: call %d (count %zu): %zu wrong\n", rank, i, counts[i], wrong);
    bad += wrong != 0;
  }
  for (int i = 0; i < NCALLS; i++) free(send[i]), free(recv[i]);
  free(want);
  return bad;
}

static void run(const struct fuseCase *c, const char *fuseBytes) {
  if (fuseBytes) setenv("WEFT_GROUP_FUSE_BYTES", fuseBytes, 1);
  cr_expect_eq(runRanks(3, 1, fuseBody, (void *)c, 60), 0, "3 processes");
  cr_expect_eq(runRanks(1, 4, fuseBody, (void *)c, 60), 0, "4 threads");
  cr_expect_eq(runRanks(1, 1, fuseBody, (void *)c, 60), 0, "1 rank");
  cr_expect_eq(runRanksOnHosts(2, 1, fuseBody, (void *)c, 60), 0, "2 hosts");
  unsetenv("WEFT_GROUP_FUSE_BYTES");
}

/* Calls 0..7 (4,200 bytes together) run as one, call 8 alone. */
Test(group_fuse, small_calls_run_as_one) {
  run(&(struct fuseCase){.expectOps = 2}, NULL);
  run(&(struct fuseCase){.expectOps = 2, .inPlace = 1}, NULL);
}

/* A float call among int32 ones: runs 0-3, 4, 5-7, 8. */
Test(group_fuse, another_type_splits) { run(&(struct fuseCase){.expectOps = 4, .mixTypes = 1}, NULL); }

/* Call 2 reads call 1's result: runs 0-1, 2-7, 8; in place too. */
Test(group_fuse, a_call_reading_an_earlier_result_splits) {
  run(&(struct fuseCase){.expectOps = 3, .chained = 1}, NULL);
  run(&(struct fuseCase){.expectOps = 3, .chained = 1, .inPlace = 1}, NULL);
}

/* 0 fuses nothing; a limit of 100 bytes: calls 0-2 (84 bytes), 3, 4-7, 8. */
Test(group_fuse, the_limit) {
  run(&(struct fuseCase){.expectOps = NCALLS}, "0");
  run(&(struct fuseCase){.expectOps = 4}, "100");
}

/* 600 one-element calls (2,400 bytes, far under the byte limit) take runs of at most 256
 * calls: 3 operations, each call still its own result. */
#define MANY 600
static long manyBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  int32_t send[MANY], recv[MANY];
  for (int i = 0; i < MANY; i++) send[i] = rank * 1000 + i, recv[i] = -1;
  uint64_t before = comm->opSeq;
  long bad = weftGroupStart() != weftSuccess;
  for (int i = 0; i < MANY; i++)
    bad += weftAllReduce(&send[i], &recv[i], 1, weftInt32, weftSum, comm, NULL) != weftSuccess;
  bad += weftGroupEnd() != weftSuccess;
  int ops = (int)(comm->opSeq - before);
  if (ops != 3) fprintf(stderr, "rank %d: %d calls took %d operations, not 3\n", rank, MANY, ops);
  bad += ops != 3;
  for (int i = 0; i < MANY; i++) bad += recv[i] != 1000 * n * (n - 1) / 2 + n * i;
  return bad;
}

Test(group_fuse, a_run_is_at_most_256_calls) {
  cr_expect_eq(runRanks(1, 3, manyBody, NULL, 60), 0, "3 threads");
  cr_expect_eq(runRanks(2, 1, manyBody, NULL, 60), 0, "2 processes");
}
