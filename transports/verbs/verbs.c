/* Verbs transport: weft's own links over InfiniBand and RoCE (libibverbs, librdmacm for the
 * address and route of RoCE peers). Each direction of a link is a FIFO of slots: the
 * receiver's slots are one registered ring; the sender stages a slot in registered memory of
 * its own and RDMA-WRITEs it WITH IMM (the immediate names the slot) straight into the
 * receiver's slot, inline when small; the receiver polls its CQ for those completions and
 * returns credits by an inline RDMA WRITE of its freed count into the sender's credit word.
 * Several RC QPs per link (WEFT_IB_QPS_PER_CONNECTION) take the slots round-robin. No port
 * listens: QP numbers, GIDs and keys travel in the bootstrap's authenticated blobs. Chosen
 * between hosts (every pair where WEFT_TRANSPORTS names it), before ucx and tcp. See
 * docs/transports/verbs.md. This file: what the machine has (query), the device, port and
 * GID of a communicator (init, finalize), canConnect and the ops table. */
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "core.h"
#include "deadline.h"
#include "log.h"
#include "param.h"
#include "verbs.h"

/* ---- What the machine has ---- */

/* Whether a device has a port in state ACTIVE; the first one in *port. */
static int activePort(struct ibv_context *ctx, int *port) {
  struct ibv_device_attr da;
  if (ibv_query_device(ctx, &da) != 0) return 0;
  for (int p = 1; p <= da.phys_port_cnt; p++) {
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
      *port = p;
      return 1;
    }
  }
  return 0;
}

/* librdmacm opens every RDMA device once per process, on first use, and keeps them for the
 * process's life (its own cache): done here, once, so a communicator's descriptors are all
 * gone after it is destroyed. */
static void warmRdmaCm(void) {
  int n = 0;
  struct ibv_context **devs = rdma_get_devices(&n);
  if (devs != NULL) rdma_free_devices(devs);
}
static pthread_once_t rdmaCmOnce = PTHREAD_ONCE_INIT;

static int verbsQuery(char *why, size_t len) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    snprintf(why, len, "no RDMA device (ibv_get_device_list found none)");
    if (list != NULL) ibv_free_device_list(list);
    return 0;
  }
  int usable = 0;
  for (int i = 0; i < n && !usable; i++) {
    struct ibv_context *ctx = ibv_open_device(list[i]);
    int port;
    if (ctx == NULL) continue;
    usable = activePort(ctx, &port);
    ibv_close_device(ctx);
  }
  if (!usable)
    snprintf(why, len, "no RDMA device with an active port (%d device(s), none ACTIVE: "
             "ibv_devinfo shows their state)", n);
  ibv_free_device_list(list);
  if (usable) pthread_once(&rdmaCmOnce, warmRdmaCm);
  return usable;
}

/* ---- Parameters ---- */

/* Whether WEFT_TRANSPORTS asks for this transport by name (an exclusion list does not). */
static int askedFor(void) {
  const char *list = weftParamTransports();
  if (*list == '\0' || *list == '^') return 0;
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ",");
    if (n == 5 && strncasecmp(p, "verbs", 5) == 0) return 1;
    p += n + (p[n] == ',');
  }
  return 0;
}

/* WEFT_IB_HCA's match of device dev, port port: NCCL_IB_HCA's syntax ("mlx5_0:1,mlx5_1"
 * prefixes, "^" first excludes, "=" first exact names). */
static int hcaAllows(const char *spec, const char *dev, int port) {
  if (*spec == '\0') return 1;
  int exclude = spec[0] == '^';
  spec += exclude;
  int exact = spec[0] == '=';
  spec += exact;
  int hit = 0;
  for (const char *p = spec; *p && !hit;) {
    size_t n = strcspn(p, ",");
    char item[VERBS_NAME_BYTES];
    snprintf(item, sizeof item, "%.*s", (int)(n < sizeof item ? n : sizeof item - 1), p);
    int itemPort = 0;
    char *colon = strchr(item, ':');
    if (colon != NULL) {
      itemPort = atoi(colon + 1);
      *colon = '\0';
    }
    int nameHit = exact ? strcmp(item, dev) == 0 : strncmp(item, dev, strlen(item)) == 0;
    hit = nameHit && (itemPort == 0 || itemPort == port);
    p += n + (p[n] == ',');
  }
  return exclude ? !hit : hit;
}

/* ---- Device, port and GID ---- */

struct verbsCand {
  struct ibv_device *dev;
  int port;
};

/* The device and port of this rank: the RDMA device of the NIC the topology model gave it
 * (lib/topo_job.c) when it is a candidate, else the candidates shared round-robin among the
 * host's ranks. */
static int choose(struct verbsState *s, const struct verbsCand *cand, int n) {
  const struct weftTopoDev *nic = weftTopoMyNic(s->comm);
  if (nic != NULL && nic->rdma[0] != '\0')
    for (int i = 0; i < n; i++)
      if (strcmp(ibv_get_device_name(cand[i].dev), nic->rdma) == 0) return i;
  return s->comm->localRank % n;
}

