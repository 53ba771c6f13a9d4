/* Transport conformance: one suite, run for every transport in the registry (weftTransports[]),
 * so a new transport is tested with no new test code. Two ranks (threads, or processes for
 * peer death) each init a communicator with WEFT_TRANSPORTS=<name>, then drive the ops of
 * their ring connections directly: rank 0's ring.send feeds rank 1's ring.recv and back.
 * Checked: FIFO order, wrap-around (far more messages than slots), 0-byte and full-slot
 * messages, random payloads both ways at once, and a peer that closes or dies with data in
 * flight, which must give weftRemoteError, not a hang. A transport whose query() says no is
 * skipped with its reason. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "core.h"
#include "harness.h"
#include "log.h"

/* The longest any single wait in these tests may take before it counts as a hang. */
#define HANG_MS 10000
/* How long a survivor may take to report a peer's close or death. */
#define NOTICE_MS 3000

/* ---- Parameters: one run per registered transport ---- */

static int transportIndex[WEFT_MAX_TRANSPORTS];

/* Every transport; WEFT_TEST_TRANSPORT=NAME: that one alone (the RDMA VM runs verbs's, whose
 * device only it has: the host's make check runs the others, ~25x faster than TCG). */
static struct criterion_test_params transportParams(void) {
  const char *only = getenv("WEFT_TEST_TRANSPORT");
  size_t n = 0;
  for (int i = 0; i < weftTransportCount(); i++)
    if (only == NULL || strcmp(only, weftTransports[i]->name) == 0) transportIndex[n++] = i;
  return cr_make_param_array(int, transportIndex, n);
}

/* Selects transport t for the communicators this test creates, or skips the test. */
static const struct weftTransportOps *useTransport(int t) {
  const struct weftTransportOps *ops = weftTransports[t];
  char why[256] = "";
  /* Named first: a transport used only where asked for (ucx over TCP sockets) is usable here
   * once WEFT_TRANSPORTS names it. */
  setenv("WEFT_TRANSPORTS", ops->name, 1);
  if (!ops->query(why, sizeof why)) cr_skip_test("[needs %s] transport %s unavailable: %s", ops->name, ops->name, why);
  cr_log_info("transport %s", ops->name);
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  return ops;
}

/* ---- Message pattern: sizes and bytes both ends derive from (seed, index) ---- */


enum sizeMode { SIZES_SMALL, SIZES_EDGES, SIZES_RANDOM, SIZES_FULL };

static size_t messageBytes(enum sizeMode mode, uint64_t seed, size_t i, size_t slotBytes) {
  static const size_t edges[] = {0, 1, 0, 7, 8, 4096};
  switch (mode) {
    case SIZES_SMALL: return 8 + i % 57;
    case SIZES_EDGES:
      if (i % 4 == 1) return slotBytes;
      if (i % 4 == 3) return slotBytes - 1 - i % 3;
      return edges[i % 6];
    case SIZES_RANDOM: return (size_t)(testMix(seed ^ (i * 2 + 1)) % (slotBytes + 1));
    case SIZES_FULL: return slotBytes;
  }
  return 0;
}

static void fillMessage(uint8_t *p, size_t bytes, uint64_t seed, size_t i) {
  uint64_t state = testMix(seed + i);
  size_t k = 0;
  for (; k + 8 <= bytes; k += 8) {
    state = testMix(state + k);
    memcpy(p + k, &state, 8);
  }
  state = testMix(state + k);
  for (; k < bytes; k++) p[k] = (uint8_t)(state >> (8 * (k & 7)));
}

/* Index of the first wrong byte, or -1. */
static long checkMessage(const uint8_t *p, size_t bytes, uint64_t seed, size_t i,
                         uint8_t *scratch) {
  fillMessage(scratch, bytes, seed, i);
  if (memcmp(p, scratch, bytes) == 0) return -1;
  for (size_t k = 0; k < bytes; k++)
    if (p[k] != scratch[k]) return (long)k;
  return -1;
}

