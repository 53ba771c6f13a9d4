/* PreMulSum ops (weftRedOpCreatePreMulSum, lib/redop.c): what the collectives' entry
 * (lib/coll.c, lib/collcheck.c) and the communicator's end (lib/comm.c) call. */
#ifndef WEFT_REDOP_H_
#define WEFT_REDOP_H_

#include "core.h"

struct weftRedOps;

/* Whether op is a value weftRedOpCreatePreMulSum hands out (256 and up), live or not. */
int weftRedOpIsHandle(weftRedOp_t op);

/* For a call of api on comm with datatype type: op (a handle) must be a live op of comm, made
 * for type; else weftInvalidArgument with the reason. */
weftResult_t weftRedOpCheck(const struct weftComm *comm, const char *api, weftRedOp_t op,
                            weftDataType_t type);

/* A validated collective (count > 0), when it is called: when args->op is a handle, checks
 * it again, copies its scalar into args->scalar and turns args->op into WEFT_OP_PREMULSUM
 * (reduce.h). Nothing otherwise. */
weftResult_t weftRedOpBegin(struct weftComm *comm, struct weftCollArgs *args);
/* For args->op == WEFT_OP_PREMULSUM, just before the algorithm runs: writes args->scalar *
 * sendbuff (into recvbuff where it is this rank's whole input's size, else into the
 * communicator's scratch, grown as needed: weftSystemError when it cannot be) and points
 * args->sendbuff at it, so the algorithm runs a Sum. */
weftResult_t weftRedOpApply(struct weftComm *comm, struct weftCollArgs *args);

/* Frees a communicator's ops and scratch (NULL: nothing). */
void weftRedOpsFree(struct weftRedOps *ops);

#endif
