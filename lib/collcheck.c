/* The arguments of one collective call, checked at the API as NCCL documents each call: the
 * datatype and op, the root, the buffers each rank needs and their sizes, and which overlaps
 * are the in-place forms. Every refusal is weftInvalidArgument with its own message, named
 * after the collective. */
#include <stdint.h>

#include "check.h"
#include "collname.h"
#include "core.h"
#include "log.h"
#include "redop.h"
#include "reduce.h"

static int reduces(weftColl_t coll) {
  return coll == weftCollAllReduce || coll == weftCollReduce || coll == weftCollReduceScatter;
}

/* Elements of the larger buffer of a call, in units of count: n for the gathered or scattered
 * side of AllGather, ReduceScatter, AlltoAll, Gather and Scatter, else 1. */
static size_t widest(weftColl_t coll, int nranks) {
  return coll == weftCollAllReduce || coll == weftCollBroadcast || coll == weftCollReduce
             ? 1 : (size_t)nranks;
}

weftResult_t weftCheckCount(weftColl_t coll, size_t count, weftDataType_t type, weftRedOp_t op,
                            int nranks, size_t *bytes) {
  const char *name = weftCollName(coll);
  if ((int)type < 0 || type >= weftNumTypes)
    return weftSetError(weftInvalidArgument, "%s: unknown datatype %d", name, (int)type);
  if (reduces(coll) && ((int)op < 0 || op >= weftNumOps))
    return weftSetError(weftInvalidArgument, "%s: unknown reduction op %d", name, (int)op);
  if (reduces(coll) && op == weftAvg && !weftTypeIsFloat(type))
    return weftSetError(weftInvalidArgument,
                        "%s: weftAvg is supported for floating-point types only, not %s", name,
                        weftTypeName(type));
  size_t typeSize = weftTypeSize(type), wide = widest(coll, nranks);
  if (count > SIZE_MAX / typeSize / wide || count * typeSize * wide > (size_t)PTRDIFF_MAX)
    return weftSetError(weftInvalidArgument, "%s: count %zu of %s%s overflows the byte size", name,
                        count, weftTypeName(type), wide > 1 ? " per rank" : "");
  *bytes = count * typeSize;
  return weftSuccess;
}

struct weftCallBuffers weftCallBuffersOf(const struct weftCollArgs *a, int rank, int nranks) {
  size_t b = a->bytes, all = b * (size_t)nranks;
  int isRoot = rank == a->root;
  struct weftCallBuffers c = {1, 1, b, b, -1, 0};
  switch (a->coll) {
    case weftCollBroadcast: c.needSend = isRoot; break;
    case weftCollReduce: c.needRecv = isRoot; break;
    case weftCollAllGather: c.recvBytes = all; c.inPlaceAt = (ptrdiff_t)(b * (size_t)rank); break;
    case weftCollReduceScatter:
      c.sendBytes = all, c.inPlaceAt = (ptrdiff_t)(b * (size_t)rank), c.recvInsideSend = 1;
      break;
    case weftCollAlltoAll: c.sendBytes = c.recvBytes = all; break;
    case weftCollGather:
      c.needRecv = isRoot, c.recvBytes = all, c.inPlaceAt = (ptrdiff_t)(b * (size_t)a->root);
      break;
    case weftCollScatter:
      c.needSend = isRoot, c.sendBytes = all, c.inPlaceAt = (ptrdiff_t)(b * (size_t)a->root);
      c.recvInsideSend = 1;
      break;
    default: break;
  }
  return c;
}

/* Overlapping buffers are refused unless they are the collective's in-place form. */
static weftResult_t checkOverlap(const struct weftCollArgs *a, const struct weftCallBuffers *c) {
  const char *s = a->sendbuff, *r = a->recvbuff;
  if (!c->needSend || !c->needRecv || s == NULL || r == NULL) return weftSuccess;
  if (!(s < r + c->recvBytes && r < s + c->sendBytes)) return weftSuccess;
  const char *name = weftCollName(a->coll);
  if (c->inPlaceAt < 0) {
    if (s == r) return weftSuccess;
    return weftSetError(weftInvalidArgument, "%s: sendbuff and recvbuff overlap without being "
                        "equal (in-place needs sendbuff == recvbuff)", name);
  }
  if (c->recvInsideSend ? r == s + c->inPlaceAt : s == r + c->inPlaceAt) return weftSuccess;
  return weftSetError(weftInvalidArgument, "%s: sendbuff and recvbuff overlap but are not the "
                      "in-place form (%s + %td bytes)", name,
                      c->recvInsideSend ? "recvbuff == sendbuff" : "sendbuff == recvbuff",
                      c->inPlaceAt);
}

weftResult_t weftCheckCall(const struct weftComm *comm, struct weftCollArgs *a) {
  const char *name = weftCollName(a->coll);
  /* A PreMulSum op is checked against comm's ops once the datatype is known to be valid;
   * its arithmetic is a Sum's as far as the count is concerned. */
  int userOp = reduces(a->coll) && weftRedOpIsHandle(a->op);
  WEFTCHECK(weftCheckCount(a->coll, a->count, a->type, userOp ? weftSum : a->op, comm->nranks,
                           &a->bytes));
  if (userOp) WEFTCHECK(weftRedOpCheck(comm, name, a->op, a->type));
  int rooted = a->coll == weftCollBroadcast || a->coll == weftCollReduce ||
               a->coll == weftCollGather || a->coll == weftCollScatter;
  if (rooted && (a->root < 0 || a->root >= comm->nranks))
    return weftSetError(weftInvalidArgument, "%s: root %d outside [0, %d)", name, a->root,
                        comm->nranks);
  if (!rooted) a->root = -1;
  if (!reduces(a->coll)) a->op = weftSum; /* unused: one value in every signature */
  struct weftCallBuffers c = weftCallBuffersOf(a, comm->rank, comm->nranks);
  if (a->count > 0 && c.needSend && a->sendbuff == NULL)
    return weftSetError(weftInvalidArgument, "%s: sendbuff is NULL with count %zu", name, a->count);
  if (a->count > 0 && c.needRecv && a->recvbuff == NULL)
    return weftSetError(weftInvalidArgument, "%s: recvbuff is NULL with count %zu", name, a->count);
  return a->count > 0 ? checkOverlap(a, &c) : weftSuccess;
}