/* ---- Driving the ops ---- */

struct stream {
  enum sizeMode mode;
  uint64_t seed;
  size_t count; /* messages each way */
};

static int64_t elapsedSince(int64_t startMs) { return weftNowMs() - startMs; }

/* Sends and receives `count` messages each way at once, whichever can move. */
static long exchange(weftComm_t comm, int rank, const struct stream *m) {
  struct weftConn *send = &comm->ring.send, *recv = &comm->ring.recv;
  size_t slotBytes = send->slotBytes < recv->slotBytes ? send->slotBytes : recv->slotBytes;
  uint64_t sendSeed = m->seed ^ (uint64_t)rank, recvSeed = m->seed ^ (uint64_t)(1 - rank);
  uint8_t *scratch = malloc(slotBytes + 1);
  size_t sent = 0, received = 0;
  long failures = 0;
  int64_t lastMove = weftNowMs();
  while ((sent < m->count || received < m->count) && failures == 0) {
    int moved = 0;
    void *out = NULL;
    if (sent < m->count && send->ops->sendSlot(send, &out) != weftSuccess) failures++;
    if (out != NULL) {
      size_t bytes = messageBytes(m->mode, sendSeed, sent, slotBytes);
      fillMessage(out, bytes, sendSeed, sent);
      if (send->ops->sendPost(send, bytes) != weftSuccess) failures++;
      sent++;
      moved = 1;
    }
    const void *in = NULL;
    size_t bytes = 0;
    if (received < m->count && recv->ops->recvSlot(recv, &in, &bytes) != weftSuccess) failures++;
    if (in != NULL) {
      size_t want = messageBytes(m->mode, recvSeed, received, slotBytes);
      long bad = bytes == want ? checkMessage(in, bytes, recvSeed, received, scratch) : -2;
      if (bad != -1) {
        fprintf(stderr, "%s rank %d: message %zu: %zu bytes (want %zu), first wrong byte %ld\n",
                send->ops->name, rank, received, bytes, want, bad);
        failures++;
      }
      if (recv->ops->recvDone(recv) != weftSuccess) failures++;
      received++;
      moved = 1;
    }
    if (moved) {
      lastMove = weftNowMs();
    } else if (elapsedSince(lastMove) > HANG_MS) {
      fprintf(stderr, "%s rank %d: hang: %zu of %zu sent, %zu received\n", send->ops->name, rank,
              sent, m->count, received);
      failures++;
    } else {
      sched_yield();
    }
  }
  if (failures) fprintf(stderr, "rank %d: %s\n", rank, weftGetLastError(NULL));
  free(scratch);
  return failures;
}

static long exchangeBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks;
  const char *want = getenv("WEFT_TRANSPORTS");
  if (strcmp(comm->ring.send.ops->name, want) != 0 ||
      strcmp(comm->ring.recv.ops->name, want) != 0) {
    fprintf(stderr, "rank %d: ring uses %s/%s, not %s\n", rank, comm->ring.send.ops->name,
            comm->ring.recv.ops->name, want);
    return 1;
  }
  return exchange(comm, rank, arg);
}

/* The descriptors of this process, once the bootstrap root thread has let its own go. */
static int settledFds(int expected) {
  int64_t until = weftNowMs() + 3000;
  int now = countOpenFds();
  while (now != expected && weftNowMs() < until) {
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
    now = countOpenFds();
  }
  return now;
}

static void runExchange(int t, enum sizeMode mode, size_t count) {
  const struct weftTransportOps *ops = useTransport(t);
  int fds = countOpenFds();
  struct stream m = {.mode = mode, .seed = 0x5eed0000u + (uint64_t)mode, .count = count};
  long failures = runRanks(1, 2, exchangeBody, &m, 120);
  cr_assert_eq(failures, 0, "%s: %ld failures", ops->name, failures);
  cr_assert_eq(settledFds(fds), fds, "%s: descriptors leaked", ops->name);
}

