/* UCX transport: links over UCX's UCP tag API, for fabrics UCX drives and weft's own
 * transports do not, or sites that standardise on UCX. Each direction of a link is a FIFO of
 * slots on both ends: the sender's slot goes whole, as one tagged send, into the receiver's
 * slot of the same number, where a receive is always posted; the receiver returns a credit
 * for every slot it frees, and each side tells the other why it closes. Tags are keyed with a
 * secret of the link carried in the bootstrap's authenticated blobs, so only the two ranks
 * can name its messages. A progress thread per communicator sleeps on the worker's event
 * descriptor and progresses it, so data moves while the caller is away from weft. Chosen when
 * WEFT_TRANSPORTS names it, else between hosts when UCX has a network device faster than TCP
 * sockets (weft's own transports, earlier in the registry, win where they can). See
 * docs/transports/ucx.md. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <uct/api/uct.h>

#include "check.h"
#include "core.h"
#include "deadline.h"
#include "log.h"
#include "param.h"
#include "ucx.h"

/* ---- What UCX has on this machine ---- */

/* The network devices UCX's transports offer (UCT's resources): whether any is other than
 * TCP sockets, and its name, for the link rate. */
struct ucxDevices {
  int net, fast;
  char fastTl[UCT_TL_NAME_MAX], fastDev[UCT_DEVICE_NAME_MAX];
};

static void scanMd(uct_component_h comp, const char *mdName, struct ucxDevices *d) {
  uct_md_config_t *cfg;
  uct_md_h md;
  if (uct_md_config_read(comp, NULL, NULL, &cfg) != UCS_OK) return;
  ucs_status_t st = uct_md_open(comp, mdName, cfg, &md);
  uct_config_release(cfg);
  if (st != UCS_OK) return;
  uct_tl_resource_desc_t *res;
  unsigned n;
  if (uct_md_query_tl_resources(md, &res, &n) == UCS_OK) {
    for (unsigned i = 0; i < n; i++) {
      if (res[i].dev_type != UCT_DEVICE_TYPE_NET) continue;
      d->net = 1;
      if (strcmp(res[i].tl_name, "tcp") == 0 || d->fast) continue;
      d->fast = 1;
      snprintf(d->fastTl, sizeof d->fastTl, "%s", res[i].tl_name);
      snprintf(d->fastDev, sizeof d->fastDev, "%s", res[i].dev_name);
    }
    uct_release_tl_resource_list(res);
  }
  uct_md_close(md);
}

static void scanDevices(struct ucxDevices *d) {
  memset(d, 0, sizeof *d);
  uct_component_h *comps;
  unsigned ncomps;
  if (uct_query_components(&comps, &ncomps) != UCS_OK) return;
  for (unsigned c = 0; c < ncomps; c++) {
    uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
    if (uct_component_query(comps[c], &attr) != UCS_OK || attr.md_resource_count == 0) continue;
    uct_md_resource_desc_t *mds = calloc(attr.md_resource_count, sizeof *mds);
    if (mds == NULL) continue;
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds;
    if (uct_component_query(comps[c], &attr) == UCS_OK)
      for (unsigned m = 0; m < attr.md_resource_count; m++) scanMd(comps[c], mds[m].md_name, d);
    free(mds);
  }
  uct_release_component_list(comps);
}

static struct ucxDevices devices;
static pthread_once_t devicesOnce = PTHREAD_ONCE_INIT;
static void scanDevicesOnce(void) { scanDevices(&devices); }

static int askedFor(void);

/* Usable where UCX has a network device, and worth a context and a thread per communicator
 * only where asked for or where that device is faster than the sockets the tcp transport
 * drives itself. */
static int ucxQuery(char *why, size_t len) {
  pthread_once(&devicesOnce, scanDevicesOnce);
  if (!devices.net) {
    snprintf(why, len, "UCX (libucp %s) finds no network device (ucx_info -d lists what it sees)",
             ucp_get_version_string());
    return 0;
  }
  if (!devices.fast && !askedFor()) {
    snprintf(why, len, "UCX (libucp %s) has only TCP sockets here, which the tcp transport "
             "drives itself (WEFT_TRANSPORTS=ucx uses it anyway)", ucp_get_version_string());
    return 0;
  }
  return 1;
}

/* ---- Parameters ---- */

/* Whether WEFT_TRANSPORTS asks for this transport by name (an exclusion list does not). */
static int askedFor(void) {
  const char *list = weftParamTransports();
  if (*list == '\0' || *list == '^') return 0;
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ",");
    if (n == 3 && strncasecmp(p, "ucx", 3) == 0) return 1;
    p += n + (p[n] == ',');
  }
  return 0;
}

/* The link rate of an RDMA port as the kernel reports it ("100 Gb/sec (4X EDR)"), in GB/s, or
 * 0 when unknown. UCX names such devices "mlx5_0:1" (device, port). */
