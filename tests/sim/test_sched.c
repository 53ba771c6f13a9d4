/* Schedule and run cannot drift: on 2 emulated hosts of 2 ranks, each rank runs a real
 * collective with a counting prims tap (every step's kind, peers, bytes and pieces, as the
 * transports then carry them), and compares it with the schedule weft-sim records for the same
 * rank and call from the algorithm's own run() on its simulated communicator. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "harness.h"
#include "prims.h"
#include "sim.h"

/* The emulated hosts' links: shm within a host, TCP across (their default slots). */
static struct simFabric testFabric(void) {
  struct simFabric f = {.hosts = 2, .gpus = 2, .suGBs = 10, .suLatUs = 1, .nics = 1,
                        .nicGBs = 1, .nicLatUs = 10, .net = SIM_NET_FLAT, .hostsPerLeaf = 2,
                        .oversub = 1, .hopUs = 0, .overheadUs = 0.3, .reduceGBs = 10,
                        .localSlot = 131072, .netSlot = 524288};
  snprintf(f.name, sizeof f.name, "emulated-2x2");
  return f;
}

struct drift {
  weftColl_t coll;
  size_t bytes; /* as weft-sim counts them (the whole buffer, gathered or scattered) */
};

static void tapCount(void *ctx, const struct weftPrimsStep *s) {
  if (simRankSchedAdd(ctx, s, 0) != 0) abort(); /* a real run's links are not told apart */
}

static weftResult_t runCall(weftComm_t comm, const struct drift *d, int nranks, float *buf) {
  size_t elems = d->bytes / sizeof(float);
  switch (d->coll) {
    case weftCollAllGather:
      return weftAllGather(buf + (size_t)comm->rank * (elems / nranks), buf, elems / nranks,
                           weftFloat32, comm, NULL);
    case weftCollReduceScatter:
      return weftReduceScatter(buf, buf + elems, elems / nranks, weftFloat32, weftSum, comm, NULL);
    default: return weftAllReduce(buf, buf, elems, weftFloat32, weftSum, comm, NULL);
  }
}

static int sameStep(const struct simStep *a, const struct simStep *b) {
  if (a->kind != b->kind || a->bytes != b->bytes || a->pieces != b->pieces ||
      a->nrecv != b->nrecv || a->nsend != b->nsend || a->pieceBytes != b->pieceBytes)
    return 0;
  return memcmp(a->peer, b->peer, sizeof(int32_t) * (size_t)(a->nrecv + a->nsend)) == 0;
}

static long compare(const struct simRankSched *ran, const struct simRankSched *sim, int rank) {
  size_t n = ran->nsteps < sim->nsteps ? ran->nsteps : sim->nsteps;
  for (size_t i = 0; i < n; i++)
    if (!sameStep(&ran->steps[i], &sim->steps[i])) {
      const struct simStep *a = &ran->steps[i], *b = &sim->steps[i];
      fprintf(stderr, "rank %d step %zu: ran kind %d %u bytes %u pieces peers %d/%d, "
              "schedule kind %d %u bytes %u pieces peers %d/%d (pieces of %u and %u bytes)\n", rank, i, a->kind, a->bytes,
              a->pieces, a->peer[0], a->peer[a->nrecv], b->kind, b->bytes, b->pieces, b->peer[0],
              b->peer[b->nrecv], a->pieceBytes, b->pieceBytes);
      return 1;
    }
  if (ran->nsteps != sim->nsteps || ran->tapped != sim->tapped) {
    fprintf(stderr, "rank %d: %zu steps ran (%zu with empty ones), the schedule has %zu (%zu)\n",
            rank, ran->nsteps, ran->tapped, sim->nsteps, sim->tapped);
    return 1;
  }
  return ran->nsteps == 0; /* a schedule of nothing compares equal to anything: refuse it */
}

static long driftBody(weftComm_t comm, int rank, int nranks, void *arg) {
  const struct drift *d = arg;
  const char *algo = getenv("WEFT_ALGO");
  enum simAlgo a = SIM_RING;
  for (int i = 0; i < SIM_ALGOS; i++)
    if (strcmp(simAlgoNames[i], algo) == 0) a = (enum simAlgo)i;
  float *buf = calloc(2 * d->bytes / sizeof(float) + 1, sizeof(float));
  struct simRankSched ran = {0}, sim = {0};
  struct weftPrimsTap tap = {tapCount, &ran, 0};
  comm->primsTap = &tap;
  weftResult_t rc = runCall(comm, d, nranks, buf);
  comm->primsTap = NULL;
  free(buf);
  if (rc != weftSuccess) return 1;
  struct simFabric f = testFabric();
  char err[256];
  struct simComm *c = simCommNew(&f, nranks, err, sizeof err);
  struct simCall call = {d->coll, d->bytes};
  long bad = c == NULL || simRecord(c, a, &call, rank, &sim, err, sizeof err) != 0;
  if (bad) fprintf(stderr, "rank %d: %s\n", rank, err);
  else bad = compare(&ran, &sim, rank);
  simCommFree(c);
  simRankSchedFree(&ran);
  simRankSchedFree(&sim);
  return bad;
}

static void expectNoDrift(const char *algo, weftColl_t coll, size_t bytes) {
  setenv("WEFT_ALGO", algo, 1);
  struct drift d = {coll, bytes};
  long failures = runThreadsOnHosts(2, 2, driftBody, &d, 60);
  unsetenv("WEFT_ALGO");
  cr_expect_eq(failures, 0, "%s %s of %zu bytes: the run and weft-sim's schedule differ", algo,
               weftCollName(coll), bytes);
}

/* Sizes below a piece, across several pieces and chunks, and uneven splits. */
static const size_t sizes[] = {16, 4 * 1000003, 3 * 1048576 + 16};

Test(sched, ring_matches_run, .timeout = 120) {
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    expectNoDrift("ring", weftCollAllReduce, sizes[i]);
    expectNoDrift("ring", weftCollAllGather, sizes[i]);
    expectNoDrift("ring", weftCollReduceScatter, sizes[i]);
  }
}

Test(sched, tree_matches_run, .timeout = 120) {
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    expectNoDrift("tree", weftCollAllReduce, sizes[i]);
}

Test(sched, hier_matches_run, .timeout = 120) {
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    expectNoDrift("hier", weftCollAllReduce, sizes[i]);
    expectNoDrift("hier", weftCollAllGather, sizes[i]);
    expectNoDrift("hier", weftCollReduceScatter, sizes[i]);
  }
}
