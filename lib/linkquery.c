/* Which transport links this rank to a peer, and over what (weft extension): the transport
 * choice of lib/connect.c (the first in registry order that can connect the pair), asked
 * again without connecting, so a program can report what its ranks use. */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "check.h"
#include "core.h"
#include "errors.h"
#include "transport.h"

static weftResult_t describeChoice(struct weftComm *comm, int peer, const char **transport,
                                   char *device, size_t len) {
  for (int t = 0; weftTransports[t] != NULL; t++) {
    if (comm->transportState[t] == NULL) continue;
    int ok = 0;
    struct weftLinkCaps caps;
    WEFTCHECK(weftTransports[t]->canConnect(comm->transportState[t], &comm->peers[comm->rank],
                                            &comm->peers[peer], &ok, &caps));
    if (!ok) continue;
    *transport = weftTransports[t]->name;
    if (device != NULL && weftTransports[t]->describe != NULL)
      weftTransports[t]->describe(comm->transportState[t], peer, device, len);
    return weftSuccess;
  }
  *transport = "none";
  return weftSuccess;
}

WEFT_PUBLIC weftResult_t weftCommGetPeerTransport(const weftComm_t comm, int peer,
                                                  const char **transport, char *device,
                                                  size_t len) {
  static const char *api = "weftCommGetPeerTransport";
  WEFTCHECK(weftCheckComm(comm, api));
  if (transport == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "%s: transport is NULL", api));
  if (device != NULL && len == 0)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "%s: device has 0 bytes", api));
  if (peer < 0 || peer >= comm->nranks)
    return weftReportTo(comm, weftSetError(weftInvalidArgument,
                                           "%s: peer %d is not a rank of this communicator (0..%d)",
                                           api, peer, comm->nranks - 1));
  if (device != NULL) device[0] = '\0';
  if (peer == comm->rank) {
    *transport = "self";
    return weftSuccess;
  }
  return weftReportTo(comm, describeChoice(comm, peer, transport, device, len));
}
WEFT_PROFILING_ALIAS(weftCommGetPeerTransport);
