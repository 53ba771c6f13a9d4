/* An elastic data-parallel training loop: when a rank dies, the survivors agree on who is gone
 * with weftCommRecover, get a communicator without it and redo the step; then they grow back
 * to full size with weftCommGrow: a replacement process takes over the dead rank's share of
 * the data and receives the current weights and step by Broadcast.
 *
 *   WEFT_COMM_ID=127.0.0.1:29500 WEFT_COMM_SECRET=s3cret ./elastic NRANKS RANK [DIE_RANK DIE_STEP]
 *
 * (one process per rank; rank 0 starts the rendezvous). Rank DIE_RANK kills itself with
 * SIGKILL at step DIE_STEP, as a crash would. Here the survivors' rank 0 starts the
 * replacement itself (this program again, with the grow's id through a pipe); a real job's
 * launcher would start it and hand it the id through its own channel (a store, a file only the
 * job can read), as it hands out any unique id.
 *
 * Each rank's gradients depend on the rank it started as (its share of the data), so the
 * averaged update depends on who contributed: the step a death interrupted is redone by the
 * survivors alone, and the survivors' weights end different from a run without a death. To
 * show that the loop is right (and so tests/run-elastic.sh can tell), every rank checks each
 * averaged gradient against the exact average of the gradients of that step's members,
 * computed here without the library, and prints a checksum of its final weights' bits, which
 * must be the same on every rank that finishes, the replacement included. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weft.h"

#define PARAMS (1 << 20)
#define STEPS 20
#define MAX_RANKS 64

#define CHECK(call)                                                                   \
  do {                                                                                \
    weftResult_t rc_ = (call);                                                        \
    if (rc_ != weftSuccess) {                                                         \
      fprintf(stderr, "%s failed: %s\n", #call, weftGetErrorString(rc_));             \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

struct trainer {
  weftComm_t comm;
  int nranks;              /* the full size, which the job grows back to */
  int startRank;           /* the share of the data this process trains on */
  int members[MAX_RANKS];  /* the start ranks of the communicator's ranks, in rank order */
  int nmembers;
  int step, firstStep;     /* firstStep: where this process joined */
  int dieRank, dieStep;
  float *grad, *weights;
  pid_t replacements[MAX_RANKS];
  int nreplacements;
};

/* What the survivors' rank 0 tells a replacement it starts. */
struct joinInfo {
  weftUniqueId id;
  int nranks, rank, startRank;
};

/* Stands in for the backward pass on the share of `rank`. Quarters below 2: any sum of up to 64
 * of them is exact in float, so the average has one rounding, the division. */
static float gradient(int rank, int step, int i) { return (float)((rank * 3 + step + i) % 8) * 0.25f; }

static void computeGradients(float *grad, int rank, int step) {
  for (int i = 0; i < PARAMS; i++) grad[i] = gradient(rank, step, i);
}

/* The averaged gradient must be exactly (sum of the members' gradients) / members. */
static void checkAverage(const struct trainer *t) {
  for (int i = 0; i < PARAMS; i++) {
    float sum = 0;
    for (int m = 0; m < t->nmembers; m++) sum += gradient(t->members[m], t->step, i);
    if (t->grad[i] != sum / (float)t->nmembers) {
      fprintf(stderr, "rank %d: step %d element %d: AllReduce gave %a, the average of %d ranks is %a\n",
              t->startRank, t->step, i, (double)t->grad[i], t->nmembers,
              (double)(sum / (float)t->nmembers));
      exit(3);
    }
  }
}

/* Replaces the communicator by one of the ranks still alive and drops the gone ones from
 * members. */