static double rdmaPortGBs(const char *dev) {
  char name[UCT_DEVICE_NAME_MAX], path[256];
  snprintf(name, sizeof name, "%s", dev);
  char *colon = strchr(name, ':');
  if (colon == NULL) return 0;
  *colon = '\0';
  snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%s/rate", name, colon + 1);
  FILE *f = fopen(path, "r");
  double gbits = 0;
  if (f != NULL) {
    if (fscanf(f, "%lf", &gbits) != 1) gbits = 0;
    fclose(f);
  }
  return gbits / 8;
}

/* The tuner's figures: the parameters where set, else the fast device's port rate, else what
 * the TCP transport assumes (UCX then runs over the same sockets). */
static struct weftLinkCaps ucxCaps(void) {
  struct weftLinkCaps caps = {.latencyUs = strtod(weftParamTcpLatUs(), NULL),
                              .bandwidthGBs = strtod(weftParamTcpBwGbps(), NULL)};
  if (devices.fast) {
    double gbs = rdmaPortGBs(devices.fastDev);
    caps.latencyUs = 3;
    if (gbs > 0) caps.bandwidthGBs = gbs;
  }
  double bw = strtod(weftParamUcxBwGbps(), NULL), lat = strtod(weftParamUcxLatUs(), NULL);
  if (bw > 0) caps.bandwidthGBs = bw;
  if (lat > 0) caps.latencyUs = lat;
  return caps;
}

/* ---- The progress thread ---- */

static void *progressMain(void *arg) {
  struct ucxState *s = arg;
  while (!atomic_load(&s->stop)) {
    pthread_mutex_lock(&s->progressLock);
    while (ucp_worker_progress(s->worker) != 0) {
    }
    pthread_mutex_unlock(&s->progressLock);
    weftUcxReap(s, 0);
    ucs_status_t st = ucp_worker_arm(s->worker);
    if (st == UCS_ERR_BUSY) continue; /* events came in between: progress again */
    struct pollfd fds[2] = {{.fd = s->efd, .events = POLLIN}, {.fd = s->wakeFd, .events = POLLIN}};
    /* A worker that cannot be armed is polled every millisecond instead. */
    poll(fds, 2, st == UCS_OK ? 100 : 1);
    uint64_t drained;
    if (fds[1].revents & POLLIN) (void)!read(s->wakeFd, &drained, sizeof drained);
  }
  return NULL;
}

static weftResult_t startThread(struct ucxState *s) {
  if (ucp_worker_get_efd(s->worker, &s->efd) != UCS_OK)
    return weftSetError(weftSystemError, "ucx: the worker has no event descriptor");
  s->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wakeFd < 0) return weftSetSysError(errno, "ucx: eventfd");
  int err = pthread_create(&s->thread, NULL, progressMain, s);
  if (err != 0) return weftSetSysError(err, "ucx: starting the progress thread");
  s->threadStarted = 1;
  return weftSuccess;
}

static void stopThread(struct ucxState *s) {
  if (s->threadStarted) {
    atomic_store(&s->stop, 1);
    uint64_t one = 1;
    (void)!write(s->wakeFd, &one, sizeof one);
    pthread_join(s->thread, NULL);
    s->threadStarted = 0;
  }
  if (s->wakeFd >= 0) close(s->wakeFd);
  s->wakeFd = -1;
}

/* ---- Per-communicator state ---- */

static weftResult_t openWorker(struct ucxState *s) {
  ucp_config_t *cfg;
  ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
  if (st != UCS_OK) return weftSetError(weftSystemError, "ucx: reading UCX's configuration: %s", ucs_status_string(st));
  ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP};
  st = ucp_init(&p, cfg, &s->context);
  ucp_config_release(cfg);
  if (st != UCS_OK) {
    s->context = NULL;
    return weftSetError(weftSystemError, "ucx: ucp_init: %s", ucs_status_string(st));
  }
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_MULTI};
  st = ucp_worker_create(s->context, &wp, &s->worker);
  if (st != UCS_OK) {
    s->worker = NULL;
    return weftSetError(weftSystemError, "ucx: ucp_worker_create: %s", ucs_status_string(st));
  }
  return weftSuccess;
}

/* The worker's address over network devices only (what a rank of another host can reach),
 * which the blobs carry. */
static weftResult_t readAddress(struct ucxState *s) {
  ucp_worker_attr_t a = {.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
                         .address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY};
  ucs_status_t st = ucp_worker_query(s->worker, &a);
  if (st != UCS_OK) return weftSetError(weftSystemError, "ucx: ucp_worker_query: %s", ucs_status_string(st));
  size_t len = a.address_length;
  if (len <= UCX_ADDR_MAX_BYTES) memcpy(s->addr, a.address, len);
  ucp_worker_release_address(s->worker, a.address);
  if (len > UCX_ADDR_MAX_BYTES)
    return weftSetError(weftInvalidUsage,
                        "ucx: the worker's address is %zu bytes, more than the %d a connection blob "
                        "holds: narrow UCX's devices (UCX_NET_DEVICES, UCX_TLS)",
                        len, UCX_ADDR_MAX_BYTES);
  s->addrLen = len;
  return weftSuccess;
}

