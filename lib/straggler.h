/* The live straggler report (WEFT_STRAGGLER_REPORT, docs/stragglers.md): each collective's
 * waits are summed per peer (lib/prims.c, weftWaitAccount); every N collectives the ranks
 * all-gather what they waited, each finds the ranks that were consistently last, rank 0
 * prints them, and weftCommGetStragglers returns them. */
#ifndef WEFT_STRAGGLER_H_
#define WEFT_STRAGGLER_H_

#include "core.h"

/* At init, after the algorithms: allocates comm->stragglers when the report is on. */
weftResult_t weftStragglerInit(struct weftComm *comm);
void weftStragglerFree(struct weftComm *comm);
/* Around one collective of the caller (not around the report's own exchange): begin starts
 * the wait sums; end records this rank's wait and, at the end of a window, exchanges and
 * reports. end returns rc when rc is not weftSuccess (nothing recorded), else the exchange's
 * result: a peer that died makes it fail, as any collective would. */
void weftStragglerOpBegin(struct weftComm *comm);
weftResult_t weftStragglerOpEnd(struct weftComm *comm, weftResult_t rc);

/* What one window decided, from all ranks' records (exposed for tests): rec holds nranks
 * rows of `ops` waits (us) followed by nranks per-peer waits (us); out gets at most nranks
 * entries, the returned count. minUs as WEFT_STRAGGLER_MIN_US. */
int weftStragglerAnalyze(const uint32_t *rec, int nranks, int ops, int64_t minUs,
                         weftStraggler_t *out);

#endif
