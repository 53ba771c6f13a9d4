/* What a collective would run, by name, without running it (weft extensions): the API side of
 * the tuner (lib/tune.c), which stays below the entry points. */
#include <stddef.h>

#include "api.h"
#include "check.h"
#include "core.h"
#include "errors.h"
#include "log.h"

/* weft extension: what a collective would run, by name. The same argument checks as the
 * collective (without buffers) and the same tuner call; it runs and sends nothing. */
WEFT_PUBLIC weftResult_t weftCommGetCollAlgorithm(const weftComm_t comm, weftColl_t coll,
                                                  size_t count, weftDataType_t datatype,
                                                  const char **name) {
  WEFTCHECK(weftCheckComm(comm, "weftCommGetCollAlgorithm"));
  if (name == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommGetCollAlgorithm: name is NULL"));
  if ((int)coll < 0 || coll >= weftNumColls)
    return weftReportTo(comm, weftSetError(weftInvalidArgument,
                                           "weftCommGetCollAlgorithm: unknown collective %d", (int)coll));
  if ((int)datatype < 0 || datatype >= weftNumTypes)
    return weftReportTo(comm, weftSetError(weftInvalidArgument,
                                           "weftCommGetCollAlgorithm: unknown datatype %d", (int)datatype));
  /* Only the count and type are checked here (weftSum takes every type); the algorithms'
   * costs need no buffers. */
  struct weftCollArgs args = {coll, NULL, NULL, count, 0, datatype, weftSum, 0, 0, {0}};
  weftResult_t rc = weftCheckCount(coll, count, datatype, weftSum, comm->nranks, &args.bytes);
  if (rc != weftSuccess) return weftReportTo(comm, rc);
  if (count == 0) {
    *name = "none";
    return weftSuccess;
  }
  int a = weftTuneChoose(comm, &args);
  if (a < 0) return weftReportTo(comm, weftTuneNoAlgorithm(comm, coll));
  *name = weftAlgos[a]->name;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommGetCollAlgorithm);

WEFT_PUBLIC weftResult_t weftCommGetAlgorithm(const weftComm_t comm, size_t count,
                                              weftDataType_t datatype, const char **name) {
  return weftCommGetCollAlgorithm(comm, weftCollAllReduce, count, datatype, name);
}
WEFT_PROFILING_ALIAS(weftCommGetAlgorithm);
