/* Which processes and ranks are gone, and the error that names them. A rank of this host
 * whose pid is known is judged by its process; any other by its bootstrap listener, which
 * refuses connections once the rank is gone. Called by the communicator's init, failure and
 * shrink paths, by transports and algorithms that watch a peer's process; it calls only the
 * bootstrap and the leaf modules below it. */
#ifndef WEFT_LIVENESS_H_
#define WEFT_LIVENESS_H_

#include <stdint.h>
#include "weft.h"

struct weftComm;

/* How long a rank of another host may take to accept a connection before it counts as gone
 * in an error message. */
#define WEFT_GONE_PROBE_MS 200

/* 1 if the process is gone (or a zombie nobody reaped yet, or exiting). */
int weftProcessGone(int pid);
/* Whether rank r of comm is judged by its process (it shares this host and its pid is known),
 * else by its bootstrap listener. */
int weftRankByProcess(const struct weftComm *comm, int r);
/* Marks in gone[] (one flag per rank; a mark is never undone: deaths are permanent) the ranks
 * of comm that are gone, by weftRankByProcess's rule; a listener not answering within probeMs
 * counts as gone. */
void weftCommMarkGone(struct weftComm *comm, char *gone, int64_t probeMs);
/* For an init or collective that failed with rc, most likely at a neighbour of a dead rank:
 * rc itself when no rank is gone (or comm is aborted, or knows no peers yet), else
 * weftRemoteError with this thread's last error followed by the dead ranks and the ranks of
 * other hosts whose listener is closed. Closes comm's bootstrap ring first, so that peers
 * blocked on it fail too. */
weftResult_t weftCommNameGone(struct weftComm *comm, weftResult_t rc);

#endif
