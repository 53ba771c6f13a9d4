/* The live straggler report (WEFT_STRAGGLER_REPORT, docs/stragglers.md): each collective's
 * waits are summed per peer (lib/wait.c, weftWaitAccount) and transports meter how data
 * trickles in from each peer; every N collectives the ranks all-gather what they waited and
 * metered, each finds the ranks that were consistently last and those behind slow links,
 * rank 0 prints them, and weftCommGetStragglers returns them. */
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

/* A rank is weighed as last, or its links as slow, over at least 1/LAST_SHARE of a window. */
#define WEFT_STRAGGLER_LAST_SHARE 10

/* One rank's record of a window of `ops` collectives on n ranks: its wait in each collective
 * (us), then per peer what it waited on that peer (us), how long that peer's data trickled
 * in (us) and how much came (KiB), from the link meters (lib/transport.h). */
#define WEFT_STRAGGLER_REC_WORDS(ops, n) ((size_t)(ops) + 3 * (size_t)(n))
#define WEFT_STRAGGLER_WAIT_AT(ops, n) ((size_t)(ops))
#define WEFT_STRAGGLER_TRICKLE_AT(ops, n) ((size_t)(ops) + (size_t)(n))
#define WEFT_STRAGGLER_KIB_AT(ops, n) ((size_t)(ops) + 2 * (size_t)(n))

/* What one window decided, from all ranks' records (exposed for tests): rec holds nranks
 * records; out gets at most nranks entries, the returned count (-1: out of memory). minUs as
 * WEFT_STRAGGLER_MIN_US. */
int weftStragglerAnalyze(const uint32_t *rec, int nranks, int ops, int64_t minUs,
                         weftStraggler_t *out);
/* The slow-link verdict of the same records (lib/straggler_links.c): per rank, slowLinks[r]
 * the slow links it is on when it is named, else minus those it shares with a named rank, and
 * slowestMBps[r] the rate of the slowest; returns how many ranks it names (-1: out of
 * memory). */
int weftStragglerSlowLinks(const uint32_t *rec, int nranks, int ops, int64_t minUs,
                           int *slowLinks, double *slowestMBps);

#endif