static weftResult_t openDevice(struct verbsState *s) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == NULL) return weftSetSysError(errno, "verbs: ibv_get_device_list");
  struct verbsCand cand[64];
  int ncand = 0;
  const char *spec = weftParamIbHca();
  for (int i = 0; i < n && ncand < 64; i++) {
    struct ibv_context *ctx = ibv_open_device(list[i]);
    if (ctx == NULL) continue;
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da) == 0)
      for (int p = 1; p <= da.phys_port_cnt && ncand < 64; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
        if (!hcaAllows(spec, ibv_get_device_name(list[i]), p)) continue;
        cand[ncand++] = (struct verbsCand){list[i], p};
      }
    ibv_close_device(ctx);
  }
  weftResult_t rc = weftSuccess;
  if (ncand == 0) {
    rc = weftSetError(*spec ? weftInvalidArgument : weftSystemError,
                      "verbs: no active RDMA port%s%s%s (%d device(s))", *spec ? " matches WEFT_IB_HCA=\"" : "",
                      spec, *spec ? "\"" : "", n);
  } else {
    int c = choose(s, cand, ncand);
    snprintf(s->dev, sizeof s->dev, "%s", ibv_get_device_name(cand[c].dev));
    s->port = cand[c].port;
    s->ctx = ibv_open_device(cand[c].dev);
    if (s->ctx == NULL) rc = weftSetSysError(errno, "verbs: opening %s", s->dev);
  }
  ibv_free_device_list(list);
  return rc;
}

/* RoCE: WEFT_IB_GID_INDEX, else the IPv4-mapped RoCE v2 GID (index 1 on rxe). IB: the GID at
 * WEFT_IB_GID_INDEX (with a GRH), else none (the LID routes). */
static weftResult_t chooseGid(struct verbsState *s) {
  int want = (int)weftParamIbGidIndex();
  s->gidIndex = -1;
  if (want >= 0) {
    if (want >= s->portAttr.gid_tbl_len || ibv_query_gid(s->ctx, (uint8_t)s->port, want, &s->gid) != 0)
      return weftSetError(weftInvalidArgument,
                          "verbs: WEFT_IB_GID_INDEX=%d: %s port %d has no such GID (its table has %d)",
                          want, s->dev, s->port, s->portAttr.gid_tbl_len);
    s->gidIndex = want;
    return weftSuccess;
  }
  if (s->linkLayer != IBV_LINK_LAYER_ETHERNET) return weftSuccess;
  int fallback = -1;
  for (int i = 0; i < s->portAttr.gid_tbl_len; i++) {
    struct ibv_gid_entry e;
    if (ibv_query_gid_ex(s->ctx, (uint32_t)s->port, (uint32_t)i, &e, 0) != 0) continue;
    if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    union ibv_gid g = e.gid;
    if (weftVerbsGidIpv4(g.raw) != 0) {
      s->gidIndex = i;
      s->gid = g;
      return weftSuccess;
    }
    if (fallback < 0 && (g.global.subnet_prefix != 0 || g.global.interface_id != 0)) fallback = i;
  }
  if (fallback < 0)
    return weftSetError(weftSystemError,
                        "verbs: %s port %d (RoCE) has no RoCE v2 GID (is an IP address set on its "
                        "network interface? WEFT_IB_GID_INDEX chooses one)", s->dev, s->port);
  s->gidIndex = fallback;
  return ibv_query_gid(s->ctx, (uint8_t)s->port, fallback, &s->gid) == 0
             ? weftSuccess
             : weftSetSysError(errno, "verbs: ibv_query_gid");
}

/* The port's rate from its active speed and width, in GB/s (0 unknown). */
static double portGBs(const struct ibv_port_attr *pa) {
  double gbps;
  switch (pa->active_speed) {
    case 1: gbps = 2.5; break;
    case 2: gbps = 5; break;
    case 4: case 8: gbps = 10; break;
    case 16: gbps = 14; break;
    case 32: gbps = 25; break;
    case 64: gbps = 50; break;
    case 128: gbps = 100; break;
    default: gbps = 0;
  }
  int lanes;
  switch (pa->active_width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: lanes = 0;
  }
  return gbps * lanes / 8;
}

static weftResult_t verbsFinalize(void *state);

