#include "commfail.h"

#include "core.h"
#include "liveness.h"
#include "p2p.h"

weftResult_t weftCommFail(struct weftComm *comm, weftResult_t rc) {
  int expected = weftSuccess;
  atomic_compare_exchange_strong(&comm->asyncError, &expected, (int)rc);
  if (weftCommAborted(comm)) return rc;
  /* The others time out by themselves; the notes of lasting waits may show who is missing. */
  if (rc == weftTimeout) return weftSigWatchOnTimeout(comm, rc);
  weftCommCloseLinks(comm, rc);
  /* After the links are closed, so the failure spreads while this rank looks: is it a
   * mismatch another host found, and who is dead. */
  return rc == weftRemoteError && expected == weftSuccess ? weftCommNameGone(comm, rc) : rc;
}

void weftCommCloseLinks(struct weftComm *comm, weftResult_t rc) {
  /* Closing every link makes the peers blocked on them fail at once (a shm peer sees the
   * closed flag, a tcp peer the end of stream): the error spreads along the schedule. */
  weftConnCloseReason = rc == weftInvalidUsage ? weftInvalidUsage : 0;
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (comm->algoState[a] != NULL && comm->algoState[a] != (void *)&comm->ring) {
      weftAlgos[a]->finalize(comm->algoState[a]);
      comm->algoState[a] = NULL;
    }
  weftRingClose(&comm->ring);
  weftP2pClose(comm);
  weftConnCloseReason = 0;
  for (int a = 0; weftAlgos[a] != NULL; a++) comm->algoState[a] = NULL;
}
