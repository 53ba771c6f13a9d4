/* PreMulSum ops: result = sum over ranks of (scalar * input of that rank), NCCL's
 * ncclRedOpCreatePreMulSum.
 *
 * How it works. The algorithms combine partial results with lib/reduce.c and the ring and
 * tree send a rank's raw input, so the one place where each rank's own input can be scaled
 * for every algorithm alike is the collective's entry: the input is multiplied once by the
 * scalar, in the datatype (weftReduceScale: weftProd's arithmetic, so fp16, bf16 and fp8 are
 * multiplied in fp32 and rounded once to the type, as NCCL's __hmul on half operands does, and
 * integers wrap), and the collective runs as a Sum of the scaled input. For AllReduce, and
 * Reduce on the root, the scaled input is written into recvbuff, which holds exactly one
 * input's worth, and the call continues in place; Reduce elsewhere and ReduceScatter (whose
 * recvbuff is 1/n of the input) write it into a scratch buffer of the communicator, grown to
 * the largest input seen and freed with the communicator. Cost: one more pass over the input
 * (read it, write the scaled copy) before the collective starts; the memory of that copy for
 * Reduce off the root and ReduceScatter.
 *
 * The scalar is read when the call is made and travels in the call's arguments, so calls
 * queued in a group, on a non-blocking communicator or on a stream each keep their own, and
 * the op may be destroyed as soon as the call returns (NCCL's rule). The scratch is the
 * communicator's: its collectives run one at a time (in the caller, the operation thread or
 * the device worker, never two at once).
 *
 * Handles. An op is (tag << 8 | slot): tag names the communicator's table (process-unique
 * among live tables, 1 .. 2^23 - 1), slot one of its 256 ops, so every handle is >= 256 and a
 * positive int, and an op used on the wrong communicator is recognised (unless its own
 * communicator is gone and 2^23 tables were made since). In a collective's signature (mismatch
 * detection, 8 bits for the op) every PreMulSum op is WEFT_OP_PREMULSUM: ranks that call Sum
 * and PreMulSum differ there; ranks whose scalars differ are not detected.
 *
 * Residence: weftScalarDevice is refused. It means "read the scalar from device memory when
 * the collective runs"; this build has no device memory, and honouring it on host memory
 * would make the library read, at every call, memory it cannot check, so a program written
 * for a GPU would fail in a confusing way instead of at creation. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "check.h"
#include "collname.h"
#include "errors.h"
#include "log.h"
#include "redop.h"
#include "reduce.h"

#define SLOT_BITS 8
#define SLOTS (1 << SLOT_BITS)
#define MAX_TAG ((1u << (31 - SLOT_BITS)) - 1)

struct redOpSlot {
  int live;
  weftDataType_t type;
  unsigned char scalar[8]; /* one value of type */
};

struct weftRedOps {
  const struct weftComm *comm;
  uint32_t tag;
  struct weftRedOps *next; /* every live table, for naming an op's communicator */
  struct redOpSlot slot[SLOTS];
  void *scratch; /* used only while a collective of comm runs (they run one at a time) */
  size_t scratchBytes;
};

/* One lock for every table: ops are made and destroyed rarely, and a collective takes it
 * twice (Begin, End) only when it uses one. */
static pthread_mutex_t opsLock = PTHREAD_MUTEX_INITIALIZER;
static struct weftRedOps *tables;
static uint32_t lastTag;

int weftRedOpIsHandle(weftRedOp_t op) {
  return (int64_t)op >= SLOTS && (int64_t)op <= (int64_t)((uint64_t)MAX_TAG << SLOT_BITS | (SLOTS - 1));
}
static uint32_t tagOf(weftRedOp_t op) { return (uint32_t)op >> SLOT_BITS; }
static int slotOf(weftRedOp_t op) { return (int)((uint32_t)op & (SLOTS - 1)); }

static struct weftRedOps *tableWithTag(uint32_t tag) {
  for (struct weftRedOps *t = tables; t != NULL; t = t->next)
    if (t->tag == tag) return t;
  return NULL;
}

/* A tag no live table has (with opsLock). */
static uint32_t freshTag(void) {
  do lastTag = lastTag % MAX_TAG + 1;
  while (tableWithTag(lastTag) != NULL);
  return lastTag;
}