ParameterizedTestParameters(transport, fifo_order_wraparound) { return transportParams(); }
ParameterizedTest(int *t, transport, fifo_order_wraparound, .timeout = 60) {
  runExchange(*t, SIZES_SMALL, 5000);
}

ParameterizedTestParameters(transport, zero_and_full_slots) { return transportParams(); }
ParameterizedTest(int *t, transport, zero_and_full_slots, .timeout = 60) {
  runExchange(*t, SIZES_EDGES, 200);
}

ParameterizedTestParameters(transport, random_payloads) { return transportParams(); }
ParameterizedTest(int *t, transport, random_payloads, .timeout = 60) {
  runExchange(*t, SIZES_RANDOM, 300);
}

/* ---- A peer that closes or dies with data in flight ---- */

struct closing {
  _Atomic int posted; /* messages rank 0 posted before leaving (sender-closes case) */
  int dieHard;        /* the leaving rank _exit()s instead of destroying */
};

/* Waits until op reports an error; 0 if it was weftRemoteError naming the peer. */
static long expectRemoteError(weftComm_t comm, int rank, int peer, int sending) {
  struct weftConn *c = sending ? &comm->ring.send : &comm->ring.recv;
  int64_t start = weftNowMs();
  size_t moved = 0;
  for (;;) {
    weftResult_t rc;
    if (sending) {
      void *slot = NULL;
      rc = c->ops->sendSlot(c, &slot);
      if (rc == weftSuccess && slot != NULL) {
        memset(slot, 0x5a, c->slotBytes);
        rc = c->ops->sendPost(c, c->slotBytes);
        moved++;
      }
    } else {
      const void *slot = NULL;
      size_t bytes;
      rc = c->ops->recvSlot(c, &slot, &bytes);
      if (rc == weftSuccess && slot != NULL) {
        rc = c->ops->recvDone(c);
        moved++;
      }
    }
    if (rc != weftSuccess) {
      char name[16];
      snprintf(name, sizeof name, "rank %d", peer);
      const char *msg = weftGetLastError(NULL);
      if (rc != weftRemoteError || strstr(msg, name) == NULL) {
        fprintf(stderr, "%s rank %d: got %s (\"%s\"), want weftRemoteError naming %s\n",
                c->ops->name, rank, weftGetErrorString(rc), msg, name);
        return 1;
      }
      return 0;
    }
    if (elapsedSince(start) > NOTICE_MS) {
      fprintf(stderr,
              "%s rank %d: no error %d ms after rank %d left (%zu more slots %s): the "
              "transport does not notice a peer that closed\n",
              c->ops->name, rank, NOTICE_MS, peer, moved, sending ? "sent" : "received");
      return 1;
    }
    sched_yield();
  }
}

/* Rank 1 takes a few full slots, then leaves while rank 0 keeps sending. */
static long receiverLeavesBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks;
  struct closing *cl = arg;
  if (rank == 0) return expectRemoteError(comm, 0, 1, 1);
  struct weftConn *c = &comm->ring.recv;
  int64_t start = weftNowMs();
  for (int got = 0; got < 3;) {
    const void *slot = NULL;
    size_t bytes;
    if (c->ops->recvSlot(c, &slot, &bytes) != weftSuccess) return 1;
    if (slot != NULL)
      got += c->ops->recvDone(c) == weftSuccess;
    else if (elapsedSince(start) > HANG_MS)
      return 1;
    else
      sched_yield();
  }
  if (cl->dieHard) _exit(0); /* the kernel closes the sockets, with unread data in them */
  return 0;
}