static weftResult_t ucxFinalize(void *state);

static weftResult_t ucxInit(struct weftComm *comm, void **state) {
  pthread_once(&devicesOnce, scanDevicesOnce);
  struct ucxState *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "ucx: out of memory");
  s->rank = comm->rank;
  s->comm = comm;
  s->shape = (struct ucxShape){.slotBytes = (uint64_t)weftParamUcxSlotBytes(),
                               .nslots = (uint32_t)weftParamUcxSlots()};
  s->asked = askedFor();
  s->fastNet = devices.fast;
  s->caps = ucxCaps();
  s->efd = s->wakeFd = -1;
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->progressLock, NULL);
  weftResult_t rc = openWorker(s);
  if (rc == weftSuccess) rc = readAddress(s);
  if (rc == weftSuccess) rc = startThread(s);
  if (rc != weftSuccess) {
    ucxFinalize(s);
    return rc;
  }
  INFO(WEFT_INIT, "ucx: libucp %s, %s%s%s, %.2f us, %.1f GB/s, links %s", ucp_get_version_string(),
       devices.fast ? devices.fastTl : "tcp", devices.fast ? " on " : "",
       devices.fast ? devices.fastDev : "", s->caps.latencyUs, s->caps.bandwidthGBs,
       s->asked ? "every pair (WEFT_TRANSPORTS)" : s->fastNet ? "other hosts" : "none unless asked");
  *state = s;
  return weftSuccess;
}

static void drained(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info, void *user) {
  (void)request, (void)status, (void)info;
  *(int *)user = 1;
}

/* Messages of links closed before they were received (a peer's last credits, slots it sent
 * to a receiver that left) would stay in UCX's unexpected queue, which it complains about
 * when the worker goes: each is received into a scratch buffer and dropped. */
static void drainUnexpected(struct ucxState *s) {
  for (int n = 0; n < 100000; n++) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = ucp_tag_probe_nb(s->worker, 0, 0, 1, &info);
    if (msg == NULL) return;
    void *buf = malloc(info.length > 0 ? info.length : 1);
    if (buf == NULL) return;
    int done = 0;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                             .cb.recv = drained,
                             .user_data = &done};
    ucs_status_ptr_t req = ucp_tag_msg_recv_nbx(s->worker, buf, info.length, msg, &p);
    if (!UCS_PTR_IS_ERR(req) && req != NULL) {
      int64_t until = weftNowMs() + 100;
      while (!done && weftNowMs() < until) ucp_worker_progress(s->worker);
      if (!done) ucp_request_cancel(s->worker, req);
      ucp_request_free(req);
    }
    free(buf);
  }
}

/* Stops the thread, waits up to a second for UCX to finish with the closed links (their
 * close messages and flushes), then cancels what is left. */
static weftResult_t ucxFinalize(void *state) {
  struct ucxState *s = state;
  if (s == NULL) return weftSuccess;
  stopThread(s);
  if (s->worker != NULL) {
    int64_t until = weftNowMs() + 1000;
    while (weftUcxReap(s, 0) > 0 && weftNowMs() < until) ucp_worker_progress(s->worker);
    weftUcxReap(s, 1);
    for (int i = 0; i < 100 && weftUcxReap(s, 0) > 0; i++) ucp_worker_progress(s->worker);
    drainUnexpected(s);
    ucp_worker_destroy(s->worker);
  }
  weftUcxFreeClosing(s);
  if (s->context != NULL) ucp_cleanup(s->context);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->progressLock);
  free(s);
  return weftSuccess;
}

static weftResult_t ucxCanConnect(void *state, const struct weftPeerInfo *me,
                                  const struct weftPeerInfo *peer, int *ok,
                                  struct weftLinkCaps *caps) {
  struct ucxState *s = state;
  *ok = s->asked || (s->fastNet && me->hostHash != peer->hostHash);
  *caps = s->caps;
  return weftSuccess;
}

/* UCX's version and the choices of its devices and transports it was given. */
static void ucxDescribe(void *state, int peer, char *buf, size_t len) {
  (void)state, (void)peer;
  const char *tls = getenv("UCX_TLS"), *devs = getenv("UCX_NET_DEVICES");
  snprintf(buf, len, "UCX %s, UCX_TLS=%s, UCX_NET_DEVICES=%s", ucp_get_version_string(),
           tls != NULL ? tls : "(all)", devs != NULL ? devs : "(all)");
}

const struct weftTransportOps weftTransportUcx = {
    .size = sizeof(struct weftTransportOps),
    .name = "ucx",
    .query = ucxQuery,
    .init = ucxInit,
    .canConnect = ucxCanConnect,
    .setup = weftUcxSetup,
    .connect = weftUcxConnect,
    .connected = NULL,
    .sendSlot = weftUcxSendSlot,
    .sendPost = weftUcxSendPost,
    .recvSlot = weftUcxRecvSlot,
    .recvDone = weftUcxRecvDone,
    .progress = NULL,
    .close = weftUcxClose,
    .finalize = ucxFinalize,
    .describe = ucxDescribe,
};