static weftResult_t tableOf(struct weftComm *comm, struct weftRedOps **out) {
  if (comm->redOps == NULL) {
    struct weftRedOps *t = calloc(1, sizeof *t);
    if (t == NULL) return weftSetError(weftSystemError, "weftRedOpCreatePreMulSum: out of memory");
    t->comm = comm;
    t->tag = freshTag();
    t->next = tables;
    tables = t;
    comm->redOps = t;
  }
  *out = comm->redOps;
  return weftSuccess;
}

/* The live slot comm's handle op names, else NULL with the reason (with opsLock). */
static struct redOpSlot *findSlot(const struct weftComm *comm, const char *api, weftRedOp_t op,
                                  weftResult_t *rc) {
  struct weftRedOps *mine = comm->redOps, *owner = tableWithTag(tagOf(op));
  *rc = weftInvalidArgument;
  if (owner != NULL && owner != mine) {
    weftSetError(*rc, "%s: op %d is a PreMulSum op of another communicator (%p), not of this "
                 "one (%p)", api, (int)op, (const void *)owner->comm, (const void *)comm);
    return NULL;
  }
  if (owner == NULL || !owner->slot[slotOf(op)].live) {
    weftSetError(*rc, "%s: unknown reduction op %d: not a built-in op nor a live PreMulSum op "
                 "of this communicator (destroyed already, or never made)", api, (int)op);
    return NULL;
  }
  *rc = weftSuccess;
  return &owner->slot[slotOf(op)];
}

static weftResult_t checkLocked(const struct weftComm *comm, const char *api, weftRedOp_t op,
                                weftDataType_t type, struct redOpSlot **out) {
  weftResult_t rc;
  struct redOpSlot *s = findSlot(comm, api, op, &rc);
  if (s == NULL) return rc;
  if (s->type != type)
    return weftSetError(weftInvalidArgument, "%s: op %d is a PreMulSum op made for datatype %s, "
                        "not %s", api, (int)op, weftTypeName(s->type), weftTypeName(type));
  *out = s;
  return weftSuccess;
}

weftResult_t weftRedOpCheck(const struct weftComm *comm, const char *api, weftRedOp_t op,
                            weftDataType_t type) {
  struct redOpSlot *s;
  pthread_mutex_lock(&opsLock);
  weftResult_t rc = checkLocked(comm, api, op, type, &s);
  pthread_mutex_unlock(&opsLock);
  return rc;
}

/* Bytes of scaled input that recvbuff cannot hold: Reduce off the root, ReduceScatter. */
static size_t scratchNeeded(const struct weftComm *comm, const struct weftCollArgs *a) {
  if (a->coll == weftCollReduceScatter) return a->bytes * (size_t)comm->nranks;
  if (a->coll == weftCollReduce && comm->rank != a->root) return a->bytes;
  return 0;
}

static weftResult_t growScratch(struct weftRedOps *t, size_t bytes, const char *api) {
  if (bytes <= t->scratchBytes) return weftSuccess;
  void *grown = realloc(t->scratch, bytes);
  if (grown == NULL)
    return weftSetError(weftSystemError, "%s: out of memory for the %zu bytes of PreMulSum's "
                        "scaled input", api, bytes);
  t->scratch = grown;
  t->scratchBytes = bytes;
  return weftSuccess;
}

weftResult_t weftRedOpBegin(struct weftComm *comm, struct weftCollArgs *a) {
  if (!weftRedOpIsHandle(a->op)) return weftSuccess;
  struct redOpSlot *s;
  pthread_mutex_lock(&opsLock);
  weftResult_t rc = checkLocked(comm, weftCollName(a->coll), a->op, a->type, &s);
  if (rc == weftSuccess) {
    memcpy(a->scalar, s->scalar, sizeof a->scalar);
    a->op = WEFT_OP_PREMULSUM;
  }
  pthread_mutex_unlock(&opsLock);
  return rc;
}

weftResult_t weftRedOpApply(struct weftComm *comm, struct weftCollArgs *a) {
  struct weftRedOps *t = comm->redOps;
  size_t scratchBytes = scratchNeeded(comm, a);
  WEFTCHECK(growScratch(t, scratchBytes, weftCollName(a->coll)));
  size_t count = a->count * (a->coll == weftCollReduceScatter ? (size_t)comm->nranks : 1);
  void *dst = scratchBytes > 0 ? t->scratch : a->recvbuff;
  weftReduceScale(dst, a->sendbuff, a->scalar, count, a->type);
  a->sendbuff = dst;
  return weftSuccess;
}