/* Rank 0 posts what the FIFO takes, then leaves; rank 1 must get all of it, then an error. */
static long senderLeavesBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks;
  struct closing *cl = arg;
  struct weftConn *c = rank == 0 ? &comm->ring.send : &comm->ring.recv;
  uint8_t *scratch = malloc(c->slotBytes);
  long failures = 0;
  if (rank == 0) {
    int posted = 0;
    int64_t idleSince = weftNowMs();
    while (elapsedSince(idleSince) < 200 && posted < 256) { /* until the FIFO stays full */
      void *slot = NULL;
      if (c->ops->sendSlot(c, &slot) != weftSuccess) break;
      if (slot == NULL) {
        sched_yield();
        continue;
      }
      fillMessage(slot, c->slotBytes, 77, (size_t)posted);
      failures += c->ops->sendPost(c, c->slotBytes) != weftSuccess;
      posted++;
      idleSince = weftNowMs();
    }
    atomic_store(&cl->posted, posted);
    free(scratch);
    if (cl->dieHard) _exit(failures ? 1 : 0);
    return failures;
  }
  /* Threads: start reading only once rank 0 has filled the FIFO and is leaving, so data is
   * in flight when it closes. */
  int posted = -1;
  while (!cl->dieHard && (posted = atomic_load(&cl->posted)) < 0) sched_yield();
  for (int got = 0; failures == 0; got++) {
    const void *slot = NULL;
    size_t bytes = 0;
    int64_t start = weftNowMs();
    weftResult_t rc;
    while ((rc = c->ops->recvSlot(c, &slot, &bytes)) == weftSuccess && slot == NULL &&
           elapsedSince(start) < NOTICE_MS)
      sched_yield();
    if (rc == weftSuccess && slot == NULL) {
      fprintf(stderr,
              "%s rank 1: neither data nor an error %d ms after rank 0 left (%d slots "
              "received): the transport does not notice a peer that closed\n",
              c->ops->name, NOTICE_MS, got);
      failures++;
    } else if (rc != weftSuccess) {
      const char *msg = weftGetLastError(NULL);
      if (rc != weftRemoteError || strstr(msg, "rank 0") == NULL) {
        fprintf(stderr, "%s rank 1: got %s (\"%s\"), want weftRemoteError naming rank 0\n",
                c->ops->name, weftGetErrorString(rc), msg);
        failures++;
      }
      if (posted >= 0 && got != posted) {
        fprintf(stderr, "%s rank 1: %d slots arrived of %d posted before rank 0 closed\n",
                c->ops->name, got, posted);
        failures++;
      }
      break;
    } else {
      long bad = bytes == c->slotBytes ? checkMessage(slot, bytes, 77, (size_t)got, scratch) : -2;
      if (bad != -1) {
        fprintf(stderr, "%s rank 1: slot %d corrupt (%zu bytes, first wrong byte %ld)\n",
                c->ops->name, got, bytes, bad);
        failures++;
      }
      failures += c->ops->recvDone(c) != weftSuccess;
    }
  }
  free(scratch);
  return failures;
}

static void runClosing(int t, rankBody body, int procs, int dieHard) {
  const struct weftTransportOps *ops = useTransport(t);
  struct closing cl = {.posted = -1, .dieHard = dieHard};
  long failures = runRanks(procs, 2 / procs, body, &cl, 60);
  cr_assert_eq(failures, 0, "%s: %ld failures (see stderr)", ops->name, failures);
}

ParameterizedTestParameters(transport, receiver_closes_in_flight) { return transportParams(); }
ParameterizedTest(int *t, transport, receiver_closes_in_flight, .timeout = 60) {
  runClosing(*t, receiverLeavesBody, 1, 0);
}

ParameterizedTestParameters(transport, sender_closes_in_flight) { return transportParams(); }
ParameterizedTest(int *t, transport, sender_closes_in_flight, .timeout = 60) {
  runClosing(*t, senderLeavesBody, 1, 0);
}

ParameterizedTestParameters(transport, receiver_dies) { return transportParams(); }
ParameterizedTest(int *t, transport, receiver_dies, .timeout = 60) {
  runClosing(*t, receiverLeavesBody, 2, 1);
}

ParameterizedTestParameters(transport, sender_dies) { return transportParams(); }
ParameterizedTest(int *t, transport, sender_dies, .timeout = 60) {
  runClosing(*t, senderLeavesBody, 2, 1);
}