static void recover(struct trainer *t) {
  int gone[MAX_RANKS], ngone = 0;
  weftComm_t survivors;
  if (weftCommRecover(t->comm, &survivors, NULL, gone, &ngone) != weftSuccess) {
    fprintf(stderr, "rank %d: recovery failed: %s\n", t->startRank, weftGetLastError(t->comm));
    exit(1);
  }
  weftCommDestroy(t->comm);
  t->comm = survivors;
  int kept = 0;
  for (int m = 0; m < t->nmembers; m++) {
    int isGone = 0;
    for (int i = 0; i < ngone; i++) isGone |= gone[i] == m;
    if (isGone) fprintf(stderr, "rank %d: rank %d is gone\n", t->startRank, t->members[m]);
    else t->members[kept++] = t->members[m];
  }
  t->nmembers = kept;
  int rank = 0, left = 0;
  weftCommUserRank(t->comm, &rank);
  weftCommCount(t->comm, &left);
  fprintf(stderr, "rank %d: continuing as rank %d of %d\n", t->startRank, rank, left);
  if (left != kept) {
    fprintf(stderr, "rank %d: %d ranks left but %d gone of %d\n", t->startRank, left, ngone, kept + ngone);
    exit(1);
  }
}

/* Starts this program as the replacement that will be new rank info->rank; the id goes
 * through a pipe (never the command line, which any user of the machine can read). */
static pid_t startReplacement(const struct joinInfo *info) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  char fdText[16];
  snprintf(fdText, sizeof fdText, "%d", fds[0]);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) { /* only exec from here: this process has the library's threads */
    fcntl(fds[0], F_SETFD, 0);
    execl("/proc/self/exe", "elastic", "--replacement", fdText, (char *)NULL);
    _exit(127);
  }
  close(fds[0]);
  int ok = pid > 0 && write(fds[1], info, sizeof *info) == (ssize_t)sizeof *info;
  close(fds[1]);
  return ok ? pid : -1;
}

/* Every rank: rank 0's step, members and weights (the survivors already have them; a
 * replacement gets them here). */
static void shareState(struct trainer *t) {
  int32_t head[2 + MAX_RANKS] = {t->step, t->nmembers};
  for (int m = 0; m < t->nmembers; m++) head[2 + m] = t->members[m];
  CHECK(weftBcast(head, 2 + MAX_RANKS, weftInt32, 0, t->comm, NULL));
  CHECK(weftBcast(t->weights, PARAMS, weftFloat32, 0, t->comm, NULL));
  t->step = head[0];
  t->nmembers = head[1];
  for (int m = 0; m < t->nmembers; m++) t->members[m] = head[2 + m];
}

/* Back to full size: the survivors' rank 0 makes the id and starts a replacement for each
 * missing share; the survivors and the replacements form the grown communicator. */
static void growBack(struct trainer *t) {
  int rank = 0, missing[MAX_RANKS], nmissing = 0;
  weftCommUserRank(t->comm, &rank);
  for (int s = 0; s < t->nranks; s++) {
    int present = 0;
    for (int m = 0; m < t->nmembers; m++) present |= t->members[m] == s;
    if (!present) missing[nmissing++] = s;
  }
  weftUniqueId id;
  if (rank == 0) {
    CHECK(weftCommGetUniqueId(t->comm, &id));
    for (int j = 0; j < nmissing; j++) {
      struct joinInfo info = {id, t->nranks, t->nmembers + j, missing[j]};
      pid_t pid = startReplacement(&info);
      if (pid < 0) exit(1);
      t->replacements[t->nreplacements++] = pid;
    }
  }
  weftComm_t grown;
  CHECK(weftCommGrow(t->comm, t->nranks, rank == 0 ? &id : NULL, -1, &grown, NULL));
  weftCommDestroy(t->comm);
  t->comm = grown;
  for (int j = 0; j < nmissing; j++) t->members[t->nmembers++] = missing[j];
  fprintf(stderr, "rank %d: grown back to %d ranks\n", t->startRank, t->nmembers);
  shareState(t);
}