void weftRedOpsFree(struct weftRedOps *t) {
  if (t == NULL) return;
  pthread_mutex_lock(&opsLock);
  for (struct weftRedOps **p = &tables; *p != NULL; p = &(*p)->next)
    if (*p == t) {
      *p = t->next;
      break;
    }
  pthread_mutex_unlock(&opsLock);
  free(t->scratch);
  free(t);
}

/* ---- The API ---------------------------------------------------------------------------- */

static weftResult_t checkCreate(weftRedOp_t *op, const void *scalar, weftDataType_t type,
                                weftScalarResidence_t residence) {
  const char *api = "weftRedOpCreatePreMulSum";
  if (op == NULL) return weftSetError(weftInvalidArgument, "%s: op is NULL", api);
  if (scalar == NULL) return weftSetError(weftInvalidArgument, "%s: scalar is NULL", api);
  if ((int)type < 0 || type >= weftNumTypes)
    return weftSetError(weftInvalidArgument, "%s: unknown datatype %d", api, (int)type);
  if (residence == weftScalarDevice)
    return weftSetError(weftInvalidArgument, "%s: weftScalarDevice: this build has no device "
                        "memory; pass the scalar in host memory with weftScalarHostImmediate",
                        api);
  if (residence != weftScalarHostImmediate)
    return weftSetError(weftInvalidArgument, "%s: unknown scalar residence %d (weftScalarDevice "
                        "= 0, weftScalarHostImmediate = 1)", api, (int)residence);
  return weftSuccess;
}

static weftResult_t createLocked(weftRedOp_t *op, const void *scalar, weftDataType_t type,
                                 struct weftComm *comm) {
  struct weftRedOps *t = NULL;
  WEFTCHECK(tableOf(comm, &t));
  for (int i = 0; i < SLOTS; i++) {
    struct redOpSlot *s = &t->slot[i];
    if (s->live) continue;
    *s = (struct redOpSlot){1, type, {0}};
    memcpy(s->scalar, scalar, weftTypeSize(type));
    *op = (weftRedOp_t)(t->tag << SLOT_BITS | (uint32_t)i);
    return weftSuccess;
  }
  return weftSetError(weftInvalidUsage, "weftRedOpCreatePreMulSum: rank %d: %d PreMulSum ops are "
                      "live on this communicator, the most there can be; destroy one first",
                      comm->rank, SLOTS);
}

WEFT_PUBLIC weftResult_t weftRedOpCreatePreMulSum(weftRedOp_t *op, void *scalar,
                                                  weftDataType_t datatype,
                                                  weftScalarResidence_t residence,
                                                  weftComm_t comm) {
  WEFTCHECK(weftCheckComm(comm, "weftRedOpCreatePreMulSum"));
  weftResult_t rc = checkCreate(op, scalar, datatype, residence);
  if (rc == weftSuccess) {
    pthread_mutex_lock(&opsLock);
    rc = createLocked(op, scalar, datatype, comm);
    pthread_mutex_unlock(&opsLock);
  }
  return weftReportTo(comm, rc);
}
WEFT_PROFILING_ALIAS(weftRedOpCreatePreMulSum);

static weftResult_t destroyLocked(weftRedOp_t op, struct weftComm *comm) {
  const char *api = "weftRedOpDestroy";
  if ((unsigned)op < (unsigned)weftNumOps)
    return weftSetError(weftInvalidArgument, "%s: op %d is built-in (%s); only ops made by "
                        "weftRedOpCreatePreMulSum can be destroyed", api, (int)op,
                        weftOpName(op));
  if (!weftRedOpIsHandle(op))
    return weftSetError(weftInvalidArgument, "%s: unknown reduction op %d", api, (int)op);
  weftResult_t rc;
  struct redOpSlot *s = findSlot(comm, api, op, &rc);
  if (s == NULL) return rc;
  s->live = 0;
  return weftSuccess;
}

WEFT_PUBLIC weftResult_t weftRedOpDestroy(weftRedOp_t op, weftComm_t comm) {
  WEFTCHECK(weftCheckComm(comm, "weftRedOpDestroy"));
  pthread_mutex_lock(&opsLock);
  weftResult_t rc = destroyLocked(op, comm);
  pthread_mutex_unlock(&opsLock);
  return weftReportTo(comm, rc);
}
WEFT_PROFILING_ALIAS(weftRedOpDestroy);
