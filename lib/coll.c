/* Collective entry points: validate the arguments, let the tuner choose, run. */
#include "check.h"
#include "core.h"

/* The AllReduce entry point: validate, choose, run. */
weftResult_t weftAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                           weftStream_t stream) {
  (void)stream;
  WEFTCHECK(weftCheckComm(comm, "weftAllReduce"));
  struct weftCollArgs args = {sendbuff, recvbuff, count, 0, datatype, op, comm->opSeq};
  weftResult_t rc = weftCheckCollArgs(sendbuff, recvbuff, count, datatype, op, &args.bytes);
  if (rc != weftSuccess) return weftReportTo(comm, rc);
  if (count == 0) return weftSuccess;
  int algo = weftTuneChoose(comm, args.bytes);
  comm->opSeq++;
  rc = weftAlgos[algo]->allReduce(comm->algoState[algo], comm, &args);
  return weftReportTo(comm, rc);
}