static void train(struct trainer *t) {
  while (t->step < STEPS) {
    computeGradients(t->grad, t->startRank, t->step);
    if (t->startRank == t->dieRank && t->step == t->dieStep) raise(SIGKILL);
    weftResult_t rc = weftAllReduce(t->grad, t->grad, PARAMS, weftFloat32, weftAvg, t->comm, NULL);
    if (rc == weftSuccess) {
      checkAverage(t);
      for (int i = 0; i < PARAMS; i++) t->weights[i] -= 0.5f * t->grad[i];
      t->step++;
      if (t->nmembers < t->nranks) growBack(t);
      continue;
    }
    /* A peer died (weftRemoteError) or hangs (weftTimeout): recover and redo this step. */
    fprintf(stderr, "rank %d: step %d failed: %s\n", t->startRank, t->step, weftGetLastError(t->comm));
    recover(t);
  }
}

/* FNV-1a of the weights' bytes: equal on every rank only if their weights are bit-equal. */
static uint64_t checksum(const float *weights) {
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char *bytes = (const unsigned char *)weights;
  for (size_t i = 0; i < PARAMS * sizeof *weights; i++) h = (h ^ bytes[i]) * 0x100000001b3ull;
  return h;
}

static void finish(struct trainer *t, const char *role) {
  int rank = 0;
  weftCommUserRank(t->comm, &rank);
  printf("rank %d (%snow %d of %d): %d steps checked, checksum %016llx\n", t->startRank, role,
         rank, t->nmembers, STEPS - t->firstStep, (unsigned long long)checksum(t->weights));
  fflush(stdout);
  weftCommDestroy(t->comm);
  int failed = 0;
  for (int i = 0; i < t->nreplacements; i++) { /* a replacement that failed fails the job */
    int status;
    failed |= waitpid(t->replacements[i], &status, 0) != t->replacements[i] ||
              !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  free(t->grad);
  free(t->weights);
  exit(failed);
}

static void allocate(struct trainer *t) {
  t->grad = malloc(PARAMS * sizeof *t->grad);
  t->weights = calloc(PARAMS, sizeof *t->weights);
  if (t->grad == NULL || t->weights == NULL) exit(1);
}

static int replacementMain(int fd) {
  struct joinInfo info;
  if (read(fd, &info, sizeof info) != (ssize_t)sizeof info) return 2;
  close(fd);
  static struct trainer t;
  t = (struct trainer){.nranks = info.nranks, .startRank = info.startRank, .dieRank = -1};
  allocate(&t);
  CHECK(weftCommGrow(NULL, info.nranks, &info.id, info.rank, &t.comm, NULL));
  shareState(&t);
  t.firstStep = t.step;
  fprintf(stderr, "rank %d: replacement joined as rank %d of %d at step %d\n", t.startRank,
          info.rank, info.nranks, t.step);
  train(&t);
  finish(&t, "replacement, ");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--replacement") == 0) return replacementMain(atoi(argv[2]));
  if (argc != 3 && argc != 5) {
    fprintf(stderr, "usage: %s NRANKS RANK [DIE_RANK DIE_STEP]\n", argv[0]);
    return 2;
  }
  static struct trainer t;
  t = (struct trainer){.nranks = atoi(argv[1]), .startRank = atoi(argv[2]),
                       .dieRank = argc == 5 ? atoi(argv[3]) : -1,
                       .dieStep = argc == 5 ? atoi(argv[4]) : -1};
  if (t.nranks < 1 || t.nranks > MAX_RANKS || t.startRank < 0 || t.startRank >= t.nranks) return 2;
  t.nmembers = t.nranks;
  for (int m = 0; m < t.nranks; m++) t.members[m] = m;
  allocate(&t);
  weftUniqueId unused = {{0}}; /* WEFT_COMM_ID names the rendezvous instead */
  CHECK(weftCommInitRank(&t.comm, t.nranks, unused, t.startRank));
  train(&t);
  finish(&t, "");
  return 0;
}
