/* The job's topology: after the peer info (each rank's place on its host) is all-gathered,
 * every rank chooses the NICs of its host's ranks from the same places and the same model, so
 * the ranks of a host agree on the spread without talking; then each rank's own choice is
 * all-gathered, and every rank holds every rank's NIC (for WEFT_GRAPH_DUMP_FILE, weft-topo's
 * view, and messages). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "deadline.h"
#include "log.h"
#include "param.h"

static void fillMine(struct weftComm *comm, int dev) {
  struct weftTopoNicInfo *mine = &comm->nics[comm->rank];
  memset(mine, 0, sizeof *mine);
  mine->dev = dev;
  mine->speedMbps = -1;
  mine->dist = WEFT_TOPO_SAME_MACHINE;
  if (dev < 0) return;
  const struct weftTopoDev *d = &comm->topoHost->devs[dev];
  snprintf(mine->name, sizeof mine->name, "%s", d->name);
  mine->speedMbps = d->speedMbps;
  struct weftTopoLoc at;
  weftTopoPlaceLoc(comm->topoHost, &comm->peers[comm->rank].place, &at);
  mine->dist = (int32_t)weftTopoDistance(&at, &d->loc);
}

static void sanitize(struct weftTopoNicInfo *n) {
  n->name[sizeof n->name - 1] = '\0';
  if (n->dev < -1 || n->dev >= WEFT_TOPO_MAX_DEVS) n->dev = -1;
  if (n->dist < 0 || n->dist >= WEFT_TOPO_NUM_DISTS) n->dist = WEFT_TOPO_SAME_MACHINE;
}

weftResult_t weftTopoJobInit(struct weftComm *comm) {
  int m = comm->nLocalRanks;
  struct weftTopoPlace *places = malloc(sizeof *places * (size_t)m);
  int *nic = malloc(sizeof(int) * (size_t)m);
  comm->nics = calloc((size_t)comm->nranks, sizeof *comm->nics);
  if (places == NULL || nic == NULL || comm->nics == NULL) {
    free(places);
    free(nic);
    return weftSetError(weftSystemError, "out of memory");
  }
  for (int i = 0; i < m; i++) places[i] = comm->peers[comm->localRanks[i]].place;
  const char *spec = weftParamNetDevices();
  weftTopoChooseNics(comm->topoHost, places, m, spec, nic);
  fillMine(comm, nic[comm->localRank]);
  free(places);
  free(nic);
  if (*spec && comm->nics[comm->rank].dev < 0)
    WARN("WEFT_NET_DEVICES=\"%s\" matches no NIC of this host's topology (%s): sockets keep the "
         "bootstrap's interface", spec, comm->topoHost->source);
  WEFTCHECK(weftBootstrapAllGather(comm->boot, comm->nics, sizeof *comm->nics, weftDeadline(comm)));
  for (int r = 0; r < comm->nranks; r++) sanitize(&comm->nics[r]);
  const struct weftTopoNicInfo *mine = &comm->nics[comm->rank];
  INFO(WEFT_TOPO, "rank %d: cores from %d (%d), NUMA node %d, package %d%s; NIC %s (%s)", comm->rank,
       comm->peers[comm->rank].place.core, comm->peers[comm->rank].place.ncores,
       comm->peers[comm->rank].place.numa, comm->peers[comm->rank].place.package,
       comm->peers[comm->rank].place.bound ? ", bound" : "", mine->name[0] ? mine->name : "none",
       weftTopoDistName((enum weftTopoDist)mine->dist));
  return weftSuccess;
}

const struct weftTopoDev *weftTopoMyNic(const struct weftComm *comm) {
  if (comm->nics == NULL || comm->topoHost == NULL) return NULL;
  int dev = comm->nics[comm->rank].dev;
  return dev >= 0 && dev < comm->topoHost->ndevs ? &comm->topoHost->devs[dev] : NULL;
}