static weftResult_t verbsInit(struct weftComm *comm, void **state) {
  struct verbsState *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "verbs: out of memory");
  s->rank = comm->rank;
  s->comm = comm;
  s->asked = askedFor();
  s->timeout = (int)weftParamIbTimeout();
  s->shape = (struct verbsShape){.slotBytes = (uint64_t)weftParamIbSlotBytes(),
                                 .nslots = (uint32_t)weftParamIbSlots(),
                                 .nqps = (uint32_t)weftParamIbQpsPerConnection()};
  weftResult_t rc = openDevice(s);
  if (rc == weftSuccess && ibv_query_port(s->ctx, (uint8_t)s->port, &s->portAttr) != 0)
    rc = weftSetSysError(errno, "verbs: ibv_query_port %s %d", s->dev, s->port);
  if (rc == weftSuccess) {
    s->linkLayer = s->portAttr.link_layer;
    rc = chooseGid(s);
  }
  if (rc == weftSuccess && (s->pd = ibv_alloc_pd(s->ctx)) == NULL)
    rc = weftSetSysError(errno, "verbs: ibv_alloc_pd on %s", s->dev);
  int err = rc == weftSuccess ? weftVerbsEventsInit(s) : 0;
  if (err != 0) rc = weftSetSysError(err, "verbs: making %s's event descriptor non-blocking", s->dev);
  if (rc != weftSuccess) {
    verbsFinalize(s);
    return rc;
  }
  double bw = strtod(weftParamIbBwGbps(), NULL), gbs = portGBs(&s->portAttr);
  s->caps.latencyUs = strtod(weftParamIbLatUs(), NULL);
  s->caps.bandwidthGBs = bw > 0 ? bw : gbs > 0 ? gbs : strtod(weftParamTcpBwGbps(), NULL);
  char gid[64] = "none";
  if (s->gidIndex >= 0)
    snprintf(gid, sizeof gid, "%d", s->gidIndex);
  INFO(WEFT_INIT, "verbs: %s port %d (%s, LID %u, GID index %s, MTU %d), %u QP(s) per link, "
       "%.2f us, %.1f GB/s, links %s", s->dev, s->port,
       s->linkLayer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", s->portAttr.lid, gid,
       128 << s->portAttr.active_mtu, s->shape.nqps, s->caps.latencyUs, s->caps.bandwidthGBs,
       s->asked ? "every pair (WEFT_TRANSPORTS)" : "other hosts");
  *state = s;
  return weftSuccess;
}

/* Waits up to VERBS_LINGER_MS for closed links' last writes and CLOSEs, then releases
 * everything: QPs, CQs, MRs, the PD and the device. */
static weftResult_t verbsFinalize(void *state) {
  struct verbsState *s = state;
  if (s == NULL) return weftSuccess;
  int64_t until = weftNowMs() + VERBS_LINGER_MS;
  while (weftVerbsReap(s, 0) > 0 && weftNowMs() < until) {
  }
  weftVerbsReap(s, 1);
  if (s->pd != NULL) ibv_dealloc_pd(s->pd);
  if (s->ctx != NULL) ibv_close_device(s->ctx);
  free(s);
  return weftSuccess;
}

static weftResult_t verbsCanConnect(void *state, const struct weftPeerInfo *me,
                                    const struct weftPeerInfo *peer, int *ok,
                                    struct weftLinkCaps *caps) {
  struct verbsState *s = state;
  *ok = s->asked || me->hostHash != peer->hostHash;
  *caps = s->caps;
  return weftSuccess;
}

/* The device, port and GID this rank's queue pairs use, and the port's speed. */
static void verbsDescribe(void *state, int peer, char *buf, size_t len) {
  const struct verbsState *s = state;
  (void)peer;
  const uint8_t *g = s->gid.raw;
  char where[64] = "";
  if (s->linkLayer == IBV_LINK_LAYER_ETHERNET && weftVerbsGidIpv4(g) != 0)
    snprintf(where, sizeof where, "RoCE v2, %u.%u.%u.%u", g[12], g[13], g[14], g[15]);
  else if (s->linkLayer == IBV_LINK_LAYER_ETHERNET)
    snprintf(where, sizeof where, "RoCE");
  else
    snprintf(where, sizeof where, "InfiniBand, LID %u", (unsigned)s->portAttr.lid);
  snprintf(buf, len, "%s port %d, GID index %d (%s), %d QP%s a link, %.1f GB/s", s->dev, s->port,
           s->gidIndex, where, s->shape.nqps, s->shape.nqps == 1 ? "" : "s", s->caps.bandwidthGBs);
}

const struct weftTransportOps weftTransportVerbs = {
    .size = sizeof(struct weftTransportOps),
    .name = "verbs",
    .query = verbsQuery,
    .init = verbsInit,
    .canConnect = verbsCanConnect,
    .setup = weftVerbsSetup,
    .connect = weftVerbsConnect,
    .connected = NULL,
    .sendSlot = weftVerbsSendSlot,
    .sendPost = weftVerbsSendPost,
    .recvSlot = weftVerbsRecvSlot,
    .recvDone = weftVerbsRecvDone,
    .progress = NULL,
    .close = weftVerbsClose,
    .finalize = verbsFinalize,
    .describe = verbsDescribe,
    .block = weftVerbsBlock,
};
